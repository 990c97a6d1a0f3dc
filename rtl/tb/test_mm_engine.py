"""cocotb testbench of rtl/unifl_mm_engine.v (one engine) and rtl/unifl_mm_cluster.v (N engines):
every result checked bit-exactly against the Python reference ``unifl.core.montgomery.mont_mul_ref``
(a·b·2^(-64·D) mod m), and the timing measured: latency of a lone MontMult and the initiation
interval of back-to-back ones.

Driven by tests/backends/fpga/test_rtl_engine.py through cocotb_tools.runner; parameters arrive in the environment:
UNIFL_TB_BITS (modulus size), UNIFL_TB_VECTORS (random vectors for the main modulus), UNIFL_TB_MODULI
(how many of the four moduli: all ones, 2^(bits-1)+1, random, dense low word -- the random one is
always among them), UNIFL_TB_RESULT (a JSON file the timings are written to), and for a gate-level
netlist, which has no parameters left, UNIFL_TB_W and UNIFL_TB_D.  Vectors come from ``secrets``; a mismatch prints the
operands.  Signals are sampled at falling edges and driven right after rising edges.
"""

from __future__ import annotations

import json
import os
import secrets

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from unifl.core.montgomery import mont_context, mont_mul_ref

from mm_vectors import edge_pairs, moduli, random_modulus

CLK_NS = 10


class Bench:
    """Drives the cfg / in streams and collects the out stream of an engine or a cluster."""

    def __init__(self, dut) -> None:
        self.dut = dut
        # a synthesized netlist has no parameters left: the runner passes them in the environment
        self.w = int(os.environ["UNIFL_TB_W"]) if "UNIFL_TB_W" in os.environ else int(dut.W.value)
        self.d = int(os.environ["UNIFL_TB_D"]) if "UNIFL_TB_D" in os.environ else int(dut.D.value)
        self.mask = (1 << self.w) - 1
        self.cycle = 0
        self.accepted: list[int] = []      # cycle at which each operand's last beat was taken
        self.first_out: list[int] = []     # cycle at which each result's first beat was valid
        self.results: list[int] = []
        self.out_stall = 0.0               # probability that out_ready is low in a cycle
        self.in_gap = 0.0                  # probability that in_valid is withheld in a cycle

    async def start(self) -> None:
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        cocotb.start_soon(self._count())
        dut.rst_n.value = 0
        dut.cfg_valid.value = 0
        dut.in_valid.value = 0
        dut.out_ready.value = 0
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst_n.value = 1
        await RisingEdge(dut.clk)

    async def _count(self) -> None:
        while True:
            await RisingEdge(self.dut.clk)
            self.cycle += 1

    async def configure(self, m: int) -> None:
        dut = self.dut
        n0 = mont_context(m).n0inv & self.mask
        beats = [(m >> (self.w * k)) & self.mask for k in range(self.d)] + [n0]
        for word in beats:
            dut.cfg_data.value = word
            dut.cfg_valid.value = 1
            while True:
                await FallingEdge(dut.clk)
                if int(dut.cfg_ready.value):
                    break
            await RisingEdge(dut.clk)
        dut.cfg_valid.value = 0

    async def send(self, pairs: list[tuple[int, int]]) -> None:
        dut = self.dut
        for a, b in pairs:
            for k in range(self.d):
                while self.in_gap and secrets.randbelow(1000) < self.in_gap * 1000:
                    dut.in_valid.value = 0
                    await RisingEdge(dut.clk)
                dut.in_a.value = (a >> (self.w * k)) & self.mask
                dut.in_b.value = (b >> (self.w * k)) & self.mask
                dut.in_valid.value = 1
                while True:
                    await FallingEdge(dut.clk)
                    if int(dut.in_ready.value):
                        break
                await RisingEdge(dut.clk)
                if k == self.d - 1:
                    self.accepted.append(self.cycle)
        dut.in_valid.value = 0

    async def collect(self, count: int) -> list[int]:
        """Take ``count`` results; checks that data and out_last hold while the consumer stalls."""
        dut = self.dut
        out: list[int] = []
        for _ in range(count):
            z = 0
            seen = False
            for k in range(self.d):
                while True:
                    stall = self.out_stall and secrets.randbelow(1000) < self.out_stall * 1000
                    dut.out_ready.value = 0 if stall else 1
                    await FallingEdge(dut.clk)
                    if int(dut.out_valid.value):
                        if not seen:
                            self.first_out.append(self.cycle)
                            seen = True
                        word = dut.out_z.value.to_unsigned()
                        last = int(dut.out_last.value)
                        assert last == (k == self.d - 1), f"out_last={last} on word {k}"
                        if stall:
                            await RisingEdge(dut.clk)
                            await FallingEdge(dut.clk)
                            assert int(dut.out_valid.value), "out_valid dropped while stalled"
                            assert dut.out_z.value.to_unsigned() == word, "out_z moved while stalled"
                            await RisingEdge(dut.clk)
                            continue
                        z |= word << (self.w * k)
                        await RisingEdge(dut.clk)
                        break
                    await RisingEdge(dut.clk)
            out.append(z)
        dut.out_ready.value = 0
        self.results += out
        return out

    async def run(self, m: int, pairs: list[tuple[int, int]]) -> None:
        """Configure m, stream every pair in, check every result against the reference."""
        await self.configure(m)
        sender = cocotb.start_soon(self.send(pairs))
        got = await self.collect(len(pairs))
        await sender
        for (a, b), z in zip(pairs, got):
            want = mont_mul_ref(a, b, m)
            assert z == want, f"MontMult mismatch: m={m:#x} a={a:#x} b={b:#x} got {z:#x} want {want:#x}"


@cocotb.test()
async def vectors_back_to_back(dut):
    """Edge and random vectors for several moduli of UNIFL_TB_BITS bits, streamed back to back,
    bit-exact; the latency of a lone MontMult and the steady-state interval measured."""
    bits = int(os.environ.get("UNIFL_TB_BITS", "256"))
    nvec = int(os.environ.get("UNIFL_TB_VECTORS", "40"))
    tb = Bench(dut)
    assert tb.w * tb.d == 64 * (-(-bits // 64)) and 64 % tb.w == 0, (tb.w, tb.d, bits)
    await tb.start()
    # a lone MontMult: latency from its last operand beat to its first result beat
    m = random_modulus(bits)
    await tb.run(m, [(secrets.randbelow(m), secrets.randbelow(m))])
    latency = tb.first_out[0] - tb.accepted[0]
    checked = 1
    mods = moduli(bits)[:max(1, int(os.environ.get("UNIFL_TB_MODULI", "4")))]
    for mi, m in enumerate(mods):
        tb.accepted.clear()
        tb.first_out.clear()
        pairs = edge_pairs(m) + [(secrets.randbelow(m), secrets.randbelow(m))
                                 for _ in range(nvec if mi == 0 else max(1, nvec // 4))]
        await tb.run(m, pairs)
        checked += len(pairs)
    # steady state of the last (longest) stream: interval between successive results
    steady = tb.first_out[2:]
    gaps = sorted({b - a for a, b in zip(steady, steady[1:])})
    mean = (steady[-1] - steady[0]) / (len(steady) - 1)
    dut._log.info("bits=%d D=%d: %d vectors bit-exact; latency %d cycles, interval %s",
                  bits, tb.d, checked, latency, gaps)
    out = os.environ.get("UNIFL_TB_RESULT")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"bits": bits, "W": tb.w, "D": tb.d, "vectors": checked,
                       "latency": latency, "interval": gaps, "mean_interval": mean}, fh)


@cocotb.test()
async def stalls_and_gaps(dut):
    """A producer with random gaps and a consumer that stalls at random: results stay valid and
    stable until taken, come in input order, and are bit-exact; then a modulus change."""
    bits = int(os.environ.get("UNIFL_TB_BITS", "256"))
    tb = Bench(dut)
    await tb.start()
    tb.out_stall, tb.in_gap = 0.3, 0.2
    for _ in range(2):
        m = random_modulus(bits)
        pairs = edge_pairs(m)[:4] + [(secrets.randbelow(m), secrets.randbelow(m)) for _ in range(6)]
        await tb.run(m, pairs)


@cocotb.test()
async def reset_and_cfg_rules(dut):
    """During reset and before a modulus is loaded no operand is accepted; while operands are
    buffered no modulus is accepted; idle says when the engine is empty."""
    bits = int(os.environ.get("UNIFL_TB_BITS", "256"))
    tb = Bench(dut)
    cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
    dut.rst_n.value = 0
    dut.cfg_valid.value = 0
    dut.in_valid.value = 1
    dut.out_ready.value = 0
    for _ in range(4):
        await FallingEdge(dut.clk)
        assert not int(dut.in_ready.value) and not int(dut.cfg_ready.value)
        assert not int(dut.out_valid.value)
    await RisingEdge(dut.clk)
    dut.rst_n.value = 1
    for _ in range(5):
        await FallingEdge(dut.clk)
        assert not int(dut.in_ready.value), "operand accepted before any modulus was loaded"
        assert int(dut.cfg_ready.value) and int(dut.idle.value)
    dut.in_valid.value = 0
    await RisingEdge(dut.clk)
    m = random_modulus(bits)
    await tb.configure(m)
    a, b = secrets.randbelow(m), secrets.randbelow(m)
    sender = cocotb.start_soon(tb.send([(a, b)]))
    await sender
    await FallingEdge(dut.clk)
    assert not int(dut.cfg_ready.value), "modulus accepted while an operand is in flight"
    assert not int(dut.idle.value)
    (z,) = await tb.collect(1)
    assert z == mont_mul_ref(a, b, m)
    for _ in range(3):
        await FallingEdge(dut.clk)
    assert int(dut.idle.value) and int(dut.cfg_ready.value)

"""cocotb testbench of rtl/unifl_montmul.v: every result checked bit-exactly against the Python
reference ``unifl.base_op.mont_mul_ref`` (a·b·2^(-64·D) mod m), cycles per MontMult reported.

Driven by tests/test_fpga_rtl.py through cocotb_tools.runner; parameters arrive in the environment:
UNIFL_TB_BITS (modulus size), UNIFL_TB_VECTORS (random vectors per modulus), UNIFL_TB_RESULT (a JSON
file the cycle counts are written to).  Vectors come from ``secrets``; a mismatch prints the operands.
"""

from __future__ import annotations

import json
import os
import secrets
import sys

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from unifl.core.montgomery import mont_context, mont_mul_ref  # noqa: E402

CLK_NS = 10


def _moduli(bits: int) -> list[int]:
    """Edge moduli (all ones, 2^(bits-1)+1, a top word of 1) and a random one, all odd, full size."""
    return [
        (1 << bits) - 1,
        (1 << (bits - 1)) + 1,
        (1 << (bits - 1)) | secrets.randbits(bits - 1) | 1,
        (1 << (bits - 1)) | ((1 << 64) - 1) | 1,          # dense low word, sparse middle
    ]


def _edge_pairs(m: int) -> list[tuple[int, int]]:
    return [(0, 0), (0, m - 1), (1, 1), (1, m - 1), (m - 1, m - 1), (m - 2, m - 1),
            ((1 << 64) - 1, m - 1), (m >> 1, m - 1), (m - 1, 2)]


async def _reset(dut) -> None:
    dut.rst_n.value = 0
    dut.cfg_valid.value = 0
    dut.in_valid.value = 0
    dut.out_ready.value = 0
    for _ in range(3):
        await RisingEdge(dut.clk)
    dut.rst_n.value = 1
    await RisingEdge(dut.clk)


async def _configure(dut, m: int) -> None:
    ctx = mont_context(m)
    w = int(dut.W.value)
    dut.cfg_m.value = m
    dut.cfg_n0.value = ctx.n0inv & ((1 << w) - 1)   # -m^-1 mod 2^W (n0inv is mod 2^64)
    dut.cfg_valid.value = 1
    await RisingEdge(dut.clk)
    dut.cfg_valid.value = 0


async def _send(dut, a: int, b: int) -> float:
    """Offer one operand pair; returns the time of the rising edge that accepted it.  Signals are
    sampled at falling edges (stable between rising edges), driven right after rising edges."""
    dut.in_a.value = a
    dut.in_b.value = b
    dut.in_valid.value = 1
    while True:
        await FallingEdge(dut.clk)
        if int(dut.in_ready.value):
            break
    await RisingEdge(dut.clk)
    dut.in_valid.value = 0
    return get_sim_time(unit="ns")


async def _wait_result(dut) -> tuple[int, float]:
    """Wait for out_valid; returns (out_z, time of the rising edge that raised out_valid)."""
    while True:
        await FallingEdge(dut.clk)
        if int(dut.out_valid.value):
            return dut.out_z.value.to_unsigned(), get_sim_time(unit="ns") - CLK_NS / 2


async def _one(dut, a: int, b: int) -> tuple[int, int]:
    """One MontMult; returns (z, cycles from the input handshake to out_valid)."""
    t0 = await _send(dut, a, b)
    z, t1 = await _wait_result(dut)
    dut.out_ready.value = 1
    await RisingEdge(dut.clk)           # the result is taken on this edge
    dut.out_ready.value = 0
    return z, round((t1 - t0) / CLK_NS)


@cocotb.test()
async def montmul_vectors(dut):
    """Random and edge vectors for several moduli of UNIFL_TB_BITS bits, bit-exact."""
    bits = int(os.environ.get("UNIFL_TB_BITS", "256"))
    nvec = int(os.environ.get("UNIFL_TB_VECTORS", "50"))
    W, D = int(dut.W.value), int(dut.D.value)
    # the reference's R is 2^(64·ceil(bits/64)); the engine's is 2^(W·D): they must agree
    assert W * D == 64 * (-(-bits // 64)) and 64 % W == 0, (W, D, bits)
    cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
    await _reset(dut)
    cycles, checked = set(), 0
    mods = _moduli(bits)
    for mi, m in enumerate(mods):
        await _configure(dut, m)
        pairs = _edge_pairs(m) + [(secrets.randbelow(m), secrets.randbelow(m))
                                  for _ in range(nvec if mi == 2 else max(1, nvec // 4))]
        for a, b in pairs:
            z, c = await _one(dut, a, b)
            want = mont_mul_ref(a, b, m)
            assert z == want, f"MontMult mismatch: m={m:#x} a={a:#x} b={b:#x} got {z:#x} want {want:#x}"
            cycles.add(c)
            checked += 1
    dut._log.info("bits=%d D=%d: %d vectors bit-exact, cycles per MontMult %s", bits, D, checked,
                  sorted(cycles))
    out = os.environ.get("UNIFL_TB_RESULT")
    if out:
        with open(out, "w", encoding="utf-8") as fh:
            json.dump({"bits": bits, "W": W, "D": D, "vectors": checked,
                       "cycles": sorted(cycles)}, fh)


@cocotb.test()
async def montmul_stream_backpressure(dut):
    """A consumer that stalls at random: the result stays valid and stable until taken, no new
    operand is accepted meanwhile, and every result is bit-exact."""
    bits = int(os.environ.get("UNIFL_TB_BITS", "256"))
    cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
    await _reset(dut)
    m = (1 << (bits - 1)) | secrets.randbits(bits - 1) | 1
    await _configure(dut, m)
    for _ in range(4):
        a, b = secrets.randbelow(m), secrets.randbelow(m)
        await _send(dut, a, b)
        z, _ = await _wait_result(dut)
        for _ in range(1 + secrets.randbelow(4)):
            # offer a second operand while the result waits: it must not be taken
            dut.in_valid.value = 1
            await FallingEdge(dut.clk)
            assert int(dut.out_valid.value), "out_valid dropped before the result was taken"
            assert not int(dut.in_ready.value), "operand accepted while a result is pending"
            assert dut.out_z.value.to_unsigned() == z, "out_z changed while stalled"
        dut.in_valid.value = 0
        assert z == mont_mul_ref(a, b, m), f"m={m:#x} a={a:#x} b={b:#x}"
        await RisingEdge(dut.clk)
        dut.out_ready.value = 1
        await RisingEdge(dut.clk)
        dut.out_ready.value = 0

"""cocotb testbench of rtl/ocl_lib/unifl_mm1024_ocl.v, the Intel FPGA OpenCL RTL-library module
(1024-bit MontMult over a cluster of N word-serial engines), in both variants.

Intel's port directions: ivalid/oready is the call side (oready is the module's OUTPUT), ovalid/
iready the result side (iready is the module's INPUT).  A transfer happens on a rising edge with
valid and ready both high.  Signals are sampled at falling edges (stable until the next rising
edge) and driven right after rising edges, so a sample with both high is a transfer at the next
rising edge; cycle numbers below count falling edges.

Driven by tests/backends/fpga/test_rtl_intel.py; parameters in the environment:
UNIFL_TB_N (engines), UNIFL_TB_FIXED (1 = fixed-latency variant), UNIFL_TB_VECTORS (random vectors
for the main modulus), UNIFL_TB_RESULT (a JSON file each test merges its measurements into).
Every result is checked bit-exactly against unifl.core.montgomery.mont_mul_ref; vectors come from
``secrets``; a mismatch prints the operands.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from typing import Callable

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from unifl.core.montgomery import mont_context, mont_mul_ref

from mm_vectors import edge_pairs, moduli, random_modulus, record

CLK_NS = 10
BITS = 1024
D = 16                      # 64-bit words per operand
RESET_CYCLES = 50           # Intel: the kernel reset stays asserted at least 50 cycles
INTEL_RESET_BOUND = 40      # Intel: a stallable module drops oready/ovalid within 40 cycles


def _bit(sig) -> int:
    """A 1-bit signal as 0/1; X or Z is an error (a control output must never be unknown)."""
    v = sig.value
    assert v.is_resolvable, f"{sig._name} is {v} (not 0/1)"
    return int(v)


@dataclass
class Output:
    valid_cycle: int            # first sample with ovalid high for this result
    taken_cycle: int            # sample of the transfer
    value: int


@dataclass
class Harness:
    """Upstream driver, downstream driver and a monitor that checks the protocol every cycle."""

    dut: object
    cycle: int = 0
    accepted: list[int] = field(default_factory=list)       # cycles of call transfers
    outputs: list[Output] = field(default_factory=list)
    ready: Callable[[], int] = lambda: 1                    # downstream iready per cycle
    reset_start: int | None = None                           # first sample of the current reset
    high_in_reset: int = 0      # most samples into a reset that oready or ovalid was still high

    async def start(self) -> None:
        dut = self.dut
        dut.ivalid.value = 0
        dut.iready.value = 0
        dut.resetn.value = 0
        dut.a.value = 0
        dut.b.value = 0
        dut.m.value = 0
        dut.n0.value = 0
        cocotb.start_soon(Clock(dut.clock, CLK_NS, unit="ns").start())
        cocotb.start_soon(self._monitor())
        cocotb.start_soon(self._downstream())
        await self.reset()

    async def reset(self, cycles: int = RESET_CYCLES) -> None:
        """Hold resetn low for `cycles` rising edges; the monitor measures how long oready/ovalid
        stay high into the reset and fails past Intel's 40 cycles."""
        self.dut.resetn.value = 0
        for _ in range(cycles):
            await RisingEdge(self.dut.clock)
        self.dut.resetn.value = 1

    async def _downstream(self) -> None:
        while True:
            await RisingEdge(self.dut.clock)
            self.dut.iready.value = self.ready()

    async def _monitor(self) -> None:
        dut = self.dut
        pending = None          # value of a result offered and not yet taken
        valid_since = None
        while True:
            await FallingEdge(dut.clock)
            self.cycle += 1
            if not int(dut.resetn.value):
                if self.reset_start is None:
                    self.reset_start = self.cycle
                if _bit(dut.oready) or _bit(dut.ovalid):
                    into = self.cycle - self.reset_start + 1
                    self.high_in_reset = max(self.high_in_reset, into)
                    assert into <= INTEL_RESET_BOUND, \
                        f"oready/ovalid still high {into} cycles into reset (cycle {self.cycle})"
                pending = valid_since = None
                continue
            self.reset_start = None
            iv, orr = int(dut.ivalid.value), _bit(dut.oready)
            ov, ir = _bit(dut.ovalid), int(dut.iready.value)
            if iv and orr:
                self.accepted.append(self.cycle)
            if ov:
                val = dut.result.value.to_unsigned()
                if valid_since is None:
                    valid_since = self.cycle
                if pending is not None:
                    assert val == pending, f"result changed while stalled (cycle {self.cycle})"
                if ir:
                    self.outputs.append(Output(valid_since, self.cycle, val))
                    pending = valid_since = None
                else:
                    pending = val
            else:
                assert pending is None, f"ovalid dropped before the result was taken ({self.cycle})"
                valid_since = None

    async def send(self, a: int, b: int, m: int, n0: int | None = None) -> int:
        """Offer one call and hold it (Intel's rule) until the transfer; returns its cycle."""
        dut = self.dut
        dut.a.value, dut.b.value, dut.m.value = a, b, m
        dut.n0.value = mont_context(m).n0inv if n0 is None else n0
        dut.ivalid.value = 1
        while True:
            await FallingEdge(dut.clock)
            if _bit(dut.oready):
                break
        cyc = self.cycle
        await RisingEdge(dut.clock)
        dut.ivalid.value = 0
        return cyc

    async def stream(self, calls: list[tuple[int, int, int]], gap: Callable[[], int] = lambda: 0
                     ) -> list[int]:
        """Send calls back to back (optionally `gap()` idle cycles before each)."""
        cycles = []
        for a, b, m in calls:
            for _ in range(gap()):
                await RisingEdge(self.dut.clock)
            cycles.append(await self.send(a, b, m))
        return cycles

    async def wait_outputs(self, count: int, limit: int) -> None:
        for _ in range(limit):
            if len(self.outputs) >= count:
                return
            await RisingEdge(self.dut.clock)
        raise AssertionError(f"only {len(self.outputs)} of {count} results within {limit} cycles")

    def check(self, calls: list[tuple[int, int, int]], first: int = 0) -> list[int]:
        """Results `first`.. are the calls in order, bit-exact; returns their latencies."""
        outs = self.outputs[first:first + len(calls)]
        assert len(outs) == len(calls), (len(outs), len(calls))
        lat = []
        for k, ((a, b, m), out) in enumerate(zip(calls, outs)):
            want = mont_mul_ref(a, b, m)
            assert out.value == want, (f"call {k}: m={m:#x} a={a:#x} b={b:#x} "
                                       f"got {out.value:#x} want {want:#x}")
            lat.append(out.valid_cycle - self.accepted[first + k])
        return lat


def _bursty_stalls() -> Callable[[], int]:
    """Downstream iready: mostly high, with stalls of 1..3D cycles starting at random, long enough
    for finished results to queue up behind the one held at the output."""
    left = [0]

    def ready() -> int:
        if left[0] == 0 and secrets.randbelow(12) == 0:
            left[0] = 1 + secrets.randbelow(3 * D)
        if left[0]:
            left[0] -= 1
            return 0
        return 1
    return ready


def _variant(dut) -> tuple[int, bool]:
    return int(os.environ.get("UNIFL_TB_N", "4")), os.environ.get("UNIFL_TB_FIXED", "0") == "1"


def _max_call_cycles(n: int) -> int:
    """Generous bound on the cycles one more result can take (reload + compute + unload)."""
    return 4 * D * max(D, 17) + 8 * D + 200


@cocotb.test()
async def ocl_vectors(dut):
    """Edge and random vectors for four moduli (three modulus changes between calls), random
    gaps upstream and random stalls downstream: bit-exact, in call order, stable while stalled."""
    n, fixed = _variant(dut)
    h = Harness(dut, ready=_bursty_stalls())
    await h.start()
    nvec = int(os.environ.get("UNIFL_TB_VECTORS", "4"))
    calls = []
    for mi, m in enumerate(moduli(BITS)):
        pairs = edge_pairs(m) + [(secrets.randbelow(m), secrets.randbelow(m))
                                  for _ in range(nvec if mi == 0 else max(1, nvec // 6))]
        calls += [(a, b, m) for a, b in pairs]
    sender = cocotb.start_soon(h.stream(calls, gap=lambda: secrets.randbelow(3)))
    await h.wait_outputs(len(calls), len(calls) * _max_call_cycles(n))
    await sender
    h.check(calls)
    dut._log.info("N=%d fixed=%s: %d calls bit-exact over 4 moduli, in order", n, fixed, len(calls))
    record("vectors", len(calls))


@cocotb.test()
async def ocl_reset_rule(dut):
    """oready/ovalid low during reset (measured at every sample by the monitor), low after it until
    the first call is streamed / its result assembled, and a reset in the middle of work drops
    every call in flight: no stale result appears, and the next call (same modulus as before the
    reset, which the engines no longer hold) is bit-exact."""
    n, fixed = _variant(dut)
    dut.ivalid.value = 1            # an eager upstream offering a call through the whole reset
    h = Harness(dut)
    m = random_modulus(BITS)
    a, b = secrets.randbelow(m), secrets.randbelow(m)
    dut.a.value, dut.b.value, dut.m.value = a, b, m
    dut.n0.value = mont_context(m).n0inv
    cocotb.start_soon(Clock(dut.clock, CLK_NS, unit="ns").start())
    cocotb.start_soon(h._monitor())
    cocotb.start_soon(h._downstream())
    dut.resetn.value = 0
    dut.iready.value = 1
    await h.reset()
    release = h.cycle
    # after the release: oready stays low until the modulus (D+1 beats) and the operand (D beats)
    # have gone, ovalid until the result exists -- checked at every cycle
    first_oready = None
    for _ in range(_max_call_cycles(n)):
        await FallingEdge(dut.clock)
        if _bit(dut.oready):
            first_oready = h.cycle - release
            break
        assert _bit(dut.ovalid) == 0, "ovalid before any call was accepted"
    assert first_oready is not None, "the held call was never accepted after reset"
    await RisingEdge(dut.clock)
    dut.ivalid.value = 0
    await h.wait_outputs(1, _max_call_cycles(n))
    h.check([(a, b, m)])
    dut._log.info("first oready %d cycles after reset release (D+1 cfg + D operand beats + 1)",
                  first_oready)
    assert first_oready <= 2 * D + 4, first_oready

    # a reset in the middle of work: calls inside the engines, a result held by a stalled
    # downstream; nothing of it may come out afterwards
    h.ready = lambda: 0
    busy = [(secrets.randbelow(m), secrets.randbelow(m), m) for _ in range(n + 2)]
    sender = cocotb.start_soon(h.stream(busy))
    for _ in range(D * max(D, 17) + 6 * D):
        await RisingEdge(dut.clock)
    assert int(dut.ovalid.value) == 1, "expected a result held by the stalled downstream"
    sender.cancel()
    dut.ivalid.value = 0
    n_before = len(h.outputs)
    fall = h.cycle
    await h.reset()
    h.ready = lambda: 1
    h.accepted = h.accepted[:1]     # calls cut off by the reset have no result to pair with
    for _ in range(D * max(D, 17) + 4 * D):      # longer than any MontMult still under way
        await FallingEdge(dut.clock)
        assert _bit(dut.ovalid) == 0, "a result from before the reset came out after it"
    assert len(h.outputs) == n_before
    a2, b2 = secrets.randbelow(m), secrets.randbelow(m)
    await h.send(a2, b2, m)
    await h.wait_outputs(n_before + 1, _max_call_cycles(n))
    assert h.outputs[-1].value == mont_mul_ref(a2, b2, m), "first call after a mid-work reset"
    record("reset", {"first_oready_after_release": first_oready, "reset_cycles": RESET_CYCLES,
                      "mid_work_reset_at_cycle": fall,
                      "samples_high_into_reset": h.high_in_reset})


@cocotb.test()
async def ocl_modulus_alternation(dut):
    """Back-to-back calls alternating two moduli, then moduli differing from the loaded one only
    in the top word, only in word 0 (the comparison must cover every word): bit-exact, in order.
    The downstream never stalls, so the fixed-latency variant's latency must be one number."""
    n, fixed = _variant(dut)
    h = Harness(dut, ready=lambda: 1)
    await h.start()
    m1, m2 = random_modulus(BITS), random_modulus(BITS)
    m_top = m1 ^ (1 << (BITS - 3))          # differs in word 15 only
    m_low = m1 ^ (1 << 1)                   # differs in word 0 only (stays odd)
    seq = [m1, m2, m1, m_top, m1, m_low, m_low, m2]
    calls = [(secrets.randbelow(mm), secrets.randbelow(mm), mm) for mm in seq]
    t0 = h.cycle
    await h.stream(calls)
    await h.wait_outputs(len(calls), len(calls) * _max_call_cycles(n))
    lat = h.check(calls)
    alt_accept = [h.accepted[k + 1] - h.accepted[k] for k in range(3)]
    dut._log.info("alternating moduli: %s cycles between accepted calls; latencies %s",
                  alt_accept, sorted(set(lat)))
    if fixed:
        assert len(set(lat)) == 1, f"fixed-latency variant: latencies {sorted(set(lat))}"
    record("alternation", {"calls": len(calls), "accept_interval": sorted(set(alt_accept)),
                            "latencies": sorted(set(lat)), "cycles": h.cycle - t0})


@cocotb.test()
async def ocl_throughput(dut):
    """One modulus, an upstream that always has a call and a downstream that never stalls: calls
    accepted per 1000 cycles in steady state and latency; then the capacity (calls accepted before
    oready stops while the downstream stalls), drained and checked."""
    n, fixed = _variant(dut)
    h = Harness(dut, ready=lambda: 1)
    await h.start()
    m = random_modulus(BITS)
    ii_e = D * max(D, 17)
    # enough calls to fill every buffer (the fixed variant holds N calls, the stallable one at most
    # 4 per engine + 1) and then run 2 round-robin periods at the engines' rate, over which the rate
    # is taken (2N intervals)
    count = (n if fixed else 4 * n + 1) + 2 * n + 2
    calls = [(secrets.randbelow(m), secrets.randbelow(m), m) for _ in range(count)]
    await h.stream(calls)
    await h.wait_outputs(len(calls), _max_call_cycles(n) * 2)
    lat = h.check(calls)
    k1 = count - 1
    k0 = k1 - 2 * n
    per_1000 = 1000 * (k1 - k0) / (h.accepted[k1] - h.accepted[k0])
    steady = sorted({t - s for s, t in zip(h.accepted[k0:], h.accepted[k0 + 1:])})
    dut._log.info("N=%d fixed=%s: %.2f calls accepted per 1000 cycles (steady intervals %s), "
                  "latency %s cycles", n, fixed, per_1000, steady, sorted(set(lat)))
    if fixed:
        assert len(set(lat)) == 1, f"fixed-latency variant: latencies {sorted(set(lat))}"

    # capacity: the downstream stalls; offer calls until oready stays low for long
    h.ready = lambda: 0
    for _ in range(4):
        await RisingEdge(dut.clock)
    base_out = len(h.outputs)
    base_acc = len(h.accepted)
    extra = [(secrets.randbelow(m), secrets.randbelow(m), m) for _ in range(8 * n + 8)]
    dut.ivalid.value = 0
    taken = 0
    for a, b, mm in extra:
        dut.a.value, dut.b.value, dut.m.value = a, b, mm
        dut.n0.value = mont_context(mm).n0inv
        dut.ivalid.value = 1
        got = False
        # with every buffer full nothing moves: one engine period without oready is conclusive
        for _ in range(ii_e + 4 * D):
            await FallingEdge(dut.clock)
            if _bit(dut.oready):
                got = True
                break
        if not got:
            break
        await RisingEdge(dut.clock)
        taken += 1
    capacity = len(h.accepted) - base_acc
    assert taken == capacity
    h.ready = lambda: 1            # the refused call stays offered and must go through now
    await h.wait_outputs(base_out + capacity + 1, _max_call_cycles(n) * (capacity + 2))
    dut.ivalid.value = 0
    h.check(extra[:capacity + 1], first=base_out)
    dut._log.info("capacity (calls inside while the downstream stalls): %d", capacity)
    if fixed:
        assert capacity == n, f"fixed-latency variant admits N={n} calls, measured {capacity}"
    record("throughput", {"N": n, "fixed": fixed, "calls": count + capacity + 1,
                           "accepted_per_1000_cycles": per_1000,
                           "steady_intervals": steady,
                           "latencies": sorted(set(lat)), "capacity": capacity})

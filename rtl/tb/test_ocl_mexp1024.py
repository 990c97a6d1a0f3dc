"""cocotb testbench of rtl/ocl_lib/unifl_mexp1024_ocl.v, the Intel OpenCL RTL-library module of
``ulong16 unifl_mexp1024(ulong16 x, ulong16 e, ulong16 m, ulong16 r_mod, ulong n0, uint ebits)``.

The upstream plays the OpenCL pipeline: a call is offered with ivalid and held until oready; the
downstream stalls iready at random.  Every result is compared bit-exactly with x̄^e in the
Montgomery domain (``pow``); calls change their key context midway (the module reloads the unit);
results leave in call order.  UNIFL_TB_CALLS calls per context, UNIFL_TB_EBITS exponent bits.
"""

from __future__ import annotations

import os
import secrets

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from unifl.core.montgomery import mont_context

D, W = 16, 64
R = 1 << (D * W)


def expect(m: int, xbar: int, e: int) -> int:
    return pow(xbar * pow(R, -1, m) % m, e, m) * R % m


@cocotb.test(timeout_time=200, timeout_unit="ms")
async def calls_in_order(dut):
    """Calls over two key contexts with random downstream stalls: bit-exact, in call order."""
    cocotb.start_soon(Clock(dut.clock, 10, unit="ns").start())
    dut.resetn.value = 0
    dut.ivalid.value = 0
    dut.iready.value = 0
    for _ in range(5):
        await RisingEdge(dut.clock)
    assert not int(dut.oready.value) and not int(dut.ovalid.value)
    dut.resetn.value = 1
    ncalls = int(os.environ.get("UNIFL_TB_CALLS", "3"))
    ebits = int(os.environ.get("UNIFL_TB_EBITS", "8"))
    calls = []
    for _ in range(2):
        m = (1 << (D * W - 1)) | secrets.randbits(D * W - 1) | 1
        ctx = mont_context(m)
        xs = [0, R % m, m] + [secrets.randbelow(m) for _ in range(ncalls)]
        es = [secrets.randbits(ebits), 1, (1 << ebits) - 1] + [secrets.randbits(ebits)
                                                               for _ in range(ncalls)]
        calls += [(m, ctx.r_mod, ctx.n0inv, x, e) for x, e in zip(xs, es)]

    got: list[int] = []

    async def downstream() -> None:
        while len(got) < len(calls):
            dut.iready.value = int(secrets.randbelow(10) < 6)
            await FallingEdge(dut.clock)
            if int(dut.ovalid.value) and int(dut.iready.value):
                got.append(dut.result.value.to_unsigned())
            await RisingEdge(dut.clock)
        dut.iready.value = 0

    reader = cocotb.start_soon(downstream())
    for m, r_mod, n0, x, e in calls:
        dut.x.value, dut.e.value, dut.m.value = x, e, m
        dut.r_mod.value, dut.n0.value, dut.ebits.value = r_mod, n0, ebits
        dut.ivalid.value = 1
        while True:
            await FallingEdge(dut.clock)
            if int(dut.oready.value):
                break
        await RisingEdge(dut.clock)
        dut.ivalid.value = 0
        if secrets.randbelow(2):
            await RisingEdge(dut.clock)
    await reader
    for i, ((m, _r, _n, x, e), z) in enumerate(zip(calls, got)):
        assert z == expect(m, x, e), f"call {i}: m={m:#x} x={x:#x} e={e:#x} got {z:#x}"
    dut._log.info("unifl_mexp1024: %d calls over 2 key contexts bit-exact", len(calls))

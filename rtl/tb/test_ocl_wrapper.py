"""cocotb test of rtl/ocl_lib/unifl_mm1024_ocl.v: the OpenCL RTL-library port set (ivalid/iready,
ovalid/oready, modulus and n0' with every call) around the engine, bit-exact against the reference,
with the modulus changing from call to call as a stateless library function allows."""

from __future__ import annotations

import os
import secrets
import sys

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
from unifl.core.montgomery import mont_context, mont_mul_ref  # noqa: E402


@cocotb.test()
async def ocl_wrapper_calls(dut):
    cocotb.start_soon(Clock(dut.clock, 10, unit="ns").start())
    dut.resetn.value = 0
    dut.ivalid.value = 0
    dut.oready.value = 0
    for _ in range(3):
        await RisingEdge(dut.clock)
    dut.resetn.value = 1
    n = int(os.environ.get("UNIFL_TB_VECTORS", "12"))
    for k in range(n):
        m = (1 << 1023) | secrets.randbits(1023) | 1
        if k == 0:
            m = (1 << 1024) - 1
        a, b = secrets.randbelow(m), secrets.randbelow(m)
        dut.a.value, dut.b.value, dut.m.value = a, b, m
        dut.n0.value = mont_context(m).n0inv
        dut.ivalid.value = 1
        while True:
            await FallingEdge(dut.clock)
            if int(dut.iready.value):
                break
        await RisingEdge(dut.clock)
        dut.ivalid.value = 0
        dut.oready.value = 1
        while True:
            await FallingEdge(dut.clock)
            if int(dut.ovalid.value):
                break
        got = dut.result.value.to_unsigned()
        await RisingEdge(dut.clock)
        dut.oready.value = 0
        assert got == mont_mul_ref(a, b, m), f"m={m:#x} a={a:#x} b={b:#x}"

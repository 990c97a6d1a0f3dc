"""cocotb testbench of the Vitis RTL kernel rtl/xilinx/modexp_kernel.v (top mont_exp_L16 / L32):
the exponentiation unit behind the argument list of montmul.cl's mont_exp_L<n> (mode modexp).

The AXI4 memory model and the AXI4-Lite master are those of test_vitis_kernel.py (the protocol is
checked on every beat); a launch is made as XRT makes it.  Every row is compared bit-exactly with
x̄^e in the Montgomery domain (``pow``), for per-row exponents (e_stride = le) and one shared
exponent (e_stride = 0); then the error paths: an RRESP error, a BRESP error and an exponent longer
than the unit holds each set their status bit, and the rows they touch come back as all ones or
keep the host's fill, never as a plausible value.
"""

from __future__ import annotations

import os
import secrets

import cocotb

from test_vitis_kernel import (AP_DONE, AP_IDLE, AP_START, CTRL, WORD, AxiLiteMaster, AxiMemory,
                               Cycles, _base, _setup)

from unifl.core.montgomery import mont_context

ARGS = {"base": 0x10, "exps": 0x18, "out": 0x20, "scratch": 0x28, "consts": 0x30, "n0": 0x38,
        "n": 0x40, "le": 0x48, "e_stride": 0x50, "ebits": 0x58, "w": 0x60}
STATUS = 0x68


def _d() -> int:
    return int(os.environ.get("UNIFL_TB_BITS", "1024")) // 64


async def launch(dut, mem: AxiMemory, lite: AxiLiteMaster, cycles: Cycles, m: int,
                 bases: list[int], exps: list[int], le: int, shared: bool, ebits: int,
                 bad_read_row: int | None = None, bad_write_row: int | None = None
                 ) -> tuple[list[int], int, int]:
    """One launch; returns (out rows, status register, cycles)."""
    d = _d()
    n = len(bases)
    x_b, e_b, o_b, c_b, s_b = _base(), _base(), _base(), _base(), _base()
    ctx = mont_context(m)
    fill = (1 << (64 * d)) - 1
    for i, x in enumerate(bases):
        mem.store(x_b + i * d * WORD, x, d)
        mem.store(o_b + i * d * WORD, fill, d)          # the host's fill of out
    for i, e in enumerate(exps):
        mem.store(e_b + i * le * WORD, e, le)
    mem.store(c_b, m, d)
    mem.store(c_b + d * WORD, ctx.r_mod, d)
    mem.writable = (o_b, o_b + max(n, 1) * d * WORD)
    mem.bad_reads = ({x_b // WORD + bad_read_row * d} if bad_read_row is not None else set())
    mem.bad_writes = ({o_b // WORD + bad_write_row * d} if bad_write_row is not None else set())
    for name, val in (("base", x_b), ("exps", e_b), ("out", o_b), ("scratch", s_b),
                      ("consts", c_b), ("n0", ctx.n0inv)):
        await lite.write64(ARGS[name], val)
    for name, val in (("n", n), ("le", le), ("e_stride", 0 if shared else le), ("ebits", ebits),
                      ("w", 6)):
        await lite.write(ARGS[name], val)
    await lite.write(CTRL, AP_START)
    t0 = cycles.n
    while True:
        status = await lite.read(CTRL)
        if status & AP_DONE:
            assert not mem.writes and not mem.wbeats and not mem.bpending
            break
        assert cycles.n - t0 < 3_000_000, "no ap_done"
    elapsed = cycles.n - t0
    assert (await lite.read(CTRL)) & AP_IDLE
    err = await lite.read(STATUS)
    rows = [mem.load(o_b + i * d * WORD, d) for i in range(n)]
    mem.bad_reads, mem.bad_writes = set(), set()
    return rows, err, elapsed


def expect(m: int, radix: int, xbar: int, e: int) -> int:
    x = xbar * pow(radix, -1, m) % m
    return pow(x, e, m) * radix % m


@cocotb.test(timeout_time=60, timeout_unit="ms")
async def modexp_rows(dut):
    """Per-row exponents and one shared exponent; bases 0, 1̄ = R mod m, m-1, m (reduced on
    entry) and random; every row bit-exact, status 0."""
    d = _d()
    radix = 1 << (64 * d)
    mem, lite, cycles = await _setup(dut)
    m = (1 << (64 * d - 1)) | secrets.randbits(64 * d - 1) | 1
    ebits = int(os.environ.get("UNIFL_TB_EBITS", "8"))
    le = -(-ebits // 64)
    bases = [0, radix % m, m - 1, m] + [secrets.randbelow(m)
                                        for _ in range(int(os.environ.get("UNIFL_TB_ROWS", "1")))]
    exps = [(1 << ebits) - 1, 1, 0] + [secrets.randbits(ebits) for _ in bases[3:]]
    rows, err, t = await launch(dut, mem, lite, cycles, m, bases, exps, le, False, ebits)
    assert err == 0, f"status {err:#x}"
    for i, (x, e, z) in enumerate(zip(bases, exps, rows)):
        assert z == expect(m, radix, x, e), f"row {i}: x={x:#x} e={e:#x} got {z:#x}"
    shared = secrets.randbits(ebits) | (1 << (ebits - 1))
    rows, err, t2 = await launch(dut, mem, lite, cycles, m, bases[:3], [shared], le, True, ebits)
    assert err == 0
    for i, (x, z) in enumerate(zip(bases, rows)):
        assert z == expect(m, radix, x, shared), f"shared row {i}"
    dut._log.info("mont_exp: %d + 3 rows bit-exact in %d + %d cycles", len(bases), t, t2)


@cocotb.test(timeout_time=60, timeout_unit="ms")
async def memory_errors_surface(dut):
    """With random back-pressure on all five AXI channels: RRESP on a base row: status bit 0 and
    that row and every later one all ones.  BRESP on an
    out row: status bit 1 and the rows of that burst keep the host's fill.  An exponent longer than the unit
    holds: status bit 2 and every row all ones."""
    d = _d()
    ones = (1 << (64 * d)) - 1
    # random back-pressure on every AXI channel (35 % of cycles) while the errors come
    mem, lite, cycles = await _setup(dut, stall=35)
    m = (1 << (64 * d - 1)) | secrets.randbits(64 * d - 1) | 1
    bases = [secrets.randbelow(m) for _ in range(3)]
    rows, err, _ = await launch(dut, mem, lite, cycles, m, bases, [5], 1, True, 3,
                                bad_read_row=1)
    assert err & 1 and rows[1] == ones and rows[2] == ones, (err, rows)
    rows, err, _ = await launch(dut, mem, lite, cycles, m, bases[:2], [5], 1, True, 3,
                                bad_write_row=0)
    # the failed burst stored nothing: its rows keep the fill (the model drops the whole burst)
    assert err == 2 and rows[0] == ones, (err, rows)
    too_long = 64 * (1 << (d - 1).bit_length()) + 1
    rows, err, _ = await launch(dut, mem, lite, cycles, m, bases[:1], [3], -(-too_long // 64),
                                True, too_long)
    assert err == 4 and rows == [ones], (err, rows)


ENC_ARGS = {"msg": 0x10, "rnd": 0x18, "nexp": 0x20, "out": 0x28, "scratch": 0x30, "consts": 0x38,
            "n0": 0x40, "n": 0x48, "le": 0x50, "ebits": 0x58, "w": 0x60}


@cocotb.test(timeout_time=60, timeout_unit="ms")
async def paillier_encryption(dut):
    """paillier_enc (ENC = 1): (1 + m·n)·r^n·R mod n² for m = 0 with r = 1, m = n-1 with r = n-1
    and random rows, n of UNIFL_TB_NBITS bits (n² fits the kernel's D words); bit-exact."""
    if int(os.environ.get("UNIFL_TB_ENC", "0")) != 1:
        return
    d = _d()
    radix = 1 << (64 * d)
    mem, lite, cycles = await _setup(dut)
    nbits = int(os.environ.get("UNIFL_TB_NBITS", str(32 * d)))
    n = (1 << (nbits - 1)) | secrets.randbits(nbits - 1) | 1
    nsq = n * n
    le = -(-nbits // 64)
    ctx = mont_context(nsq)
    rows = [(0, 1), (n - 1, n - 1), (secrets.randbelow(n), secrets.randbelow(n - 1) + 1)]
    m_b, r_b, e_b, o_b, c_b, s_b = (_base() for _ in range(6))
    fill = radix - 1
    for i, (m, r) in enumerate(rows):
        mem.store(m_b + i * le * WORD, m, le)
        mem.store(r_b + i * le * WORD, r, le)
        mem.store(o_b + i * d * WORD, fill, d)
    mem.store(e_b, n, le)
    for k, v in enumerate((nsq, radix % nsq, radix * radix % nsq, n * radix % nsq)):
        mem.store(c_b + k * d * WORD, v, d)
    mem.writable = (o_b, o_b + len(rows) * d * WORD)
    for name, val in (("msg", m_b), ("rnd", r_b), ("nexp", e_b), ("out", o_b), ("scratch", s_b),
                      ("consts", c_b), ("n0", ctx.n0inv)):
        await lite.write64(ENC_ARGS[name], val)
    for name, val in (("n", len(rows)), ("le", le), ("ebits", n.bit_length()), ("w", 6)):
        await lite.write(ENC_ARGS[name], val)
    await lite.write(CTRL, AP_START)
    while not (await lite.read(CTRL)) & AP_DONE:
        pass
    assert await lite.read(STATUS) == 0
    for i, (m, r) in enumerate(rows):
        got = mem.load(o_b + i * d * WORD, d)
        want = (1 + m * n) * pow(r, n, nsq) % nsq * radix % nsq
        assert got == want, f"row {i}: m={m:#x} r={r:#x} got {got:#x} want {want:#x}"

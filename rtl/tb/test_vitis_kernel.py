"""cocotb testbench of the Vitis RTL kernel rtl/xilinx/montmul_kernel.v (top montmul_L16 / L32).

The testbench plays XRT and the card's memory: an AXI4-Lite master programs the ap_ctrl_hs register
map (pointers, n0, n, ap_start) and polls ap_done; an AXI4 memory model (written here, on the
kernel's m_axi_gmem port) holds a / b / out / consts and checks the protocol on every beat:

* AR / AW: INCR bursts of 8-byte beats, at most 256 beats, never crossing a 4 KiB boundary, address
  and length stable while VALID waits for READY, VALID never withdrawn;
* W: data stable while waiting, WLAST exactly on the last beat of each AW burst, full strobes;
* R / B: returned in order (one ID); every word the kernel writes lies inside ``out``.

Every result row is checked bit-exactly against ``unifl.core.montgomery.mont_mul_ref``.  With
``stall`` on, the memory drops ARREADY / AWREADY / WREADY and inserts gaps in RVALID / BVALID at
random (the slave's side of back-pressure on all five channels).  Parameters come from the
environment: UNIFL_TB_BITS (1024 or 2048), UNIFL_TB_ROWS (random rows per modulus), UNIFL_TB_RESULT
(a JSON file the cycle counts are written to).
"""

from __future__ import annotations

import os
import secrets
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge

from unifl.core.montgomery import mont_context, mont_mul_ref

from mm_vectors import MASK64, edge_pairs, moduli, random_modulus, record

CLK_NS = 10
WORD = 8
# register map (kernel.xml declares the same offsets)
CTRL, GIE, IER, ISR = 0x00, 0x04, 0x08, 0x0C
ARG_A, ARG_B, ARG_OUT, ARG_CONSTS, ARG_N0, ARG_N = 0x10, 0x18, 0x20, 0x28, 0x30, 0x38
STATUS = 0x40
AP_START, AP_DONE, AP_IDLE, AP_READY = 1, 2, 4, 8


def _chance(percent: int) -> bool:
    return secrets.randbelow(100) < percent


# ---------------------------------------------------------------------------- AXI4 memory model
@dataclass
class _Burst:
    addr: int
    beats: int
    sent: int = 0
    due: int = 0                             # cycle from which its R data / B response may go
    bad: bool = False                        # a write burst answered with BRESP = SLVERR


@dataclass
class AxiMemory:
    """Word-addressed memory behind the kernel's m_axi_gmem port (see the module docstring)."""

    dut: object
    stall: int = 0                           # percent of cycles a channel is held back
    latency: int = 20                        # cycles from AR to the first R beat, from the last
                                             # W beat to B (a card's DDR / HBM takes ~20-40)
    cycle: int = 0
    words: dict[int, int] = field(default_factory=dict)
    writable: tuple[int, int] = (0, 0)       # [lo, hi) byte range the kernel may write
    reads: deque = field(default_factory=deque)
    writes: deque = field(default_factory=deque)
    wbeats: deque = field(default_factory=deque)
    bpending: deque = field(default_factory=deque)
    stats: dict[str, int] = field(default_factory=lambda: {"ar": 0, "aw": 0, "r": 0, "w": 0,
                                                           "b": 0, "max_len": 0, "page_cuts": 0})
    #: word addresses whose reads answer RRESP = SLVERR (their data still come back)
    bad_reads: set[int] = field(default_factory=set)
    #: word addresses whose write bursts answer BRESP = SLVERR and store nothing
    bad_writes: set[int] = field(default_factory=set)

    def store(self, addr: int, value: int, nwords: int) -> None:
        for j in range(nwords):
            self.words[addr // WORD + j] = (value >> (64 * j)) & MASK64

    def load(self, addr: int, nwords: int) -> int:
        return sum(self.words.get(addr // WORD + j, 0) << (64 * j) for j in range(nwords))

    def _check_burst(self, ch: str, addr: int, length: int, size: int, burst: int) -> None:
        beats = length + 1
        assert size == 3, f"{ch}SIZE={size}: the data bus is 8 bytes"
        assert burst == 1, f"{ch}BURST={burst}: INCR expected"
        assert addr % WORD == 0, f"{ch}ADDR={addr:#x} not 8-byte aligned"
        assert beats <= 256, f"{ch}LEN={length}: over the AXI4 maximum of 256 beats"
        assert (addr % 4096) + beats * WORD <= 4096, \
            f"{ch} burst at {addr:#x} of {beats} beats crosses a 4 KiB boundary"
        self.stats["max_len"] = max(self.stats["max_len"], beats)
        if (addr + beats * WORD) % 4096 == 0 and beats < 256:
            self.stats["page_cuts"] += 1

    async def run(self) -> None:
        d = self.dut
        d.m_axi_gmem_ARREADY.value = 0
        d.m_axi_gmem_AWREADY.value = 0
        d.m_axi_gmem_WREADY.value = 0
        d.m_axi_gmem_RVALID.value = 0
        d.m_axi_gmem_RLAST.value = 0
        d.m_axi_gmem_RDATA.value = 0
        d.m_axi_gmem_RRESP.value = 0
        d.m_axi_gmem_BVALID.value = 0
        d.m_axi_gmem_BRESP.value = 0
        held = {"ar": None, "aw": None, "w": None}   # what a VALID that was not taken showed
        rvalid = bvalid = False
        while True:
            await FallingEdge(d.ap_clk)
            # ---- sample the kernel's outputs; decide the handshakes of the coming rising edge
            arv, awv, wv = int(d.m_axi_gmem_ARVALID.value), int(d.m_axi_gmem_AWVALID.value), \
                int(d.m_axi_gmem_WVALID.value)
            ar = (int(d.m_axi_gmem_ARADDR.value), int(d.m_axi_gmem_ARLEN.value),
                  int(d.m_axi_gmem_ARSIZE.value), int(d.m_axi_gmem_ARBURST.value)) if arv else None
            aw = (int(d.m_axi_gmem_AWADDR.value), int(d.m_axi_gmem_AWLEN.value),
                  int(d.m_axi_gmem_AWSIZE.value), int(d.m_axi_gmem_AWBURST.value)) if awv else None
            w = (int(d.m_axi_gmem_WDATA.value), int(d.m_axi_gmem_WSTRB.value),
                 int(d.m_axi_gmem_WLAST.value)) if wv else None
            for ch, now in (("ar", ar), ("aw", aw), ("w", w)):
                if held[ch] is not None:
                    assert now == held[ch], f"{ch.upper()} changed or dropped while waiting: " \
                                            f"{held[ch]} -> {now}"
            ar_fire = arv and int(d.m_axi_gmem_ARREADY.value)
            aw_fire = awv and int(d.m_axi_gmem_AWREADY.value)
            w_fire = wv and int(d.m_axi_gmem_WREADY.value)
            r_fire = rvalid and int(d.m_axi_gmem_RREADY.value)
            b_fire = bvalid and int(d.m_axi_gmem_BREADY.value)
            held["ar"] = ar if arv and not ar_fire else None
            held["aw"] = aw if awv and not aw_fire else None
            held["w"] = w if wv and not w_fire else None
            if ar_fire:
                self._check_burst("AR", *ar)
                self.reads.append(_Burst(ar[0], ar[1] + 1, due=self.cycle + self.latency))
                self.stats["ar"] += 1
            if aw_fire:
                self._check_burst("AW", *aw)
                self.writes.append(_Burst(aw[0], aw[1] + 1))
                self.stats["aw"] += 1
            if w_fire:
                assert w[1] == 0xFF, f"WSTRB={w[1]:#x}: every byte is written"
                self.wbeats.append(w)
                self.stats["w"] += 1
            if r_fire:
                head = self.reads[0]
                head.sent += 1
                self.stats["r"] += 1
                if head.sent == head.beats:
                    self.reads.popleft()
            if b_fire:
                self.bpending.popleft()
                self.stats["b"] += 1
            # W beats complete an AW burst (W may run ahead of AW): write it, queue its response
            while self.writes and len(self.wbeats) >= self.writes[0].beats:
                wb = self.writes.popleft()
                wb.bad = any((wb.addr // WORD + j) in self.bad_writes for j in range(wb.beats))
                for j in range(wb.beats):
                    data, _, last = self.wbeats.popleft()
                    assert last == (j == wb.beats - 1), \
                        f"WLAST={last} on beat {j} of a {wb.beats}-beat burst at {wb.addr:#x}"
                    addr = wb.addr + j * WORD
                    lo, hi = self.writable
                    assert lo <= addr < hi, f"write to {addr:#x} outside out [{lo:#x}, {hi:#x})"
                    if not wb.bad:
                        self.words[addr // WORD] = data
                wb.due = self.cycle + self.latency
                self.bpending.append(wb)
            await RisingEdge(d.ap_clk)
            self.cycle += 1
            # ---- drive the slave's side for the next cycle
            d.m_axi_gmem_ARREADY.value = int(not _chance(self.stall))
            d.m_axi_gmem_AWREADY.value = int(not _chance(self.stall))
            d.m_axi_gmem_WREADY.value = int(not _chance(self.stall))
            if r_fire or not rvalid:             # RVALID, once raised, stays until taken
                rvalid = bool(self.reads) and self.reads[0].due <= self.cycle \
                    and not _chance(self.stall)
                if rvalid:
                    head = self.reads[0]
                    word = head.addr // WORD + head.sent
                    d.m_axi_gmem_RDATA.value = self.words.get(word, 0)
                    d.m_axi_gmem_RLAST.value = int(head.sent == head.beats - 1)
                    d.m_axi_gmem_RRESP.value = 2 if word in self.bad_reads else 0
                d.m_axi_gmem_RVALID.value = int(rvalid)
            if b_fire or not bvalid:
                bvalid = bool(self.bpending) and self.bpending[0].due <= self.cycle \
                    and not _chance(self.stall)
                d.m_axi_gmem_BVALID.value = int(bvalid)
                d.m_axi_gmem_BRESP.value = 2 if bvalid and self.bpending[0].bad else 0


# ---------------------------------------------------------------------------- AXI4-Lite master
class AxiLiteMaster:
    """Register reads and writes on s_axi_control, one at a time (as XRT does)."""

    def __init__(self, dut) -> None:
        self.dut = dut
        d = dut
        d.s_axi_control_AWVALID.value = 0
        d.s_axi_control_WVALID.value = 0
        d.s_axi_control_ARVALID.value = 0
        d.s_axi_control_RREADY.value = 0
        d.s_axi_control_BREADY.value = 0
        d.s_axi_control_WSTRB.value = 0xF

    async def write(self, addr: int, value: int) -> None:
        d = self.dut
        await RisingEdge(d.ap_clk)       # drive right after an edge, sample at the falling one
        d.s_axi_control_AWADDR.value = addr
        d.s_axi_control_WDATA.value = value & 0xFFFFFFFF
        d.s_axi_control_WSTRB.value = 0xF
        d.s_axi_control_AWVALID.value = 1
        d.s_axi_control_WVALID.value = 1
        d.s_axi_control_BREADY.value = 1
        aw_done = w_done = False
        while not (aw_done and w_done):
            await FallingEdge(d.ap_clk)
            aw_now = int(d.s_axi_control_AWREADY.value) and not aw_done
            w_now = int(d.s_axi_control_WREADY.value) and not w_done
            await RisingEdge(d.ap_clk)
            if aw_now:
                aw_done = True
                d.s_axi_control_AWVALID.value = 0
            if w_now:
                w_done = True
                d.s_axi_control_WVALID.value = 0
        while True:
            await FallingEdge(d.ap_clk)
            if int(d.s_axi_control_BVALID.value):
                assert int(d.s_axi_control_BRESP.value) == 0
                break
        await RisingEdge(d.ap_clk)
        d.s_axi_control_BREADY.value = 0

    async def write64(self, addr: int, value: int) -> None:
        await self.write(addr, value & 0xFFFFFFFF)
        await self.write(addr + 4, value >> 32)

    async def read(self, addr: int) -> int:
        d = self.dut
        await RisingEdge(d.ap_clk)
        d.s_axi_control_ARADDR.value = addr
        d.s_axi_control_ARVALID.value = 1
        while True:
            await FallingEdge(d.ap_clk)
            if int(d.s_axi_control_ARREADY.value):
                break
        await RisingEdge(d.ap_clk)
        d.s_axi_control_ARVALID.value = 0
        d.s_axi_control_RREADY.value = 1
        while True:
            await FallingEdge(d.ap_clk)
            if int(d.s_axi_control_RVALID.value):
                value = int(d.s_axi_control_RDATA.value)
                break
        await RisingEdge(d.ap_clk)
        d.s_axi_control_RREADY.value = 0
        return value


# ---------------------------------------------------------------------------- harness
class Cycles:
    def __init__(self, dut) -> None:
        self.n = 0
        cocotb.start_soon(self._count(dut))

    async def _count(self, dut) -> None:
        while True:
            await RisingEdge(dut.ap_clk)
            self.n += 1


async def _setup(dut, stall: int = 0) -> tuple[AxiMemory, AxiLiteMaster, Cycles]:
    clk = dut.ap_clk
    cocotb.start_soon(Clock(clk, CLK_NS, unit="ns").start())
    mem = AxiMemory(dut, stall=stall)
    lite = AxiLiteMaster(dut)
    dut.ap_rst_n.value = 0
    for _ in range(4):
        await RisingEdge(clk)
    cocotb.start_soon(mem.run())
    dut.ap_rst_n.value = 1
    for _ in range(3):
        await RisingEdge(clk)
    return mem, lite, Cycles(dut)


def _words_per_row() -> int:
    return int(os.environ.get("UNIFL_TB_BITS", "1024")) // 64


def _base(page_offset_words: int | None = None) -> int:
    """A buffer address: a random page, at a random 8-byte offset inside it unless given (so rows
    and bursts straddle 4 KiB boundaries)."""
    off = secrets.randbelow(512) if page_offset_words is None else page_offset_words
    # pages above 4 GiB too, so the high words of the 64-bit pointer registers matter
    return ((secrets.randbelow(1 << 24) + (1 << 19)) << 12) + off * WORD


async def run_kernel(dut, mem: AxiMemory, lite: AxiLiteMaster, cycles: Cycles, m: int,
                     pairs: list[tuple[int, int]], bases: tuple[int, int, int, int] | None = None
                     ) -> int:
    """One launch as XRT makes it: arguments, ap_start, poll ap_done.  Checks every row bit-exactly;
    returns the cycles from ap_start to ap_done."""
    d = _words_per_row()
    n = len(pairs)
    a_base, b_base, o_base, c_base = bases or (_base(), _base(), _base(), _base())
    # keep the four buffers apart (random pages could collide)
    spans = sorted((x, x + max(1, n) * d * WORD) for x in (a_base, b_base, o_base))
    spans.append((c_base, c_base + 2 * d * WORD))
    spans.sort()
    assert all(spans[i][1] <= spans[i + 1][0] for i in range(len(spans) - 1)), "buffers overlap"
    ctx = mont_context(m)
    for i, (x, y) in enumerate(pairs):
        mem.store(a_base + i * d * WORD, x, d)
        mem.store(b_base + i * d * WORD, y, d)
        mem.store(o_base + i * d * WORD, secrets.randbits(64 * d), d)     # stale contents
    mem.store(c_base, m, d)
    mem.store(c_base + d * WORD, ctx.r_mod, d)
    mem.writable = (o_base, o_base + n * d * WORD)
    for reg, val in ((ARG_A, a_base), (ARG_B, b_base), (ARG_OUT, o_base), (ARG_CONSTS, c_base),
                     (ARG_N0, ctx.n0inv)):
        await lite.write64(reg, val)
    await lite.write(ARG_N, n)
    assert await lite.read(ARG_N) == n and await lite.read(ARG_A + 4) == a_base >> 32
    status = await lite.read(CTRL)
    assert status & AP_IDLE and not status & AP_START, f"not idle before start: {status:#x}"
    await lite.write(CTRL, AP_START)
    t0 = cycles.n
    saw_busy = False
    while True:
        status = await lite.read(CTRL)
        if status & AP_DONE:
            # ap_done means the results are in memory: every write response already came back
            assert not mem.writes and not mem.wbeats and not mem.bpending, \
                f"ap_done with writes outstanding: {len(mem.writes)} AW, {len(mem.wbeats)} W " \
                f"beats, {len(mem.bpending)} B"
            break
        saw_busy |= not status & AP_IDLE
        assert cycles.n - t0 < 400 * (n + 2) * d + 20000, f"no ap_done after {cycles.n - t0} cycles"
    elapsed = cycles.n - t0
    assert status & AP_IDLE and status & AP_READY and not status & AP_START, f"{status:#x}"
    assert saw_busy or n == 0 or elapsed < 30, "ap_idle stayed high during a run"
    # ap_done / ap_ready clear on read
    again = await lite.read(CTRL)
    assert not again & AP_DONE and not again & AP_READY and again & AP_IDLE, f"{again:#x}"
    for i, (x, y) in enumerate(pairs):
        got = mem.load(o_base + i * d * WORD, d)
        want = mont_mul_ref(x, y, m)
        assert got == want, (f"row {i} of {n}: m={m:#x} a={x:#x} b={y:#x} got {got:#x} "
                             f"want {want:#x}")
    assert not mem.reads and not mem.writes and not mem.wbeats and not mem.bpending, \
        "transactions left over after ap_done"
    return elapsed


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def edge_moduli_and_operands(dut):
    """UNIFL_TB_MODULI moduli (all four by default), each one launch of the edge pairs plus random rows (a row count that is not a
    multiple of N), back to back on one kernel without reset; then n = 1 and n = 0."""
    bits = _words_per_row() * 64
    extra = int(os.environ.get("UNIFL_TB_ROWS", "2"))
    mem, lite, cycles = await _setup(dut)
    engines = int(dut.N.value)
    checked = 0
    mods = moduli(bits)[:int(os.environ.get("UNIFL_TB_MODULI", "4"))]
    for m in mods:
        pairs = edge_pairs(m) + [(secrets.randbelow(m), secrets.randbelow(m)) for _ in range(extra)]
        if len(pairs) % engines == 0:
            pairs.append((secrets.randbelow(m), secrets.randbelow(m)))
        await run_kernel(dut, mem, lite, cycles, m, pairs)
        checked += len(pairs)
    m = mods[0]
    await run_kernel(dut, mem, lite, cycles, m, [(secrets.randbelow(m), secrets.randbelow(m))])
    # n = 0: done at once, no memory traffic
    before = dict(mem.stats)
    elapsed = await run_kernel(dut, mem, lite, cycles, m, [])
    assert mem.stats == before and elapsed < 40, (mem.stats, before, elapsed)
    dut._log.info("bits=%d N=%d: %d rows bit-exact over %d launches; bursts %s", bits, engines,
                  checked + 1, len(mods) + 2, mem.stats)
    record("rows_checked", checked + 1)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def random_backpressure(dut):
    """Every channel held back at random (35 % of cycles): AR/AW/W ready low, R/B valid gaps;
    buffers straddle 4 KiB pages and the run is longer than one 256-beat burst."""
    d = _words_per_row()
    mem, lite, cycles = await _setup(dut, stall=35)
    m = moduli(d * 64)[0]
    n = 256 // d + 2                                  # > 256 words per buffer: several bursts
    pairs = [(secrets.randbelow(m), secrets.randbelow(m)) for _ in range(n - 2)] + \
        [(m - 1, m - 1), (0, m - 1)]
    bases = (_base(500), _base(7), _base(511), _base(510))   # near page ends: cuts at 4 KiB
    await run_kernel(dut, mem, lite, cycles, m, pairs, bases)
    assert mem.stats["max_len"] == 256, mem.stats     # the 256-beat cap was reached
    assert mem.stats["page_cuts"] > 0, mem.stats      # and bursts were cut at a page end
    dut._log.info("back-pressure: %d rows bit-exact; bursts %s", n, mem.stats)
    record("backpressure_rows", n)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def control_and_interrupt(dut):
    """ap_idle after reset, ap_start cleared when taken, ap_done clear-on-read, two consecutive
    starts, and the interrupt: GIE & IER raise it on ap_done, writing 1 to ISR clears it."""
    d = _words_per_row()
    mem, lite, cycles = await _setup(dut)
    assert (await lite.read(CTRL)) & AP_IDLE
    assert int(dut.interrupt.value) == 0
    await lite.write(GIE, 1)
    await lite.write(IER, 1)
    m = moduli(d * 64)[0]
    pairs = [(secrets.randbelow(m), secrets.randbelow(m)) for _ in range(2)]
    await run_kernel(dut, mem, lite, cycles, m, pairs)
    assert int(dut.interrupt.value) == 1, "interrupt not raised on ap_done with GIE and IER set"
    assert (await lite.read(ISR)) & 1
    await lite.write(ISR, 1)                         # toggle on write clears it
    await FallingEdge(dut.ap_clk)
    assert int(dut.interrupt.value) == 0 and (await lite.read(ISR)) == 0
    await lite.write(GIE, 0)
    # second start, another modulus, interrupts off
    m2 = moduli(d * 64)[1]
    await run_kernel(dut, mem, lite, cycles, m2, [(m2 - 1, m2 - 2), (3, m2 - 1), (1, 1)])
    assert int(dut.interrupt.value) == 0 and (await lite.read(ISR)) & 1, \
        "ISR set on done (IER) but the line must stay low with GIE off"


async def _result_times(dut, cycles: Cycles, times: list[int]) -> None:
    """Cycle of every result row leaving the cluster (its out_last beat taken)."""
    core = dut.core
    while True:
        await FallingEdge(dut.ap_clk)
        if int(core.cl_out_valid.value) and int(core.cl_out_ready.value) \
                and int(core.cl_out_last.value):
            times.append(cycles.n)


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def throughput(dut):
    """Rows per 1000 cycles, no back-pressure: end to end (ap_start to ap_done, start-up and
    write-back included) and steady (rows leaving the cluster after its first wave of N)."""
    d = _words_per_row()
    mem, lite, cycles = await _setup(dut)
    engines = int(dut.N.value)
    m = moduli(d * 64)[0]
    n = int(os.environ.get("UNIFL_TB_THROUGHPUT_ROWS", str(6 * engines)))
    pairs = [(secrets.randbelow(m), secrets.randbelow(m)) for _ in range(n)]
    times: list[int] = []
    cocotb.start_soon(_result_times(dut, cycles, times))
    elapsed = await run_kernel(dut, mem, lite, cycles, m, pairs, (_base(0), _base(0), _base(0),
                                                                  _base(0)))
    assert len(times) == n, (len(times), n)
    rate = 1000.0 * n / elapsed
    first = engines - 1
    steady = 1000.0 * (n - 1 - first) / (times[-1] - times[first])
    dut._log.info("throughput: %d rows of %d bits in %d cycles at N=%d: %.2f rows / 1000 cycles "
                  "end to end, %.2f steady", n, d * 64, elapsed, engines, rate, steady)
    record("throughput", {"rows": n, "cycles": elapsed, "engines": engines,
                           "rows_per_1000_cycles": round(rate, 3),
                           "steady_rows_per_1000_cycles": round(steady, 3)})


@cocotb.test(timeout_time=5, timeout_unit="ms")
async def memory_errors(dut):
    """RRESP = SLVERR on a word of a: status bit 0, and that row and every later one come back all
    ones (above any m); BRESP = SLVERR on an out burst: status bit 1 and its rows keep the host's
    fill; the next clean launch has status 0 again."""
    mem, lite, cycles = await _setup(dut)
    d = _words_per_row()
    ones = (1 << (64 * d)) - 1
    m = random_modulus(64 * d)
    ctx = mont_context(m)
    for bad in ("read", "write", None):
        pairs = [(secrets.randbelow(m), secrets.randbelow(m)) for _ in range(3)]
        a_b, b_b, o_b, c_b = _base(0), _base(0), _base(0), _base(0)
        for i, (x, y) in enumerate(pairs):
            mem.store(a_b + i * d * WORD, x, d)
            mem.store(b_b + i * d * WORD, y, d)
            mem.store(o_b + i * d * WORD, ones, d)
        mem.store(c_b, m, d)
        mem.store(c_b + d * WORD, ctx.r_mod, d)
        mem.writable = (o_b, o_b + 3 * d * WORD)
        mem.bad_reads = {a_b // WORD + d} if bad == "read" else set()
        mem.bad_writes = {o_b // WORD} if bad == "write" else set()
        for reg, val in ((ARG_A, a_b), (ARG_B, b_b), (ARG_OUT, o_b), (ARG_CONSTS, c_b),
                         (ARG_N0, ctx.n0inv)):
            await lite.write64(reg, val)
        await lite.write(ARG_N, 3)
        await lite.write(CTRL, AP_START)
        while not (await lite.read(CTRL)) & AP_DONE:
            pass
        status = await lite.read(STATUS)
        rows = [mem.load(o_b + i * d * WORD, d) for i in range(3)]
        want = [mont_mul_ref(x, y, m) for x, y in pairs]
        if bad == "read":
            assert status == 1 and rows[1:] == [ones, ones], (status, rows)
        elif bad == "write":
            assert status == 2 and rows[0] == ones, (status, rows)
        else:
            assert status == 0 and rows == want, (status, rows)
    mem.bad_reads, mem.bad_writes = set(), set()


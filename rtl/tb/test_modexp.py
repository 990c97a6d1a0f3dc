"""cocotb testbench of rtl/unifl_modexp.v, the exponentiation unit: every result checked bit-exactly
against gmpy2's ``powmod`` (the arithmetic of the ``cpu`` backend), and the unit's timing
measured (MontMults the engines start per cycle while jobs stream back to back).

Driven by tests/backends/fpga/test_rtl_modexp.py through cocotb_tools.runner; parameters come from the
environment (UNIFL_TB_<name>): BITS (modulus size), EBITS (exponent bits of the MODEXP jobs; 0 =
the modulus size), EDGE (0: no edge jobs), JOBS (random MODEXP jobs per key context), ENC_BITS (bits of the n of the
Paillier encryptions; 0 = none), STEADY (jobs of the equal-job stream that measures the rate),
DEC_BITS and DEC (prime size and extra random ciphertexts of the CRT decryption test), RESULT (JSON
file for the measurements), and for a gate-level netlist, which has no parameters left, W, D, NE,
S, K and NM.  Vectors come from ``secrets``.  Signals are sampled at falling edges and driven right after rising edges.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass

import cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge
from cocotb.utils import get_sim_time

from mm_vectors import record


CLK_NS = 10
MODEXP, ENC = 0, 1


def param(dut, name: str) -> int:
    env = f"UNIFL_TB_{name}"
    return int(os.environ[env]) if env in os.environ else int(getattr(dut, name).value)


@dataclass
class Job:
    kind: int
    x: int            # base (r for ENC)
    e: int            # exponent (n for ENC)
    nwin: int
    ctx: int = 0
    x_plain: bool = True
    out_plain: bool = True
    m: int = 0        # ENC plaintext

    def expect(self, mod: int, n: int, radix: int) -> int:
        """The reference, with gmpy2 (the arithmetic of the ``cpu`` backend)."""
        import gmpy2
        if self.kind == ENC:
            c = int((1 + self.m * n) * gmpy2.powmod(self.x, n, mod) % mod)
            return c if self.out_plain else c * radix % mod
        x = self.x if self.x_plain else self.x * int(gmpy2.invert(radix, mod))
        z = int(gmpy2.powmod(x % mod, self.e, mod))
        return z if self.out_plain else z * radix % mod


class Unit:
    def __init__(self, dut) -> None:
        self.dut = dut
        self.w = param(dut, "W")
        self.d = param(dut, "D")
        self.ne = param(dut, "NE")
        self.s = param(dut, "S")
        self.k = param(dut, "K")
        self.nm = param(dut, "NM")
        self.mask = (1 << self.w) - 1
        self.radix = 1 << (self.w * self.d)
        self.in_gap = 0.0
        self.out_stall = 0.0
        self.mods: list[int] = []
        self.ns: list[int] = []
        self.last: list[int] = []

    async def start(self) -> None:
        dut = self.dut
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        dut.rst_n.value = 0
        dut.cfg_valid.value = 0
        dut.in_valid.value = 0
        dut.out_ready.value = 0
        for _ in range(3):
            await RisingEdge(dut.clk)
        dut.rst_n.value = 1
        await RisingEdge(dut.clk)

    def _mm_count(self) -> int:
        """MontMults the engines have been given (the lanes' simulation counters; 0 for a
        gate-level netlist, which has none)."""
        try:
            return sum(int(self.dut.lane[e].u.sim_mm.value) for e in range(self.ne))
        except (AttributeError, IndexError, TypeError, ValueError):
            return 0

    def _now(self) -> int:
        return int(get_sim_time("ns")) // CLK_NS

    def words(self, v: int, count: int) -> list[int]:
        return [(v >> (self.w * j)) & self.mask for j in range(count)]

    async def beat(self, valid, ready, data, word: int, gap: float = 0.0) -> None:
        dut = self.dut
        while gap and secrets.randbelow(1000) < gap * 1000:
            valid.value = 0
            await RisingEdge(dut.clk)
        data.value = word
        valid.value = 1
        while True:
            await FallingEdge(dut.clk)
            if int(ready.value):
                break
            await RisingEdge(ready)     # long waits (a slot still busy) without a Python step per cycle
        await RisingEdge(dut.clk)

    async def configure(self, mods: list[int], ns: list[int]) -> None:
        """Key contexts: modulus, n0', R mod M, R^2 mod M, n R mod M (n = 0 for a plain one)."""
        dut = self.dut
        assert len(mods) == self.nm
        self.mods, self.ns = mods, ns
        for mod, n in zip(mods, ns):
            n0 = (-pow(mod, -1, 1 << self.w)) % (1 << self.w)
            beats = (self.words(mod, self.d) + [n0] + self.words(self.radix % mod, self.d)
                     + self.words(self.radix ** 2 % mod, self.d)
                     + self.words(n * self.radix % mod, self.d))
            for word in beats:
                await self.beat(dut.cfg_valid, dut.cfg_ready, dut.cfg_data, word)
        dut.cfg_valid.value = 0

    def header(self, job: Job) -> int:
        return (job.kind | (job.x_plain << 2) | (job.out_plain << 3) | (job.ctx << 8)
                | (job.nwin << 16))

    def job_words(self, job: Job) -> list[int]:
        ew = -(-job.nwin * self.k // self.w)
        words = [self.header(job)] + self.words(job.x, self.d)
        if job.kind == ENC:
            words += self.words(job.m, self.d)
        return words + self.words(job.e, ew)

    async def send(self, jobs: list[Job]) -> None:
        dut = self.dut
        for job in jobs:
            for word in self.job_words(job):
                await self.beat(dut.in_valid, dut.in_ready, dut.in_data, word, self.in_gap)
        dut.in_valid.value = 0

    async def collect(self, count: int) -> list[int]:
        dut = self.dut
        out = []
        for _ in range(count):
            z = 0
            for j in range(self.d):
                while True:
                    stall = self.out_stall and secrets.randbelow(1000) < self.out_stall * 1000
                    dut.out_ready.value = 0 if stall else 1
                    await FallingEdge(dut.clk)
                    if int(dut.out_valid.value):
                        word = dut.out_data.value.to_unsigned()
                        assert int(dut.out_last.value) == (j == self.d - 1), f"out_last on word {j}"
                        if stall:
                            await RisingEdge(dut.clk)
                            await FallingEdge(dut.clk)
                            assert int(dut.out_valid.value), "out_valid dropped while stalled"
                            assert dut.out_data.value.to_unsigned() == word, "out_data moved"
                            await RisingEdge(dut.clk)
                            continue
                        z |= word << (self.w * j)
                        await RisingEdge(dut.clk)
                        break
                    await RisingEdge(dut.out_valid)
            out.append(z)
        dut.out_ready.value = 0
        return out

    async def run(self, jobs: list[Job]) -> dict:
        """Stream the jobs in, take every result, compare each with the reference; the results
        are kept in ``self.last``."""
        c0, m0 = self._now(), self._mm_count()
        sender = cocotb.start_soon(self.send(jobs))
        got = await self.collect(len(jobs))
        await sender
        for job, z in zip(jobs, got):
            mod, n = self.mods[job.ctx], self.ns[job.ctx]
            want = job.expect(mod, n, self.radix)
            assert z == want, (f"mismatch: kind={job.kind} ctx={job.ctx} M={mod:#x} x={job.x:#x} "
                               f"e={job.e:#x} m={job.m:#x} in_plain={job.x_plain} "
                               f"out_plain={job.out_plain} got {z:#x} want {want:#x}")
        self.last = got
        return {"cycles": self._now() - c0, "montmults": self._mm_count() - m0, "jobs": len(jobs)}


def nwin_for(bits: int, k: int) -> int:
    return max(1, -(-bits // k))


def random_odd(bits: int) -> int:
    return (1 << (bits - 1)) | secrets.randbits(bits - 1) | 1


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(f"UNIFL_TB_{name}", str(default)))


def modexp_jobs(u: Unit, mod: int, ctx: int, count: int, ebits: int, edge: bool) -> list[Job]:
    """Edge bases (0, 1, M-1, M, 2^(W D)-1: the unit reduces any base below 2^(W D)) with edge
    exponents (0, all ones, 1, a lone top bit, random) over every entry/exit combination, then
    ``count`` random jobs."""
    nw = nwin_for(ebits, u.k)
    full = (1 << (nw * u.k)) - 1
    jobs = []
    if edge:
        edge_e = [0, full, 1, 1 << (nw * u.k - 1), secrets.randbits(nw * u.k)]
        for i, x in enumerate([0, 1, mod - 1, mod, u.radix - 1]):
            jobs.append(Job(MODEXP, x, edge_e[i], nw, ctx, x_plain=bool(i % 2),
                            out_plain=bool(i // 2 % 2)))
    for i in range(count):
        jobs.append(Job(MODEXP, secrets.randbelow(mod), secrets.randbits(nw * u.k), nw, ctx,
                        x_plain=bool(i % 2), out_plain=bool(i // 2 % 2)))
    return jobs


def enc_jobs(u: Unit, n: int, ctx: int) -> list[Job]:
    """Encryptions of 0 with r = 1, of n-1 with r = n-1 (Montgomery result), and a random one."""
    nw = nwin_for(n.bit_length(), u.k)
    return [Job(ENC, 1, n, nw, ctx, m=0), Job(ENC, n - 1, n, nw, ctx, m=n - 1, out_plain=False),
            Job(ENC, secrets.randbelow(n - 1) + 1, n, nw, ctx, m=secrets.randbelow(n))]


@cocotb.test()
async def modexp_back_to_back(dut):
    """Edge and random MODEXP jobs (plain / Montgomery in and out) on every key context, streamed
    back to back; Paillier encryptions with an n of ENC_BITS bits (n^2 is context 0); a stream of
    STEADY equal jobs; all bit-exact, with the MontMults the engines took per cycle."""
    u = Unit(dut)
    bits = env_int("BITS", u.w * u.d)
    ebits = env_int("EBITS", 0) or bits
    enc_bits = env_int("ENC_BITS", 0)
    await u.start()
    n = random_odd(enc_bits) if enc_bits else 0
    mods = [n * n if n else random_odd(bits)] + [random_odd(bits) for _ in range(u.nm - 1)]
    await u.configure(mods, [n] + [0] * (u.nm - 1))
    jobs = []
    for c, mod in enumerate(mods):
        jobs += modexp_jobs(u, mod, c, env_int("JOBS", 1), ebits,
                            edge=(c == 0 and env_int("EDGE", 1) == 1))
    record("modexp", await u.run(jobs))
    if n:
        record("enc", await u.run(enc_jobs(u, n, 0)))
    steady = env_int("STEADY", 0)
    if steady:
        nw = nwin_for(ebits, u.k)
        record("steady", await u.run([Job(MODEXP, secrets.randbelow(mods[0]),
                                          secrets.randbits(nw * u.k), nw, 0)
                                      for _ in range(steady)]))


@cocotb.test()
async def stalls_and_gaps(dut):
    """A producer with random gaps and a consumer that stalls at random: results hold until taken,
    come out in job order and are bit-exact (short exponents, every key context)."""
    u = Unit(dut)
    bits = env_int("BITS", u.w * u.d)
    await u.start()
    u.in_gap, u.out_stall = 0.3, 0.4
    mods = [random_odd(bits) for _ in range(u.nm)]
    await u.configure(mods, [0] * u.nm)
    jobs = []
    for c, mod in enumerate(mods):
        jobs += modexp_jobs(u, mod, c, 2, 2 * u.k, edge=False)
    record("stalls", await u.run(jobs))


@cocotb.test()
async def paillier_crt_decryption(dut):
    """The CRT decryption's two half-size ladders as MODEXP jobs on two key contexts (p^2, q^2)
    held at once: c^(p-1) mod p^2 and c^(q-1) mod q^2 for ciphertexts of a Paillier key with
    primes of DEC_BITS bits; the host's L, h_p, h_q and CRT give back every plaintext."""
    u = Unit(dut)
    if u.nm < 2:
        return
    import gmpy2
    pbits = env_int("DEC_BITS", u.w * u.d // 2)
    await u.start()

    def prime(b: int) -> int:
        while True:
            p = int(gmpy2.next_prime(secrets.randbits(b) | (3 << (b - 2))))
            if p.bit_length() == b:
                return p
    p = prime(pbits)
    q = prime(pbits)
    while q == p:
        q = prime(pbits)
    n, nsq = p * q, (p * q) ** 2
    await u.configure([p * p, q * q] + [random_odd(u.w * u.d)] * (u.nm - 2), [0] * u.nm)
    msgs = [0, n - 1] + [secrets.randbelow(n) for _ in range(env_int("DEC", 0))]
    cts = [(1 + m * n) * pow(secrets.randbelow(n - 1) + 1, n, nsq) % nsq for m in msgs]
    nwp = nwin_for((p - 1).bit_length(), u.k)
    nwq = nwin_for((q - 1).bit_length(), u.k)
    jobs = []
    for c in cts:
        jobs += [Job(MODEXP, c % (p * p), p - 1, nwp, 0), Job(MODEXP, c % (q * q), q - 1, nwq, 1)]
    rep = await u.run(jobs)
    res = u.last
    hp = pow((pow(n + 1, p - 1, p * p) - 1) // p, -1, p)
    hq = pow((pow(n + 1, q - 1, q * q) - 1) // q, -1, q)
    for i, m in enumerate(msgs):
        xp, xq = res[2 * i], res[2 * i + 1]
        mp = (xp - 1) // p * hp % p
        mq = (xq - 1) // q * hq % q
        got = mp + p * ((mq - mp) * pow(p, -1, q) % q)
        assert got == m, f"CRT decryption of message {i}: got {got} want {m}"
    record("decrypt", {**rep, "ciphertexts": len(cts)})

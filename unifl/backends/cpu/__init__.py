"""``cpu``: the reference backend.  Every op on Python/gmpy2 integers, one element at a time.

It is deliberately the simplest correct implementation, not a fast one: every other backend must give
bit-identical results to it.  Secret exponents (``mod_exp_secret``) use GMP's constant-time
mpz_powm_sec.  Its multi-exponentiation and grouped product are computed independently
of the generic compositions (plain ``powmod`` and products), so the equivalence harness checks those
compositions too.
"""

from __future__ import annotations

from typing import Any, Sequence

import gmpy2
import numpy as np
import numpy.typing as npt

from ...core.contract import Limbs
from ...core.montgomery import MontContext
from ...core.limbs import from_limbs, to_limbs
from ...core.backend import Backend, ProbeResult

#: a gmpy2 integer (gmpy2 is untyped here: ``mpz`` values are Any to mypy)
Mpz = Any


def _ints(a: npt.ArrayLike) -> list[Mpz]:
    return [gmpy2.mpz(v) for v in from_limbs(a)]


class CpuBackend(Backend):
    name = "cpu"
    native_ops = frozenset({"mont_mul", "mod_mul", "mod_exp", "mod_exp_secret", "mont_exp",
                            "mont_multi_exp", "mont_prod_groups", "mont_inverse"})

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, f"gmpy2 {gmpy2.version()}", ["host CPU (gmpy2, 1 thread)"])

    def _rinv(self, ctx: MontContext) -> tuple[Mpz, Mpz, Mpz]:
        """(m, R^−1 mod m, R mod m) as gmpy2 integers, once per modulus."""
        return self.state.get(ctx, "gmp", lambda: (gmpy2.mpz(ctx.m), gmpy2.invert(ctx.R, ctx.m),
                                                   gmpy2.mpz(ctx.r_mod)))

    def _redc(self, ctx: MontContext) -> tuple[Mpz, Mpz, int]:
        """(m, m' = −m^−1 mod R, log2 R) for Montgomery's reduction, once per modulus."""
        return self.state.get(ctx, "redc", lambda: (
            gmpy2.mpz(ctx.m), gmpy2.mpz((-pow(ctx.m, -1, ctx.R)) % ctx.R), ctx.R.bit_length() - 1))

    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        """Montgomery's REDC on whole integers: t = a·b, u = (t mod R)·m' mod R, then
        (t + u·m)/R is exact and lies in [0, 2m), so one conditional subtraction gives
        a·b·R^−1 mod m.  Three multiplications and shifts, no division."""
        m, m_prime, shift = self._redc(ctx)
        mask = (gmpy2.mpz(1) << shift) - 1
        out = []
        for x, y in zip(_ints(a), _ints(b)):
            t = x * y
            r = (t + ((t & mask) * m_prime & mask) * m) >> shift
            out.append(r - m if r >= m else r)
        return to_limbs(out, ctx.num_limbs)

    def op_mont_inverse(self, ctx: MontContext, a_mont: Limbs) -> Limbs:
        """(x^−1)·R mod m for x̄ = x·R: gmpy2's inverse of x̄ is x^−1·R^−1, and one multiplication
        by R² mod m brings it to x^−1·R.  ValueError when some x shares a factor with m."""
        m = gmpy2.mpz(ctx.m)
        r2 = gmpy2.mpz(ctx.r2)
        out = []
        for i, x in enumerate(_ints(a_mont)):
            try:
                out.append(gmpy2.invert(x, m) * r2 % m)
            except ZeroDivisionError:
                raise ValueError(f"element #{i} shares a factor with the modulus") from None
        return to_limbs(out, ctx.num_limbs)

    def op_mod_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        m = gmpy2.mpz(ctx.m)
        return to_limbs([x * y % m for x, y in zip(_ints(a), _ints(b))], ctx.num_limbs)

    def _pows(self, ctx: MontContext, base: Sequence[Mpz], exps: np.ndarray) -> list[Mpz]:
        m = gmpy2.mpz(ctx.m)
        es = _ints(exps)
        if len(es) == 1:
            es = es * len(base)
        return [gmpy2.powmod(x, e, m) for x, e in zip(base, es)]

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        return to_limbs(self._pows(ctx, _ints(base), exps), ctx.num_limbs)

    def op_mod_exp_secret(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        """Secret exponents through GMP's mpz_powm_sec (gmpy2.powmod_sec): its time and memory
        accesses do not depend on the exponent's or the base's value.  GMP needs e > 0; e = 0 (never
        a real secret exponent) gives 1 mod m directly."""
        m = gmpy2.mpz(ctx.m)
        es = _ints(exps)
        if len(es) == 1:
            es = es * base.shape[0]
        one = gmpy2.mpz(1) % m
        return to_limbs([gmpy2.powmod_sec(x, e, m) if e else one
                         for x, e in zip(_ints(base), es)], ctx.num_limbs)

    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        m, rinv, r = self._rinv(ctx)
        plain = [x * rinv % m for x in _ints(base_mont)]
        return to_limbs([y * r % m for y in self._pows(ctx, plain, exps)], ctx.num_limbs)

    def op_mont_multi_exp(self, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray) -> Limbs:
        m, rinv, r = self._rinv(ctx)
        plain = [x * rinv % m for x in _ints(bases_mont)]
        k, n, le = exps.shape
        es = _ints(exps.reshape(k * n, le))
        out = []
        for row in range(k):
            acc = gmpy2.mpz(1)
            for i in range(n):
                acc = acc * gmpy2.powmod(plain[i], es[row * n + i], m) % m
            out.append(acc * r % m)
        return to_limbs(out, ctx.num_limbs)

    def op_mont_prod_groups(self, ctx: MontContext, a_mont: Limbs, groups: np.ndarray,
                            num_groups: int) -> Limbs:
        m, rinv, r = self._rinv(ctx)
        acc = [gmpy2.mpz(r)] * num_groups
        for x, g in zip(_ints(a_mont), groups.tolist()):
            acc[g] = acc[g] * x % m * rinv % m
        return to_limbs(acc, ctx.num_limbs)

"""Layer 3: batched ModMult and ModExp (and the multi-exponentiation and grouped products the
Paillier layer needs), each dispatched to the backend's native op when it has one and otherwise
composed here, once, from MontMults on that same backend.
"""

from __future__ import annotations

import gmpy2
import numpy as np

from ..base_op import MontContext, constant, from_mont, mont_mul, native, operand, to_mont
from ..core.backend import Backend
from ..core.contract import Composition, Limbs
from ..core.limbs import from_limbs, to_limbs
from ..core.errors import OperandError
from ..core.exponents import exp_limbs
from . import compose

__all__ = ["mod_mul", "mod_exp", "mod_exp_secret", "mont_exp", "mont_multi_exp", "mont_prod_groups", "mont_inverse",
           "exp_limbs", "COMPOSITIONS"]


def _check_exps(exps: np.ndarray, n: int) -> np.ndarray:
    exps = np.ascontiguousarray(exps, dtype=np.uint64)
    if exps.ndim != 2 or exps.shape[0] not in (1, n):
        raise OperandError(f"exponent batch must have shape (1|{n}, Le), got {exps.shape}")
    return exps


def mod_mul(backend: Backend, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
    """a·b mod m.  Composed as MontMult(MontMult(a, b), R²) = a·b (two MontMults, not Alg. 2's four:
    the R^-1 of the first is cancelled by the R² of the second)."""
    a = operand(backend, ctx, a, "a")
    b = operand(backend, ctx, b, "b")
    if backend.implements("mod_mul"):
        return native(backend).op_mod_mul(ctx, a, b)
    return to_mont(backend, ctx, mont_mul(backend, ctx, a, b, checked=False))


def mont_exp(backend: Backend, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
    """(x^e)·R mod m for x̄ = x·R mod m: exponentiation that stays in the Montgomery domain."""
    base_mont = operand(backend, ctx, base_mont, "base", checked=False)
    exps = _check_exps(exps, base_mont.shape[0])
    if base_mont.shape[0] == 0:
        return np.empty(base_mont.shape, np.uint64)
    if backend.implements("mont_exp"):
        return native(backend).op_mont_exp(ctx, base_mont, exps)
    return compose.mont_exp(backend, ctx, base_mont, exps)


def mod_exp(backend: Backend, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
    """base^e mod m (UniFL Alg. 3 with sliding windows when composed)."""
    base = operand(backend, ctx, base, "base")
    exps = _check_exps(exps, base.shape[0])
    if base.shape[0] == 0:
        return np.empty(base.shape, np.uint64)
    if backend.implements("mod_exp"):
        return native(backend).op_mod_exp(ctx, base, exps)
    return from_mont(backend, ctx, mont_exp(backend, ctx, to_mont(backend, ctx, base), exps))


def mod_exp_secret(backend: Backend, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
    """base^e mod m where e (and usually the base) is SECRET: CRT decryption (c^(p−1) mod p²), RSA's
    private operation (y^dp mod p), the key owner's obfuscators (y^p mod p²).  Same result as
    :func:`mod_exp`, bit for bit.

    On a backend with the native op the exponentiation is constant time in the values of e and the
    base (``cpu``: GMP mpz_powm_sec; ``native``: OpenSSL BN_mod_exp_mont_consttime).  Otherwise it
    is composed here as a fixed-window MontMult ladder (:func:`compose.mont_exp_fixed_schedule`):
    the same sequence of batched MontMults whatever e is, but NOT claimed constant time (the window
    table is gathered by NumPy indexing, and Python big-int code surrounds it).
    """
    base = operand(backend, ctx, base, "base")
    exps = _check_exps(exps, base.shape[0])
    if base.shape[0] == 0:
        return np.empty(base.shape, np.uint64)
    if backend.implements("mod_exp_secret"):
        return native(backend).op_mod_exp_secret(ctx, base, exps)
    x = to_mont(backend, ctx, base)
    return from_mont(backend, ctx, compose.mont_exp_fixed_schedule(backend, ctx, x, exps))


def mont_multi_exp(backend: Backend, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray
                   ) -> Limbs:
    """out[k] = prod_i bases[i]^exps[k, i], all in Montgomery form: K multi-exponentiations sharing
    their N bases (the heart of ciphertext×plaintext matmul).  ``exps`` has shape (K, N, Le)."""
    bases_mont = operand(backend, ctx, bases_mont, "bases", checked=False)
    exps = np.ascontiguousarray(exps, dtype=np.uint64)
    if exps.ndim != 3 or exps.shape[1] != bases_mont.shape[0]:
        raise OperandError(f"multi-exp exponents must be (K, {bases_mont.shape[0]}, Le), "
                           f"got {exps.shape}")
    if exps.shape[0] == 0:
        return np.empty((0, ctx.num_limbs), np.uint64)
    if bases_mont.shape[0] == 0:
        return constant(ctx, ctx.r_mod, exps.shape[0])
    if backend.implements("mont_multi_exp"):
        return native(backend).op_mont_multi_exp(ctx, bases_mont, exps)
    return compose.mont_multi_exp(backend, ctx, bases_mont, exps)


def mont_prod_groups(backend: Backend, ctx: MontContext, a_mont: Limbs, groups: np.ndarray,
                     num_groups: int) -> Limbs:
    """Product of the rows of each group (Montgomery form); row g is R mod m when group g is empty.
    With ciphertexts this is the homomorphic sum per bin of a histogram (FLASH O6)."""
    a_mont = operand(backend, ctx, a_mont, "a", checked=False)
    groups = np.ascontiguousarray(groups, dtype=np.int64)
    if groups.shape != (a_mont.shape[0],):
        raise OperandError(f"need one group id per row: {groups.shape} vs {a_mont.shape[0]} rows")
    if groups.size and (groups.min() < 0 or groups.max() >= num_groups):
        raise OperandError(f"group ids must lie in [0, {num_groups})")
    if backend.implements("mont_prod_groups"):
        return native(backend).op_mont_prod_groups(ctx, a_mont, groups, int(num_groups))
    return compose.mont_prod_groups(backend, ctx, a_mont, groups, int(num_groups))


def mont_inverse(backend: Backend, ctx: MontContext, a_mont: Limbs) -> Limbs:
    """(x^-1)·R mod m for every row x̄ = x·R mod m: the modular inverse, staying in the Montgomery
    domain (a Paillier ciphertext's inverse is the encryption of the negated plaintext).

    Composed (no native op): leave the domain with one batched MontMult, one extended gcd per element
    on the host (gmpy2), re-enter with one batched MontMult.

    Raises:
        OperandError: some x shares a factor with m (no inverse).
    """
    if a_mont.ndim != 2 or a_mont.shape[1] != ctx.num_limbs:
        raise OperandError(f"expected shape (N, {ctx.num_limbs}), got {a_mont.shape}")
    a_mont = operand(backend, ctx, a_mont, "a", checked=False)
    if a_mont.shape[0] == 0:
        return np.empty(a_mont.shape, np.uint64)
    if backend.implements("mont_inverse"):
        try:
            return native(backend).op_mont_inverse(ctx, a_mont)
        except ValueError as exc:
            raise OperandError(f"no inverse modulo the {ctx.bits}-bit modulus: {exc}") from None
    plain = from_limbs(from_mont(backend, ctx, a_mont))
    m = gmpy2.mpz(ctx.m)
    try:
        inv = [int(gmpy2.invert(v, m)) for v in plain]
    except ZeroDivisionError:
        raise OperandError(f"no inverse modulo the {ctx.bits}-bit modulus: an element shares a "
                           "factor with it") from None
    return to_mont(backend, ctx, to_limbs(inv, ctx.num_limbs))


#: the ops of the contract this layer owns, each composed here from MontMults when the backend
#: lacks it (the scheduler's registry of compositions)
COMPOSITIONS: dict[str, Composition] = {
    "mod_mul": mod_mul, "mod_exp": mod_exp, "mod_exp_secret": mod_exp_secret, "mont_exp": mont_exp,
    "mont_multi_exp": mont_multi_exp, "mont_prod_groups": mont_prod_groups,
    "mont_inverse": mont_inverse}

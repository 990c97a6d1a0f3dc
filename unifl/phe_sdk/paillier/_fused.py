"""The fused Paillier ops of the op contract, composed once for every backend from the key records
of :mod:`unifl.core.keys`: each runs the backend's native op when it has one, and otherwise
composes it on that same backend from ModExps and MontMults.  The scheduler's fallback re-runs a
failed op through these with the op's own arguments (:data:`COMPOSITIONS`).

Key-owner encryption with the CRT, why it is an encryption under a uniform r: x^p mod p² depends
only on x mod p, so r^n mod p² = (r^q mod p)^p mod p², and as gcd(q, p−1) = 1 (always for primes
of equal size), r ↦ r^q mod p is a bijection of Z_p*: for r uniform in Z_n*, y_p = r^q mod p is
uniform in [1, p), and independent of y_q = r^p mod q by the CRT.  Drawing y_p, y_q uniformly is
drawing r uniformly, with exponents p and q of n/2 bits on moduli of n bits: an eighth of the work
of r^n mod n² (exponent n, modulus n²), a quarter of r^(n mod p(p−1)) mod p² and mod q².
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ... import base_op, mod_op
from ...base_op import mont_context, to_limbs
from ...core.backend import Backend
from ...core.contract import Composition, Limbs, OpContract
from ...core.errors import InvalidCiphertextError, OperandError
from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.limbs import from_limbs, less_than, mod_add_limbs, mod_sub_limbs, add_limbs
from .._util import pad_limbs
from ._comb import comb_power, fixed_base_table, owner_fixed_base_tables, owner_generator_tables

__all__ = ["paillier_encrypt", "paillier_encrypt_fixed_base", "paillier_encrypt_owner",
           "paillier_encrypt_owner_fixed_base", "paillier_encrypt_owner_generator",
           "paillier_decrypt", "COMPOSITIONS"]


def _ops(be: Backend) -> OpContract:
    """``be`` as the op contract types it (a backend defines the ops it lists in ``native_ops``)."""
    return cast(OpContract, be)


def finish(be: Backend, pk: PaillierPublicMaterial, m: Limbs, obf_mont: Limbs) -> Limbs:
    """c̄ = (1 + m·n)·obf in Montgomery form: MontMult(g^m, obf̄) = g^m·obf, then into the
    domain."""
    ctx = pk.nsquare_ctx
    return base_op.to_mont(be, ctx, base_op.mont_mul(be, ctx, g_pow_limbs(pk, m), obf_mont,
                                                     checked=False))


def g_pow_limbs(pk: PaillierPublicMaterial, m: Limbs) -> np.ndarray:
    """g^m = 1 + m·n mod n² (exact for m < n: the binomial terms of (1 + n)^m past the second
    vanish mod n², and 1 + m·n < n²), plain limbs mod n², for plaintext limbs m (N, Ln)."""
    n = pk.n
    return to_limbs([1 + x * n for x in from_limbs(np.asarray(m))], pk.nsquare_ctx.num_limbs)


def paillier_encrypt(be: Backend, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
    """(1 + m·n)·r^n·R mod n² for m, r (N, Ln): r^n by ModExp in the Montgomery domain."""
    if be.implements("paillier_encrypt"):
        return _ops(be).op_paillier_encrypt(pk, m, r)
    ctx = pk.nsquare_ctx
    r_mont = base_op.to_mont(be, ctx, pad_limbs(np.asarray(r, np.uint64), ctx.num_limbs))
    return finish(be, pk, m, mod_op.mont_exp(be, ctx, r_mont, mod_op.exp_limbs(pk.n)))


def paillier_encrypt_fixed_base(be: Backend, pk: PaillierPublicMaterial, m: Limbs, a: np.ndarray
                                ) -> Limbs:
    """(1 + m·n)·hs^a·R mod n² (DJN), hs^a from the full-size comb table of the record's base."""
    if be.implements("paillier_encrypt_fixed_base"):
        return _ops(be).op_paillier_encrypt_fixed_base(pk, m, a)
    fb = pk.require_fixed_base()
    table = fixed_base_table(be, pk)
    return finish(be, pk, m, comb_power(be, pk.nsquare_ctx, table, fb.window, a))


def paillier_encrypt_owner(be: Backend, sk: PaillierPrivateMaterial, m: Limbs, yp: Limbs,
                           yq: Limbs) -> Limbs:
    """Key-owner encryption with the CRT: c̄ = (1 + m·n)·CRT(yp^p mod p², yq^q mod q²)·R mod n²
    (why this encrypts under a uniform r: the module docstring).

    One native call / one kernel launch where the backend fuses it; otherwise composed here on the
    same backend: two secret-exponent ModExps (constant time where the backend has them) and the
    combine of :func:`owner_combine`.
    """
    if be.implements("paillier_encrypt_owner"):
        return _ops(be).op_paillier_encrypt_owner(sk, m, yp, yq)
    p2, q2 = sk.psquare_ctx, sk.qsquare_ctx
    xp = mod_op.mod_exp_secret(be, p2, pad_limbs(np.asarray(yp, np.uint64), p2.num_limbs),
                               mod_op.exp_limbs(sk.p))
    xq = mod_op.mod_exp_secret(be, q2, pad_limbs(np.asarray(yq, np.uint64), q2.num_limbs),
                               mod_op.exp_limbs(sk.q))
    return owner_combine(be, sk, m, xp, xq)


def paillier_encrypt_owner_fixed_base(be: Backend, sk: PaillierPrivateMaterial, m: Limbs,
                                      a: np.ndarray) -> Limbs:
    """(1 + m·n)·hs^a·R mod n² by the key owner: hs^a mod p² and hs^a mod q² from comb tables of
    hs mod p² and hs mod q², joined by the CRT.  The half-size tables make each MontMult about a
    quarter of the full-size comb's, two of them per window: about half its work for the same
    exponents, and the same ciphertexts.  Composed (no fused op): the grouped table products on the
    backend, then :func:`owner_combine`."""
    if be.implements("paillier_encrypt_owner_fixed_base"):
        return _ops(be).op_paillier_encrypt_owner_fixed_base(sk, m, a)
    fb = sk.public_key.require_fixed_base()
    halves = []
    for ctx, table in zip((sk.psquare_ctx, sk.qsquare_ctx), owner_fixed_base_tables(be, sk)):
        halves.append(base_op.from_mont(be, ctx, comb_power(be, ctx, table, fb.window, a)))
    return owner_combine(be, sk, m, halves[0], halves[1])


def paillier_encrypt_owner_generator(be: Backend, sk: PaillierPrivateMaterial, m: Limbs,
                                     kp: np.ndarray, kq: np.ndarray) -> Limbs:
    """(1 + m·n)·CRT(gp^kp mod p², gq^kq mod q²)·R mod n² by the key owner, from the comb tables
    of its generators (``sk.generators``).

    Why this is an encryption under a uniform r, with no assumption of its own: mod p², r^n ranges
    over the subgroup of p-th powers (order p − 1, cyclic) as r ranges over the units, each value
    equally often, since gcd(n, p(p − 1)) = p when gcd(q, p − 1) = 1.  gp generates that subgroup
    (it is a^p mod p² for a primitive root a mod p), so gp^kp for kp uniform in [0, p − 1) is
    uniform on it, independently of the q half; the CRT then gives r^n mod n² for r uniform.
    With p − 1 of n/2 bits, each half is about n/(2·window) MontMults mod p², against about n/2
    squarings for y_p^p (:func:`paillier_encrypt_owner`).

    Composed (no fused op): the grouped table products on the backend, then
    :func:`owner_combine`."""
    if be.implements("paillier_encrypt_owner_generator"):
        return _ops(be).op_paillier_encrypt_owner_generator(sk, m, kp, kq)
    gens = sk.require_generators()
    halves = []
    for ctx, table, k in zip((sk.psquare_ctx, sk.qsquare_ctx), owner_generator_tables(be, sk),
                             (kp, kq)):
        halves.append(base_op.from_mont(be, ctx, comb_power(be, ctx, table, gens.window, k)))
    return owner_combine(be, sk, m, halves[0], halves[1])


def paillier_decrypt(be: Backend, sk: PaillierPrivateMaterial, c_mont: Limbs) -> Limbs:
    """m (N, Ln) from Montgomery-form ciphertexts (N, L2) with the CRT:
    m_p = L_p(c^(p−1) mod p²)·h_p mod p (and likewise mod q), joined by Garner's formula.

    Raises:
        InvalidCiphertextError: a ciphertext is not a unit mod n² (its CRT half degenerates).
    """
    if be.implements("paillier_decrypt"):
        return _ops(be).op_paillier_decrypt(sk, c_mont)
    pk = sk.public_key
    c = from_limbs(base_op.from_mont(be, pk.nsquare_ctx, c_mont))
    halves = []
    for prime, sq_ctx, h in ((sk.p, sk.psquare_ctx, sk.hp), (sk.q, sk.qsquare_ctx, sk.hq)):
        x = from_limbs(mod_op.mod_exp_secret(be, sq_ctx, sq_ctx.to_limbs([v % sq_ctx.m for v in c]),
                                             mod_op.exp_limbs(prime - 1)))
        # Second line of defence (the first is require_units at ingress): for a unit c, Fermat
        # gives c^(p−1) ≡ 1 (mod p).  Anything else (0 included) means c shares the factor, and
        # L_p of it would hand back a value that factors n: refuse instead of answering.
        for i, v in enumerate(x):
            if v % prime != 1:
                raise InvalidCiphertextError(
                    f"ciphertext #{i} is not a unit mod n² (a CRT half of its decryption "
                    f"degenerates); refused, since decrypting it could reveal the key")
        halves.append([(v - 1) // prime * h % prime for v in x])
    p, q, qinv = sk.p, sk.q, sk.q_inverse
    m = [mq + q * ((mp - mq) * qinv % p) for mp, mq in zip(*halves)]
    return to_limbs(m, pk.n_ctx.num_limbs)


#: the generic composition of each fused Paillier op of the contract (the scheduler's typed
#: registry of compositions gathers these with those of base_op and mod_op)
COMPOSITIONS: dict[str, Composition] = {
    "paillier_encrypt": paillier_encrypt,
    "paillier_encrypt_fixed_base": paillier_encrypt_fixed_base,
    "paillier_encrypt_owner": paillier_encrypt_owner,
    "paillier_encrypt_owner_fixed_base": paillier_encrypt_owner_fixed_base,
    "paillier_encrypt_owner_generator": paillier_encrypt_owner_generator,
    "paillier_decrypt": paillier_decrypt,
}


# ---- key-owner encryption (CRT): the composed parts
def owner_obfuscation_bases(be: Backend, sk: PaillierPrivateMaterial, r: np.ndarray
                            ) -> tuple[Limbs, Limbs]:
    """(y_p, y_q) = (r^q mod p, r^p mod q) for given r (N, Ln): then y_p^p ≡ r^(q·p) = r^n (mod p²)
    and y_q^q ≡ r^n (mod q²), so :func:`paillier_encrypt_owner` of them is (1 + m·n)·r^n mod n²,
    the public-key ciphertext for the same r.  The exponents are reduced by Fermat (q mod (p−1),
    never 0 for primes p < q, so an r ≡ 0 (mod p) still gives 0 = r^q mod p), on moduli of n/2
    bits, as secret exponents."""
    rs = from_limbs(r)
    out = []
    for prime, other in ((sk.p, sk.q), (sk.q, sk.p)):
        ctx = mont_context(prime)
        base = to_limbs([v % prime for v in rs], ctx.num_limbs)
        out.append(mod_op.mod_exp_secret(be, ctx, base, mod_op.exp_limbs(other % (prime - 1))))
    return out[0], out[1]


def _owner_constants(be: Backend, sk: PaillierPrivateMaterial) -> dict[str, np.ndarray]:
    """The one-row constants of :func:`owner_combine`, once per record and backend instance:
    ``j`` = (p²)^-1·R_q mod q² (a MontMult mod q² by it multiplies by (p²)^-1), ``psq`` = p²·R mod
    n² (a MontMult by it multiplies by p², exactly when the product is < n²), ``n`` = n·R² mod n²
    (a MontMult of m by it is m·n·R, the Montgomery form of m·n), ``one`` = R mod n²."""
    def build() -> dict[str, np.ndarray]:
        q2, n2 = sk.qsquare_ctx, sk.public_key.nsquare_ctx
        return {"j": to_limbs([sk.psquare_inverse * q2.r_mod % q2.m], q2.num_limbs),
                "psq": to_limbs([sk.psquare * n2.r_mod % n2.m], n2.num_limbs),
                "n": to_limbs([sk.public_key.n * n2.r2 % n2.m], n2.num_limbs),
                "one": to_limbs([n2.r_mod], n2.num_limbs)}
    return be.state.get(sk, "owner_constants", build)


def owner_combine(be: Backend, sk: PaillierPrivateMaterial, m: Limbs, xp: Limbs, xq: Limbs
                  ) -> Limbs:
    """c̄ = (1 + m·n)·x·R mod n² for the x < n² with x ≡ xp (mod p²), x ≡ xq (mod q²).

    Garner, oriented so that nothing needs reducing (p < q, so xp < p² < q²):
    x = xp + p²·t with t = (xq − xp)·(p²)^-1 mod q² < q², hence p²·t + xp < n² exactly.  On
    batches: the subtraction mod q² and the additions on the host (NumPy, vectorised over rows),
    t and p²·t as MontMults by one-row constants (:func:`_owner_constants`), and
    ḡ = (1 + m·n)·R = MontMult(m, n·R²) ⊕ R, c̄ = MontMult(ḡ, x̄) -- no Python loop per element.
    """
    n2, q2 = sk.public_key.nsquare_ctx, sk.qsquare_ctx
    k = _owner_constants(be, sk)
    xp_h = np.asarray(xp, dtype=np.uint64)
    d = mod_sub_limbs(np.asarray(xq, dtype=np.uint64), pad_limbs(xp_h, q2.num_limbs), q2.m_limbs)
    t = base_op.mont_mul(be, q2, d, k["j"], checked=False)                 # (xq − xp)·(p²)^-1
    psq_t = base_op.mont_mul(be, n2, pad_limbs(np.asarray(t, np.uint64), n2.num_limbs), k["psq"],
                             checked=False)                               # p²·t, exact
    x, carry = add_limbs(np.asarray(psq_t, np.uint64), pad_limbs(xp_h, n2.num_limbs))
    if carry.any() or not less_than(x, n2.m_limbs).all():
        # impossible for halves reduced mod p², q²: only a backend returning unreduced values
        raise OperandError("key-owner CRT combine: a CRT half is not reduced modulo p² or q²")
    x_mont = base_op.to_mont(be, n2, x)
    mn_mont = base_op.mont_mul(be, n2, pad_limbs(np.asarray(m, np.uint64), n2.num_limbs), k["n"],
                               checked=False)                             # m·n·R
    g_mont = mod_add_limbs(np.asarray(mn_mont, np.uint64), k["one"], n2.m_limbs)  # (1 + m·n)·R
    return base_op.mont_mul(be, n2, g_mont, x_mont, checked=False)

"""Fresh obfuscation: the randomness of an encryption and the paths that apply it, without any pool.

Every encryption is (1 + m·n)·x mod n² for an obfuscation factor x distributed as r^n mod n² for r
uniform in Z_n*, computed by one of (first that applies):

* an explicit r (``r_values`` of the raw API): x = r^n, by the key owner through the CRT bases
  y_p = r^q mod p, y_q = r^p mod q (the same x);
* the DJN fixed base when the key has one: x = hs^a for a short random a (full-size comb, or the
  key owner's half-size combs mod p², q²);
* the key owner with proven generators, on a backend with the fused op: x = CRT(gp^kp mod p²,
  gq^kq mod q²) for kp, kq uniform in [0, p − 1), [0, q − 1), from comb tables (exactly r^n's
  distribution, see ``paillier_encrypt_owner_generator``);
* the key owner: x = CRT(y_p^p mod p², y_q^q mod q²) for y_p, y_q uniform in [1, p), [1, q);
* anyone: x = r^n mod n².

Randomness comes from the OS CSPRNG only (``os.urandom`` through :func:`random_limbs`, ``secrets``
through :func:`unifl.phe_sdk.primes.random_below`).
"""

from __future__ import annotations

import math
import os

import numpy as np

from ...core.backend import Backend
from ...core.contract import Limbs
from ...core.errors import InvalidKeyError
from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.limbs import less_than, limb_count, sub_limbs, to_limbs
from ..primes import random_below
from ._fused import (owner_obfuscation_bases, paillier_encrypt, paillier_encrypt_fixed_base,
                     paillier_encrypt_owner, paillier_encrypt_owner_fixed_base,
                     paillier_encrypt_owner_generator)

__all__ = ["random_limbs", "random_units", "random_exponents_below", "encrypt_fresh"]


def random_limbs(count: int, bits: int, below: int | None = None) -> np.ndarray:
    """``count`` integers uniform in [1, 2^bits) -- or in [1, ``below``) when given, ``below`` of
    exactly ``bits`` bits -- as (count, ceil(bits/64)) limbs, from the OS CSPRNG (``os.urandom``).
    Rejection sampling, vectorised: each draw of ``bits`` random bits is kept when it lies in the
    range, which happens with probability at least 1/2."""
    L = limb_count(bits)
    top = np.uint64((1 << (bits - 64 * (L - 1))) - 1)
    bound = None if below is None else to_limbs([below], L)[0]
    out = np.empty((count, L), np.uint64)
    filled = 0
    while filled < count:
        need = count - filled
        draw = need + need // 2 + 8
        x = np.frombuffer(os.urandom(8 * L * draw), dtype="<u8").reshape(draw, L).astype(np.uint64)
        x[:, -1] &= top
        keep = x.any(axis=1)
        if bound is not None:
            keep &= less_than(x, bound)
        got = x[keep][:need]
        out[filled:filled + len(got)] = got
        filled += len(got)
    return out


def random_exponents_below(count: int, bound: int) -> np.ndarray:
    """``count`` integers uniform in [0, ``bound``) (``bound`` ≥ 2) as (count, limbs of bound − 1)
    limbs: uniform in [1, bound] from :func:`random_limbs` (CSPRNG), minus one.  A generator's
    exponents: kp uniform in [0, p − 1) makes gp^kp uniform on the group of order p − 1."""
    x = random_limbs(count, (bound + 1).bit_length(), bound + 1)
    one = np.zeros((1, x.shape[1]), np.uint64)
    one[0, 0] = 1
    x, _ = sub_limbs(x, one)
    return x


def random_units(pk: PaillierPublicMaterial, count: int) -> np.ndarray:
    """``count`` obfuscation bases r uniform in Z_n* (CSPRNG), as limbs mod n.

    Raises:
        InvalidKeyError: an r shares a factor with n (probability about 2^-(bits/2): it would
            factor n, so the key cannot be trusted)."""
    rs = random_below(pk.n, count)
    for r in rs:
        if math.gcd(r, pk.n) != 1:
            raise InvalidKeyError("random r shares a factor with n: the key is broken")
    return to_limbs(rs, pk.n_ctx.num_limbs)


def encrypt_fresh(be: Backend, pk: PaillierPublicMaterial, m: Limbs, r: Limbs | None = None,
                  owner: PaillierPrivateMaterial | None = None) -> Limbs:
    """Montgomery-form ciphertexts (N, L2) of plaintext limbs m (N, Ln), each with an obfuscation
    factor computed now (the paths of the module docstring).  ``owner``: the key owner's record,
    whose CRT makes every factor cheaper; its ciphertexts equal the public-key path's for the same
    r or the same fixed-base exponents."""
    count = int(m.shape[0])
    if r is None and pk.fixed_base is not None:
        a = random_limbs(count, pk.fixed_base.exp_bits)
        # the CRT tables derive from the fixed base of the owner's own public record; a record
        # with a fixed base of its own (an equal key object) takes the public path
        if owner is not None and owner.public_key is pk:
            return paillier_encrypt_owner_fixed_base(be, owner, m, a)
        return paillier_encrypt_fixed_base(be, pk, m, a)
    if owner is not None and r is None and owner.generators is not None \
            and be.implements("paillier_encrypt_owner_generator"):
        kp = random_exponents_below(count, owner.p - 1)
        kq = random_exponents_below(count, owner.q - 1)
        return paillier_encrypt_owner_generator(be, owner, m, kp, kq)
    if owner is not None:
        yp: Limbs
        yq: Limbs
        if r is None and owner.half_exponent_obfuscation:
            yp = random_limbs(count, owner.p.bit_length(), owner.p)
            yq = random_limbs(count, owner.q.bit_length(), owner.q)
        else:
            yp, yq = owner_obfuscation_bases(be, owner, random_units(pk, count) if r is None
                                             else np.asarray(r, np.uint64))
        return paillier_encrypt_owner(be, owner, m, yp, yq)
    return paillier_encrypt(be, pk, m, random_units(pk, count) if r is None else r)

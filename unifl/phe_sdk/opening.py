"""Verifiable Paillier decryption: the key owner returns each plaintext with the ciphertext's
randomness (an *opening*), and the requester checks it before using the plaintext.

Every ciphertext under g = n + 1 -- fresh, re-randomised, or any homomorphic combination -- is
c = (1 + m·n)·r^n mod n² for exactly one m in [0, n) and one r in Z_n*.  The pair (m, r) is its
opening:

* the key owner finds m by decryption and r from c ≡ r^n (mod n) (since 1 + m·n ≡ 1): with
  gcd(n, φ(n)) = 1, x ↦ x^n is a bijection of Z_p* and of Z_q*, so
  r ≡ c^(n^-1 mod (p−1)) (mod p), r ≡ c^(n^-1 mod (q−1)) (mod q), joined by the CRT
  (equivalently r = (c·(1 − m·n) mod n²)^(n^-1 mod λ) mod n).  Two secret-exponent ModExps on
  moduli of n/2 bits: about a third of the decryption's own two ModExps mod p² and q².
* the requester, who holds only the public key, checks (1 + m·n)·r^n ≡ c (mod n²), with
  0 <= m < n and r a unit in [1, n): one ModExp mod n² with the public exponent n (the cost of
  one encryption).  A wrong plaintext cannot pass: m' ≠ m would need r'^n ≡ r^n·(1 + (m − m')·n)
  (mod n²), and (1 + k·n) is an n-th residue only for k ≡ 0 (mod n).

Why r reveals nothing beyond m: r is a function of (c, m) alone (the unique unit with
(1 + m·n)·r^n ≡ c), so whoever holds c and m holds r in the information-theoretic sense; what r
adds computationally is the ability to *open* c, a ciphertext whose plaintext it has just been
given.  A request that is a combination ∏ c_i^(a_i)·s^n of the owner's ciphertexts and a fresh
factor s has r = s·∏ r_i^(a_i): it opens that one combination and nothing else (any other
combination needs ∏ r_i^(b_i) for b outside the requested ones, an n-th root mod n² that only the
key owner can take).  docs/app.md states the protocol-level argument for vertical LR.
"""

from __future__ import annotations

import math
from typing import Sequence

import gmpy2
import numpy as np

from .. import base_op, mod_op
from ..base_op import from_limbs, mont_context, to_limbs
from ..core.backend import Backend
from ..core.errors import DecryptionProofError, InvalidKeyError
from .array import EncryptedArray
from .paillier import PrivateKey, encrypt_limbs

__all__ = ["open_array", "check_opening"]


def _randomness(be: Backend, sk: PrivateKey, c_plain: list[int]) -> list[int]:
    """r in [1, n) with r^n ≡ c (mod n) for each c (a unit mod n), by the CRT mod p and mod q."""
    n = sk.public_key.n
    halves = []
    for prime in (sk.p, sk.q):
        try:
            e = int(gmpy2.invert(n, prime - 1))
        except ZeroDivisionError as exc:       # gcd(n, p − 1) != 1: not a Paillier key
            raise InvalidKeyError("gcd(n, φ(n)) != 1: the key cannot open its ciphertexts") \
                from exc
        ctx = mont_context(prime)
        base = to_limbs([c % prime for c in c_plain], ctx.num_limbs)
        # the exponent is derived from p: the backend's constant-time exponentiation
        halves.append(from_limbs(mod_op.mod_exp_secret(be, ctx, base, mod_op.exp_limbs(e))))
    p, q, qinv = sk.p, sk.q, sk.q_inverse
    return [rq + q * ((rp - rq) * qinv % p) for rp, rq in zip(*halves)]


def open_array(arr: EncryptedArray, sk: PrivateKey) -> tuple[list[int], list[int]]:
    """The opening of every ciphertext of ``arr``: (residues m in [0, n), randomness r in Z_n*)
    with (1 + m·n)·r^n ≡ c (mod n²).  The decryption is the array's own (CRT), so a
    ciphertext that is not a unit mod n² is refused exactly as a decryption refuses it.

    Raises:
        KeyMismatchError: ``sk`` is not the array's key.
        InvalidCiphertextError: a ciphertext is not a unit mod n².
    """
    m = arr.decrypt_residues(sk)             # checks the key and refuses non-units
    be = arr.backend
    c_plain = from_limbs(arr.batch.ciphertexts())
    return m, _randomness(be, sk, c_plain)


def check_opening(arr: EncryptedArray, residues: Sequence[object], randomness: Sequence[object]
                  ) -> list[int]:
    """Check that (residues, randomness) opens ``arr`` element by element -- each m an int in
    [0, n), each r an int in [1, n) prime to n, (1 + m·n)·r^n ≡ c (mod n²) -- and return the
    residues.  Needs only the public key.

    Raises:
        DecryptionProofError: a count, type or range is wrong, or an element does not open its
            ciphertext (named by index).
    """
    pk = arr.public_key
    n = pk.n
    if len(residues) != arr.size or len(randomness) != arr.size:
        raise DecryptionProofError(f"decryption of {arr.size} ciphertexts came back with "
                                   f"{len(residues)} plaintexts and {len(randomness)} "
                                   "randomness values")
    checked: list[list[int]] = []
    for what, values, low in (("plaintext", residues, 0), ("randomness", randomness, 1)):
        out = []
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v < n:
                raise DecryptionProofError(f"decrypted {what} #{i} is not an integer in "
                                           f"[{low}, n)")
            out.append(v)
        checked.append(out)
    m, r = checked
    units = 1
    for v in r:
        units = units * v % n
    if math.gcd(units, n) != 1:
        bad = next(i for i, v in enumerate(r) if math.gcd(v, n) != 1)
        raise DecryptionProofError(f"decrypted randomness #{bad} is not a unit mod n")
    if arr.size == 0:
        return m
    be = arr.backend
    again = encrypt_limbs(be, pk, pk.n_ctx.to_limbs(m), r=pk.n_ctx.to_limbs(r))
    expect = np.asarray(base_op.from_mont(be, pk.nsquare_ctx, again), dtype=np.uint64)
    got = np.asarray(arr.batch.ciphertexts(), dtype=np.uint64)
    bad_rows = (expect != got).any(axis=1)
    if bad_rows.any():
        raise DecryptionProofError(
            f"decrypted value #{int(np.argmax(bad_rows))} (of {int(bad_rows.sum())} that fail) does "
            "not open its ciphertext: (1 + m·n)·r^n ≢ c (mod n²); the key owner returned "
            "something other than the decryption")
    return m

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
  0 <= m < n and r a unit in [1, n).  A wrong plaintext cannot pass: m' ≠ m would need
  r'^n ≡ r^n·(1 + (m − m')·n) (mod n²), and (1 + k·n) is an n-th residue only for k ≡ 0
  (mod n).  The d openings of a batch are checked at once by a random linear combination with
  128-bit weights from ``secrets`` (:func:`_batch_opens`: one n-bit ModExp mod n² and d 128-bit
  ones, soundness error 2^-128), and one by one only to name the offender after a failure.

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
import secrets
from typing import Sequence

import gmpy2
import numpy as np

from .. import base_op, mod_op
from ..base_op import from_limbs, mont_context, to_limbs
from ..core.backend import Backend
from ..core.errors import DecryptionProofError, InvalidKeyError
from .array import EncryptedArray
from .ciphertexts import CiphertextBatch
from .paillier import PrivateKey, encrypt_limbs

__all__ = ["open_array", "check_opening", "BATCH_BITS"]

#: bits of the random weights of the batched check: a wrong plaintext passes with probability
#: at most 2^-BATCH_BITS
BATCH_BITS = 128


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
    if arr.size == 0 or _batch_opens(arr, m, r):
        return m
    # name the offender: one re-encryption per element, only once the batch has failed
    be = arr.backend
    again = encrypt_limbs(be, pk, pk.n_ctx.to_limbs(m), r=pk.n_ctx.to_limbs(r))
    expect = np.asarray(base_op.from_mont(be, pk.nsquare_ctx, again), dtype=np.uint64)
    got = np.asarray(arr.batch.ciphertexts(), dtype=np.uint64)
    bad_rows = (expect != got).any(axis=1)
    first = f"#{int(np.argmax(bad_rows))} (of {int(bad_rows.sum())} that fail)" if bad_rows.any() \
        else "(the batch as a whole)"
    raise DecryptionProofError(
        f"decrypted value {first} does not open its ciphertext: (1 + m·n)·r^n ≢ c (mod n²); the "
        "key owner returned something other than the decryption")


def _batch_opens(arr: EncryptedArray, m: list[int], r: list[int]) -> bool:
    """All openings at once, by a random linear combination: with t_i uniform 128-bit from
    ``secrets`` (drawn after the reply arrived),

        (1 + (Σ t_i·m_i mod n)·n)·(∏ r_i^(t_i) mod n)^n  ≡  ∏ c_i^(t_i)   (mod n²).

    Honest openings satisfy it.  Claimed (m_i + δ_i, r_i') against the true openings: the ratio
    of the two sides is (1 + (Σ t_i·δ_i)·n)·W^n, an n-th residue only if Σ t_i·δ_i ≡ 0 (mod n);
    for δ ≠ 0 (mod n) some δ_j is nonzero mod p (or q), and of the 2^128 values of t_j at most
    one per residue class mod p satisfies it: a wrong plaintext passes with probability at most
    2^-128.  (A different r_i with the right m_i may pass; it changes nothing the requester
    uses.)  Cost: one n-bit exponentiation mod n², d exponentiations with 128-bit exponents, in
    place of d n-bit ones."""
    pk, be = arr.public_key, arr.backend
    n = pk.n
    t = [secrets.randbits(BATCH_BITS) for _ in m]
    rhs = CiphertextBatch(pk, arr.limbs, be, None).mul(t).sum_groups(np.zeros(len(t), np.int64), 1)
    mt = sum(ti * mi for ti, mi in zip(t, m)) % n
    rt = 1
    for ti, ri in zip(t, r):
        rt = rt * int(gmpy2.powmod(ri, ti, n)) % n
    lhs = encrypt_limbs(be, pk, pk.n_ctx.to_limbs([mt]), r=pk.n_ctx.to_limbs([rt]))
    return bool((np.asarray(base_op.from_mont(be, pk.nsquare_ctx, lhs), dtype=np.uint64)
                 == np.asarray(rhs.ciphertexts(), dtype=np.uint64)).all())

"""Proof that a received RSA public key (n, e) blinds perfectly: x ↦ x^e is a permutation of Z_n*.

RSA blind-signature PSI hides each id x from the signer by b = x·r^e mod n with r uniform in
Z_n*.  That hides x perfectly only if r ↦ r^e is a bijection of Z_n*.  A signer who picks n with a
prime p ≡ 1 (mod e) (size and e = 65537 as required, so it passes every check on the key's form)
makes it e-to-1 mod p: b^((p−1)/e) ≡ x^((p−1)/e) (mod p), one of e = 65537 classes per id,
enough to tell most ids of a known universe apart.  The signer cannot sign then (e has no inverse
mod φ(n)), but the blinded ids have left already.

The proof, before anything that depends on an id is sent (Goldberg, Reyzin, Sagga, Baldimtsi,
"Efficient noninteractive certification of RSA moduli and beyond", 2019, the ``perm`` protocol,
made interactive with a fresh nonce):

1. the verifier refuses n with a prime factor below :data:`SMALL_FACTOR_BOUND` (2^20), by one gcd
   with the product of those primes;
2. it sends a fresh 32-byte nonce from ``secrets``; both sides derive :data:`CHALLENGES` values
   ρ_i = FDH("unifl-rsa-perm" ‖ e ‖ nonce ‖ i) in Z_n (SHA-256 in counter mode, as the ids);
3. the key owner returns σ_i = ρ_i^d mod n (its CRT private operation, each result verified
   before it leaves, as every signature); the verifier checks each ρ_i is a unit and
   σ_i^e ≡ ρ_i (mod n).

Soundness: e is prime, so if x ↦ x^e is not a bijection of Z_n*, e divides λ(n) and the e-th
powers form a subgroup of index >= e; a ρ_i uniform in Z_n* (a hash of a nonce the signer had not
seen when it fixed n) has an e-th root with probability <= 1/e.  k = 8 challenges give
e^-8 = 65537^-8 < 2^-128, the security level of a 3072-bit key and above 2048's 112 bits; each costs
the signer one private operation and the verifier one e-th power, next to the thousands of ids a
PSI blinds.  A ρ_i that is not a unit reveals a factor of n (probability about 2^-1000 for a real
RSA key) and is refused too.

Why the small-factor bound: with no factor below 2^20, a hashed value (an id's, or a challenge)
is a non-unit mod n with probability at most (bits(n)/20)·2^-20 < 2^-13 even for a hostile n of
many primes, and an id hashed to a non-unit makes the guest refuse the key (the blinded value
would carry x mod p): so a hostile signer can learn at most whether some id of the guest's falls
in that sliver, one bit per PSI, through the refusal.  For a real RSA key the chance is 2^-1000.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import gmpy2

from ..core.backend import Backend
from ..core.errors import SignatureError, WeakKeyError
from .rsa import PrivateKey, PublicKey, full_domain_hash

__all__ = ["SMALL_FACTOR_BOUND", "CHALLENGES", "NONCE_BYTES", "check_no_small_factor",
           "challenges", "prove", "verify", "check_units"]

#: n must have no prime factor below this (trial division by one gcd with their product)
SMALL_FACTOR_BOUND = 1 << 20
#: e-th roots asked for: soundness error e^-CHALLENGES = 65537^-8 < 2^-128
CHALLENGES = 8
NONCE_BYTES = 32


@functools.cache
def _small_primes_product() -> int:
    """The product of every prime below SMALL_FACTOR_BOUND (1.5 Mbit; built once, about 50 ms)."""
    return int(gmpy2.primorial(SMALL_FACTOR_BOUND - 1))


def check_no_small_factor(n: int) -> None:
    """Refuse an n with a prime factor below :data:`SMALL_FACTOR_BOUND`.

    Raises:
        WeakKeyError: naming the factor found.
    """
    g = math.gcd(int(n), _small_primes_product())
    if g != 1:
        small = _smallest_prime_of(g)
        raise WeakKeyError(f"RSA modulus has the small prime factor {small} (every factor must be "
                           f"at least {SMALL_FACTOR_BOUND}); refused")


def _smallest_prime_of(g: int) -> int:
    """The smallest prime dividing ``g`` > 1, a divisor of the product of the small primes."""
    p = 2
    while g % p:
        p = int(gmpy2.next_prime(p))
    return p


def challenges(pk: PublicKey, nonce: bytes, count: int = CHALLENGES) -> list[int]:
    """The values ρ_0 .. ρ_{count−1} in [0, n) both sides derive from the verifier's nonce."""
    if len(nonce) != NONCE_BYTES:
        raise WeakKeyError(f"key-proof nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")
    seed = b"unifl-rsa-perm" + pk.e.to_bytes(8, "big") + bytes(nonce)
    return full_domain_hash([seed + i.to_bytes(4, "big") for i in range(count)], pk.n)


def check_units(pk: PublicKey, values: Sequence[int], what: str) -> None:
    """Refuse when a value shares a factor with n (one gcd of the product mod n): such a value
    factors n, and blinded it would carry x mod that factor to the signer.

    Raises:
        WeakKeyError: naming the first value (by index) that is not a unit mod n.
    """
    n = pk.n
    acc = gmpy2.mpz(1)
    for v in values:
        acc = acc * (int(v) % n) % n
    if gmpy2.gcd(acc, n) == 1:
        return
    bad = next(i for i, v in enumerate(values) if math.gcd(int(v), n) != 1)
    raise WeakKeyError(f"{what} #{bad} is not a unit mod the RSA modulus: the key is not an RSA "
                       "modulus of large primes (or this is a 2^-1000 accident); refused")


def prove(sk: PrivateKey, nonce: bytes, backend: Backend | str | None = None,
          count: int = CHALLENGES) -> list[int]:
    """The key owner's answer: the e-th root of every challenge (signatures verified before they
    are returned, by :meth:`~unifl.phe_sdk.rsa.PrivateKey.raw_decrypt`)."""
    return sk.raw_decrypt(challenges(sk.public_key, nonce, count), backend)


def verify(pk: PublicKey, nonce: bytes, proof: object, backend: Backend | str | None = None,
           count: int = CHALLENGES) -> None:
    """Check the key owner's answer to ``nonce``: ``count`` ints in [1, n) whose e-th powers are
    the challenges, every challenge a unit; n with no factor below the bound.

    Raises:
        WeakKeyError: n has a small factor, or a challenge is not a unit.
        SignatureError: the answer has the wrong form or a root does not verify: x ↦ x^e is not
            shown to be a permutation, so nothing may be blinded under this key.
    """
    check_no_small_factor(pk.n)
    rho = challenges(pk, nonce, count)
    check_units(pk, rho, "key-proof challenge")
    if not isinstance(proof, list) or len(proof) != count or \
            any(isinstance(v, bool) or not isinstance(v, int) or not 0 < v < pk.n for v in proof):
        raise SignatureError(f"RSA key proof must be {count} integers in [1, n)")
    powers = pk.raw_encrypt(proof, backend)
    bad = sum(1 for s, r in zip(powers, rho) if s != r)
    if bad:
        raise SignatureError(f"RSA key proof: {bad} of {count} e-th roots do not verify; the key "
                             "does not show that x ↦ x^e is a permutation of Z_n* (blinding "
                             "under it could reveal the ids), refused")

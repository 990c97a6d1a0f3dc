"""Prime generation for key generation, from the OS CSPRNG (``secrets``) and gmpy2's primality test,
and the factorisation of p − 1 that proves a generator of Z_p* (what the key owner's fixed-base
obfuscation needs, :mod:`unifl.phe_sdk.paillier`)."""

from __future__ import annotations

import functools
import math
import secrets

import gmpy2
import numpy as np

from ..core.errors import WeakKeyError


def random_prime(bits: int) -> int:
    """A random prime of exactly ``bits`` bits with its top two bits set (so p·q has 2·bits bits).

    Candidates come from ``secrets``; gmpy2.is_prime runs 50 Miller-Rabin rounds (plus a strong
    Lucas test in GMP >= 6.2), far beyond what key sizes >= 512-bit primes need.
    """
    if bits < 16:
        raise ValueError("prime size too small")
    while True:
        cand = secrets.randbits(bits) | (3 << (bits - 2)) | 1
        if gmpy2.is_prime(cand, 50):
            return int(cand)


#: every prime factor of the cofactor t of :func:`random_prime_with_known_order` lies below this
#: bound, so trial division up to it finds them all
SMOOTH_BOUND = 1 << 16


@functools.lru_cache(maxsize=1)
def _small_primes() -> tuple[int, ...]:
    """The primes below :data:`SMOOTH_BOUND` (sieve of Eratosthenes)."""
    sieve = np.ones(SMOOTH_BOUND, dtype=bool)
    sieve[:2] = False
    for i in range(2, math.isqrt(SMOOTH_BOUND) + 1):
        if sieve[i]:
            sieve[i * i::i] = False
    return tuple(int(x) for x in np.nonzero(sieve)[0])


def random_prime_with_known_order(bits: int) -> int:
    """A random prime p of exactly ``bits`` bits (top two bits set, as :func:`random_prime`) with
    p − 1 = 2·t·s for a random prime s of ``bits`` − 16 bits and a random t < 2^16, so that
    :func:`p_minus_1_factors` proves the prime factors of p − 1 (those of 2·t by trial division,
    and s).

    Why: a generator of Z_p* is provable only when the factors of p − 1 are known, and the key
    owner's fixed-base obfuscation needs one (:mod:`unifl.phe_sdk.paillier`).  A large prime
    factor of p − 1 is what the p − 1 factoring method needs absent; s is such a factor.
    Candidates t are drawn at random from the range that keeps p at ``bits`` bits, among those
    whose p survives a sieve by the odd primes below :data:`SIEVE_BOUND`
    (:func:`cofactor_candidates`; about a sixth of them); for about 1 in ln(p)/2 of all t, p is
    prime.
    """
    if bits < 64:
        raise ValueError("prime size too small for a cofactor of known order")
    s_bits = bits - 16          # s ≥ 2^(bits−17), so t < 2^bits / (2·s) ≤ 2^16
    lo_p, hi_p = 3 << (bits - 2), (1 << bits) - 1
    while True:
        s = secrets.randbits(s_bits) | (1 << (s_bits - 1)) | 1
        # Baillie-PSW alone (GMP runs reps − 24 Miller-Rabin rounds after it): s only matters to
        # the generator proof, whose p_minus_1_factors tests it again with 50 rounds
        if not gmpy2.is_prime(s, 24):
            continue
        t_lo = -(-(lo_p - 1) // (2 * s))
        t_hi = (hi_p - 1) // (2 * s)
        ts = cofactor_candidates(s, t_lo, t_hi)
        for _ in range(16 * bits):
            # uniform over the t whose p has no small factor, which hold every t whose p is prime:
            # the primes found are those of a uniform t, with about a sixth of the tests
            t = t_lo + int(ts[secrets.randbelow(len(ts))])
            p = 2 * t * s + 1
            if gmpy2.is_prime(p, 50):
                return int(p)


#: the primes a cofactor's candidates are sieved by (a candidate p = 2·t·s + 1 divisible by one of
#: them is not tested)
SIEVE_BOUND = 1 << 12


def cofactor_candidates(s: int, t_lo: int, t_hi: int) -> np.ndarray:
    """The offsets t − t_lo, for t in [t_lo, t_hi], at which 2·t·s + 1 has no odd prime factor
    ℓ < :data:`SIEVE_BOUND` (ℓ ∤ 2s): those with t ≡ −(2s)^-1 (mod ℓ) are struck out."""
    keep = np.ones(t_hi - t_lo + 1, dtype=bool)
    for ell in _small_primes():
        if ell >= SIEVE_BOUND:
            break
        if ell == 2 or s % ell == 0:
            continue
        keep[(-pow(2 * s, -1, ell) - t_lo) % ell::ell] = False
    return np.flatnonzero(keep)


def p_minus_1_factors(p: int) -> tuple[int, ...] | None:
    """The distinct prime factors of p − 1, when they can be established: trial division by the
    primes below :data:`SMOOTH_BOUND`, and what remains is 1 or passes gmpy2's primality test (50
    rounds).  None otherwise (p − 1 has two or more factors above the bound, as most random primes
    do; :func:`random_prime_with_known_order` makes primes for which this succeeds)."""
    rest = gmpy2.mpz(p - 1)
    found: list[int] = []
    for ell in _small_primes():
        if rest % ell == 0:
            found.append(ell)
            while rest % ell == 0:
                rest //= ell
        if ell * ell > rest:
            break
    if rest == 1:
        return tuple(found)
    if rest < SMOOTH_BOUND * SMOOTH_BOUND or gmpy2.is_prime(rest, 50):
        return tuple(found) + (int(rest),)
    return None


def unit_group_generator(p: int, factors: tuple[int, ...]) -> int:
    """A random generator (primitive root) of Z_p* for a prime p, given the distinct prime factors
    of p − 1: a uniform a in [2, p − 1) with a^((p−1)/ℓ) ≠ 1 (mod p) for every ℓ, which is exactly
    the condition for a to have order p − 1.  About φ(p−1)/(p−1) of the draws qualify."""
    if math.prod(factors) == 1 or any((p - 1) % ell for ell in factors):
        raise ValueError("factors must be the prime factors of p − 1")
    cofactors = [gmpy2.mpz((p - 1) // ell) for ell in factors]
    m = gmpy2.mpz(p)
    while True:
        a = 2 + secrets.randbelow(p - 3)
        # GMP's powmod: Python's pow was about a fifth of a 2048-bit key's generation
        if all(gmpy2.powmod(a, e, m) != 1 for e in cofactors):
            return a


def random_below(n: int, count: int) -> list[int]:
    """``count`` uniform integers in [1, n) from the OS CSPRNG (rejection sampling)."""
    nbytes = (n.bit_length() + 7) // 8
    mask = (1 << n.bit_length()) - 1
    out: list[int] = []
    while len(out) < count:
        need = count - len(out)
        buf = secrets.token_bytes(nbytes * (need + need // 2 + 4))
        for i in range(0, len(buf), nbytes):
            v = int.from_bytes(buf[i:i + nbytes], "little") & mask
            if 0 < v < n:
                out.append(v)
                if len(out) == count:
                    break
    return out


def check_prime_pair(p: int, q: int, scheme: str, min_bits: int, max_bits: int) -> None:
    """Refuse the primes of a private key: equal, a factor above ``max_bits``/2 bits, a product below
    ``min_bits`` bits (all checked first: an oversize "prime" from outside must cost nothing), or a
    factor that is not prime.  Raises :class:`WeakKeyError` naming ``scheme`` and the factor."""
    if p == q:
        raise WeakKeyError(f"{scheme} primes p and q must differ")
    for name, x in (("p", p), ("q", q)):
        if x.bit_length() > max_bits // 2:
            raise WeakKeyError(f"{scheme} factor {name} of {x.bit_length()} bits is above the "
                               f"maximum of {max_bits // 2}")
    if (p * q).bit_length() < min_bits:
        raise WeakKeyError(f"{scheme} key of {(p * q).bit_length()} bits is below the minimum of "
                           f"{min_bits}")
    for name, x in (("p", p), ("q", q)):
        if x < 3 or not gmpy2.is_prime(x, 25):
            raise WeakKeyError(f"{scheme} factor {name} is not prime")

"""Prime generation for key generation, from the OS CSPRNG (``secrets``) and gmpy2's primality test."""

from __future__ import annotations

import secrets

import gmpy2

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

"""Montgomery context of one odd modulus, and the reference MontMult on Python ints.

For an odd modulus m of ``bits`` bits, with L = ceil(bits/64) limbs and R = 2^(64·L):

* ``n0inv``  = -m^-1 mod 2^64   (the CIOS/word-serial reduction constant, "n0'")
* ``r_mod``  = R mod m          (Montgomery form of 1)
* ``r2``     = R^2 mod m        (to enter the domain: MontMult(x, R^2) = x·R mod m)

MontMult(a, b) = a·b·R^-1 mod m for 0 <= a, b < m.  Staying in the domain, x̄ = x·R mod m, a chain of
MontMults computes products with one conversion at each end (UniFL §V-A).
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import numpy.typing as npt

from .errors import OperandError
from .limbs import LIMB_BITS, limb_count, to_limbs

MAX_MODULUS_BITS = 16384


@dataclass(frozen=True, eq=False)
class MontContext:
    """Constants of one modulus, cached per modulus (n, n², p², q², ...)."""

    m: int
    bits: int
    num_limbs: int
    n0inv: int
    r_mod: int
    r2: int
    m_limbs: np.ndarray = field(repr=False)

    @property
    def R(self) -> int:  # noqa: N802 - the paper's name
        """R = 2^(64·L), the Montgomery radix of this modulus."""
        return 1 << (LIMB_BITS * self.num_limbs)

    @property
    def fingerprint(self) -> str:
        """First 16 hex digits of SHA-256 over m's limbs: names a modulus in logs and reports."""
        return hashlib.sha256(self.m.to_bytes(self.num_limbs * 8, "little")).hexdigest()[:16]

    def check_operands(self, limbs: npt.ArrayLike, name: str) -> np.ndarray:
        """Validate an (N, L) operand batch for this modulus; returns it as contiguous uint64."""
        from .limbs import less_than

        arr = np.ascontiguousarray(limbs, dtype=np.uint64)
        if arr.ndim != 2 or arr.shape[1] != self.num_limbs:
            raise OperandError(
                f"{name}: expected shape (N, {self.num_limbs}) for a {self.bits}-bit modulus, "
                f"got {arr.shape}")
        if arr.shape[0] and not less_than(arr, self.m_limbs).all():
            raise OperandError(f"{name}: operand >= modulus")
        return arr

    def to_limbs(self, values: Iterable[int]) -> np.ndarray:
        """Python ints in [0, m) to limbs, with a range check naming the problem."""
        vals = [int(v) for v in values]
        for v in vals:
            if v < 0 or v >= self.m:
                raise OperandError(
                    f"operand {'negative' if v < 0 else '>= modulus'} for a {self.bits}-bit modulus")
        return to_limbs(vals, self.num_limbs)


def check_modulus(m: int) -> int:
    """``m`` as an int once it is usable for Montgomery arithmetic: odd, at least 3 and at most
    :data:`MAX_MODULUS_BITS` bits (R = 2^(64·L) is invertible mod m only for odd m).

    Raises:
        OperandError: naming which condition ``m`` breaks.
    """
    m = int(m)
    if m < 3:
        raise OperandError(f"modulus must be > 2, got {m}")
    if m % 2 == 0:
        raise OperandError("Montgomery arithmetic needs an odd modulus; got an even one")
    if m.bit_length() > MAX_MODULUS_BITS:
        raise OperandError(f"modulus of {m.bit_length()} bits exceeds {MAX_MODULUS_BITS}")
    return m


@functools.lru_cache(maxsize=256)
def mont_context(m: int) -> MontContext:
    """The (cached) Montgomery context of odd modulus ``m``; raises OperandError for even/tiny m."""
    m = check_modulus(m)
    bits = m.bit_length()
    nl = limb_count(bits)
    R = 1 << (LIMB_BITS * nl)
    n0inv = (-pow(m, -1, 1 << 64)) % (1 << 64)
    return MontContext(m=m, bits=bits, num_limbs=nl, n0inv=n0inv, r_mod=R % m, r2=(R * R) % m,
                       m_limbs=to_limbs([m], nl)[0])


def mont_mul_ref(a: int, b: int, m: int) -> int:
    """Reference MontMult on Python ints: a·b·R^-1 mod m with R = 2^(64·ceil(bits(m)/64))."""
    R = 1 << (LIMB_BITS * limb_count(m.bit_length()))
    return a * b * pow(R, -1, m) % m

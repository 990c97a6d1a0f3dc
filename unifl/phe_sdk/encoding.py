"""Fixed-point encoding of signed real numbers into Paillier plaintexts (no cryptography here).

A value x is encoded with an explicit per-array scale s (``scale_bits``) as the integer
v = round(x · 2^s), and v is stored mod n in the centred range: v >= 0 as v, v < 0 as n + v.
Encoded magnitudes must stay <= max_int = floor(n/3) − 1, which leaves a gap of > n/3 between the
positive and the negative range so that overflow is *detected* on decode (a residue in
(max_int, n − max_int) is not a valid encoding) rather than returned as garbage.

Growth is tracked too: every encrypted array carries an upper bound of |v| over its elements, and an
operation whose result could exceed max_int (add, scalar multiply, matmul, sum) raises
:class:`~unifl.core.errors.EncodingOverflowError` before computing.

Scales: any s in [0, MAX_SCALE_BITS] = [0, 1074].  The FL algorithms use 2^24 (vertical LR/LinR,
SecureBoost's gradients) and 2^40 (horizontal LR).  The upper end is where scaling stops adding
precision: the smallest positive float64 is 2^-1074, so at s = 1074 every finite float64 is already
an integer.  Whether a value fits at a scale is decided by max_int alone (the key size), on encode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import numpy.typing as npt

from ..core.errors import EncodingOverflowError, OperandError

DEFAULT_SCALE_BITS = 24
#: The finest scale :func:`encode` takes (see the module docstring).
MAX_SCALE_BITS = 1074


@dataclass(frozen=True)
class Encoded:
    """Encoded integers (Python ints, signed), their scale and the bound max |v|."""

    values: list[int]
    scale_bits: int
    bound: int


def default_scale(values: npt.ArrayLike) -> int:
    """0 for integer data (exact), DEFAULT_SCALE_BITS for anything with a fractional part."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        return 0
    if arr.dtype.kind == "O" and all(isinstance(v, (int, np.integer)) for v in arr.reshape(-1)):
        return 0
    return DEFAULT_SCALE_BITS


def check_scale(scale_bits: int) -> int:
    """``scale_bits`` as an int, if it is an integer in [0, MAX_SCALE_BITS].

    Raises:
        OperandError: not an integer, or outside that range.
    """
    if isinstance(scale_bits, (bool, np.bool_)) or not isinstance(scale_bits, (int, np.integer)):
        raise OperandError(f"scale_bits must be an integer, got {type(scale_bits).__name__}")
    if not 0 <= int(scale_bits) <= MAX_SCALE_BITS:
        raise OperandError(f"scale_bits must lie in [0, {MAX_SCALE_BITS}], got {int(scale_bits)}")
    return int(scale_bits)


def _round_scaled(x: float, scale_bits: int) -> int:
    """round(x·2^s) exactly, halves to even (as ``np.rint``), for any finite float and any s: x is
    the fraction a/2^k of its own bits, so x·2^s = a·2^s / 2^k with no float arithmetic at all."""
    num, den = x.as_integer_ratio()
    return round(Fraction(num << scale_bits, den))


def encode(values: npt.ArrayLike, scale_bits: int, max_int: int) -> Encoded:
    """round(x·2^scale_bits) for every x of ``values`` (array-like of ints or floats), signed,
    halves rounded to even; exact for every float64 and every scale in [0, MAX_SCALE_BITS].

    Raises:
        EncodingOverflowError: some |round(x·2^s)| > max_int.
        OperandError: non-finite values, or a scale outside [0, MAX_SCALE_BITS].
    """
    scale_bits = check_scale(scale_bits)
    arr = np.asarray(values)
    flat = arr.reshape(-1)
    bound: int | None = None                  # max |v|, where NumPy can give it exactly
    if arr.dtype.kind in "iub":
        ints = [int(v) << scale_bits for v in flat.tolist()]
        bound = _int_bound(flat, scale_bits)
    elif arr.dtype.kind == "f":
        if not np.isfinite(flat).all():
            raise OperandError("cannot encode NaN or infinity")
        flat = flat.astype(np.float64)
        scaled = _scaled_floats(flat, scale_bits)
        if np.isfinite(scaled).all():
            # integral floats: |x| and its max are exact, and below 2^63 so is the cast to int64
            bound = int(np.abs(scaled).max()) if scaled.size else 0
            ints = (scaled.astype(np.int64).tolist() if bound < 1 << 63
                    else [int(v) for v in scaled.tolist()])
        else:
            ints = [_round_scaled(v, scale_bits) for v in flat.tolist()]
    elif arr.dtype.kind == "O":
        ints = []
        for v in flat.tolist():
            if isinstance(v, (int, np.integer)):
                ints.append(int(v) << scale_bits)
            else:
                f = float(v)
                if not math.isfinite(f):
                    raise OperandError("cannot encode NaN or infinity")
                ints.append(_round_scaled(f, scale_bits))
    else:
        raise OperandError(f"cannot encode values of dtype {arr.dtype}")
    if bound is None:
        bound = max((abs(v) for v in ints), default=0)
    _check_bound_fits(bound, scale_bits, max_int)
    return Encoded(ints, scale_bits, bound)


def _check_bound_fits(bound: int, scale_bits: int, max_int: int) -> None:
    if bound > max_int:
        raise EncodingOverflowError(
            f"value needs {bound.bit_length()} bits at scale 2^{scale_bits}; the encoding bound "
            f"max_int has {max_int.bit_length()} bits (n/3)")


def _int_bound(values: np.ndarray, scale_bits: int) -> int:
    """max |v|·2^s over an int array, exact (the extremes as Python ints: |INT64_MIN| does not
    fit an int64)."""
    return max(int(values.max()), -int(values.min()), 0) << scale_bits if values.size else 0


def _scaled_floats(values: np.ndarray, scale_bits: int) -> np.ndarray:
    """rint(x·2^s) in float64.  x·2^s is exact in binary floating point while it stays below
    2^1024, and so is the rounding; past that, ldexp gives inf (the caller's exact path)."""
    with np.errstate(over="ignore"):
        return np.rint(np.ldexp(values.astype(np.float64), scale_bits))


def _int64_scaled(arr: np.ndarray, scale_bits: int) -> tuple[np.ndarray, int] | None:
    """round(x·2^s) for every x of an int or float array, as int64 of its shape, and their max
    |v|, where NumPy gives them exactly: every value finite and every |v| below 2^63.  None
    otherwise."""
    if scale_bits > 62:
        return None
    if arr.dtype.kind in "iub":
        bound = _int_bound(arr, scale_bits)
        if bound >= 1 << 63:
            return None
        return arr.astype(np.int64) * np.int64(1 << scale_bits), bound
    if arr.dtype.kind == "f" and np.isfinite(arr).all():
        scaled = _scaled_floats(arr, scale_bits)
        # integral floats below 2^63 in magnitude convert to int64 exactly (inf fails the test)
        top = float(np.abs(scaled).max()) if scaled.size else 0.0
        if top < 2.0 ** 63:
            return scaled.astype(np.int64), int(top)
    return None


def encode_array(values: npt.ArrayLike, scale_bits: int, max_int: int) -> np.ndarray:
    """:func:`encode`'s integers in an array of the values' shape: ``int64`` where every one fits
    (features and gradients at the SDK's scales: no Python int is made), else an object array of
    Python ints.  The same integers, and the same errors, as :func:`encode`."""
    scale_bits = check_scale(scale_bits)
    arr = np.asarray(values)
    fast = _int64_scaled(arr, scale_bits)
    if fast is None:
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = encode(arr, scale_bits, max_int).values
        return out
    ints, bound = fast
    _check_bound_fits(bound, scale_bits, max_int)
    return ints


def to_residues(ints: list[int], n: int) -> list[int]:
    """Signed ints to residues mod n (negative v -> n + v)."""
    return [v % n for v in ints]


def from_residues(residues: list[int], n: int, max_int: int) -> list[int]:
    """Residues mod n back to signed ints; raises EncodingOverflowError in the forbidden gap."""
    out = []
    for r in residues:
        if r <= max_int:
            out.append(r)
        elif r >= n - max_int:
            out.append(r - n)
        else:
            raise EncodingOverflowError(
                "decrypted value lies outside the encoding range (|v| > n/3): an operation "
                "overflowed")
    return out


def decode(ints: list[int], scale_bits: int, shape: tuple[int, ...] | None = None,
           exact: bool = False) -> np.ndarray:
    """Signed ints at scale 2^scale_bits to a float64 array (or Python ints with ``exact`` and s=0)."""
    if exact or scale_bits == 0:
        vals: list[Fraction] | list[int] = (
            [Fraction(v, 1 << scale_bits) for v in ints] if scale_bits else ints)
        out = np.empty(len(vals), dtype=object)
        out[:] = vals
    else:
        try:
            # int / int is correctly rounded in Python whatever the operands' size; only a
            # quotient beyond the float64 range fails
            out = np.array([math.ldexp(v, -scale_bits) if abs(v) < (1 << 1000) else
                            v / (1 << scale_bits) for v in ints], dtype=np.float64)
        except OverflowError:
            raise EncodingOverflowError(
                f"a decrypted value at scale 2^-{scale_bits} exceeds the float64 range; decode "
                "it exactly (exact=True)") from None
    return out.reshape(shape) if shape is not None else out


def check_bound(bound: int, max_int: int, what: str) -> int:
    """Raise EncodingOverflowError when a result bound exceeds max_int; else return it."""
    if bound > max_int:
        raise EncodingOverflowError(
            f"{what} could reach {bound.bit_length()} bits, beyond the encoding bound of "
            f"{max_int.bit_length()} bits (n/3); decrypt and re-encrypt, or use a smaller scale")
    return bound

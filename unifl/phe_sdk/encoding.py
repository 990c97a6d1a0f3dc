"""Fixed-point encoding of signed real numbers into Paillier plaintexts (no cryptography here).

A value x is encoded with an explicit per-array scale s (``scale_bits``) as the integer
v = round(x · 2^s), and v is stored mod n in the centred range: v >= 0 as v, v < 0 as n + v.
Encoded magnitudes must stay <= max_int = floor(n/3) − 1, which leaves a gap of > n/3 between the
positive and the negative range so that overflow is *detected* on decode (a residue in
(max_int, n − max_int) is not a valid encoding) rather than returned as garbage.

Growth is tracked too: every encrypted array carries an upper bound of |v| over its elements, and an
operation whose result could exceed max_int (add, scalar multiply, matmul, sum) raises
:class:`~unifl.core.errors.EncodingOverflowError` before computing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..core.errors import EncodingOverflowError, OperandError

DEFAULT_SCALE_BITS = 24


@dataclass(frozen=True)
class Encoded:
    """Encoded integers (Python ints, signed), their scale and the bound max |v|."""

    values: list[int]
    scale_bits: int
    bound: int


def default_scale(values) -> int:
    """0 for integer data (exact), DEFAULT_SCALE_BITS for anything with a fractional part."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iub":
        return 0
    if arr.dtype.kind == "O" and all(isinstance(v, (int, np.integer)) for v in arr.reshape(-1)):
        return 0
    return DEFAULT_SCALE_BITS


def encode(values, scale_bits: int, max_int: int) -> Encoded:
    """round(x·2^scale_bits) for every x of ``values`` (array-like of ints or floats), signed.

    Raises:
        EncodingOverflowError: some |round(x·2^s)| > max_int.
        OperandError: non-finite values.
    """
    if scale_bits < 0:
        raise OperandError("scale_bits must be >= 0")
    arr = np.asarray(values)
    flat = arr.reshape(-1)
    if arr.dtype.kind in "iub":
        ints = [int(v) << scale_bits for v in flat.tolist()]
    elif arr.dtype.kind == "f":
        if not np.isfinite(flat).all():
            raise OperandError("cannot encode NaN or infinity")
        # x·2^s is exact in binary floating point; rint then int() is exact too
        scaled = np.rint(np.ldexp(flat.astype(np.float64), scale_bits))
        ints = [int(v) for v in scaled.tolist()]
    elif arr.dtype.kind == "O":
        ints = []
        for v in flat.tolist():
            if isinstance(v, (int, np.integer)):
                ints.append(int(v) << scale_bits)
            else:
                f = float(v)
                if not math.isfinite(f):
                    raise OperandError("cannot encode NaN or infinity")
                ints.append(round(math.ldexp(f, scale_bits)))
    else:
        raise OperandError(f"cannot encode values of dtype {arr.dtype}")
    bound = max((abs(v) for v in ints), default=0)
    if bound > max_int:
        raise EncodingOverflowError(
            f"value needs {bound.bit_length()} bits at scale 2^{scale_bits}; the encoding bound "
            f"max_int has {max_int.bit_length()} bits (n/3)")
    return Encoded(ints, scale_bits, bound)


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


def decode(ints: list[int], scale_bits: int, shape=None, exact: bool = False) -> np.ndarray:
    """Signed ints at scale 2^scale_bits to a float64 array (or Python ints with ``exact`` and s=0)."""
    if exact or scale_bits == 0:
        if scale_bits:
            from fractions import Fraction
            vals = [Fraction(v, 1 << scale_bits) for v in ints]
        else:
            vals = ints
        out = np.empty(len(vals), dtype=object)
        out[:] = vals
    else:
        out = np.array([math.ldexp(v, -scale_bits) if abs(v) < (1 << 1000) else
                        float(v) / (1 << scale_bits) for v in ints], dtype=np.float64)
    return out.reshape(shape) if shape is not None else out


def check_bound(bound: int, max_int: int, what: str) -> int:
    """Raise EncodingOverflowError when a result bound exceeds max_int; else return it."""
    if bound > max_int:
        raise EncodingOverflowError(
            f"{what} could reach {bound.bit_length()} bits, beyond the encoding bound of "
            f"{max_int.bit_length()} bits (n/3); decrypt and re-encrypt, or use a smaller scale")
    return bound

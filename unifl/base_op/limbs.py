"""The canonical big-number batch layout: little-endian 64-bit limbs, NumPy ``uint64`` of shape (N, L).

Python ints appear only at the API edges; conversion goes through ``int.to_bytes`` /
``np.frombuffer`` once per element, never a Python loop per limb.  CGBN's 32-bit limbs and OpenCL
``ulong`` buffers are byte-compatible with this layout.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import numpy as np

from ..errors import OperandError

LIMB_BITS = 64
LIMB_BYTES = 8


def limb_count(bits: int) -> int:
    """Number of 64-bit limbs needed for a value of ``bits`` bits (at least one)."""
    return max(1, -(-bits // LIMB_BITS))


def to_limbs(values: Iterable[int], num_limbs: int) -> np.ndarray:
    """Pack non-negative Python ints into an (N, L) little-endian uint64 array.

    Raises:
        OperandError: a value is negative or needs more than ``num_limbs`` limbs.
    """
    width = num_limbs * LIMB_BYTES
    try:
        buf = b"".join([int(v).to_bytes(width, "little") for v in values])
    except OverflowError as exc:
        raise OperandError(
            f"operand is negative or wider than {num_limbs * LIMB_BITS} bits") from exc
    return np.frombuffer(buf, dtype="<u8").reshape(-1, num_limbs).astype(np.uint64, copy=True)


def from_limbs(limbs: np.ndarray) -> list[int]:
    """Unpack an (N, L) uint64 array into a list of Python ints."""
    limbs = np.ascontiguousarray(limbs, dtype="<u8")
    if limbs.ndim != 2:
        raise OperandError(f"limb arrays are 2-D (N, L), got shape {limbs.shape}")
    width = limbs.shape[1] * LIMB_BYTES
    raw = limbs.tobytes()
    return [int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width)]


def less_than(limbs: np.ndarray, bound_limbs: np.ndarray) -> np.ndarray:
    """Vectorised ``limbs[i] < bound`` (lexicographic from the top limb), as a bool array of length N.

    ``bound_limbs`` is one value (shape (L,)) or one per row (shape (N, L)).
    """
    a = np.asarray(limbs, dtype=np.uint64)
    b = np.broadcast_to(np.asarray(bound_limbs, dtype=np.uint64), a.shape)
    neq = a != b
    # index of the most significant differing limb; rows with no difference are equal (not less)
    any_diff = neq.any(axis=1)
    top = a.shape[1] - 1 - np.argmax(neq[:, ::-1], axis=1)
    rows = np.arange(a.shape[0])
    return any_diff & (a[rows, top] < b[rows, top])


def as_int_list(values: int | Sequence[int], n: int | None = None) -> list[int]:
    """Normalise an int or a sequence of ints into a list (broadcasting a scalar to ``n``)."""
    if isinstance(values, (int, np.integer)):
        return [int(values)] * (1 if n is None else n)
    out = [int(v) for v in values]
    return out

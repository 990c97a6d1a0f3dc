"""Exponent layout shared by every layer and backend: exponent batches as limb arrays, window widths,
fixed-window digits.

An exponent batch has shape (N, Le) (one exponent per element) or (1, Le) (one shared by the batch),
little-endian 64-bit limbs like every other batch (:mod:`unifl.core.limbs`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .errors import OperandError
from .limbs import limb_count, to_limbs


def exp_limbs(exps: int | Iterable[int]) -> np.ndarray:
    """Exponents (one int, or a sequence of non-negative ints) as a limb array (N|1, Le)."""
    vals = [int(exps)] if isinstance(exps, (int, np.integer)) else [int(e) for e in exps]
    if any(e < 0 for e in vals):
        raise OperandError("exponents must be non-negative")
    width = limb_count(max((e.bit_length() for e in vals), default=1))
    return to_limbs(vals, width)


def exp_bits(exps: np.ndarray) -> int:
    """The largest bit length among exponent rows of limbs ((N, Le), or (K, N, Le): any leading
    shape), 0 when all are zero; read from the top non-zero limb column, without Python ints."""
    e = np.asarray(exps, dtype=np.uint64)
    e = e.reshape(-1, e.shape[-1])
    cols = np.flatnonzero(e.any(axis=0))
    if cols.size == 0:
        return 0
    top = int(cols[-1])
    return 64 * top + int(e[:, top].max()).bit_length()


def check_covered(exps: np.ndarray, covered: int) -> None:
    """Refuses (OperandError) a fixed-base exponent longer than the ``covered`` bits its comb table
    covers: the table has digits for those bits only, so a longer exponent would be cut silently."""
    keep = np.array([(1 << max(0, min(64, covered - 64 * i))) - 1 for i in range(exps.shape[1])],
                    dtype=np.uint64)
    over = np.flatnonzero((exps & ~keep).any(axis=1)) if exps.size else np.empty(0, np.intp)
    if len(over):
        raise OperandError(f"fixed-base exponent #{int(over[0])} is longer than the {covered} bits "
                           "the comb table covers")


def window_bits(exp_bits: int) -> int:
    """Window width minimising squarings + table + multiplications for an exponent of this length."""
    for limit, w in ((8, 1), (24, 3), (80, 4), (240, 5), (672, 6), (2000, 7)):
        if exp_bits <= limit:
            return w
    return 8


def window_digits(exps: np.ndarray, w: int, num_windows: int) -> np.ndarray:
    """Fixed-window digits of every exponent, shape (num_windows, N), most significant first:
    row j holds bits [w·(num_windows−1−j), w·(num_windows−j)) of each exponent."""
    n, le = exps.shape
    bits = np.unpackbits(exps.astype("<u8").view(np.uint8).reshape(n, le * 8), axis=1,
                         bitorder="little")  # (N, 64·Le), bit k at column k
    total = num_windows * w
    if bits.shape[1] < total:
        bits = np.concatenate([bits, np.zeros((n, total - bits.shape[1]), np.uint8)], axis=1)
    bits = bits[:, :total].reshape(n, num_windows, w).astype(np.int64)
    weights = 1 << np.arange(w, dtype=np.int64)
    return (bits * weights).sum(axis=2).T[::-1]

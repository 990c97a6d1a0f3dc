"""Quantised gradients and packed plaintexts of SecureBoost: what the guest encrypts and how the
host's histogram cells share a ciphertext.

* quantise: ĝ = round(g·2^s), ĥ = round(h·2^s) (s = ``scale_bits``), so every histogram sum is an
  exact integer;
* one plaintext per row, ĝ + 2^64·ĥ (:func:`pack_gh`): while |Σĝ| < 2^63
  (:func:`check_pack_capacity`) a sum of packed rows separates into (Σĝ, Σĥ) exactly
  (:func:`unpack_gh`);
* histogram cells of :func:`cell_bits` bits, K = :func:`cells_per_ciphertext` of them folded into
  one ciphertext by Horner's rule on ciphertexts (:func:`compress_cells`) and split again after
  decryption (:func:`split_cells`).
"""

from __future__ import annotations

import numpy as np

from ...core.errors import ConfigError
from ...phe_sdk import EncryptedArray, paillier
from ..params import BoostParams

__all__ = ["PACK_BITS", "quantise", "check_pack_capacity", "pack_gh", "unpack_gh", "cell_bits",
           "cells_per_ciphertext", "compress_cells", "split_cells"]

#: the width of ĝ's slot in a packed plaintext ĝ + 2^64·ĥ
PACK_BITS = 64
#: BoostParams' default scale, for the helpers below when called without one
_SCALE = BoostParams.model_fields["scale_bits"].default


def quantise(v: np.ndarray, scale_bits: int = _SCALE) -> np.ndarray:
    """round(v·2^scale_bits) as int64, halves to even (|v| <= 1 here: gradients and hessians)."""
    return np.rint(np.ldexp(v, scale_bits)).astype(np.int64)


def check_pack_capacity(n_rows: int, scale_bits: int) -> None:
    """Refuse a (rows, scale) pair whose gradient sums could leave ĝ's 64-bit slot: |ĝ| <= 2^s per
    row, so |Σĝ| < 2^(s + bits(n)) must stay below 2^63 for :func:`unpack_gh` to separate Σĝ from
    Σĥ exactly.

    Raises:
        ConfigError: naming the scale, the row count and the largest scale that fits.
    """
    if scale_bits + int(n_rows).bit_length() > PACK_BITS - 1:
        raise ConfigError(f"secureboost: scale_bits = {scale_bits} with {n_rows} training rows "
                          f"lets a gradient sum reach 2^{scale_bits + int(n_rows).bit_length()}, "
                          f"beyond the 2^{PACK_BITS - 1} of its packed slot; use scale_bits <= "
                          f"{PACK_BITS - 1 - int(n_rows).bit_length()}")


def pack_gh(gi: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """One plaintext per row: ĝ + 2^64·ĥ (object array of Python ints).  While
    :func:`check_pack_capacity` holds, |Σĝ| < 2^63, so the two sums separate exactly
    (:func:`unpack_gh`)."""
    out = np.empty(len(gi), dtype=object)
    out[:] = [int(g) + (int(h) << PACK_BITS) for g, h in zip(gi.tolist(), hi.tolist())]
    return out


def unpack_gh(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of the packing for sums: (Σĝ, Σĥ) as int64."""
    half, full = 1 << (PACK_BITS - 1), 1 << PACK_BITS
    g = [((v + half) % full) - half for v in values]
    h = [(v - gv) >> PACK_BITS for v, gv in zip(values, g)]
    return np.array(g, dtype=np.int64), np.array(h, dtype=np.int64)


def cell_bits(n_rows: int, scale_bits: int = _SCALE) -> int:
    """Width of one histogram cell Σ(ĝ + 2^64 ĥ) over at most ``n_rows`` rows, sign included:
    |Σĝ| < n·2^s < 2^63 and Σĥ <= n·2^(s−2)."""
    return PACK_BITS + scale_bits + n_rows.bit_length() + 2


def cells_per_ciphertext(pk: paillier.PublicKey, width: int) -> int:
    """How many ``width``-bit signed cells one plaintext holds (staying below max_int = n/3)."""
    return max(1, (pk.max_int.bit_length() - 2) // width)


def compress_cells(cells: EncryptedArray, width: int, pk: paillier.PublicKey) -> EncryptedArray:
    """Pack K = cells_per_ciphertext cells per ciphertext by Horner's rule on ciphertexts:
    [[c_0 + 2^w c_1 + ... + 2^{(K−1)w} c_{K−1}]] -- K−1 shifts by a w-bit exponent and adds,
    far cheaper than re-randomising and decrypting every cell (FATE's cipher compression)."""
    per = cells_per_ciphertext(pk, width)
    count = cells.size
    groups = -(-count // per)
    pad = groups * per - count
    if pad:  # E(0) fillers: any ciphertext to the power 0
        cells = EncryptedArray.concatenate([cells, cells[:1] * np.zeros(pad, np.int64)])
    grid = cells.reshape(groups, per)
    acc = grid[:, per - 1]
    shift = np.array(1 << width, dtype=object)
    for k in range(per - 2, -1, -1):
        acc = acc * shift + grid[:, k]
    return acc


def split_cells(values: list[int], width: int, per: int) -> list[int]:
    """Inverse of :func:`compress_cells` after decryption: the signed cells, in order."""
    half, full = 1 << (width - 1), 1 << width
    out = []
    for v in values:
        for _ in range(per):
            c = ((v + half) % full) - half
            out.append(c)
            v = (v - c) >> width
    return out

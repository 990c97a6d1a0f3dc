"""Test vectors and result recording shared by the cocotb testbenches of the MontMult engine and its
vendor wrappers (rtl/tb/test_*.py): the same moduli and operand pairs reach every design."""

from __future__ import annotations

import json
import os
import secrets

MASK64 = (1 << 64) - 1


def random_modulus(bits: int) -> int:
    """An odd modulus of exactly ``bits`` bits from ``secrets``."""
    return (1 << (bits - 1)) | secrets.randbits(bits - 1) | 1


def moduli(bits: int) -> list[int]:
    """A random modulus first, then the edge moduli: all ones, 2^(bits-1)+1, and a dense low word
    over a sparse middle; all odd, full size."""
    return [random_modulus(bits), (1 << bits) - 1, (1 << (bits - 1)) + 1,
            (1 << (bits - 1)) | MASK64 | 1]


def edge_pairs(m: int) -> list[tuple[int, int]]:
    """Operand pairs at the edges of [0, m): 0, 1, m-1, m-2, a full low word, m/2, 2."""
    return [(0, 0), (0, m - 1), (1, 1), (1, m - 1), (m - 1, m - 1), (m - 2, m - 1),
            (MASK64, m - 1), (m >> 1, m - 1), (m - 1, 2)]


def record(key: str, value: object) -> None:
    """Merge one measurement into the JSON file named by UNIFL_TB_RESULT (the pytest driver reads
    it); nothing when the variable is unset."""
    path = os.environ.get("UNIFL_TB_RESULT")
    if not path:
        return
    data = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    data[key] = value
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1)

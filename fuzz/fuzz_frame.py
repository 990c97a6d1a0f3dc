"""Fuzz ``unifl.phe_sdk.serialize.array_from_bytes``: the ciphertext frame parser (peer input).

Input layout: one mode byte, then the frame.  The frame carries a CRC-32 and the key's fingerprint,
which random mutation almost never gets right, so the mode byte lets the fuzzer ask for them to be
repaired and reach the header, shape and ciphertext checks behind them:

* bit 0: overwrite the 16 fingerprint bytes with the test key's (when the frame is long enough);
* bit 1: recompute the trailing CRC-32 over everything before it.

Seeds: real frames (several shapes, scales and signs) under the fixed 1024-bit test key, each with
every mode.  Expected outcomes: a parsed array, or a UniflError subclass.
"""

from __future__ import annotations

import struct
import zlib

import atheris
import numpy as np

with atheris.instrument_imports(include=["unifl"]):  # coverage feedback from UniFL
    import _common
    from unifl.phe_sdk import serialize
    from unifl.phe_sdk.array import EncryptedArray

PK, SK = _common.paillier_keys()
FP16 = bytes.fromhex(PK.fingerprint)[:16]
N_LIMBS = PK.nsquare_ctx.num_limbs


def repair(mode: int, frame: bytes) -> bytes:
    """Apply the fix-ups the mode byte asks for (see the module docstring)."""
    buf = bytearray(frame)
    if mode & 1 and len(buf) >= 24:
        buf[8:24] = FP16
    if mode & 2 and len(buf) >= 4:
        buf[-4:] = struct.pack("<I", zlib.crc32(bytes(buf[:-4])))
    return bytes(buf)


def test_one(data: bytes) -> None:
    if not data:
        return
    frame = repair(data[0], data[1:])
    try:
        arr = serialize.array_from_bytes(frame, PK)
    except _common.EXPECTED:
        return
    # what parsed must be consistent: the shape the header claims is the data that was checked
    count = int(np.prod(arr.shape, dtype=object))
    if arr.limbs.shape != (count, N_LIMBS):
        raise AssertionError(f"parsed shape {arr.shape} but {arr.limbs.shape[0]} ciphertexts")


def seeds() -> list[bytes]:
    arrays = [np.array([1.5, -2.25, 0.0]), np.arange(6, dtype=np.int64).reshape(2, 3),
              np.array(7), np.zeros((0,)), np.array([[-(2 ** 40)], [2 ** 40]])]
    frames = [serialize.array_to_bytes(EncryptedArray.encrypt(PK, a)) for a in arrays]
    return [bytes([mode]) + f for f in frames for mode in (0, 1, 2, 3)]


if __name__ == "__main__":
    _common.main(test_one, seeds, default_flags=["-max_len=4096"])

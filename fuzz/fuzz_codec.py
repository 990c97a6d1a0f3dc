"""Fuzz ``unifl.app.codec.decode``: every message a party receives from a peer goes through it.

The input is the message itself.  The registry of known keys (``keys=``) holds the fixed 1024-bit
test key, so an ``E`` value naming it reaches the ciphertext frame parser; ``on_key`` records keys
as a party would.  Seeds: one encoded message per value type (None, bools, ints of every size and
sign, float, str, bytes, list, tuple, dict, numpy arrays of every carried dtype including empty and
0-d ones, a Paillier and an RSA public key, an EncryptedArray) and a nested message holding them
all.  Expected outcomes: a decoded value, or a UniflError subclass.
"""

from __future__ import annotations

import atheris
import numpy as np

with atheris.instrument_imports(include=["unifl"]):  # coverage feedback from UniFL
    import _common
    from unifl.app import codec
    from unifl.phe_sdk.array import EncryptedArray

PK, SK = _common.paillier_keys()
RPK, _ = _common.rsa_keys()
FP16 = codec.fingerprint16(PK)


def lookup(fp: bytes):
    return PK if bytes(fp) == FP16 else None


def test_one(data: bytes) -> None:
    seen = []
    try:
        codec.decode(data, lookup, on_key=seen.append)
    except _common.EXPECTED:
        return


def seeds() -> list[bytes]:
    arrays = [np.arange(6, dtype=d).reshape(2, 3) for d in
              ("<i1", "<i2", "<i4", "<i8", "<u1", "<u2", "<u4", "<u8", "<f4", "<f8")]
    arrays += [np.array([True, False]), np.zeros((0, 3)), np.array(3.5), np.zeros((1, 1, 1, 2))]
    values = [None, True, False, 0, 1, -1, 2 ** 200, -(2 ** 70), 1.5, float("nan"), "", "héllo",
              b"", b"\x00\xff", [], [1, [2, [3]]], (), (1, "a"), {}, {"a": 1, "b": [None]},
              PK, RPK, EncryptedArray.encrypt(PK, np.array([1.5, -2.0]))] + arrays
    msgs = [codec.encode(v) for v in values]
    msgs.append(codec.encode({"key": PK, "grad": EncryptedArray.encrypt(PK, np.array([[1, 2]])),
                              "rsa": RPK, "meta": (1, 2.0, "x", b"y", None, True),
                              "arrays": arrays[:3]}))
    return msgs


if __name__ == "__main__":
    _common.main(test_one, seeds, default_flags=["-max_len=8192"])

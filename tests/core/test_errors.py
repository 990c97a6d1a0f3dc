"""Bad input gets a clear, typed error naming the problem."""

from __future__ import annotations

import numpy as np
import pytest

from unifl.mod_op import ints
import unifl
from unifl.core.errors import (BackendUnavailable, EncodingOverflowError, KeyMismatchError,
                          OperandError, SerializationError, WeakKeyError)
from unifl.phe_sdk import serialize

from tests.helpers.keys import paillier_keypair

BACKENDS = ["cpu", "native"]


@pytest.mark.parametrize("name", BACKENDS)
def test_even_or_tiny_modulus_rejected(name):
    be = unifl.backend(name)
    for m in (2 ** 64, 1000, 2, 0, -7):
        with pytest.raises(ValueError, match="odd|> 2"):
            ints.mont_mul(be, [1], [1], m)
    with pytest.raises(OperandError, match="odd modulus"):
        ints.mod_exp(be, [3], 5, 2 ** 128)


@pytest.mark.parametrize("name", BACKENDS)
def test_operands_out_of_range_rejected(name):
    be = unifl.backend(name)
    m = 2 ** 127 - 1
    for bad in (m, m + 1, -1, 2 ** 200):
        with pytest.raises(ValueError, match="modulus|negative"):
            ints.mont_mul(be, [bad], [1], m)
        with pytest.raises(ValueError):
            ints.mod_mul(be, [1], [bad], m)
        with pytest.raises(ValueError):
            ints.mod_exp(be, [bad], 3, m)
    with pytest.raises(ValueError, match="negative exponent"):
        ints.mod_exp(be, [2], -1, m)
    with pytest.raises(ValueError, match="differ in length"):
        ints.mont_mul(be, [1, 2], [1], m)


def test_unknown_backend_says_why():
    with pytest.raises(BackendUnavailable, match="unknown backend 'nope'.*registered"):
        unifl.backend("nope")


def test_weak_keys_rejected():
    with pytest.raises(WeakKeyError, match="minimum"):
        unifl.keygen(512)
    with pytest.raises(WeakKeyError, match="minimum"):
        unifl.PublicKey((2 ** 255 - 19) * (2 ** 127 - 1))
    with pytest.raises(WeakKeyError, match="odd"):
        unifl.PublicKey(2 ** 1500)
    p = unifl.phe_sdk.primes.random_prime(600)
    with pytest.raises(WeakKeyError, match="differ"):
        unifl.PrivateKey(p, p)
    with pytest.raises(WeakKeyError, match="not prime"):
        unifl.PrivateKey(p, p + 2 if (p + 2) % 3 == 0 else p * 3)
    with pytest.raises(WeakKeyError, match="distinct primes"):
        unifl.PublicKey(p * p)
    with pytest.raises(WeakKeyError):
        unifl.phe_sdk.rsa.keygen(768)
    with pytest.raises(WeakKeyError, match="public exponent"):
        unifl.phe_sdk.rsa.PublicKey(p * unifl.phe_sdk.primes.random_prime(600), 4)


def test_raw_plaintext_range():
    pk, _ = paillier_keypair(1024)
    with pytest.raises(OperandError, match=r"\[0, n\)"):
        pk.raw_encrypt([pk.n])
    with pytest.raises(OperandError):
        pk.raw_encrypt([-1])
    with pytest.raises(OperandError, match="r values"):
        pk.raw_encrypt([1, 2], r_values=[3])


def test_foreign_key_rejected():
    pk, sk = paillier_keypair(1024)
    pk2, sk2 = paillier_keypair(2048)
    a = unifl.EncryptedArray.encrypt(pk, np.arange(3))
    b = unifl.EncryptedArray.encrypt(pk2, np.arange(3))
    with pytest.raises(KeyMismatchError):
        a + b
    with pytest.raises(KeyMismatchError):
        a.decrypt(sk2)
    frame = serialize.array_to_bytes(a)
    with pytest.raises(KeyMismatchError, match="another public key"):
        serialize.array_from_bytes(frame, pk2)


def test_corrupted_and_truncated_frames_rejected():
    pk, sk = paillier_keypair(1024)
    frame = serialize.array_to_bytes(unifl.EncryptedArray.encrypt(pk, np.array([1.0, 2.0])))
    assert np.allclose(serialize.array_from_bytes(frame, pk).decrypt(sk), [1, 2])
    with pytest.raises(SerializationError, match="truncated|checksum"):
        serialize.array_from_bytes(frame[:-9], pk)
    with pytest.raises(SerializationError, match="truncated"):
        serialize.array_from_bytes(frame[:10], pk)
    flipped = bytearray(frame)
    flipped[100] ^= 1
    with pytest.raises(SerializationError, match="checksum"):
        serialize.array_from_bytes(bytes(flipped), pk)
    with pytest.raises(SerializationError, match="magic"):
        serialize.array_from_bytes(b"XXXX" + frame[4:], pk)
    wrong_version = frame[:4] + (99).to_bytes(2, "little") + frame[6:]
    with pytest.raises(SerializationError, match="version 99"):
        serialize.array_from_bytes(wrong_version, pk)
    with pytest.raises(SerializationError, match="version"):
        serialize.key_from_json('{"unifl": 7, "kind": "paillier.public", "n": "ff"}')
    with pytest.raises(SerializationError, match="field 'n'"):
        serialize.key_from_json('{"unifl": 1, "kind": "paillier.public"}')
    with pytest.raises(SerializationError, match="does not parse"):
        serialize.key_from_json("{not json")


def test_frame_with_out_of_range_ciphertext_rejected():
    import struct
    import zlib
    pk, _ = paillier_keypair(1024)
    frame = bytearray(serialize.array_to_bytes(unifl.EncryptedArray.encrypt(pk, np.array([5]))))
    limbs = pk.nsquare_ctx.num_limbs
    payload_at = len(frame) - 4 - 8 * limbs
    frame[payload_at:payload_at + 8 * limbs] = b"\xff" * (8 * limbs)   # >= n²
    body = bytes(frame[:-4])
    forged = body + struct.pack("<I", zlib.crc32(body))
    with pytest.raises(SerializationError, match=r"outside \[1, n²\)"):
        serialize.array_from_bytes(forged, pk)


def test_overflow_detected():
    pk, sk = paillier_keypair(1024)
    with pytest.raises(EncodingOverflowError, match="bound"):
        unifl.EncryptedArray.encrypt(pk, np.array([pk.max_int + 1], dtype=object))
    big = unifl.EncryptedArray.encrypt(pk, np.array([pk.max_int // 2 + 1], dtype=object))
    with pytest.raises(EncodingOverflowError, match="sum"):
        big + big
    with pytest.raises(EncodingOverflowError, match="product"):
        big * 3
    x = unifl.EncryptedArray.encrypt(pk, np.array([pk.max_int // 4], dtype=object))
    with pytest.raises(EncodingOverflowError, match="matmul"):
        x @ np.array([[5]])
    with pytest.raises(EncodingOverflowError, match="sum"):
        unifl.EncryptedArray.encrypt(pk, np.array([pk.max_int // 3] * 4, dtype=object)).sum()
    with pytest.raises(unifl.OperandError, match="NaN"):
        unifl.EncryptedArray.encrypt(pk, np.array([np.nan]))


def test_overflow_detected_on_decode():
    """A raw ciphertext of a value in the forbidden gap (n/3, 2n/3) is refused on decode."""
    pk, sk = paillier_keypair(1024)
    c = pk.ciphertext_limbs(pk.raw_encrypt([pk.n // 2]))
    arr = unifl.EncryptedArray(pk, c, (1,), 0, 0)
    with pytest.raises(EncodingOverflowError, match="outside the encoding range"):
        arr.decrypt(sk)


def test_multiplying_ciphertexts_is_a_type_error():
    pk, _ = paillier_keypair(1024)
    a = unifl.EncryptedArray.encrypt(pk, np.arange(2))
    with pytest.raises(TypeError, match="cannot multiply two ciphertexts"):
        a * a
    with pytest.raises(OperandError, match="do not align"):
        a @ np.ones((3, 2))

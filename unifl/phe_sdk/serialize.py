"""Versioned, pickle-free serialization of keys and encrypted arrays.

Keys are JSON objects with integers as hexadecimal strings::

    {"unifl": 1, "kind": "paillier.public", "n": "c0ffee..."}

Encrypted arrays are one binary frame (all integers little-endian)::

    magic   4 bytes   b"UFLC"
    version u16       FRAME_VERSION
    flags   u16       reserved, 0
    key fp  16 bytes  the first 16 bytes of the public key's SHA-256 fingerprint
    scale   i32       scale_bits
    ndim    u16, limbs u16  (L of n²)
    shape   ndim × u64
    bound   u32 length + that many bytes (the overflow bound, unsigned)
    payload N × L × u64 ciphertexts, *plain* (not Montgomery) so any backend can read them
    crc32   u32       over everything before it

Decoding checks magic, version, length, checksum, key fingerprint, that the shape's element count
(computed with Python ints, at most 2^63 − 1, at most MAX_NDIM dimensions) matches the payload
exactly and that every ciphertext lies in [1, n²), and raises
:class:`~unifl.core.errors.SerializationError` or :class:`~unifl.core.errors.KeyMismatchError` naming the
problem.  Every ciphertext must also be a unit mod n² (gcd(c, n) = 1), else
:class:`~unifl.core.errors.InvalidCiphertextError`: a multiple of p or q would let whoever gets the key
owner to decrypt it factor n.  The CRC detects corruption, not tampering: an authenticated channel
(mutual TLS) protects frames in transit.

Keys read by :func:`key_from_json` are checked for size (and RSA's e = 65537) before any primality
test or exponentiation: the party's floor here, the SDK's limits first thing in the key constructors.  Every key-parameter
refusal (too small, above the party's floor, above MAX_KEY_BITS = 8192 bits, e != 65537) is a
:class:`~unifl.core.errors.WeakKeyError`; a malformed document is a SerializationError.
"""

from __future__ import annotations

import json
import re
import struct
import zlib
from typing import Any, Sequence, Union

import numpy as np

from ..core.backend import Backend
from ..core.limbs import less_than
from ..core.errors import KeyMismatchError, SerializationError, WeakKeyError
from . import paillier, rsa
from .array import EncryptedArray
from .ciphertexts import CiphertextBatch

FORMAT_VERSION = 1
FRAME_MAGIC = b"UFLC"
FRAME_VERSION = 1
_HEAD = struct.Struct("<4sHH16siHH")
#: most dimensions a received array may have (NumPy's own limit is 32 or 64 by version)
MAX_NDIM = 32
_INT64_MAX = (1 << 63) - 1
_HEX = re.compile(r"[0-9a-fA-F]{1,8192}")

#: every key this module reads and writes
Key = Union[paillier.PublicKey, paillier.PrivateKey, rsa.PublicKey, rsa.PrivateKey]


def element_count(shape: Sequence[int], what: str = "array") -> int:
    """Number of elements of a received ``shape``, computed with Python ints (no int64 wrap).

    Refuses more than MAX_NDIM dimensions, and shapes whose element count -- or the product of
    their non-zero dimensions, which NumPy must also represent -- exceeds 2^63 − 1: with int64
    arithmetic (2^33, 2^33) wraps to 0 and would pass for an empty payload.

    Raises:
        SerializationError: naming the shape.
    """
    dims = [int(d) for d in shape]
    if len(dims) > MAX_NDIM:
        raise SerializationError(f"{what} has {len(dims)} dimensions; at most {MAX_NDIM} accepted")
    count, span = 1, 1
    for d in dims:
        if d < 0:
            raise SerializationError(f"{what} shape {tuple(dims)} has a negative dimension")
        count *= d
        span *= max(d, 1)
        if span > _INT64_MAX:
            raise SerializationError(f"{what} shape {tuple(dims)} holds more than 2^63 - 1 "
                                     f"elements")
    return count


# ---------------------------------------------------------------- keys
def _hex(v: int) -> str:
    return format(int(v), "x")


def _int(obj: dict[str, Any], field: str) -> int:
    text = obj.get(field)
    # digits only (int() would also take signs, "0x", "_" and spaces); 8192 hex digits is 32768 bits
    if not isinstance(text, str) or not _HEX.fullmatch(text):
        raise SerializationError(f"key JSON: field {field!r} missing, not a hex integer or longer "
                                 f"than 8192 hex digits")
    return int(text, 16)


def _check_floor(kind: str, n: int, min_bits: int | None) -> None:
    """The party's floor, from the bit length alone; the key constructors then refuse an oversize
    key, an oversize prime and e != 65537, each before any primality test."""
    if min_bits is not None and n.bit_length() < min_bits:
        raise WeakKeyError(f"{kind} key of {n.bit_length()} bits is below this party's floor of "
                           f"{min_bits} bits (key_bits)")


def key_to_json(key: Key) -> str:
    """A Paillier or RSA key (public or private) as a JSON string.  Private keys hold secrets:
    store them like any private key file, never log them."""
    if isinstance(key, paillier.PublicKey):
        obj = {"kind": "paillier.public", "n": _hex(key.n)}
    elif isinstance(key, paillier.PrivateKey):
        obj = {"kind": "paillier.private", "p": _hex(key.p), "q": _hex(key.q)}
    elif isinstance(key, rsa.PublicKey):
        obj = {"kind": "rsa.public", "n": _hex(key.n), "e": _hex(key.e)}
    elif isinstance(key, rsa.PrivateKey):
        obj = {"kind": "rsa.private", "p": _hex(key.p), "q": _hex(key.q), "e": _hex(key.e)}
    else:
        raise TypeError(f"not a UniFL key: {type(key).__name__}")
    return json.dumps({"unifl": FORMAT_VERSION, **obj})


def key_from_json(text: str | bytes, min_bits: int | None = None) -> Key:
    """Inverse of :func:`key_to_json`; validates the key.

    Size limits come before any primality test or exponentiation on a hostile key: the modulus at
    least ``min_bits`` bits (the party's ``key_bits`` floor), checked here from the bit length; the
    key constructors then check, first thing, at most 8192 bits (each prime at most half that), the
    SDK's 1024-bit minimum and RSA's e = 65537.

    Raises:
        WeakKeyError: any of those limits, or a weak key found by the constructors.
        SerializationError: not a UniFL key document (syntax, version, kind, fields).
    """
    if min_bits is not None:
        min_bits = int(min_bits)
    try:
        obj = json.loads(text)
    except (ValueError, TypeError, RecursionError) as exc:  # RecursionError: "[[[[..." nesting
        raise SerializationError(f"key JSON does not parse: {exc}") from exc
    if not isinstance(obj, dict):
        raise SerializationError("key JSON must be an object")
    if obj.get("unifl") != FORMAT_VERSION:
        raise SerializationError(f"key format version {obj.get('unifl')!r} is not supported "
                                 f"(this UniFL reads version {FORMAT_VERSION})")
    kind = obj.get("kind")
    if kind == "paillier.public":
        n = _int(obj, "n")
        _check_floor("Paillier", n, min_bits)
        return paillier.PublicKey(n)
    if kind == "paillier.private":
        p, q = _int(obj, "p"), _int(obj, "q")
        _check_floor("Paillier", p * q, min_bits)
        return paillier.PrivateKey(p, q)
    if kind == "rsa.public":
        n = _int(obj, "n")
        _check_floor("RSA", n, min_bits)
        return rsa.PublicKey(n, _int(obj, "e"))
    if kind == "rsa.private":
        p, q = _int(obj, "p"), _int(obj, "q")
        _check_floor("RSA", p * q, min_bits)
        return rsa.PrivateKey(p, q, _int(obj, "e"))
    raise SerializationError(f"unknown key kind {kind!r}")


# ---------------------------------------------------------------- encrypted arrays
def array_to_bytes(arr: EncryptedArray) -> bytes:
    """Serialize an encrypted array to one frame (see the module docstring)."""
    pk = arr.public_key
    ctx = pk.nsquare_ctx
    plain = arr.batch.ciphertexts()
    bound = arr.bound.to_bytes(max(1, (arr.bound.bit_length() + 7) // 8), "little")
    head = _HEAD.pack(FRAME_MAGIC, FRAME_VERSION, 0, bytes.fromhex(pk.fingerprint)[:16],
                      arr.scale_bits, len(arr.shape), ctx.num_limbs)
    body = (head + struct.pack(f"<{len(arr.shape)}Q", *arr.shape) + struct.pack("<I", len(bound))
            + bound + np.asarray(plain, dtype="<u8").tobytes())
    return body + struct.pack("<I", zlib.crc32(body))


def array_from_bytes(data: bytes, public_key: paillier.PublicKey,
                     backend: Backend | str | None = None) -> EncryptedArray:
    """Parse a frame produced by :func:`array_to_bytes` for ``public_key``."""
    data = bytes(data)
    if len(data) < _HEAD.size + 8:
        raise SerializationError(f"ciphertext frame truncated: {len(data)} bytes")
    magic, version, _flags, fp, scale, ndim, limbs = _HEAD.unpack_from(data)
    if magic != FRAME_MAGIC:
        raise SerializationError("not a UniFL ciphertext frame (bad magic)")
    if version != FRAME_VERSION:
        raise SerializationError(f"ciphertext frame version {version} is not supported "
                                 f"(this UniFL reads version {FRAME_VERSION})")
    body, crc = data[:-4], struct.unpack("<I", data[-4:])[0]
    if zlib.crc32(body) != crc:
        raise SerializationError("ciphertext frame corrupted or truncated (checksum mismatch)")
    if fp != bytes.fromhex(public_key.fingerprint)[:16]:
        raise KeyMismatchError("ciphertext frame was produced under another public key")
    ctx = public_key.nsquare_ctx
    if scale < 0:   # encoding never makes one; operations would turn it into an untyped failure
        raise SerializationError(f"ciphertext frame has a negative scale ({scale} bits)")
    if limbs != ctx.num_limbs:
        raise SerializationError(f"frame has {limbs}-limb ciphertexts, key needs {ctx.num_limbs}")
    off = _HEAD.size
    try:
        shape = struct.unpack_from(f"<{ndim}Q", data, off)
        off += 8 * ndim
        (blen,) = struct.unpack_from("<I", data, off)
        off += 4
        bound = int.from_bytes(data[off:off + blen], "little")
        off += blen
    except struct.error as exc:
        raise SerializationError(f"ciphertext frame header truncated: {exc}") from exc
    count = element_count(shape, "ciphertext frame")   # Python ints: no int64 wrap-around
    need = count * limbs * 8
    if len(body) - off != need:
        raise SerializationError(f"ciphertext frame payload has {len(body) - off} bytes, "
                                 f"shape {tuple(shape)} needs {need}")
    plain = np.frombuffer(body, dtype="<u8", count=count * limbs, offset=off).reshape(count, limbs)
    plain = plain.astype(np.uint64)
    if count and (not less_than(plain, ctx.m_limbs).all() or (~plain.any(axis=1)).any()):
        raise SerializationError("ciphertext frame holds values outside [1, n²)")
    # every ciphertext from outside must be a unit mod n² before anything can decrypt it
    return EncryptedArray._wrap(CiphertextBatch.from_ciphertexts(public_key, plain, backend, bound),
                                tuple(shape), scale)


# ---------------------------------------------------------------- one pair for every object
def dumps(obj: Key | EncryptedArray) -> bytes:
    """A key as its JSON document (UTF-8), an encrypted array as one binary frame.

    Private keys hold secrets: store them like any private key file, never log them."""
    if isinstance(obj, EncryptedArray):
        return array_to_bytes(obj)
    return key_to_json(obj).encode()


def loads(data: bytes | str, public_key: "paillier.PublicKey | None" = None,
          backend: Backend | str | None = None, min_bits: int | None = None
          ) -> EncryptedArray | Key:
    """Inverse of :func:`dumps`: a frame (it starts with ``b"UFLC"``) becomes an EncryptedArray and
    needs the ``public_key`` it was made under; anything else is read as a key document.

    Raises:
        SerializationError: malformed data, or a frame without ``public_key``.
        KeyMismatchError, InvalidCiphertextError, WeakKeyError: see :func:`array_from_bytes` and
            :func:`key_from_json`.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if raw[:4] == FRAME_MAGIC:
        if public_key is None:
            raise SerializationError("a ciphertext frame needs the public_key it was made under")
        return array_from_bytes(raw, public_key, backend)
    if public_key is not None:
        raise SerializationError("public_key given, but the data is not a ciphertext frame")
    return key_from_json(raw, min_bits=min_bits)

"""Typed, versioned, pickle-free binary encoding of the objects parties exchange.

A message is ``MAGIC (4 bytes "UFLM") | version u8 | value``; a value is a one-byte type tag followed
by its body (all integers little-endian, lengths u32 unless said otherwise):

====  ======================  ==========================================================
tag   type                    body
====  ======================  ==========================================================
N     None                    --
T/F   bool                    --
I     int (any size)          sign u8 (0 or 1), length, magnitude bytes
D     float                   IEEE-754 binary64
S     str                     length, UTF-8 bytes
B     bytes                   length, bytes
L/U   list / tuple            count, values
M     dict (str keys)         count, (S-body key, value) pairs
A     numpy numeric array     dtype code u8 (see ``_DTYPES``), ndim u8, shape ndim × u64, raw data
P     paillier.PublicKey      length, key JSON (``unifl.phe_sdk.serialize``)
R     rsa.PublicKey           length, key JSON
E     EncryptedArray          length, ciphertext frame (``serialize.array_to_bytes``)
K     private key (top level) length, key JSON; made only by :func:`encode_private_key`
====  ======================  ==========================================================

Private keys never travel in an ordinary message.  :func:`encode` refuses a private key object,
and then, on the values (:mod:`unifl.phe_sdk.exposure`): a message whose bytes, integers or lists
of integers carry a secret value of any private key alive in this process (p, q, λ, μ, φ, the CRT
constants; RSA's d, d_p, d_q) in one of the forms that module lists -- integers and their
multiples, big- or little-endian binary at any bit offset (bytes, ints, uint8...uint64 arrays,
limbs in either order), decimal, hexadecimal and base64 text, each piece of 64 bits or 16
characters found wherever it sits, so a key split across fields is found piece by piece -- is
refused with :class:`~unifl.core.errors.PrivateKeyExposure`.  Text naming a private key's kind
(``paillier.private``/``rsa.private``, escaped or in JSON in JSON) and mappings with both fields p
and q are refused too, which also covers a private key this process does not hold.  What the
guard does not find is stated in :mod:`unifl.phe_sdk.exposure` (transforms it does not know,
pieces below its windows).  The one path for a private key is :func:`encode_private_key` (tag K,
used by ``Channel.send_private_key`` over mutual TLS only), and :func:`decode` accepts tag K only
when called with ``allow_private_key=True``.

Keys received are held to the receiver's floor (``min_key_bits``) by their bit length, read from the
JSON before any key object is built, so an undersized key costs no primality test.

Decoding never executes anything: it accepts exactly these types, checks every length against the
bytes that remain, limits nesting depth, and raises :class:`~unifl.core.errors.SerializationError` for
malformed, truncated, trailing or unknown-type input.  An encrypted array is decoded with the public
key whose fingerprint its frame names, looked up among the keys the caller has registered (keys sent
or received earlier); an unknown fingerprint raises :class:`~unifl.core.errors.KeyMismatchError`.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Callable

import numpy as np

from ..core.backend import Backend
from ..core.errors import KeyMismatchError, PrivateKeyExposure, SerializationError
from ..phe_sdk import exposure, paillier, rsa, serialize
from ..phe_sdk.array import EncryptedArray

MAGIC = b"UFLM"
VERSION = 1
MAX_DEPTH = 32

# dtype code <-> little-endian numpy dtype; only plain numeric types (no object, no strings)
_DTYPES = {1: "<i1", 2: "<i2", 3: "<i4", 4: "<i8", 5: "<u1", 6: "<u2", 7: "<u4", 8: "<u8",
           9: "<f4", 10: "<f8", 11: "|b1"}
_DTYPE_CODES = {np.dtype(v).str: k for k, v in _DTYPES.items()}
_U32 = struct.Struct("<I")
_F64 = struct.Struct("<d")

KeyLookup = Callable[[bytes], "paillier.PublicKey | None"]
KeyCallback = Callable[["paillier.PublicKey"], None]


def fingerprint16(key: paillier.PublicKey) -> bytes:
    """The 16-byte key fingerprint a ciphertext frame carries."""
    return bytes.fromhex(key.fingerprint)[:16]


# ------------------------------------------------------------------ encoding
def encode(obj: Any) -> bytes:
    """``obj`` as one versioned message; raises TypeError for a type the codec does not carry and
    :class:`~unifl.core.errors.PrivateKeyExposure` (a TypeError) for a private key in any form."""
    out = bytearray(MAGIC)
    out.append(VERSION)
    seen = _Seen()
    _enc(obj, out, 0, seen)
    data = bytes(out)
    if exposure.revealed_in(data, seen.ints) or any(exposure.bytes_reveal(s)
                                                    for s in seen.int_lists):
        raise PrivateKeyExposure("this message carries a secret value of a private key this "
                                 "process holds (unifl.phe_sdk.exposure); private keys are never "
                                 "sent in a message -- Channel.send_private_key, over mutual TLS, "
                                 "is the one path for a key")
    return data


class _Seen:
    """What the value guard checks besides the message's bytes: its large integers, and its lists
    of integers as the arrays they stand for."""

    __slots__ = ("ints", "int_lists")

    def __init__(self) -> None:
        self.ints: list[int] = []
        self.int_lists: list[bytes] = []


def encode_private_key(key: "paillier.PrivateKey | rsa.PrivateKey") -> bytes:
    """A private key as a message of its own (tag K).  Only ``Channel.send_private_key`` calls this,
    after checking that the transport is mutually authenticated TLS."""
    if not isinstance(key, (paillier.PrivateKey, rsa.PrivateKey)):
        raise TypeError(f"encode_private_key takes a private key, got {type(key).__name__}")
    data = serialize.key_to_json(key).encode()
    out = bytearray(MAGIC)
    out.append(VERSION)
    out += b"K"
    _put_len(out, len(data))
    out += data
    return bytes(out)


_PRIVATE_KINDS = ("paillier.private", "rsa.private")
_PRIVATE_MARKERS = tuple(k.encode() for k in _PRIVATE_KINDS)
_PRIVATE_FIELDS = frozenset({"p", "q"})
_MAX_JSON_PROBES = 4096


def _is_private_mapping(obj: dict) -> bool:
    return obj.get("kind") in _PRIVATE_KINDS or _PRIVATE_FIELDS <= set(obj)


def _json_holds_private(obj: Any, depth: int) -> bool:
    """A parsed JSON value holding a private key: a mapping with its kind or fields, or a string
    that is itself such a JSON text (JSON in JSON), at any depth."""
    if depth > MAX_DEPTH:
        return True     # nesting this deep in a key-like text is refused rather than searched
    if isinstance(obj, dict):
        if _is_private_mapping(obj):
            return True
        return any(_text_holds_private(k, depth + 1) or _json_holds_private(v, depth + 1)
                   for k, v in obj.items())
    if isinstance(obj, list):
        return any(_json_holds_private(v, depth + 1) for v in obj)
    if isinstance(obj, str):      # parsed: escapes resolved, so the values are seen as they are
        return (exposure.bytes_reveal(obj.encode("utf-8", "surrogatepass"))
                or _text_holds_private(obj, depth + 1))
    if isinstance(obj, int) and not isinstance(obj, bool):
        return exposure.int_reveals(obj)
    return False


def _text_holds_private(text: "str | bytes", depth: int = 0) -> bool:
    """Whether a str/bytes value is (or contains) a private key's JSON text."""
    raw = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)
    if any(m in raw for m in _PRIVATE_MARKERS):
        return True
    if b'"' not in raw or b"{" not in raw and b"[" not in raw:   # no JSON object/array inside
        return False
    # a JSON text may hide the markers behind escapes (\\u002e) or one more level of quoting, and
    # may sit inside other text: try a JSON value at each opening bracket or quote
    decoder = json.JSONDecoder()
    try:
        body = raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    tried = 0
    for i, ch in enumerate(body):
        if ch not in '{["':
            continue
        tried += 1
        if tried > _MAX_JSON_PROBES:
            return True     # a text built to exhaust the search is refused, not searched
        try:
            parsed, _ = decoder.raw_decode(body, i)
        except (ValueError, RecursionError):
            continue
        if _json_holds_private(parsed, depth):
            return True
    return False


def _put_len(out: bytearray, n: int) -> None:
    if n > 0xFFFFFFFF:
        raise SerializationError("value too large for one message")
    out += _U32.pack(n)


def _enc(obj: Any, out: bytearray, depth: int, seen: _Seen) -> None:
    if depth > MAX_DEPTH:
        raise SerializationError(f"message nests deeper than {MAX_DEPTH} levels")
    if obj is None:
        out += b"N"
    elif isinstance(obj, (bool, np.bool_)):
        out += b"T" if obj else b"F"
    elif isinstance(obj, (int, np.integer)):
        v = int(obj)
        if abs(v) >> 64:
            seen.ints.append(v)
        mag = abs(v).to_bytes(max(1, (abs(v).bit_length() + 7) // 8), "little")
        out += b"I"
        out.append(1 if v < 0 else 0)
        _put_len(out, len(mag))
        out += mag
    elif isinstance(obj, (float, np.floating)):
        out += b"D" + _F64.pack(float(obj))
    elif isinstance(obj, str):
        if _text_holds_private(obj):
            raise PrivateKeyExposure("a string holding a private key's JSON is never sent in a "
                                     "message; use Channel.send_private_key over mutual TLS")
        data = obj.encode("utf-8")
        out += b"S"
        _put_len(out, len(data))
        out += data
    elif isinstance(obj, (bytes, bytearray, memoryview)):
        data = bytes(obj)
        if _text_holds_private(data):
            raise PrivateKeyExposure("bytes holding a private key's JSON are never sent in a "
                                     "message; use Channel.send_private_key over mutual TLS")
        out += b"B"
        _put_len(out, len(data))
        out += data
    elif isinstance(obj, (list, tuple)):
        out += b"L" if isinstance(obj, list) else b"U"
        _put_len(out, len(obj))
        packed = exposure.int_list_bytes(obj)
        if packed is not None:
            seen.int_lists.append(packed)
        for item in obj:
            _enc(item, out, depth + 1, seen)
    elif isinstance(obj, dict):
        if _is_private_mapping(obj):
            raise PrivateKeyExposure("a mapping with a private key's kind or fields (p, q) is "
                                     "never sent in a message")
        out += b"M"
        _put_len(out, len(obj))
        for k, v in obj.items():
            if not isinstance(k, str):
                raise TypeError(f"dict keys must be str, got {type(k).__name__}")
            if _text_holds_private(k):
                raise PrivateKeyExposure("a dict key holding a private key's JSON is never sent")
            data = k.encode("utf-8")
            _put_len(out, len(data))
            out += data
            _enc(v, out, depth + 1, seen)
    elif isinstance(obj, np.ndarray):
        arr = np.ascontiguousarray(obj)
        code = _DTYPE_CODES.get(arr.dtype.newbyteorder("<").str if arr.dtype.byteorder == ">"
                                else arr.dtype.str)
        if code is None:
            raise TypeError(f"numpy dtype {arr.dtype} is not carried (numeric dtypes only)")
        arr = arr.astype(_DTYPES[code], copy=False)
        out += b"A"
        out.append(code)
        out.append(arr.ndim)
        out += struct.pack(f"<{arr.ndim}Q", *arr.shape)
        out += arr.tobytes()
    elif isinstance(obj, paillier.PublicKey):
        data = serialize.key_to_json(obj).encode()
        out += b"P"
        _put_len(out, len(data))
        out += data
    elif isinstance(obj, rsa.PublicKey):
        data = serialize.key_to_json(obj).encode()
        out += b"R"
        _put_len(out, len(data))
        out += data
    elif isinstance(obj, EncryptedArray):
        data = serialize.array_to_bytes(obj)
        out += b"E"
        _put_len(out, len(data))
        out += data
    elif isinstance(obj, (paillier.PrivateKey, rsa.PrivateKey)):
        raise PrivateKeyExposure("private keys are never sent in a message; use "
                                 "Channel.send_private_key over mutual TLS")
    else:
        raise TypeError(f"the codec does not carry {type(obj).__name__}")


# ------------------------------------------------------------------ decoding
class _Reader:
    def __init__(self, data: bytes, keys: KeyLookup | None, on_key: KeyCallback | None,
                 backend: Backend | None,
                 min_key_bits: int | None = None, allow_private_key: bool = False) -> None:
        self.data = data
        self.pos = 0
        self.keys = keys
        self.on_key = on_key
        self.backend = backend
        self.min_key_bits = min_key_bits
        self.allow_private_key = allow_private_key

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise SerializationError(f"message truncated: needs {n} bytes at offset {self.pos}, "
                                     f"{len(self.data) - self.pos} left")
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def length(self) -> int:
        return _U32.unpack(self.take(4))[0]

    def value(self, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise SerializationError(f"message nests deeper than {MAX_DEPTH} levels")
        tag = self.take(1)
        if tag == b"N":
            return None
        if tag == b"T":
            return True
        if tag == b"F":
            return False
        if tag == b"I":
            sign = self.take(1)[0]
            if sign > 1:
                raise SerializationError("integer sign byte must be 0 or 1")
            v = int.from_bytes(self.take(self.length()), "little")
            return -v if sign else v
        if tag == b"D":
            return _F64.unpack(self.take(8))[0]
        if tag == b"S":
            try:
                return self.take(self.length()).decode("utf-8")
            except UnicodeDecodeError as exc:
                raise SerializationError(f"string is not UTF-8: {exc}") from exc
        if tag == b"B":
            return bytes(self.take(self.length()))
        if tag in (b"L", b"U"):
            count = self.length()
            if count > len(self.data) - self.pos:  # every item takes >= 1 byte
                raise SerializationError("message truncated: list count exceeds the bytes left")
            items = [self.value(depth + 1) for _ in range(count)]
            return items if tag == b"L" else tuple(items)
        if tag == b"M":
            count = self.length()
            if count > len(self.data) - self.pos:
                raise SerializationError("message truncated: dict count exceeds the bytes left")
            out = {}
            for _ in range(count):
                try:
                    key = self.take(self.length()).decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise SerializationError(f"dict key is not UTF-8: {exc}") from exc
                out[key] = self.value(depth + 1)
            return out
        if tag == b"A":
            code = self.take(1)[0]
            if code not in _DTYPES:
                raise SerializationError(f"unknown array dtype code {code}")
            dtype = np.dtype(_DTYPES[code])
            ndim = self.take(1)[0]
            shape = struct.unpack(f"<{ndim}Q", self.take(8 * ndim))
            count = serialize.element_count(shape, "array")  # ndim, int64 limits, Python ints
            nbytes = count * dtype.itemsize
            if nbytes > len(self.data) - self.pos:
                raise SerializationError(f"message truncated: array {shape} needs {nbytes} bytes")
            try:  # a zero-size array may claim dims numpy cannot hold (> 64 dims, size overflow)
                arr = np.frombuffer(self.take(nbytes), dtype=dtype).reshape(shape)
            except ValueError as exc:
                raise SerializationError(f"array shape {shape} is invalid: {exc}") from exc
            return arr.astype(dtype.newbyteorder("="), copy=True)
        if tag == b"K":
            if not (self.allow_private_key and depth == 0):
                raise SerializationError("a private key arrived in an ordinary message; private "
                                         "keys are accepted only by Channel.recv_private_key")
            received = serialize.key_from_json(self.take(self.length()), min_bits=self.min_key_bits)
            if not isinstance(received, (paillier.PrivateKey, rsa.PrivateKey)):
                raise SerializationError(f"tag K holds a {type(received).__name__}, not a private key")
            return received
        if tag in (b"P", b"R"):
            received = serialize.key_from_json(self.take(self.length()), min_bits=self.min_key_bits)
            want = paillier.PublicKey if tag == b"P" else rsa.PublicKey
            if not isinstance(received, want):
                raise SerializationError(f"tag {tag.decode()} holds a {type(received).__name__}")
            if self.on_key is not None and isinstance(received, paillier.PublicKey):
                self.on_key(received)
            return received
        if tag == b"E":
            frame = self.take(self.length())
            if len(frame) < 24:
                raise SerializationError("ciphertext frame truncated")
            fp = bytes(frame[8:24])
            array_key = self.keys(fp) if self.keys is not None else None
            if array_key is None:
                raise KeyMismatchError("ciphertext under a public key this party has not seen "
                                       f"(fingerprint {fp.hex()})")
            return serialize.array_from_bytes(frame, array_key, self.backend)
        raise SerializationError(f"unknown type tag {tag!r} at offset {self.pos - 1}")


def decode(data: bytes, keys: KeyLookup | None = None, *, on_key: KeyCallback | None = None,
           backend: Backend | None = None,
           min_key_bits: int | None = None, allow_private_key: bool = False) -> Any:
    """Parse a message made by :func:`encode` (or, with ``allow_private_key``, by
    :func:`encode_private_key`).

    Args:
        keys: fingerprint (16 bytes) -> Paillier public key, or None when unknown.
        on_key: called with every Paillier public key found in the message (before later values
            are decoded, so a key and arrays under it can travel together).
        backend: backend the decoded encrypted arrays compute on.
        min_key_bits: refuse (WeakKeyError) any key whose modulus is shorter, before building it.
        allow_private_key: accept a top-level private key (tag K); otherwise tag K is refused.
    """
    data = bytes(data)
    if len(data) < 5 or data[:4] != MAGIC:
        raise SerializationError("not a UniFL message (bad magic or too short)")
    if data[4] != VERSION:
        raise SerializationError(f"message version {data[4]} is not supported (this UniFL speaks "
                                 f"version {VERSION})")
    reader = _Reader(data, keys, on_key, backend, min_key_bits, allow_private_key)
    reader.pos = 5
    obj = reader.value(0)
    if reader.pos != len(data):
        raise SerializationError(f"{len(data) - reader.pos} trailing bytes after the message")
    return obj

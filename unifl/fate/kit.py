"""A FATE 2.x PHE kit (``keygen``, ``SK``, ``PK``, ``Coder``, ``evaluator``) computed by UniFL.

FATE's algorithms only ever talk to a kit through this surface (the protocol of
``fate.arch.protocol.phe.type.TensorEvaluator`` plus the ``Coder`` methods they call), so a FATE job
that selects ``kind: unifl`` runs all of its Paillier arithmetic on the party's UniFL backend
(:mod:`unifl.fate.party`), through the same ciphertext batch as UniFL's own
:class:`~unifl.phe_sdk.array.EncryptedArray`
(:class:`~unifl.phe_sdk.ciphertexts.CiphertextBatch`: add, negation by the backend's batched
inverse, signed powers, scale lifting, grouped products, multi-exponentiations).

Representation
--------------
* ``FV`` (encoded plaintexts): Python ints ``v`` with a per-element binary scale ``e`` meaning
  ``v / 2^e``.  A float vector is encoded at one scale, FLOAT_BITS (64) bits below the binary
  exponent of its largest element (at most MAX_SCALE); a float scalar exactly, at the smallest scale
  that holds it (0.25 -> e = 2, so products grow little); integers at ``e = 0``.  The rounding is
  :func:`unifl.phe_sdk.encoding.encode`'s (round(x·2^e), halves to even).
  After decryption the values are residues mod n (``modulus`` set) and are centred on decoding:
  r <= n/3 is r, r >= n - n/3 is r - n, anything between is an overflow
  (:class:`~unifl.core.errors.EncodingOverflowError`).
* ``EV`` (ciphertexts): a ciphertext batch in Montgomery form mod n² between evaluator calls (so a
  chain of FATE operations enters and leaves the Montgomery domain once), with the same
  per-element scales.  Two more states hold what has no key yet: plain ciphertexts received from
  another party (checked and moved into the domain at their first use under a key), and the
  "trivial zeros" of ``evaluator.zeros``, which FATE creates without a key: E(0) with r = 1 is the
  integer 1 for every modulus.
* Homomorphic rules (all mod n²): E(a)·E(b) = E(a+b); E(a)·(1 + b·n) = E(a+b); E(a)^k = E(k·a)
  (k < 0 uses E(a)^-1, never n - |k|); adding values of different scales first lifts the
  coarser one: a ciphertext by E(v)^(2^d) = E(v·2^d), a plaintext by an exact shift.
  ``encrypt_encoded`` always multiplies by a fresh r^n, whatever ``obfuscate`` says: a ciphertext
  1 + m·n is its own plaintext ((c − 1)/n = m), and FATE 2.2 sends ciphertexts made with
  ``obfuscate=False`` to its peers.  Its coordinated LR asks for obfuscation of the guest's
  per-row share and the host's Xw_h, but ``PHETensorEncryptor.encrypt_encoded``
  (fate/arch/tensor/phe/_keypair.py) drops the flag for a distributed tensor, so every shard is
  encrypted with the default ``obfuscate=False`` (fate/arch/tensor/distributed/_ops_cipher.py):
  with FATE's own kit the host reads every label in the first epoch.  Our kit never emits one.
* Bounds: FATE's kit contract carries none (and its packed layouts use plaintexts up to n/2 on
  purpose), so batches here are untracked: plaintexts must be below n in magnitude, and an
  overflow shows on decoding, as with FATE's own kit.

Packing (SecureBoost): ``pack_floats`` folds ``pack_num`` values as acc = (acc << offset_bit) +
round(x·2^precision) (first value most significant, a short last group folded the same way);
``pack_squeeze`` does the same to ciphertexts with E(acc)^(2^shift)·E(x).  These are the bit layouts
FATE's ``unpack_floats`` expects, so FATE's SecureBoost decodes them unchanged.

Pickling: FATE pickles kits and ciphertexts between parties and only accepts allow-listed names.
``FV``, ``EV``, ``PK`` and ``Coder`` reduce to a validating function of this module plus plain
ints/bytes (``_rebuild_fv``, ``_rebuild_ev``, ``_rebuild_pk``, ``_rebuild_coder``), so the
allow-list holds those four functions and ``evaluator``, never a class a pickle could instantiate
without its constructor (NEWOBJ + BUILD) and never ``SK``: a private key is refused on receipt,
and FATE's federation pickler refuses to send one (:mod:`unifl.fate.register`).  Every field of a
received object is checked whatever its container: scales are integers in [0, 2^15]
(``MAX_RECEIVED_SCALE``), values and moduli integers below 2^8192, residues below their modulus,
sizes and limb widths within the largest key's.  Ciphertexts travel as plain residues mod n²
(never Montgomery form, which depends on the limb width), and a received ``PK`` computes on the
*receiving* party's backend.
"""

from __future__ import annotations

import math
from typing import Any, List, Optional, Sequence, Tuple

import numpy as np
import torch

from ..base_op import constant
from ..core.errors import EncodingOverflowError, KeyMismatchError, OperandError, SerializationError
from ..core.lru import LruCache
from ..phe_sdk import encoding, paillier
from ..phe_sdk.ciphertexts import CiphertextBatch
from . import party

FLOAT_BITS = 64       # fraction bits kept below the largest element of an encoded float vector
MAX_SCALE = 256       # no encoding finer than 2^-256 (tiny values round to it)
_I64 = np.dtype("<i8")
#: every finite float64 is below 2^1024 in magnitude, and the coder's scales never lift a value
#: above that (a vector's scale puts its peak below 2^FLOAT_BITS unless clipped at 0)
_FLOAT64_LIMIT = 1 << 1024

__all__ = ["keygen", "SK", "PK", "Coder", "FV", "EV", "evaluator", "FLOAT_BITS", "MAX_SCALE"]

#: the most UniFL PublicKeys kept for the moduli seen (least recently used dropped first): PKs
#: unpickled from a peer with ever new moduli must not grow this process without bound.  A job
#: uses two or three keys; an entry is a few KiB of Montgomery constants (a backend's per-key
#: state is held weakly and goes with the last PK using it)
MAX_KEYS = 64
_keys: LruCache[int, paillier.PublicKey] = LruCache(MAX_KEYS)


def _public_key(n: int) -> paillier.PublicKey:
    """One UniFL PublicKey per modulus per process while it is among the MAX_KEYS most recently
    used (unpickling a PK many times stays cheap)."""
    return _keys.get_or_put(n, lambda: paillier.PublicKey(n))


#: largest scale a vector may carry (a peer's included).  Encoding makes scales in [0, MAX_SCALE]
#: and each product adds two, so honest chains stay far below; a scale from outside becomes a
#: shift (2^d for the lift E(v)^(2^d), v >> e on decoding), so 2^40 would have this party allocate
#: 128 GiB.  Negative scales are never made here and are refused too.
MAX_RECEIVED_SCALE = 1 << 15
#: largest magnitude (bits) of a plaintext, residue or modulus: the largest key's n
MAX_VALUE_BITS = paillier.MAX_KEY_BITS
#: widest ciphertext row: n² of the largest key, in 64-bit limbs
MAX_LIMBS = 2 * paillier.MAX_KEY_BITS // 64


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _count(x: Any, what: str) -> int:
    """A size or width: a non-negative int (not a bool, a float or a string)."""
    if not _is_int(x) or int(x) < 0:
        raise SerializationError(f"{what} must be a non-negative integer, got {type(x).__name__}")
    return int(x)


def _exps(x: Any, size: int) -> np.ndarray:
    """Per-element scales as a fresh int64 array of ``size``, each an integer in [0,
    MAX_RECEIVED_SCALE]: the same rule for every container a peer can send (int64 bytes, a list
    or tuple of ints, an integer array), checked before anything is built from them."""
    if isinstance(x, (bytes, bytearray)):
        if len(x) != size * _I64.itemsize:
            raise SerializationError(f"{len(x)} scale bytes for {size} values")
        out = np.frombuffer(x, dtype=_I64).astype(np.int64)
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "iu" or x.size != size:
            raise SerializationError(f"scales must be {size} integers, got a {x.dtype} array of "
                                     f"{x.size}")
        if x.dtype.kind == "u" and size and int(x.max()) > MAX_RECEIVED_SCALE:
            raise SerializationError(f"a scale of 2^-{int(x.max())} is outside "
                                     f"[0, {MAX_RECEIVED_SCALE}] bits")
        out = x.reshape(-1).astype(np.int64)
    elif isinstance(x, (list, tuple)):
        if len(x) != size or not all(_is_int(v) for v in x):
            raise SerializationError(f"scales must be {size} integers")
        outside = [int(v) for v in x if not 0 <= int(v) <= MAX_RECEIVED_SCALE]
        if outside:       # before numpy sees them: 2^70 would not even fit an int64
            raise SerializationError(f"a scale of 2^-{outside[0]} is outside "
                                     f"[0, {MAX_RECEIVED_SCALE}] bits")
        out = np.array([int(v) for v in x], dtype=np.int64)
    else:
        raise SerializationError(f"scales must be int64 bytes, a list, a tuple or an integer "
                                 f"array, got {type(x).__name__}")
    outside_mask = (out > MAX_RECEIVED_SCALE) | (out < 0)
    if outside_mask.any():
        raise SerializationError(f"a scale of 2^-{int(out[np.argmax(outside_mask)])} is outside "
                                 f"[0, {MAX_RECEIVED_SCALE}] bits")
    return out


def _values(values: Any, modulus: Optional[int]) -> list[int]:
    """Plaintext values as Python ints, each below 2^MAX_VALUE_BITS in magnitude and, with a
    modulus, a residue in [0, modulus)."""
    if isinstance(values, (str, bytes, bytearray)) or not hasattr(values, "__iter__"):
        raise SerializationError(f"values must be a sequence of integers, got "
                                 f"{type(values).__name__}")
    out = []
    for v in values:
        if not _is_int(v):
            raise SerializationError(f"a value must be an integer, got {type(v).__name__}")
        v = int(v)
        if v.bit_length() > MAX_VALUE_BITS:
            raise SerializationError(f"a value of {v.bit_length()} bits exceeds the largest "
                                     f"key's {MAX_VALUE_BITS}")
        if modulus is not None and not 0 <= v < modulus:
            raise SerializationError("a residue is outside [0, its modulus)")
        out.append(v)
    return out


def _modulus(m: Any) -> Optional[int]:
    if m is None:
        return None
    if not _is_int(m) or int(m) < 3 or int(m) % 2 == 0 or int(m).bit_length() > MAX_VALUE_BITS:
        shown = m if _is_int(m) and int(m).bit_length() < 64 else type(m).__name__
        raise SerializationError(f"a modulus must be an odd integer in (1, 2^{MAX_VALUE_BITS}), "
                                 f"got {shown}")
    return int(m)


def _no_state(obj: Any, state: Any) -> None:
    """``__setstate__`` of the kit classes: an object only ever comes from its constructor (a
    pickle that builds one and then sets its fields directly is refused)."""
    raise SerializationError(f"a {type(obj).__name__} is made by its constructor only, not from "
                             "state set directly into it (a forged pickle)")


# ---------------------------------------------------------------------------------- containers
class FV:
    """Encoded plaintexts: ints ``values`` at binary scales ``exps`` (residues mod ``modulus`` after
    decryption, signed before encryption)."""

    __slots__ = ("values", "exps", "modulus")

    def __init__(self, values: Sequence[int], exps: Any, modulus: Optional[int] = None) -> None:
        self.modulus = _modulus(modulus)
        self.values = _values(values, self.modulus)
        self.exps = _exps(exps, len(self.values))

    def __reduce__(self) -> tuple[Any, tuple[tuple[int, ...], bytes, Optional[int]]]:
        return _rebuild_fv, (tuple(self.values), self.exps.astype(_I64).tobytes(), self.modulus)

    __setstate__ = _no_state

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"<unifl FV len={len(self)}>"

    def signed(self) -> list[int]:
        """The values as signed ints (residues centred; overflow raises)."""
        if self.modulus is None:
            return list(self.values)
        n = self.modulus
        return encoding.from_residues(self.values, n, n // 3 - 1)

    def slice(self, start: int, size: int) -> "FV":
        return FV(self.values[start:start + size], self.exps[start:start + size], self.modulus)

    def tolist(self) -> list["FV"]:
        return [self.slice(i, 1) for i in range(len(self))]

    def cat(self, others: Sequence["FV"]) -> "FV":
        parts = [self, *others]
        return FV([v for p in parts for v in p.values], np.concatenate([p.exps for p in parts]),
                  self.modulus)


class EV:
    """Paillier ciphertexts with per-element binary scales.

    ``EV(data, exps, size=None, num_limbs=None)``, ``data`` being one of
    * a :class:`CiphertextBatch` (computed here: Montgomery form, under a key);
    * bytes of plain (N, ``num_limbs``) little-endian limbs, or such an array: ciphertexts from
      outside (another party, through pickling), not yet known to be units mod n², so their first
      use under a key checks them (:meth:`_materialize`);
    * None: ``size`` trivial encryptions of zero (the integer 1), whose modulus is not known yet.
    """

    __slots__ = ("_batch", "_wire", "exps", "_size")

    def __init__(self, data: Any, exps: Any, size: Optional[int] = None,
                 num_limbs: Optional[int] = None) -> None:
        self._batch: Optional[CiphertextBatch] = None
        self._wire: Optional[np.ndarray] = None
        if isinstance(data, CiphertextBatch):
            self._batch = data
            self._size = data.size
        elif data is None:
            self._size = _count(size or 0, "the size of a trivial-zero vector")
        else:
            if isinstance(data, (bytes, bytearray)):
                width = _count(num_limbs, "the limb width")
                if not 1 <= width <= MAX_LIMBS or len(data) % (8 * width):
                    raise SerializationError(f"{len(data)} ciphertext bytes do not form rows of "
                                             f"1..{MAX_LIMBS} limbs (width {width})")
                data = np.frombuffer(data, dtype="<u8").reshape(-1, width)
            elif not isinstance(data, np.ndarray) or data.dtype != np.uint64:
                raise SerializationError("ciphertexts must be limb bytes or a uint64 array, got "
                                         f"{type(data).__name__}")
            wire = np.array(data, dtype=np.uint64)   # our own copy: nobody else can change it
            if wire.ndim != 2 or not 1 <= wire.shape[1] <= MAX_LIMBS:
                raise SerializationError(f"ciphertext limbs of shape {wire.shape} are not (N, L) "
                                         f"with L <= {MAX_LIMBS}")
            self._wire = wire
            self._size = wire.shape[0]
        self.exps = _exps(exps, self._size)

    def __reduce__(self) -> tuple[Any, tuple[Optional[bytes], bytes, int, Optional[int]]]:
        if self._batch is not None:     # plain residues: the wire form is independent of R
            plain = self._batch.ciphertexts()
        elif self._wire is not None:
            plain = self._wire
        else:
            return _rebuild_ev, (None, self.exps.astype(_I64).tobytes(), self._size, None)
        return _rebuild_ev, (np.ascontiguousarray(plain, dtype="<u8").tobytes(),
                             self.exps.astype(_I64).tobytes(), self._size, plain.shape[1])

    __setstate__ = _no_state

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        if self._batch is not None:
            state = f"{self._batch.ctx.num_limbs * 64}-bit limbs mod n²"
        elif self._wire is not None:
            state = "received, unchecked"
        else:
            state = "trivial zeros"
        return f"<unifl EV len={self._size}, {state}>"

    # -- FATE touches these directly on the vector (DataFrame blocks, histograms)
    def slice(self, start: int, size: int) -> "EV":
        return self._select(np.arange(self._size)[start:start + size])

    def tolist(self) -> list["EV"]:
        return [self.slice(i, 1) for i in range(self._size)]

    def cat(self, others: Sequence["EV"]) -> "EV":
        parts = [self, *others]
        exps = np.concatenate([p.exps for p in parts])
        keyed = next((p._batch for p in parts if p._batch is not None), None)
        if keyed is not None:        # the key is known: every part joins it (received ones checked)
            key = keyed.public_key
            return EV(CiphertextBatch.concatenate([p._materialize(key, keyed.backend)
                                                   for p in parts]), exps)
        widths = {p._wire.shape[1] for p in parts if p._wire is not None}
        if not widths:
            return EV(None, exps, len(exps))
        if len(widths) > 1:
            raise KeyMismatchError("cannot concatenate ciphertexts of different key sizes")
        width = widths.pop()
        ones = np.zeros((1, width), np.uint64)
        ones[0, 0] = 1
        return EV(np.concatenate([p._wire if p._wire is not None else
                                  np.repeat(ones, p._size, axis=0) for p in parts]), exps)

    # -- internal
    def _select(self, idx: np.ndarray) -> "EV":
        """The elements at ``idx``, in the same state (keyed, received or trivial)."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if self._batch is not None:
            return EV(self._batch.take(idx), self.exps[idx])
        if self._wire is not None:
            return EV(self._wire[idx], self.exps[idx])
        return EV(None, self.exps[idx], len(idx))

    def _assign(self, batch: CiphertextBatch, exps: np.ndarray) -> None:
        """Replace the contents in place (FATE's ``i_*`` operations mutate their first operand)."""
        self._batch, self._wire, self._size = batch, None, batch.size
        self.exps = np.asarray(exps, dtype=np.int64)

    def _materialize(self, key: paillier.PublicKey, backend: Any = None) -> CiphertextBatch:
        """The ciphertexts as a batch under ``key`` on ``backend`` (default: this party's).

        Ciphertexts that came from outside are checked here, once, to be units mod n² in [1, n²)
        (InvalidCiphertextError otherwise); every evaluator and decryptor input passes through
        here, and results computed from units are units.

        Raises:
            KeyMismatchError: the ciphertexts belong to another key (or another key size).
        """
        be = party.current_backend() if backend is None else backend
        width = key.nsquare_ctx.num_limbs
        if self._batch is not None:
            if self._batch.public_key != key:
                raise KeyMismatchError("ciphertexts and public key do not match")
            if self._batch.backend is not be:
                self._batch = self._batch.to(be)
            return self._batch
        if self._wire is not None:
            if self._wire.shape[1] != width:
                raise KeyMismatchError("ciphertexts and public key have different sizes")
            self._batch = CiphertextBatch.from_ciphertexts(key, self._wire, be)
            self._wire = None
            return self._batch
        ctx = key.nsquare_ctx     # E(0) with r = 1 is 1, R mod n² in Montgomery form
        self._batch = CiphertextBatch(key, constant(ctx, ctx.r_mod, self._size), be)
        return self._batch


# ---------------------------------------------------------------------------------- keys
class PK:
    """Public key n (g = n + 1).  Pickles as n alone; computes on this party's backend."""

    def __init__(self, n: int, owner: Optional[paillier.PrivateKey] = None) -> None:
        if not _is_int(n):
            raise SerializationError(f"a public key's n must be an integer, got {type(n).__name__}")
        self.n = int(n)
        self.key = _public_key(self.n)
        self.ctx = self.key.nsquare_ctx
        # The private key when this party generated the pair (keygen), so its encryptions take
        # the key owner's CRT path.  Never pickled: a PK sent to a peer reduces to n alone.
        self._owner = owner

    def __reduce__(self) -> tuple[Any, tuple[int]]:
        return _rebuild_pk, (self.n,)

    __setstate__ = _no_state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PK) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("unifl-fate-pk", self.n))

    def __repr__(self) -> str:
        return f"<unifl PK {self.key.bits} bits>"

    def encrypt_encoded(self, vec: FV, obfuscate: bool) -> EV:
        """E(v) = (1 + v·n)·r^n for each encoded value, with a fresh r^n whatever ``obfuscate``
        says (FATE's flag is accepted for its interface only: see the module docstring)."""
        ints = vec.values if vec.modulus in (None, self.n) else vec.signed()
        batch = CiphertextBatch.encrypt(self.key, ints, party.current_backend(),
                                        obfuscate=True, tracked=False, private_key=self._owner)
        return EV(batch, vec.exps)

    def encrypt_encoded_scalar(self, val: FV, obfuscate: bool) -> EV:
        return self.encrypt_encoded(val, obfuscate)


class SK:
    """Private key (p, q); decrypts with the CRT on this party's backend."""

    def __init__(self, p: int, q: int) -> None:
        self.key = paillier.PrivateKey(p, q)

    @classmethod
    def of(cls, key: paillier.PrivateKey) -> SK:
        """The kit's private key around an SDK key already made (no second key object: each
        makes its CRT constants and proves its generators)."""
        sk = cls.__new__(cls)
        sk.key = key
        return sk

    def __reduce__(self) -> tuple[type[SK], tuple[int, int]]:
        # for FATE's computing engine inside this party (tasks of one job); never accepted from
        # another party (not on the federation allow-list) nor sent to one (register.py)
        return SK, (self.key.p, self.key.q)

    __setstate__ = _no_state

    def __repr__(self) -> str:  # never shows the primes
        return f"<unifl SK for {self.key.public_key.bits}-bit n>"

    def decrypt_to_encoded(self, vec: EV) -> FV:
        """The residues in [0, n) of the plaintexts, with the vector's scales."""
        pk = self.key.public_key
        if vec._batch is None and vec._wire is None:
            return FV([0] * len(vec), vec.exps, pk.n)
        batch = vec._materialize(pk)
        # Always, whatever the vector's history: a non-unit reaching the CRT decryption factors
        # n.  Checked on the Montgomery rows c·R mod n²: R is a power of two and n is odd, so
        # c·R is a unit (and non-zero) exactly when c is.
        paillier.require_units(pk, np.asarray(batch.limbs))
        return FV(batch.decrypt_residues(self.key), vec.exps, pk.n)


def keygen(key_size: int) -> Tuple[SK, PK, "Coder"]:
    """A fresh key pair (CSPRNG primes of key_size/2 bits each) and a coder."""
    pk, sk = paillier.keygen(int(key_size))
    return SK.of(sk), PK(pk.n, owner=sk), Coder()


# ---------------------------------------------------------------------------------- coder
def _to_numpy(vec: Any) -> np.ndarray:
    if isinstance(vec, torch.Tensor):
        return vec.detach().cpu().reshape(-1).numpy()
    return np.asarray(vec).reshape(-1)


def _round_half_away(x: float) -> int:
    """round(x) with halves away from zero: the rounding of FATE's own ``pack_floats``."""
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


def _fold(ints: list[int], shift: int, size: int) -> list[int]:
    """Groups of ``size`` ints folded as acc = (acc << shift) + v, first value most significant."""
    packed = []
    for g in range(0, len(ints), size):
        acc = 0
        for v in ints[g:g + size]:
            acc = (acc << shift) + v
        packed.append(acc)
    return packed


_FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


class Coder:
    """Fixed-point encoder/decoder (see the module docstring); stateless."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return _rebuild_coder, ()

    __setstate__ = _no_state

    # -- vectors
    def encode_f64_vec(self, vec: Any) -> FV:
        """round(x·2^e) for the vector's one scale e = FLOAT_BITS − (binary exponent of its
        largest |x|), clipped to [0, MAX_SCALE]."""
        x = _to_numpy(vec).astype(np.float64)
        if not np.isfinite(x).all():
            raise OperandError("cannot encode NaN or infinity")
        peak = float(np.abs(x).max(initial=0.0))
        scale = int(np.clip(FLOAT_BITS - math.frexp(peak)[1], 0, MAX_SCALE)) if peak else 0
        enc = encoding.encode(x, scale, _FLOAT64_LIMIT)
        return FV(enc.values, np.full(len(enc.values), scale, np.int64))

    encode_f32_vec = encode_f64_vec

    def encode_i64_vec(self, vec: Any) -> FV:
        ints = [int(v) for v in _to_numpy(vec).tolist()]
        return FV(ints, np.zeros(len(ints), np.int64))

    encode_i32_vec = encode_i64_vec

    def decode_f64_vec(self, vec: FV) -> torch.Tensor:
        """v / 2^e per element (:func:`unifl.phe_sdk.encoding.decode`, one call per scale)."""
        vals = vec.signed()
        out = np.empty(len(vals), np.float64)
        scales = vec.exps
        for e in np.unique(scales).tolist():
            where = np.nonzero(scales == e)[0]
            out[where] = encoding.decode([vals[i] for i in where.tolist()], int(e))
        return torch.from_numpy(out)

    def decode_f32_vec(self, vec: FV) -> torch.Tensor:
        return self.decode_f64_vec(vec).to(torch.float32)

    def decode_i64_vec(self, vec: FV) -> torch.Tensor:
        """floor(v / 2^e) per element, as FATE's coder truncates floats to integers."""
        vals = [v >> e if e >= 0 else v << -e for v, e in zip(vec.signed(), vec.exps.tolist())]
        for v in vals:
            if not -(1 << 63) <= v < (1 << 63):
                raise EncodingOverflowError("decoded value does not fit in int64")
        return torch.tensor(vals, dtype=torch.int64)

    def decode_i32_vec(self, vec: FV) -> torch.Tensor:
        return self.decode_i64_vec(vec).to(torch.int32)

    # -- scalars
    def encode_f64(self, val: Any) -> FV:
        """x exactly as v / 2^e with the smallest such e (rounded at e = MAX_SCALE)."""
        x = float(val)
        if not math.isfinite(x):
            raise OperandError("cannot encode NaN or infinity")
        e = min(x.as_integer_ratio()[1].bit_length() - 1, MAX_SCALE)   # the denominator is 2^k
        return FV(encoding.encode(np.array([x]), e, _FLOAT64_LIMIT).values, [e])

    encode_f32 = encode_f64

    def encode_i64(self, val: Any) -> FV:
        return FV([int(val)], [0])

    encode_i32 = encode_i64

    def decode_f64(self, val: FV) -> float:
        return float(self.decode_f64_vec(val)[0])

    decode_f32 = decode_f64

    def decode_i64(self, val: FV) -> int:
        return int(self.decode_i64_vec(val)[0])

    decode_i32 = decode_i64

    # -- by dtype
    def encode(self, val: Any, dtype: Any = None) -> FV:
        if isinstance(val, torch.Tensor):
            if val.numel() != 1:
                raise OperandError("Coder.encode takes a scalar")
            if dtype is None:
                dtype = val.dtype
            val = val.item()
        if dtype is None:
            dtype = torch.int64 if isinstance(val, (int, np.integer)) else torch.float64
        if dtype in _INTS and float(val).is_integer():
            return self.encode_i64(int(val))
        return self.encode_f64(val)

    def encode_vec(self, vec: Any, dtype: Any = None) -> FV:
        if dtype is None:
            dtype = vec.dtype if isinstance(vec, torch.Tensor) else torch.float64
        if isinstance(vec, torch.Tensor) and vec.dtype != dtype:
            vec = vec.to(dtype=dtype)
        if dtype in _FLOATS:
            return self.encode_f64_vec(vec)
        if dtype in _INTS:
            return self.encode_i64_vec(vec)
        raise NotImplementedError(f"{dtype} not supported")

    def decode_vec(self, vec: FV, dtype: Any) -> torch.Tensor:
        if dtype in (torch.float64, None):
            return self.decode_f64_vec(vec)
        if dtype in _FLOATS:
            return self.decode_f64_vec(vec).to(dtype)
        if dtype in _INTS:
            return self.decode_i64_vec(vec).to(dtype)
        raise NotImplementedError(f"{dtype} not supported")

    def encode_tensor(self, tensor: Any, dtype: Any = None) -> FV:
        if dtype is None:
            dtype = tensor.dtype
        return self.encode_vec(tensor.flatten(), dtype=dtype)

    def decode_tensor(self, tensor: FV, dtype: Any, shape: Any = None, device: Any = None
                      ) -> torch.Tensor:
        data = self.decode_vec(tensor, dtype)
        if shape is not None:
            data = data.reshape(shape)
        if device is not None:
            data = data.to(device.to_torch_device())
        return data

    # -- packing (SecureBoost)
    def pack_floats(self, float_tensor: Any, offset_bit: int, pack_num: int, precision: int
                    ) -> FV:
        xs = _to_numpy(float_tensor).astype(np.float64).tolist()
        ints = [_round_half_away(math.ldexp(x, precision)) for x in xs]
        return self.pack_vec(ints, offset_bit, pack_num)

    def unpack_floats(self, packed: FV, offset_bit: int, pack_num: int, precision: int,
                      total_num: int) -> torch.Tensor:
        ints = self._unpack(packed, offset_bit, pack_num, total_num)
        vals = np.asarray(encoding.decode(ints, int(precision)), dtype=np.float64)
        # torch's default dtype, as FATE's coder returns
        return torch.tensor(vals.tolist())

    def pack_vec(self, vec: Any, num_shift_bit: int, num_elem_each_pack: int) -> FV:
        ints = [int(v) for v in (_to_numpy(vec).tolist() if not isinstance(vec, list) else vec)]
        packed = _fold(ints, int(num_shift_bit), int(num_elem_each_pack))
        return FV(packed, np.zeros(len(packed), np.int64))

    def unpack_vec(self, vec: FV, num_shift_bit: int, num_elem_each_pack: int, total_num: int
                   ) -> torch.Tensor:
        return torch.tensor(self._unpack(vec, num_shift_bit, num_elem_each_pack, total_num),
                            dtype=torch.int64)

    @staticmethod
    def _unpack(packed: FV, shift: int, pack_num: int, total_num: int) -> list[int]:
        if packed.modulus is not None:  # packed values use < n/2: centre at n/2
            n = packed.modulus
            vals = [v - n if v > n // 2 else v for v in packed.values]
        else:
            vals = packed.values
        mask = (1 << shift) - 1
        out: list[int] = []
        for p in vals:
            g = min(pack_num, total_num - len(out))
            if g <= 0:
                break
            out.extend((p >> (shift * (g - 1 - i))) & mask for i in range(g))
        if len(out) != total_num:
            raise OperandError(f"packed data holds {len(out)} values, expected {total_num}")
        return out


# ---------------------------------------------------------------------------------- arithmetic
def _trivial_rows(batch: CiphertextBatch) -> np.ndarray:
    """Rows holding the integer 1 (R mod n² in Montgomery form: E(0) with r = 1, as
    ``evaluator.zeros`` makes), which any lift leaves as they are: 1^(2^d) = 1.  Only looked for
    in host arrays (finding them in device memory would cost a fetch, and lifting them is merely
    redundant)."""
    limbs = batch.limbs
    if not isinstance(limbs, np.ndarray):
        return np.zeros(batch.size, bool)
    ctx = batch.ctx
    return (limbs == constant(ctx, ctx.r_mod, 1)).all(axis=1)


def _lift(batch: CiphertextBatch, exps: np.ndarray, target: np.ndarray) -> CiphertextBatch:
    """Ciphertexts at scales ``exps`` re-expressed at the (not smaller) ``target`` scales."""
    d = np.asarray(target, np.int64) - exps
    if (d < 0).any():
        raise OperandError("cannot lower a ciphertext's scale homomorphically")
    if not d.any():
        return batch
    d = np.where(_trivial_rows(batch), 0, d)
    return batch.lift(d)


def _broadcast(pk: PK, a: EV, b: Any) -> tuple[CiphertextBatch, np.ndarray, int]:
    """``a``'s batch and scales, repeated to ``len(b)`` when ``a`` has one element."""
    ba = a._materialize(pk.key)
    if len(a) == 1 and len(b) != 1:
        idx = np.zeros(len(b), np.int64)
        return ba.take(idx), a.exps[idx], len(b)
    return ba, a.exps, len(a)


def _add(pk: PK, a: EV, b: EV) -> EV:
    """E(a) ⊕ E(b) element-wise (one side may have a single element: broadcast)."""
    if len(a) != len(b) and 1 not in (len(a), len(b)):
        raise OperandError(f"cannot add ciphertext vectors of lengths {len(a)} and {len(b)}")
    ba, ea, _ = _broadcast(pk, a, b)
    bb, eb, _ = _broadcast(pk, b, a)
    target = np.maximum(ea, eb)
    return EV(_lift(ba, ea, target).add(_lift(bb, eb, target)), target)


def _add_plain(pk: PK, a: EV, v: FV) -> EV:
    """E(a) ⊕ v for encoded plaintexts v (one side may have a single element: broadcast).  The
    coarser side is brought to the finer scale: the plaintext by an exact shift, the ciphertext by
    a lift."""
    if len(a) != len(v) and 1 not in (len(a), len(v)):
        raise OperandError(f"cannot add {len(a)} ciphertexts and {len(v)} plaintexts")
    ba, ea, size = _broadcast(pk, a, v)
    ints, ev = v.signed(), v.exps
    target = np.maximum(ea, ev)
    if len(v) == 1:                 # one addend shared by the batch, if it needs one shift only
        shifts = np.unique(target - ev[0])
        if len(shifts) == 1:
            return EV(_lift(ba, ea, target).add_plain([ints[0] << int(shifts[0])]), target)
        ints, ev = ints * size, np.repeat(ev, size)
    shifted = [x << int(s) for x, s in zip(ints, (target - ev).tolist())]
    return EV(_lift(ba, ea, target).add_plain(shifted), target)


def _neg(pk: PK, a: EV) -> EV:
    return EV(a._materialize(pk.key).neg(), a.exps)


def _neg_fv(v: FV) -> FV:
    return FV([-x for x in v.signed()], v.exps)


def _mul_fv(pk: PK, a: EV, enc: FV) -> EV:
    """E(a)^k element-wise for encoded k (signed, one or one per element; a single ciphertext
    is broadcast); scales add."""
    ks = enc.signed()
    if len(enc) == 1:
        return EV(a._materialize(pk.key).mul(ks), a.exps + int(enc.exps[0]))
    if len(a) != len(enc) and len(a) != 1:
        raise OperandError(f"cannot multiply {len(a)} ciphertexts by {len(enc)} plaintexts")
    ba, ea, _ = _broadcast(pk, a, enc)
    return EV(ba.mul(ks), ea + enc.exps)


def _common_scale(pk: PK, a: EV) -> tuple[CiphertextBatch, int]:
    """``a`` lifted to one scale, the largest of its elements' (for the multi-exponentiations)."""
    scale = int(a.exps.max(initial=0))
    return _lift(a._materialize(pk.key), a.exps, np.full(len(a), scale, np.int64)), scale


def _plain_matrix(v: FV, dims: tuple[int, int]) -> tuple[np.ndarray, int]:
    """Encoded plaintexts at one (the finest) scale, shifted exactly, as a (rows, cols) int
    matrix."""
    if len(v) != dims[0] * dims[1]:
        raise OperandError(f"{len(v)} plaintexts do not form a {dims[0]}x{dims[1]} matrix")
    scale = int(v.exps.max(initial=0))
    ints = [x << (scale - int(e)) for x, e in zip(v.signed(), v.exps.tolist())]
    out = np.empty(len(ints), dtype=object)
    out[:] = ints
    return out.reshape(dims), scale


def _dims(shape: Any, vector_as: str) -> tuple[int, int]:
    """A FATE shape as a matrix: a 1-D (k,) is a row (1, k) or a column (k, 1)."""
    dims = tuple(int(s) for s in shape)
    if len(dims) == 2:
        return dims[0], dims[1]
    if len(dims) == 1:
        return (1, dims[0]) if vector_as == "row" else (dims[0], 1)
    raise OperandError(f"matmul takes 1-D or 2-D operands, got shape {dims}")


def _as_index(x: Any) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().astype(np.int64)
    return np.asarray(x, dtype=np.int64)


def _scatter_add(pk: PK, a: EV, b: EV, src_rows: np.ndarray, positions: Any, stride: int) -> None:
    """a[positions[i, j]·stride + k] ⊕= b[src_rows[i]·stride + k] for all i, j, k < stride, in place:
    one grouped product over all contributions per target, then one addition per target."""
    pos = _as_index(positions)
    if pos.ndim == 1:
        pos = pos[:, None]
    if pos.shape[0] != len(src_rows):
        raise OperandError(f"{pos.shape[0]} position rows for {len(src_rows)} value rows")
    if pos.size == 0:
        return
    ba, bb = a._materialize(pk.key), b._materialize(pk.key)
    k = np.arange(stride)
    targets = (pos[:, :, None] * stride + k).reshape(-1)
    sources = np.broadcast_to(src_rows[:, None, None] * stride + k, pos.shape + (stride,)).reshape(-1)
    uniq, groups = np.unique(targets, return_inverse=True)
    scale = a.exps.copy()
    np.maximum.at(scale, targets, b.exps[sources])
    tgt_scale = scale[uniq]
    contrib = _lift(bb.take(sources), b.exps[sources], tgt_scale[groups])
    sums = contrib.sum_groups(groups.reshape(-1), len(uniq))
    cur = _lift(ba.take(uniq), a.exps[uniq], tgt_scale)
    exps = a.exps.copy()
    exps[uniq] = tgt_scale
    a._assign(ba.put(uniq, cur.add(sums)), exps)


class evaluator:
    """FATE's ``TensorEvaluator`` surface: static methods only (FATE pickles the class itself)."""

    # -- ciphertext ⊕ ciphertext / plaintext
    @staticmethod
    def add(a: EV, b: EV, pk: PK) -> EV:
        return _add(pk, a, b)

    @staticmethod
    def add_plain(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _add_plain(pk, a, coder.encode_tensor(b, dtype=output_dtype or b.dtype))

    @staticmethod
    def add_plain_scalar(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _add_plain(pk, a, coder.encode(b, dtype=output_dtype))

    @staticmethod
    def sub(a: EV, b: EV, pk: PK) -> EV:
        return _add(pk, a, _neg(pk, b))

    @staticmethod
    def sub_plain(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _add_plain(pk, a, _neg_fv(coder.encode_tensor(b, dtype=output_dtype or b.dtype)))

    @staticmethod
    def sub_plain_scalar(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _add_plain(pk, a, _neg_fv(coder.encode(b, dtype=output_dtype)))

    @staticmethod
    def rsub(a: EV, b: EV, pk: PK) -> EV:
        return _add(pk, b, _neg(pk, a))

    @staticmethod
    def rsub_plain(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _add_plain(pk, _neg(pk, a), coder.encode_tensor(b, dtype=output_dtype or b.dtype))

    @staticmethod
    def rsub_plain_scalar(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _add_plain(pk, _neg(pk, a), coder.encode(b, dtype=output_dtype))

    # -- ciphertext ⊗ plaintext
    @staticmethod
    def mul_plain(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _mul_fv(pk, a, coder.encode_tensor(b, dtype=output_dtype or b.dtype))

    @staticmethod
    def mul_plain_scalar(a: EV, b: Any, pk: PK, coder: Coder, output_dtype: Any = None) -> EV:
        return _mul_fv(pk, a, coder.encode(b, dtype=output_dtype))

    @staticmethod
    def matmul(a: EV, b: Any, a_shape: Any, b_shape: Any, pk: PK, coder: Coder,
               output_dtype: Any = None) -> EV:
        """E(A) @ B for plaintext B (multi-exponentiations sharing their bases), row-major."""
        batch, sa = _common_scale(pk, a)
        mat, sb = _plain_matrix(coder.encode_tensor(b, dtype=output_dtype or b.dtype),
                                _dims(b_shape, "column"))
        out = batch.matmul(_dims(a_shape, "row"), mat)
        return EV(out, np.full(out.size, sa + sb, np.int64))

    @staticmethod
    def rmatmul(a: EV, b: Any, a_shape: Any, b_shape: Any, pk: PK, coder: Coder,
                output_dtype: Any = None) -> EV:
        """B @ E(A) for plaintext B, row-major."""
        batch, sa = _common_scale(pk, a)
        mat, sb = _plain_matrix(coder.encode_tensor(b, dtype=output_dtype or b.dtype),
                                _dims(b_shape, "row"))
        out = batch.rmatmul(_dims(a_shape, "column"), mat)
        return EV(out, np.full(out.size, sa + sb, np.int64))

    # -- vectors
    @staticmethod
    def zeros(size: int, dtype: Any = None) -> EV:
        size = int(size)
        return EV(None, np.zeros(size, np.int64), size)

    @staticmethod
    def slice(a: EV, start: int, size: int) -> EV:
        return a.slice(start, size)

    @staticmethod
    def intervals_slice(a: EV, intervals: List[Tuple[int, int]]) -> EV:
        parts = [a.slice(s, e - s) for s, e in intervals]
        return parts[0].cat(parts[1:]) if parts else evaluator.zeros(0)

    @staticmethod
    def cat(list: List[EV]) -> EV:  # noqa: A002 (FATE's parameter name)
        return list[0].cat(list[1:])

    @staticmethod
    def i_add(pk: PK, a: EV, b: EV, sa: int = 0, sb: int = 0, size: Optional[int] = None) -> None:
        """a[sa:sa+size] ⊕= b[sb:sb+size] in place."""
        evaluator._i_add(pk, a, b, sa, sb, size, negate=False)

    @staticmethod
    def i_sub(pk: PK, a: EV, b: EV, sa: int = 0, sb: int = 0, size: Optional[int] = None) -> None:
        """a[sa:sa+size] ⊖= b[sb:sb+size] in place."""
        evaluator._i_add(pk, a, b, sa, sb, size, negate=True)

    @staticmethod
    def _i_add(pk: PK, a: EV, b: EV, sa: int, sb: int, size: Optional[int], negate: bool
               ) -> None:
        if size is None:
            size = min(len(a) - sa, len(b) - sb)
        ia = np.arange(len(a))[sa:sa + size]
        ib = np.arange(len(b))[sb:sb + size]
        if len(ia) != len(ib):
            raise OperandError(f"i_add: {len(ia)} target and {len(ib)} source elements")
        ba, bb = a._materialize(pk.key), b._materialize(pk.key)
        seg_b = bb.take(ib)
        if negate:
            seg_b = seg_b.neg()
        target = np.maximum(a.exps[ia], b.exps[ib])
        total = _lift(ba.take(ia), a.exps[ia], target).add(_lift(seg_b, b.exps[ib], target))
        exps = a.exps.copy()
        exps[ia] = target
        a._assign(ba.put(ia, total), exps)

    @staticmethod
    def i_shuffle(pk: PK, a: EV, indices: Any) -> None:
        out = a._select(_as_index(indices))
        a._batch, a._wire, a.exps, a._size = out._batch, out._wire, out.exps, out._size

    @staticmethod
    def shuffle(pk: PK, a: EV, indices: Any) -> EV:
        return a._select(_as_index(indices))

    @staticmethod
    def i_update(pk: PK, a: EV, b: EV, positions: Any, stride: int) -> None:
        """a[positions[i][j]] ⊕= b[i] for every j (rows of ``stride`` elements)."""
        rows = len(b) // stride
        _scatter_add(pk, a, b, np.arange(rows), positions, stride)

    @staticmethod
    def i_update_with_masks(pk: PK, a: EV, b: EV, positions: Any, masks: Any, stride: int
                            ) -> None:
        """Like i_update, for the rows of b where ``masks`` is true (positions index those rows)."""
        m = _as_index(masks).astype(bool).reshape(-1)
        _scatter_add(pk, a, b, np.nonzero(m)[0], positions, stride)

    @staticmethod
    def chunking_cumsum_with_step(pk: PK, a: EV, chunk_sizes: List[int], step: int) -> None:
        """In place: within each chunk, running sums over rows of ``step`` elements (row j of a
        chunk ⊕= row j−1, for j = 1, 2, ... in order)."""
        batch = a._materialize(pk.key)
        limbs = np.array(batch.limbs, dtype=np.uint64, copy=True)
        exps = a.exps.copy()
        starts_l, rows_l = [], []
        pos = 0
        for c in chunk_sizes:
            starts_l.append(pos // step)
            rows_l.append(c // step)
            pos += c
        starts, rows = np.array(starts_l, np.int64), np.array(rows_l, np.int64)
        k = np.arange(step)
        for j in range(1, int(rows.max(initial=0))):
            live = starts[rows > j] + j
            dst = (live[:, None] * step + k).reshape(-1)
            src = dst - step
            target = np.maximum(exps[dst], exps[src])
            cur = CiphertextBatch(pk.key, limbs[dst], batch.backend)
            prev = CiphertextBatch(pk.key, limbs[src], batch.backend)
            limbs[dst] = np.asarray(_lift(cur, exps[dst], target).add(
                _lift(prev, exps[src], target)).limbs)
            exps[dst] = target
        a._assign(CiphertextBatch(pk.key, limbs, batch.backend), exps)

    @staticmethod
    def intervals_sum_with_step(pk: PK, a: EV, intervals: List[Tuple[int, int]], step: int
                                ) -> EV:
        """For each interval [s, e): the ``step`` sums of its elements with equal (i - s) % step."""
        batch = a._materialize(pk.key)
        idx_l, groups_l = [], []
        for g, (s, e) in enumerate(intervals):
            r = np.arange(s, e)
            idx_l.append(r)
            groups_l.append(g * step + (r - s) % step)
        idx = np.concatenate(idx_l) if idx_l else np.zeros(0, np.int64)
        groups = np.concatenate(groups_l) if groups_l else np.zeros(0, np.int64)
        scale = int(a.exps[idx].max(initial=0))
        lifted = _lift(batch.take(idx), a.exps[idx], np.full(len(idx), scale, np.int64))
        out = lifted.sum_groups(groups, len(intervals) * step)
        return EV(out, np.full(out.size, scale, np.int64))

    @staticmethod
    def pack_squeeze(a: EV, pack_num: int, shift_bit: int, pk: PK) -> EV:
        """Ciphertexts folded in groups of ``pack_num`` (first element most significant):
        acc = E(acc)^(2^shift_bit) ⊕ E(x) over the group, i.e. element i of a group of g ends up
        lifted by shift_bit·(g − 1 − i) bits.

        Horner's order, one batched lift and one addition per position across all groups: a group
        costs shift_bit·(g − 1) squarings, where lifting each element by its own power would cost
        shift_bit·g(g − 1)/2 (SecureBoost packs a dozen or more values per ciphertext)."""
        batch = a._materialize(pk.key)
        n, pack_num, shift = len(batch), int(pack_num), int(shift_bit)
        if pack_num < 1:
            raise OperandError(f"pack_num must be at least 1, not {pack_num}")
        starts = np.arange(0, n, pack_num, dtype=np.int64)
        sizes = np.minimum(pack_num, n - starts)
        acc = batch.take(starts)
        for pos in range(1, int(sizes.max(initial=0))):
            live = np.nonzero(sizes > pos)[0]      # every group but a short last one
            step = acc.take(live).lift(shift).add(batch.take(starts[live] + pos))
            acc = step if len(live) == len(starts) else acc.put(live, step)
        return EV(acc, np.zeros(len(starts), np.int64))


# ---------------------------------------------------------------------------------- unpickling
# What a pickled kit object calls on the receiving side: the allow-list names these functions,
# not the classes, so a pickle cannot make an object without its checking constructor.
def _rebuild_fv(values: Any, exps: Any, modulus: Any) -> FV:
    return FV(values, exps, modulus)


def _rebuild_ev(data: Any, exps: Any, size: Any, num_limbs: Any) -> EV:
    return EV(data, exps, size, num_limbs)


def _rebuild_pk(n: Any) -> PK:
    return PK(n)


def _rebuild_coder() -> Coder:
    return Coder()

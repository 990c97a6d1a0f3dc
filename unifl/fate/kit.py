"""A FATE 2.x PHE kit (``keygen``, ``SK``, ``PK``, ``Coder``, ``evaluator``) computed by UniFL.

FATE's algorithms only ever talk to a kit through this surface (the protocol of
``fate.arch.protocol.phe.type.TensorEvaluator`` plus the ``Coder`` methods they call), so a FATE job
that selects ``kind: unifl`` runs all of its Paillier arithmetic on the party's UniFL backend
(:mod:`unifl.fate.party`).

Representation
--------------
* ``FV`` (encoded plaintexts): Python ints ``v`` with a per-element binary scale ``e`` meaning
  ``v / 2^e``.  A float vector is encoded at one scale, FLOAT_BITS (64) bits below the binary
  exponent of its largest element (at most MAX_SCALE); a float scalar exactly, at the smallest scale
  that holds it (0.25 -> e = 2, so products grow little); integers at ``e = 0``.
  After decryption the values are residues mod n (``modulus`` set) and are centred on decoding:
  r <= n/3 is r, r >= n - n/3 is r - n, anything between is an overflow
  (:class:`~unifl.core.errors.EncodingOverflowError`).
* ``EV`` (ciphertexts): plain (non-Montgomery) ciphertexts mod n² as (N, L) uint64 limbs, the same
  per-element scales, and a "trivial zeros" state (``limbs is None``) for ``evaluator.zeros``,
  which FATE calls without a key: E(0) with r = 1 is the integer 1 for every modulus.
* Homomorphic rules (all mod n²): E(a)·E(b) = E(a+b); E(a)^k = E(k·a) (k < 0 uses E(a)^-1, never
  n - |k|); adding values of different scales first lifts the finer-grained one,
  E(v)^(2^d) = E(v·2^d).  ``encrypt_encoded(obfuscate=False)`` is the deterministic 1 + m·n, as in
  FATE's own kit (used for plaintext operands); ``obfuscate=True`` multiplies by a fresh r^n.

Packing (SecureBoost): ``pack_floats`` folds ``pack_num`` values as acc = (acc << offset_bit) +
round(x·2^precision) (first value most significant, a short last group folded the same way);
``pack_squeeze`` does the same to ciphertexts with E(acc)^(2^shift)·E(x).  These are the bit layouts
FATE's ``unpack_floats`` expects, so FATE's SecureBoost decodes them unchanged.

Pickling: FATE pickles kits and ciphertexts between parties and only accepts allow-listed classes.
Every class here reduces to itself plus plain ints/bytes (``__reduce__``), so the allow-list entry is
exactly these six names.  A received ``PK`` computes on the *receiving* party's backend.
"""

from __future__ import annotations

import math
import threading
from typing import List, Optional, Sequence, Tuple

import gmpy2
import numpy as np
import torch

from .. import base_op, mod_op
from ..base_op import from_limbs, to_limbs
from ..core.errors import EncodingOverflowError, KeyMismatchError, OperandError, SerializationError
from ..phe_sdk import paillier
from ..phe_sdk.array import EncryptedArray
from . import party

FLOAT_BITS = 64       # fraction bits kept below the largest element of an encoded float vector
MAX_SCALE = 256       # no encoding finer than 2^-256 (tiny values round to it)
_I64 = np.dtype("<i8")

__all__ = ["keygen", "SK", "PK", "Coder", "FV", "EV", "evaluator", "FLOAT_BITS", "MAX_SCALE"]

_keys: dict[int, paillier.PublicKey] = {}
_keys_lock = threading.Lock()


def _public_key(n: int) -> paillier.PublicKey:
    """One UniFL PublicKey per modulus per process (unpickling a PK many times stays cheap)."""
    with _keys_lock:
        key = _keys.get(n)
        if key is None:
            key = _keys[n] = paillier.PublicKey(n)
        return key


#: largest |scale| accepted from bytes (unpickling: another party's vector).  Encoding makes
#: scales in [0, MAX_SCALE] and each product adds two, so honest chains stay far below; a scale
#: from outside becomes a shift (2^d for the lift E(v)^(2^d), v << -e on decoding), so 2^40 would
#: have this party allocate 128 GiB.
MAX_RECEIVED_SCALE = 1 << 15


def _exps(x, size: int) -> np.ndarray:
    if isinstance(x, (bytes, bytearray)):
        if len(x) % _I64.itemsize:
            raise SerializationError(f"{len(x)} scale bytes do not form int64 scales")
        out = np.frombuffer(x, dtype=_I64).astype(np.int64)
        bad = (out > MAX_RECEIVED_SCALE) | (out < -MAX_RECEIVED_SCALE)   # np.abs(-2^63) < 0
        if bad.any():
            raise SerializationError(f"received scale 2^-{int(out[np.argmax(bad)])} is beyond "
                                     f"the limit of {MAX_RECEIVED_SCALE} bits")
    else:
        out = np.asarray(x, dtype=np.int64).reshape(-1).copy()
    if out.shape != (size,):
        raise OperandError(f"{size} values but {out.shape[0]} scales")
    return out


# ---------------------------------------------------------------------------------- containers
class FV:
    """Encoded plaintexts: ints ``values`` at binary scales ``exps`` (residues mod ``modulus`` after
    decryption, signed before encryption)."""

    __slots__ = ("values", "exps", "modulus")

    def __init__(self, values: Sequence[int], exps, modulus: Optional[int] = None) -> None:
        self.values = [int(v) for v in values]
        self.exps = _exps(exps, len(self.values))
        self.modulus = None if modulus is None else int(modulus)

    def __reduce__(self):
        return FV, (tuple(self.values), self.exps.astype(_I64).tobytes(), self.modulus)

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        return f"<unifl FV len={len(self)}>"

    def signed(self) -> list[int]:
        """The values as signed ints (residues centred; overflow raises)."""
        if self.modulus is None:
            return list(self.values)
        n = self.modulus
        from ..phe_sdk.encoding import from_residues
        return from_residues(self.values, n, n // 3 - 1)

    def slice(self, start: int, size: int) -> "FV":
        return FV(self.values[start:start + size], self.exps[start:start + size], self.modulus)

    def tolist(self) -> list["FV"]:
        return [self.slice(i, 1) for i in range(len(self))]

    def cat(self, others: Sequence["FV"]) -> "FV":
        parts = [self, *others]
        return FV([v for p in parts for v in p.values], np.concatenate([p.exps for p in parts]),
                  self.modulus)


class EV:
    """Paillier ciphertexts: plain residues mod n² as (N, L) limbs (``None``: N trivial E(0)s whose
    modulus is not known yet) with per-element binary scales."""

    __slots__ = ("limbs", "exps", "_size", "_unchecked")

    def __init__(self, limbs, exps, size: Optional[int] = None, num_limbs: Optional[int] = None,
                 *, unchecked: bool = False) -> None:
        if isinstance(limbs, (bytes, bytearray)):
            # bytes are how ciphertexts arrive from another party (unpickling): not yet known to
            # be units mod n², so the first use under a key checks them (see _materialize)
            if not isinstance(num_limbs, int) or num_limbs < 1 or len(limbs) % (8 * num_limbs):
                raise SerializationError(f"{len(limbs)} ciphertext bytes do not form limbs of "
                                         f"width {num_limbs!r}")
            limbs = np.frombuffer(limbs, dtype="<u8").astype(np.uint64).reshape(-1, num_limbs)
            unchecked = True
        self.limbs = None if limbs is None else np.ascontiguousarray(limbs, dtype=np.uint64)
        self._size = int(size) if limbs is None else self.limbs.shape[0]
        self.exps = _exps(exps, self._size)
        self._unchecked = bool(unchecked) and self.limbs is not None

    def __reduce__(self):
        if self.limbs is None:
            return EV, (None, self.exps.astype(_I64).tobytes(), self._size, None)
        return EV, (self.limbs.astype("<u8").tobytes(), self.exps.astype(_I64).tobytes(),
                    self._size, self.limbs.shape[1])

    def __len__(self) -> int:
        return self._size

    def __repr__(self) -> str:
        state = "trivial zeros" if self.limbs is None else f"{self.limbs.shape[1] * 64}-bit mod n²"
        return f"<unifl EV len={self._size}, {state}>"

    # -- FATE touches these directly on the vector (DataFrame blocks, histograms)
    def slice(self, start: int, size: int) -> "EV":
        sl = slice(start, start + size)
        return EV(None if self.limbs is None else self.limbs[sl], self.exps[sl],
                  len(self.exps[sl]), unchecked=self._unchecked)

    def tolist(self) -> list["EV"]:
        return [self.slice(i, 1) for i in range(self._size)]

    def cat(self, others: Sequence["EV"]) -> "EV":
        parts = [self, *others]
        exps = np.concatenate([p.exps for p in parts]) if parts else np.zeros(0, np.int64)
        widths = {p.limbs.shape[1] for p in parts if p.limbs is not None}
        if not widths:
            return EV(None, exps, len(exps))
        if len(widths) > 1:
            raise KeyMismatchError("cannot concatenate ciphertexts of different key sizes")
        width = widths.pop()
        return EV(np.concatenate([p._limbs_or_ones(width) for p in parts]), exps,
                  unchecked=any(p._unchecked for p in parts))

    def _limbs_or_ones(self, width: int) -> np.ndarray:
        if self.limbs is not None:
            return self.limbs
        ones = np.zeros((self._size, width), np.uint64)
        ones[:, 0] = 1
        return ones

    def _materialize(self, pk: "PK") -> np.ndarray:
        """The limbs under ``pk``; ciphertexts that came from outside are checked here, once, to
        be units mod n² in [1, n²) (InvalidCiphertextError otherwise).  Every evaluator and
        decryptor input passes through here; results computed from units are units."""
        if self.limbs is None:
            self.limbs = self._limbs_or_ones(pk.ctx.num_limbs)
        elif self.limbs.shape[1] != pk.ctx.num_limbs:
            raise KeyMismatchError("ciphertexts and public key have different sizes")
        if self._unchecked:
            paillier.require_units(pk.key, self.limbs)
            self._unchecked = False
        return self.limbs


# ---------------------------------------------------------------------------------- keys
class PK:
    """Public key n (g = n + 1).  Pickles as n alone; computes on this party's backend."""

    def __init__(self, n: int) -> None:
        self.n = int(n)
        self.key = _public_key(self.n)
        self.ctx = self.key.nsquare_ctx

    def __reduce__(self):
        return PK, (self.n,)

    def __eq__(self, other) -> bool:
        return isinstance(other, PK) and other.n == self.n

    def __hash__(self) -> int:
        return hash(("unifl-fate-pk", self.n))

    def __repr__(self) -> str:
        return f"<unifl PK {self.key.bits} bits>"

    def encrypt_encoded(self, vec: FV, obfuscate: bool) -> EV:
        """E(v) for each encoded value; ``obfuscate=False`` gives the deterministic 1 + m·n."""
        n, nsq = self.n, self.key.nsquare
        residues = [v % n for v in (vec.signed() if vec.modulus not in (None, n) else vec.values)]
        if not obfuscate:
            limbs = to_limbs([(1 + m * n) % nsq for m in residues], self.ctx.num_limbs)
            return EV(limbs, vec.exps)
        be = party.current_backend()
        c_mont = paillier.encrypt_limbs(be, self.key, self.key.plaintext_limbs(residues))
        return EV(base_op.from_mont(be, self.ctx, c_mont), vec.exps)

    def encrypt_encoded_scalar(self, val: FV, obfuscate: bool) -> EV:
        return self.encrypt_encoded(val, obfuscate)


class SK:
    """Private key (p, q); decrypts with the CRT on this party's backend."""

    def __init__(self, p: int, q: int) -> None:
        self.key = paillier.PrivateKey(p, q)

    def __reduce__(self):
        return SK, (self.key.p, self.key.q)

    def __repr__(self) -> str:  # never shows the primes
        return f"<unifl SK for {self.key.public_key.bits}-bit n>"

    def decrypt_to_encoded(self, vec: EV) -> FV:
        pk = self.key.public_key
        n = pk.n
        if vec.limbs is None:
            return FV([0] * len(vec), vec.exps, n)
        if vec.limbs.shape[1] != pk.nsquare_ctx.num_limbs:
            raise KeyMismatchError("ciphertexts and private key have different sizes")
        # always, whatever the vector's history: a non-unit reaching the CRT decryption factors n
        paillier.require_units(pk, vec.limbs)
        be = party.current_backend()
        mont = base_op.to_mont(be, pk.nsquare_ctx, vec.limbs)
        return FV(from_limbs(paillier.decrypt_limbs(be, self.key, mont)), vec.exps, n)


def keygen(key_size: int) -> Tuple[SK, PK, "Coder"]:
    """A fresh key pair (CSPRNG primes of key_size/2 bits each) and a coder."""
    pk, sk = paillier.keygen(int(key_size))
    return SK(sk.p, sk.q), PK(pk.n), Coder()


# ---------------------------------------------------------------------------------- coder
def _to_numpy(vec) -> np.ndarray:
    if isinstance(vec, torch.Tensor):
        return vec.detach().cpu().reshape(-1).numpy()
    return np.asarray(vec).reshape(-1)


def _ldexp_int(v: int, e: int) -> float:
    """v / 2^e as a float without overflowing on big ints."""
    extra = v.bit_length() - 1000
    if extra > 0:
        v, e = v >> extra, e - extra
    return math.ldexp(v, -e)


def _exact_scalar(x: float) -> tuple[int, int]:
    """(v, e) with v / 2^e == x exactly and e minimal (rounded at MAX_SCALE)."""
    num, den = x.as_integer_ratio()        # den is a power of two
    e = den.bit_length() - 1
    if e <= MAX_SCALE:
        return num, e
    return _round_half_away(math.ldexp(x, MAX_SCALE)), MAX_SCALE


def _round_half_away(x: float) -> int:
    return int(math.copysign(math.floor(abs(x) + 0.5), x))


_FLOATS = (torch.float64, torch.float32, torch.float16, torch.bfloat16)
_INTS = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)


class Coder:
    """Fixed-point encoder/decoder (see the module docstring); stateless."""

    def __reduce__(self):
        return Coder, ()

    # -- vectors
    def encode_f64_vec(self, vec) -> FV:
        x = _to_numpy(vec).astype(np.float64)
        if not np.isfinite(x).all():
            raise OperandError("cannot encode NaN or infinity")
        peak = float(np.abs(x).max(initial=0.0))
        scale = int(np.clip(FLOAT_BITS - math.frexp(peak)[1], 0, MAX_SCALE)) if peak else 0
        ints = [int(v) for v in np.rint(np.ldexp(x, scale)).tolist()]
        return FV(ints, np.full(len(ints), scale, np.int64))

    encode_f32_vec = encode_f64_vec

    def encode_i64_vec(self, vec) -> FV:
        ints = [int(v) for v in _to_numpy(vec).tolist()]
        return FV(ints, np.zeros(len(ints), np.int64))

    encode_i32_vec = encode_i64_vec

    def decode_f64_vec(self, vec: FV) -> torch.Tensor:
        vals = vec.signed()
        return torch.tensor([_ldexp_int(v, int(e)) for v, e in zip(vals, vec.exps.tolist())],
                            dtype=torch.float64)

    def decode_f32_vec(self, vec: FV) -> torch.Tensor:
        return self.decode_f64_vec(vec).to(torch.float32)

    def decode_i64_vec(self, vec: FV) -> torch.Tensor:
        vals = [v >> int(e) if e >= 0 else v << -int(e) for v, e in zip(vec.signed(),
                                                                         vec.exps.tolist())]
        for v in vals:
            if not -(1 << 63) <= v < (1 << 63):
                raise EncodingOverflowError("decoded value does not fit in int64")
        return torch.tensor(vals, dtype=torch.int64)

    def decode_i32_vec(self, vec: FV) -> torch.Tensor:
        return self.decode_i64_vec(vec).to(torch.int32)

    # -- scalars
    def encode_f64(self, val) -> FV:
        x = float(val)
        if not math.isfinite(x):
            raise OperandError("cannot encode NaN or infinity")
        v, e = _exact_scalar(x)
        return FV([v], [e])

    encode_f32 = encode_f64

    def encode_i64(self, val) -> FV:
        return FV([int(val)], [0])

    encode_i32 = encode_i64

    def decode_f64(self, val: FV) -> float:
        return float(self.decode_f64_vec(val)[0])

    decode_f32 = decode_f64

    def decode_i64(self, val: FV) -> int:
        return int(self.decode_i64_vec(val)[0])

    decode_i32 = decode_i64

    # -- by dtype
    def encode(self, val, dtype=None) -> FV:
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

    def encode_vec(self, vec, dtype=None) -> FV:
        if dtype is None:
            dtype = vec.dtype if isinstance(vec, torch.Tensor) else torch.float64
        if isinstance(vec, torch.Tensor) and vec.dtype != dtype:
            vec = vec.to(dtype=dtype)
        if dtype in _FLOATS:
            return self.encode_f64_vec(vec)
        if dtype in _INTS:
            return self.encode_i64_vec(vec)
        raise NotImplementedError(f"{dtype} not supported")

    def decode_vec(self, vec: FV, dtype) -> torch.Tensor:
        if dtype in (torch.float64, None):
            return self.decode_f64_vec(vec)
        if dtype in _FLOATS:
            return self.decode_f64_vec(vec).to(dtype)
        if dtype in _INTS:
            return self.decode_i64_vec(vec).to(dtype)
        raise NotImplementedError(f"{dtype} not supported")

    def encode_tensor(self, tensor, dtype=None) -> FV:
        if dtype is None:
            dtype = tensor.dtype
        return self.encode_vec(tensor.flatten(), dtype=dtype)

    def decode_tensor(self, tensor: FV, dtype, shape=None, device=None) -> torch.Tensor:
        data = self.decode_vec(tensor, dtype)
        if shape is not None:
            data = data.reshape(shape)
        if device is not None:
            data = data.to(device.to_torch_device())
        return data

    # -- packing (SecureBoost)
    def pack_floats(self, float_tensor, offset_bit: int, pack_num: int, precision: int) -> FV:
        xs = _to_numpy(float_tensor).astype(np.float64).tolist()
        ints = [_round_half_away(math.ldexp(x, precision)) for x in xs]
        return self.pack_vec(ints, offset_bit, pack_num)

    def unpack_floats(self, packed: FV, offset_bit: int, pack_num: int, precision: int,
                      total_num: int) -> torch.Tensor:
        ints = self._unpack(packed, offset_bit, pack_num, total_num)
        # torch's default dtype, as FATE's coder returns
        return torch.tensor([_ldexp_int(v, precision) for v in ints])

    def pack_vec(self, vec, num_shift_bit: int, num_elem_each_pack: int) -> FV:
        ints = [int(v) for v in (_to_numpy(vec).tolist() if not isinstance(vec, list) else vec)]
        packed = []
        for g in range(0, len(ints), num_elem_each_pack):
            acc = 0
            for v in ints[g:g + num_elem_each_pack]:
                acc = (acc << num_shift_bit) + v
            packed.append(acc)
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
def _is_one(limbs: np.ndarray) -> np.ndarray:
    return (limbs[:, 0] == 1) & ~limbs[:, 1:].any(axis=1)


def _mul(pk: PK, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if len(a) == 0:
        return a.copy()
    return mod_op.mod_mul(party.current_backend(), pk.ctx, a, b)


def _pow(pk: PK, a: np.ndarray, exps: Sequence[int]) -> np.ndarray:
    """a^e row-wise for non-negative ints e (one shared exponent when len(exps) == 1)."""
    if len(a) == 0:
        return a.copy()
    return mod_op.mod_exp(party.current_backend(), pk.ctx, a, mod_op.exp_limbs(list(exps)))


def _inverse(pk: PK, a: np.ndarray) -> np.ndarray:
    nsq = gmpy2.mpz(pk.key.nsquare)
    return to_limbs([int(gmpy2.invert(v, nsq)) for v in from_limbs(a)], pk.ctx.num_limbs)


def _pow_signed(pk: PK, a: np.ndarray, ks: Sequence[int]) -> np.ndarray:
    ks = [int(k) for k in ks]
    neg = np.array([k < 0 for k in ks], dtype=bool)
    base = a
    if neg.any():
        base = a.copy() if len(ks) > 1 else _inverse(pk, a)
        if len(ks) > 1:
            base[neg] = _inverse(pk, a[neg])
    return _pow(pk, base, [abs(k) for k in ks])


def _lift(pk: PK, limbs: np.ndarray, exps: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Ciphertexts at scales ``exps`` re-expressed at the (not smaller) ``target`` scales."""
    d = target - exps
    if (d < 0).any():
        raise OperandError("cannot lower a ciphertext's scale homomorphically")
    todo = np.nonzero((d > 0) & ~_is_one(limbs))[0]
    if len(todo) == 0:
        return limbs
    out = limbs.copy()
    out[todo] = _pow(pk, limbs[todo], [1 << int(x) for x in d[todo]])
    return out


def _add_arrays(pk: PK, la, ea, lb, eb) -> tuple[np.ndarray, np.ndarray]:
    """E(a) ⊕ E(b) element-wise (one side may have a single element: broadcast)."""
    if len(la) != len(lb):
        if len(lb) == 1:
            lb, eb = np.repeat(lb, len(la), 0), np.repeat(eb, len(la))
        elif len(la) == 1:
            la, ea = np.repeat(la, len(lb), 0), np.repeat(ea, len(lb))
        else:
            raise OperandError(f"cannot add ciphertext vectors of lengths {len(la)} and {len(lb)}")
    target = np.maximum(ea, eb)
    return _mul(pk, _lift(pk, la, ea, target), _lift(pk, lb, eb, target)), target


def _add(pk: PK, a: EV, b: EV) -> EV:
    limbs, exps = _add_arrays(pk, a._materialize(pk), a.exps, b._materialize(pk), b.exps)
    return EV(limbs, exps)


def _neg(pk: PK, a: EV) -> EV:
    return EV(_inverse(pk, a._materialize(pk)), a.exps)


def _neg_fv(v: FV) -> FV:
    return FV([-x for x in v.signed()], v.exps)


def _encrypted_array(pk: PK, a: EV, shape) -> tuple[EncryptedArray, int]:
    """``a`` lifted to one common scale, as an EncryptedArray (for the multi-exponentiations).

    Bounds are not tracked by FATE's kit contract (bound 0 switches the SDK's pre-checks off); an
    overflow still shows on decoding.
    """
    limbs = a._materialize(pk)
    scale = int(a.exps.max(initial=0))
    limbs = _lift(pk, limbs, a.exps, np.full(len(limbs), scale, np.int64))
    be = party.current_backend()
    mont = base_op.to_mont(be, pk.ctx, limbs)
    return EncryptedArray(pk.key, mont, tuple(int(s) for s in shape), 0, 0, be), scale


def _plain_matrix(v: FV, shape) -> tuple[np.ndarray, int]:
    scale = int(v.exps.max(initial=0))
    ints = [x << (scale - int(e)) for x, e in zip(v.signed(), v.exps.tolist())]
    out = np.empty(len(ints), dtype=object)
    out[:] = ints
    return out.reshape(tuple(int(s) for s in shape)), scale


def _from_array(pk: PK, arr: EncryptedArray, scale: int) -> EV:
    be = party.current_backend()
    limbs = base_op.from_mont(be, pk.ctx, arr.limbs)
    return EV(limbs, np.full(len(limbs), scale, np.int64))


def _as_index(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().astype(np.int64)
    return np.asarray(x, dtype=np.int64)


def _scatter_add(pk: PK, a: EV, b: EV, src_rows: np.ndarray, positions, stride: int) -> None:
    """a[positions[i, j]·stride + k] ⊕= b[src_rows[i]·stride + k] for all i, j, k < stride."""
    pos = _as_index(positions)
    if pos.ndim == 1:
        pos = pos[:, None]
    if pos.shape[0] != len(src_rows):
        raise OperandError(f"{pos.shape[0]} position rows for {len(src_rows)} value rows")
    if pos.size == 0:
        return
    la, lb = a._materialize(pk), b._materialize(pk)
    k = np.arange(stride)
    targets = (pos[:, :, None] * stride + k).reshape(-1)
    sources = np.broadcast_to(src_rows[:, None, None] * stride + k, pos.shape + (stride,)).reshape(-1)
    uniq, groups = np.unique(targets, return_inverse=True)
    scale = a.exps.copy()
    np.maximum.at(scale, targets, b.exps[sources])
    tgt_scale = scale[uniq]
    contrib = _lift(pk, lb[sources], b.exps[sources], tgt_scale[groups])
    be = party.current_backend()
    prod = mod_op.mont_prod_groups(be, pk.ctx, base_op.to_mont(be, pk.ctx, contrib), groups,
                                   len(uniq))
    prod = base_op.from_mont(be, pk.ctx, prod)
    cur = _lift(pk, la[uniq], a.exps[uniq], tgt_scale)
    la[uniq] = _mul(pk, cur, prod)
    a.exps[uniq] = tgt_scale


class evaluator:
    """FATE's ``TensorEvaluator`` surface: static methods only (FATE pickles the class itself)."""

    # -- ciphertext ⊕ ciphertext / plaintext
    @staticmethod
    def add(a: EV, b: EV, pk: PK) -> EV:
        return _add(pk, a, b)

    @staticmethod
    def add_plain(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        enc = coder.encode_tensor(b, dtype=output_dtype or b.dtype)
        return _add(pk, a, pk.encrypt_encoded(enc, obfuscate=False))

    @staticmethod
    def add_plain_scalar(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        return _add(pk, a, pk.encrypt_encoded_scalar(coder.encode(b, dtype=output_dtype), False))

    @staticmethod
    def sub(a: EV, b: EV, pk: PK) -> EV:
        return _add(pk, a, _neg(pk, b))

    @staticmethod
    def sub_plain(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        enc = _neg_fv(coder.encode_tensor(b, dtype=output_dtype or b.dtype))
        return _add(pk, a, pk.encrypt_encoded(enc, obfuscate=False))

    @staticmethod
    def sub_plain_scalar(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        enc = _neg_fv(coder.encode(b, dtype=output_dtype))
        return _add(pk, a, pk.encrypt_encoded_scalar(enc, False))

    @staticmethod
    def rsub(a: EV, b: EV, pk: PK) -> EV:
        return _add(pk, b, _neg(pk, a))

    @staticmethod
    def rsub_plain(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        enc = coder.encode_tensor(b, dtype=output_dtype or b.dtype)
        return _add(pk, pk.encrypt_encoded(enc, obfuscate=False), _neg(pk, a))

    @staticmethod
    def rsub_plain_scalar(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        enc = coder.encode(b, dtype=output_dtype)
        return _add(pk, pk.encrypt_encoded_scalar(enc, False), _neg(pk, a))

    # -- ciphertext ⊗ plaintext
    @staticmethod
    def mul_plain(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        enc = coder.encode_tensor(b, dtype=output_dtype or b.dtype)
        la = a._materialize(pk)
        if len(enc) == 1 and len(la) != 1:
            return evaluator._mul_scalar_fv(pk, a, enc)
        if len(enc) != len(la):
            if len(la) == 1:
                la, a_exps = np.repeat(la, len(enc), 0), np.repeat(a.exps, len(enc))
                return EV(_pow_signed(pk, la, enc.signed()), a_exps + enc.exps)
            raise OperandError(f"cannot multiply {len(la)} ciphertexts by {len(enc)} plaintexts")
        return EV(_pow_signed(pk, la, enc.signed()), a.exps + enc.exps)

    @staticmethod
    def _mul_scalar_fv(pk: PK, a: EV, enc: FV) -> EV:
        return EV(_pow_signed(pk, a._materialize(pk), enc.signed()), a.exps + int(enc.exps[0]))

    @staticmethod
    def mul_plain_scalar(a: EV, b, pk: PK, coder: Coder, output_dtype=None) -> EV:
        return evaluator._mul_scalar_fv(pk, a, coder.encode(b, dtype=output_dtype))

    @staticmethod
    def matmul(a: EV, b, a_shape, b_shape, pk: PK, coder: Coder, output_dtype=None) -> EV:
        """E(A) @ B for plaintext B (multi-exponentiations sharing their bases)."""
        arr, sa = _encrypted_array(pk, a, a_shape)
        mat, sb = _plain_matrix(coder.encode_tensor(b, dtype=output_dtype or b.dtype), b_shape)
        return _from_array(pk, arr @ mat, sa + sb)

    @staticmethod
    def rmatmul(a: EV, b, a_shape, b_shape, pk: PK, coder: Coder, output_dtype=None) -> EV:
        """B @ E(A) for plaintext B."""
        arr, sa = _encrypted_array(pk, a, a_shape)
        mat, sb = _plain_matrix(coder.encode_tensor(b, dtype=output_dtype or b.dtype), b_shape)
        return _from_array(pk, arr.__rmatmul__(mat), sa + sb)

    # -- vectors
    @staticmethod
    def zeros(size, dtype=None) -> EV:
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
    def i_add(pk: PK, a: EV, b: EV, sa=0, sb=0, size: Optional[int] = None) -> None:
        """a[sa:sa+size] ⊕= b[sb:sb+size] in place."""
        evaluator._i_add(pk, a, b, sa, sb, size, negate=False)

    @staticmethod
    def i_sub(pk: PK, a: EV, b: EV, sa=0, sb=0, size: Optional[int] = None) -> None:
        """a[sa:sa+size] ⊖= b[sb:sb+size] in place."""
        evaluator._i_add(pk, a, b, sa, sb, size, negate=True)

    @staticmethod
    def _i_add(pk, a, b, sa, sb, size, negate) -> None:
        if size is None:
            size = min(len(a) - sa, len(b) - sb)
        la, lb = a._materialize(pk), b._materialize(pk)
        seg_b = lb[sb:sb + size].copy()
        if negate:
            seg_b = _inverse(pk, seg_b)
        limbs, exps = _add_arrays(pk, la[sa:sa + size], a.exps[sa:sa + size], seg_b,
                                  b.exps[sb:sb + size].copy())
        la[sa:sa + size] = limbs
        a.exps[sa:sa + size] = exps

    @staticmethod
    def i_shuffle(pk: PK, a: EV, indices) -> None:
        idx = _as_index(indices)
        if a.limbs is not None:
            a.limbs = a.limbs[idx]
        a.exps = a.exps[idx]

    @staticmethod
    def shuffle(pk: PK, a: EV, indices) -> EV:
        idx = _as_index(indices)
        return EV(None if a.limbs is None else a.limbs[idx], a.exps[idx], len(idx),
                  unchecked=a._unchecked)

    @staticmethod
    def i_update(pk: PK, a: EV, b: EV, positions, stride: int) -> None:
        """a[positions[i][j]] ⊕= b[i] for every j (rows of ``stride`` elements)."""
        rows = len(b) // stride
        _scatter_add(pk, a, b, np.arange(rows), positions, stride)

    @staticmethod
    def i_update_with_masks(pk: PK, a: EV, b: EV, positions, masks, stride: int) -> None:
        """Like i_update, for the rows of b where ``masks`` is true (positions index those rows)."""
        m = _as_index(masks).astype(bool).reshape(-1)
        _scatter_add(pk, a, b, np.nonzero(m)[0], positions, stride)

    @staticmethod
    def chunking_cumsum_with_step(pk: PK, a: EV, chunk_sizes: List[int], step: int) -> None:
        """In place: within each chunk, running sums over rows of ``step`` elements."""
        la = a._materialize(pk)
        starts, rows = [], []
        pos = 0
        for c in chunk_sizes:
            starts.append(pos // step)
            rows.append(c // step)
            pos += c
        starts, rows = np.array(starts, np.int64), np.array(rows, np.int64)
        k = np.arange(step)
        for j in range(1, int(rows.max(initial=0))):
            live = starts[rows > j] + j
            dst = (live[:, None] * step + k).reshape(-1)
            src = dst - step
            limbs, exps = _add_arrays(pk, la[dst], a.exps[dst], la[src], a.exps[src])
            la[dst] = limbs
            a.exps[dst] = exps

    @staticmethod
    def intervals_sum_with_step(pk: PK, a: EV, intervals: List[Tuple[int, int]], step: int
                                ) -> EV:
        """For each interval [s, e): the ``step`` sums of its elements with equal (i - s) % step."""
        la = a._materialize(pk)
        idx, groups = [], []
        for g, (s, e) in enumerate(intervals):
            r = np.arange(s, e)
            idx.append(r)
            groups.append(g * step + (r - s) % step)
        idx = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        groups = np.concatenate(groups) if groups else np.zeros(0, np.int64)
        scale = int(a.exps[idx].max(initial=0))
        limbs = _lift(pk, la[idx], a.exps[idx], np.full(len(idx), scale, np.int64))
        be = party.current_backend()
        out = mod_op.mont_prod_groups(be, pk.ctx, base_op.to_mont(be, pk.ctx, limbs), groups,
                                      len(intervals) * step)
        return EV(base_op.from_mont(be, pk.ctx, out), np.full(len(out), scale, np.int64))

    @staticmethod
    def pack_squeeze(a: EV, pack_num: int, shift_bit: int, pk: PK) -> EV:
        """Ciphertexts folded in groups of ``pack_num``: E(acc)^(2^shift_bit) ⊕ E(x)."""
        la = a._materialize(pk)
        n = len(la)
        groups = np.arange(n) // pack_num
        g_size = np.minimum(pack_num, n - groups * pack_num)
        power = g_size - 1 - np.arange(n) % pack_num
        lifted = _pow(pk, la, [1 << (shift_bit * int(p)) for p in power])
        be = party.current_backend()
        num = int(groups.max(initial=-1)) + 1
        out = mod_op.mont_prod_groups(be, pk.ctx, base_op.to_mont(be, pk.ctx, lifted), groups, num)
        return EV(base_op.from_mont(be, pk.ctx, out), np.zeros(num, np.int64))

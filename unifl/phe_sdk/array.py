"""``EncryptedArray``: a NumPy-like array of Paillier ciphertexts (in the spirit of FLASH Listing 1).

A thin fixed-point layer over :class:`~unifl.phe_sdk.ciphertexts.CiphertextBatch`, which holds the
ciphertexts (Montgomery-form limbs mod n², kept between operations), computes on them and keeps
a bound on |v| used to detect overflow before it happens (see :mod:`unifl.phe_sdk.encoding`).  The
array adds a logical shape (indexing, broadcasting, axes) and one fixed-point scale: an element
holds the real value v / 2^scale_bits.

Homomorphic semantics (all mod n²):

* ``a + b``  (both encrypted)    E(x)·E(y) = E(x + y)           one MontMult per element
* ``a + p``  (p plaintext)       E(x)·(1 + p·n) = E(x + p)
* ``a * k``  (k plaintext)       E(x)^|k|, or (E(x)^-1)^|k| for k < 0 (never E(x)^(n−|k|))
* ``X @ a``, ``a @ X``           multi-exponentiations prod_i E(x_i)^X_ki sharing their bases
* ``a.sum(axis)``                grouped products

Operands at different scales are first brought to the finer one, E(v)^(2^d) = E(v·2^d); the
scale of a product is the sum of its operands' scales.

Results of plaintext multiplications are not re-randomised; call :meth:`obfuscate` before sending
one to a party that must not learn the multiplier.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.contract import Limbs
from ..core.errors import KeyMismatchError, OperandError
from ..core.limbs import DeviceBatch, from_limbs
from . import encoding
from .ciphertexts import CiphertextBatch
from .paillier import PrivateKey, PublicKey


class EncryptedArray:
    """A batch of Paillier ciphertexts with a shape, a fixed-point scale and an overflow bound.

    Args:
        public_key: the key the ciphertexts were made under.
        limbs: (size, L2) Montgomery-form limbs mod n² (or a backend's DeviceBatch of them).
        shape: the logical shape; its element count must be the number of rows of ``limbs``.
        scale_bits: each element holds v / 2^scale_bits for its plaintext v.
        bound: an upper bound on |v| over the elements (checked growth, see the module docstring).
        backend: what computes on the array (a Backend, a name, or None for the default).
    """

    __array_priority__ = 100  # so ndarray @ EncryptedArray defers to __rmatmul__

    def __init__(self, public_key: PublicKey, limbs: Limbs, shape: tuple[int, ...],
                 scale_bits: int, bound: int, backend: Backend | str | None = None) -> None:
        if not isinstance(limbs, DeviceBatch):    # a device batch stays where it is until fetched
            limbs = np.ascontiguousarray(limbs, dtype=np.uint64)
        # element count with Python ints: np.prod in int64 wraps, e.g. (2^33, 2^33) -> 0
        count = 1
        for s in shape:
            if int(s) < 0:
                raise OperandError(f"negative dimension in shape {shape}")
            count *= int(s)
        if limbs.shape != (count, public_key.nsquare_ctx.num_limbs):
            raise OperandError(f"limbs {limbs.shape} do not match shape {shape}")
        self.batch = CiphertextBatch(public_key, limbs, backend, int(bound))
        self.shape = tuple(int(s) for s in shape)
        self.scale_bits = int(scale_bits)

    @classmethod
    def _wrap(cls, batch: CiphertextBatch, shape: tuple[int, ...], scale_bits: int
              ) -> "EncryptedArray":
        """An array over ``batch`` (whose length already is the element count of ``shape``)."""
        out = cls.__new__(cls)
        out.batch = batch
        out.shape = tuple(int(s) for s in shape)
        out.scale_bits = int(scale_bits)
        return out

    # ---- the batch's state, read-only here
    @property
    def public_key(self) -> PublicKey:
        return self.batch.public_key

    @property
    def limbs(self) -> Limbs:
        """Montgomery-form limbs mod n², one row per element in C order."""
        return self.batch.limbs

    @property
    def backend(self) -> Backend:
        return self.batch.backend

    @property
    def bound(self) -> int:
        """An upper bound on |v| over the elements' plaintexts v (scaled integers)."""
        bound = self.batch.bound
        assert bound is not None, "an EncryptedArray's batch always tracks its bound"
        return bound

    # ---- construction / decryption
    @classmethod
    def encrypt(cls, public_key: PublicKey, values: Any, scale_bits: int | None = None,
                backend: Backend | str | None = None, private_key: PrivateKey | None = None
                ) -> "EncryptedArray":
        """Encrypt an array-like of ints/floats (O1): E(round(x·2^s)) per element x.

        Integer arrays default to scale s = 0, floats to 2^-24 resolution; pass ``scale_bits`` to
        choose.  The key owner may pass ``private_key`` to compute the obfuscation factors with
        the CRT (faster, same distribution).

        Raises:
            EncodingOverflowError: some |round(x·2^s)| > max_int.
            KeyMismatchError: ``private_key`` belongs to another key.
        """
        if private_key is not None and private_key.public_key != public_key:
            raise KeyMismatchError("private_key does not belong to public_key")
        arr = np.asarray(values)
        if scale_bits is None:
            scale_bits = encoding.default_scale(arr)
        enc = encoding.encode(arr, scale_bits, public_key.max_int)
        batch = CiphertextBatch.encrypt(public_key, enc.values, backend, private_key=private_key)
        return cls._wrap(batch, arr.shape, scale_bits)

    def decrypt(self, private_key: PrivateKey, exact: bool = False) -> np.ndarray:
        """Decrypt (O2) to a float64 array v / 2^scale_bits (ints for scale 0; Fractions with
        ``exact``).

        Raises:
            KeyMismatchError: ``private_key`` is not this array's key.
            EncodingOverflowError: a plaintext lies outside the encoding range.
        """
        if private_key.public_key != self.public_key:
            raise KeyMismatchError("this array was encrypted under another public key")
        ints = self.batch.decrypt(private_key)
        return encoding.decode(ints, self.scale_bits, self.shape, exact=exact)

    def ciphertexts(self) -> list[int]:
        """The plain ciphertext integers (python-paillier's ``ciphertext(be_secure=False)``)."""
        return from_limbs(self.batch.ciphertexts())

    # ---- shape and indexing
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.batch.size

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d encrypted array")
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"EncryptedArray(shape={self.shape}, scale=2^-{self.scale_bits}, "
                f"key={self.public_key.fingerprint[:12]}, backend={self.backend.name})")

    def _index_grid(self) -> np.ndarray:
        return np.arange(self.size).reshape(self.shape)

    def _take(self, idx: np.ndarray) -> "EncryptedArray":
        idx = np.asarray(idx)
        return EncryptedArray._wrap(self.batch.take(idx.reshape(-1)), idx.shape, self.scale_bits)

    def __getitem__(self, key: Any) -> "EncryptedArray":
        return self._take(self._index_grid()[key])

    def reshape(self, *shape: Any) -> "EncryptedArray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._take(self._index_grid().reshape(shape))

    def ravel(self) -> "EncryptedArray":
        return self.reshape(-1)

    def transpose(self, *axes: Any) -> "EncryptedArray":
        return self._take(self._index_grid().transpose(*axes))

    @property
    def T(self) -> "EncryptedArray":  # noqa: N802
        return self.transpose()

    def copy(self) -> "EncryptedArray":
        """An array with its own copy of the limbs."""
        return EncryptedArray(self.public_key, np.array(self.limbs, dtype=np.uint64, copy=True),
                              self.shape, self.scale_bits, self.bound, self.backend)

    @staticmethod
    def concatenate(arrays: list["EncryptedArray"], axis: int = 0) -> "EncryptedArray":
        """The arrays joined along ``axis`` (brought to the finest of their scales first)."""
        first = arrays[0]
        for a in arrays[1:]:
            first._check_peer(a)
        scale = max(a.scale_bits for a in arrays)
        arrays = [a._rescale(scale) for a in arrays]
        offs = np.cumsum([0] + [a.size for a in arrays])
        grid = np.concatenate([a._index_grid() + o for a, o in zip(arrays, offs)], axis=axis)
        batch = CiphertextBatch.concatenate([a.batch for a in arrays])
        return EncryptedArray._wrap(batch.take(grid.reshape(-1)), grid.shape, scale)

    # ---- helpers
    def _check_peer(self, other: "EncryptedArray") -> None:
        if other.public_key != self.public_key:
            raise KeyMismatchError("arrays encrypted under different public keys")

    def _rescale(self, scale_bits: int) -> "EncryptedArray":
        """The same values at a finer scale: E(v)^(2^d) = E(v·2^d)."""
        d = scale_bits - self.scale_bits
        if d == 0:
            return self
        return EncryptedArray._wrap(self.batch.lift(d), self.shape, scale_bits)

    def _broadcast(self, other_shape: tuple[int, ...]) -> tuple[np.ndarray, tuple[int, ...]]:
        out_shape = np.broadcast_shapes(self.shape, tuple(other_shape))
        return np.broadcast_to(self._index_grid(), out_shape).reshape(-1), out_shape

    @staticmethod
    def _broadcast_values(values: list[int], shape: tuple[int, ...], out_shape: tuple[int, ...]
                          ) -> list[int]:
        idx = np.broadcast_to(np.arange(len(values)).reshape(shape), out_shape).reshape(-1)
        return [values[j] for j in idx.tolist()]

    # ---- addition (O3)
    def __add__(self, other: Any) -> "EncryptedArray":
        if isinstance(other, EncryptedArray):
            self._check_peer(other)
            scale = max(self.scale_bits, other.scale_bits)
            a, b = self._rescale(scale), other._rescale(scale)
            out_shape = np.broadcast_shapes(a.shape, b.shape)
            ba, bb = a.batch, b.batch
            if a.shape != b.shape:
                ba = ba.take(np.broadcast_to(a._index_grid(), out_shape).reshape(-1))
                bb = bb.take(np.broadcast_to(b._index_grid(), out_shape).reshape(-1))
            return EncryptedArray._wrap(ba.add(bb), out_shape, scale)
        plain = np.asarray(other)
        enc = encoding.encode(plain, self.scale_bits, self.public_key.max_int)
        ia, out_shape = self._broadcast(plain.shape)
        addends = enc.values if plain.size == 1 else \
            self._broadcast_values(enc.values, plain.shape, out_shape)
        return EncryptedArray._wrap(self.batch.take(ia).add_plain(addends), out_shape,
                                    self.scale_bits)

    __radd__ = __add__

    def __neg__(self) -> "EncryptedArray":
        return EncryptedArray._wrap(self.batch.neg(), self.shape, self.scale_bits)

    def __sub__(self, other: Any) -> "EncryptedArray":
        if isinstance(other, EncryptedArray):
            return self + (-other)
        return self + (-np.asarray(other))

    def __rsub__(self, other: Any) -> "EncryptedArray":
        return (-self) + other

    # ---- ciphertext × plaintext (O4)
    def __mul__(self, other: Any) -> "EncryptedArray":
        if isinstance(other, EncryptedArray):
            raise TypeError("Paillier cannot multiply two ciphertexts; multiply by a plaintext")
        plain = np.asarray(other)
        k_scale = encoding.default_scale(plain)
        enc = encoding.encode(plain, k_scale, self.public_key.max_int)
        ia, out_shape = self._broadcast(plain.shape)
        # one multiplier shared by the batch runs as one sliding-window exponent
        ks = enc.values if plain.size == 1 else \
            self._broadcast_values(enc.values, plain.shape, out_shape)
        return EncryptedArray._wrap(self.batch.take(ia).mul(ks), out_shape,
                                    self.scale_bits + k_scale)

    __rmul__ = __mul__

    def __truediv__(self, other: Any) -> "EncryptedArray":
        return self * (1.0 / np.asarray(other, dtype=np.float64))

    # ---- matmul (O5)
    @staticmethod
    def _encode_matrix(plain: np.ndarray, max_int: int) -> tuple[np.ndarray, int]:
        """A plaintext matrix encoded at its default scale (int64, or Python ints in an object
        array where some value needs more: :func:`encoding.encode_array`), and that scale."""
        k_scale = encoding.default_scale(plain)
        return encoding.encode_array(plain, k_scale, max_int), k_scale

    def __matmul__(self, other: Any) -> "EncryptedArray":
        """E(A) @ B for a plaintext B: out[j, k] = prod_i E(A[j, i])^B[i, k]."""
        if isinstance(other, EncryptedArray):
            raise TypeError("Paillier cannot multiply two encrypted matrices")
        plain = np.asarray(other)
        a_shape = self.shape if self.ndim == 2 else (1,) + self.shape
        b = plain if plain.ndim == 2 else plain.reshape(-1, 1)
        if self.ndim not in (1, 2) or plain.ndim not in (1, 2) or a_shape[1] != b.shape[0]:
            raise OperandError(f"matmul shapes {self.shape} and {plain.shape} do not align")
        vals, k_scale = self._encode_matrix(b, self.public_key.max_int)
        out = self.batch.matmul((a_shape[0], a_shape[1]), vals)
        shape: tuple[int, ...] = (a_shape[0], b.shape[1])
        if plain.ndim == 1:
            shape = shape[:1]
        if self.ndim == 1:
            shape = shape[1:]
        return EncryptedArray._wrap(out, shape, self.scale_bits + k_scale)

    def __rmatmul__(self, other: Any) -> "EncryptedArray":
        """X @ E(A) for a plaintext X: out[k, m] = prod_i E(A[i, m])^X[k, i]."""
        plain = np.asarray(other)
        x = plain if plain.ndim == 2 else plain.reshape(1, -1)
        a_shape = self.shape if self.ndim == 2 else self.shape + (1,)
        if self.ndim not in (1, 2) or plain.ndim not in (1, 2) or x.shape[1] != a_shape[0]:
            raise OperandError(f"matmul shapes {plain.shape} and {self.shape} do not align")
        vals, k_scale = self._encode_matrix(x, self.public_key.max_int)
        out = self.batch.rmatmul((a_shape[0], a_shape[1]), vals)
        shape: tuple[int, ...] = (x.shape[0], a_shape[1])
        if self.ndim == 1:
            shape = shape[:1]
        if plain.ndim == 1:
            shape = shape[1:]
        return EncryptedArray._wrap(out, shape, self.scale_bits + k_scale)

    # ---- reductions
    def sum(self, axis: int | None = None) -> "EncryptedArray":
        """Homomorphic sum over ``axis`` (all elements when None)."""
        grid = self._index_grid()
        out_shape: tuple[int, ...]
        if axis is None:
            groups = np.zeros(self.size, np.int64)
            out_shape = ()
        else:
            axis = axis % self.ndim
            out_shape = self.shape[:axis] + self.shape[axis + 1:]
            ids = np.arange(int(np.prod(out_shape, dtype=np.int64))).reshape(out_shape)
            groups = np.empty(self.size, np.int64)
            groups[grid.reshape(-1)] = np.broadcast_to(np.expand_dims(ids, axis),
                                                       self.shape).reshape(-1)
        g = int(np.prod(out_shape, dtype=np.int64))
        return EncryptedArray._wrap(self.batch.sum_groups(groups, g), out_shape, self.scale_bits)

    def obfuscate(self) -> "EncryptedArray":
        """Re-randomise: multiply every ciphertext by a fresh encryption of zero."""
        return EncryptedArray._wrap(self.batch.obfuscate(), self.shape, self.scale_bits)

    def add_residues(self, residues: list[int]) -> "EncryptedArray":
        """E(v + r mod n) for each element and its r (ints, reduced mod n): c·(1 + r·n) mod n².

        The raw-mod-n addition behind one-time masks uniform mod n (which hide v perfectly, however
        large v is): the result is a residue, not an encoded value, so it has scale 0 and no
        meaningful bound (set to max_int, so any further arithmetic on it is refused); read it with
        :meth:`decrypt_residues`.  Not re-randomised: call :meth:`obfuscate` before sending."""
        pk = self.public_key
        if len(residues) != self.size:
            raise OperandError(f"{len(residues)} residues for {self.size} ciphertexts")
        # the sum is a residue, not an encoded value: no bound to grow
        raw = CiphertextBatch(pk, self.limbs, self.backend, None)
        masked = raw.add_plain([int(r) % pk.n for r in residues])
        return EncryptedArray._wrap(CiphertextBatch(pk, masked.limbs, self.backend, pk.max_int),
                                    self.shape, 0)

    def decrypt_residues(self, private_key: PrivateKey) -> list[int]:
        """The plaintexts as residues in [0, n), not decoded (values masked mod n look like
        overflow to :meth:`decrypt`); non-unit ciphertexts are refused as in :meth:`decrypt`."""
        if private_key.public_key != self.public_key:
            raise KeyMismatchError("this array was encrypted under another public key")
        return self.batch.decrypt_residues(private_key)

    def to(self, backend: Backend | str | None) -> "EncryptedArray":
        """The same ciphertexts, computed on from now on by another backend."""
        return EncryptedArray._wrap(self.batch.to(backend), self.shape, self.scale_bits)


def histogram(values: EncryptedArray, bins: np.ndarray, num_bins: int) -> EncryptedArray:
    """Encrypted histogram (FLASH O6, SecureBoost): out[f, b] = sum of values[i] with bins[i, f] == b,
    i.e. prod of E(values[i]) over those i.

    Args:
        values: encrypted vector of length N (e.g. gradients or hessians).
        bins: integer bin index per sample, shape (N,) or (N, F) for F features.
        num_bins: bins per feature.
    """
    bins = np.asarray(bins)
    if values.ndim != 1:
        raise OperandError("histogram values must be a 1-D encrypted array")
    if bins.ndim == 1:
        bins = bins[:, None]
    n, f = bins.shape
    if n != values.size:
        raise OperandError(f"{values.size} values but {n} bin indices")
    if bins.size and (bins.min() < 0 or bins.max() >= num_bins):
        raise OperandError(f"bin indices must lie in [0, {num_bins})")
    groups = (np.arange(f)[None, :] * num_bins + bins).T.reshape(-1)      # feature-major
    rows = values.batch.take(np.tile(np.arange(n), f))
    return EncryptedArray._wrap(rows.sum_groups(groups, f * num_bins, "histogram"),
                                (f, num_bins), values.scale_bits)

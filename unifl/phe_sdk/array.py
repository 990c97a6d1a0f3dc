"""``EncryptedArray``: a NumPy-like array of Paillier ciphertexts (in the spirit of FLASH Listing 1).

The array keeps its ciphertexts as Montgomery-form limbs mod n² between operations, its logical
shape, its fixed-point scale (values are v / 2^scale_bits) and a bound on |v| used to detect
overflow before it happens (see :mod:`unifl.phe_sdk.encoding`).

Homomorphic semantics (all mod n²):

* ``a + b``  (both encrypted)    E(x)·E(y) = E(x + y)           one MontMult per element
* ``a + p``  (p plaintext)       E(x)·(1 + p·n) = E(x + p)
* ``a * k``  (k plaintext)       E(x)^|k|, or (E(x)^-1)^|k| for k < 0 (never E(x)^(n−|k|))
* ``X @ a``, ``a @ X``           multi-exponentiations prod_i E(x_i)^X_ki sharing their bases
* ``a.sum(axis)``                grouped products

Results of plaintext multiplications are not re-randomised; call :meth:`obfuscate` before sending
one to a party that must not learn the multiplier.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import base_op, mod_op
from ..base_op import DeviceBatch, from_limbs, to_limbs
from ..core.errors import KeyMismatchError, OperandError
from . import encoding
from ._util import resolve_backend
from .paillier import PrivateKey, PublicKey, decrypt_limbs, encrypt_limbs


def _exp_array(ints: list[int]) -> np.ndarray:
    """Non-negative Python ints to an exponent limb array (N, Le)."""
    return mod_op.exp_limbs(ints) if ints else np.zeros((0, 1), np.uint64)


class EncryptedArray:
    """A batch of Paillier ciphertexts with a shape, a fixed-point scale and an overflow bound."""

    __array_priority__ = 100  # so ndarray @ EncryptedArray defers to __rmatmul__

    def __init__(self, public_key: PublicKey, limbs: np.ndarray, shape: tuple[int, ...],
                 scale_bits: int, bound: int, backend=None) -> None:
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
        self.public_key = public_key
        self.limbs = limbs
        self.shape = tuple(int(s) for s in shape)
        self.scale_bits = int(scale_bits)
        self.bound = int(bound)
        self.backend = resolve_backend(backend)

    # ---- construction / decryption
    @classmethod
    def encrypt(cls, public_key: PublicKey, values, scale_bits: int | None = None,
                backend=None, private_key: PrivateKey | None = None) -> "EncryptedArray":
        """Encrypt an array-like of ints/floats (O1).  Integer arrays default to scale 0, floats to
        2^-24 resolution; pass ``scale_bits`` to choose.  The key owner may pass ``private_key`` to
        compute the obfuscation factors with the CRT (faster, same distribution)."""
        if private_key is not None and private_key.public_key != public_key:
            raise KeyMismatchError("private_key does not belong to public_key")
        arr = np.asarray(values)
        if scale_bits is None:
            scale_bits = encoding.default_scale(arr)
        enc = encoding.encode(arr, scale_bits, public_key.max_int)
        be = resolve_backend(backend)
        m = public_key.plaintext_limbs(encoding.to_residues(enc.values, public_key.n))
        c = encrypt_limbs(be, public_key, m, private_key=private_key)
        return cls(public_key, c, arr.shape, scale_bits, enc.bound, be)

    def decrypt(self, private_key: PrivateKey, exact: bool = False) -> np.ndarray:
        """Decrypt (O2) to a float64 array (ints for scale 0; Fractions with ``exact``)."""
        if private_key.public_key != self.public_key:
            raise KeyMismatchError("this array was encrypted under another public key")
        pk = self.public_key
        res = from_limbs(decrypt_limbs(self.backend, private_key, self.limbs))
        ints = encoding.from_residues(res, pk.n, pk.max_int)
        return encoding.decode(ints, self.scale_bits, self.shape, exact=exact)

    def ciphertexts(self) -> list[int]:
        """The plain ciphertext integers (python-paillier's ``ciphertext(be_secure=False)``)."""
        return from_limbs(base_op.from_mont(self.backend, self.public_key.nsquare_ctx, self.limbs))

    # ---- shape and indexing
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return self.limbs.shape[0]

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d encrypted array")
        return self.shape[0]

    def __repr__(self) -> str:
        return (f"EncryptedArray(shape={self.shape}, scale=2^-{self.scale_bits}, "
                f"key={self.public_key.fingerprint[:12]}, backend={self.backend.name})")

    def _index_grid(self) -> np.ndarray:
        return np.arange(self.size).reshape(self.shape)

    def _rows(self, idx: np.ndarray):
        """``self.limbs[idx]``, but the limbs themselves (no gather, and no fetch of a device batch)
        when ``idx`` picks every row in order."""
        idx = np.asarray(idx).reshape(-1)
        if idx.size == self.size and (idx.size == 0 or (idx[0] == 0 and
                                                        (np.diff(idx) == 1).all())):
            return self.limbs
        return self.limbs[idx]

    def _take(self, idx: np.ndarray, bound: int | None = None) -> "EncryptedArray":
        idx = np.asarray(idx)
        return EncryptedArray(self.public_key, self.limbs[idx.reshape(-1)], idx.shape,
                              self.scale_bits, self.bound if bound is None else bound, self.backend)

    def __getitem__(self, key: Any) -> "EncryptedArray":
        return self._take(self._index_grid()[key])

    def reshape(self, *shape) -> "EncryptedArray":
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._take(self._index_grid().reshape(shape))

    def ravel(self) -> "EncryptedArray":
        return self.reshape(-1)

    def transpose(self, *axes) -> "EncryptedArray":
        return self._take(self._index_grid().transpose(*axes))

    @property
    def T(self) -> "EncryptedArray":  # noqa: N802
        return self.transpose()

    def copy(self) -> "EncryptedArray":
        return self._take(self._index_grid())

    @staticmethod
    def concatenate(arrays: list["EncryptedArray"], axis: int = 0) -> "EncryptedArray":
        first = arrays[0]
        for a in arrays[1:]:
            first._check_peer(a)
        scale = max(a.scale_bits for a in arrays)
        arrays = [a._rescale(scale) for a in arrays]
        offs = np.cumsum([0] + [a.size for a in arrays])
        grid = np.concatenate([a._index_grid() + o for a, o in zip(arrays, offs)], axis=axis)
        limbs = np.concatenate([a.limbs for a in arrays])
        return EncryptedArray(first.public_key, limbs[grid.reshape(-1)], grid.shape, scale,
                              max(a.bound for a in arrays), first.backend)

    # ---- helpers
    def _ctx(self):
        return self.public_key.nsquare_ctx

    def _check_peer(self, other: "EncryptedArray") -> None:
        if other.public_key != self.public_key:
            raise KeyMismatchError("arrays encrypted under different public keys")

    def _rescale(self, scale_bits: int) -> "EncryptedArray":
        """The same values at a finer scale: E(v)^(2^d) = E(v·2^d)."""
        d = scale_bits - self.scale_bits
        if d == 0:
            return self
        if d < 0:
            raise OperandError("cannot rescale to a coarser scale homomorphically")
        bound = encoding.check_bound(self.bound << d, self.public_key.max_int, "rescaling")
        limbs = mod_op.mont_exp(self.backend, self._ctx(), self.limbs, mod_op.exp_limbs(1 << d))
        return EncryptedArray(self.public_key, limbs, self.shape, scale_bits, bound, self.backend)

    def _broadcast(self, other_shape) -> tuple[np.ndarray, tuple]:
        out_shape = np.broadcast_shapes(self.shape, tuple(other_shape))
        return np.broadcast_to(self._index_grid(), out_shape).reshape(-1), out_shape

    # ---- addition (O3)
    def __add__(self, other) -> "EncryptedArray":
        pk, ctx, be = self.public_key, self._ctx(), self.backend
        if isinstance(other, EncryptedArray):
            self._check_peer(other)
            scale = max(self.scale_bits, other.scale_bits)
            a, b = self._rescale(scale), other._rescale(scale)
            out_shape = np.broadcast_shapes(a.shape, b.shape)
            bound = encoding.check_bound(a.bound + b.bound, pk.max_int, "sum")
            if a.shape == b.shape:  # no broadcasting: no gather copies
                la, lb = a.limbs, b.limbs
            else:
                la = a.limbs[np.broadcast_to(a._index_grid(), out_shape).reshape(-1)]
                lb = b.limbs[np.broadcast_to(b._index_grid(), out_shape).reshape(-1)]
            limbs = base_op.mont_mul(be, ctx, la, lb, checked=False)
            return EncryptedArray(pk, limbs, out_shape, scale, bound, be)
        plain = np.asarray(other)
        enc = encoding.encode(plain, self.scale_bits, pk.max_int)
        ia, out_shape = self._broadcast(plain.shape)
        vals = np.broadcast_to(np.arange(plain.size).reshape(plain.shape), out_shape).reshape(-1)
        bound = encoding.check_bound(self.bound + enc.bound, pk.max_int, "sum")
        gm = to_limbs([(1 + (enc.values[j] % pk.n) * pk.n) % pk.nsquare for j in vals.tolist()],
                      ctx.num_limbs)
        # MontMult(c̄, g^p) = c·g^p (plain), then back into the domain
        limbs = base_op.to_mont(be, ctx, base_op.mont_mul(be, ctx, self._rows(ia), gm,
                                                          checked=False))
        return EncryptedArray(pk, limbs, out_shape, self.scale_bits, bound, be)

    __radd__ = __add__

    def __neg__(self) -> "EncryptedArray":
        inv = mod_op.mont_inverse(self.backend, self._ctx(), self.limbs)
        return EncryptedArray(self.public_key, inv, self.shape, self.scale_bits, self.bound,
                              self.backend)

    def __sub__(self, other) -> "EncryptedArray":
        if isinstance(other, EncryptedArray):
            return self + (-other)
        return self + (-np.asarray(other))

    def __rsub__(self, other) -> "EncryptedArray":
        return (-self) + other

    # ---- ciphertext × plaintext (O4)
    def __mul__(self, other) -> "EncryptedArray":
        if isinstance(other, EncryptedArray):
            raise TypeError("Paillier cannot multiply two ciphertexts; multiply by a plaintext")
        pk, ctx, be = self.public_key, self._ctx(), self.backend
        plain = np.asarray(other)
        k_scale = encoding.default_scale(plain)
        enc = encoding.encode(plain, k_scale, pk.max_int)
        bound = encoding.check_bound(self.bound * enc.bound, pk.max_int, "product")
        ia, out_shape = self._broadcast(plain.shape)
        base = self._rows(ia)
        if plain.size == 1:  # one exponent shared by the batch: sliding windows
            k = enc.values[0]
            if k < 0:
                base = mod_op.mont_inverse(be, ctx, base)
            limbs = mod_op.mont_exp(be, ctx, base, mod_op.exp_limbs(abs(k)))
        else:
            kv = np.broadcast_to(np.arange(plain.size).reshape(plain.shape), out_shape).reshape(-1)
            ks = [enc.values[j] for j in kv.tolist()]
            neg = np.array([k < 0 for k in ks], dtype=bool)
            if neg.any():
                base = base.copy()
                base[neg] = mod_op.mont_inverse(be, ctx, base[neg])
            limbs = mod_op.mont_exp(be, ctx, base, _exp_array([abs(k) for k in ks]))
        return EncryptedArray(pk, limbs, out_shape, self.scale_bits + k_scale, bound, be)

    __rmul__ = __mul__

    def __truediv__(self, other) -> "EncryptedArray":
        return self * (1.0 / np.asarray(other, dtype=np.float64))

    # ---- matmul (O5)
    def _multi_exp(self, idx_bases: np.ndarray, plain_rows: list[list[int]], bound_each: int
                   ) -> np.ndarray:
        """prod_i base[idx_i]^row_i for each row; signs handled with inverted bases."""
        be, ctx = self.backend, self._ctx()
        bases = self._rows(idx_bases)
        n = len(idx_bases)
        negative = any(v < 0 for row in plain_rows for v in row)
        if negative:
            bases = np.concatenate([bases, mod_op.mont_inverse(be, ctx, bases)])
            rows = [[max(v, 0) for v in row] + [max(-v, 0) for v in row] for row in plain_rows]
        else:
            rows = plain_rows
        flat = [v for row in rows for v in row]
        exps = _exp_array(flat).reshape(len(rows), len(bases), -1) if flat else \
            np.zeros((len(rows), len(bases), 1), np.uint64)
        assert exps.shape[1] == (2 * n if negative else n)
        return mod_op.mont_multi_exp(be, ctx, bases, exps)

    def __matmul__(self, other) -> "EncryptedArray":
        """E(A) @ B for a plaintext B: out[j, k] = prod_i E(A[j, i])^B[i, k]."""
        if isinstance(other, EncryptedArray):
            raise TypeError("Paillier cannot multiply two encrypted matrices")
        pk = self.public_key
        plain = np.asarray(other)
        a_shape = self.shape if self.ndim == 2 else (1,) + self.shape
        b = plain if plain.ndim == 2 else plain.reshape(-1, 1)
        if self.ndim not in (1, 2) or plain.ndim not in (1, 2) or a_shape[1] != b.shape[0]:
            raise OperandError(f"matmul shapes {self.shape} and {plain.shape} do not align")
        k_scale = encoding.default_scale(b)
        enc = encoding.encode(b, k_scale, pk.max_int)
        vals = np.empty(b.shape, dtype=object)
        vals.reshape(-1)[:] = enc.values
        cols = [list(vals[:, k]) for k in range(b.shape[1])]
        col_l1 = max((sum(abs(v) for v in c) for c in cols), default=0)
        bound = encoding.check_bound(self.bound * col_l1, pk.max_int, "matmul")
        grid = self._index_grid().reshape(a_shape)
        parts = [self._multi_exp(grid[j], cols, bound) for j in range(a_shape[0])]
        out = parts[0] if len(parts) == 1 else np.concatenate(parts)
        shape = (a_shape[0], b.shape[1])
        if plain.ndim == 1:
            shape = shape[:1]
        if self.ndim == 1:
            shape = shape[1:]
        return EncryptedArray(pk, out, shape, self.scale_bits + k_scale, bound, self.backend)

    def __rmatmul__(self, other) -> "EncryptedArray":
        """X @ E(A) for a plaintext X: out[k, m] = prod_i E(A[i, m])^X[k, i]."""
        pk = self.public_key
        plain = np.asarray(other)
        x = plain if plain.ndim == 2 else plain.reshape(1, -1)
        a_shape = self.shape if self.ndim == 2 else self.shape + (1,)
        if self.ndim not in (1, 2) or plain.ndim not in (1, 2) or x.shape[1] != a_shape[0]:
            raise OperandError(f"matmul shapes {plain.shape} and {self.shape} do not align")
        k_scale = encoding.default_scale(x)
        enc = encoding.encode(x, k_scale, pk.max_int)
        vals = np.empty(x.shape, dtype=object)
        vals.reshape(-1)[:] = enc.values
        rows = [list(vals[k]) for k in range(x.shape[0])]
        row_l1 = max((sum(abs(v) for v in r) for r in rows), default=0)
        bound = encoding.check_bound(self.bound * row_l1, pk.max_int, "matmul")
        grid = self._index_grid().reshape(a_shape)
        parts = [self._multi_exp(grid[:, m], rows, bound) for m in range(a_shape[1])]
        out = parts[0] if len(parts) == 1 else \
            np.stack(parts, axis=1).reshape(-1, pk.nsquare_ctx.num_limbs)     # (K, M) row-major
        shape = (x.shape[0], a_shape[1])
        if self.ndim == 1:
            shape = shape[:1]
        if plain.ndim == 1:
            shape = shape[1:]
        return EncryptedArray(pk, out, shape, self.scale_bits + k_scale, bound, self.backend)

    # ---- reductions
    def sum(self, axis: int | None = None) -> "EncryptedArray":
        """Homomorphic sum over ``axis`` (all elements when None)."""
        pk = self.public_key
        grid = self._index_grid()
        if axis is None:
            groups = np.zeros(self.size, np.int64)
            out_shape: tuple = ()
            count = self.size
        else:
            axis = axis % self.ndim
            out_shape = self.shape[:axis] + self.shape[axis + 1:]
            ids = np.arange(int(np.prod(out_shape, dtype=np.int64))).reshape(out_shape)
            groups = np.empty(self.size, np.int64)
            groups[grid.reshape(-1)] = np.broadcast_to(np.expand_dims(ids, axis),
                                                       self.shape).reshape(-1)
            count = self.shape[axis]
        bound = encoding.check_bound(self.bound * count, pk.max_int, "sum")
        g = int(np.prod(out_shape, dtype=np.int64))
        limbs = mod_op.mont_prod_groups(self.backend, self._ctx(), self.limbs, groups, g)
        return EncryptedArray(pk, limbs, out_shape, self.scale_bits, bound, self.backend)

    def obfuscate(self) -> "EncryptedArray":
        """Re-randomise: multiply every ciphertext by a fresh encryption of zero."""
        pk = self.public_key
        zeros = np.zeros((self.size, pk.n_ctx.num_limbs), np.uint64)
        fresh = encrypt_limbs(self.backend, pk, zeros)
        limbs = base_op.mont_mul(self.backend, self._ctx(), self.limbs, fresh, checked=False)
        return EncryptedArray(pk, limbs, self.shape, self.scale_bits, self.bound, self.backend)

    def add_residues(self, residues: list[int]) -> "EncryptedArray":
        """E(v + r mod n) for each element and its r (ints, reduced mod n): c·(1 + r·n) mod n².

        The raw-mod-n addition behind one-time masks uniform mod n (which hide v perfectly, however
        large v is): the result is a residue, not an encoded value, so it has scale 0 and no
        meaningful bound (set to max_int, so any further arithmetic on it is refused); read it with
        :meth:`decrypt_residues`.  Not re-randomised: call :meth:`obfuscate` before sending."""
        pk, ctx, be = self.public_key, self._ctx(), self.backend
        if len(residues) != self.size:
            raise OperandError(f"{len(residues)} residues for {self.size} ciphertexts")
        gm = to_limbs([1 + (int(r) % pk.n) * pk.n for r in residues], ctx.num_limbs)
        limbs = base_op.to_mont(be, ctx, base_op.mont_mul(be, ctx, self.limbs, gm, checked=False))
        return EncryptedArray(pk, limbs, self.shape, 0, pk.max_int, be)

    def decrypt_residues(self, private_key: PrivateKey) -> list[int]:
        """The plaintexts as residues in [0, n), not decoded (values masked mod n look like
        overflow to :meth:`decrypt`); non-unit ciphertexts are refused as in :meth:`decrypt`."""
        if private_key.public_key != self.public_key:
            raise KeyMismatchError("this array was encrypted under another public key")
        return from_limbs(decrypt_limbs(self.backend, private_key, self.limbs))

    def to(self, backend) -> "EncryptedArray":
        """The same ciphertexts, computed on from now on by another backend."""
        return EncryptedArray(self.public_key, self.limbs, self.shape, self.scale_bits, self.bound,
                              backend)


def histogram(values: EncryptedArray, bins: np.ndarray, num_bins: int) -> EncryptedArray:
    """Encrypted histogram (FLASH O6, SecureBoost): out[f, b] = sum of values[i] with bins[i, f] == b.

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
    pk = values.public_key
    counts = np.zeros((f, num_bins), np.int64)
    np.add.at(counts, (np.broadcast_to(np.arange(f), (n, f)), bins), 1)
    bound = encoding.check_bound(values.bound * int(counts.max(initial=0)), pk.max_int,
                                 "histogram")
    groups = (np.arange(f)[None, :] * num_bins + bins).T.reshape(-1)      # feature-major
    rows = np.tile(values.limbs, (f, 1))
    limbs = mod_op.mont_prod_groups(values.backend, pk.nsquare_ctx, rows, groups, f * num_bins)
    return EncryptedArray(pk, limbs, (f, num_bins), values.scale_bits, bound, values.backend)

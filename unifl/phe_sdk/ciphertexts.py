"""``CiphertextBatch``: the one batch of Paillier ciphertexts every caller computes on.

:class:`~unifl.phe_sdk.array.EncryptedArray` (NumPy-like, one fixed-point scale per array) and the
FATE kit (:mod:`unifl.fate.kit`, one scale per element) are thin layers over this class; the
homomorphic arithmetic itself is written here once.

A batch holds N ciphertexts under one public key as Montgomery-form limbs mod n² (shape (N, L2),
c̄ = c·R mod n²; possibly a backend's :class:`~unifl.core.limbs.DeviceBatch`, which stays in device
memory until a consumer needs the values), the backend that computes on them, and an optional
bound B on the plaintexts' magnitudes.  The plaintexts are signed integers v stored as residues
v mod n (see :mod:`unifl.phe_sdk.encoding`); fixed-point scales belong to the layers above.

Homomorphic rules (g = n + 1, all mod n²):

==========================  ==========================================  =====================
operation                   identity                                    cost per element
==========================  ==========================================  =====================
:meth:`add`                 E(a)·E(b) = E(a + b)                        one MontMult
:meth:`add_plain`           E(a)·g^b = E(a + b), g^b = 1 + b·n          two MontMults
:meth:`neg`                 E(a)^-1 = E(−a)                             one inverse
:meth:`mul`                 E(a)^k = E(k·a); k < 0: (E(a)^-1)^|k|       exponent of bits(|k|)
:meth:`lift`                E(a)^(2^d) = E(a·2^d)                       d squarings
:meth:`sum_groups`          prod_{i in G} E(a_i) = E(sum_{i in G} a_i)  one MontMult
:meth:`matmul`, `rmatmul`   prod_i E(a_i)^(k_i) = E(sum_i k_i·a_i)      shared-base multi-exp
==========================  ==========================================  =====================

A negative multiplier k always goes through the inverse of the ciphertext and an exponent of
|k|'s bit length, never through E(a)^(n − |k|): the latter costs a full-length exponentiation per
element.

Overflow bookkeeping: with a bound (``bound`` an int, as EncryptedArray keeps one), every operation
that can grow a plaintext computes the new bound first and raises
:class:`~unifl.core.errors.EncodingOverflowError` before computing when it could exceed
max_int = floor(n/3) − 1, the largest magnitude the centred encoding decodes unambiguously.  With
``bound=None`` (the FATE kit: FATE's kit contract carries no bounds, and its packed layouts use
plaintexts up to n/2 on purpose) nothing is pre-checked; plaintexts still have to be smaller than n
in magnitude to be represented at all, and an overflow shows on decoding.

Results of plaintext operations are not re-randomised: call :meth:`obfuscate` before a batch
leaves for a party that must not learn the plaintext operand.
"""

from __future__ import annotations

import operator
from typing import Iterable, Sequence

import numpy as np

from .. import base_op, mod_op
from ..core.backend import Backend
from ..core.contract import Limbs
from ..core.errors import EncodingOverflowError, KeyMismatchError, OperandError
from ..core.limbs import DeviceBatch, from_limbs, to_limbs
from ..core.montgomery import MontContext
from . import encoding
from ._util import resolve_backend
from .paillier import PrivateKey, PublicKey, decrypt_limbs, encrypt_limbs, require_units

__all__ = ["CiphertextBatch"]

def _exp_array(ints: Sequence[int]) -> np.ndarray:
    """Non-negative Python ints to an exponent limb array (N, Le)."""
    return mod_op.exp_limbs(list(ints)) if len(ints) else np.zeros((0, 1), np.uint64)


def _ints(values: Sequence[int] | np.ndarray) -> list[int]:
    """Python ints of a flat sequence of integers (NumPy integers and object arrays included).

    Raises:
        OperandError: a value is not an integer (a float would be truncated: encode it first).
    """
    if isinstance(values, np.ndarray):
        values = values.reshape(-1).tolist()
    try:
        return [operator.index(v) for v in values]
    except TypeError:
        raise OperandError("plaintext operands of a ciphertext batch are integers; encode "
                           "fractional values first (unifl.phe_sdk.encoding)") from None


def _is_identity(idx: np.ndarray, size: int) -> bool:
    """True when ``idx`` picks every one of ``size`` rows, in order."""
    if idx.size != size:
        return False
    return size == 0 or (int(idx[0]) == 0 and bool((np.diff(idx) == 1).all()))


class CiphertextBatch:
    """N Paillier ciphertexts under one key, in Montgomery form mod n², on one backend.

    Args:
        public_key: the key the ciphertexts were made under.
        limbs: (N, L2) Montgomery-form limbs mod n² (c̄ = c·R mod n²) or a DeviceBatch of them.
        backend: what computes on them (a Backend, a name, or None for the default backend).
        bound: an upper bound on |v| over the plaintexts, or None when not tracked (see the module
            docstring).

    Batches are values: every operation returns a new batch and leaves its operands as they were.

    Raises:
        OperandError: the limbs do not have the shape of ciphertexts under this key.
    """

    __slots__ = ("public_key", "limbs", "backend", "bound")

    def __init__(self, public_key: PublicKey, limbs: Limbs, backend: Backend | str | None = None,
                 bound: int | None = None) -> None:
        if not isinstance(limbs, DeviceBatch):    # a device batch stays where it is until fetched
            limbs = np.ascontiguousarray(limbs, dtype=np.uint64)
        width = public_key.nsquare_ctx.num_limbs
        if len(limbs.shape) != 2 or limbs.shape[1] != width:
            raise OperandError(f"ciphertext limbs of shape {limbs.shape}; this key needs "
                               f"(N, {width})")
        if bound is not None and int(bound) < 0:
            raise OperandError(f"a plaintext bound is a magnitude, got {bound}")
        self.public_key = public_key
        self.limbs: Limbs = limbs
        self.backend = resolve_backend(backend)
        self.bound = None if bound is None else int(bound)

    # ------------------------------------------------------------------ construction
    @classmethod
    def encrypt(cls, public_key: PublicKey, values: Sequence[int] | np.ndarray,
                backend: Backend | str | None = None, *, private_key: PrivateKey | None = None,
                obfuscate: bool = True, tracked: bool = True) -> "CiphertextBatch":
        """E(v) = g^(v mod n)·r^n = (1 + (v mod n)·n)·r^n mod n² for every signed int v (O1).

        Args:
            values: signed plaintext integers (already fixed-point encoded).
            private_key: the key owner's private key, to compute the obfuscation factors r^n with
                the CRT (same distribution, fewer multiplications).
            obfuscate: False gives the deterministic g^v (r = 1), which hides nothing: for
                plaintext operands that are combined with real ciphertexts (FATE's
                ``encrypt_encoded(obfuscate=False)``), never for data that leaves the party.
            tracked: keep the bound max |v| (refused beyond max_int); False keeps none, and only
                requires |v| < n.

        Raises:
            EncodingOverflowError: a value is out of range (see ``tracked``).
            KeyMismatchError: ``private_key`` belongs to another key.
            OperandError: ``private_key`` given with ``obfuscate=False`` (it would be unused).
        """
        be = resolve_backend(backend)
        ints = _ints(values)
        bound = _plain_bound(public_key, ints, tracked, "an encrypted value")
        residues = encoding.to_residues(ints, public_key.n)
        if private_key is not None and private_key.public_key != public_key:
            raise KeyMismatchError("private_key does not belong to public_key")
        limbs: Limbs
        if obfuscate:
            limbs = encrypt_limbs(be, public_key, public_key.plaintext_limbs(residues),
                                  private_key=private_key)
        else:
            if private_key is not None:
                raise OperandError("private_key only speeds up obfuscation, and obfuscate=False "
                                   "asks for none")
            limbs = base_op.to_mont(be, public_key.nsquare_ctx, _g_pow(public_key, residues))
        return cls(public_key, limbs, be, bound)

    @classmethod
    def from_ciphertexts(cls, public_key: PublicKey, ciphertexts: np.ndarray,
                         backend: Backend | str | None = None, bound: int | None = None
                         ) -> "CiphertextBatch":
        """Plain ciphertexts from outside ((N, L2) limbs mod n², not Montgomery form), checked to be
        units mod n² in [1, n²) (:func:`~unifl.phe_sdk.paillier.require_units`: a non-unit would
        make a CRT decryption reveal the key) and moved into the Montgomery domain.

        Raises:
            InvalidCiphertextError: naming the first ciphertext that is not a unit.
        """
        be = resolve_backend(backend)
        plain = np.ascontiguousarray(ciphertexts, dtype=np.uint64)
        require_units(public_key, plain, be)
        return cls(public_key, base_op.to_mont(be, public_key.nsquare_ctx, plain), be, bound)

    @classmethod
    def concatenate(cls, batches: Sequence["CiphertextBatch"]) -> "CiphertextBatch":
        """The batches one after the other (same key; computed on by the first one's backend)."""
        if not batches:
            raise OperandError("nothing to concatenate")
        first = batches[0]
        for b in batches[1:]:
            first._check_peer(b)
        if len(batches) == 1:
            return first
        limbs = np.concatenate([np.asarray(b.limbs) for b in batches])
        return first._derive(limbs, _max_bound(b.bound for b in batches))

    # ------------------------------------------------------------------ conversions out
    def ciphertexts(self) -> np.ndarray:
        """The plain ciphertexts c = c̄·R^-1 mod n², as (N, L2) host limbs."""
        return np.asarray(base_op.from_mont(self.backend, self.ctx, self.limbs))

    def decrypt_residues(self, private_key: PrivateKey) -> list[int]:
        """The plaintexts as residues in [0, n) (CRT decryption, O2)."""
        if private_key.public_key != self.public_key:
            raise KeyMismatchError("these ciphertexts were encrypted under another public key")
        return from_limbs(decrypt_limbs(self.backend, private_key, self.limbs))

    def decrypt(self, private_key: PrivateKey) -> list[int]:
        """The signed plaintexts: residues r <= max_int are r, r >= n − max_int are r − n.

        Raises:
            EncodingOverflowError: a residue lies in the gap between (an operation overflowed).
        """
        pk = self.public_key
        return encoding.from_residues(self.decrypt_residues(private_key), pk.n, pk.max_int)

    # ------------------------------------------------------------------ shape
    @property
    def ctx(self) -> MontContext:
        """The Montgomery context of n²."""
        return self.public_key.nsquare_ctx

    @property
    def size(self) -> int:
        """The number of ciphertexts N."""
        return int(self.limbs.shape[0])

    def __len__(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return (f"CiphertextBatch(len={self.size}, key={self.public_key.fingerprint[:12]}, "
                f"backend={self.backend.name}, bound="
                f"{'untracked' if self.bound is None else f'{self.bound.bit_length()} bits'})")

    def rows(self, idx: np.ndarray | Sequence[int]) -> Limbs:
        """``limbs[idx]``, or the limbs themselves (no copy, and no fetch of a device batch) when
        ``idx`` picks every row in order."""
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if _is_identity(idx, self.size):
            return self.limbs
        return np.asarray(self.limbs)[idx]

    def take(self, idx: np.ndarray | Sequence[int]) -> "CiphertextBatch":
        """The ciphertexts at ``idx`` (gathered; repeats allowed), with the same bound."""
        rows = self.rows(idx)
        return self if rows is self.limbs else self._derive(rows, self.bound)

    def put(self, idx: np.ndarray | Sequence[int], values: "CiphertextBatch") -> "CiphertextBatch":
        """A copy with rows ``idx`` replaced by ``values`` (one row per index)."""
        self._check_peer(values)
        idx = np.asarray(idx, dtype=np.int64).reshape(-1)
        if idx.size != values.size:
            raise OperandError(f"{values.size} ciphertexts for {idx.size} positions")
        out = np.array(self.limbs, dtype=np.uint64, copy=True)
        out[idx] = np.asarray(values.limbs)
        return self._derive(out, _max_bound((self.bound, values.bound)))

    def to(self, backend: Backend | str | None) -> "CiphertextBatch":
        """The same ciphertexts, computed on from now on by ``backend``."""
        return CiphertextBatch(self.public_key, self.limbs, backend, self.bound)

    # ------------------------------------------------------------------ arithmetic
    def add(self, other: "CiphertextBatch") -> "CiphertextBatch":
        """E(a + b) = E(a)·E(b) element-wise (O3); both batches of the same length."""
        self._check_peer(other)
        if other.size != self.size:
            raise OperandError(f"cannot add {self.size} ciphertexts and {other.size}")
        bound = self._grown(None if self.bound is None or other.bound is None
                            else self.bound + other.bound, "sum")
        limbs = base_op.mont_mul(self.backend, self.ctx, self.limbs, other.limbs, checked=False)
        return self._derive(limbs, bound)

    def add_plain(self, values: Sequence[int] | np.ndarray) -> "CiphertextBatch":
        """E(a + b) = E(a)·(1 + (b mod n)·n) element-wise for signed ints b (one, shared by every
        ciphertext, or one each).  Not re-randomised.

        MontMult(c̄, g^b) with g^b in plain form is c·g^b in plain form: one MontMult, then one
        more back into the domain.
        """
        ints = _ints(values)
        if len(ints) not in (1, self.size):
            raise OperandError(f"{len(ints)} plaintexts for {self.size} ciphertexts")
        b = _plain_bound(self.public_key, ints, self.bound is not None, "a plaintext addend")
        bound = self._grown(None if b is None or self.bound is None else self.bound + b, "sum")
        pk, ctx, be = self.public_key, self.ctx, self.backend
        if self.size == 0:
            return self._derive(self.limbs, bound)
        gm = _g_pow(pk, encoding.to_residues(ints, pk.n))
        limbs = base_op.to_mont(be, ctx, base_op.mont_mul(be, ctx, self.limbs, gm, checked=False))
        return self._derive(limbs, bound)

    def neg(self) -> "CiphertextBatch":
        """E(−a) = E(a)^-1 mod n² element-wise, by the backend's batched inverse (staying in the
        Montgomery domain: (c̄)^-1·R² = c^-1·R)."""
        return self._derive(mod_op.mont_inverse(self.backend, self.ctx, self.limbs), self.bound)

    def sub(self, other: "CiphertextBatch") -> "CiphertextBatch":
        """E(a − b) = E(a)·E(b)^-1 element-wise."""
        return self.add(other.neg())

    def mul(self, ks: Sequence[int] | np.ndarray) -> "CiphertextBatch":
        """E(k·a) element-wise for signed ints k (one, shared by every ciphertext, or one each),
        O4: E(a)^k for k >= 0 and (E(a)^-1)^|k| for k < 0, with an exponent of |k|'s bit length.

        One shared k runs as a single sliding-window exponent over the batch."""
        ints = _ints(ks)
        if len(ints) not in (1, self.size):
            raise OperandError(f"{len(ints)} multipliers for {self.size} ciphertexts")
        kmax = max((abs(k) for k in ints), default=0)
        bound = self._grown(None if self.bound is None else self.bound * kmax, "product")
        be, ctx = self.backend, self.ctx
        if self.size == 0:
            return self._derive(self.limbs, bound)
        base = self.limbs
        if len(ints) == 1:
            k = ints[0]
            if k < 0:
                base = mod_op.mont_inverse(be, ctx, base)
            return self._derive(mod_op.mont_exp(be, ctx, base, mod_op.exp_limbs(abs(k))), bound)
        neg = np.array([k < 0 for k in ints], dtype=bool)
        if neg.any():
            base = np.array(base, dtype=np.uint64, copy=True)
            base[neg] = mod_op.mont_inverse(be, ctx, base[neg])
        return self._derive(mod_op.mont_exp(be, ctx, base, _exp_array([abs(k) for k in ints])),
                            bound)

    def lift(self, shift: int | Sequence[int] | np.ndarray) -> "CiphertextBatch":
        """E(a·2^d) = E(a)^(2^d): the same values at a scale d bits finer (fixed point), for one
        d shared by the batch or one per ciphertext (rows with d = 0 are left as they are).

        Raises:
            OperandError: some d < 0 (a coarser scale would divide a ciphertext's plaintext).
            EncodingOverflowError: bound·2^max(d) could exceed max_int (tracked bounds).
        """
        be, ctx = self.backend, self.ctx
        if np.ndim(shift) == 0:
            d = int(shift)  # type: ignore[arg-type]
            if d < 0:
                raise OperandError("cannot rescale to a coarser scale homomorphically")
            if d == 0:
                return self
            bound = self._grown(None if self.bound is None else self.bound << d, "rescaling")
            if self.size == 0:
                return self._derive(self.limbs, bound)
            return self._derive(mod_op.mont_exp(be, ctx, self.limbs, mod_op.exp_limbs(1 << d)),
                                bound)
        ds = np.asarray(shift, dtype=np.int64).reshape(-1)
        if ds.shape != (self.size,):
            raise OperandError(f"{ds.size} shifts for {self.size} ciphertexts")
        if (ds < 0).any():
            raise OperandError("cannot rescale to a coarser scale homomorphically")
        todo = np.nonzero(ds)[0]
        if todo.size == 0:
            return self
        if todo.size == self.size and (ds == ds[0]).all():
            return self.lift(int(ds[0]))
        bound = self._grown(None if self.bound is None else self.bound << int(ds.max()),
                            "rescaling")
        out = np.array(self.limbs, dtype=np.uint64, copy=True)
        out[todo] = mod_op.mont_exp(be, ctx, out[todo],
                                    _exp_array([1 << int(d) for d in ds[todo].tolist()]))
        return self._derive(out, bound)

    def sum_groups(self, groups: np.ndarray | Sequence[int], num_groups: int,
                   what: str = "sum") -> "CiphertextBatch":
        """out[g] = E(sum of a_i with groups[i] == g) = prod of those E(a_i), for g < num_groups
        (E(0) = 1 for an empty group): sums along an axis, histograms (O6).

        ``what`` names the operation in an overflow error.
        """
        g = np.ascontiguousarray(groups, dtype=np.int64).reshape(-1)
        if g.shape != (self.size,):
            raise OperandError(f"need one group id per ciphertext: {g.size} for {self.size}")
        num_groups = int(num_groups)
        if g.size and (g.min() < 0 or g.max() >= num_groups):
            raise OperandError(f"group ids must lie in [0, {num_groups})")
        bound = None
        if self.bound is not None:
            most = int(np.bincount(g, minlength=num_groups).max(initial=0)) if g.size else 0
            bound = self._grown(self.bound * most, what)
        limbs = mod_op.mont_prod_groups(self.backend, self.ctx, self.limbs, g, num_groups)
        return self._derive(limbs, bound)

    def matmul(self, shape: tuple[int, int], plain: np.ndarray | Sequence[Sequence[int]]
               ) -> "CiphertextBatch":
        """E(A) @ B for the (M, K) matrix A held row-major and a plaintext (K, P) int matrix B (O5):
        out[j, p] = prod_i E(A[j, i])^B[i, p] = E(sum_i A[j, i]·B[i, p]), row-major (M, P).

        Each row of A is one set of K bases shared by the P multi-exponentiations of its outputs;
        negative entries of B use the inverted bases (never n − |k|)."""
        m, k = (int(s) for s in shape)
        b = _int_matrix(plain)
        if m * k != self.size or b.shape[0] != k:
            raise OperandError(f"matmul shapes {(m, k)} and {b.shape} do not align "
                               f"({self.size} ciphertexts)")
        grid = np.arange(m * k).reshape(m, k)
        parts, bound = self._multi_exps([grid[j] for j in range(m)], b.T)
        if not parts:
            return self._derive(np.empty((0, self.ctx.num_limbs), np.uint64), bound)
        return self._derive(parts[0] if len(parts) == 1 else np.concatenate(parts), bound)

    def rmatmul(self, shape: tuple[int, int], plain: np.ndarray | Sequence[Sequence[int]]
                ) -> "CiphertextBatch":
        """X @ E(A) for a plaintext (P, M) int matrix X and the (M, K) matrix A held row-major:
        out[p, c] = prod_i E(A[i, c])^X[p, i] = E(sum_i X[p, i]·A[i, c]), row-major (P, K).

        Each column of A is one set of M bases shared by the P multi-exponentiations."""
        m, k = (int(s) for s in shape)
        x = _int_matrix(plain)
        if m * k != self.size or x.shape[1] != m:
            raise OperandError(f"matmul shapes {x.shape} and {(m, k)} do not align "
                               f"({self.size} ciphertexts)")
        grid = np.arange(m * k).reshape(m, k)
        parts, bound = self._multi_exps([grid[:, c] for c in range(k)], x)
        width = self.ctx.num_limbs
        if not parts:
            return self._derive(np.empty((0, width), np.uint64), bound)
        out = parts[0] if len(parts) == 1 else np.stack(
            [np.asarray(p) for p in parts], axis=1).reshape(-1, width)     # (P, K) row-major
        return self._derive(out, bound)

    def obfuscate(self) -> "CiphertextBatch":
        """Re-randomise: c·r^n for a fresh r per ciphertext (a fresh encryption of zero)."""
        pk = self.public_key
        zeros = np.zeros((self.size, pk.n_ctx.num_limbs), np.uint64)
        fresh = encrypt_limbs(self.backend, pk, zeros)
        if self.size == 0:
            return self._derive(self.limbs, self.bound)
        limbs = base_op.mont_mul(self.backend, self.ctx, self.limbs, fresh, checked=False)
        return self._derive(limbs, self.bound)

    # ------------------------------------------------------------------ helpers
    def _derive(self, limbs: Limbs, bound: int | None) -> "CiphertextBatch":
        out = CiphertextBatch.__new__(CiphertextBatch)
        out.public_key, out.limbs, out.backend = self.public_key, limbs, self.backend
        out.bound = bound
        return out

    def _check_peer(self, other: "CiphertextBatch") -> None:
        if other.public_key != self.public_key:
            raise KeyMismatchError("ciphertexts encrypted under different public keys")

    def _grown(self, bound: int | None, what: str) -> int | None:
        """The bound of a result (None when untracked), refused beyond max_int."""
        if bound is None:
            return None
        return encoding.check_bound(bound, self.public_key.max_int, what)

    def _multi_exps(self, parts: list[np.ndarray], rows: np.ndarray
                    ) -> tuple[list[Limbs], int | None]:
        """For each index set of ``parts`` (all of one length n): the K products
        prod_i base[i]^rows[k, i] for the (K, n) integer matrix ``rows`` (:func:`_int_matrix`),
        with the exponent limbs built once for every part."""
        exps, negative, l1 = _exponent_rows(rows)
        bound = self._grown(None if self.bound is None else self.bound * l1, "matmul")
        be, ctx = self.backend, self.ctx
        out = []
        for idx in parts:
            bases = self.rows(idx)
            if negative:
                bases = np.concatenate([np.asarray(bases), np.asarray(
                    mod_op.mont_inverse(be, ctx, bases))])
            out.append(mod_op.mont_multi_exp(be, ctx, bases, exps))
        return out, bound


def _g_pow(pk: PublicKey, residues: list[int]) -> np.ndarray:
    """g^m = 1 + m·n mod n² (exact: the binomial terms of (1 + n)^m past the second vanish mod
    n²; 1 + m·n < n² for m < n), plain limbs."""
    n = pk.n
    return to_limbs([1 + m * n for m in residues], pk.nsquare_ctx.num_limbs)


def _plain_bound(pk: PublicKey, ints: list[int], tracked: bool, what: str) -> int | None:
    """max |v| of plaintext ints, refused beyond max_int when tracked, beyond n otherwise."""
    b = max((abs(v) for v in ints), default=0)
    if tracked:
        return encoding.check_bound(b, pk.max_int, what)
    if b >= pk.n:
        raise EncodingOverflowError(f"{what} of {b.bit_length()} bits cannot be represented "
                                    f"modulo the {pk.bits}-bit n")
    return None


def _max_bound(bounds: Iterable[int | None]) -> int | None:
    out = 0
    for b in bounds:
        if b is None:
            return None
        out = max(out, b)
    return out


def _int_matrix(plain: np.ndarray | Sequence[Sequence[int]]) -> np.ndarray:
    """A 2-D array of integers: ``int64`` when every value fits one (what the SDK's encoding
    gives for features and gradients: the fast path of :func:`_exponent_rows`), else an object
    array of Python ints."""
    arr = np.asarray(plain)
    if arr.ndim != 2:
        raise OperandError(f"a plaintext matrix is 2-D, got shape {arr.shape}")
    if arr.dtype.kind == "i" or (arr.dtype.kind == "u" and int(arr.max(initial=0)) < 1 << 63):
        return arr.astype(np.int64, copy=False)
    vals = _ints(arr)
    try:
        return np.array(vals, dtype=np.int64).reshape(arr.shape)
    except OverflowError:
        out = np.empty(arr.shape, dtype=object)
        out.reshape(-1)[:] = vals
        return out


#: the largest |exponent| the vectorised path takes: every row's sum of |v| over up to 2^20
#: columns (and each −v) stays an exact int64
_FAST_ABS = 1 << 42


def _exponent_rows(rows: np.ndarray) -> tuple[np.ndarray, bool, int]:
    """The exponents of the multi-exponentiations for a (K, n) integer matrix, as limbs
    (K, width, Le): row k's entries on the n bases, then -- when any entry is negative (the
    second value) -- its negated negative entries on the n inverted bases, so width is n or 2n;
    and the largest row sum of |v| (the third value, which bounds the result).  NumPy does it
    when every |v| is below 2^42 and n below 2^20; Python ints otherwise, with the same values."""
    k, n = rows.shape
    if rows.dtype == np.int64 and n < 1 << 20:
        mag = np.abs(rows)
        if rows.size == 0 or (int(mag.min()) >= 0 and int(mag.max()) < _FAST_ABS):
            l1 = int(mag.sum(axis=1).max(initial=0))
            negative = bool((rows < 0).any())
            e = np.concatenate([np.maximum(rows, 0), np.maximum(-rows, 0)], axis=1) \
                if negative else rows
            return e.astype(np.uint64).reshape(k, e.shape[1], 1), negative, l1
    lists = rows.tolist()               # Python ints, whatever the array's dtype
    l1 = max((sum(abs(v) for v in r) for r in lists), default=0)
    negative = any(v < 0 for r in lists for v in r)
    if negative:   # row i of the exponents: positive parts on the bases, negative on inverses
        lists = [[max(v, 0) for v in r] + [max(-v, 0) for v in r] for r in lists]
    width = 2 * n if negative else n
    flat = [v for r in lists for v in r]
    exps = _exp_array(flat).reshape(k, width, -1) if flat else np.zeros((k, width, 1), np.uint64)
    return exps, negative, l1

"""The canonical big-number batch layout: little-endian 64-bit limbs, NumPy ``uint64`` of shape (N, L).

Python ints appear only at the API edges; conversion goes through ``int.to_bytes`` /
``np.frombuffer`` once per element, never a Python loop per limb.  CGBN's 32-bit limbs and OpenCL
``ulong`` buffers are byte-compatible with this layout.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from .errors import OperandError

LIMB_BITS = 64
LIMB_BYTES = 8


def limb_count(bits: int) -> int:
    """Number of 64-bit limbs needed for a value of ``bits`` bits (at least one)."""
    return max(1, -(-bits // LIMB_BITS))


def to_limbs(values: Iterable[int], num_limbs: int) -> np.ndarray:
    """Pack non-negative Python ints into an (N, L) little-endian uint64 array.

    Raises:
        OperandError: a value is negative or needs more than ``num_limbs`` limbs.
    """
    width = num_limbs * LIMB_BYTES
    try:
        buf = b"".join([int(v).to_bytes(width, "little") for v in values])
    except OverflowError as exc:
        raise OperandError(
            f"operand is negative or wider than {num_limbs * LIMB_BITS} bits") from exc
    return np.frombuffer(buf, dtype="<u8").reshape(-1, num_limbs).astype(np.uint64, copy=True)


def from_limbs(limbs: npt.ArrayLike) -> list[int]:
    """Unpack an (N, L) uint64 array (or a :class:`DeviceBatch`, fetched) into Python ints."""
    arr = np.ascontiguousarray(limbs, dtype="<u8")
    if arr.ndim != 2:
        raise OperandError(f"limb arrays are 2-D (N, L), got shape {arr.shape}")
    width = arr.shape[1] * LIMB_BYTES
    raw = arr.tobytes()
    return [int.from_bytes(raw[i:i + width], "little") for i in range(0, len(raw), width)]


def less_than(limbs: npt.ArrayLike, bound_limbs: npt.ArrayLike) -> np.ndarray:
    """Vectorised ``limbs[i] < bound`` (lexicographic from the top limb), as a bool array of length N.

    ``bound_limbs`` is one value (shape (L,)) or one per row (shape (N, L)).
    """
    a = np.asarray(limbs, dtype=np.uint64)
    b = np.broadcast_to(np.asarray(bound_limbs, dtype=np.uint64), a.shape)
    neq = a != b
    # index of the most significant differing limb; rows with no difference are equal (not less)
    any_diff = neq.any(axis=1)
    top = a.shape[1] - 1 - np.argmax(neq[:, ::-1], axis=1)
    rows = np.arange(a.shape[0])
    less: np.ndarray = any_diff & (a[rows, top] < b[rows, top])
    return less


# ---- host limb arithmetic, vectorised over rows (carries ripple as whole-array passes)
def add_limbs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a + b mod 2^(64·L), carry out of the top limb), row-wise.  Limb sums wrap; the carries then
    ripple one limb per pass, and a carry only travels on through all-ones limbs, so the passes
    are few whatever L."""
    s = a + b
    carry = s < a
    out = np.zeros(s.shape[0], bool)
    while carry.any():
        out |= carry[:, -1]
        step = np.zeros_like(s)
        step[:, 1:] = carry[:, :-1]
        s2 = s + step
        carry = s2 < s
        s = s2
    return s, out


def sub_limbs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a − b mod 2^(64·L), borrow out of the top limb), row-wise (borrows ripple as carries do)."""
    d = a - b
    borrow = a < b
    out = np.zeros(d.shape[0], bool)
    while borrow.any():
        out |= borrow[:, -1]
        step = np.zeros_like(d)
        step[:, 1:] = borrow[:, :-1]
        d2 = d - step
        borrow = d < step
        d = d2
    return d, out


def mod_add_limbs(a: np.ndarray, b: np.ndarray, m_limbs: np.ndarray) -> np.ndarray:
    """(a + b) mod m for a, b < m (b may be one row)."""
    s, carry = add_limbs(a, np.broadcast_to(b, a.shape))
    over = carry | ~less_than(s, m_limbs)
    if over.any():
        s[over] = sub_limbs(s[over], np.broadcast_to(m_limbs, s[over].shape))[0]
    return s


def mod_sub_limbs(a: np.ndarray, b: np.ndarray, m_limbs: np.ndarray) -> np.ndarray:
    """(a − b) mod m for a, b < m."""
    d, borrow = sub_limbs(a, b)
    if borrow.any():
        d[borrow] = add_limbs(d[borrow], np.broadcast_to(m_limbs, d[borrow].shape))[0]
    return d


class DeviceBatch:
    """An (N, L) uint64 limb batch that lives in an accelerator's memory.

    Backends whose ops keep their results on the device (the ``gpu`` backend) return these instead of
    host arrays, and take their own ones back as operands without a copy, so a chain of SDK calls
    (encrypt, add, multiply, matmul, decrypt) moves data across the bus only at its ends.  Anything
    else that needs the values -- another backend, indexing, serialisation, ``from_limbs`` -- gets
    them through the NumPy array protocol: the first such use *fetches* the batch (one device-to-host
    copy, cached; the cached array is read-only, so a stray in-place write cannot make the host copy
    and the device copy disagree).  Subclasses implement :meth:`_download`.
    """

    ndim = 2
    dtype = np.dtype(np.uint64)

    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = (int(shape[0]), int(shape[1]))
        self._host: np.ndarray | None = None

    def _download(self) -> np.ndarray:
        raise NotImplementedError

    @property
    def fetched(self) -> bool:
        """True once the values have been copied to the host."""
        return self._host is not None

    def fetch(self) -> np.ndarray:
        """The values as a read-only host array (copied from the device once)."""
        if self._host is None:
            host = np.ascontiguousarray(self._download(), dtype=np.uint64)
            host.flags.writeable = False
            self._host = host
        return self._host

    def __array__(self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
                  ) -> np.ndarray:
        host = self.fetch()
        if dtype is not None and np.dtype(dtype) != host.dtype:
            return host.astype(dtype)
        return host.copy() if copy else host

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        return self.fetch()[key]

    def take_rows(self, start: int, stop: int) -> "np.ndarray | DeviceBatch":
        """Rows [start, stop) as a batch of their own.  Here: from the fetched host copy; a backend
        whose device memory can hand out a slice in place overrides this, so that work kept ahead
        on its device (a pool of obfuscators, :class:`unifl.core.state.RowPool`) is consumed there
        without a copy to the host."""
        return self.fetch()[start:stop]

    def copy(self) -> np.ndarray:
        return self.fetch().copy()

    # the read-only ndarray methods the layers use on limb batches, on the fetched values
    def astype(self, dtype: npt.DTypeLike, copy: bool = True) -> np.ndarray:
        return self.fetch().astype(dtype, copy=copy)

    def tobytes(self) -> bytes:
        return self.fetch().tobytes()

    def reshape(self, *shape: Any) -> np.ndarray:
        return self.fetch().reshape(*shape)

    def __repr__(self) -> str:
        where = "fetched" if self.fetched else "on the device only"
        return f"<{type(self).__name__} {self.shape[0]}x{self.shape[1]} limbs, {where}>"


def as_int_list(values: int | Sequence[int], n: int | None = None) -> list[int]:
    """Normalise an int or a sequence of ints into a list (broadcasting a scalar to ``n``)."""
    if isinstance(values, (int, np.integer)):
        return [int(values)] * (1 if n is None else n)
    out = [int(v) for v in values]
    return out

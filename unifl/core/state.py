"""State a backend instance keeps per key or per modulus (uploaded constants, OpenSSL ``BN_MONT_CTX``,
comb tables, device buffers, pools of work computed ahead), owned by that instance and keyed
*weakly* by the object it derives from.

Keying by the holder object itself (not by ``id()``, not by the backend's name) means a state can
never be handed to another object that happens to reuse an address, two instances of one backend
(two GPUs, two FPGA runtimes) never share a buffer, and the state goes away with its holder.

:class:`RowPool` is the generic store of rows computed ahead of use (Paillier's obfuscators r^n,
which do not depend on the data): bounded by :class:`PoolLimits`, each row handed out exactly once,
and never carried into a forked child or a pickle.
"""

from __future__ import annotations

import collections
import os
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Hashable, TypeVar

import numpy as np

from .errors import ConfigError
from .limbs import LIMB_BYTES, DeviceBatch

T = TypeVar("T")

__all__ = ["DeviceState", "RowPool", "PoolLimits", "PoolStats", "Reservation"]


@dataclass(frozen=True)
class PoolLimits:
    """How much a :class:`RowPool` may hold and how it is filled (a party sets these in its YAML,
    section ``obfuscators``; the default holds up to 64 MiB per pool).

    Attributes:
        max_bytes: memory bound of one pool (its rows × the bytes of a row); 0 disables pools.
        fill_batch: the most rows one filling call computes (a call of this size is what an
            accelerator needs to reach its plateau; a larger one only delays the first rows).
        slice_seconds: the target duration of one background filling call, so that a background
            refill stops within about this long after the wait it overlaps has ended.
    """

    max_bytes: int = 64 << 20
    fill_batch: int = 4096
    slice_seconds: float = 0.05

    def __post_init__(self) -> None:
        if self.max_bytes < 0:
            raise ConfigError(f"pool max_bytes must be >= 0, got {self.max_bytes}")
        if self.fill_batch < 1:
            raise ConfigError(f"pool fill_batch must be >= 1, got {self.fill_batch}")
        if not self.slice_seconds > 0:
            raise ConfigError(f"pool slice_seconds must be > 0, got {self.slice_seconds}")

    def capacity(self, row_limbs: int) -> int:
        """Rows of ``row_limbs`` limbs that fit in ``max_bytes``."""
        return self.max_bytes // (row_limbs * LIMB_BYTES)


@dataclass(frozen=True)
class PoolStats:
    """A pool's counters, for reports.  ``hits``/``misses`` are rows asked of the pool and served
    from it / computed on the spot instead; ``dropped`` rows were discarded unused (cleared, or
    found in a forked child); ``fill_seconds`` is the time spent in filling calls."""

    label: str
    capacity: int
    ready: int
    fills: int
    filled: int
    fill_seconds: float
    hits: int
    misses: int
    dropped: int

    def as_row(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Reservation:
    """Room for ``count`` rows taken in a pool before they are computed (so concurrent fillers
    never exceed the bound); handed back with the rows to :meth:`RowPool.deposit`, or to
    :meth:`RowPool.cancel` when computing them failed."""

    count: int
    generation: int


#: every live pool of the process, so a forked child can forget them all (see RowPool)
_POOLS: "weakref.WeakSet[RowPool]" = weakref.WeakSet()


def _forget_pools_in_child() -> None:
    for pool in list(_POOLS):
        pool._forget_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools_in_child)


class RowPool:
    """A bounded FIFO of limb rows computed ahead of use, each handed out exactly once.

    * **Single use.**  :meth:`take` removes the rows it returns under the pool's lock, so two
      threads never get the same row; a host row is zeroed in the pool as it is handed out, so the
      only copy left is the caller's.
    * **Bounded.**  At most ``limits.capacity(row_limbs)`` rows, counting rows being computed
      (:meth:`claim` takes room first, :meth:`deposit` fills it).
    * **Per process.**  A pool is never pickled (``__reduce__`` refuses), and a forked child
      forgets every pool it inherited -- at the fork (``os.register_at_fork``) and, for a fork
      that bypassed the hook, at its first use (the pool remembers its pid) -- so two processes
      never hand out the same row.  Rows being computed when the pool was cleared or forked are
      dropped on deposit (the generation changed).
    * **Where the backend keeps state.**  A pool is a state of the backend instance that computed
      its rows (``backend.state``); rows a backend left in device memory
      (:class:`~unifl.core.limbs.DeviceBatch`) stay there and are handed out through
      :meth:`~unifl.core.limbs.DeviceBatch.take_rows`.
    """

    def __init__(self, label: str, row_limbs: int, limits: PoolLimits | None = None) -> None:
        self.label = label
        self.row_limbs = int(row_limbs)
        self.limits = limits or PoolLimits()
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._generation = 0
        # chunks of rows, oldest first: [batch, first row not yet handed out]
        self._chunks: collections.deque[list[Any]] = collections.deque()
        self._ready = 0
        self._pending = 0
        self._fills = self._filled = self._hits = self._misses = self._dropped = 0
        self._fill_seconds = 0.0
        _POOLS.add(self)

    # ---- size
    @property
    def capacity(self) -> int:
        """The most rows this pool holds (from its limits and its row width)."""
        return self.limits.capacity(self.row_limbs)

    def ready(self) -> int:
        """Rows ready to be handed out."""
        with self._lock:
            self._check_pid()
            return self._ready

    # ---- filling
    def claim(self, count: int) -> Reservation:
        """Room for up to ``count`` more rows (fewer when the pool would exceed its capacity)."""
        with self._lock:
            self._check_pid()
            room = max(0, self.capacity - self._ready - self._pending)
            granted = max(0, min(int(count), room))
            self._pending += granted
            return Reservation(granted, self._generation)

    def deposit(self, reservation: Reservation, rows: Any, seconds: float = 0.0) -> int:
        """Add the rows computed for ``reservation`` (an (k, row_limbs) host array or device
        batch, k <= its count); returns how many were added (0 when the pool was cleared or
        forked since the reservation: those rows are dropped unused)."""
        k = int(rows.shape[0])
        if rows.shape[1] != self.row_limbs or k > reservation.count:
            raise ValueError(f"{self.label}: {rows.shape} rows for a reservation of "
                             f"{reservation.count} rows of {self.row_limbs} limbs")
        with self._lock:
            stale = self._check_pid() or reservation.generation != self._generation
            if not stale:
                self._pending -= reservation.count
            if stale or k == 0:
                self._dropped += k if stale else 0
                return 0
            if isinstance(rows, np.ndarray):
                rows = np.array(rows, dtype=np.uint64, copy=True)   # the pool's own, zeroable copy
            self._chunks.append([rows, 0])
            self._ready += k
            self._fills += 1
            self._filled += k
            self._fill_seconds += seconds
            return k

    def cancel(self, reservation: Reservation) -> None:
        """Give back the room of a reservation whose rows could not be computed."""
        with self._lock:
            if not self._check_pid() and reservation.generation == self._generation:
                self._pending -= reservation.count

    def fill_with(self, count: int, compute: Callable[[int], Any]) -> int:
        """Reserve room for ``count`` rows, compute them with ``compute(k)`` outside the lock (so
        :meth:`take` is never blocked by a fill) and deposit them; returns the rows added."""
        res = self.claim(count)
        if res.count == 0:
            return 0
        t0 = time.perf_counter()
        try:
            rows = compute(res.count)
        except BaseException:
            self.cancel(res)
            raise
        return self.deposit(res, rows, time.perf_counter() - t0)

    # ---- use
    def take(self, count: int) -> tuple[Any, int]:
        """Up to ``count`` rows, oldest first, removed from the pool: ``(rows, k)`` with k of them
        (``rows`` None when k = 0).  The ``count - k`` rows not served count as misses."""
        count = int(count)
        parts: list[Any] = []
        with self._lock:
            self._check_pid()
            got = min(count, self._ready)
            need = got
            while need:
                chunk = self._chunks[0]
                batch, start = chunk
                stop = min(int(batch.shape[0]), start + need)
                if isinstance(batch, DeviceBatch):
                    parts.append(batch.take_rows(start, stop))
                else:
                    parts.append(batch[start:stop].copy())
                    batch[start:stop] = 0            # the caller's copy is the only one left
                need -= stop - start
                if stop == batch.shape[0]:
                    self._chunks.popleft()
                else:
                    chunk[1] = stop
            self._ready -= got
            self._hits += got
            self._misses += count - got
        if not parts:
            return None, 0
        if len(parts) == 1:
            return parts[0], got
        return np.concatenate([np.asarray(p, dtype=np.uint64) for p in parts]), got

    def clear(self) -> int:
        """Drop every ready row (and the rows being computed, on their deposit); returns how many
        ready rows were dropped."""
        with self._lock:
            self._check_pid()
            return self._drop_all()

    def stats(self) -> PoolStats:
        with self._lock:
            self._check_pid()
            return PoolStats(self.label, self.capacity, self._ready, self._fills, self._filled,
                             self._fill_seconds, self._hits, self._misses, self._dropped)

    # ---- process boundaries
    def _drop_all(self) -> int:
        dropped = self._ready
        for batch, start in self._chunks:
            if isinstance(batch, np.ndarray):
                batch[start:] = 0
        self._chunks.clear()
        self._ready = 0
        self._pending = 0
        self._dropped += dropped
        self._generation += 1
        return dropped

    def _check_pid(self) -> bool:
        """Under the lock: True (and everything dropped) when this is not the process that filled
        the pool -- a fork the at-fork hook did not see."""
        pid = os.getpid()
        if pid == self._pid:
            return False
        self._pid = pid
        self._drop_all()
        return True

    def _forget_after_fork(self) -> None:
        """In a forked child: a fresh lock (another thread of the parent may have held this one at
        the fork) and nothing inherited."""
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._drop_all()

    def __reduce__(self) -> Any:
        raise TypeError(f"{self.label}: a pool of rows computed ahead never leaves its process "
                        "(pickling it could hand the same row out twice)")

    def __repr__(self) -> str:
        s = self.stats()
        return f"<{type(self).__name__} {self.label}: {s.ready}/{s.capacity} ready>"


class DeviceState:
    """``get(holder, tag, build)``: the state ``tag`` of ``holder``, built once by ``build()``.

    Building runs under one re-entrant lock per instance, so concurrent callers (the members of a
    multi-device backend share keys and contexts) build a state exactly once.  ``pool_limits``
    bounds the :class:`RowPool` states built here (set from the party's config by the scheduler).
    """

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.RLock()
        #: the limits of the pools made for this backend instance
        self.pool_limits = PoolLimits()

    def get(self, holder: object, tag: Hashable, build: Callable[[], T]) -> T:
        """The cached state ``tag`` of ``holder`` (a key-material record or a ``MontContext``)."""
        per = self._states.get(holder)
        if per is not None and tag in per:
            return per[tag]
        with self._lock:
            per = self._states.setdefault(holder, {})
            if tag not in per:
                per[tag] = build()
            return per[tag]

    def peek(self, holder: object, tag: Hashable) -> Any | None:
        """The state if it was built, else None (never builds)."""
        per = self._states.get(holder)
        return None if per is None else per.get(tag)

    def pools(self) -> list[RowPool]:
        """Every pool held here (for reports)."""
        with self._lock:
            return [v for per in list(self._states.values()) for v in per.values()
                    if isinstance(v, RowPool)]

    def clear(self) -> None:
        """Forget every state (a device reset invalidates what it held)."""
        with self._lock:
            for pool in self.pools():
                pool.clear()
            self._states = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        return sum(len(v) for v in self._states.values())

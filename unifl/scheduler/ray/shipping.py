"""What crosses the party's cluster with each piece, and how a worker keeps its per-key state.

Batches travel as they are: contiguous ``uint64`` NumPy arrays, which Ray places in the object
store and hands to the worker as read-only views of the same memory on its node (no copy when the
worker shares the driver's node; one transfer per node otherwise).  An array that goes whole to
several pieces of one batch (the bases of a multi-exponentiation split over its K outputs) is put
in the store once and travels as a :class:`Blob`, so it crosses to each node once, not once per
worker.

Montgomery contexts and key records (:mod:`unifl.core.keys`: the DJN table of a fixed base can be
megabytes) are put in the object store once per object and travel as a :class:`Shared` handle.
The worker resolves a handle once and keeps the object it got (:class:`Resolver`), so the *same*
context or record object reaches its backend on every later call: a backend keys the state it
derives (uploaded constants, native key objects, fixed-base tables) by object identity
(:class:`unifl.core.state.DeviceState`), and a fresh copy per call would rebuild it each time.
"""

from __future__ import annotations

import contextlib
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ...core.keys import FixedBase, PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.limbs import DeviceBatch
from ...core.lru import LruCache
from ...core.montgomery import MontContext
from .cluster import import_ray

#: the argument types shipped once and referred to by handle afterwards
SHARED_TYPES = (MontContext, PaillierPublicMaterial, PaillierPrivateMaterial, FixedBase)


@dataclass(frozen=True)
class Shared:
    """A context or key record in the party's object store: ``key`` names it (the ObjectRef's
    id), ``ref`` fetches it."""

    key: str
    ref: Any


@dataclass(frozen=True)
class Blob:
    """A large array in the party's object store, fetched by the worker as a zero-copy view."""

    ref: Any


#: arrays from this size on are put in the object store once per array object
BLOB_BYTES = 256 * 1024


class Shipper:
    """The driver's side: each shared object put in the object store once, while it lives."""

    def __init__(self) -> None:
        self._refs: weakref.WeakKeyDictionary[Any, Shared] = weakref.WeakKeyDictionary()
        # id(array) -> (the array, its Blob), for the calls in progress only: an array object
        # reused later with new contents must be shipped anew
        self._blobs: dict[int, tuple[np.ndarray, Blob]] = {}
        self._calls = 0
        self._lock = threading.Lock()
        self.blobs_put = 0            # arrays put in the object store (for the tests and benchmarks)
        self.bytes_sent = 0           # array bytes shipped to workers (a blob counted once)

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """One op call of the party (all its pieces): the scope of the array cache."""
        with self._lock:
            self._calls += 1
        try:
            yield
        finally:
            with self._lock:
                self._calls -= 1
                if self._calls == 0:
                    self._blobs.clear()

    def ship(self, x: Any, private_ok: bool) -> Any:
        """``x`` as it travels to a worker: a :class:`Shared` handle for a context or key record,
        a host array for a device batch, anything else unchanged.

        Raises:
            PermissionError: ``x`` is a private key record and ``private_ok`` is False -- the
                party keeps its key in its own process (``ray.private_key_ops: local``); reaching
                this is a routing bug, and failing closed is the point.
        """
        if isinstance(x, PaillierPrivateMaterial) and not private_ok:
            raise PermissionError("a private key record was about to be shipped to a Ray worker "
                                  "while ray.private_key_ops is 'local'")
        if isinstance(x, SHARED_TYPES):
            with self._lock:
                handle = self._refs.get(x)
                if handle is None:
                    ref = import_ray().put(x)
                    handle = Shared(ref.hex(), ref)
                    self._refs[x] = handle
            return handle
        if isinstance(x, DeviceBatch):
            x = np.ascontiguousarray(x, dtype=np.uint64)
        if isinstance(x, np.ndarray):
            if x.nbytes >= BLOB_BYTES:
                return self._blob(x)
            with self._lock:
                self.bytes_sent += int(x.nbytes)
        return x

    def _blob(self, x: np.ndarray) -> Blob:
        with self._lock:
            hit = self._blobs.get(id(x))
            if hit is not None and hit[0] is x:
                return hit[1]
            blob = Blob(import_ray().put(x))
            self.blobs_put += 1
            self.bytes_sent += int(x.nbytes)
            if self._calls:
                self._blobs[id(x)] = (x, blob)     # held, so its id cannot be reused meanwhile
            return blob


class Resolver:
    """The worker's side: handles to the objects they name, the last ``capacity`` kept, so a key
    that is still in use keeps its object (and the worker backend its state for it)."""

    def __init__(self, capacity: int = 64) -> None:
        self._objects: LruCache[str, Any] = LruCache(capacity)
        self.fetched = 0                 # how many handles were fetched (not found in the cache)

    def resolve(self, x: Any) -> Any:
        if isinstance(x, Blob):
            return import_ray().get(x.ref)
        if not isinstance(x, Shared):
            return x
        obj = self._objects.get(x.key)
        if obj is None:
            obj = import_ray().get(x.ref)
            self.fetched += 1
            self._objects.put(x.key, obj)
        return obj

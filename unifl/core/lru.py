"""A bounded map that forgets its least recently used entry first.

What a peer can make a party hold -- public keys of ever new moduli, objects named by handles --
must not grow without bound; a protocol's few live entries stay, because each use moves an entry
to the recent end.  Thread-safe: one lock around every access.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Generic, Hashable, TypeVar

__all__ = ["LruCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LruCache(Generic[K, V]):
    """At most ``capacity`` entries; :meth:`get` and :meth:`put` mark an entry used, and a
    :meth:`put` past the capacity drops the least recently used ones."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"an LRU cache holds at least one entry, got capacity {capacity}")
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value under ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> None:
        """Keep ``value`` under ``key`` as the most recently used entry."""
        with self._lock:
            self._put(key, value)

    def get_or_put(self, key: K, make: Callable[[], V]) -> V:
        """The value under ``key``, else ``make()`` kept under it (made while holding the lock,
        so concurrent callers share one value per key)."""
        with self._lock:
            value = self._items.get(key)
            if value is None:
                value = make()
                self._put(key, value)
            else:
                self._items.move_to_end(key)
            return value

    def _put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

"""State a backend instance keeps per key or per modulus (uploaded constants, OpenSSL ``BN_MONT_CTX``,
comb tables, device buffers), owned by that instance and keyed *weakly* by the object it derives from.

Keying by the holder object itself (not by ``id()``, not by the backend's name) means a state can
never be handed to another object that happens to reuse an address, two instances of one backend
(two GPUs, two FPGA runtimes) never share a buffer, and the state goes away with its holder.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any, Callable, Hashable, TypeVar

T = TypeVar("T")


class DeviceState:
    """``get(holder, tag, build)``: the state ``tag`` of ``holder``, built once by ``build()``.

    Building runs under one re-entrant lock per instance, so concurrent callers (the members of a
    multi-device backend share keys and contexts) build a state exactly once.
    """

    def __init__(self) -> None:
        self._states: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
        self._lock = threading.RLock()

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

    def clear(self) -> None:
        """Forget every state (a device reset invalidates what it held)."""
        with self._lock:
            self._states = weakref.WeakKeyDictionary()

    def __len__(self) -> int:
        return sum(len(v) for v in self._states.values())

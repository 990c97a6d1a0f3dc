"""Overlap with the peer: a party's messages leave in the background, and the time it waits on its
peer computes the obfuscators of its next encryptions.

A party of a streamed protocol loses time in two ways that do not depend on its own computation:
it waits for the peer's next message, and -- over a real link -- its own sends block (a gRPC send
returns once the peer holds the message, a round trip plus the transfer).  :class:`PeerLink`, with
overlap on, takes both out of the party's critical path:

* :meth:`PeerLink.send` hands the message to one sender thread (a bounded queue, so at most
  ``depth`` messages wait; messages leave in the order they were handed over, which keeps the
  per-tag order every receiver relies on) and returns;
* :meth:`PeerLink.recv` waits while a background thread computes obfuscators r^n into the pool
  of the key this party encrypts under (:class:`~unifl.phe_sdk.paillier.ObfuscatorPool`), at most
  as many as the party will still use (:meth:`PeerLink.expect`): its next encryptions are then one
  MontMult per element, computed in time it would have idled.  Refilling beyond that need would
  only take CPU from a peer that shares the machine.

With overlap off it is the plain channel: sends and receives in the calling thread, no refill.
Either way it measures how long the calling thread was blocked on the peer (``blocked_recv_s``,
``blocked_send_s``).  Nothing here changes what is sent, to whom, or in which order per tag, so a
job's messages and its model are the same with overlap on and off.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable, TypeVar

from ..phe_sdk.paillier import ObfuscatorPool
from .channel import Messenger

__all__ = ["PeerLink"]

T = TypeVar("T")

#: seconds of filling per background call when the pool has no measured rate yet
_FIRST_SLICE_ROWS = 16


class PeerLink:
    """A party's side of its links (``channel``), with overlap on or off (module docstring).

    Args:
        channel: the party's channel (anything with ``send(dst, tag, obj)`` and
            ``recv(src, tag, timeout=None)``).
        overlap: send in the background and refill ``pool`` while waiting.
        depth: messages the sender thread may hold before :meth:`send` blocks.
    """

    def __init__(self, channel: Messenger, overlap: bool, depth: int = 2) -> None:
        self.channel = channel
        self.overlap = bool(overlap)
        self.blocked_recv_s = 0.0
        self.blocked_send_s = 0.0
        self._pool: ObfuscatorPool | None = None
        self._need = 0
        self._error: BaseException | None = None
        self._queue: queue.Queue[tuple[str, str, Any] | None] | None = None
        self._thread: threading.Thread | None = None
        if self.overlap:
            self._queue = queue.Queue(maxsize=max(1, int(depth)))
            self._thread = threading.Thread(target=self._send_loop, daemon=True,
                                            name="unifl-sender")
            self._thread.start()

    # ---- what the waits compute
    def refill(self, pool: ObfuscatorPool | None) -> None:
        """The pool to refill while waiting (the key this party encrypts under, on its backend)."""
        self._pool = pool

    def expect(self, encryptions: int) -> None:
        """This party will still encrypt ``encryptions`` values under the pool's key: waits
        refill the pool up to that many ready factors (and never beyond its capacity)."""
        self._need = max(0, int(encryptions))

    # ---- messages
    def send(self, dst: str, tag: str, obj: Any) -> None:
        """Send ``obj`` to ``dst`` under ``tag`` (overlap on: queued for the sender thread)."""
        t0 = time.perf_counter()
        try:
            if self._queue is None:
                self.channel.send(dst, tag, obj)
                return
            self._raise_if_failed()
            self._queue.put((dst, tag, obj))
        finally:
            self.blocked_send_s += time.perf_counter() - t0

    def recv(self, src: str, tag: str, timeout: float | None = None) -> Any:
        """The next message from ``src`` under ``tag`` (overlap on: with the pool refilled
        meanwhile)."""
        self._raise_if_failed()
        t0 = time.perf_counter()
        try:
            if not self.overlap or self._pool is None or self._pool.ready() >= self._target():
                return self.channel.recv(src, tag, timeout)
            return self._refilling(lambda: self.channel.recv(src, tag, timeout))
        finally:
            self.blocked_recv_s += time.perf_counter() - t0

    def flush(self) -> None:
        """Wait until every queued message has been sent; raise the sender's error if one failed.

        Raises:
            TransportError: (or whatever the send raised) a queued send failed.
        """
        if self._queue is not None:
            t0 = time.perf_counter()
            self._queue.join()
            self.blocked_send_s += time.perf_counter() - t0
        self._raise_if_failed()

    def close(self, flush: bool = True) -> None:
        """Stop the sender thread, after sending what is queued (``flush``) or at once."""
        try:
            if flush:
                self.flush()
        finally:
            if self._queue is not None and self._thread is not None:
                if flush:
                    self._queue.put(None)
                    self._thread.join()
                else:                       # an error path: drop what is queued
                    self._drain()
                    self._queue.put(None)
                self._queue = None

    def stats(self) -> dict[str, Any]:
        """Overlap on or off, the seconds the party's thread was blocked on its peers, and the
        refilled pool's counters (fills, factors filled, hits and misses of the encryptions)."""
        out: dict[str, Any] = {"overlap": self.overlap, "blocked_recv_s": self.blocked_recv_s,
                               "blocked_send_s": self.blocked_send_s}
        if self._pool is not None:
            s = self._pool.stats()
            out["pool"] = {"label": s.label, "capacity": s.capacity, "ready": s.ready,
                           "fills": s.fills, "filled": s.filled, "fill_seconds": s.fill_seconds,
                           "hits": s.hits, "misses": s.misses}
        return out

    # ---- internals
    def _target(self) -> int:
        assert self._pool is not None
        return min(self._need, self._pool.capacity)

    def _refilling(self, wait: Callable[[], T]) -> T:
        """``wait()`` with a background thread filling the pool towards the target meanwhile."""
        pool = self._pool
        assert pool is not None
        stop = threading.Event()

        def fill() -> None:
            try:
                while not stop.is_set():
                    missing = self._target() - pool.ready()
                    if missing <= 0 or pool.fill(min(missing, self._slice(pool))) == 0:
                        return
            except Exception:  # noqa: BLE001 -- the wait goes on; encryptions compute fresh
                return
        th = threading.Thread(target=fill, daemon=True, name="unifl-refill")
        th.start()
        try:
            return wait()
        finally:
            stop.set()

    @staticmethod
    def _slice(pool: ObfuscatorPool) -> int:
        """Factors per background call: about the pool's ``slice_seconds`` of work at its
        measured rate (so a refill stops soon after the wait ends)."""
        s = pool.stats()
        if s.filled == 0 or s.fill_seconds <= 0:
            return _FIRST_SLICE_ROWS
        per = s.fill_seconds / s.filled
        return max(1, min(pool.limits.fill_batch, int(pool.limits.slice_seconds / per)))

    def _send_loop(self) -> None:
        q = self._queue
        assert q is not None
        while True:
            item = q.get()
            try:
                if item is None:
                    return
                if self._error is None:
                    try:
                        self.channel.send(*item)
                    except BaseException as exc:  # noqa: BLE001 -- raised in the party's thread
                        self._error = exc
            finally:
                q.task_done()

    def _drain(self) -> None:
        q = self._queue
        assert q is not None
        while True:
            try:
                q.get_nowait()
            except queue.Empty:
                return
            q.task_done()

    def _raise_if_failed(self) -> None:
        """Raise, in the party's thread, what a queued send raised in the sender thread."""
        if self._error is not None:
            raise self._error

"""Work a party starts at the beginning of its job, on a background thread, and collects where its
protocol first needs the result: work that depends neither on the peer nor on the data.

The case it exists for is a party's own key pair.  Key generation is the largest fixed cost of a
job's start (a 2048-bit Paillier key: 0.15 s on this project's 2-vCPU machine, 0.25-0.67 s on an
H200 host), and a party used to make it only once it had read its data, aligned its rows with
the peer and agreed the job's parameters.  Made ahead, it runs while the party does those things:
fully in parallel while the party waits on its peer or in code that releases the interpreter lock
(the network, file reads, NumPy, a device's start), sharing the lock with the party's Python
otherwise (gmpy2's primality tests and powmod hold it).

The result is the same object the call would have returned in place: a key made ahead is as
fresh and as random (``secrets``) as one made at its point of use, and is used once.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Generic, TypeVar

from ..phe_sdk import paillier
from .timing import Timings

__all__ = ["Ahead", "KeyPair", "KeyAhead", "key_pair_ahead", "key_pair"]

T = TypeVar("T")

#: a Paillier key pair as ``paillier.keygen`` returns it
KeyPair = tuple[paillier.PublicKey, paillier.PrivateKey]


class Ahead(Generic[T]):
    """``fn()`` running on a daemon thread from construction; :meth:`result` waits for it.

    A job that fails before it asks for the result leaves the thread to finish on its own (it
    holds nothing the job needs to release); its value is then dropped with the object.
    """

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._fn = fn
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None
        #: seconds ``fn`` ran on its thread (None until it has finished)
        self.seconds: float | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        t0 = time.perf_counter()
        try:
            self._value = self._fn()
        except BaseException as exc:      # handed to the caller of result(), in its thread
            self._error = exc
        finally:
            self.seconds = time.perf_counter() - t0
            self._done.set()

    def result(self) -> T:
        """``fn``'s value, once it has finished; its exception, raised here, if it failed."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value      # type: ignore[return-value]   # set whenever no error was


#: a party's own key pair, being made on its thread
KeyAhead = Ahead[KeyPair]


def key_pair_ahead(bits: int, role: str) -> KeyAhead:
    """A fresh Paillier key pair of ``bits`` bits for the party ``role``, started now."""
    return Ahead(lambda: paillier.keygen(bits), f"unifl-keygen-{role}")


def key_pair(ahead: KeyAhead | None, bits: int, t: Timings, row: str) -> KeyPair:
    """The party's key pair, timed as the sub-task ``row`` of ``t``: ``ahead``'s (the row then
    times the wait for it, and its ``background_seconds`` how long the making took on its
    thread), or, for a caller that started none, one of ``bits`` bits made now, in place."""
    with t.subtask(row, "keygen"):
        with t.crypto():
            pair = ahead.result() if ahead is not None else paillier.keygen(bits)
    if ahead is not None and ahead.seconds is not None:
        t.add_background(row, ahead.seconds)
    return pair

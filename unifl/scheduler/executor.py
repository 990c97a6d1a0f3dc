"""Executors run the pieces of a split batch, one per device, and return their results in order.

The interface is deliberately tiny so that a cluster engine (Ray) can replace the thread pool later
without touching the splitting logic: ``map(fn, items)`` returns ``[fn(x) for x in items]``, in the
order of ``items``, however the calls were run.  A failure in any piece is raised to the caller.
"""

from __future__ import annotations

import concurrent.futures as cf
from typing import Callable, Iterable, Protocol, Sequence, TypeVar, runtime_checkable

T = TypeVar("T")
R = TypeVar("R")


@runtime_checkable
class Executor(Protocol):
    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]: ...

    def close(self) -> None: ...


class SerialExecutor:
    """Runs the pieces one after the other in the calling thread (debugging, single-core boxes)."""

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        return [fn(x) for x in items]

    def close(self) -> None:
        pass


class ThreadExecutor:
    """Runs the pieces on a thread pool.  The backends release the GIL inside their batched calls
    (native C++, OpenCL, CUDA, QAT), so pieces on different devices overlap.  The last piece runs in
    the calling thread, which saves a hand-off per batch."""

    def __init__(self, max_workers: int) -> None:
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, max_workers),
                                           thread_name_prefix="unifl-device")

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        items = list(items)
        if len(items) <= 1:
            return [fn(x) for x in items]
        futures = [self._pool.submit(fn, x) for x in items[:-1]]
        last = fn(items[-1])
        return [f.result() for f in futures] + [last]

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def make_executor(kind: str, workers: int) -> Executor:
    """``"threads"`` or ``"serial"`` (the names of a party YAML's ``executor`` field)."""
    if kind == "serial":
        return SerialExecutor()
    if kind == "threads":
        return ThreadExecutor(workers)
    from ..core.errors import ConfigError
    raise ConfigError(f"executor must be 'threads' or 'serial', got {kind!r}")

"""Executors run the pieces of a split batch, one per device, and return their results in order.

The interface is deliberately tiny: ``map(fn, items)`` returns ``[fn(x) for x in items]``, in the
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
    the calling thread, which saves a hand-off per batch.

    A failing piece is raised only once every piece has ended (the first failure in piece order),
    so no piece is still running on a device when the caller sees the error and moves on."""

    def __init__(self, max_workers: int) -> None:
        self._pool = cf.ThreadPoolExecutor(max_workers=max(1, max_workers),
                                           thread_name_prefix="unifl-device")

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> list[R]:
        items = list(items)
        if len(items) <= 1:
            return [fn(x) for x in items]
        futures = [self._pool.submit(fn, x) for x in items[:-1]]
        last_failure: BaseException | None = None
        try:
            last = fn(items[-1])
        except BaseException as exc:  # noqa: BLE001 - raised below, after the other pieces ended
            last_failure = exc
        cf.wait(futures)
        for f in futures:                # an earlier piece's failure comes first
            failure = f.exception()
            if failure is not None:
                raise failure
        if last_failure is not None:
            raise last_failure
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
    raise ConfigError(f"executor must be 'threads' or 'serial' here, got {kind!r} ('ray' runs "
                      "the devices of a cluster: unifl.scheduler.assemble)")

"""A Backend wrapper that counts and times every native operation it runs, per backend and device.

FATE and NVFlare users could not tell whether their accelerator ran at all; every party of a UniFL
run can print, from :meth:`CountingBackend.report`, how many calls and elements of which operation
ran on which backend and device, and for how long.  The wrapper has the wrapped backend's op_*
interface and ``implements()``, so the layers above compose exactly as they would on the bare
backend: an op the backend lacks is composed from counted MontMults.

The wrapper is also where a backend failing mid-run is caught: when the scheduler has attached the
party's fallback chain (``chain``, see :mod:`unifl.scheduler.fallback`), a call that fails with a
device failure is re-run on the next backend of the chain, this backend is retired for the rest of
the job, and the calls that reach it afterwards run on its replacement.  Caller errors propagate
unchanged.  A failed call is not counted in ``calls``/``elements``; the report adds
``failed_calls``, ``failed_elements``, ``fell_back_to`` and ``reason`` to its row.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from ..core.backend import OPS, Backend
from ..core.contract import define_ops
from .fallback import ChainMember, batch_elements, is_device_failure, own_batch_of
from . import tuning

__all__ = ["CountingBackend", "Counters", "batch_elements", "stand_in_of"]


class Counters:
    """Thread-safe per-op counters: calls, elements, seconds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: op -> (calls, elements, seconds)
        self._by_op: dict[str, tuple[int, int, float]] = {}

    def add(self, op: str, elements: int, seconds: float) -> None:
        with self._lock:
            calls, elems, secs = self._by_op.get(op, (0, 0, 0.0))
            self._by_op[op] = (calls + 1, elems + elements, secs + seconds)

    def snapshot(self) -> dict[str, tuple[int, int, float]]:
        with self._lock:
            return dict(self._by_op)

    def reset(self) -> None:
        with self._lock:
            self._by_op.clear()


def stand_in_of(backend: Backend) -> str | None:
    """Which stand-in ran for absent hardware (PoCL, the QAT simulator), None for real hardware."""
    runtime = getattr(backend, "runtime", None)
    if runtime is not None and getattr(runtime, "stand_in", None):
        return runtime.stand_in
    pr = getattr(backend, "probe_result", None)
    return pr.stand_in if pr is not None else None


class CountingBackend(ChainMember):
    """``inner`` with every ``op_*`` call counted and timed.  ``device`` labels the report rows.

    A wrapper, not a device: the per-key and per-modulus state a device needs (uploaded constants,
    native key objects) lives in ``inner.state`` and is built by ``inner`` itself.  The wrapper's own
    ``state`` only holds what the layers above cache on "the backend they were handed" -- host data
    computed through this wrapper, such as the SDK's generic fixed-base comb table -- which is valid
    for any backend, since every backend's results are bit-identical."""

    def __init__(self, inner: Backend, device: str | None = None) -> None:
        super().__init__()
        self.inner = inner
        # a wrapper's name and native ops are those of what it wraps, known per instance only
        self.name = inner.name  # type: ignore[misc]
        self.native_ops = frozenset(  # type: ignore[misc]
            op for op in OPS if inner.implements(op))
        self.probe_result = inner.probe_result
        self.device = device or (", ".join(inner.devices) or inner.name)
        self.stand_in = stand_in_of(inner)
        self.counters = Counters()

    def implements(self, op: str) -> bool:
        rep = self._replacement()
        return rep.implements(op) if rep is not None else op in self.native_ops

    @property
    def devices(self) -> list[str]:
        return [self.device]

    def describe(self) -> str:
        return self.inner.describe()

    def own_batch(self, x: Any) -> Any:
        rep = self._replacement()
        if rep is not None:
            return own_batch_of(rep, x, f"{self.name} ({self.device})")
        return self.inner.own_batch(x)

    def _run(self, op: str, args: tuple[Any, ...]) -> Any:
        chain = self.chain
        if chain is not None and chain.retired(self.chain_pos):
            return chain.run_on_current(self.chain_pos, op, args)
        t0 = time.perf_counter()
        try:
            out = getattr(self.inner, f"op_{op}")(*args)
        except Exception as exc:
            if chain is None or not is_device_failure(exc, self.inner):
                raise
            return chain.rerun(self.chain_pos, op, args, exc, self, scope="batch")
        self.counters.add(op, batch_elements(op, args), time.perf_counter() - t0)
        return out

    def own_report(self) -> list[dict]:
        """This backend's own counter rows (no fallback links, no failure annotations)."""
        return [{"op": op, "backend": self.name, "device": self.device, "calls": c, "elements": e,
                 "seconds": s, "stand_in": self.stand_in}
                for op, (c, e, s) in sorted(self.counters.snapshot().items())]

    def reset_counters(self) -> None:
        self.counters.reset()
        self._reset_chain_counters()

    def close(self) -> None:
        tuning.remember(self.inner)     # what the job made it measure, for the next job here
        close = getattr(self.inner, "close", None)
        if callable(close):
            close()
        self._close_chain()

    def __getattr__(self, item: str) -> Any:
        # options and attributes of the wrapped backend (threads, runtime, mode ...)
        if item == "inner":
            raise AttributeError(item)
        return getattr(self.inner, item)


# one forwarder per op of the contract, so an op added to OPS is counted without editing this file
define_ops(CountingBackend, "_run", "The wrapped backend's op, counted and timed.")

"""The Ray actor of a party's worker: one backend chain of its own, started on its node from the
party's config, running whole pieces of the party's batches.

The actor builds its chain exactly as a party process would (:func:`unifl.scheduler.select.local_chain`:
registry, options, self-test, its own fallback), so a worker on a GPU node runs ``gpu`` and falls
back on that node, and the device state it derives stays in the actor for its lifetime.  A piece is
one op of the contract with its arguments; the worker runs it natively or composed on its chain
(:func:`unifl.scheduler.fallback.run_op`) -- whole, so a composed op costs no round trip per
MontMult -- and returns a host array.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import numpy as np

from ...configs import PartyConfig
from ...core.errors import BackendUnavailable
from ...core.contract import OPS
from ..counting import stand_in_of
from ..fallback import ChainMember, run_op
from ..select import local_chain
from .cluster import import_ray
from .shipping import Resolver


class PartyWorker:
    """One worker of a party's Ray cluster (the class the actors are made of)."""

    def __init__(self, config: dict[str, Any], index: int) -> None:
        ray = import_ray()
        rc = ray.get_runtime_context()
        self.where: dict[str, Any] = {
            "index": index,
            "node_id": rc.get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "actor_id": rc.get_actor_id(),
        }
        self._resolver = Resolver()
        self.busy_seconds = 0.0
        try:
            # built here, on the worker's node: its registry, its devices, its fallback
            self.backend: ChainMember | None = local_chain(PartyConfig.model_validate(config))
        except Exception as exc:  # noqa: BLE001 - reported by info(); the party gives this one up
            self.backend = None
            self.where["error"] = _reason(exc)
            return
        self.where.update({
            "backend": self.backend.name,
            "describe": self.backend.describe(),
            "stand_in": stand_in_of(self.backend),
            "fallback_events": list(self.backend.selection.fallback_events
                                    if self.backend.selection is not None else []),
            "native_ops": sorted(op for op in OPS if self.backend.implements(op)),
        })

    def info(self) -> dict[str, Any]:
        """Where this worker runs and what it runs: node, host, pid, the backend its chain chose."""
        return dict(self.where)

    def run(self, op: str, args: tuple) -> np.ndarray:
        """Op ``op`` of the contract on this worker's chain; the result as a host array."""
        if op not in OPS:
            raise ValueError(f"{op!r} is not an op of the contract")
        if self.backend is None:
            raise BackendUnavailable(f"this worker has no backend: {self.where['error']}")
        t0 = time.perf_counter()
        out = run_op(self.backend, op, tuple(self._resolver.resolve(a) for a in args))
        res = np.ascontiguousarray(out, dtype=np.uint64)
        self.busy_seconds += time.perf_counter() - t0
        return res

    def report(self) -> list[dict]:
        """The worker chain's own per-op record (what it ran, on which device, after any fallback
        inside the worker)."""
        return self.backend.report() if self.backend is not None else []

    def stats(self) -> dict[str, Any]:
        """Seconds spent in ops and shared objects fetched (handles not found in the cache)."""
        return {"busy_seconds": self.busy_seconds, "shared_fetched": self._resolver.fetched}

    def close(self) -> None:
        if self.backend is not None:
            self.backend.close()


def _reason(exc: BaseException) -> str:
    """``Type: message`` on one line (a validation error's lines joined, its doc links dropped)."""
    lines = [ln.strip() for ln in str(exc).splitlines()
             if ln.strip() and not ln.strip().startswith("For further information")]
    return f"{type(exc).__name__}: {' '.join(lines)}"

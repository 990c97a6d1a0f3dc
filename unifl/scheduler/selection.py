"""What a party asked of the scheduler, what runs, and why: the typed record every backend the
scheduler returns carries as ``.selection`` (reports print it; :meth:`Selection.as_dict` is its
JSON form)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Selection"]


@dataclass
class Selection:
    """The scheduler's choice for one party.

    Attributes:
        requested: the backend the config names (``auto`` included).
        chosen: the backend that runs (``a+b`` for several kinds).
        fallback_events: every candidate skipped at start, ``{backend, reason}`` (unavailable,
            failed its self-test, or does not serve the party's request: ``Backend.supports``).
        ranking: ``auto`` only: (backend, calibration seconds), fastest first.
        devices: the devices of the chosen backend.
        describe: one line naming backend, stand-in and devices.
        runtime_fallbacks: the re-runs after a failure mid-run (a live list: it grows as the job
            runs; :class:`~unifl.scheduler.fallback.FallbackChain`).
        executor: ``threads``, ``serial`` or ``ray``.
        ray: with ``executor: ray``, the cluster, its workers and nodes (updated by ``report()``).
        dispatch: with size-aware dispatch, how calls are placed between the accelerator and the
            party's CPU backend (:mod:`unifl.scheduler.dispatch`).
    """

    requested: str
    chosen: str
    fallback_events: list[dict[str, str]] = field(default_factory=list)
    ranking: list[tuple[str, float]] | None = None
    devices: list[str] = field(default_factory=list)
    describe: str = ""
    runtime_fallbacks: list[dict[str, Any]] = field(default_factory=list)
    executor: str = "threads"
    ray: dict[str, Any] | None = None
    dispatch: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        """The record as plain data (the live lists copied as they are now)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["fallback_events"] = [dict(e) for e in self.fallback_events]
        out["runtime_fallbacks"] = [dict(e) for e in self.runtime_fallbacks]
        return out

"""Measurements a backend instance makes about its own device, kept for the next instance.

Some backends decide at run time by timing (the GPU backend's ``kernels: auto`` times both kernel
families once per modulus size class, about two seconds for a 2048-bit key's classes on an H200).
A party is a fresh process per job, so without a record every job on a machine would pay that
again.  :func:`restore` hands a new instance what an earlier one with the same
:meth:`~unifl.core.backend.Backend.tuning_key` (device, build, options) recorded, and
:func:`remember` records what an instance measured.  The record is ``backend-tuning.json`` in the
private cache folder of :mod:`unifl.scheduler.cache` (0700, no links followed, files of ours
only); ``UNIFL_CALIBRATION_CACHE=off`` turns it off.  A backend checks what it adopts, so a
tampered record can at most cost time, never change a result: both kernel families are exact.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from ..core.backend import Backend
from . import cache

log = logging.getLogger("unifl.scheduler")

__all__ = ["restore", "remember", "CACHE_FILE", "MAX_KEYS", "TTL_S"]

CACHE_FILE = "backend-tuning.json"
#: records kept per backend (the most recent), and how long one is trusted
MAX_KEYS = 16
TTL_S = 7 * 24 * 3600


def restore(inst: Backend) -> int:
    """Give ``inst`` what was recorded under its tuning key; how many measurements it took."""
    key = inst.tuning_key()
    if key is None:
        return 0
    entry = cache.read_json(CACHE_FILE).get(inst.name, {})
    hit = entry.get(key) if isinstance(entry, dict) else None
    if not isinstance(hit, dict):
        return 0
    at = hit.get("at")
    if not isinstance(at, (int, float)) or not 0 <= time.time() - at < TTL_S:
        return 0
    took = inst.adopt_tuning(hit.get("state"))
    if took:
        log.info("%s: %d run-time measurement(s) taken from the tuning record", inst.name, took)
    return took


def remember(inst: Backend) -> bool:
    """Record what ``inst`` has measured (nothing new: no write); False when nothing was written."""
    key = inst.tuning_key()
    if key is None:
        return False
    state = inst.tuning()
    if not state:
        return False
    data = cache.read_json(CACHE_FILE)
    raw = data.get(inst.name)
    entry: dict[str, Any] = dict(raw) if isinstance(raw, dict) else {}
    old = entry.get(key)
    if isinstance(old, dict) and old.get("state") == state:
        return False
    entry[key] = {"at": time.time(), "state": state}
    if len(entry) > MAX_KEYS:
        def age(k: str) -> float:
            v = entry[k]
            at = v.get("at") if isinstance(v, dict) else None
            return at if isinstance(at, (int, float)) else 0.0
        entry = {k: entry[k] for k in sorted(entry, key=age)[-MAX_KEYS:]}
    data[inst.name] = entry
    return cache.write_json(CACHE_FILE, data)


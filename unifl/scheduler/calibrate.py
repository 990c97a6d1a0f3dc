"""``backend: auto``: rank the available backends by a short calibration run.

The run is what FL spends its time on at the default key size: a batch of 2048-bit MontMults and a
few full 2048-bit ModExps (one warm-up call first, so a kernel build or a first-call set-up is not
counted).  Results are cached in-process and on disk (JSON, keyed by backend, options and machine,
in the private cache folder of :mod:`unifl.scheduler.cache`), so a party started again does not
pay for it twice.  ``UNIFL_CALIBRATION_CACHE`` names the cache file, or ``off`` to disable the
disk cache.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import secrets
import time
from pathlib import Path
from typing import Callable

from ..core.backend import Backend
from . import cache

log = logging.getLogger("unifl.scheduler")

BITS = 2048
MONT_MULS = 256
MOD_EXPS = 4
CACHE_TTL_S = 7 * 24 * 3600
_memory: dict[str, float] = {}


def _cache_file() -> tuple[Path, str] | None:
    """(folder, file name) of the ranking cache: ``UNIFL_CALIBRATION_CACHE`` names the file, else
    ``calibration.json`` in the private cache folder (:mod:`unifl.scheduler.cache`)."""
    env = os.environ.get("UNIFL_CALIBRATION_CACHE")
    if env == "off":
        return None
    if env:
        path = Path(env)
        return path.parent, path.name
    folder = cache.cache_dir()
    return None if folder is None else (folder, "calibration.json")


def cache_key(name: str, options: dict) -> str:
    from .. import __version__
    opts = json.dumps(options, sort_keys=True, default=str)
    return f"{name}|{opts}|{platform.node()}|{platform.machine()}|unifl-{__version__}"


def _load_disk() -> dict:
    where = _cache_file()
    return {} if where is None else cache.read_json(where[1], where[0])


def _store_disk(key: str, seconds: float) -> None:
    where = _cache_file()
    if where is None:
        return
    data = _load_disk()
    data[key] = {"seconds": seconds, "at": time.time()}
    cache.write_json(where[1], data, where[0])    # a read-only or foreign folder: not cached


def measure(backend: Backend, bits: int = BITS, mont_muls: int = MONT_MULS,
            mod_exps: int = MOD_EXPS) -> float:
    """Seconds for ``mont_muls`` MontMults (one batch) and ``mod_exps`` ModExps with full-size
    exponents, on random odd ``bits``-bit moduli, after one warm-up call of each."""
    from .. import base_op, mod_op
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(mont_muls)])
    b = ctx.to_limbs([secrets.randbelow(m) for _ in range(mont_muls)])
    x = ctx.to_limbs([secrets.randbelow(m) for _ in range(mod_exps)])
    e = mod_op.exp_limbs([secrets.randbits(bits) for _ in range(mod_exps)])
    base_op.mont_mul(backend, ctx, a[:2], b[:2])            # warm-up: kernel builds, contexts
    mod_op.mod_exp(backend, ctx, x[:1], e[:1])
    t0 = time.perf_counter()
    base_op.mont_mul(backend, ctx, a, b)
    mod_op.mod_exp(backend, ctx, x, e)
    return time.perf_counter() - t0


def calibrated_seconds(name: str, options: dict, make: Callable[[], Backend]) -> float:
    """Calibration time of backend ``name`` with ``options`` (cached; ``make`` builds it if not)."""
    key = cache_key(name, options)
    if key in _memory:
        return _memory[key]
    hit = _load_disk().get(key)
    if isinstance(hit, dict) and time.time() - float(hit.get("at", 0)) < CACHE_TTL_S:
        _memory[key] = float(hit["seconds"])
        return _memory[key]
    seconds = measure(make())
    log.info("calibration: %s took %.3f s", name, seconds)
    _memory[key] = seconds
    _store_disk(key, seconds)
    return seconds


def clear_memory_cache() -> None:
    _memory.clear()

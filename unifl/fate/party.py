"""Which UniFL backend this FATE party computes on.

Order of precedence (first that applies):

1. :func:`set_backend` (the ``backend`` key of the FATE PHE options calls it on the key owner);
2. the environment variable ``UNIFL_BACKEND`` (a backend name, e.g. ``native``);
3. the party's UniFL YAML named by ``UNIFL_CONFIG`` (its ``backend`` field, then its ``fallback``
   list, tried in order until one probes available);
4. ``native`` when it is built, else ``cpu``.

Keys and ciphertexts received from another party never carry that party's backend: each party
decides for itself (its hardware is its own business), and every backend is bit-identical to ``cpu``.
"""

from __future__ import annotations

import os
import threading

from ..core import registry
from ..core.backend import Backend
from ..core.errors import BackendUnavailable, ConfigError

_lock = threading.Lock()
_chosen: Backend | None = None


def set_backend(name: str | None) -> None:
    """Pin this process's backend (``None`` forgets the choice and re-reads env/config next time)."""
    global _chosen
    with _lock:
        _chosen = None if name is None else registry.backend(name)


def _names_from_config(path: str) -> list[str]:
    import yaml
    try:
        with open(path) as f:
            cfg = yaml.safe_load(f) or {}
    except OSError as exc:
        raise ConfigError(f"UNIFL_CONFIG={path!r} cannot be read: {exc}") from exc
    if not isinstance(cfg, dict):
        raise ConfigError(f"UNIFL_CONFIG={path!r}: the top level must be a mapping")
    if cfg.get("executor") == "ray":
        # not silently ignored: inside FATE the engine spreads the work, not this process
        raise ConfigError(
            f"UNIFL_CONFIG={path!r}: executor: ray does not apply inside FATE -- FATE's engine "
            "(eggroll, Spark) already spreads a job over its workers, each running UniFL's kit on "
            "its own backend; set the backend of each worker node instead (UNIFL_BACKEND or a "
            "UNIFL_CONFIG without executor: ray in that node's environment; docs/scale.md)")
    names = [cfg.get("backend", "auto")]
    fallback = cfg.get("fallback") or []
    if isinstance(fallback, str):
        fallback = [fallback]
    if not isinstance(fallback, list):
        raise ConfigError(f"UNIFL_CONFIG={path!r}: field 'fallback' must be a list of backend names")
    return [str(n) for n in names + fallback]


def current_backend() -> Backend:
    """The backend this party's kit objects compute on (see the module docstring)."""
    global _chosen
    with _lock:
        if _chosen is not None:
            return _chosen
        env = os.environ.get("UNIFL_BACKEND")
        if env:
            _chosen = registry.backend(env)
            return _chosen
        path = os.environ.get("UNIFL_CONFIG")
        if path:
            reasons = []
            for name in _names_from_config(path):
                if name == "auto":
                    _chosen = registry.default_backend()
                    return _chosen
                pr = registry.probe(name)
                if pr.available:
                    _chosen = registry.backend(name)
                    return _chosen
                reasons.append(f"{name}: {pr.reason}")
            raise BackendUnavailable(f"no backend of {path} is available here ({'; '.join(reasons)})")
        _chosen = registry.default_backend()
        return _chosen

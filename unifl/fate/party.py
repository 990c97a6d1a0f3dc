"""Which UniFL backend this FATE party computes on: the party's config, through the same validated
config -> scheduler path as ``unifl run`` (:func:`unifl.configs.load_party`, then
:func:`unifl.scheduler.backend_from_config`): every option checked where it is read (a misspelt key
is a ConfigError naming it), ``devices`` split batches over the listed devices, ``auto`` ranks the
available backends, the fallback chain applies at start and mid-batch, and every op is counted per
backend and device (:func:`report`, :func:`selection`).

Where the config comes from (first that applies):

1. :func:`set_backend` (the ``backend`` key of the FATE PHE options calls it on the key owner):
   the config ``{backend: <name>, fallback: []}``;
2. the environment variable ``UNIFL_BACKEND`` (a backend name, e.g. ``native``): the same;
3. the party's UniFL YAML named by ``UNIFL_CONFIG``, validated (``executor: ray`` is refused:
   inside FATE the engine spreads a job over its workers);
4. the schema's defaults (the registry's chain of backends that need no special hardware).

Keys and ciphertexts received from another party never carry that party's backend: each party
decides for itself (its hardware is its own business), and every backend is bit-identical to ``cpu``.

Counting is per process, and FATE runs a job's partitions in worker processes of its computing
engine, each with its own backend (made from the same environment).  With ``UNIFL_REPORT_DIR``
set, every process that computed with the kit writes ``unifl-report-<pid>.json`` there (its
selection and its per-op record) when it exits normally, so a job's whole record can be summed.
"""

from __future__ import annotations

import atexit
import json
import multiprocessing.util
import os
import threading
from typing import Any

from ..configs import PartyConfig, load_party, validate
from ..core.backend import Backend
from ..core.errors import ConfigError
from ..scheduler import backend_from_config
from ..scheduler.selection import Selection

_lock = threading.Lock()
_chosen: Backend | None = None

#: the role written into a config made from a backend name alone: the scheduler uses it only to
#: name the party in its log (FATE knows the party's real role)
_ROLE = "guest"


def set_backend(name: str | None) -> None:
    """Pin this process's backend (``None`` forgets the choice and re-reads env/config next time);
    the name is checked against the registry now."""
    global _chosen
    config = None if name is None else _named_config(name, "the PHE option 'backend'")
    with _lock:
        _chosen = None if config is None else backend_from_config(config)


def _named_config(name: str, where: str) -> PartyConfig:
    return validate(PartyConfig, {"party": _ROLE, "backend": name, "fallback": []}, where)


def party_config() -> PartyConfig:
    """The config this process's backend comes from (see the module docstring)."""
    env = os.environ.get("UNIFL_BACKEND")
    if env:
        return _named_config(env, "UNIFL_BACKEND")
    path = os.environ.get("UNIFL_CONFIG")
    if not path:
        return validate(PartyConfig, {"party": _ROLE}, "UniFL's defaults")
    cfg = load_party(path)
    if cfg.executor == "ray":
        # not silently ignored: inside FATE the engine spreads the work, not this process
        raise ConfigError(
            f"UNIFL_CONFIG={path!r}: executor: ray does not apply inside FATE -- FATE's engine "
            "(eggroll, Spark) already spreads a job over its workers, each running UniFL's kit on "
            "its own backend; set the backend of each worker node instead (UNIFL_BACKEND or a "
            "UNIFL_CONFIG without executor: ray in that node's environment; docs/scale.md)")
    return cfg


def current_backend() -> Backend:
    """The backend this party's kit objects compute on: the scheduler's chain for
    :func:`party_config` (made once per process, or per :func:`set_backend`)."""
    global _chosen
    with _lock:
        if _chosen is None:
            _chosen = backend_from_config(party_config())
            _report_at_exit()
        return _chosen


_reporting: set[int] = set()


def _report_at_exit() -> None:
    """With UNIFL_REPORT_DIR set, write this process's record there when it exits (once per
    process; FATE's computing workers exit through multiprocessing, which runs its finalizers but
    not atexit)."""
    if not os.environ.get("UNIFL_REPORT_DIR") or os.getpid() in _reporting:
        return
    _reporting.add(os.getpid())
    atexit.register(write_report)
    multiprocessing.util.Finalize(None, write_report, exitpriority=100)


def write_report() -> None:
    """Write ``unifl-report-<pid>.json`` (selection and per-op record) into UNIFL_REPORT_DIR,
    once per process, as a new file (no link followed, nothing overwritten)."""
    folder = os.environ.get("UNIFL_REPORT_DIR")
    with _lock:
        backend = _chosen
    if not folder or backend is None:
        return
    rows = getattr(backend, "report", None)
    record = {"pid": os.getpid(), "selection": _selection_of(backend),
              "report": list(rows()) if callable(rows) else []}
    path = os.path.join(folder, f"unifl-report-{os.getpid()}.json")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return                   # written already (atexit and the finalizer both ran)
    with os.fdopen(fd, "w") as f:
        json.dump(record, f, default=str)


def _selection_of(backend: Backend) -> dict[str, Any]:
    sel = getattr(backend, "selection", None)
    return sel.as_dict() if isinstance(sel, Selection) else {}


def selection() -> dict[str, Any]:
    """What the scheduler chose for this party and why (requested, chosen, fallback events,
    devices, runtime fallbacks)."""
    return _selection_of(current_backend())


def report() -> list[dict[str, Any]]:
    """Every op this party's kit ran: op, backend, device, calls, elements, seconds."""
    rows = getattr(current_backend(), "report", None)
    return list(rows()) if callable(rows) else []

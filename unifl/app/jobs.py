"""One entry point for every federated job: ``run_job(role, job, channel, backend)``.

``job`` is the dict parsed from a job YAML (or a :class:`~unifl.app.params.JobConfig`)::

    {"job_id": "demo", "algorithm": "psi+vlr", "dataset": "breast", "parties": ["guest", "host"],
     "seed": 42, "key_bits": 2048, "params": {...algorithm hyper-parameters...}}

It is validated by :mod:`unifl.app.params` (the one schema and set of defaults), here and again by
each algorithm when it reads its parameters.

Each party process calls ``run_job`` with its own role; the parties meet through ``channel``.
The result is JSON-serialisable: role, metrics, model, per-sub-task timings (FLASH Table 1 style)
and, for PSI, the intersection size.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

from ..core.backend import Backend
from ..core.errors import ConfigError, TransportError
from . import horizontal, psi, secureboost, vertical
from .channel import ROLES, Channel, local_transports
from .params import JobConfig, PsiParams, load_job, params_of, validate_job

__all__ = ["ALGORITHMS", "run_job", "run_local", "validate_job", "load_job", "JobConfig"]

#: algorithm -> the function each party runs
ALGORITHMS: dict[str, Callable[..., dict]] = {
    "psi": psi.run,
    "vlr": vertical.run_lr,
    "vlinr": vertical.run_linr,
    "psi+vlr": vertical.run_psi_lr,
    "psi+vlinr": vertical.run_psi_linr,
    "hlr": horizontal.run,
    "secureboost": secureboost.run,
}


def run_job(role: str, job: Mapping[str, Any] | JobConfig, channel: Channel,
            backend: Backend | None, *, data_dir: str | None = None,
            progress: bool = True) -> dict:
    """Run this party's side of ``job`` and return its result (see the module docstring).

    Args:
        role: "guest" (labels; PSI client), "host" (features only; PSI server) or "arbiter".
        channel: connected to the other parties of ``job["parties"]``.
        backend: the Backend every cryptographic operation of this party runs on.
        data_dir: folder with the datasets (default: ../shared/data if present, else bundled).
    """
    job = validate_job(job)
    if role not in ROLES or role not in job["parties"]:
        raise ConfigError(f"role {role!r} is not one of the job's parties {job['parties']}")
    channel.backend = backend
    result = ALGORITHMS[job["algorithm"]](role, job, channel, backend, data_dir=data_dir,
                                          progress=progress)
    result.setdefault("role", role)
    result.setdefault("job_id", job["job_id"])
    result.setdefault("algorithm", job["algorithm"])
    result["network"] = {k: v for k, v in channel.stats.items()}
    return result


def run_local(job: Mapping[str, Any] | JobConfig, backend: Backend | None, *,
              data_dir: str | None = None, progress: bool = False, timeout: float = 120.0,
              backends: Mapping[str, Backend | None] | None = None) -> dict[str, dict]:
    """All parties of ``job`` as threads of this process over :class:`LocalTransport` (tests,
    single-machine benchmarks).  Returns {role: result}; the first party error is re-raised after
    every thread has ended (a failing party closes its transport, so its peers stop promptly).

    Args:
        backends: optional per-role backends (mixed-hardware runs); ``backend`` otherwise.
    """
    job = validate_job(job)
    transports = local_transports(tuple(job["parties"]))
    # every party holds received keys to the job's key size, as a party process holds them to its
    # config's key_bits (the PSI key to rsa_bits where the job sets it)
    p = params_of(job)
    floor = min(job["key_bits"], p.rsa_key_bits(job["key_bits"]) if isinstance(p, PsiParams)
                else job["key_bits"])
    results: dict[str, dict] = {}
    errors: dict[str, BaseException] = {}

    def party(role: str) -> None:
        be = (backends or {}).get(role, backend)
        chan = Channel(transports[role], timeout, be, min_key_bits=floor)
        try:
            results[role] = run_job(role, job, chan, be, data_dir=data_dir, progress=progress)
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
            errors[role] = exc
        finally:
            chan.close()

    threads = [threading.Thread(target=party, args=(r,), name=f"unifl-{r}") for r in job["parties"]]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        # the root cause, not the peers' "peer closed" consequences
        first = next((e for e in errors.values() if not isinstance(e, TransportError)),
                     next(iter(errors.values())))
        raise first
    return results

"""One entry point for every federated job: ``run_job(role, job, channel, backend)``.

``job`` is the dict parsed from a job YAML::

    {"job_id": "demo", "algorithm": "psi+vlr", "dataset": "breast", "parties": ["guest", "host"],
     "seed": 42, "key_bits": 2048, "params": {...algorithm hyper-parameters...}}

Each party process calls ``run_job`` with its own role; the parties meet through ``channel``.
The result is JSON-serialisable: role, metrics, model, per-sub-task timings (FLASH Table 1 style)
and, for PSI, the intersection size.
"""

from __future__ import annotations

import importlib

from ..core.errors import ConfigError, TransportError
from .channel import ROLES, Channel

#: algorithm -> (module, function) run by each party
ALGORITHMS = {
    "psi": ("unifl.app.psi", "run"),
    "vlr": ("unifl.app.vertical", "run_lr"),
    "vlinr": ("unifl.app.vertical", "run_linr"),
    "psi+vlr": ("unifl.app.vertical", "run_psi_lr"),
    "psi+vlinr": ("unifl.app.vertical", "run_psi_linr"),
    "hlr": ("unifl.app.horizontal", "run"),
    "secureboost": ("unifl.app.secureboost", "run"),
}


def validate_job(job: dict) -> dict:
    """The job with defaults filled in; ConfigError naming the bad field otherwise."""
    if not isinstance(job, dict):
        raise ConfigError("job must be a mapping")
    algo = job.get("algorithm")
    if algo not in ALGORITHMS:
        raise ConfigError(f"job field 'algorithm': {algo!r} is not one of {sorted(ALGORITHMS)}")
    parties = list(job.get("parties") or ["guest", "host"])
    if parties not in (["guest", "host"], ["guest", "host", "arbiter"]):
        raise ConfigError(f"job field 'parties': {parties!r} must be [guest, host] or "
                          "[guest, host, arbiter]")
    key_bits = int(job.get("key_bits", 2048))
    if key_bits < 1024 or key_bits % 2:
        raise ConfigError(f"job field 'key_bits': {key_bits} must be even and >= 1024")
    params = job.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError("job field 'params' must be a mapping")
    return {"job_id": str(job.get("job_id", "job")), "algorithm": algo,
            "dataset": job.get("dataset", "breast"), "parties": parties,
            "seed": int(job.get("seed", 42)), "key_bits": key_bits, "params": dict(params)}


def run_job(role: str, job: dict, channel: Channel, backend, *, data_dir: str | None = None,
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
    module_name, func_name = ALGORITHMS[job["algorithm"]]
    try:
        module = importlib.import_module(module_name)
        func = getattr(module, func_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"algorithm {job['algorithm']!r} is not available in this build "
                          f"({exc})") from exc
    channel.backend = backend
    result = func(role, job, channel, backend, data_dir=data_dir, progress=progress)
    result.setdefault("role", role)
    result.setdefault("job_id", job["job_id"])
    result.setdefault("algorithm", job["algorithm"])
    result["network"] = {k: v for k, v in channel.stats.items()}
    return result


def run_local(job: dict, backend, *, data_dir: str | None = None, progress: bool = False,
              timeout: float = 120.0, backends: dict | None = None) -> dict[str, dict]:
    """All parties of ``job`` as threads of this process over :class:`LocalTransport` (tests,
    single-machine benchmarks).  Returns {role: result}; the first party error is re-raised after
    every thread has ended (a failing party closes its transport, so its peers stop promptly).

    Args:
        backends: optional per-role backends (mixed-hardware runs); ``backend`` otherwise.
    """
    import threading

    from .channel import local_transports

    job = validate_job(job)
    transports = local_transports(tuple(job["parties"]))
    # every party holds received keys to the job's key size, as a party process holds them to its
    # config's key_bits (the PSI key to rsa_bits where the job sets it)
    floor = min(job["key_bits"], int(job["params"].get("rsa_bits", job["key_bits"])))
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

"""One party of a federated job, as its own process: config -> scheduler -> backend, gRPC transport
-> channel -> ``run_job``; the result says which hardware ran what.

Used by ``unifl run`` (and, through it, by each process ``unifl demo`` starts).
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Protocol, runtime_checkable

from .app.params import JobConfig, with_party_scale
from .configs import PartyConfig, validate
from .core.errors import ConfigError
from .scheduler.selection import Selection

log = logging.getLogger("unifl.party")


@runtime_checkable
class ScheduledBackend(Protocol):
    """What the scheduler's backend (``backend_from_config``) adds to a Backend: what was chosen
    and why (``selection``, a :class:`~unifl.scheduler.selection.Selection`) and the per-op record
    (``report()``)."""

    selection: Selection | None

    def report(self) -> list[dict[str, Any]]: ...

    def pool_report(self) -> list[dict[str, Any]]: ...

    def dispatch_report(self) -> list[dict[str, Any]]: ...


def effective_job(cfg: PartyConfig, job: JobConfig) -> dict:
    """The job dict this party runs.  The party's ``key_bits`` is its floor: a job asking for
    smaller keys is refused (a party never accepts weaker keys than its own policy).  The party's
    ``encoding.scale_bits``, when set, is the fixed-point scale of every algorithm that encodes
    reals (a job that sets another is refused); the parties compare scales at job start."""
    if job.key_bits < cfg.key_bits:
        raise ConfigError(f"job {job.job_id!r} asks for {job.key_bits}-bit keys but party "
                          f"{cfg.party}'s config requires key_bits >= {cfg.key_bits}")
    if cfg.party not in job.parties:
        raise ConfigError(f"party {cfg.party!r} is not one of the job's parties {job.parties}")
    return with_party_scale(job, cfg.encoding.scale_bits, cfg.party).to_job()


def warn_if_insecure(cfg: PartyConfig) -> bool:
    """Say on stderr (and in the log) that this party's links are unauthenticated and unencrypted
    when its config runs plaintext by ``network.insecure: true``, and that its private key goes
    to its Ray workers in clear by ``ray.insecure: true``; called on every start."""
    msgs = [cfg.network.insecure_warning(), cfg.ray.insecure_warning() if cfg.ray else None]
    for msg in filter(None, msgs):
        print(f"unifl {cfg.party}: {msg}", file=sys.stderr, flush=True)
        log.warning("%s: %s", cfg.party, msg)
    return any(msgs)


def run_party(cfg: PartyConfig, job: JobConfig, *, data_dir: str | None = None,
              progress: bool = True, listen: str | None = None,
              peers: dict[str, str] | None = None) -> dict[str, Any]:
    """Run this party's side of ``job``; returns run_job's result plus ``backend`` (selection and
    the per-op report) and ``wall_seconds`` (run_job's ``network`` has the transport stats)."""
    from .app.channel import Channel
    from .app.jobs import run_job
    from .app.transport import from_config
    from .scheduler import backend_from_config

    job_dict = effective_job(cfg, job)
    if listen or peers:     # overrides obey the same rules as the file (TLS off the loopback)
        data = cfg.model_dump()
        data["network"]["peers"].update(peers or {})
        if listen:
            data["network"]["listen"] = listen
        cfg = validate(PartyConfig, data, f"party {cfg.party} (with overrides)")
    warn_if_insecure(cfg)
    t0 = time.perf_counter()
    # the scheduler's chain: a Backend that also reports its selection and per-op record
    backend = backend_from_config(cfg)
    t_backend = time.perf_counter() - t0
    transport = from_config(cfg, job.job_id, resume=job.resume)
    channel = Channel(transport, default_timeout=cfg.network.timeout_s, backend=backend,
                      min_key_bits=cfg.key_bits)     # received keys below the floor are refused
    try:
        result = run_job(cfg.party, job_dict, channel, backend, data_dir=data_dir,
                         progress=progress)
    finally:
        channel.close()
        close = getattr(backend, "close", None)
        if callable(close):
            close()
    result.setdefault("dataset", job.dataset)
    if not isinstance(backend, ScheduledBackend) or backend.selection is None:
        raise AttributeError(f"the scheduler's backend {type(backend).__name__} has no "
                             "selection / report()")
    result["backend"] = {**backend.selection.as_dict(), "report": backend.report(),
                         "obfuscators": backend.pool_report(),
                         "dispatch": backend.dispatch_report(), "start_seconds": t_backend}
    result["wall_seconds"] = time.perf_counter() - t0
    return result


def hardware_label(selection: dict, short: bool = False) -> str:
    """'fpga [PoCL (OpenCL on the CPU)]' style label of what ran, from a result's ``backend``
    (``short``: 'fpga [PoCL]')."""
    stand_ins = {r.get("stand_in") for r in selection.get("report", []) if r.get("stand_in")}
    if short:
        stand_ins = {s.split(" (")[0] for s in stand_ins}
    label = selection.get("chosen", "?")
    if stand_ins:
        label += f" [{', '.join(sorted(stand_ins))}]"
    if selection.get("requested") not in (None, "auto", selection.get("chosen")):
        label += (f" ({selection['requested']} unavailable)" if short else
                  f" (fallback: {selection['requested']} unavailable)")
    return label

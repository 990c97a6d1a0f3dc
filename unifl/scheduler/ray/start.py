"""Starting a party's Ray backend from its config: join the cluster, start the worker actors (each
builds its own chain on its node), start the party's own chain, and say what came up and where.

Bounded in time: joining fails within ``ray.start_timeout_s`` (cluster.py); workers that have not
started within it (their resources cannot be placed, their node is gone) are given up with the
reason, and so are workers whose chain could not start any backend.  The party goes on with the
workers that started, and says how many of how many; with none it is a BackendUnavailable that
names the address and every worker's reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ...configs.schema import is_loopback_address
from ...core.errors import BackendUnavailable, ConfigError
from ..select import local_chain
from ..selection import Selection
from .backend import RayBackend
from .cluster import Connection, connect, import_ray, release, use_tls
from .proxy import RayWorkerProxy
from .shipping import Shipper
from .worker import PartyWorker

if TYPE_CHECKING:
    from ...configs import PartyConfig
    from ...configs.schema import RaySection

log = logging.getLogger("unifl.scheduler.ray")


def worker_config(cfg: PartyConfig) -> dict[str, Any]:
    """The config each worker builds its chain from: the party's, with ``ray.backend`` /
    ``ray.fallback`` where given, its devices and backend sections, no network and no Ray (a
    worker computes; it never talks to the peers)."""
    section = _section(cfg)
    data = cfg.model_dump()
    for key in ("network", "ray"):
        data.pop(key, None)
    data["executor"] = "threads"
    data["backend"] = section.backend or cfg.backend
    if section.fallback is not None:
        data["fallback"] = list(section.fallback)
    return data


def local_config(cfg: PartyConfig) -> PartyConfig:
    """The party's own chain in its process: the YAML's backend and fallback, threads."""
    data = cfg.model_dump()
    data.pop("ray", None)
    data["executor"] = "threads"
    return type(cfg).model_validate(data)


def actor_options(section: RaySection) -> dict[str, Any]:
    """Ray actor options of one worker from ``ray.resources_per_worker`` (CPU, GPU, memory in
    bytes, anything else a custom resource of the cluster's nodes); workers spread over nodes,
    and a dead one is not restarted (its piece goes to another; see RayBackend)."""
    res = dict(section.resources_per_worker)
    opts: dict[str, Any] = {"num_cpus": res.pop("CPU", 1.0), "num_gpus": res.pop("GPU", 0.0),
                            "max_restarts": 0, "max_task_retries": 0,
                            "scheduling_strategy": "SPREAD"}
    memory = res.pop("memory", None)
    if memory:
        opts["memory"] = int(memory)
    if res:
        opts["resources"] = res
    return opts


def _section(cfg: PartyConfig) -> RaySection:
    if cfg.ray is None:
        raise ConfigError("executor: ray needs a ray section")
    return cfg.ray


def _first_line(exc: BaseException) -> str:
    """The innermost reason of a Ray error: the last line of its message that says something."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, BaseException):
        return f"{type(cause).__name__}: {cause}"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[-1] if lines else type(exc).__name__


def start_workers(cfg: PartyConfig, conn: Connection
                  ) -> tuple[list[tuple[Any, dict[str, Any]]], list[dict[str, str]]]:
    """(actor, info) of each worker that started, and {backend, reason} of each that did not."""
    ray = import_ray()
    section = _section(cfg)
    opts = actor_options(section)
    actor_class = ray.remote(PartyWorker)
    wcfg = worker_config(cfg)
    actors = [actor_class.options(**opts).remote(wcfg, i) for i in range(section.workers)]
    infos = [a.info.remote() for a in actors]
    _, pending = ray.wait(infos, num_returns=len(infos), timeout=section.start_timeout_s)
    waiting = set(pending)
    started: list[tuple[Any, dict[str, Any]]] = []
    events: list[dict[str, str]] = []
    for i, (actor, ref) in enumerate(zip(actors, infos)):
        where = f"ray worker {i}"
        if ref in waiting:
            ray.kill(actor, no_restart=True)
            asked = {k: v for k, v in opts.items() if k in ("num_cpus", "num_gpus", "memory",
                                                            "resources")}
            events.append({"backend": where, "reason": (
                f"not started within {section.start_timeout_s:g} s (ray.start_timeout_s): it asks "
                f"for {asked}; the cluster at {conn.gcs_address} has "
                f"{_free(ray)} free")})
            continue
        try:
            info = ray.get(ref)
        except ray.exceptions.RayError as exc:
            events.append({"backend": where, "reason": f"its backend chain did not start: "
                                                       f"{_first_line(exc)}"})
            continue
        if "error" in info:
            ray.kill(actor, no_restart=True)
            events.append({"backend": where, "reason": f"its backend chain did not start on node "
                                                       f"{str(info['node_id'])[:8]}: {info['error']}"})
            continue
        started.append((actor, info))
    return started, events


def _check_key_stays_local_or_safe(section: RaySection, conn: Connection) -> None:
    """The load-time rule (schema: ``private_key_ops: workers`` off the loopback needs ``tls`` or
    ``insecure``) once more on the cluster actually joined: a local instance that Ray could not
    keep on the loopback (imported earlier with another setting), or a cluster the embedding
    program joined, listens on the network."""
    if section.private_key_ops != "workers" or section.tls is not None or section.insecure:
        return
    if not is_loopback_address(conn.gcs_address):
        raise ConfigError(
            f"ray.private_key_ops: workers would ship the private key (p and q) to workers of the "
            f"Ray cluster at {conn.gcs_address}, which is off the loopback, without TLS; "
            "configure ray.tls, keep private_key_ops: local, or, knowingly, ray.insecure: true")


def _free(ray: Any) -> dict[str, float]:
    try:
        return {k: v for k, v in ray.available_resources().items()
                if not k.startswith("node:") and k != "object_store_memory"}
    except Exception:  # noqa: BLE001 - for the message only
        return {}


def ray_backend(cfg: PartyConfig) -> RayBackend:
    """The party's backend on its Ray cluster (see :mod:`unifl.scheduler.ray`).

    Raises:
        BackendUnavailable: Ray is not installed, or no worker started (every reason given).
        ConfigError: no cluster at ``ray.address``, or this process drives another cluster.
    """
    section = _section(cfg)
    warning = section.insecure_warning()
    if warning:
        log.warning("party %s: %s", cfg.party, warning)
    if section.tls is not None:
        use_tls(section)
    conn = connect(section.address, section.start_timeout_s)
    try:
        _check_key_stays_local_or_safe(section, conn)
        started, events = start_workers(cfg, conn)
        where = section.address or f"a local Ray instance ({conn.gcs_address})"
        if not started:
            reasons = "; ".join(f"{e['backend']}: {e['reason']}" for e in events)
            raise BackendUnavailable(f"executor ray at {where}: none of the {section.workers} "
                                     f"workers could start ({reasons})")
        if len(started) < section.workers:
            log.warning("party %s: %d of %d Ray workers started at %s; going on with them",
                        cfg.party, len(started), section.workers, where)
        local = local_chain(local_config(cfg))
    except BaseException:
        release(conn)
        raise
    shipper = Shipper()
    private_ok = section.private_key_ops == "workers"
    proxies = [RayWorkerProxy(actor, info, shipper, private_ok, section.piece_timeout_s)
               for actor, info in started]
    be = RayBackend(conn, proxies, shipper, local, section.private_key_ops, section.min_rows,
                    frozenset(section.local_ops))
    chosen = sorted({str(info["backend"]) for _, info in started})
    local_events = local.selection.fallback_events if local.selection is not None else []
    be.selection = Selection(
        requested=cfg.backend, chosen=chosen[0] if len(chosen) == 1 else "+".join(chosen),
        executor="ray", fallback_events=events + list(local_events), ranking=None,
        devices=be.devices, describe=be.describe(), runtime_fallbacks=be.runtime_fallbacks,
        ray={"address": section.address, "gcs_address": conn.gcs_address,
             "workers": section.workers, "started": len(started), "live": len(started),
             "lost": [], "private_key_ops": section.private_key_ops,
             "nodes": sorted({str(info["node_id"]) for _, info in started}),
             "local": local.describe()})
    for _, info in started:
        for ev in info.get("fallback_events", []):
            be.selection.fallback_events.append(
                {"backend": f"{ev['backend']} (ray worker {info['index']})",
                 "reason": ev["reason"]})
    return be

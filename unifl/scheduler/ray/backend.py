"""The party's backend on its Ray cluster: batches split over the worker actors, the private-key
ops and small batches in the party's own process, and the process's chain as the last resort.

Layout::

    RayBackend
      ├─ MultiDeviceBackend(failover="members")   the workers, one member each (counted per worker)
      │    └─ FallbackChain → the party's own chain (when no worker is left)
      └─ the party's own chain (local_chain: backend + fallback of the YAML, in this process)
         for SECRET_OPS (unless ray.private_key_ops is "workers") and batches under ray.min_rows

Splitting is the multi-device backend's, by the same rules as for local devices
(:data:`unifl.scheduler.multi.SPLITS`: rows; multi-exponentiations over K or over N with partial
products; grouped products), so the result is bit-identical to one device.  A worker that dies
mid-batch has its piece re-run on a surviving worker (:class:`RayWorkerLost` is a device failure;
pieces that completed are kept, so nothing is computed twice) and is not used again; the party goes
on with the rest and says so (a warning, ``selection.ray["lost"]``, the report's
``failed_calls`` / ``fell_back_to``); with none left, the batch and every later one run on the
party's own chain.
"""

from __future__ import annotations

import logging
from typing import Any

from ...core.backend import OPS
from ...core.contract import SECRET_OPS, define_ops
from ...core.keys import PaillierPrivateMaterial
from ...core.montgomery import MontContext
from ..counting import CountingBackend
from ..executor import ThreadExecutor
from ..fallback import ChainMember, FallbackChain, batch_elements, run_op
from ..multi import MultiDeviceBackend
from .cluster import Connection, release
from .proxy import RayWorkerProxy
from .shipping import Shipper

log = logging.getLogger("unifl.scheduler.ray")


class ProcessLink(ChainMember):
    """The party's own chain as the link behind its workers in their fallback chain.  It only
    forwards: the chain keeps its own fallback, counters and report (reported by
    :class:`RayBackend` itself, so they are not listed twice)."""

    native_ops = frozenset(OPS)      # run natively or composed there, by run_op

    def __init__(self, local: ChainMember) -> None:
        super().__init__()
        self.local = local
        self.name = local.name               # type: ignore[misc]
        self.device = "the party's process"

    def _run(self, op: str, args: tuple) -> Any:
        return run_op(self.local, op, args)

    def own_report(self) -> list[dict]:
        return []

    def reset_counters(self) -> None:
        pass

    def close(self) -> None:
        pass


class RayBackend(ChainMember):
    """Batches of one party on the worker actors of its Ray cluster (see the module doc)."""

    name = "ray"
    native_ops = frozenset(OPS)

    def __init__(self, conn: Connection, proxies: list[RayWorkerProxy], shipper: Shipper,
                 local: ChainMember, private_key_ops: str = "local", min_rows: int = 32,
                 local_ops: frozenset[str] = frozenset()) -> None:
        super().__init__()
        if not proxies:
            raise ValueError("RayBackend needs at least one worker")
        self.conn = conn
        self.proxies = list(proxies)
        self.shipper = shipper
        self.local = local
        self.private_key_ops = private_key_ops
        self.min_rows = max(1, int(min_rows))
        self.local_ops = frozenset(local_ops)
        members = [CountingBackend(p, device=p.device) for p in self.proxies]
        self.multi = MultiDeviceBackend(members, ThreadExecutor(len(members)),
                                        min_rows=self.min_rows, failover="members")
        self._spill = FallbackChain(self.multi, ["the party's process"],
                                    lambda _name: ProcessLink(local))
        #: p, q, p², q² of the private keys seen: a public op on one of them stays here too
        self._secret_moduli: set[int] = set()
        self._closed = False

    # ---- description
    @property
    def devices(self) -> list[str]:
        return [p.device for p in self.proxies]

    @property
    def runtime_fallbacks(self) -> list[dict]:
        """The re-runs after a worker was lost (a live list: it grows as the job runs)."""
        return self._spill.events

    def describe(self) -> str:
        kinds = sorted({str(p.info["describe"]) for p in self.proxies})
        return (f"ray cluster {self.conn.gcs_address}: {len(self.proxies)} workers "
                f"({', '.join(kinds)})")

    def live_workers(self) -> list[RayWorkerProxy]:
        """The workers still in use (a lost one is never used again in the job)."""
        return [self.proxies[i] for i in self.multi.live_members()]

    def lost_workers(self) -> list[dict[str, str]]:
        """{worker, reason} of each worker lost so far."""
        live = set(self.multi.live_members())
        reasons = {ev["from_device"]: ev["reason"] for ev in self._spill.events}
        return [{"worker": p.device, "reason": reasons.get(p.device, "")}
                for i, p in enumerate(self.proxies) if i not in live]

    # ---- running
    def stays_local(self, op: str, args: tuple) -> bool:
        """True when ``op`` runs in the party's process: an op on the party's private key (unless
        ``private_key_ops`` is "workers"), a public op on one of that key's secret moduli, an op
        of ``local_ops`` (cheaper to compute than to ship), or a batch too small to be worth a
        round trip to a worker."""
        if self.private_key_ops == "local":
            if op in SECRET_OPS:
                self._remember_secrets(op, args)
                return True
            ctx = args[0] if args else None
            if isinstance(ctx, MontContext) and ctx.m in self._secret_moduli:
                return True
        if op in self.local_ops:
            return True
        try:
            return batch_elements(op, args) < self.min_rows
        except Exception:  # noqa: BLE001 - malformed: the op itself will say what is wrong
            return True

    def _remember_secrets(self, op: str, args: tuple) -> None:
        for a in args:
            if isinstance(a, PaillierPrivateMaterial):
                self._secret_moduli.update((a.p, a.q, a.psquare, a.qsquare))
        if op == "mod_exp_secret" and isinstance(args[0], MontContext):
            self._secret_moduli.add(args[0].m)

    def _run(self, op: str, args: tuple) -> Any:
        if self.stays_local(op, args):
            return run_op(self.local, op, args)
        with self.shipper.call():
            return getattr(self.multi, f"op_{op}")(*args)

    # ---- reporting
    def own_report(self) -> list[dict]:
        """One row per op and worker (device: 'ray worker i · node … · ip · backend'), then the
        rows of the party's own chain; a lost worker's row says failed_calls and fell_back_to."""
        rows = self.multi.own_report() + self.local.report()
        return self._spill.annotate(rows)

    def report(self) -> list[dict]:
        ray_sel = self.selection.ray if self.selection is not None else None
        if ray_sel is not None:
            ray_sel["live"] = len(self.live_workers())
            ray_sel["lost"] = self.lost_workers()
        return self.own_report()

    def fallback_events(self) -> list[dict]:
        return list(self._spill.events) + self.local.fallback_events()

    def worker_reports(self) -> dict[str, list[dict]]:
        """Each live worker's own record (its chain, on its node), keyed by the worker's label."""
        return {p.device: p.worker_report() for p in self.live_workers()}

    def reset_counters(self) -> None:
        self.multi.reset_counters()
        self.local.reset_counters()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.multi.close()
            self.local.close()
        finally:
            release(self.conn)


define_ops(ProcessLink, "_run", "On the party's own chain, in its process.")
define_ops(RayBackend, "_run", "In the party's process or split over its Ray workers "
           "(see RayBackend).")

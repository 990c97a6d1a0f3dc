"""One Ray worker actor seen from the party's process: a member backend of its
:class:`~unifl.scheduler.multi.MultiDeviceBackend`, whose every op is one remote call.

It declares every op of the contract natively: the worker runs what its own chain lacks composed
on its side (a round trip per op, not per MontMult).  Errors come back as what they are:

* an error raised in the worker's op (an OperandError, a caller's ValueError, the worker chain's
  BackendUnavailable once every backend of it failed) is re-raised here unchanged, so the
  scheduler classifies it as it would a local one;
* the actor or its node gone (killed, crashed, out of memory, the node lost) is
  :class:`RayWorkerLost`, a :class:`~unifl.core.errors.DeviceError`: the piece is re-run on another
  worker and this one is not used again.
"""

from __future__ import annotations

from typing import Any


from ...core.backend import OPS, Backend, ProbeResult
from ...core.contract import define_ops
from ...core.errors import DeviceError
from .cluster import import_ray
from .shipping import Shipper


class RayWorkerLost(DeviceError):
    """A Ray worker actor (or the node it ran on) is gone; what it was computing is lost."""


def worker_label(info: dict[str, Any]) -> str:
    """'ray worker 1 · node 3f2a9c1e · 10.0.0.7 · native' -- the device label of the report."""
    return (f"ray worker {info['index']} · node {str(info['node_id'])[:8]} · {info['node_ip']} · "
            f"{info['backend']}")


class RayWorkerProxy(Backend):
    """Worker actor ``actor`` (described by its ``info()``) as a backend of this process."""

    name = "ray-worker"
    native_ops = frozenset(OPS)

    def __init__(self, actor: Any, info: dict[str, Any], shipper: Shipper,
                 private_ok: bool, timeout: float | None = None) -> None:
        super().__init__()
        self.actor = actor
        self.info = info
        self.name = str(info["backend"])     # type: ignore[misc]  # what the worker runs
        self.device = worker_label(info)
        self.probe_result = ProbeResult(True, "a Ray worker actor", devices=[self.device],
                                        stand_in=info.get("stand_in"))
        self._shipper = shipper
        self._private_ok = private_ok
        self._timeout = timeout
        self.bytes_received = 0      # result bytes fetched from this worker

    def describe(self) -> str:
        return f"{self.info['describe']} on {self.device}"

    def _call(self, op: str, args: tuple) -> Any:
        ray = import_ray()
        shipped = tuple(self._shipper.ship(a, self._private_ok) for a in args)
        try:
            out = ray.get(self.actor.run.remote(op, shipped), timeout=self._timeout)
            self.bytes_received += int(out.nbytes)
            return out
        except ray.exceptions.GetTimeoutError:
            # a worker that stops answering (a hung device) is as good as gone: never used again
            self.close()
            raise RayWorkerLost(f"{self.device} did not answer within {self._timeout:g} s "
                                "(ray.piece_timeout_s); stopped") from None
        except ray.exceptions.RayTaskError as exc:
            cause = exc.cause
            if isinstance(cause, Exception) and not isinstance(cause, ray.exceptions.RayError):
                raise cause from None       # the op's own error, as if it ran here
            raise RayWorkerLost(f"{self.device}: {type(exc).__name__}: {exc}") from exc
        except ray.exceptions.RayError as exc:
            # the actor died, was killed or ran out of memory, its node or its result was lost:
            # whatever Ray says went wrong, this worker cannot be trusted with the piece again
            raise RayWorkerLost(f"{self.device} is gone ({type(exc).__name__}: "
                                f"{str(exc).splitlines()[0] if str(exc) else ''})") from exc

    def worker_report(self) -> list[dict]:
        """The worker's own per-op record (empty when the worker is gone)."""
        ray = import_ray()
        try:
            return list(ray.get(self.actor.report.remote(), timeout=30))
        except Exception:  # noqa: BLE001 - a lost worker has no report; the driver's has its row
            return []

    def close(self) -> None:
        ray = import_ray()
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


define_ops(RayWorkerProxy, "_call", "Run by the worker actor.")

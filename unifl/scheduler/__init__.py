"""The scheduler: a party's config -> the Backend it computes on (fallback chain, ``auto`` ranking,
batches split across several devices least-loaded first, every op counted per backend and device).

``backend_from_config(cfg)`` is the entry point; its result has the op_* interface of any Backend,
``.report()`` (op, backend, device, calls, elements, seconds) and ``.selection`` (a typed
:class:`Selection`: what was asked, what ran, and why).  The wrappers' op methods are generated from the op contract
(:data:`unifl.core.contract.OPS`): :class:`CountingBackend` counts each, :class:`MultiDeviceBackend`
splits each by its rule of :data:`~unifl.scheduler.multi.SPLITS` -- the one place a batch is split
across devices.  A backend failing mid-run with a device failure (above all
:class:`~unifl.core.errors.DeviceError`) hands its batch to the next backend of the chain
(:mod:`unifl.scheduler.fallback`).  ``executor: ray`` spreads a party's batches over the worker
actors of its own Ray cluster (:mod:`unifl.scheduler.ray`).  The QAT two-stage pipeline lives in
``unifl.backends.qat.pipeline``.
"""

from .counting import CountingBackend
from .executor import Executor, SerialExecutor, ThreadExecutor, make_executor
from .fallback import DEVICE_FAILURES, FallbackChain, is_device_failure
from .multi import SPLITS, MultiDeviceBackend
from .assemble import backend_from_config
from .select import local_chain, self_test, start
from .selection import Selection

__all__ = ["backend_from_config", "local_chain", "CountingBackend", "MultiDeviceBackend", "SPLITS", "Executor",
           "SerialExecutor", "ThreadExecutor", "make_executor", "self_test", "start",
           "FallbackChain", "is_device_failure", "DEVICE_FAILURES", "Selection"]

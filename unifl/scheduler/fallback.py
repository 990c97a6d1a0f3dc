"""A backend that fails in the middle of a run: the failed batch (or, for a batch split across
devices, exactly the failed pieces) is re-run on the next backend of the party's fallback chain.

What counts as a device failure (:func:`is_device_failure`) -- the backend broke, the inputs are fine:

* :class:`~unifl.core.errors.DeviceError`, THE device failure type: our backends raise it (or a
  subclass naming the device and the failing driver call) for a failed launch, copy or request, a
  lost context, a closed session;
* :class:`~unifl.core.errors.BackendUnavailable` raised mid-run (the backend cannot do this here
  after all: a kernel size missing from a prebuilt FPGA binary, a driver session that cannot be
  reopened);
* for third-party backends and driver exceptions that escape a backend untranslated: ``OSError``
  (and its subclasses: ``TimeoutError`` of a hung card, a ``ctypes`` call into a driver library
  that failed), ``RuntimeError`` (the CUDA runtime's ``CUDA error ...``, a C++ extension's
  ``std::runtime_error``), ``MemoryError`` (a device out of memory), ``pyopencl.Error`` when
  pyopencl is loaded, and whatever a backend lists in its optional ``device_errors`` class
  attribute (a tuple of exception classes).

Never a device failure, always raised to the caller unchanged and never re-run: every other typed
UniFL error (OperandError, InvalidCiphertextError, KeyMismatchError, EncodingOverflowError,
TransportError ...), ``ValueError``, ``TypeError``, ``ArithmeticError``, ``LookupError``,
``AssertionError``, and the programming errors ``NotImplementedError`` and ``RecursionError`` even
though they are RuntimeErrors: re-running a wrong input or a bug elsewhere only hides it.  Nor is
:class:`~unifl.core.errors.DeviceDataLost`: a device fault, but the inputs a re-run would need are
gone with it (see below).

Policy: a backend (or one device of a multi-device backend) that failed is retired for the rest
of the job, not retried after some batches.  A device that broke mid-batch (lost context, reset
card, dead QAT instance) usually fails again, every retry would cost a failed batch, and a job
whose device use depends on timing would not report the same way twice.

Exactly once: a failed call returns nothing, so its elements are computed again from the very same
inputs on the fallback, once; the pieces of a split batch that completed keep their results and are
not recomputed.  Every backend gives results bit-identical to ``cpu`` on the same inputs, so the
re-run gives exactly what the failed backend would have returned.  The next backend is started
lazily, at the first failure: an honest run starts and pays for nothing more than before.

A re-run needs nothing but the op's own arguments (:func:`run_op`): the fused Paillier ops take the
plain key records of :mod:`unifl.core.keys`, never key objects, so the next backend runs
``op_<name>(*args)`` when it has the op natively, and otherwise the generic composition of the op
(:func:`composition`: the function of the op's name in the layer that owns it).

Inputs that are device-resident results of the failed backend (``DeviceBatch``) are read back
through the NumPy array protocol before the re-run.  That works as long as the device memory is
still readable (the failed call's error was not a lost context); when it is not, the values exist
nowhere else, and :class:`~unifl.core.errors.DeviceDataLost` says so (the job must go back to its last
checkpoint).  Batches that were already fetched are read from their host copy.
"""

from __future__ import annotations

import logging
import sys
import threading
from typing import Any, Callable

import numpy as np

from .. import base_op, mod_op
from ..core.backend import Backend
from ..core.contract import Composition, composition_table
from ..core.errors import BackendUnavailable, DeviceDataLost, DeviceError, UniflError
from ..core.limbs import DeviceBatch
from ..phe_sdk import paillier
from .selection import Selection

log = logging.getLogger("unifl.scheduler")

#: the exception classes that mean "the device broke", see the module doc: DeviceError is what our
#: own backends raise; the others are recognised for third-party backends and untranslated drivers
DEVICE_FAILURES: tuple[type[BaseException], ...] = (DeviceError, BackendUnavailable, OSError,
                                                    RuntimeError, MemoryError)
#: caller and programming errors: never re-run, even when they also derive from the above
NOT_DEVICE_FAILURES: tuple[type[BaseException], ...] = (ValueError, TypeError, ArithmeticError,
                                                        LookupError, AssertionError,
                                                        NotImplementedError, RecursionError)

#: the generic composition of every op of the contract, from the layers that own them (a typed
#: registry, checked at import: each op composed exactly once, with the contract's parameters)
COMPOSITIONS: dict[str, Composition] = composition_table(
    ("unifl.base_op", base_op.COMPOSITIONS), ("unifl.mod_op", mod_op.COMPOSITIONS),
    ("unifl.phe_sdk.paillier", paillier.COMPOSITIONS))


def _driver_errors() -> tuple[type[BaseException], ...]:
    """Exception roots of device runtimes whose errors derive from neither OSError nor RuntimeError;
    only the ones already imported (a backend using them has imported them)."""
    out: list[type[BaseException]] = []
    cl = sys.modules.get("pyopencl")
    if cl is not None and isinstance(getattr(cl, "Error", None), type):
        out.append(cl.Error)
    return tuple(out)


def is_device_failure(exc: BaseException, backend: Any = None) -> bool:
    """True when ``exc``, raised by an op of ``backend``, means the backend failed (re-run the batch
    elsewhere); False for a caller error, a bug, or lost device data (raise it unchanged).  See the
    module doc."""
    if isinstance(exc, DeviceDataLost):
        return False
    if isinstance(exc, (DeviceError, BackendUnavailable)):
        return True
    if isinstance(exc, UniflError) or isinstance(exc, NOT_DEVICE_FAILURES):
        return False
    declared = tuple(getattr(backend, "device_errors", ()) or ())
    return isinstance(exc, DEVICE_FAILURES + _driver_errors() + declared)


def batch_elements(op: str, args: tuple) -> int:
    """How many elements one call of ``op`` processes: the rows of its batch (the argument after the
    context or key record); for a multi-exponentiation the K·N base-exponent pairs."""
    if op == "mont_multi_exp":
        exps = args[2]
        return int(exps.shape[0]) * int(exps.shape[1])
    return int(np.shape(args[1])[0])


def elements_of(op: str, args: tuple) -> int:
    """:func:`batch_elements` for a report, 0 when the arguments are too malformed to count."""
    try:
        return batch_elements(op, args)
    except Exception:  # noqa: BLE001 - a count for the report only; never mask the real error
        return 0


def composition(op: str) -> Composition:
    """The generic composition of ``op``: the function ``<op>(backend, *op_args)`` of the layer that
    owns it (``base_op.mont_mul``, ``mod_op.mod_exp``, ``phe_sdk.paillier.paillier_decrypt`` ...,
    :data:`COMPOSITIONS`), called with the op's own arguments -- contexts, batches and the key
    records of :mod:`unifl.core.keys`, never key objects.  Each composes the op from the layer
    below on the backend it is given, or runs it natively there when it can.

    Raises:
        BackendUnavailable: ``op`` is not an op of the contract.
    """
    fn = COMPOSITIONS.get(op)
    if fn is None:
        raise BackendUnavailable(f"{op!r} is not an op of the contract (unifl.core.contract.OPS)")
    return fn


def run_op(backend: Backend, op: str, args: tuple) -> Any:
    """``op`` on ``backend``: its native ``op_<op>`` when it has one, else the generic composition
    of the layer that owns the op, on that same backend (what the layers would have done had the
    backend been the party's from the start).  Bit-identical either way."""
    if backend.implements(op):
        return getattr(backend, f"op_{op}")(*args)
    try:
        compose = composition(op)
    except BackendUnavailable as exc:
        raise BackendUnavailable(f"op {op!r} cannot run on {backend.name!r}: not native there, "
                                 f"and {exc}") from None
    return compose(backend, *args)


def readable_args(args: tuple, target: Backend, source: str) -> tuple:
    """``args`` for a re-run on ``target``: device batches of the failed backend read back (or kept
    when ``target`` takes them in place); DeviceDataLost when the failed device cannot give them."""
    out = []
    for x in args:
        if isinstance(x, DeviceBatch):
            x = own_batch_of(target, x, source)
        out.append(x)
    return tuple(out)


def own_batch_of(target: Backend, x: Any, source: str) -> Any:
    """``target.own_batch(x)``; a device batch that cannot be read back any more (its device is the
    one that failed) raises DeviceDataLost instead of the driver's error."""
    if not isinstance(x, DeviceBatch) or x.fetched:
        return target.own_batch(x)
    try:
        return target.own_batch(x)
    except Exception as exc:  # noqa: BLE001 - classified just below
        if not is_device_failure(exc):
            raise
        raise DeviceDataLost(
            f"a {x.shape[0]}-row batch held in the memory of the failed backend {source} cannot be "
            f"read back ({type(exc).__name__}: {exc}); its values exist nowhere else, so the job "
            "must resume from its last checkpoint") from exc


def _join(seen: str | None, item: str) -> str:
    """``seen`` + "; " + ``item`` unless ``item`` is already listed."""
    if not seen:
        return item
    return seen if item in seen.split("; ") else f"{seen}; {item}"


def label(backend: Backend) -> tuple[str, str]:
    """(backend name, device label) of a chain link or multi-device member, as the report shows it."""
    dev = getattr(backend, "device", None)
    if dev is None:
        dev = ", ".join(backend.devices) or backend.name
    return backend.name, dev


class FallbackChain:
    """The party's backend chain at run time: link 0 is the backend that started (a
    CountingBackend or MultiDeviceBackend), the later links are started lazily, in chain order, by
    ``starter(name)`` (a CountingBackend; BackendUnavailable when it cannot start, then the next
    name is tried and the reason lands in ``start_events``).

    ``events`` records every re-run: op, from/from_device, to/to_device, reason, elements, scope
    ("batch" or "piece").  Links that failed as a whole are retired for the rest of the job."""

    def __init__(self, primary: ChainMember, names: list[str],
                 starter: Callable[[str], ChainMember],
                 start_events: list[dict] | None = None) -> None:
        self.links: list[ChainMember] = [primary]
        self._pending = list(names)
        self._starter = starter
        self._retired: set[int] = set()
        self._lock = threading.RLock()
        self.events: list[dict] = []
        self.start_events = start_events if start_events is not None else []
        primary.chain, primary.chain_pos = self, 0

    # ---- links
    def retired(self, pos: int) -> bool:
        return pos in self._retired

    def next_after(self, pos: int) -> tuple[int, ChainMember]:
        """The first link after ``pos`` that is not retired, started now if need be."""
        with self._lock:
            for j in range(pos + 1, len(self.links)):
                if j not in self._retired:
                    return j, self.links[j]
            while self._pending:
                name = self._pending.pop(0)
                try:
                    link = self._starter(name)
                except BackendUnavailable as exc:
                    self.start_events.append({"backend": name, "reason": str(exc)})
                    log.warning("fallback backend %r not used: %s", name, exc)
                    continue
                link.chain, link.chain_pos = self, len(self.links)
                self.links.append(link)
                return len(self.links) - 1, link
            raise BackendUnavailable("no backend of the fallback chain is left to run on")

    def current_after(self, pos: int) -> ChainMember:
        """What a retired link ``pos`` hands its work to."""
        return self.next_after(pos)[1]

    def retire(self, pos: int) -> None:
        with self._lock:
            self._retired.add(pos)

    # ---- running
    def rerun(self, pos: int, op: str, args: tuple, exc: BaseException, failed: Backend,
              scope: str = "batch") -> Any:
        """Re-run one failed call (``scope`` "batch": link ``pos`` failed as a whole and is retired;
        "piece": one device of a split batch failed, the caller retires it) on the next link."""
        src_name, src_dev = label(failed)
        if scope == "batch":
            self.retire(pos)
        try:
            _, target = self.next_after(pos)
        except BackendUnavailable as none_left:
            raise BackendUnavailable(
                f"op {op!r} failed on {src_name} ({src_dev}): {type(exc).__name__}: {exc}; "
                f"{none_left}") from exc
        readable = readable_args(args, target, f"{src_name} ({src_dev})")
        self.note(op, args, exc, failed, target, scope,
                  "; that backend is not used again in this job" if scope == "batch" else
                  "; that device is not used again in this job")
        return run_op(target, op, readable)

    def note(self, op: str, args: tuple, exc: BaseException, failed: Backend, target: Backend,
             scope: str = "piece", says: str = "") -> None:
        """Record (``events``) and log the re-run of a failed call on ``target``: by the chain, or
        by the caller itself (a surviving device of a split batch), shown alike in the report."""
        src_name, src_dev = label(failed)
        dst_name, dst_dev = label(target)
        event = {"op": op, "from": src_name, "from_device": src_dev, "to": dst_name,
                 "to_device": dst_dev, "reason": f"{type(exc).__name__}: {exc}",
                 "elements": elements_of(op, args), "scope": scope}
        with self._lock:
            self.events.append(event)
        log.warning("op %s failed on %s (%s) with %s; re-running its %d elements on %s (%s)%s",
                    op, src_name, src_dev, event["reason"], event["elements"], dst_name, dst_dev,
                    says)

    def run_on_current(self, pos: int, op: str, args: tuple) -> Any:
        """A call that reached retired link ``pos``: it runs on the link that replaced it."""
        target = self.current_after(pos)
        name, dev = label(self.links[pos])
        return run_op(target, op, readable_args(args, target, f"{name} ({dev})"))

    # ---- reporting
    def annotate(self, rows: list[dict]) -> list[dict]:
        """Counter rows with the failures of their backend/device/op added (failed_calls,
        failed_elements, fell_back_to, reason; a row with zero calls when nothing ever succeeded
        there), and, on every row of a backend that took work over, ``fallback_from``."""
        with self._lock:
            events = list(self.events)
        if not events:
            return rows
        out = [dict(r) for r in rows]
        index = {(r["backend"], r["device"], r["op"]): r for r in out}
        for ev in events:
            key = (ev["from"], ev["from_device"], ev["op"])
            row = index.get(key)
            if row is None:
                row = {"op": ev["op"], "backend": ev["from"], "device": ev["from_device"],
                       "calls": 0, "elements": 0, "seconds": 0.0, "stand_in": None}
                index[key] = row
                out.append(row)
            row["failed_calls"] = row.get("failed_calls", 0) + 1
            row["failed_elements"] = row.get("failed_elements", 0) + ev["elements"]
            row["fell_back_to"] = _join(row.get("fell_back_to"), f"{ev['to']} ({ev['to_device']})")
            row["reason"] = ev["reason"]
        replaced: dict[tuple[str, str], str | None] = {}
        for ev in events:
            to = (ev["to"], ev["to_device"])
            replaced[to] = _join(replaced.get(to), f"{ev['from']} ({ev['from_device']})")
        for row in out:
            who = replaced.get((row["backend"], row["device"]))
            if who:
                row["fallback_from"] = who
        return out

    def fallback_rows(self) -> list[dict]:
        """The counter rows of the links started after a failure."""
        with self._lock:
            links = self.links[1:]
        return [row for link in links for row in link.own_report()]

    def report(self, primary_rows: list[dict]) -> list[dict]:
        return self.annotate(primary_rows + self.fallback_rows())

    def close_links(self) -> None:
        """Close the links started after a failure (the primary closes itself)."""
        with self._lock:
            links = self.links[1:]
        for link in links:
            close = getattr(link, "close", None)
            if callable(close):
                close()


class ChainMember(Backend):
    """What a backend placed in a :class:`FallbackChain` (a CountingBackend, a MultiDeviceBackend)
    shares: its place in the chain, the backend that replaced it once it failed, and the chain's
    part of ``report``/``fallback_events``/``reset_counters``/``close`` -- done by link 0 only, so
    the links started after a failure are reported and closed once."""

    #: the party's fallback chain and this backend's place in it (set by FallbackChain)
    chain: FallbackChain | None = None
    chain_pos: int = 0
    #: what was asked, what ran and why: set by ``backend_from_config`` on the backend it
    #: returns, None on every other
    selection: Selection | None = None

    def _replacement(self) -> Backend | None:
        """The backend that runs this one's work since it failed; None while it is healthy."""
        chain = self.chain
        if chain is None or not chain.retired(self.chain_pos):
            return None
        return chain.current_after(self.chain_pos)

    def own_report(self) -> list[dict]:
        """This link's own counter rows (no fallback links, no failure annotations)."""
        raise NotImplementedError

    def reset_counters(self) -> None:
        """Zero this link's counters (and, at the head of a chain, the later links')."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what this link holds (and, at the head of a chain, the later links)."""
        raise NotImplementedError

    def report(self) -> list[dict]:
        """One row per op that ran: op, backend, device, calls, elements, seconds, stand_in.  After
        a failure mid-run: the failed row says failed_calls, failed_elements, fell_back_to and
        reason, and the rows of the backends that took over follow, with ``fallback_from``."""
        rows = self.own_report()
        chain = self.chain
        return chain.report(rows) if chain is not None and self.chain_pos == 0 else rows

    def pool_report(self) -> list[dict]:
        """One row per pool of work computed ahead held by this backend (Paillier obfuscators,
        :class:`unifl.core.state.RowPool`): label, capacity, ready, fills, filled, fill_seconds,
        hits, misses, dropped, with this backend's name."""
        return [{"backend": self.name, **pool.stats().as_row()} for pool in self.state.pools()]

    def dispatch_report(self) -> list[dict]:
        """Where each op's calls ran and why, with size-aware dispatch
        (:class:`~unifl.scheduler.dispatch.DispatchBackend`); empty without it."""
        return []

    def fallback_events(self) -> list[dict]:
        """Every re-run after a failure: op, from/from_device, to/to_device, reason, elements,
        scope; empty for an honest run."""
        return list(self.chain.events) if self.chain is not None else []

    def _reset_chain_counters(self) -> None:
        chain = self.chain
        if chain is not None and self.chain_pos == 0:
            for link in chain.links[1:]:
                link.reset_counters()

    def _close_chain(self) -> None:
        chain = self.chain
        if chain is not None and self.chain_pos == 0:
            chain.close_links()

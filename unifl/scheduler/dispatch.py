"""Size-aware dispatch: each call runs where it is fastest for its size -- the party's accelerator,
its CPU backend (native, else cpu), or both at once.

An accelerator pays a fixed latency per call (a kernel launch, transfers, a driver round trip); a
small batch can cost less on the CPU than that latency alone.  Each backend carries a cost model
per op: a line t(u) = latency + per_unit·u in the call's work units u (its rows; K·N base-exponent
pairs for a multi-exponentiation), one line per (op, limb count of the modulus, exponent-length
class) -- :class:`CostModel`.  For a call of u units the dispatcher predicts t_acc(u) and t_cpu(u)
and runs it

* on the accelerator when (1 + margin)·t_acc(u) <= t_cpu(u) and t_cpu(u) − t_acc(u) >= min_gain;
* split between both (rows cut so that both finish together, the multi-device machinery of
  :mod:`unifl.scheduler.multi`) when that is predicted faster than either alone, by the margin
  and by min_gain;
* on the CPU backend otherwise.

The absolute floor (``min_gain``, default 1 ms) keeps sub-millisecond calls off the accelerator:
there a launch's jitter, a card shared with the other party or the party's own background work,
and a split's second thread cost more than the model's gain (on an H200 with both parties on one
card, most calls counted slower than the CPU were MontMults predicted at a tenth of a
millisecond, and splits predicted to win by under one).

**No call on the accelerator is slower than the CPU alone would have been -- up to model error.**
How that holds: a line is fitted through the first and the last of a geometric series of measured
sizes (1, 4, 16, ...), measured until the call is out of its latency-bound region.  An
accelerator's time is flat (latency-bound) then linear in the batch, a convex curve, so its chord
lies *above* it: between the measured sizes the model never under-predicts the accelerator, and
the CPU's time is linear.  The accelerator is picked only when predicted faster by the margin
(default 20 %).  Every call is measured afterwards: the model of the backend that ran it is
corrected online (an exponentially weighted ratio of measured to predicted time, per line; a
split's whole time corrects that line's splits too), and a call on the accelerator that took
longer than the CPU's prediction is counted in the report (``slower_than_cpu``), so a violation
is visible, never silent.  Outside the measured range (beyond the largest calibration size) the
lines extrapolate; there the accelerator is the faster by construction of the measurement's stop
rule.  The corrections outlive the job: when the party's backend closes they are written to the
cache beside the lines (a pair's split corrections keyed by both backends), and a ``calibrated``
job starts from them -- otherwise each line's first split is made on the chord's prediction
alone, and on an H200 about half the calls counted slower than the CPU were such first splits.

Where models come from (the party YAML's ``dispatch.mode``):

* ``auto``: measured at start for the party's key size (the MontMult, short-exponent ModExp and
  grouped-product lines mod n²) and written to the cache; a line that is met later for the first
  time (another op, another modulus, the fused Paillier ops, which need the party's key) is
  measured then, on the call's own arguments tiled to the calibration sizes;
* ``calibrated``: loaded from the cache, with the corrections earlier jobs left (a JSON file in
  the private per-user cache folder, :mod:`unifl.scheduler.cache`, keyed by backend, device,
  options, machine and code version; a line is keyed by op, limb count and exponent class, so by
  key size); what is missing is measured as in ``auto`` and written back;
* ``pinned``: no model: each op runs where ``dispatch.pin`` says (``accelerator`` or ``cpu``, by
  op name or ``default``), and no guarantee is claimed.

The report (:meth:`DispatchBackend.dispatch_report`) says, per op, where its calls ran and why:
route, reason, calls, elements, measured seconds, predicted seconds of the route and of the CPU.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import platform
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Sequence

import numpy as np

from ..core.backend import OPS, Backend
from ..core.contract import ROUTE_OPS
from ..core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ..core.exponents import exp_bits
from ..core.limbs import DeviceBatch
from ..core.montgomery import MontContext
from . import cache
from .executor import ThreadExecutor
from .fallback import batch_elements, is_device_failure, run_op
from .multi import SPLITS, MultiDeviceBackend, MultiExp, Piece, ProdGroups, Rows, _PieceFailed

log = logging.getLogger("unifl.scheduler")

__all__ = ["CostLine", "CostModel", "DispatchPolicy", "Decision", "DispatchBackend", "line_key",
           "work_units", "tile_args", "load_cached", "CACHE_FILE"]

Route = Literal["accelerator", "cpu", "split"]
#: (op, limb count of the modulus, exponent-length class): one cost line each
LineKey = tuple[str, int, int]
#: the cache file of the measured lines, in the private cache folder
CACHE_FILE = "dispatch-calibration.json"
#: raised when a backend's cost curves change without a change of its options or of the UniFL
#: version, so that lines measured on the old code are measured again rather than reused (2: the
#: gpu's grouped products and multi-exponentiations cut their parts against the serial join)
CACHE_VERSION = 2
CACHE_TTL_S = 7 * 24 * 3600
#: the exponent parameters of the ops that have one (their length class is part of a line's key)
_EXPONENTS = {"mod_exp": 2, "mod_exp_secret": 2, "mont_exp": 2, "mont_multi_exp": 2}


@dataclass(frozen=True)
class CostLine:
    """t(u) = latency + per_unit·u seconds for a call of u work units, fitted on measured sizes up
    to ``measured_units``."""

    latency: float
    per_unit: float
    measured_units: float

    def predict(self, units: float) -> float:
        return self.latency + self.per_unit * units

    @classmethod
    def through(cls, points: Sequence[tuple[float, float]]) -> "CostLine":
        """The chord through the first and the last of (units, seconds) ``points`` (units
        ascending), clamped to a non-negative latency and a positive slope."""
        (u0, t0), (u1, t1) = points[0], points[-1]
        slope = (t1 - t0) / (u1 - u0) if u1 > u0 else t1 / max(u1, 1.0)
        slope = max(slope, t1 / max(u1, 1.0) * 1e-3, 1e-12)
        return cls(max(0.0, t0 - slope * u0), slope, float(u1))


class CostModel:
    """The cost lines of one backend, each with an online correction factor (the exponentially
    weighted ratio of measured to predicted time, clamped to [1/8, 8])."""

    ALPHA = 0.25

    def __init__(self, label: str, lines: dict[LineKey, CostLine] | None = None) -> None:
        self.label = label
        self.lines: dict[LineKey, CostLine] = dict(lines or {})
        self.correction: dict[LineKey, float] = {}
        self._lock = threading.Lock()

    def predict(self, key: LineKey, units: float) -> float | None:
        line = self.lines.get(key)
        if line is None:
            return None
        return line.predict(units) * self.correction.get(key, 1.0)

    def corrected(self, key: LineKey) -> CostLine | None:
        """The line with its correction applied (for the split point)."""
        line = self.lines.get(key)
        if line is None:
            return None
        k = self.correction.get(key, 1.0)
        return CostLine(line.latency * k, line.per_unit * k, line.measured_units)

    def observe(self, key: LineKey, units: float, seconds: float) -> None:
        line = self.lines.get(key)
        if line is None or units <= 0:
            return
        with self._lock:
            self.correction[key] = self.blend(self.correction.get(key, 1.0), seconds,
                                              line.predict(units))

    @classmethod
    def blend(cls, old: float, seconds: float, predicted: float) -> float:
        """A correction factor ``old`` moved toward measured/predicted (clamped to [1/8, 8]) by
        the weight ALPHA."""
        ratio = min(8.0, max(0.125, seconds / max(predicted, 1e-9)))
        return (1 - cls.ALPHA) * old + cls.ALPHA * ratio

    def set_line(self, key: LineKey, line: CostLine) -> None:
        with self._lock:
            self.lines[key] = line
            self.correction.pop(key, None)

    def to_json(self) -> dict[str, list[float]]:
        return {_key_text(key): [ln.latency, ln.per_unit, ln.measured_units]
                for key, ln in sorted(self.lines.items())}

    def corrections_to_json(self) -> dict[str, float]:
        with self._lock:
            return {_key_text(key): k for key, k in sorted(self.correction.items())
                    if key in self.lines}

    @staticmethod
    def lines_from_json(data: Any) -> dict[LineKey, CostLine]:
        """Lines of a cache entry; anything malformed is left out (then measured)."""
        out: dict[LineKey, CostLine] = {}
        if not isinstance(data, dict):
            return out
        for k, v in data.items():
            key = _key_of(k)
            try:
                lat, per, upto = (float(x) for x in v)
            except (ValueError, TypeError):
                continue
            if key is not None and all(math.isfinite(x) and x >= 0 for x in (lat, per, upto)) \
                    and per > 0:
                out[key] = CostLine(lat, per, upto)
        return out

    @staticmethod
    def factors_from_json(data: Any) -> dict[LineKey, float]:
        """Correction factors of a cache entry, each clamped to [1/8, 8] as :meth:`blend` keeps
        them; anything malformed or not finite is left out (then the factor starts at 1)."""
        out: dict[LineKey, float] = {}
        if not isinstance(data, dict):
            return out
        for k, v in data.items():
            key = _key_of(k)
            if key is None or isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or not math.isfinite(v):
                continue
            out[key] = min(8.0, max(0.125, float(v)))
        return out


def _key_text(key: LineKey) -> str:
    return f"{key[0]}|{key[1]}|{key[2]}"


def _key_of(text: Any) -> LineKey | None:
    """The line key written as ``op|limbs|class`` (None when malformed or not an op)."""
    try:
        op, limbs_s, ecls_s = str(text).split("|")
        key = (op, int(limbs_s), int(ecls_s))
    except (ValueError, TypeError):
        return None
    return key if op in OPS and key[1] > 0 and key[2] >= 0 else None


@dataclass(frozen=True)
class DispatchPolicy:
    """The party YAML's ``dispatch`` section, as the dispatcher reads it (see the module doc)."""

    mode: Literal["auto", "calibrated", "pinned"] = "calibrated"
    margin: float = 0.2
    #: and by at least this many seconds
    min_gain_s: float = 0.001
    split: bool = True
    pin: dict[str, Route] = field(default_factory=dict)
    cache: bool = True
    #: the most seconds one line's calibration may take on one backend (it stops at the first
    #: size past this), and the largest calibration batch
    budget_s: float = 1.0
    max_rows: int = 16384

    def pinned(self, op: str) -> Route:
        return self.pin.get(op, self.pin.get("default", "accelerator"))


@dataclass(frozen=True)
class Decision:
    """Where one call runs and why: ``kind`` of reason, the predicted seconds of the route taken,
    of the CPU alone and of the accelerator alone, and the accelerator's share of a split."""

    route: Route
    kind: str
    predicted: float | None = None
    cpu_predicted: float | None = None
    acc_predicted: float | None = None
    fraction: float = 1.0
    #: a split's correction factor applied in ``predicted`` (see DispatchBackend._observe_split)
    overhead: float = 1.0

    @property
    def reason(self) -> str:
        """The reason in words (formatted on demand: a decision is made per call)."""
        if self.predicted is None or self.cpu_predicted is None or self.acc_predicted is None:
            return self.kind
        acc, cpu = _ms(self.acc_predicted), _ms(self.cpu_predicted)
        if self.route == "split":
            return (f"{self.kind}: {_ms(self.predicted)} vs accelerator {acc}, cpu {cpu} "
                    f"({self.fraction:.0%} on the accelerator)")
        if self.route == "accelerator":
            return f"{self.kind}: accelerator {acc} vs cpu {cpu}"
        return f"{self.kind}: cpu {cpu} vs accelerator {acc}"


# ---- the shape of a call ---------------------------------------------------------------------
def _limbs_of(arg: Any) -> int:
    if isinstance(arg, MontContext):
        return arg.num_limbs
    if isinstance(arg, PaillierPublicMaterial):
        return arg.nsquare_ctx.num_limbs
    if isinstance(arg, PaillierPrivateMaterial):
        return arg.public_key.nsquare_ctx.num_limbs
    raise TypeError(f"no modulus in {type(arg).__name__}")


def line_key(op: str, args: tuple) -> LineKey:
    """(op, limb count of the modulus, exponent-length class ceil(log2(bits + 1)), 0 for ops
    without an exponent)."""
    pos = _EXPONENTS.get(op)
    ecls = exp_bits(args[pos]).bit_length() if pos is not None else 0
    return op, _limbs_of(args[0]), ecls


def work_units(op: str, args: tuple) -> int:
    """The call's work units: its rows; K·N for a multi-exponentiation."""
    return batch_elements(op, args)


def _take_rows(x: Any, n: int) -> np.ndarray:
    host = np.asarray(x, dtype=np.uint64) if isinstance(x, DeviceBatch) else np.asarray(x)
    return np.ascontiguousarray(np.take(host, np.arange(n) % host.shape[0], axis=0))


def tile_args(op: str, args: tuple, n: int) -> tuple:
    """The call's arguments with ``n`` rows along the dimension its splitting rule cuts (rows; K
    for a multi-exponentiation), repeating its own rows: a calibration batch of the call's kind."""
    rule = SPLITS[op]
    out = list(args)
    if isinstance(rule, Rows):
        names = list(_param_names(op))
        rows = int(np.shape(args[names.index(rule.batch[0])])[0])
        for name in rule.batch:
            out[names.index(name)] = _take_rows(args[names.index(name)], n)
        if rule.exps is not None:
            e = names.index(rule.exps)
            if int(np.shape(args[e])[0]) == rows and rows != 1:
                out[e] = _take_rows(args[e], n)
    elif isinstance(rule, MultiExp):
        out[2] = _take_rows(args[2], n)
    elif isinstance(rule, ProdGroups):
        out[1] = _take_rows(args[1], n)
        out[2] = np.ascontiguousarray(np.take(np.asarray(args[2]), np.arange(n) % len(args[2])))
    return tuple(out)


def _param_names(op: str) -> tuple[str, ...]:
    from ..core.contract import SIGNATURES
    return tuple(list(SIGNATURES[op].parameters)[1:])


def _cut_rows(op: str, args: tuple) -> int:
    """The rows of the dimension the op's splitting rule cuts (what ``tile_args`` sets)."""
    rule = SPLITS[op]
    if isinstance(rule, MultiExp):
        return int(np.shape(args[2])[0])
    if isinstance(rule, Rows):
        return int(np.shape(args[_param_names(op).index(rule.batch[0])])[0])
    return int(np.shape(args[1])[0])


# ---- measuring -------------------------------------------------------------------------------
def _bare(member: Backend) -> Backend:
    """What to time a calibration on: a counting wrapper's inner backend (calibration calls are
    not the job's, so they stay out of its counters)."""
    inner = getattr(member, "inner", None)
    return inner if isinstance(inner, Backend) else member


def measure_line(member: Backend, op: str, args: tuple, budget_s: float, max_rows: int,
                 accelerator: bool = False) -> CostLine:
    """A cost line of ``op`` on ``member``: the call's own arguments tiled to 1, 4, 16, ... rows,
    each timed after an untimed first call, until a call is out of the latency-bound region (at
    least 4 times the one-row time and 10 ms), the time budget is spent, or ``max_rows`` is
    reached; the chord through the first and the last point.  A size that takes under 5 ms is
    timed three times: the accelerator keeps the median, the CPU the best -- both errors then lean
    towards the CPU, the side of the guarantee."""
    be = _bare(member)
    run_op(be, op, tile_args(op, args, 1))                   # warm-up: contexts, tables, kernels
    points: list[tuple[float, float]] = []
    spent, n = 0.0, 1
    while True:
        tiled = tile_args(op, args, n)
        times: list[float] = []
        for _ in range(3):
            t0 = time.perf_counter()
            run_op(be, op, tiled)
            dt = time.perf_counter() - t0
            spent += dt
            times.append(dt)
            if dt >= 5e-3:
                break
        t = sorted(times)[len(times) // 2] if accelerator else min(times)
        points.append((float(work_units(op, tiled)), t))
        if len(points) >= 2 and (t >= max(4 * points[0][1], 0.01) or spent >= budget_s):
            break
        if n >= max_rows:
            break
        n = min(max_rows, n * 4)
    if len(points) == 1:
        points.append(points[0])
    return CostLine.through(points)


def backend_cache_key(member: Backend) -> str:
    """What a backend's lines are cached under: name, description, devices, options, machine and
    code version (a new version, option or device measures again)."""
    from .. import __version__
    be = _bare(member)
    opts = getattr(be, "options", None)
    opts_s = json.dumps(dataclasses.asdict(opts), sort_keys=True, default=str) \
        if dataclasses.is_dataclass(opts) and not isinstance(opts, type) else repr(opts)
    return "|".join([be.name, be.describe(), ",".join(be.devices), opts_s, platform.node(),
                     platform.machine(), f"unifl-{__version__}"])


def _pair_cache_key(accelerator: Backend, cpu: Backend) -> str:
    """What the splits of an (accelerator, CPU backend) pair are cached under."""
    return f"{backend_cache_key(accelerator)}||{backend_cache_key(cpu)}"


def _fresh_entry(data: dict[str, Any], section: str, key: str) -> dict[str, Any]:
    """Entry ``key`` of ``section`` of the cache's ``data`` ({} when absent, expired or
    malformed)."""
    table = data.get(section) if data.get("version") == CACHE_VERSION else None
    entry = table.get(key) if isinstance(table, dict) else None
    try:
        fresh = isinstance(entry, dict) and time.time() - float(entry.get("at", 0)) <= CACHE_TTL_S
    except (TypeError, ValueError):
        fresh = False
    return entry if fresh and isinstance(entry, dict) else {}


def load_cached(accelerator: Backend, cpu: Backend
                ) -> tuple[tuple[CostModel, CostModel], dict[LineKey, float]]:
    """Both members' cost models from the cache (one read), each line with the correction the
    jobs that ran on it left (a factor for a line the cache has no line for is dropped), and the
    pair's split corrections (see DispatchBackend._observe_split)."""
    data = cache.read_json(CACHE_FILE)
    models = []
    for member in (accelerator, cpu):
        entry = _fresh_entry(data, "models", backend_cache_key(member))
        model = CostModel(member.describe(), CostModel.lines_from_json(entry.get("lines")))
        model.correction = {k: f for k, f in CostModel.factors_from_json(
            entry.get("corrections")).items() if k in model.lines}
        models.append(model)
    splits = CostModel.factors_from_json(
        _fresh_entry(data, "splits", _pair_cache_key(accelerator, cpu)).get("corrections"))
    return (models[0], models[1]), splits


def _update_cache(update: Callable[[dict[str, Any]], None]) -> None:
    """Read the cache file, let ``update`` change its tables (``models``: a backend's lines and
    their corrections; ``splits``: a pair's split corrections), and replace it atomically."""
    data = cache.read_json(CACHE_FILE)
    if data.get("version") != CACHE_VERSION or not isinstance(data.get("models"), dict):
        data = {"version": CACHE_VERSION, "models": {}}
    if not isinstance(data.get("splits"), dict):
        data["splits"] = {}
    update(data)
    cache.write_json(CACHE_FILE, data)


def _put_model(data: dict[str, Any], member: Backend, model: CostModel, measured: bool) -> None:
    """Set ``member``'s entry of the cache's ``data``: its lines and their corrections.  The
    entry's age, which expires it after CACHE_TTL_S, is its lines' age: renewed when lines were
    ``measured``, kept when only corrections are written back."""
    key = backend_cache_key(member)
    old = data["models"].get(key)
    at = old.get("at") if isinstance(old, dict) and not measured else None
    data["models"][key] = {"at": at if isinstance(at, (int, float)) else time.time(),
                           "lines": model.to_json(), "corrections": model.corrections_to_json()}


@dataclass
class _RouteStats:
    last: Decision
    calls: int = 0
    elements: int = 0
    seconds: float = 0.0
    predicted: float = 0.0
    cpu_predicted: float = 0.0
    slower_than_cpu: int = 0


class DispatchBackend(MultiDeviceBackend):
    """The party's accelerator and its CPU backend behind one Backend, each call placed by size
    (see the module doc).  Members: 0 the accelerator, 1 the CPU backend; a member that fails
    mid-run is retired and its piece re-run on the other (then every call runs there)."""

    def __init__(self, accelerator: Backend, cpu: Backend, policy: DispatchPolicy,
                 models: tuple[CostModel, CostModel] | None = None,
                 split_corrections: dict[LineKey, float] | None = None) -> None:
        super().__init__([accelerator, cpu], ThreadExecutor(2), min_rows=1, failover="members")
        self.policy = policy
        # an op is native here when either side has it: each side runs it natively or composes
        # it there (run_op), so the whole op is priced and placed, not its pieces.  A route op
        # only where the accelerator has it: the layers take the route instead of ops the
        # accelerator runs natively, so a route it can only compose would hand the party's bulk
        # work to its CPU (on an H200, before the gpu backend fused the generators' route, a
        # 2048-bit key owner's encryptions of a two-party job took 4.7 s that way, split with
        # the CPU, where the GPU's y^p kernel needed tenths of a second)
        self.native_ops = frozenset(  # type: ignore[misc]
            op for op in OPS if accelerator.implements(op)
            or (cpu.implements(op) and op not in ROUTE_OPS))
        self.models = models or (CostModel(accelerator.describe()), CostModel(cpu.describe()))
        self._tls = threading.local()
        self._stats: dict[tuple[str, str, str], _RouteStats] = {}
        self._stats_lock = threading.Lock()
        #: per line, the measured/predicted time of its splits (see _observe_split); the
        #: cache's, left by earlier jobs on this pair, when given
        self._split_correction: dict[LineKey, float] = dict(split_corrections or {})
        self._calibrating: dict[LineKey, threading.Lock] = {}
        self._cal_lock = threading.Lock()
        #: where the lines came from, for the selection record
        self.calibration: dict[str, Any] = {"measured": [], "cached": 0}

    # ---- description
    @property
    def accelerator(self) -> Backend:
        return self.members[0]

    @property
    def cpu(self) -> Backend:
        return self.members[1]

    def describe(self) -> str:
        return (f"{self.accelerator.describe()} with {self.cpu.describe()} for the calls it "
                f"serves faster (dispatch {self.policy.mode})")

    def own_batch(self, x: Any) -> Any:
        """The accelerator's device batches stay where they are (the CPU side reads them back
        when a call goes there); anything else is a host array."""
        rep = self._replacement()
        if rep is not None:
            return rep.own_batch(x)
        if isinstance(x, DeviceBatch):
            return x
        if isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[0] > 1 and x.strides[0] == 0 \
                and x.dtype == np.uint64:
            return x                # one shared row: each side expands it as it needs
        return np.ascontiguousarray(x, dtype=np.uint64)

    # ---- models
    def calibrate(self, op: str, args: tuple) -> None:
        """Measure the lines of ``op`` at the shape of ``args`` on both sides (once per line:
        concurrent first calls wait for the one measuring), and cache them."""
        key = line_key(op, args)
        with self._cal_lock:
            lock = self._calibrating.setdefault(key, threading.Lock())
        with lock:
            if all(key in m.lines for m in self.models):
                return
            t0 = time.perf_counter()
            for i, (member, model) in enumerate(zip(self.members, self.models)):
                if key not in model.lines:
                    model.set_line(key, measure_line(member, op, args, self.policy.budget_s,
                                                     self.policy.max_rows, accelerator=i == 0))
            log.info("dispatch: measured %s (%d limbs, exponent class %d) in %.2f s: %s", op,
                     key[1], key[2], time.perf_counter() - t0, self._crossover_text(key))
            self.calibration["measured"].append(_key_text(key))
            if self.policy.cache:
                self._store(measured=True)

    def save_corrections(self) -> None:
        """Write what this job learnt of its lines back to the cache: each member's line
        corrections and the pair's split corrections, so that the next job on this machine starts
        from them.  Why: a line's first split was made on the chord's prediction alone, and on an
        H200 about half the calls counted slower than the CPU were such first splits."""
        if self.policy.cache and self.policy.mode != "pinned":
            self._store(measured=False)

    def _store(self, measured: bool) -> None:
        """Both members' lines and corrections, and the pair's split corrections, into the cache
        in one read-merge-replace (``measured``: the lines are new, so their age restarts)."""
        with self._stats_lock:
            splits = {_key_text(k): f for k, f in sorted(self._split_correction.items())}

        def update(data: dict[str, Any]) -> None:
            for member, model in zip(self.members, self.models):
                if model.lines:
                    _put_model(data, member, model, measured)
            if splits:
                data["splits"][_pair_cache_key(self.accelerator, self.cpu)] = {
                    "at": time.time(), "corrections": splits}
        _update_cache(update)

    def close(self) -> None:
        try:
            self.save_corrections()
        finally:
            super().close()

    def _crossover_text(self, key: LineKey) -> str:
        a, c = (m.corrected(key) for m in self.models)
        if a is None or c is None:
            return "no model"
        x = crossover(a, c)
        return ("the accelerator is never faster" if x is None else
                f"crossover at {x:,.0f} units (accelerator {a.latency * 1e3:.2f} ms + "
                f"{a.per_unit * 1e6:.2f} µs/unit, cpu {c.latency * 1e3:.2f} ms + "
                f"{c.per_unit * 1e6:.2f} µs/unit)")

    def lines(self) -> list[dict[str, Any]]:
        """Every line of both models with its crossover, for reports."""
        out = []
        keys = sorted(set(self.models[0].lines) | set(self.models[1].lines))
        for key in keys:
            a, c = (m.corrected(key) for m in self.models)
            row: dict[str, Any] = {"op": key[0], "limbs": key[1], "exponent_class": key[2]}
            for side, ln in (("accelerator", a), ("cpu", c)):
                if ln is not None:
                    row[f"{side}_latency_s"] = ln.latency
                    row[f"{side}_per_unit_s"] = ln.per_unit
            row["crossover_units"] = crossover(a, c) if a and c else None
            out.append(row)
        return out

    # ---- deciding
    def decide(self, op: str, args: tuple) -> Decision:
        """Where a call of ``op`` on ``args`` runs, and why (measures its line first if need be)."""
        live = self.live_members()
        if 0 not in live:
            return Decision("cpu", "the accelerator failed earlier in this job")
        if 1 not in live:
            return Decision("accelerator", "the cpu backend failed earlier in this job")
        units = work_units(op, args)
        if units == 0:
            return Decision("cpu", "empty call")
        if self.policy.mode == "pinned":
            return Decision(self.policy.pinned(op), "pinned by dispatch.pin")
        key = line_key(op, args)
        if not all(key in m.lines for m in self.models):
            self.calibrate(op, args)
        acc_model, cpu_model = self.models
        t_acc = acc_model.predict(key, units)
        t_cpu = cpu_model.predict(key, units)
        assert t_acc is not None and t_cpu is not None
        margin, gain = 1.0 + self.policy.margin, self.policy.min_gain_s
        best: Decision
        if t_acc * margin <= t_cpu and t_cpu - t_acc >= gain:
            best = Decision("accelerator", "above the crossover", t_acc, t_cpu, t_acc)
        else:
            best = Decision("cpu", "below the crossover", t_cpu, t_cpu, t_acc)
        if self.policy.split and _cut_rows(op, args) >= 2:
            a, c = acc_model.corrected(key), cpu_model.corrected(key)
            assert a is not None and c is not None
            f = split_fraction(a, c, units)
            if f is not None:
                k = self._split_correction.get(key, 1.0)
                t_split = a.predict(f * units) * k
                alone = min(t_acc, t_cpu)
                if t_split * margin <= alone and alone - t_split >= gain:
                    best = Decision("split", "both together", t_split, t_cpu, t_acc, f, k)
        return best

    # ---- running
    def _call_member(self, i: int, op: str, args: tuple) -> Any:
        """``op`` on member ``i``, natively or composed there (run_op), timed into its model; a
        device failure comes back as a piece to re-run (see MultiDeviceBackend)."""
        t0 = time.perf_counter()
        try:
            out = run_op(self.members[i], op, args)
        except Exception as exc:
            if self.chain is None or not is_device_failure(exc, self.members[i]):
                raise
            return _PieceFailed(i, args, exc)
        units = work_units(op, args)
        if units and self.policy.mode != "pinned":
            self.models[i].observe(line_key(op, args), units, time.perf_counter() - t0)
        return out

    def plan(self, n: int, min_rows: int | None = None) -> list[Piece]:
        """With a split decided for this call (this thread): the accelerator's share first, the
        CPU's after; otherwise the multi-device plan."""
        f = getattr(self._tls, "fraction", None)
        if f is None or len(self.live_members()) < 2 or n < 2:
            return super().plan(n, min_rows)
        k = min(n - 1, max(1, int(round(n * f))))
        with self._lock:
            self._load[0] += k
            self._load[1] += n - k
        return [(0, 0, k), (1, k, n)]

    def _split(self, op: str, args: tuple) -> Any:
        chain = self.chain
        if chain is not None and chain.retired(self.chain_pos):
            return chain.run_on_current(self.chain_pos, op, args)
        d = self.decide(op, args)
        t0 = time.perf_counter()
        if d.route == "split":
            self._tls.fraction = d.fraction
            try:
                out = SPLITS[op].run(self, op, args)
            finally:
                self._tls.fraction = None
        else:
            i = 0 if d.route == "accelerator" else 1
            out = self._settle(op, [self._call_member(i, op, args)])[0]
        seconds = time.perf_counter() - t0
        if d.route == "split":
            self._observe_split(line_key(op, args), d, seconds)
        self._record(op, args, d, seconds)
        return out

    def _observe_split(self, key: LineKey, d: Decision, seconds: float) -> None:
        """Correct the splits of this line as the members' lines are corrected (CostModel): by the
        exponentially weighted ratio of measured to predicted time.  Each piece also corrects its
        member's line, but a split costs more than its slower piece -- a second thread, the
        pieces joined, both sides' host work sharing the CPU -- and on an H200 splits ran 2-3x
        their prediction; once corrected, a split that no longer wins by the margin is not made."""
        if not d.predicted:
            return
        with self._stats_lock:
            self._split_correction[key] = CostModel.blend(self._split_correction.get(key, 1.0),
                                                          seconds, d.predicted / d.overhead)

    def _record(self, op: str, args: tuple, d: Decision, seconds: float) -> None:
        with self._stats_lock:
            st = self._stats.get((op, d.route, d.kind))
            if st is None:
                st = self._stats[(op, d.route, d.kind)] = _RouteStats(last=d)
            st.calls += 1
            st.elements += work_units(op, args)
            st.seconds += seconds
            st.predicted += d.predicted or 0.0
            st.cpu_predicted += d.cpu_predicted or 0.0
            st.last = d                             # the latest example of this kind
            if d.route != "cpu" and d.cpu_predicted is not None and \
                    seconds > d.cpu_predicted * (1 + self.policy.margin):
                st.slower_than_cpu += 1

    # ---- reporting
    def dispatch_report(self) -> list[dict[str, Any]]:
        """One row per op, route and kind of reason: where its calls ran and why (reason: the
        latest call's), calls, elements, seconds measured, predicted seconds of the route taken
        and of the CPU alone, and ``slower_than_cpu``: calls off the CPU that took longer than
        the CPU's prediction (beyond the margin)."""
        with self._stats_lock:
            items = sorted(self._stats.items())
            return [{"op": op, "route": route, "reason": st.last.reason, "calls": st.calls,
                     "elements": st.elements, "seconds": st.seconds,
                     "predicted_seconds": st.predicted, "cpu_predicted_seconds": st.cpu_predicted,
                     "slower_than_cpu": st.slower_than_cpu}
                    for (op, route, _), st in items]

    def reset_counters(self) -> None:
        super().reset_counters()
        with self._stats_lock:
            self._stats.clear()


def crossover(acc: CostLine, cpu: CostLine) -> float | None:
    """The units at which the accelerator's line meets the CPU's (None: it never gets faster)."""
    if cpu.per_unit <= acc.per_unit:
        return None if acc.latency >= cpu.latency else 0.0
    return max(0.0, (acc.latency - cpu.latency) / (cpu.per_unit - acc.per_unit))


def split_fraction(acc: CostLine, cpu: CostLine, units: float) -> float | None:
    """The accelerator's share f of a call of ``units`` with which both sides finish together,
    L_a + c_a·f·u = L_c + c_c·(1 − f)·u; None when no share in (0, 1) does."""
    f = (cpu.latency - acc.latency + cpu.per_unit * units) / ((acc.per_unit + cpu.per_unit) * units)
    return f if 0.0 < f < 1.0 else None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def calibrate_at_start(disp: DispatchBackend, key_bits: int) -> None:
    """The lines a party's job meets first, measured now on synthetic data at its key size: ct+ct
    (MontMult), ct×pt with short exponents (ModExp in the Montgomery domain) and histograms
    (grouped products), all mod n² of a ``key_bits``-bit n.  The fused Paillier ops need the
    party's key, so their lines are measured at their first call (:meth:`DispatchBackend.decide`)."""
    import secrets
    from ..core.limbs import to_limbs
    from ..core.montgomery import mont_context
    bits = 2 * key_bits
    ctx = mont_context(secrets.randbits(bits) | (1 << (bits - 1)) | 1)
    rows = 16
    a = to_limbs([secrets.randbelow(ctx.m) for _ in range(rows)], ctx.num_limbs)
    b = to_limbs([secrets.randbelow(ctx.m) for _ in range(rows)], ctx.num_limbs)
    exps = to_limbs([secrets.randbits(64) | 1 << 63 for _ in range(rows)], 1)
    groups = np.arange(rows, dtype=np.int64) % 4
    for op, args in (("mont_mul", (ctx, a, b)), ("mont_exp", (ctx, a, exps)),
                     ("mont_prod_groups", (ctx, a, groups, 4))):
        disp.calibrate(op, args)

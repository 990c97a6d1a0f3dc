"""Timing, repetitions, the machine behind a figure, and the rows a benchmark run produces.

A throughput figure is measured the same way everywhere (``unifl bench``, ``bench/*.py``):

1. one untimed warm-up call of the workload, so that tables, Montgomery contexts, device buffers and
   compiled kernels built on first use are not charged to the first repetition;
2. ``repeats`` timed repetitions; each calls the workload until at least ``min_time`` seconds have
   passed and divides the operations the workload reported by the elapsed time;
3. the figure is the median of the repetitions' rates, reported with their (min, max) spread and the
   (25th, 75th) percentile range.

A workload is a callable returning how many operations it performed (a batch size, or
multiply-accumulates for a matrix product), so one harness serves single calls and batches.
"""

from __future__ import annotations

import os
import platform
import ssl
import statistics
import time
from dataclasses import asdict, dataclass, field, fields
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..core import registry

__all__ = ["Workload", "Row", "Stats", "Session", "summarize", "measure", "measure_full",
           "machine_info", "package_version", "ROWS_SCHEMA"]

#: A benchmark workload: runs once and returns how many operations it performed.
Workload = Callable[[], int]

#: The schema tag of the document a worker process writes on stdout (see :mod:`unifl.bench.worker`).
ROWS_SCHEMA = "unifl-bench-rows/1"


@dataclass
class Row:
    """One figure of a benchmark run.

    Throughput suites set ``ops_per_s``, the end-to-end suite ``seconds``; either is the median of
    ``repeats`` repetitions, ``spread`` their (min, max) and ``iqr`` their (25th, 75th) percentiles.
    ``ratio`` is ``ops_per_s / baseline's ops_per_s`` (or the baseline's seconds over ours), taken
    only against a row measured in the same run.  ``stand_in`` names what actually ran when it is
    not the named hardware (PoCL, a simulator); ``source`` is ``"measured"``, ``"measured (...)"``
    for a figure taken in another process of this run, or ``"quoted, ..."`` for a published figure.
    """

    suite: str
    op: str
    bits: int
    impl: str
    ops_per_s: float | None
    spread: tuple[float, float]
    stand_in: str | None = None
    baseline: str | None = None
    ratio: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    iqr: tuple[float, float] | None = None
    repeats: int | None = None
    seconds: float | None = None
    source: str = "measured"

    @property
    def measured(self) -> bool:
        """True for a figure measured in this run (in this process or a worker of it)."""
        return self.source.startswith("measured")

    def to_dict(self) -> dict[str, Any]:
        """The row as JSON-ready data (the ``rows`` entries of ``unifl bench``'s JSON)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Row:
        """The row that :meth:`to_dict` wrote; raises ``ValueError`` naming a missing or unknown
        field, so a worker speaking another schema is refused instead of misread."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"benchmark row has unknown field(s) {unknown}")
        required = {"suite", "op", "bits", "impl", "ops_per_s", "spread"}
        missing = sorted(required - set(data))
        if missing:
            raise ValueError(f"benchmark row lacks field(s) {missing}")
        d = dict(data)
        lo, hi = d["spread"]
        d["spread"] = (float(lo), float(hi))
        if d.get("iqr") is not None:
            q1, q3 = d["iqr"]
            d["iqr"] = (float(q1), float(q3))
        return cls(**d)


@dataclass(frozen=True)
class Stats:
    """Summary of repeated measurements: the median, (min, max) and (25th, 75th) percentiles."""

    median: float
    spread: tuple[float, float]
    iqr: tuple[float, float]


def summarize(samples: Sequence[float]) -> Stats:
    """Median, (min, max) and inter-quartile range of ``samples`` (at least one)."""
    if not samples:
        raise ValueError("no samples to summarize")
    xs = [float(x) for x in samples]
    q1, q3 = np.percentile(xs, [25, 75])
    return Stats(statistics.median(xs), (min(xs), max(xs)), (float(q1), float(q3)))


def measure_full(fn: Workload, min_time: float = 0.3, repeats: int = 3) -> Stats:
    """Operations per second of ``fn``: one untimed warm-up call, then ``repeats`` repetitions of at
    least ``min_time`` seconds each (see the module docstring)."""
    fn()
    rates = []
    for _ in range(max(1, repeats)):
        done, t0 = 0, time.perf_counter()
        while True:
            done += fn()
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        rates.append(done / dt)
    return summarize(rates)


def measure(fn: Workload, min_time: float = 0.3, repeats: int = 3
            ) -> tuple[float, tuple[float, float]]:
    """Median operations per second of ``fn`` and their (min, max), as :func:`measure_full`."""
    st = measure_full(fn, min_time, repeats)
    return st.median, st.spread


def package_version(dist: str) -> str | None:
    """The installed version of distribution ``dist``, or None when it is not installed."""
    try:
        return version(dist)
    except PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:   # not Linux, or /proc not mounted: the platform string still says something
        pass
    return None


def machine_info() -> dict[str, Any]:
    """The CPU, core count and the versions that decide the figures: Python, NumPy, gmpy2 and its
    GMP, OpenSSL (the native backend's BIGNUM), the thread count UniFL was told to use, and the
    peers (phe, FATE, HEU, torch) where installed."""
    import gmpy2
    info: dict[str, Any] = {
        "platform": platform.platform(), "python": platform.python_version(),
        "cpu_count": os.cpu_count(), "gmpy2": gmpy2.version(), "gmp": gmpy2.mp_version(),
        "numpy": np.__version__, "openssl": ssl.OPENSSL_VERSION,
        "unifl_threads": os.environ.get("UNIFL_THREADS")}
    cpu = _cpu_model()
    if cpu is not None:
        info["cpu"] = cpu
    for dist in ("phe", "pyfate", "fate_utils", "sf-heu", "torch"):
        info[dist] = package_version(dist)
    return info


class Session:
    """The settings of one benchmark run and the rows it produced, in order.

    Args:
        backends: the UniFL backends to measure (names known to :mod:`unifl.core.registry`).
        min_time: seconds of each timed repetition.
        repeats: timed repetitions per figure.
        quick: tiny batches and no subprocess peers (a smoke run; the figures mean little).
        progress: called with every row as it is added (the CLI's progress line).
    """

    def __init__(self, backends: Sequence[str], min_time: float = 0.3, repeats: int = 3,
                 quick: bool = False, progress: Callable[[Row], None] | None = None) -> None:
        self.backends = list(backends)
        self.min_time, self.repeats, self.quick = min_time, repeats, quick
        self.progress = progress
        self.rows: list[Row] = []
        #: what this run could not measure, and why (written to the JSON and printed by the CLI)
        self.skipped: list[str] = []

    def add(self, row: Row) -> Row:
        """Record ``row`` (and report it to ``progress``)."""
        self.rows.append(row)
        if self.progress is not None:
            self.progress(row)
        return row

    def skip(self, what: str) -> None:
        """Record that something was not measured in this run, with the reason."""
        self.skipped.append(what)

    def measure(self, fn: Workload) -> Stats:
        """:func:`measure_full` with this run's ``min_time`` and ``repeats``."""
        return measure_full(fn, self.min_time, self.repeats)

    def timed(self, suite: str, op: str, bits: int, impl: str, fn: Workload,
              stand_in: str | None = None, **extra: Any) -> Row:
        """A row with the measured throughput of ``fn`` (``extra`` goes to its ``extra``), not yet
        recorded (see :meth:`add`)."""
        st = self.measure(fn)
        return Row(suite, op, bits, impl, st.median, st.spread, stand_in, iqr=st.iqr,
                   repeats=self.repeats, extra=dict(extra))

    def stand_in(self, name: str) -> str | None:
        """What backend ``name`` really runs on when it is a stand-in (PoCL, a simulator)."""
        return registry.probe(name).stand_in

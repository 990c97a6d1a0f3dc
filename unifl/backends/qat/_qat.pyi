"""Type stub of the compiled QAT driver ``unifl.backends.qat._qat`` (pybind11,
``src/qat_driver.cpp``): what Python uses of it.  Keep it in step with the
``PYBIND11_MODULE(_qat, m)`` block there."""

from typing import Any, Sequence

import numpy as np
import numpy.typing as npt

#: per-row flags of a job's results (``Job.rows`` / ``Job.result``)
PENDING: int
DONE: int
FAILED: int
HOST: int

def class_bits(bits: int) -> int:
    """QAT operand size class (bits) for a widest operand of ``bits`` bits; 0 if over 8192."""

class Job:
    """A batch of ModExps submitted by ``Session.start``; its read-outs are of host memory."""

    @property
    def size(self) -> int: ...
    def wait_landed(self, timeout: float = -1.0, min_batch: int = 1
                    ) -> tuple[npt.NDArray[np.int64], bool]:
        """(indices landed since the last call, every row landed); a negative timeout waits."""
    def result(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]:
        """(results (N, L), flags (N,)) of every row."""
    def rows(self, idx: npt.ArrayLike) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint8]]:
        """(results, flags) of the given landed rows."""
    def join(self) -> None:
        """Wait until every row landed."""

class Session:
    """One QAT user-space process: the libraries it loaded, its instances and polling threads."""

    def __init__(self, qat_libraries: Sequence[str], usdm_libraries: Sequence[str],
                 section: str = "SSL", retry_timeout: float = 30.0,
                 poll_interval_us: int = 20) -> None: ...
    def start(self, base: npt.ArrayLike, exps: npt.ArrayLike, mod: npt.ArrayLike,
              max_in_flight: int = 96, instances: int = 0) -> Job:
        """Submit base^e mod m per row (RuntimeError when the session is closed)."""
    def close(self, timeout: float = 10.0) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def num_instances(self) -> int: ...
    def info(self) -> dict[str, Any]:
        """library, usdm_library, simulator, section, instances (a list of dicts: the instances in
        use), skipped_instances (name, part, reason: those without the large-number API),
        instances_found."""
    def stats(self) -> dict[str, float]:
        """The driver's counters (integers, and busy_seconds)."""
    def cpu_size_classes(self) -> list[int]:
        """Size classes (bits) the library refused (CPA_STATUS_FAIL), now sent to the CPU."""

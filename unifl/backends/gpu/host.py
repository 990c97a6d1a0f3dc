"""``gpu_host``: the gpu backend's CUDA kernel bodies compiled by the host C++ compiler and run on
the CPU, one call per instance index (``src/gpu_host.cpp``).  A verification stand-in, not a fast
path and not a GPU: the test suite registers it so the cross-backend equivalence harness checks the
kernels' arithmetic, index computations, key-blob layout and both batch layouts against ``cpu``.

With ``resident=True`` the engine also models the CUDA runtime's data residency: its results are
:class:`HostBatch` objects (a ``DeviceBatch`` whose values stand for device memory), its own batches
are taken back without a copy, and it counts what the CUDA runtime counts -- one launch per kernel
call, one upload per call that stages host operands (the runtime copies them in one transfer), one
download per batch whose values are read on the host -- so tests can check the traffic of an SDK
operation (e.g. one launch, one upload, no download for a fused key-owner encryption) without a GPU.
"""

from __future__ import annotations

import os
from typing import Any, Callable, TypeGuard

import numpy as np

from ...core.backend import ProbeResult
from ...core.contract import Limbs
from ...core.limbs import DeviceBatch
from .kernel_backend import KernelBackend

try:
    from . import _gpu_host  # the compiled harness (src/gpu_host.cpp), typed by _gpu_host.pyi
except ImportError as exc:  # extension not built
    # None marks "not built": probe() reports it (and the tests skip on it), so the name is the
    # stub's module (as mypy types it) wherever an engine call uses it
    _gpu_host = None  # type: ignore[assignment]
    _IMPORT_ERROR = str(exc)

#: a harness entry point: (key, *operands, *tail, soa, threads) -> result rows (or, for inverse,
#: (rows, count))
_Kernel = Callable[..., Any]

STAND_IN = "CUDA kernel bodies run on the host CPU (no GPU)"


class HostBatch(DeviceBatch):
    """A result of a resident :class:`HostEngine`: reading its values on the host is a download."""

    def __init__(self, engine: "HostEngine", values: np.ndarray) -> None:
        super().__init__(values.shape)
        self._engine = engine
        self._values = values

    def _download(self) -> np.ndarray:
        self._engine.counts["downloads"] += 1
        return self._values


class HostEngine:
    """Runs the kernel bodies on the CPU; ``soa`` selects the limb-major layout the device uses,
    ``resident`` the device-memory model described in the module docstring."""

    def __init__(self, soa: bool = True, threads: int | None = None,
                 resident: bool = False, window: int = 4, shape: int = 1) -> None:
        if window not in (3, 4, 5) or shape not in (1, 2):
            raise ValueError(f"gpu_host: window must be 3, 4 or 5 and shape 1 (normal) or 2 (wide),"
                             f" got {window!r}, {shape!r}")
        self.soa = soa
        self.threads = int(threads or os.environ.get("UNIFL_THREADS") or os.cpu_count() or 1)
        self.resident = resident
        self.counts = {"launches": 0, "uploads": 0, "downloads": 0}
        #: small, so the tests' batches exercise the multi-part reductions
        self.parallel_groups = 8
        #: the cooperative bodies' window and shape (no device here to choose them: explicit)
        self.window = window
        self.shape = shape

    def counters(self) -> dict[str, int]:
        """Kernel calls, staged host-operand transfers (key blobs included) and downloads so far."""
        return dict(self.counts)

    def holds(self, x: Any) -> TypeGuard[HostBatch]:
        return isinstance(x, HostBatch) and x._engine is self

    def prepare(self, blob: np.ndarray, kind: int) -> np.ndarray:
        self.counts["uploads"] += 1
        return np.ascontiguousarray(blob, dtype=np.uint64)

    def _call(self, fn: _Kernel, key: np.ndarray, *operands: Limbs, tail: tuple[Any, ...] = (),
              pair: bool = False, **kw: Any) -> Any:
        """One kernel call: own batches in place, host operands staged (one upload for all);
        ``pair``: the harness returns (rows, extra)."""
        staged = False
        args = []
        for x in operands:
            if self.holds(x):
                args.append(x._values)
            else:
                staged = True
                args.append(np.ascontiguousarray(x, dtype=np.uint64))
        self.counts["uploads"] += int(staged)
        self.counts["launches"] += 1
        out = fn(key, *args, *tail, self.soa, self.threads, **kw)
        if pair:
            rows, extra = out
            return (HostBatch(self, rows) if self.resident else rows), extra
        return HostBatch(self, out) if self.resident else out

    def mul(self, key: np.ndarray, a: Limbs, b: Limbs, mode: int, group: bool) -> Limbs:
        return self._call(_gpu_host.mul, key, a, b, tail=(mode,), group=group)

    def _wide(self, key: np.ndarray, group: bool) -> bool:
        """The wide shape for this call: asked for, cooperative, and the key's class has one (as
        the CUDA runtime decides it)."""
        return group and self.shape == 2 and _gpu_host.lmax_class(int(key[1])) <= 64

    def exp(self, key: np.ndarray, base: Limbs, exps: np.ndarray, mode: int, group: bool) -> Limbs:
        return self._call(_gpu_host.exp, key, base, exps, tail=(mode,), group=group,
                          window=self.window, wide=self._wide(key, group))

    def multi_exp(self, key: np.ndarray, bases: Limbs, exps: np.ndarray, group: bool, chunk: int
                  ) -> Limbs:
        return self._call(_gpu_host.multi_exp, key, bases, exps, group=group,
                          chunk=chunk if group else 1, window=self.window)

    def paillier_encrypt(self, pub: np.ndarray, m: Limbs, r: Limbs, group: bool) -> Limbs:
        return self._call(_gpu_host.paillier_encrypt, pub, m, r, group=group, window=self.window,
                          wide=self._wide(pub, group))

    def paillier_encrypt_owner(self, owner: np.ndarray, m: Limbs, yp: Limbs, yq: Limbs,
                               group: bool) -> Limbs:
        return self._call(_gpu_host.paillier_encrypt_owner, owner, m, yp, yq, group=group,
                          window=self.window)

    def paillier_decrypt(self, priv: np.ndarray, c: Limbs, group: bool) -> Limbs:
        return self._call(_gpu_host.paillier_decrypt, priv, c, group=group, window=self.window)

    def prod_groups(self, key: np.ndarray, a: Limbs, order: np.ndarray, plan: np.ndarray,
                    num_groups: int) -> Limbs:
        return self._call(_gpu_host.prod_groups, key, a, tail=(order, plan, num_groups))

    def inverse(self, key: np.ndarray, a: Limbs, chunk: int) -> tuple[Limbs, int]:
        out, bad = self._call(_gpu_host.inverse, key, a, tail=(chunk,), pair=True)
        return out, int(bad)

    def prepare_table(self, table: np.ndarray) -> np.ndarray:
        self.counts["uploads"] += 1
        return np.ascontiguousarray(table, dtype=np.uint64)

    def fixed_base(self, pub: np.ndarray, table: np.ndarray, window: int, m: Limbs,
                   a: np.ndarray) -> Limbs:
        def run(key: np.ndarray, m_: np.ndarray, a_: np.ndarray, soa: bool, threads: int
                ) -> np.ndarray:
            return _gpu_host.fixed_base(key, table, window, m_, a_, soa, threads)
        return self._call(run, pub, m, a)

    def owner_fixed_base(self, owner: np.ndarray, tp: np.ndarray, tq: np.ndarray, window: int,
                         m: Limbs, ap: np.ndarray, aq: np.ndarray) -> Limbs:
        def run(key: np.ndarray, m_: np.ndarray, ap_: np.ndarray, aq_: np.ndarray, soa: bool,
                threads: int) -> np.ndarray:
            return _gpu_host.owner_fixed_base(key, tp, tq, window, m_, ap_, aq_, soa, threads)
        return self._call(run, owner, m, ap, aq)


class GpuHostBackend(KernelBackend):
    """Test-only backend: the gpu kernel bodies on the host CPU (registered by the test suite)."""

    name = "gpu_host"

    def __init__(self, soa: bool = True, threads: int | None = None, resident: bool = False,
                 kernels: str = "group", window: int = 4, lanes: str = "normal",
                 **options: Any) -> None:
        """``window`` (3, 4, 5) and ``lanes`` (normal, wide): the cooperative bodies' tuning, as
        the gpu backend's options of those names choose it on a device."""
        super().__init__(**options)
        if kernels not in ("thread", "group"):
            raise ValueError(f"gpu_host: kernels must be 'thread' or 'group', got {kernels!r}")
        if lanes not in ("normal", "wide"):
            raise ValueError(f"gpu_host: lanes must be 'normal' or 'wide', got {lanes!r}")
        self.kernels = kernels
        self.engine = HostEngine(soa=soa, threads=threads, resident=resident, window=window,
                                 shape=2 if lanes == "wide" else 1)

    @classmethod
    def probe(cls) -> ProbeResult:
        if _gpu_host is None:
            return ProbeResult(False, f"host harness not built ({_IMPORT_ERROR})")
        return ProbeResult(True, "gpu kernel bodies compiled by the host C++ compiler",
                           ["host CPU"], stand_in=STAND_IN)

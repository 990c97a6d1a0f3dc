"""``gpu_host``: the gpu backend's CUDA kernel bodies compiled by the host C++ compiler and run on
the CPU, one call per instance index (``src/gpu_host.cpp``).  A verification stand-in, not a fast
path and not a GPU: the test suite registers it so the cross-backend equivalence harness checks the
kernels' arithmetic, index computations, key-blob layout and both batch layouts against ``cpu``.
"""

from __future__ import annotations

import os

import numpy as np

from ...core.backend import ProbeResult
from .kernel_backend import KernelBackend

try:
    from . import _gpu_host
except ImportError as exc:  # extension not built
    _gpu_host = None
    _IMPORT_ERROR = str(exc)

STAND_IN = "CUDA kernel bodies run on the host CPU (no GPU)"


class HostEngine:
    """Runs the kernel bodies on the CPU; ``soa`` selects the limb-major layout the device uses."""

    def __init__(self, soa: bool = True, threads: int | None = None) -> None:
        self.soa = soa
        self.threads = int(threads or os.environ.get("UNIFL_THREADS") or os.cpu_count() or 1)

    def prepare(self, blob: np.ndarray, kind: int) -> np.ndarray:
        return np.ascontiguousarray(blob, dtype=np.uint64)

    def mul(self, key, a, b, mode):
        return _gpu_host.mul(key, a, b, mode, self.soa, self.threads)

    def exp(self, key, base, exps, mode):
        return _gpu_host.exp(key, base, exps, mode, self.soa, self.threads)

    def multi_exp(self, key, bases, exps):
        return _gpu_host.multi_exp(key, bases, exps, self.soa, self.threads)

    def paillier_encrypt(self, pub, m, r):
        return _gpu_host.paillier_encrypt(pub, m, r, self.soa, self.threads)

    def paillier_decrypt(self, priv, c):
        return _gpu_host.paillier_decrypt(priv, c, self.soa, self.threads)


class GpuHostBackend(KernelBackend):
    """Test-only backend: the gpu kernel bodies on the host CPU (registered by the test suite)."""

    name = "gpu_host"

    def __init__(self, soa: bool = True, threads: int | None = None, **options) -> None:
        super().__init__(**options)
        self.engine = HostEngine(soa=soa, threads=threads)

    @classmethod
    def probe(cls) -> ProbeResult:
        if _gpu_host is None:
            return ProbeResult(False, f"host harness not built ({_IMPORT_ERROR})")
        return ProbeResult(True, "gpu kernel bodies compiled by the host C++ compiler",
                           ["host CPU"], stand_in=STAND_IN)

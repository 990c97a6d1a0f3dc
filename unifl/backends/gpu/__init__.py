"""``gpu``: UniFL's CUDA backend -- MontMult, ModMult, fixed-window ModExp, fused Paillier encryption
(UniFL Alg. 4), the ciphertext×plaintext matmul reduction (Alg. 5) and CRT decryption as CUDA
kernels, run on one NVIDIA GPU per instance (the ``device`` option; the scheduler's multi-device
backend splits batches over several instances).

Layout: one thread per instance.  Each thread owns one big number (or one Paillier operation) and
runs the whole CIOS Montgomery loop with 64-bit limbs (``mul.lo/mul.hi.u64``); batches are staged
limb-major on the device, so the 32 lanes of a warp read limb j of 32 neighbouring instances in one
coalesced 256-byte transaction.  Why this suits Ampere/Hopper (sm_80/sm_90) and FL batches of
10^4..10^6 values: no inter-thread carry propagation (no shuffles, no warp votes, no
``__syncwarp`` per word, which CGBN's TPI > 1 layouts pay), every lane busy on independent
instances, and a working set (the 16-entry window table) in local memory, which these chips cache in
a large unified L1/shared array (192 KB/SM on A100, 256 KB/SM on H100).  The price is latency per
instance and a small batch leaves SMs idle; CGBN's several-threads-per-instance layout is the better
choice for small batches, hence the optional CGBN note in docs/gpu.md.  Per-key constants are uploaded
once per device and copied into shared memory by each block (Alg. 4 lines 5-9).

Residency: every op's result stays in device memory as a ``GpuBatch`` (``unifl.base_op.DeviceBatch``)
and the next op on this backend reads it there, so an SDK chain -- encrypt, ``+``, ``*``, ``@``,
obfuscate, decrypt -- crosses the bus once each way; host operands are staged per call, and the first
use that needs values on the host (another backend, indexing, serialisation) fetches the batch once.

Kernels are templates over the limb capacity LMAX in {16, 32, 48, 64, 96, 128}: a modulus of L
limbs (64..8192 bits) runs in the smallest class >= L with loops over its own L, so results are
bit-identical to ``cpu`` with R = 2^(64·L).

Single source: every kernel body is a ``__host__ __device__`` function in ``src/kernels.cuh``; the
test suite runs the same bodies on the CPU through the host harness (``host.py``, backend
``gpu_host``) in the equivalence harness.  The CUDA library is compiled (nvcc, warnings as errors)
in CI, which has no GPU; tests marked ``gpu`` run the equivalence checks on a real device (they ran
on an H100, docs/gpu.md).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.errors import BackendUnavailable
from ...core.backend import ProbeResult
from ...core.contract import Limbs
from ...core.errors import ConfigError
from ...core.montgomery import MontContext
from .kernel_backend import KernelBackend, _c
from .options import GpuOptions

if TYPE_CHECKING:
    from .runtime import CudaEngine


class GpuBackend(KernelBackend):
    name = "gpu"
    one_device_per_instance = True

    options_model = GpuOptions
    options: GpuOptions
    engine: "CudaEngine"

    def __init__(self, **options: Any) -> None:
        """``options``: see :class:`~unifl.backends.gpu.options.GpuOptions` (``device``,
        ``cgbn``)."""
        super().__init__(**options)
        from .runtime import CudaEngine
        self.engine = CudaEngine(self.options.device)
        #: use the optional CGBN ModExp (only in a CGBN build; docs/gpu.md) -- UNIFL_GPU_CGBN=1
        cgbn = self.options.cgbn
        self.cgbn = os.environ.get("UNIFL_GPU_CGBN") == "1" if cgbn is None else cgbn

    @classmethod
    def select_device(cls, value: Any) -> dict[str, Any]:
        """A scalar entry of a party's ``devices:`` list is a CUDA device index: one instance per
        entry, each on its device (checked by the options model and, at start, by the runtime)."""
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"backend 'gpu': a device entry is a CUDA device index (an integer), "
                              f"got {value!r}")
        return {"device": value}

    @property
    def devices(self) -> list[str]:
        """The one device this instance runs on."""
        dev = self.engine.device
        names = self.probe_result.devices if self.probe_result else []
        return [next((d for d in names if d.startswith(f"cuda:{dev} ")), f"cuda:{dev}")]

    def own_batch(self, x: Any) -> Limbs:
        """Our own device batches stay on the device; a one-row broadcast view stays a view (the
        kernels read one shared row); anything else becomes a contiguous host array."""
        if self.engine.holds(x):
            return x
        if isinstance(x, np.ndarray) and x.ndim == 2 and x.shape[0] > 1 and x.strides[0] == 0 \
                and x.dtype == np.uint64:
            return x
        return np.ascontiguousarray(x, dtype=np.uint64)

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        if self.cgbn:
            out = self.engine.cgbn_mod_exp(self._ctx(ctx), _c(base), _c(exps))
            if out is not None:
                return out
        return super().op_mod_exp(ctx, base, exps)

    @classmethod
    def probe(cls) -> ProbeResult:
        from . import runtime
        try:
            devs = runtime.devices()
        except BackendUnavailable as exc:
            return ProbeResult(False, str(exc))
        return ProbeResult(True, f"CUDA kernels on {len(devs)} device(s)", devs)

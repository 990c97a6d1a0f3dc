"""``gpu``: UniFL's CUDA backend -- MontMult, ModMult, fixed-window ModExp, fused Paillier encryption
(UniFL Alg. 4, public and key-owner, and the DJN fixed-base variants), the ciphertext×plaintext
matmul reduction (Alg. 5), grouped products, batch inversion and CRT decryption as CUDA kernels,
run on one NVIDIA GPU per instance (the ``device`` option; the scheduler's multi-device backend
splits batches over several instances).

Two kernel families, both compiled into the one library (``src/kernels.cu`` with the device runtime
``src/device_runtime.cu`` and the C interface ``src/c_api.cu``):

* **thread** -- one thread per instance (``src/kernels.cuh``, kernels ``k_<op><LM>``).  Each thread
  owns one big number (or one Paillier operation) and runs the whole CIOS Montgomery loop with
  64-bit limbs (``mul.lo/mul.hi.u64``); batches are staged limb-major on the device, so the 32 lanes
  of a warp read limb j of 32 neighbouring instances in one coalesced 256-byte transaction.  No
  inter-thread carries at all, but the 16-entry window table and the numbers live in *local*
  memory (a 2048-bit ModExp frame is kilobytes per thread), and about 10^4 instances must be in
  flight to fill the device; past ~16k per launch throughput *drops* (the frames fall out of the
  caches), hence the waves of 16,384 (docs/backends/gpu.md, "Wave size").  Measured on an H100: 46-48 k/s
  2048-bit ModExp, 123-151 k/s Paillier encryption with a 1024-bit key.
* **group** -- one instance per group of TPI threads (``src/kernels_group.cuh`` over
  ``src/bn_group.cuh``, kernels ``k_<op>_g<LM>``), the layout of CGBN: lane t of a group holds LPT
  32-bit words of every number *in registers* (TPI·LPT words per number: TPI 4..32 for 1024- to
  8192-bit classes), MontMult is CIOS distributed over the lanes (three shuffles per word; each
  32×32→64 product one multiply-add with carry in and out on a PTX carry chain; one carry
  resolution by warp votes per MontMult), and the window table (3-, 4- or 5-bit windows, option
  ``window``) sits in *shared* memory, one slice per group.  ModExp and public encryption also
  have wide shapes (twice the threads per instance) for small calls (option ``lanes``).  The CRT
  bodies (key-owner encryption, decryption) run both halves in the two half groups at once.  The
  ops that used to need host steps are single launches here: mont_multi_exp finishes its reduction
  over the columns in the same launch, mont_prod_groups (histograms) and mont_inverse
  (Montgomery's batch trick) are one launch each, and the DJN fixed-base encryptions read a comb
  table uploaded once per key into device memory.  These kernels as of 72c8f0e ran on an H200
  (1.7-2.7x the one-thread family); they have been reworked since without a GPU, checked bit for
  bit against ``cpu`` through the host harness, and ``bench/gpu_checks.sh`` measures the old and
  new ones side by side on the first GPU it gets (docs/backends/gpu.md).

The option ``kernels`` (:class:`~unifl.backends.gpu.options.GpuOptions`) picks the family of the
ops that have both: ``thread``, ``group``, or ``auto`` (default), which times both once per size
class on this device (:meth:`GpuBackend._auto_group`) and keeps the faster.  A family that does
not take a key (the group CRT kernels need primes of at most 2048 bits) is refused with an
OperandError naming it, never swapped silently; ``auto`` and the backend decide.

Residency: every op's result stays in device memory as a ``GpuBatch`` (``unifl.base_op.DeviceBatch``)
and the next op on this backend reads it there, so an SDK chain -- encrypt, ``+``, ``*``, ``@``,
obfuscate, decrypt -- crosses the bus once each way; host operands are staged per call, and the first
use that needs values on the host (another backend, indexing, serialisation) fetches the batch once.
Per-key constants are uploaded once per device and copied into shared memory by each block
(Alg. 4 lines 5-9).

Kernels are templates over the limb capacity LMAX in {16, 32, 48, 64, 96, 128}: a modulus of L
limbs (64..8192 bits) runs in the smallest class >= L with loops over its own L, so results are
bit-identical to ``cpu`` with R = 2^(64·L), in both families.

Single source: every kernel body is a ``__host__ __device__`` function (``src/kernels.cuh``,
``src/kernels_group.cuh`` with a lane-policy template: warp shuffles on the device, lanes in
lockstep on the host); the test suite runs the same bodies on the CPU through the host harness
(``host.py``, backend ``gpu_host``) in the equivalence harness.  The CUDA library is compiled
(nvcc, warnings as errors) in CI, which has no GPU; tests marked ``gpu`` run the equivalence checks
on a real device (the thread family's ran on an H100, docs/backends/gpu.md).
"""

from __future__ import annotations

import math
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.errors import BackendUnavailable
from ...core.backend import ProbeResult
from ...core.contract import Limbs
from ...core.errors import ConfigError, OperandError
from ...core.montgomery import MontContext, mont_context
from . import keys
from .kernel_backend import KIND_CTX, MOD_EXP, KernelBackend, _c
from .options import GpuOptions

if TYPE_CHECKING:
    from .runtime import CudaEngine


#: the calibration of ``kernels="auto"``: instances per timed ModExp batch (one default wave, so
#: both families see the load an FL batch gives them: 10^4+ instances, where the one-thread
#: kernels are full; a smaller batch would favour the group kernels, which fill the device with
#: TPI× fewer instances), and the exponent work per instance, in 2048-bit-modulus MontMult units
#: (see _calibration_exponent_bits)
CALIBRATION_BATCH = 16384
CALIBRATION_REPEATS = 2
#: a family whose untimed warm-up already took more than CALIBRATION_LOSES times the leader's
#: best plus CALIBRATION_SLACK_S is not timed further: what a first launch adds on a live context
#: is milliseconds, so its steady time is still over the leader's.  On an H200 the one-thread
#: family's 4096-bit batch took 1.3 s against the group's 0.13 s, and timing it twice more was
#: 2.6 s of a party's start.
CALIBRATION_LOSES = 2.0
CALIBRATION_SLACK_S = 0.05


def _calibration_exponent_bits(size_class: int) -> int:
    """Exponent length of the ``auto`` calibration for a size class: full width (the class's
    modulus width) up to 2048-bit moduli; above, shorter, so that one timed batch costs about what
    a 2048-bit ModExp batch does (a MontMult of c limbs costs (c/32)² of a 2048-bit one) and the
    one-time calibration of an 8192-bit class stays around a second instead of a minute.  The
    choice compares MontMult speed, which the exponent length scales the same in both families
    (both build the same 16-entry window table); at least 256 bits keep the table's 15 products
    a minor share."""
    bits = 64 * size_class
    return max(256, min(bits, 2048 * 32 * 32 // (size_class * size_class)))


#: the two kernel families of ``kernels``
FAMILIES = ("thread", "group")


def recorded_choices(state: Any) -> dict[int, tuple[str, dict[str, float | str]]]:
    """The ``kernels: auto`` choices in a tuning record (:meth:`GpuBackend.tuning`'s form, read
    from a file: anything but a size class of the kernels mapped to a family name is dropped), with
    the finite positive rates recorded beside each."""
    if not isinstance(state, dict) or not isinstance(state.get("kernel_choice"), dict):
        return {}
    timing = state.get("kernel_timing")
    timing = timing if isinstance(timing, dict) else {}
    out: dict[int, tuple[str, dict[str, float | str]]] = {}
    for key, family in state["kernel_choice"].items():
        if not isinstance(key, str) or not key.isdigit() or family not in FAMILIES:
            continue
        size_class = int(key)
        if size_class not in keys.CLASSES:
            continue
        t = timing.get(key)
        rates: dict[str, float | str] = {
            f: float(v) for f, v in (t.items() if isinstance(t, dict) else ())
            if f in FAMILIES and isinstance(v, (int, float)) and not isinstance(v, bool)
            and math.isfinite(v) and v > 0}
        out[size_class] = (family, rates)
    return out


class GpuBackend(KernelBackend):
    """The CUDA backend (see the module docstring).

    Kernel family (option ``kernels``): ``thread`` or ``group`` fix it for every op that has both;
    ``auto`` decides per size class of the modulus (16, 32, 48, 64, 96, 128 limbs) by measurement,
    the first time an op meets the class on this instance: one calibration batch of
    :data:`CALIBRATION_BATCH` ModExps with a random odd modulus of the class's full width and random
    full-length exponents (shorter above 2048 bits, :func:`_calibration_exponent_bits`), base
    resident on the device, run once untimed by each family and then timed
    :data:`CALIBRATION_REPEATS` times each (the cooperative family first; the other is not timed
    further when its warm-up alone is over :data:`CALIBRATION_LOSES` times the first's best); the
    faster family's best time wins.  The choice is kept
    in :attr:`kernel_choice` (class -> ``"thread"``/``"group"``) and the rates behind it in
    :attr:`kernel_timing`, for reports.  A family that refuses the calibration modulus
    (OperandError: e.g. a device with too little shared memory per block for the group tables)
    loses, and the reason is recorded there instead of a rate.  The CRT ops follow the choice of
    n²'s class (``KernelBackend._crt_group``).  The choices outlive the process: under the key of
    :meth:`tuning_key` the scheduler records them and gives them to the next instance
    (:mod:`unifl.scheduler.tuning`), so a machine times each class once.
    """

    name = "gpu"
    one_device_per_instance = True

    options_model = GpuOptions
    options: GpuOptions
    engine: "CudaEngine"

    def __init__(self, **options: Any) -> None:
        """``options``: see :class:`~unifl.backends.gpu.options.GpuOptions` (``device``,
        ``kernels``, ``window``, ``lanes``, ``cgbn``)."""
        super().__init__(**options)
        from .runtime import SHAPE_AUTO, SHAPE_NORMAL, SHAPE_WIDE, CudaEngine
        window = self.options.window
        shape = {"auto": SHAPE_AUTO, "normal": SHAPE_NORMAL, "wide": SHAPE_WIDE}[self.options.lanes]
        self.engine = CudaEngine(self.options.device, 0 if window == "auto" else window, shape)
        self.kernels = self.options.kernels
        #: ``auto``: the family chosen per size class (limbs) and the calibration behind it
        self.kernel_choice: dict[int, str] = {}
        self.kernel_timing: dict[int, dict[str, float | str]] = {}
        self._choice_lock = threading.Lock()
        #: use the optional CGBN ModExp (only in a CGBN build; docs/backends/gpu.md) -- UNIFL_GPU_CGBN=1
        cgbn = self.options.cgbn
        self.cgbn = os.environ.get("UNIFL_GPU_CGBN") == "1" if cgbn is None else cgbn

    def _auto_group(self, size_class: int) -> bool:
        """``auto``: the faster family for this size class, measured once (class docstring)."""
        with self._choice_lock:
            if size_class not in self.kernel_choice:
                self.kernel_timing[size_class] = timing = self._calibrate(size_class)
                rates = {fam: v for fam, v in timing.items() if isinstance(v, float)}
                if not rates:
                    raise OperandError(f"gpu: neither kernel family takes the {64 * size_class}-"
                                       f"bit size class: {timing}")
                self.kernel_choice[size_class] = max(rates, key=lambda fam: rates[fam])
            return self.kernel_choice[size_class] == "group"

    # ---- the auto choice, kept across processes (unifl.scheduler.tuning) ------------------------
    def tuning_key(self) -> str | None:
        """``kernels: auto`` only: the device's name, the CUDA library's digest and the options
        that change what the calibration compares (window, lanes, CGBN)."""
        if self.kernels != "auto":
            return None
        from .runtime import devices, library_digest
        device = devices()[self.engine.device].split(" ", 1)[-1]
        o = self.options
        return (f"{device}|lib {library_digest()}|window {o.window}|lanes {o.lanes}|"
                f"cgbn {bool(self.cgbn)}")

    def tuning(self) -> dict[str, Any]:
        """The family chosen per size class and the measured rates behind each choice."""
        with self._choice_lock:
            return {"kernel_choice": {str(c): f for c, f in sorted(self.kernel_choice.items())},
                    "kernel_timing": {str(c): {f: v for f, v in t.items() if f in FAMILIES}
                                      for c, t in sorted(self.kernel_timing.items())}}

    def adopt_tuning(self, state: Any) -> int:
        """Take the choices of :meth:`tuning`'s form that check out (a size class of the kernels,
        a family name); a class already decided here keeps its own.  The adopted timing says
        ``"source": "record"``."""
        took = 0
        with self._choice_lock:
            for size_class, (family, rates) in recorded_choices(state).items():
                if size_class not in self.kernel_choice:
                    self.kernel_choice[size_class] = family
                    self.kernel_timing[size_class] = {**rates, "source": "record"}
                    took += 1
        return took

    def _calibrate(self, size_class: int) -> dict[str, float | str]:
        """ModExps per second of each family on one calibration batch of this size class (or the
        OperandError that refused it)."""
        bits, n = 64 * size_class, CALIBRATION_BATCH
        rng = np.random.default_rng()        # timing data: no secret, no CSPRNG needed
        m = int.from_bytes(os.urandom(bits // 8), "little") | (1 << (bits - 1)) | 1
        ctx = mont_context(m)
        key = self.engine.prepare(keys.ctx_blob(ctx), KIND_CTX)
        base = rng.integers(0, 1 << 64, size=(n, size_class), dtype=np.uint64, endpoint=False)
        base[:, -1] >>= np.uint64(1)          # < 2^(bits − 1) <= m
        ebits = _calibration_exponent_bits(size_class)
        le = -(-ebits // 64)
        exps = rng.integers(0, 1 << 64, size=(n, le), dtype=np.uint64, endpoint=False)
        top = ebits - 64 * (le - 1)
        exps[:, -1] &= np.uint64((1 << top) - 1)
        exps[:, -1] |= np.uint64(1 << (top - 1))   # full length: every window is worked
        resident = self.engine.upload(base)
        out: dict[str, float | str] = {}
        leader = float("inf")                 # the best time of the families measured so far
        for fam, group in (("group", True), ("thread", False)):
            t0 = time.perf_counter()
            try:
                self.engine.exp(key, resident, exps, MOD_EXP, group)     # warm-up (and the check)
            except OperandError as exc:
                out[fam] = f"refused: {exc}"
                continue
            warm_up = time.perf_counter() - t0
            if warm_up > CALIBRATION_LOSES * leader + CALIBRATION_SLACK_S:
                out[fam] = (f"lost: its warm-up took {warm_up:.3f} s, over "
                            f"{CALIBRATION_LOSES:g}x the leader's {leader:.3f} s")
                continue
            best = float("inf")
            for _ in range(CALIBRATION_REPEATS):
                t0 = time.perf_counter()
                self.engine.exp(key, resident, exps, MOD_EXP, group)
                best = min(best, time.perf_counter() - t0)
            out[fam] = n / best
            leader = min(leader, best)
        return out

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

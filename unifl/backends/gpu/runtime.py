"""ctypes face of ``libunifl_gpu.so`` (built by nvcc from ``src/kernels.cu``,
``src/device_runtime.cu`` and ``src/c_api.cu``; the C interface is the last).

A :class:`CudaEngine` drives ONE device (the ``device`` option of the gpu backend): keys are
uploaded to it, every op runs on it, and a batch split over several GPUs is the scheduler's business
(``unifl.scheduler.multi``, one backend instance per device).  Every op returns a
:class:`GpuBatch`: the result stays in that device's memory, and is used there by the next op that
takes it, until something fetches it (``unifl.base_op.DeviceBatch``).  A batch of another device
is fetched and staged like host rows.

Why ctypes and not a pybind11 module compiled by nvcc: the library has a plain C ABI, so it needs
neither Python headers nor pybind11 under nvcc, it is linked with the static CUDA runtime (no
``libcudart.so`` to find at run time), and a machine without a driver loads it fine and gets an
error code from ``cudaGetDeviceCount`` (35, insufficient driver; 100, no device) that the probe
turns into a reason, where an import-time failure would hide it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import threading
from typing import Any, Callable, TypeGuard

import numpy as np

from ...core.contract import Limbs
from ...core.exponents import check_covered
from ...core.limbs import DeviceBatch
from ...core.errors import BackendUnavailable, ConfigError, DeviceError, OperandError
from . import layout

HERE = os.path.dirname(__file__)
LIB_NAME = "libunifl_gpu.so"
BUILD_INFO = os.path.join(HERE, "_build_info.json")

CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
#: the library's own error codes (src/device_runtime.cuh, c_api.cu); these are the caller's:
#: OperandError
ERR_SIZE = -1      # a size outside what the (chosen family of) kernels is instantiated for
ERR_LAYOUT = -4    # a device batch or table lives on another device than the op
ERR_SHAPE = -5     # operand rows / limbs (or a plan, a table) do not fit the op
ERR_SMEM = -6      # a group launch needs more shared memory per block than the device allows
ERR_WINDOW = -7    # a window other than 0 (chosen by occupancy), 3, 4, 5
_OPERAND_ERRORS = (ERR_SIZE, ERR_LAYOUT, ERR_SHAPE, ERR_SMEM, ERR_WINDOW)

#: CudaEngine.shape: the cooperative exponentiation kernels' shape (launch.cuh's Tuning)
SHAPE_AUTO, SHAPE_NORMAL, SHAPE_WIDE = 0, 1, 2

_u64p = ctypes.POINTER(ctypes.c_uint64)
_i64p = ctypes.POINTER(ctypes.c_longlong)
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def build_info() -> dict[str, Any]:
    """What setup.py recorded about the CUDA build (``{"built": bool, "reason": str, ...}``)."""
    try:
        with open(BUILD_INFO, encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"built": False, "reason": "setup.py build_ext has not run in this tree"}


def library_path() -> str:
    return os.path.join(HERE, LIB_NAME)


_digest: str | None = None


def library_digest() -> str:
    """SHA-256 of the CUDA library's bytes, first 16 hex digits (read once per process): names
    the exact kernels behind a measurement kept across processes (``GpuBackend.tuning_key``)."""
    global _digest
    if _digest is None:
        h = hashlib.sha256()
        with open(library_path(), "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        _digest = h.hexdigest()[:16]
    return _digest


def _signatures() -> dict[str, tuple[list[Any], Any]]:
    """name -> (argtypes, restype) of every C function the engine calls (``src/c_api.cu``; keep
    the two in step)."""
    c_int, c_ll, vp = ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p
    vpp = ctypes.POINTER(ctypes.c_void_p)
    ip = ctypes.POINTER(ctypes.c_int)
    return {
        "unifl_gpu_device_count": ([ip], c_int),
        "unifl_gpu_error_string": ([c_int], ctypes.c_char_p),
        "unifl_gpu_device_name": ([c_int, ctypes.c_char_p, c_int], c_int),
        "unifl_gpu_counters": ([c_int, ctypes.POINTER(c_ll)], c_int),
        "unifl_gpu_last_tuning": ([c_int, ip, ip], c_int),
        "unifl_gpu_key_upload": ([_u64p, c_ll, c_int, c_int, vpp], c_int),
        "unifl_gpu_key_classes": ([vp, ip, ip], None),
        "unifl_gpu_key_free": ([vp], None),
        "unifl_gpu_table_upload": ([_u64p, c_ll, c_int, vpp], c_int),
        "unifl_gpu_table_free": ([vp], None),
        "unifl_gpu_batch_upload": ([_u64p, c_ll, c_int, c_int, vpp], c_int),
        "unifl_gpu_batch_download": ([vp, _u64p], c_int),
        "unifl_gpu_batch_shape": ([vp, ctypes.POINTER(c_ll), ip, ip], None),
        "unifl_gpu_batch_free": ([vp], None),
        # (key, a, b, n, mode, group, &out)
        "unifl_gpu_mul": ([vp, Operand, Operand, c_ll, c_int, c_int, vpp], c_int),
        # (key, base, exps, n, mode, group, window, shape, &out)
        "unifl_gpu_exp": ([vp, Operand, Operand, c_ll, c_int, c_int, c_int, c_int, vpp], c_int),
        # (key, bases, N, exps, K, le, group, chunk, window, &out)
        "unifl_gpu_multi_exp": ([vp, Operand, c_ll, _u64p, c_ll, c_int, c_int, c_ll, c_int, vpp],
                                c_int),
        # (pub, m, r, n, group, window, shape, &out)
        "unifl_gpu_paillier_encrypt": ([vp, Operand, Operand, c_ll, c_int, c_int, c_int, vpp],
                                       c_int),
        # (owner, m, yp, yq, n, group, window, &out)
        "unifl_gpu_paillier_encrypt_owner": ([vp, Operand, Operand, Operand, c_ll, c_int, c_int,
                                              vpp], c_int),
        # (priv, c, n, group, window, &out)
        "unifl_gpu_paillier_decrypt": ([vp, Operand, c_ll, c_int, c_int, vpp], c_int),
        # (key, a, n, order, plan, chunks, num_groups, &out)
        "unifl_gpu_prod_groups": ([vp, Operand, c_ll, _i64p, _i64p, c_ll, c_ll, vpp], c_int),
        # (key, a, n, chunk, &out, &bad)
        "unifl_gpu_inverse": ([vp, Operand, c_ll, c_ll, vpp, ctypes.POINTER(ctypes.c_uint)],
                              c_int),
        # (pub, table, w, nwin, m, a, La, n, &out)
        "unifl_gpu_fixed_base": ([vp, vp, c_int, c_int, Operand, _u64p, c_int, c_ll, vpp], c_int),
        # (owner, tp, tq, w, nwin, m, ap, aq, La, n, &out)
        "unifl_gpu_owner_fixed_base": ([vp, vp, vp, c_int, c_int, Operand, _u64p, _u64p, c_int,
                                        c_ll, vpp], c_int),
    }


def load_library() -> ctypes.CDLL:
    """The CUDA library, loaded once; BackendUnavailable with the build's reason when absent, or
    naming the missing function when the library predates this module (a stale build)."""
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not os.path.exists(path):
            reason = build_info().get("reason", "unknown")
            raise BackendUnavailable(f"CUDA kernels not built: {reason}")
        try:
            lib = ctypes.CDLL(path)
        except OSError as exc:
            raise BackendUnavailable(f"CUDA library {LIB_NAME} cannot be loaded: {exc}") from exc
        for name, (argtypes, restype) in _signatures().items():
            try:
                fn = getattr(lib, name)
            except AttributeError:
                raise BackendUnavailable(
                    f"CUDA library {LIB_NAME} lacks {name}: it is older than runtime.py "
                    "(rebuild: UNIFL_CUDA_BUILD=1 python setup.py build_ext --inplace)") from None
            fn.argtypes = argtypes
            fn.restype = restype
        if hasattr(lib, "unifl_gpu_cgbn_mod_exp"):          # optional CGBN build
            lib.unifl_gpu_cgbn_mod_exp.argtypes = [ctypes.c_int, _u64p, ctypes.c_int, _u64p, _u64p,
                                                   ctypes.c_int, ctypes.c_int, _u64p,
                                                   ctypes.c_longlong]
        _lib = lib
        return lib


def error_string(lib: ctypes.CDLL, err: int) -> str:
    return lib.unifl_gpu_error_string(err).decode(errors="replace")


def device_count() -> int:
    """How many CUDA devices there are; BackendUnavailable ("no CUDA driver", "no device") if none."""
    return len(devices())


def devices() -> list[str]:
    """Names of the CUDA devices; BackendUnavailable ("no CUDA driver", "no device") if none."""
    lib = load_library()
    count = ctypes.c_int(0)
    err = lib.unifl_gpu_device_count(ctypes.byref(count))
    if err == CUDA_ERROR_INSUFFICIENT_DRIVER:
        raise BackendUnavailable(f"no CUDA driver ({error_string(lib, err)})")
    if err == CUDA_ERROR_NO_DEVICE or (err == 0 and count.value == 0) or err == -2:
        raise BackendUnavailable("no device (cudaGetDeviceCount found no CUDA GPU)")
    if err:
        raise BackendUnavailable(f"CUDA initialisation failed: {error_string(lib, err)} ({err})")
    names = []
    buf = ctypes.create_string_buffer(256)
    for d in range(count.value):
        lib.unifl_gpu_device_name(d, buf, 256)
        names.append(f"cuda:{d} {buf.value.decode(errors='replace')}")
    return names


def _ptr(a: np.ndarray) -> ctypes._Pointer[ctypes.c_uint64]:
    return a.ctypes.data_as(_u64p)



class Operand(ctypes.Structure):
    """An op's operand for the C interface: a device batch, or host rows (1 = shared by the batch)."""

    _fields_ = [("batch", ctypes.c_void_p), ("host", _u64p), ("rows", ctypes.c_longlong),
                ("limbs", ctypes.c_int)]


class GpuBatch(DeviceBatch):
    """An (N, L) limb batch in the memory of one CUDA device (limb-major); freed with the object."""

    def __init__(self, lib: ctypes.CDLL, handle: ctypes.c_void_p) -> None:
        n, L, device = ctypes.c_longlong(), ctypes.c_int(), ctypes.c_int()
        lib.unifl_gpu_batch_shape(handle, ctypes.byref(n), ctypes.byref(L), ctypes.byref(device))
        super().__init__((n.value, L.value))
        self._lib = lib
        self.handle: ctypes.c_void_p | None = handle
        #: the CUDA device index the values live on
        self.device = device.value

    def _download(self) -> np.ndarray:
        out = np.empty(self.shape, np.uint64)
        _check(self._lib, self._lib.unifl_gpu_batch_download(self.handle, _ptr(out)))
        return out

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            self._lib.unifl_gpu_batch_free(self.handle)
            self.handle = None


#: key blob kinds (kernel_backend.KIND_*), for messages
_KIND_NAMES = {0: "modulus context", 1: "Paillier public key", 2: "Paillier private key",
               3: "key-owner encryption key"}


def _blob_sizes(blob: np.ndarray, kind: int) -> dict[str, int]:
    """The limb counts an op checks its operands against, read from a key blob along its table
    (``src/key_layout.h`` through :mod:`.layout`): ``L`` (a modulus context), ``L2``/``Ln`` (every
    Paillier kind), ``Lp2``/``Lq2`` and ``Lp``/``Lq`` (owner)."""
    if kind not in layout.KINDS:
        raise OperandError(f"gpu: unknown key blob kind {kind}")
    try:
        w = layout.walk(layout.KINDS[kind], blob)
    except layout.LayoutError as exc:
        raise OperandError(f"gpu: a malformed {_KIND_NAMES[kind]} blob: {exc}") from None
    if kind == 0:
        return {"L": w.words["L"]}
    if kind == 1:
        return {"L2": w.ctx_limbs["n2"], "Ln": w.words["Ln"]}
    if kind == 2:
        return {"L2": w.words["L2"], "Ln": w.words["Ln"]}
    return {"L2": w.ctx_limbs["n2"], "Lp2": w.ctx_limbs["p2"], "Lq2": w.ctx_limbs["q2"],
            "Ln": w.words["Ln"], "Lp": w.words["Lp"], "Lq": w.words["Lq"]}


class DeviceKey:
    """A key blob uploaded once to one device; freed with the object.  ``lmax`` / ``glmax``: the
    size classes (64-bit limbs) the one-thread and the group kernels run it in, 0 where that family
    does not take the key (the CRT group kernels need 4·max(Lp, Lq) limbs in one class: primes of at
    most 2048 bits)."""

    def __init__(self, lib: ctypes.CDLL, blob: np.ndarray, kind: int, device: int) -> None:
        self._lib = lib
        self.blob = np.ascontiguousarray(blob, dtype=np.uint64)
        self.kind = kind
        self.sizes = _blob_sizes(self.blob, kind)
        handle = ctypes.c_void_p()
        _check(lib, lib.unifl_gpu_key_upload(_ptr(self.blob), self.blob.size, kind, device,
                                             ctypes.byref(handle)),
               f"key upload ({_KIND_NAMES.get(kind, kind)})")
        self.handle: ctypes.c_void_p | None = handle
        lmax, glmax = ctypes.c_int(), ctypes.c_int()
        lib.unifl_gpu_key_classes(handle, ctypes.byref(lmax), ctypes.byref(glmax))
        self.lmax, self.glmax = lmax.value, glmax.value

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            self._lib.unifl_gpu_key_free(self.handle)
            self.handle = None


class DeviceTable:
    """A DJN comb table (nwin, 2^w − 1, L) uploaded once to one device's memory (plain device
    memory: at 9-10-bit windows it is megabytes); freed with the object."""

    def __init__(self, lib: ctypes.CDLL, table: np.ndarray, device: int) -> None:
        self._lib = lib
        t = np.ascontiguousarray(table, dtype=np.uint64)
        per = t.shape[1] if t.ndim == 3 else 0
        if t.ndim != 3 or t.shape[0] < 1 or t.shape[2] < 1 or per < 1 or (per + 1) & per \
                or per + 1 > 1 << 16:
            raise OperandError(f"gpu prepare_table: a comb table has shape (nwin, 2^w − 1, L) with "
                               f"nwin >= 1 and 1 <= w <= 16, got {t.shape}")
        self.shape: tuple[int, int, int] = (t.shape[0], t.shape[1], t.shape[2])
        self.device = device
        handle = ctypes.c_void_p()
        _check(lib, lib.unifl_gpu_table_upload(_ptr(t), t.size, device, ctypes.byref(handle)),
               "prepare_table")
        self.handle: ctypes.c_void_p | None = handle

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            self._lib.unifl_gpu_table_free(self.handle)
            self.handle = None


def _check(lib: ctypes.CDLL, err: int, what: str | None = None) -> None:
    """A library status as a typed error: the caller's (size, shape, layout, shared memory) as
    OperandError, anything CUDA reports as DeviceError (the fallback chain hands the batch on)."""
    if err in _OPERAND_ERRORS:
        msg = error_string(lib, err)
        raise OperandError(f"gpu {what}: {msg}" if what else msg)
    if err:
        raise DeviceError(f"CUDA error {err}{f' in {what}' if what else ''}: "
                          f"{error_string(lib, err)}")


def _shape_error(op: str, name: str, want: str, got: tuple[int, ...]) -> OperandError:
    return OperandError(f"gpu {op}: {name} must have shape {want}, got {tuple(got)}")


def _need_rows(op: str, name: str, x: Limbs, limbs: int, n: int | None = None,
               shared_ok: bool = False) -> int:
    """Checks an (n, limbs) operand (n|1 rows with ``shared_ok``); returns its row count."""
    shape = tuple(x.shape)
    if len(shape) != 2 or shape[1] != limbs or (
            n is not None and shape[0] != n and not (shared_ok and shape[0] == 1)):
        rows = "*" if n is None else f"{'1|' if shared_ok else ''}{n}"
        raise _shape_error(op, name, f"({rows}, {limbs})", shape)
    return int(shape[0])


def _plan_arrays(op: str, order: np.ndarray, plan: np.ndarray, n: int, num_groups: int
                 ) -> tuple[np.ndarray, np.ndarray]:
    """``order``/``plan`` of a one-launch grouped product (``kernel_backend.group_plan``) checked
    as the host harness checks them, plus what the device needs on top (every group has a chunk,
    the chunks of a group agree on its first chunk and count); int64 contiguous copies."""
    if np.asarray(order).dtype.kind not in "iu" or np.asarray(plan).dtype.kind not in "iu":
        raise OperandError(f"gpu {op}: order and plan must be integer arrays")
    order = np.ascontiguousarray(order, dtype=np.int64)
    plan = np.ascontiguousarray(plan, dtype=np.int64)
    if num_groups < 1:
        raise OperandError(f"gpu {op}: need at least one group, got {num_groups}")
    if order.shape != (n,):
        raise _shape_error(op, "order", f"({n},)", order.shape)
    if n and not np.array_equal(np.sort(order), np.arange(n, dtype=np.int64)):
        raise OperandError(f"gpu {op}: order must be a permutation of the {n} rows")
    if plan.ndim != 2 or plan.shape[1] != 5 or plan.shape[0] < 1:
        raise _shape_error(op, "plan", "(chunks >= 1, 5)", plan.shape)
    chunks = plan.shape[0]
    g, b, e, first, parts = plan.T
    c = np.arange(chunks, dtype=np.int64)
    ok = ((g >= 0) & (g < num_groups) & (b >= 0) & (b <= e) & (e <= n) & (parts >= 1)
          & (first >= 0) & (first + parts <= chunks) & (c >= first) & (c < first + parts))
    if ok.all():
        head = plan[first]
        ok = (head[:, 0] == g) & (head[:, 3] == first) & (head[:, 4] == parts)
    if not ok.all():
        raise OperandError(f"gpu {op}: inconsistent plan row {int(np.flatnonzero(~ok)[0])}")
    if (np.bincount(g, minlength=num_groups) == 0).any():
        raise OperandError(f"gpu {op}: group {int(np.flatnonzero(np.bincount(g, minlength=num_groups) == 0)[0])} "
                           "has no chunk in the plan (an empty group needs one empty chunk)")
    return order, plan


class CudaEngine:
    """Runs the kernels on CUDA device ``device``; operands are :class:`GpuBatch` of that device
    (used in place) or host arrays (staged for the call; a batch of another device is fetched),
    results are :class:`GpuBatch`.  ``group`` picks the cooperative kernels (``k_<op>_g``) over
    the one-thread ones; the ops with only a cooperative kernel (grouped products, inversion, the
    fixed-base encryptions) always run it.  Every operand shape is checked here, before the
    library is called: the kernels trust their inputs, and a device fault would poison the CUDA
    context of the whole process.

    Raises:
        ConfigError: ``device`` is not the index of a CUDA device of this machine.
    """

    #: groups of threads in flight that fill a device: the chunk sizes of the one-launch
    #: reductions (multi-exp, grouped products, inversion) aim at this many groups.  An H100 (132
    #: SMs) keeps 3 blocks of 128 threads per SM with window tables, i.e. 1,584 to 6,336 groups
    #: (TPI 32..8), and more without tables; 8192 leaves the scheduler a tail to balance.
    parallel_groups = 8192

    def __init__(self, device: int = 0, window: int = 0, shape: int = SHAPE_AUTO) -> None:
        self.lib = load_library()
        count = device_count()
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
            raise ConfigError(f"gpu: device must be a CUDA device index in [0, {count}), got "
                              f"{device!r}")
        if window not in (0, 3, 4, 5) or shape not in (SHAPE_AUTO, SHAPE_NORMAL, SHAPE_WIDE):
            raise ConfigError(f"gpu: window must be 0 (auto), 3, 4 or 5 and shape 0, 1 or 2, got "
                              f"{window!r}, {shape!r}")
        self.device = device
        #: the cooperative exponentiation kernels' window (0: by occupancy) and shape (SHAPE_*)
        self.window = window
        self.shape = shape

    def last_tuning(self) -> dict[str, int]:
        """What the last exponentiation-class launch on this device ran with: ``window`` bits and
        ``wide`` (1: the wide shape); zeros before any."""
        w, wide = ctypes.c_int(), ctypes.c_int()
        _check(self.lib, self.lib.unifl_gpu_last_tuning(self.device, ctypes.byref(w),
                                                        ctypes.byref(wide)))
        return {"window": w.value, "wide": wide.value}

    def prepare(self, blob: np.ndarray, kind: int) -> DeviceKey:
        return DeviceKey(self.lib, blob, kind, self.device)

    def prepare_table(self, table: np.ndarray) -> DeviceTable:
        """A comb table (nwin, 2^w − 1, L) uploaded once to this engine's device."""
        return DeviceTable(self.lib, table, self.device)

    def counters(self) -> dict[str, int]:
        """Kernel launches, host-to-device copies (key uploads included) and device-to-host copies
        on this engine's device since the process opened it (shared by engines of one device)."""
        out = (ctypes.c_longlong * 3)()
        _check(self.lib, self.lib.unifl_gpu_counters(self.device, out))
        return {"launches": out[0], "uploads": out[1], "downloads": out[2]}

    def holds(self, x: Any) -> TypeGuard[GpuBatch]:
        return (isinstance(x, GpuBatch) and x._lib is self.lib and bool(x.handle)
                and x.device == self.device)

    def upload(self, a: np.ndarray, like: GpuBatch | None = None) -> GpuBatch:
        """Host rows to a new batch on this engine's device.  ``like``, when given, must be one of
        this engine's batches (every batch of an engine lives on its one device)."""
        if like is not None and not self.holds(like):
            raise OperandError(f"upload(like=...): the batch is not on this engine's device "
                               f"cuda:{self.device}")
        a = np.ascontiguousarray(a, dtype=np.uint64)
        h = ctypes.c_void_p()
        _check(self.lib, self.lib.unifl_gpu_batch_upload(_ptr(a), a.shape[0], a.shape[1],
                                                         self.device, ctypes.byref(h)), "upload")
        return GpuBatch(self.lib, h)

    def _operand(self, x: Limbs, keep: list[np.ndarray]) -> Operand:
        if self.holds(x):
            return Operand(x.handle, None, x.shape[0], x.shape[1])
        x = np.asarray(x, dtype=np.uint64)     # a batch of another device is fetched here
        if x.ndim == 2 and x.shape[0] > 1 and x.strides[0] == 0:   # one row broadcast: shared
            x = np.ascontiguousarray(x[:1])
            rows = 1
        else:
            x = np.ascontiguousarray(x)
            rows = x.shape[0]
        keep.append(x)
        return Operand(None, _ptr(x), rows, x.shape[1])

    def _family(self, key: DeviceKey, group: bool, op: str) -> int:
        """``group`` as the C flag, after checking the chosen family takes the key: a refusal
        names the op and the key, and the caller (the backend's kernel choice) decides what to do
        -- the library never switches families on its own."""
        if group and not key.glmax:
            raise OperandError(
                f"gpu {op}: the cooperative (group) kernels do not take this "
                f"{_KIND_NAMES.get(key.kind, 'key')} (its CRT halves need a size class of "
                "4·max(Lp, Lq) limbs, at most 128: primes of at most 2048 bits); the one-thread "
                "kernels (kernels='thread') do")
        if not group and not key.lmax:
            raise OperandError(f"gpu {op}: the one-thread kernels do not take this "
                               f"{_KIND_NAMES.get(key.kind, 'key')}; the group kernels "
                               "(kernels='group') do")
        return int(group)

    def _run(self, op: str, fn: Callable[..., int], key: DeviceKey | None, xs: list[Limbs],
             *tail: Any, lead: tuple[Any, ...] = ()) -> GpuBatch:
        """``fn(*lead | key, *operands, *tail, &out)``: one op on this engine's device."""
        keep: list[np.ndarray] = []
        ops = [self._operand(x, keep) for x in xs]
        h = ctypes.c_void_p()
        head = lead if key is None else (key.handle,)
        _check(self.lib, fn(*head, *ops, *tail, ctypes.byref(h)), op)
        return GpuBatch(self.lib, h)

    # ---- ops of both families
    def mul(self, key: DeviceKey, a: Limbs, b: Limbs, mode: int, group: bool) -> GpuBatch:
        op = "mont_mul" if mode == 0 else "mod_mul"
        L = key.sizes["L"]
        n = _need_rows(op, "a", a, L)
        _need_rows(op, "b", b, L, n, shared_ok=True)
        return self._run(op, self.lib.unifl_gpu_mul, key, [a, b], n, mode,
                         self._family(key, group, op))

    def exp(self, key: DeviceKey, base: Limbs, exps: np.ndarray, mode: int, group: bool
            ) -> GpuBatch:
        op = "mont_exp" if mode == 0 else "mod_exp"
        n = _need_rows(op, "base", base, key.sizes["L"])
        if exps.ndim != 2 or exps.shape[1] < 1:
            raise _shape_error(op, "exps", f"(1|{n}, Le >= 1)", exps.shape)
        _need_rows(op, "exps", exps, exps.shape[1], n, shared_ok=True)
        return self._run(op, self.lib.unifl_gpu_exp, key, [base, exps], n, mode,
                         self._family(key, group, op), self.window, self.shape)

    def multi_exp(self, key: DeviceKey, bases: Limbs, exps: np.ndarray, group: bool, chunk: int
                  ) -> GpuBatch:
        op = "mont_multi_exp"
        N = _need_rows(op, "bases", bases, key.sizes["L"])
        if exps.ndim != 3 or exps.shape[1] != N or exps.shape[0] < 1 or exps.shape[2] < 1:
            raise _shape_error(op, "exps", f"(K >= 1, {N}, Le >= 1)", exps.shape)
        if N < 1:
            raise OperandError(f"gpu {op}: need at least one base")
        if group and chunk < 1:
            raise OperandError(f"gpu {op}: chunk must be >= 1, got {chunk}")
        k, n, le = exps.shape
        exps = np.ascontiguousarray(exps, dtype=np.uint64)
        flag = self._family(key, group, op)
        keep: list[np.ndarray] = []
        base_op = self._operand(bases, keep)
        h = ctypes.c_void_p()
        _check(self.lib, self.lib.unifl_gpu_multi_exp(key.handle, base_op, n, _ptr(exps), k, le,
                                                      flag, int(chunk), self.window,
                                                      ctypes.byref(h)), op)
        return GpuBatch(self.lib, h)

    def paillier_encrypt(self, pub: DeviceKey, m: Limbs, r: Limbs, group: bool) -> GpuBatch:
        op = "paillier_encrypt"
        Ln = pub.sizes["Ln"]
        n = _need_rows(op, "m", m, Ln)
        _need_rows(op, "r", r, Ln, n)
        return self._run(op, self.lib.unifl_gpu_paillier_encrypt, pub, [m, r], n,
                         self._family(pub, group, op), self.window, self.shape)

    def paillier_encrypt_owner(self, owner: DeviceKey, m: Limbs, yp: Limbs, yq: Limbs,
                               group: bool) -> GpuBatch:
        op = "paillier_encrypt_owner"
        sz = owner.sizes
        n = _need_rows(op, "m", m, sz["Ln"])
        _need_rows(op, "yp", yp, sz["Lp"], n)
        _need_rows(op, "yq", yq, sz["Lq"], n)
        return self._run(op, self.lib.unifl_gpu_paillier_encrypt_owner, owner, [m, yp, yq], n,
                         self._family(owner, group, op), self.window)

    def paillier_decrypt(self, priv: DeviceKey, c: Limbs, group: bool) -> GpuBatch:
        op = "paillier_decrypt"
        n = _need_rows(op, "c", c, priv.sizes["L2"])
        return self._run(op, self.lib.unifl_gpu_paillier_decrypt, priv, [c], n,
                         self._family(priv, group, op), self.window)

    # ---- ops with only a cooperative kernel (one launch each)
    def prod_groups(self, key: DeviceKey, a: Limbs, order: np.ndarray, plan: np.ndarray,
                    num_groups: int) -> GpuBatch:
        op = "mont_prod_groups"
        n = _need_rows(op, "a", a, key.sizes["L"])
        order, plan = _plan_arrays(op, order, plan, n, int(num_groups))
        self._family(key, True, op)
        return self._run(op, self.lib.unifl_gpu_prod_groups, key, [a], n,
                         order.ctypes.data_as(_i64p), plan.ctypes.data_as(_i64p), plan.shape[0],
                         int(num_groups))

    def inverse(self, key: DeviceKey, a: Limbs, chunk: int) -> tuple[GpuBatch, int]:
        """(a^-1·R rows, chunks with a non-invertible row): a non-zero count means the rows are
        undefined and the batch must be refused (kernel_backend does)."""
        op = "mont_inverse"
        n = _need_rows(op, "a", a, key.sizes["L"])
        if n < 1 or chunk < 1:
            raise OperandError(f"gpu {op}: need at least one row and chunk >= 1, got {n} rows, "
                               f"chunk {chunk}")
        self._family(key, True, op)
        keep: list[np.ndarray] = []
        operand = self._operand(a, keep)
        h, bad = ctypes.c_void_p(), ctypes.c_uint(0)
        _check(self.lib, self.lib.unifl_gpu_inverse(key.handle, operand, n, int(chunk),
                                                    ctypes.byref(h), ctypes.byref(bad)), op)
        return GpuBatch(self.lib, h), int(bad.value)

    def _fixed_base_args(self, op: str, tables: list[tuple[str, DeviceTable, int]], window: int,
                         m: Limbs, Ln: int, exps: dict[str, np.ndarray]
                         ) -> tuple[int, int, list[np.ndarray]]:
        """(nwin, n, the exponents as contiguous uint64, in order) after checking the tables (this
        device, shape (nwin, 2^w − 1, L) with one nwin), m (n, Ln) and each exponent batch
        (name -> (n, La), one La for all) against nwin·w."""
        if not 1 <= window <= 16:
            raise OperandError(f"gpu {op}: window must be in [1, 16], got {window}")
        nwin = tables[0][1].shape[0]
        for name, t, L in tables:
            if not isinstance(t, DeviceTable) or t.device != self.device or not t.handle:
                raise OperandError(f"gpu {op}: {name} is not a table of this engine's device "
                                   f"cuda:{self.device} (prepare_table)")
            want = (nwin, (1 << window) - 1, L)
            if t.shape != want:
                raise _shape_error(op, name, str(want), t.shape)
        n = _need_rows(op, "m", m, Ln)
        out: list[np.ndarray] = []
        for name, a in exps.items():
            a = np.asarray(a)
            if a.dtype != np.uint64 or a.ndim != 2 or a.shape[0] != n or a.shape[1] < 1:
                raise OperandError(f"gpu {op}: {name} must be a uint64 array of shape ({n}, "
                                   f"La >= 1), got {a.dtype} {a.shape}")
            if out and a.shape != out[0].shape:
                raise _shape_error(op, name, str(out[0].shape), a.shape)
            a = np.ascontiguousarray(a)
            # the kernel reads only the digits the table has: a longer exponent would be cut
            # silently
            check_covered(a, nwin * window)
            out.append(a)
        return nwin, n, out

    def fixed_base(self, pub: DeviceKey, table: DeviceTable, window: int, m: Limbs,
                   a: np.ndarray) -> GpuBatch:
        op = "paillier_encrypt_fixed_base"
        nwin, n, (a,) = self._fixed_base_args(op, [("table", table, pub.sizes["L2"])], window, m,
                                              pub.sizes["Ln"], {"a": a})
        self._family(pub, True, op)
        return self._run(op, self.lib.unifl_gpu_fixed_base, None, [m], _ptr(a), a.shape[1], n,
                         lead=(pub.handle, table.handle, window, nwin))

    def owner_fixed_base(self, owner: DeviceKey, tp: DeviceTable, tq: DeviceTable, window: int,
                         m: Limbs, ap: np.ndarray, aq: np.ndarray) -> GpuBatch:
        """bp^ap mod p² and bq^aq mod q² from the comb tables tp (of bp) and tq (of bq), combined
        and finished: the key owner's DJN encryption (one base, ap = aq) or its generators'."""
        op = "paillier_encrypt_owner_fixed_base"
        sz = owner.sizes
        tables = [("tp", tp, sz["Lp2"]), ("tq", tq, sz["Lq2"])]
        nwin, n, (ap, aq) = self._fixed_base_args(op, tables, window, m, sz["Ln"],
                                                  {"ap": ap, "aq": aq})
        self._family(owner, True, op)
        return self._run(op, self.lib.unifl_gpu_owner_fixed_base, None, [m], _ptr(ap), _ptr(aq),
                         ap.shape[1], n, lead=(owner.handle, tp.handle, tq.handle, window, nwin))

    def cgbn_mod_exp(self, key: DeviceKey, base: Limbs, exps: np.ndarray) -> np.ndarray | None:
        """The optional CGBN ModExp (built with CGBN_INCLUDE_DIR); None when not built in, when
        the sizes fall outside its classes (moduli up to 4096 bits, exponents no wider), for an
        even modulus or 1, or for operand shapes the default kernel should refuse."""
        if not hasattr(self.lib, "unifl_gpu_cgbn_mod_exp"):
            return None
        base = np.ascontiguousarray(base, dtype=np.uint64)    # (a host-array path: fetches)
        exps = np.ascontiguousarray(exps, dtype=np.uint64)
        L = int(key.blob[1])
        if base.ndim != 2 or base.shape[1] != L or exps.ndim != 2 \
                or exps.shape[0] not in (1, base.shape[0]):
            # the C side trusts these shapes; anything else goes to the default kernel's checks
            return None
        m = np.ascontiguousarray(key.blob[2:2 + L])
        out = np.empty_like(base)
        shared = int(exps.shape[0] == 1 and base.shape[0] != 1)
        err = self.lib.unifl_gpu_cgbn_mod_exp(self.device, _ptr(m), L, _ptr(base), _ptr(exps),
                                              exps.shape[1], shared, _ptr(out), base.shape[0])
        if err == ERR_SIZE:
            return None
        _check(self.lib, err)
        return out

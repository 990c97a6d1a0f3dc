"""ctypes face of ``libunifl_gpu.so`` (built by nvcc from ``src/gpu_runtime.cu``).

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
import json
import os
import threading
from typing import Any, Callable, TypeGuard

import numpy as np

from ...core.contract import Limbs
from ...core.limbs import DeviceBatch
from ...core.errors import BackendUnavailable, ConfigError, DeviceError, OperandError

HERE = os.path.dirname(__file__)
LIB_NAME = "libunifl_gpu.so"
BUILD_INFO = os.path.join(HERE, "_build_info.json")

CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
ERR_SIZE = -1

_u64p = ctypes.POINTER(ctypes.c_uint64)
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


def load_library() -> ctypes.CDLL:
    """The CUDA library, loaded once; BackendUnavailable with the build's reason when absent."""
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
        lib.unifl_gpu_device_count.argtypes = [ctypes.POINTER(ctypes.c_int)]
        lib.unifl_gpu_error_string.argtypes = [ctypes.c_int]
        lib.unifl_gpu_error_string.restype = ctypes.c_char_p
        lib.unifl_gpu_device_name.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.unifl_gpu_key_upload.argtypes = [_u64p, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                                             ctypes.POINTER(ctypes.c_void_p)]
        lib.unifl_gpu_counters.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_longlong)]
        lib.unifl_gpu_key_free.argtypes = [ctypes.c_void_p]
        lib.unifl_gpu_key_free.restype = None
        vpp = ctypes.POINTER(ctypes.c_void_p)
        lib.unifl_gpu_batch_upload.argtypes = [_u64p, ctypes.c_longlong, ctypes.c_int,
                                               ctypes.c_int, vpp]
        lib.unifl_gpu_batch_download.argtypes = [ctypes.c_void_p, _u64p]
        lib.unifl_gpu_batch_shape.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_longlong),
                                              ctypes.POINTER(ctypes.c_int),
                                              ctypes.POINTER(ctypes.c_int)]
        lib.unifl_gpu_batch_shape.restype = None
        lib.unifl_gpu_batch_free.argtypes = [ctypes.c_void_p]
        lib.unifl_gpu_batch_free.restype = None
        lib.unifl_gpu_mul.argtypes = [ctypes.c_void_p, Operand, Operand, ctypes.c_longlong,
                                      ctypes.c_int, vpp]
        lib.unifl_gpu_exp.argtypes = [ctypes.c_void_p, Operand, Operand, ctypes.c_longlong,
                                      ctypes.c_int, vpp]
        lib.unifl_gpu_multi_exp.argtypes = [ctypes.c_void_p, Operand, ctypes.c_longlong, _u64p,
                                            ctypes.c_longlong, ctypes.c_int, vpp]
        lib.unifl_gpu_paillier_encrypt.argtypes = [ctypes.c_void_p, Operand, Operand,
                                                   ctypes.c_longlong, vpp]
        lib.unifl_gpu_paillier_encrypt_owner.argtypes = [ctypes.c_void_p, Operand, Operand,
                                                         Operand, ctypes.c_longlong, vpp]
        lib.unifl_gpu_paillier_decrypt.argtypes = [ctypes.c_void_p, Operand, ctypes.c_longlong,
                                                   vpp]
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


class DeviceKey:
    """A key blob uploaded once to one device; freed with the object."""

    def __init__(self, lib: ctypes.CDLL, blob: np.ndarray, kind: int, device: int) -> None:
        self._lib = lib
        self.blob = np.ascontiguousarray(blob, dtype=np.uint64)
        handle = ctypes.c_void_p()
        _check(lib, lib.unifl_gpu_key_upload(_ptr(self.blob), self.blob.size, kind, device,
                                             ctypes.byref(handle)))
        self.handle: ctypes.c_void_p | None = handle

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            self._lib.unifl_gpu_key_free(self.handle)
            self.handle = None


def _check(lib: ctypes.CDLL, err: int) -> None:
    if err == ERR_SIZE:
        raise OperandError(error_string(lib, err))
    if err:
        raise DeviceError(f"CUDA error {err}: {error_string(lib, err)}")


class CudaEngine:
    """Runs the kernels on CUDA device ``device``; operands are :class:`GpuBatch` of that device
    (used in place) or host arrays (staged for the call; a batch of another device is fetched),
    results are :class:`GpuBatch`.

    Raises:
        ConfigError: ``device`` is not the index of a CUDA device of this machine.
    """

    def __init__(self, device: int = 0) -> None:
        self.lib = load_library()
        count = device_count()
        if isinstance(device, bool) or not isinstance(device, int) or not 0 <= device < count:
            raise ConfigError(f"gpu: device must be a CUDA device index in [0, {count}), got "
                              f"{device!r}")
        self.device = device

    def prepare(self, blob: np.ndarray, kind: int) -> DeviceKey:
        return DeviceKey(self.lib, blob, kind, self.device)

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
                                                         self.device, ctypes.byref(h)))
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

    def _run(self, fn: Callable[..., int], key: DeviceKey, xs: list[Limbs], *tail: int
             ) -> GpuBatch:
        """``fn(key, *operands, *tail, &out)``: one op on this engine's device."""
        keep: list[np.ndarray] = []
        ops = [self._operand(x, keep) for x in xs]
        h = ctypes.c_void_p()
        _check(self.lib, fn(key.handle, *ops, *tail, ctypes.byref(h)))
        return GpuBatch(self.lib, h)

    def mul(self, key: DeviceKey, a: Limbs, b: Limbs, mode: int) -> GpuBatch:
        return self._run(self.lib.unifl_gpu_mul, key, [a, b], a.shape[0], mode)

    def exp(self, key: DeviceKey, base: Limbs, exps: np.ndarray, mode: int) -> GpuBatch:
        return self._run(self.lib.unifl_gpu_exp, key, [base, exps], base.shape[0], mode)

    def multi_exp(self, key: DeviceKey, bases: Limbs, exps: np.ndarray) -> GpuBatch:
        k, n, le = exps.shape
        exps = np.ascontiguousarray(exps, dtype=np.uint64)
        keep: list[np.ndarray] = []
        op = self._operand(bases, keep)
        h = ctypes.c_void_p()
        _check(self.lib, self.lib.unifl_gpu_multi_exp(key.handle, op, n, _ptr(exps), k, le,
                                                      ctypes.byref(h)))
        return GpuBatch(self.lib, h)

    def paillier_encrypt(self, pub: DeviceKey, m: Limbs, r: Limbs) -> GpuBatch:
        return self._run(self.lib.unifl_gpu_paillier_encrypt, pub, [m, r], m.shape[0])

    def paillier_encrypt_owner(self, owner: DeviceKey, m: Limbs, yp: Limbs, yq: Limbs
                               ) -> GpuBatch:
        return self._run(self.lib.unifl_gpu_paillier_encrypt_owner, owner, [m, yp, yq], m.shape[0])

    def paillier_decrypt(self, priv: DeviceKey, c: Limbs) -> GpuBatch:
        return self._run(self.lib.unifl_gpu_paillier_decrypt, priv, [c], c.shape[0])

    def cgbn_mod_exp(self, key: DeviceKey, base: Limbs, exps: np.ndarray) -> np.ndarray | None:
        """The optional CGBN ModExp (built with CGBN_INCLUDE_DIR); None when not built in or when
        the sizes fall outside its classes (moduli up to 4096 bits, exponents no wider)."""
        if not hasattr(self.lib, "unifl_gpu_cgbn_mod_exp"):
            return None
        base = np.ascontiguousarray(base, dtype=np.uint64)    # (a host-array path: fetches)
        exps = np.ascontiguousarray(exps, dtype=np.uint64)
        L = int(key.blob[1])
        m = np.ascontiguousarray(key.blob[2:2 + L])
        out = np.empty_like(base)
        shared = int(exps.shape[0] == 1 and base.shape[0] != 1)
        err = self.lib.unifl_gpu_cgbn_mod_exp(self.device, _ptr(m), L, _ptr(base), _ptr(exps),
                                              exps.shape[1], shared, _ptr(out), base.shape[0])
        if err == ERR_SIZE:
            return None
        _check(self.lib, err)
        return out

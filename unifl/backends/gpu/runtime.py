"""ctypes face of ``libunifl_gpu.so`` (built by nvcc from ``src/gpu_runtime.cu``).

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

import numpy as np

from ...errors import BackendUnavailable, OperandError

HERE = os.path.dirname(__file__)
LIB_NAME = "libunifl_gpu.so"
BUILD_INFO = os.path.join(HERE, "_build_info.json")

CUDA_ERROR_INSUFFICIENT_DRIVER = 35
CUDA_ERROR_NO_DEVICE = 100
ERR_SIZE = -1

_u64p = ctypes.POINTER(ctypes.c_uint64)
_lock = threading.Lock()
_lib: ctypes.CDLL | None = None


def build_info() -> dict:
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
        lib.unifl_gpu_key_upload.argtypes = [_u64p, ctypes.c_longlong, ctypes.c_int,
                                             ctypes.POINTER(ctypes.c_void_p)]
        lib.unifl_gpu_key_free.argtypes = [ctypes.c_void_p]
        lib.unifl_gpu_key_free.restype = None
        lib.unifl_gpu_mul.argtypes = [ctypes.c_void_p, _u64p, _u64p, _u64p, ctypes.c_longlong,
                                      ctypes.c_int]
        lib.unifl_gpu_exp.argtypes = [ctypes.c_void_p, _u64p, _u64p, ctypes.c_int, ctypes.c_int,
                                      _u64p, ctypes.c_longlong, ctypes.c_int]
        lib.unifl_gpu_multi_exp.argtypes = [ctypes.c_void_p, _u64p, ctypes.c_longlong, _u64p,
                                            ctypes.c_longlong, ctypes.c_int, _u64p]
        lib.unifl_gpu_paillier_encrypt.argtypes = [ctypes.c_void_p, _u64p, _u64p, _u64p,
                                                   ctypes.c_longlong]
        lib.unifl_gpu_paillier_decrypt.argtypes = [ctypes.c_void_p, _u64p, _u64p, ctypes.c_longlong]
        if hasattr(lib, "unifl_gpu_cgbn_mod_exp"):          # optional CGBN build
            lib.unifl_gpu_cgbn_mod_exp.argtypes = [_u64p, ctypes.c_int, _u64p, _u64p, ctypes.c_int,
                                                   ctypes.c_int, _u64p, ctypes.c_longlong]
        _lib = lib
        return lib


def error_string(lib: ctypes.CDLL, err: int) -> str:
    return lib.unifl_gpu_error_string(err).decode(errors="replace")


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


def _ptr(a: np.ndarray):
    return a.ctypes.data_as(_u64p)


class DeviceKey:
    """A key blob uploaded once to every device; freed with the object."""

    def __init__(self, lib: ctypes.CDLL, blob: np.ndarray, kind: int) -> None:
        self._lib = lib
        self.blob = np.ascontiguousarray(blob, dtype=np.uint64)
        handle = ctypes.c_void_p()
        _check(lib, lib.unifl_gpu_key_upload(_ptr(self.blob), self.blob.size, kind,
                                             ctypes.byref(handle)))
        self.handle = handle

    def __del__(self) -> None:
        if getattr(self, "handle", None):
            self._lib.unifl_gpu_key_free(self.handle)
            self.handle = None


def _check(lib: ctypes.CDLL, err: int) -> None:
    if err == ERR_SIZE:
        raise OperandError(error_string(lib, err))
    if err:
        raise RuntimeError(f"CUDA error {err}: {error_string(lib, err)}")


class CudaEngine:
    """Runs the kernels on every CUDA device (batches split least-loaded first by the library)."""

    def __init__(self) -> None:
        self.lib = load_library()

    def prepare(self, blob: np.ndarray, kind: int) -> DeviceKey:
        return DeviceKey(self.lib, blob, kind)

    def mul(self, key: DeviceKey, a, b, mode):
        out = np.empty_like(a)
        _check(self.lib, self.lib.unifl_gpu_mul(key.handle, _ptr(a), _ptr(b), _ptr(out),
                                                a.shape[0], mode))
        return out

    def exp(self, key: DeviceKey, base, exps, mode):
        out = np.empty_like(base)
        shared = int(exps.shape[0] == 1 and base.shape[0] != 1)
        _check(self.lib, self.lib.unifl_gpu_exp(key.handle, _ptr(base), _ptr(exps), exps.shape[1],
                                                shared, _ptr(out), base.shape[0], mode))
        return out

    def multi_exp(self, key: DeviceKey, bases, exps):
        k, n, le = exps.shape
        out = np.empty((k, bases.shape[1]), np.uint64)
        _check(self.lib, self.lib.unifl_gpu_multi_exp(key.handle, _ptr(bases), n, _ptr(exps), k,
                                                      le, _ptr(out)))
        return out

    def cgbn_mod_exp(self, key: DeviceKey, base, exps):
        """The optional CGBN ModExp (built with CGBN_INCLUDE_DIR); None when not built in or when
        the sizes fall outside its classes (moduli up to 4096 bits, exponents no wider)."""
        if not hasattr(self.lib, "unifl_gpu_cgbn_mod_exp"):
            return None
        L = int(key.blob[1])
        m = np.ascontiguousarray(key.blob[2:2 + L])
        out = np.empty_like(base)
        shared = int(exps.shape[0] == 1 and base.shape[0] != 1)
        err = self.lib.unifl_gpu_cgbn_mod_exp(_ptr(m), L, _ptr(base), _ptr(exps), exps.shape[1],
                                              shared, _ptr(out), base.shape[0])
        if err == ERR_SIZE:
            return None
        _check(self.lib, err)
        return out

    def paillier_encrypt(self, pub: DeviceKey, m, r):
        l2 = int(pub.blob[1])
        out = np.empty((m.shape[0], l2), np.uint64)
        _check(self.lib, self.lib.unifl_gpu_paillier_encrypt(pub.handle, _ptr(m), _ptr(r),
                                                             _ptr(out), m.shape[0]))
        return out

    def paillier_decrypt(self, priv: DeviceKey, c):
        ln = int(priv.blob[-1])
        out = np.empty((c.shape[0], ln), np.uint64)
        _check(self.lib, self.lib.unifl_gpu_paillier_decrypt(priv.handle, _ptr(c), _ptr(out),
                                                             c.shape[0]))
        return out

"""Build UniFL and its native C++ extension.

The native backend links libcrypto.so.3 (OpenSSL 3), which every CPython on Debian/Ubuntu already
depends on; its BIGNUM declarations are our own (unifl/backends/native/src/bn_api.h), so no -dev
package and no root are needed.  Set UNIFL_NO_NATIVE=1 to skip the extension (the ``native`` backend
then probes unavailable and says so).
"""

import ctypes.util
import glob
import os

from setuptools import find_packages, setup

ext_modules = []
if os.environ.get("UNIFL_NO_NATIVE") != "1":
    from pybind11.setup_helpers import Pybind11Extension

    def _libcrypto_link_args():
        # prefer the unversioned dev symlink when present, else the runtime soname
        for d in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib",
                  "/usr/lib/aarch64-linux-gnu"):
            if os.path.exists(os.path.join(d, "libcrypto.so")):
                return [f"-L{d}", "-lcrypto"]
            if os.path.exists(os.path.join(d, "libcrypto.so.3")):
                return [f"-L{d}", "-l:libcrypto.so.3"]
        name = ctypes.util.find_library("crypto")
        if name:
            return [f"-l:{name}"]
        raise SystemExit("UniFL native backend: libcrypto.so.3 (OpenSSL 3) not found; "
                         "install libssl3 or set UNIFL_NO_NATIVE=1")

    ext_modules.append(Pybind11Extension(
        "unifl.backends.native._native",
        sorted(glob.glob("unifl/backends/native/src/*.cpp")),
        include_dirs=["unifl/backends/native/src"],
        cxx_std=17,
        extra_compile_args=["-O3", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        extra_link_args=_libcrypto_link_args(),
    ))

# ---- gpu backend (issue 4) ---------------------------------------------------------------------
# 1. The host harness: the CUDA kernel bodies compiled by the ordinary C++ compiler (always built;
#    no nvcc, no GPU) as unifl.backends.gpu._gpu_host, so the tests check them on the CPU.
# 2. libunifl_gpu.so: the CUDA kernels and runtime, compiled by nvcc when one is found (env NVCC,
#    then $CUDA_HOME/bin/nvcc, then the pip package nvidia-cuda-nvcc of this Python -- the pinned
#    13.0 of requirements-cuda.txt / the [cuda] extra --, then PATH) for sm_80 and sm_90 (SASS for
#    both, PTX for compute_90), every warning an error.  Without nvcc the build goes on and says why; the
#    reason is recorded in unifl/backends/gpu/_build_info.json for the gpu backend's probe.
#    UNIFL_NO_CUDA=1 skips it; UNIFL_REQUIRE_CUDA_BUILD=1 makes a missing nvcc or a failed compile
#    fatal (CI).  CGBN_INCLUDE_DIR=<CGBN>/include adds the optional CGBN variant (not needed by
#    default; see docs/gpu.md).
import json
import shutil
import subprocess
import sys

from setuptools.command.build_ext import build_ext as _build_ext

GPU_DIR = "unifl/backends/gpu"
GPU_SRC = sorted(glob.glob(f"{GPU_DIR}/src/*.cuh") + glob.glob(f"{GPU_DIR}/src/*.cu"))
GPU_ARCH_FLAGS = ["-gencode", "arch=compute_80,code=sm_80",
                  "-gencode", "arch=compute_90,code=[sm_90,compute_90]"]
GPU_PACKAGE_DATA = ["backends/gpu/src/*", "backends/gpu/libunifl_gpu.so",
                    "backends/gpu/_build_info.json"]

from pybind11.setup_helpers import Pybind11Extension as _GpuHostExtension  # noqa: E402

ext_modules.append(_GpuHostExtension(
    "unifl.backends.gpu._gpu_host",
    [f"{GPU_DIR}/src/gpu_host.cpp"],
    include_dirs=[f"{GPU_DIR}/src"],
    cxx_std=17,
    extra_compile_args=["-O2", "-Wall", "-Wextra"],
))


def _find_nvcc():
    """(path, how it was found) of nvcc, or (None, why not)."""
    if os.environ.get("NVCC"):
        return os.environ["NVCC"], "env NVCC"
    home_nvcc = os.path.join(os.environ.get("CUDA_HOME", ""), "bin", "nvcc")
    if os.environ.get("CUDA_HOME") and os.path.exists(home_nvcc):
        return home_nvcc, "CUDA_HOME"
    try:
        import nvidia  # the pip CUDA wheels' namespace package
        for root in nvidia.__path__:
            cand = os.path.join(root, "cu13", "bin", "nvcc")
            if os.path.exists(cand):
                return cand, "pip package nvidia-cuda-nvcc"
    except ImportError:
        pass
    found = shutil.which("nvcc")
    if found:
        return found, "PATH"
    return None, ("nvcc not found at build time (pip install -r requirements-cuda.txt, "
                  "or set NVCC/CUDA_HOME)")


def _build_cuda(out_dir):
    info = {"built": False}
    nvcc, how = (None, "UNIFL_NO_CUDA=1 at build time") if os.environ.get("UNIFL_NO_CUDA") == "1" \
        else _find_nvcc()
    target = os.path.join(out_dir, "libunifl_gpu.so")
    if nvcc is None:
        info["reason"] = how
        if os.path.exists(target):  # a stale library from an earlier build would contradict it
            os.remove(target)
    else:
        root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        srcs = GPU_SRC + [os.path.abspath(__file__)]
        fresh = os.path.exists(target) and all(
            os.path.getmtime(target) >= os.path.getmtime(s) for s in srcs)
        lib_dirs = [os.path.join(root, d) for d in ("lib", "lib64")
                    if os.path.isdir(os.path.join(root, d))]
        cmd = [nvcc, "-std=c++17", "-O3", "-shared", "-Xcompiler", "-fPIC",
               "-Xcompiler", "-Wall,-Werror", "-Werror", "all-warnings", *GPU_ARCH_FLAGS,
               f"-I{GPU_DIR}/src", *[f"-L{d}" for d in lib_dirs],
               f"{GPU_DIR}/src/gpu_runtime.cu", "-o", target]
        if os.environ.get("CGBN_INCLUDE_DIR"):
            cmd[1:1] = [f"-I{os.environ['CGBN_INCLUDE_DIR']}", "-DUNIFL_WITH_CGBN=1"]
        info.update(nvcc=nvcc, found_by=how, command=" ".join(cmd))
        try:
            info["nvcc_version"] = subprocess.run(
                [nvcc, "--version"], capture_output=True, text=True,
                check=True).stdout.strip().splitlines()[-1]
            if not fresh:
                print(f"unifl gpu: compiling CUDA kernels with {nvcc} ({how}) for sm_80, sm_90")
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode != 0:
                    if os.path.exists(target):
                        os.remove(target)
                    raise RuntimeError(f"nvcc failed ({res.returncode}):\n{res.stdout}{res.stderr}")
            info["built"] = True
            info["reason"] = f"built by {how}"
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            info["reason"] = f"CUDA compile failed: {exc}"
    with open(os.path.join(out_dir, "_build_info.json"), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=1)
    if not info["built"]:
        print(f"unifl gpu: CUDA kernels not built: {info['reason']}", file=sys.stderr)
        if os.environ.get("UNIFL_REQUIRE_CUDA_BUILD") == "1":
            raise SystemExit("UNIFL_REQUIRE_CUDA_BUILD=1 but the CUDA kernels were not built: "
                             + info["reason"])


class BuildExtWithCuda(_build_ext):
    """build_ext plus the nvcc-built CUDA library, next to the extension modules."""

    def run(self):
        super().run()
        # in place for --inplace and for editable installs (pip install -e: the package is the
        # source tree), so the Makefile's later `build_ext --inplace` finds it fresh and skips nvcc
        in_tree = self.inplace or getattr(self, "editable_mode", False)
        out_dir = GPU_DIR if in_tree else os.path.join(self.build_lib, GPU_DIR)
        os.makedirs(out_dir, exist_ok=True)
        _build_cuda(out_dir)


GPU_CMDCLASS = {"build_ext": BuildExtWithCuda}
GPU_EXTRAS = {"cuda": ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88",
                       "nvidia-cuda-crt==13.0.88", "nvidia-cuda-runtime==13.0.96"]}
# ------------------------------------------------------------------------------------------------

# ---- fpga backend (issue 3): its OpenCL C kernels are package data, built at run time ----------
FPGA_PACKAGE_DATA = ["backends/fpga/kernels/*.cl"]
# ------------------------------------------------------------------------------------------------

# ---- qat backend (issue 5): our QAT driver (pybind11, dlopens libqat/libusdm at run time) and ----
# ---- our QAT simulator, a plain C-ABI shared library (not a Python module) the driver can load ----
if os.environ.get("UNIFL_NO_NATIVE") != "1":
    from setuptools import Extension

    ext_modules.append(Pybind11Extension(
        "unifl.backends.qat._qat",
        ["unifl/backends/qat/src/qat_driver.cpp"],
        include_dirs=["unifl/backends/qat/src"],
        cxx_std=17,
        extra_compile_args=["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        extra_link_args=["-ldl", "-lpthread"],
    ))
    ext_modules.append(Extension(
        "unifl.backends.qat.libqat_sim",
        ["unifl/backends/qat/src/qat_sim.cpp"],
        language="c++",
        extra_compile_args=["-std=c++17", "-O2", "-fvisibility=hidden", "-Wall",
                            "-Wno-unused-parameter"],
        extra_link_args=_libcrypto_link_args() + ["-lpthread"],
    ))
# ---- FATE plugin (issue 7): FATE's component entry point.  No [fate] extra: pyfate 2.2.0 pins
# pydantic 1 while unifl.configs needs pydantic 2, so pip cannot resolve both in one environment.
# FATE runs in its own venv with unifl from the source tree (`make test-fate`, docs/fate.md).
FATE_ENTRY_POINTS = {"fate.ext.component_desc": [
    f"{name} = unifl.fate.components:{name}" for name in
    ("unifl_coordinated_lr", "unifl_coordinated_linr", "unifl_hetero_secureboost")]}
# ------------------------------------------------------------------------------------------------

setup(
    name="unifl",
    version="0.1.0",
    description="Unified heterogeneous acceleration of the cryptography of cross-silo federated learning",
    packages=find_packages(include=["unifl", "unifl.*"]),
    package_data={"unifl": ["configs/*.yaml", "app/transport/*.proto", "backends/*/src/*", "app/data/*"]
                  + FPGA_PACKAGE_DATA + GPU_PACKAGE_DATA},
    python_requires=">=3.10",
    install_requires=["numpy>=1.24", "gmpy2>=2.1", "pyyaml>=6", "pydantic>=2", "rich>=13",
                      "typer>=0.9", "tqdm>=4", "grpcio>=1.60", "protobuf>=5", "cryptography>=42"],
    extras_require={"test": ["pytest", "hypothesis", "phe"], **GPU_EXTRAS},
    cmdclass=GPU_CMDCLASS,
    ext_modules=ext_modules,
    entry_points={"console_scripts": ["unifl=unifl.cli:main"], **FATE_ENTRY_POINTS},
)

"""Build step of the ``gpu`` backend, run by setup.py (which finds every
``unifl/backends/<name>/build.py`` and loads it from its path, before unifl itself is importable;
so this file imports only the standard library, setuptools and pybind11).

1. The host harness ``unifl.backends.gpu._gpu_host``: the CUDA kernel bodies compiled by the
   ordinary C++ compiler (always built; no nvcc, no GPU), so the tests check them on the CPU.
2. ``libunifl_gpu.so``: the CUDA kernels and runtime (``src/kernels.cu``, ``src/device_runtime.cu``,
   ``src/c_api.cu``), compiled by nvcc after the extensions when one
   is found (env ``NVCC``, then ``$CUDA_HOME/bin/nvcc``, then the pip package nvidia-cuda-nvcc of
   this Python -- the pinned 13.0 of requirements-cuda.txt / the ``[cuda]`` extra --, then PATH)
   for sm_80 and sm_90 (SASS for both, PTX for compute_90; ``UNIFL_CUDA_ARCHS`` picks others),
   every warning an error.  Without nvcc
   the build goes on and says why; the reason is recorded in ``_build_info.json`` beside the
   library for the gpu backend's probe.  It is compiled only where it can run or is asked for:
   an NVIDIA driver on this machine (``/dev/nvidiactl``, ``/proc/driver/nvidia``), or
   ``UNIFL_CUDA_BUILD=1``, ``UNIFL_REQUIRE_CUDA_BUILD=1``, ``NVCC`` or ``CGBN_INCLUDE_DIR`` set;
   elsewhere the minutes of nvcc buy nothing, so the build says it skipped and how to ask for it.
   ``UNIFL_NO_CUDA=1`` (or ``UNIFL_CUDA_BUILD=0``) always skips it; ``UNIFL_REQUIRE_CUDA_BUILD=1``
   makes a missing nvcc or a failed compile fatal (CI).
   ``CGBN_INCLUDE_DIR=<CGBN>/include`` adds the optional CGBN variant (docs/backends/gpu.md).

The library is rebuilt only when a kernel source or this file is newer than it.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from setuptools import Extension

#: the library's translation units: the kernels and their launches (the only device code), the
#: device runtime, the C interface (src/*.cu; docs/backends/gpu.md, "Building")
SOURCES = ("kernels.cu", "device_runtime.cu", "c_api.cu")
#: SASS for A100 and H100/H200, PTX of the newest for later parts; UNIFL_CUDA_ARCHS=90 (a comma
#: list) builds fewer, e.g. on the GPU machine that only needs its own
DEFAULT_ARCHS = ("80", "90")
LIBRARY = "libunifl_gpu.so"


def arch_flags(env: dict[str, str] | None = None) -> list[str]:
    """nvcc's -gencode flags for UNIFL_CUDA_ARCHS (default 80,90): SASS for each, PTX for the
    newest; a malformed list is an error naming the variable."""
    env = dict(os.environ) if env is None else env
    text = env.get("UNIFL_CUDA_ARCHS", ",".join(DEFAULT_ARCHS))
    archs = [a.strip() for a in text.split(",") if a.strip()]
    if not archs or not all(a.isdigit() and len(a) in (2, 3) for a in archs):
        raise SystemExit(f"UNIFL_CUDA_ARCHS must be a comma list of compute capabilities such as "
                         f"80,90; got {text!r}")
    archs = sorted(set(archs), key=int)
    flags: list[str] = []
    for a in archs[:-1]:
        flags += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
    top = archs[-1]
    return [*flags, "-gencode", f"arch=compute_{top},code=[sm_{top},compute_{top}]"]
BUILD_INFO = "_build_info.json"


class BuildContext(Protocol):
    """What this step uses of setup.py's ``BuildContext`` (defined there: setup.py is not
    importable from here)."""

    folder: str
    package: str


def extensions(ctx: BuildContext) -> list[Extension]:
    """The host harness (the kernel bodies under g++)."""
    from pybind11.setup_helpers import Pybind11Extension

    src = os.path.join(ctx.folder, "src")
    return [Pybind11Extension(
        f"{ctx.package}._gpu_host",
        [os.path.join(src, "gpu_host.cpp")],
        # the kernel bodies it runs live in the headers: a change there must rebuild it
        depends=sorted(glob.glob(os.path.join(src, "*.cuh"))),
        include_dirs=[src],
        cxx_std=17,
        # -O3: the cooperative bodies run their lanes as small fixed loops that -O2 leaves unfused
        extra_compile_args=["-O3", "-Wall", "-Wextra"],
    )]


def package_data(ctx: BuildContext) -> list[str]:
    """The kernel sources, the nvcc-built library and the record of how it was (not) built; the
    type stub of the host harness (``_gpu_host.pyi``)."""
    return ["src/*", LIBRARY, BUILD_INFO, "*.pyi"]


def extras_require(ctx: BuildContext) -> dict[str, list[str]]:
    """``pip install unifl[cuda]``: the pinned nvcc toolchain from pip (no system CUDA needed), and
    cuobjdump + nvdisasm for the SASS counts of tools.gpu.proxies (13.2.51: PyPI has no 13.0 wheel)."""
    return {"cuda": ["nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88",
                     "nvidia-cuda-crt==13.0.88", "nvidia-cuda-runtime==13.0.96",
                     "nvidia-cuda-cuobjdump==13.2.51", "nvidia-cuda-nvdisasm==13.2.51"]}


def after_build_ext(ctx: BuildContext, out_dir: str) -> None:
    """Compile the CUDA library into ``out_dir`` (the source folder for in-place and editable
    builds, else the build tree) and record the outcome in ``_build_info.json``."""
    _build_cuda(ctx.folder, out_dir)


def _find_nvcc() -> tuple[str | None, str]:
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


#: where the NVIDIA kernel driver shows itself on Linux
DRIVER_MARKS = ("/dev/nvidiactl", "/proc/driver/nvidia/version")


def cuda_wanted(env: dict[str, str] | None = None) -> tuple[bool, str]:
    """(compile the CUDA library?, why): see the module doc."""
    env = dict(os.environ) if env is None else env
    if env.get("UNIFL_NO_CUDA") == "1" or env.get("UNIFL_CUDA_BUILD") == "0":
        return False, "skipped: UNIFL_NO_CUDA=1 / UNIFL_CUDA_BUILD=0 at build time"
    for var in ("UNIFL_REQUIRE_CUDA_BUILD", "UNIFL_CUDA_BUILD"):
        if env.get(var) == "1":
            return True, f"{var}=1"
    for var in ("NVCC", "CGBN_INCLUDE_DIR"):
        if env.get(var):
            return True, f"{var} is set"
    for mark in DRIVER_MARKS:
        if os.path.exists(mark):
            return True, f"an NVIDIA driver is here ({mark})"
    return False, ("skipped: no NVIDIA GPU driver on this machine at build time, so the kernels "
                   "could not run here; UNIFL_CUDA_BUILD=1 compiles them anyway (nvcc from "
                   "requirements-cuda.txt or the unifl[cuda] extra)")


def sources_digest(folder: str) -> str:
    """SHA-256 over the kernel sources (src/*.cu, *.cuh, *.h) and this file, names and contents:
    recorded in _build_info.json, so a copied tree can tell whether its library is its own
    (bench/gpu_checks.sh) whatever the copy did to file times."""
    src = os.path.join(folder, "src")
    paths = sorted(glob.glob(os.path.join(src, "*.cu")) + glob.glob(os.path.join(src, "*.cuh"))
                   + glob.glob(os.path.join(src, "*.h")))
    h = hashlib.sha256()
    for path in [*paths, os.path.abspath(__file__)]:
        h.update(os.path.basename(path).encode())
        with open(path, "rb") as fh:
            h.update(fh.read())
    return h.hexdigest()


def _build_cuda(folder: str, out_dir: str) -> None:
    info: dict[str, Any] = {"built": False}
    wanted, why = cuda_wanted()
    nvcc, how = (None, why) if not wanted else _find_nvcc()
    target = os.path.join(out_dir, LIBRARY)
    src = os.path.join(folder, "src")
    if nvcc is None:
        info["reason"] = how
        if os.path.exists(target):  # a stale library from an earlier build would contradict it
            os.remove(target)
    else:
        root = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
        # this file holds the flags: a change to it rebuilds the library like a source change
        srcs = sorted(glob.glob(os.path.join(src, "*.cuh")) + glob.glob(os.path.join(src, "*.cu"))
                      + glob.glob(os.path.join(src, "*.h")))
        srcs.append(os.path.abspath(__file__))
        fresh = os.path.exists(target) and all(
            os.path.getmtime(target) >= os.path.getmtime(s) for s in srcs)
        try:   # ... and built by the same command (other architectures, another nvcc: rebuild)
            with open(os.path.join(out_dir, BUILD_INFO), encoding="utf-8") as fh:
                before = json.load(fh)
        except (OSError, ValueError):
            before = {}
        lib_dirs = [os.path.join(root, d) for d in ("lib", "lib64")
                    if os.path.isdir(os.path.join(root, d))]
        # --threads 0: the two architectures compile in parallel (5 min -> under 3 on 2 cores)
        archs = arch_flags()
        cmd = [nvcc, "-std=c++17", "-O3", "--threads", "0", "-shared", "-Xcompiler", "-fPIC",
               "-Xcompiler", "-Wall,-Werror", "-Werror", "all-warnings", *archs,
               f"-I{src}", *[f"-L{d}" for d in lib_dirs],
               *[os.path.join(src, f) for f in SOURCES], "-o", target]
        if os.environ.get("CGBN_INCLUDE_DIR"):
            cmd[1:1] = [f"-I{os.environ['CGBN_INCLUDE_DIR']}", "-DUNIFL_WITH_CGBN=1"]
        info.update(nvcc=nvcc, found_by=how, command=" ".join(cmd),
                    sources=sources_digest(folder))
        fresh = fresh and before.get("built") is True and before.get("command") == info["command"]
        try:
            info["nvcc_version"] = subprocess.run(
                [nvcc, "--version"], capture_output=True, text=True,
                check=True).stdout.strip().splitlines()[-1]
            if not fresh:
                sms = ", ".join(f.split("code=")[1].split(",")[0].strip("[]") for f in archs
                                if f.startswith("arch="))
                print(f"unifl gpu: compiling CUDA kernels with {nvcc} ({how}) for {sms}")
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode != 0:
                    if os.path.exists(target):
                        os.remove(target)
                    raise RuntimeError(f"nvcc failed ({res.returncode}):\n{res.stdout}{res.stderr}")
            info["built"] = True
            info["reason"] = f"built by {how}"
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            info["reason"] = f"CUDA compile failed: {exc}"
            if os.path.exists(target):   # the record says "not built": no library may say otherwise
                os.remove(target)
    with open(os.path.join(out_dir, BUILD_INFO), "w", encoding="utf-8") as fh:
        json.dump(info, fh, indent=1)
    if not info["built"]:
        print(f"unifl gpu: CUDA kernels not built: {info['reason']}", file=sys.stderr)
        if os.environ.get("UNIFL_REQUIRE_CUDA_BUILD") == "1":
            raise SystemExit("UNIFL_REQUIRE_CUDA_BUILD=1 but the CUDA kernels were not built: "
                             + info["reason"])


if __name__ == "__main__":
    # `python unifl/backends/gpu/build.py`: the CUDA library alone, in place (no host extensions):
    # what bench/gpu_checks.sh runs on a GPU machine (with UNIFL_CUDA_ARCHS=90 for its own SASS)
    os.environ.setdefault("UNIFL_CUDA_BUILD", "1")
    here = os.path.dirname(os.path.abspath(__file__))
    _build_cuda(here, here)
    with open(os.path.join(here, BUILD_INFO), encoding="utf-8") as fh:
        done = json.load(fh)
    print(f"unifl gpu: {done['reason']}")
    sys.exit(0 if done.get("built") else 1)

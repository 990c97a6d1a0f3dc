"""The CUDA toolchain the proxies use: nvcc found as the gpu backend's build step finds it, the
tools beside it (cuobjdump, nvdisasm, cu++filt), demangling, and the sm_90 compile of the kernels
with ptxas's verbose report (a cubin and its log, or an existing cubin reused).

All of it comes from ``pip install -r requirements-cuda.txt`` (the ``unifl[cuda]`` extra).
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from .errors import CompileError, ParseError, ProxyError, ToolMissing

ROOT = Path(__file__).resolve().parents[2]
GPU_DIR = ROOT / "unifl" / "backends" / "gpu"
SRC_DIR = GPU_DIR / "src"
#: the translation unit that holds every kernel (the library's other files are host code)
SOURCE = SRC_DIR / "kernels.cu"
ARCH = "90"
INSTALL_HINT = "pip install -r requirements-cuda.txt (or the unifl[cuda] extra)"


_BUILD: ModuleType | None = None


def load_build_module() -> ModuleType:
    """``unifl/backends/gpu/build.py``, loaded by path as setup.py does (it imports only the
    standard library), so neither unifl nor the gpu backend's package is imported."""
    global _BUILD
    if _BUILD is None:
        spec = importlib.util.spec_from_file_location("unifl_gpu_build_for_proxies",
                                                      GPU_DIR / "build.py")
        if spec is None or spec.loader is None:
            raise ToolMissing(f"cannot load {GPU_DIR / 'build.py'}")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _BUILD = mod
    return _BUILD


def find_nvcc() -> str:
    """Path of nvcc, found as the build finds it (env NVCC, $CUDA_HOME/bin, the pip package
    nvidia-cuda-nvcc, PATH); :class:`ToolMissing` saying how to install it otherwise."""
    path, how = load_build_module()._find_nvcc()
    if path is None:
        raise ToolMissing(f"nvcc is needed to compile the kernels: {how}; install it with "
                          f"{INSTALL_HINT}")
    return str(path)


def nvcc_available() -> tuple[bool, str]:
    """(is nvcc there?, where it is / why not) -- for tests that skip without it."""
    path, how = load_build_module()._find_nvcc()
    return (path is not None, f"{path} ({how})" if path else str(how))


def _tool_dirs() -> list[str]:
    """Where the CUDA tools beside nvcc live: nvcc's own folder first (the pip wheels share
    ``nvidia/cu13/bin``), then $CUDA_HOME/bin."""
    dirs: list[str] = []
    path, _ = load_build_module()._find_nvcc()
    if path:
        dirs.append(os.path.dirname(os.path.realpath(str(path))))
    if os.environ.get("CUDA_HOME"):
        dirs.append(os.path.join(os.environ["CUDA_HOME"], "bin"))
    return dirs


def find_tool(name: str) -> str:
    """Path of a CUDA binary (cuobjdump, nvdisasm, cu++filt): nvcc's folder, $CUDA_HOME/bin, then
    PATH; :class:`ToolMissing` with the install command otherwise."""
    for d in _tool_dirs():
        cand = os.path.join(d, name)
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    found = shutil.which(name)
    if found:
        return found
    raise ToolMissing(f"{name} not found (looked beside nvcc, in $CUDA_HOME/bin and on PATH); "
                      f"install it with {INSTALL_HINT}")


def find_demangler() -> str:
    """cu++filt beside nvcc if present, else the system's c++filt (binutils)."""
    try:
        return find_tool("cu++filt")
    except ToolMissing:
        pass
    found = shutil.which("c++filt")
    if found:
        return found
    raise ToolMissing("no demangler: neither cu++filt (beside nvcc) nor c++filt (binutils) found")


def demangle(names: Iterable[str]) -> dict[str, str]:
    """mangled -> demangled, in one run of the demangler."""
    names = list(dict.fromkeys(names))
    if not names:
        return {}
    tool = find_demangler()
    try:
        res = subprocess.run([tool], input="\n".join(names) + "\n", capture_output=True,
                             text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ToolMissing(f"the demangler {tool} failed: {exc}") from exc
    out = res.stdout.splitlines()
    if len(out) != len(names):
        raise ParseError(f"demangler returned {len(out)} lines for {len(names)} names")
    return dict(zip(names, out))


def short_name(demangled: str) -> str:
    """``void (anonymous namespace)::k_mul<32>(long long, ...)`` -> ``k_mul<32>``: no return type,
    namespaces or parameter list (template arguments are kept)."""
    s = demangled.replace("(anonymous namespace)::", "")
    depth = 0
    end = len(s)
    for i, ch in enumerate(s):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            end = i
            break
    head = s[:end]
    # the last top-level space separates the return type; the last top-level :: the namespaces
    depth = 0
    cut = 0
    i = 0
    while i < len(head):
        ch = head[i]
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0 and ch == " ":
            cut = i + 1
        elif depth == 0 and head.startswith("::", i):
            cut = i + 2
            i += 1
        i += 1
    return head[cut:].strip() or demangled


# ------------------------------------------------------------------------------------------ compile
@dataclass
class Compiled:
    """A cubin and what the compile that made it said."""

    cubin: Path
    ptxas_log: str | None     #: nvcc's stderr/stdout with ``-Xptxas -v``; None: not known
    seconds: float | None     #: wall time of the compile; None: reused
    command: list[str]
    nvcc_version: str | None = None


_COMPILED: dict[tuple[str, str, str], Compiled] = {}


def _nvcc_version(nvcc: str) -> str | None:
    try:
        res = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    lines = res.stdout.strip().splitlines()
    # the line "Cuda compilation tools, release 13.0, V13.0.88"
    release = [ln for ln in lines if "release" in ln]
    found = release or lines
    return found[-1] if found else None


def compile_cubin(out_dir: Path | None = None, source: Path = SOURCE, arch: str = ARCH) -> Compiled:
    """Compile ``source`` for ``sm_<arch>`` only into ``<out_dir>/<source stem>.sm_<arch>.cubin`` with
    ptxas's verbose report, written beside it as ``<cubin>.ptxas.txt`` (for a later ``--cubin``).

    The whole file takes minutes (see the module doc); the result is cached for the process
    (same source, arch and output folder).  ``out_dir`` None: a temporary folder removed at exit.
    """
    key = (str(source), arch, str(out_dir))
    if key in _COMPILED and _COMPILED[key].cubin.exists():
        return _COMPILED[key]
    nvcc = find_nvcc()
    if out_dir is None:
        tmp = tempfile.mkdtemp(prefix="unifl-gpu-proxies-")
        atexit.register(shutil.rmtree, tmp, True)
        out_dir = Path(tmp)
    out_dir.mkdir(parents=True, exist_ok=True)
    cubin = out_dir / f"{source.stem}.sm_{arch}.cubin"
    cmd = [nvcc, "-std=c++17", "-O3", "-gencode", f"arch=compute_{arch},code=sm_{arch}",
           "-Xptxas", "-v", f"-I{source.parent}", "-cubin", "-o", str(cubin), str(source)]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True)
    except OSError as exc:
        raise ToolMissing(f"cannot run nvcc ({nvcc}): {exc}; install it with "
                          f"{INSTALL_HINT}") from exc
    seconds = time.perf_counter() - t0
    log = res.stdout + res.stderr
    if res.returncode != 0:
        raise CompileError(f"nvcc failed ({res.returncode}) on {source}:\n{log[-4000:]}")
    (out_dir / (cubin.name + ".ptxas.txt")).write_text(log, encoding="utf-8")
    comp = Compiled(cubin, log, seconds, cmd, _nvcc_version(nvcc))
    _COMPILED[key] = comp
    return comp


def reuse_cubin(cubin: Path, ptxas_log: Path | None = None) -> Compiled:
    """An existing cubin; its ptxas log from ``ptxas_log`` or ``<cubin>.ptxas.txt`` when present
    (spills are only known from it)."""
    if not cubin.is_file():
        raise ProxyError(f"no cubin at {cubin}")
    log_path = ptxas_log or cubin.with_name(cubin.name + ".ptxas.txt")
    if ptxas_log is not None and not ptxas_log.is_file():
        raise ProxyError(f"no ptxas log at {ptxas_log}")
    log = log_path.read_text(encoding="utf-8") if log_path.is_file() else None
    return Compiled(cubin, log, None, [])

"""GPU proxies: static figures of the ``gpu`` backend's CUDA kernels, measured without a GPU.

    python bench/gpu_proxies.py [--cubin PATH [--ptxas-log PATH]] [--out-dir DIR] [--json PATH]
                                [--kernel REGEX] [--loops] [--no-sass]
                                [--block-size N] [--dyn-smem [REGEX=]BYTES ...]
                                [--check [--check-pattern REGEX] [--max-stack BYTES]]
                                [--montmult REGEX --bits B --span REF=TRIPS[:own]... --lanes TPI]

It compiles ``unifl/backends/gpu/src/gpu_runtime.cu`` for sm_90 only (H100/H200) into a cubin, or
reuses one (``--cubin``), and reports per kernel.  The compile is the slow part: ptxas works on one
core, 40 s for the 43 thread-per-instance kernels and about 2.3 min once the 60 cooperative ``_g``
kernels are in (nvcc 13.0.88); the disassembly and analysis add about 35 s.

* **ptxas figures** (nvcc ``-Xptxas -v``): registers per thread, stack frame bytes, spill
  stores/loads bytes, static shared memory, barriers; ``cuobjdump -res-usage`` adds the constant
  bank 0 size (kernel parameters + driver constants) and cross-checks registers and stack.  A
  stack frame is *local memory* (per thread, backed by device memory, cached in L1/L2), not
  registers: a big frame is not a spill, but every access to it is an LDL/STL.  Spills are only
  known from the ptxas log; with ``--cubin`` it is read from ``--ptxas-log`` or from
  ``<cubin>.ptxas.txt`` (which ``--out-dir`` writes beside the cubin), else spills are unknown.
* **theoretical occupancy on one H100 SM** (:func:`occupancy`), from the registers, the block size
  the runtime launches with (:data:`BLOCK_SIZE_TABLE`, ``--block-size``) and the dynamic shared
  memory per block (``--dyn-smem``, for all kernels or per name pattern; default 0 -- the runtime
  stages the key blob there, 8 bytes per key word, and the group kernels their window tables).
  It is what the hardware *can* keep resident, not what a launch achieves (grid size, tail
  effects, latency and the local-memory working set decide that).
* **SASS instruction classes** (``cuobjdump -sass``): totals, the IMAD family split into real
  multiplies and IMAD used as move/shift/add, SHFL, VOTE, LDL/STL, LDS/STS, LDG/STG; the natural
  loops of the control flow graph (back edges: branches to a block that dominates them), and the
  innermost loops holding multiplies with their class counts.
* **the 4n^2 MontMult model check** (:func:`montmult_model`, :func:`imad_slots_per_montmult`):
  IMAD slots per MontMult from the caller's loop selection and trip counts (``--montmult``).

Every figure is a *static* count from the compiler's output: instructions in the binary, not
instructions executed, and never a timing.  Executed counts need trip counts (which the caller
supplies to the MontMult check); timings need a GPU.

``--check`` turns the figures into a gate: it fails when a kernel matching ``--check-pattern``
(default: the cooperative kernels, demangled names containing ``_g<``) spills or has a stack frame
over ``--max-stack`` bytes (2048), and it fails, saying so, when no kernel matches at all.

Tools: nvcc as the build finds it (unifl/backends/gpu/build.py), cuobjdump and nvdisasm beside it,
cu++filt or c++filt -- all from ``pip install -r requirements-cuda.txt``.
"""

from __future__ import annotations

import argparse
import atexit
import bisect
import dataclasses
import importlib.util
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GPU_DIR = ROOT / "unifl" / "backends" / "gpu"
SRC_DIR = GPU_DIR / "src"
SOURCE = SRC_DIR / "gpu_runtime.cu"
ARCH = "90"
INSTALL_HINT = "pip install -r requirements-cuda.txt (or the unifl[cuda] extra)"


# ------------------------------------------------------------------------------------------ errors
class ProxyError(Exception):
    """Base class of this tool's errors."""


class ToolMissing(ProxyError):
    """A CUDA tool (nvcc, cuobjdump, nvdisasm) or the demangler is not installed."""


class CompileError(ProxyError):
    """nvcc failed to compile the kernels."""


class ParseError(ProxyError):
    """A tool's output did not have the structure this parser knows."""


class OccupancyError(ProxyError):
    """Inputs outside what an H100 can launch at all (block size, registers per thread)."""


# ------------------------------------------------------------------------------------------- tools
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
    """Compile ``source`` for ``sm_<arch>`` only into ``<out_dir>/gpu_runtime.sm_<arch>.cubin`` with
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


# ------------------------------------------------------------------------------------ ptxas parsing
@dataclass
class PtxasFunction:
    """One function's figures as ptxas printed them (None: not printed).

    registers: per thread (each of a warp's threads holds this many 32-bit registers);
    stack_frame: bytes of local memory per thread for the frame (local arrays that cannot live in
    registers, plus spill slots); spill_stores/loads: bytes per thread written/read by spill code,
    a *static* sum over the spill instructions, not a count of executions; smem: static
    ``__shared__`` bytes (ptxas omits it when 0; dynamic shared memory is not in it); cmem: bytes
    per constant bank; cumulative_stack: the frame plus the frames of called functions.
    """

    mangled: str
    entry: bool
    registers: int | None = None
    barriers: int | None = None
    stack_frame: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    cumulative_stack: int | None = None
    smem: int | None = None
    lmem: int | None = None
    cmem: dict[int, int] = field(default_factory=dict)
    compile_ms: float | None = None
    warnings: list[str] = field(default_factory=list)


@dataclass
class PtxasLog:
    """A parsed ``-Xptxas -v`` log: functions by mangled name, the global memory line, and every
    line the parser did not recognise (reported, never dropped silently)."""

    functions: dict[str, PtxasFunction]
    gmem: int | None = None
    warnings: list[str] = field(default_factory=list)
    unparsed: list[str] = field(default_factory=list)


_P_ENTRY = re.compile(r"^ptxas info\s*:\s*Compiling entry function '([^']+)' for '(\w+)'")
_P_PROPS = re.compile(r"^ptxas info\s*:\s*Function properties for (\S+)\s*$")
_P_FRAME = re.compile(r"^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                      r"loads\s*$")
_P_USED = re.compile(r"^ptxas info\s*:\s*(Used \d+ registers.*)$")
_P_TIME = re.compile(r"^ptxas info\s*:\s*Compile time = ([\d.]+) ms")
_P_GMEM = re.compile(r"^ptxas info\s*:\s*(\d+) bytes gmem(.*)$")
_USED_PARTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^Used (\d+) registers$"), "registers"),
    (re.compile(r"^used (\d+) barriers$"), "barriers"),
    (re.compile(r"^(\d+) bytes smem$"), "smem"),
    (re.compile(r"^(\d+) bytes lmem$"), "lmem"),
    (re.compile(r"^(\d+) bytes cumulative stack size$"), "cumulative_stack"),
]
_P_CMEM = re.compile(r"^(\d+) bytes cmem\[(\d+)\]$")


def parse_ptxas(text: str) -> PtxasLog:
    """Parse nvcc's output under ``-Xptxas -v``.

    Per function ptxas prints ``Compiling entry function 'NAME' for 'sm_90'`` (kernels only), then
    ``Function properties for NAME`` followed by the ``N bytes stack frame, N bytes spill stores,
    N bytes spill loads`` line (for the kernel and for any function it calls that was not inlined),
    then ``Used N registers, used N barriers[, N bytes smem][, N bytes cmem[K]], N bytes cumulative
    stack size`` and ``Compile time = X ms`` for the kernel.  A ``Used`` line outside a kernel, a
    frame line with no ``Function properties`` before it, or an unknown part of a ``Used`` line is a
    :class:`ParseError`; any other line that is not one of these is kept in ``unparsed``.
    """
    log = PtxasLog(functions={})
    current: PtxasFunction | None = None   # the kernel being compiled
    props: PtxasFunction | None = None     # whose "Function properties" line came last
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if m := _P_ENTRY.match(line):
            current = log.functions.setdefault(m.group(1), PtxasFunction(m.group(1), True))
            current.entry = True
            props = None
        elif m := _P_PROPS.match(line):
            props = log.functions.setdefault(m.group(1), PtxasFunction(m.group(1), False))
        elif m := _P_FRAME.match(line):
            if props is None:
                raise ParseError(f"stack frame line with no 'Function properties' before it: "
                                 f"{line!r}")
            props.stack_frame, props.spill_stores, props.spill_loads = map(int, m.groups())
            props = None
        elif m := _P_USED.match(line):
            if current is None:
                raise ParseError(f"'Used' line outside any entry function: {line!r}")
            for part in (p.strip() for p in m.group(1).split(",")):
                for pat, attr in _USED_PARTS:
                    if pm := pat.match(part):
                        setattr(current, attr, int(pm.group(1)))
                        break
                else:
                    if cm := _P_CMEM.match(part):
                        current.cmem[int(cm.group(2))] = int(cm.group(1))
                    else:
                        raise ParseError(f"unknown part {part!r} of ptxas line {line!r}")
        elif m := _P_TIME.match(line):
            if current is not None:
                current.compile_ms = float(m.group(1))
        elif m := _P_GMEM.match(line):
            log.gmem = int(m.group(1))
        elif line.startswith("ptxas warning") or line.startswith("ptxas error"):
            msg = line.split(":", 1)[-1].strip()
            named = re.search(r"'([^']+)'", msg)
            if named and named.group(1) in log.functions:
                log.functions[named.group(1)].warnings.append(msg)
            else:
                log.warnings.append(msg)
        else:
            log.unparsed.append(line)
    return log


# ----------------------------------------------------------------------------- cuobjdump res-usage
_R_FUNC = re.compile(r"^\s*Function (\S+):\s*$")
_R_FIELD = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")


def parse_res_usage(text: str) -> tuple[dict[str, dict[str, int]], list[str]]:
    """``cuobjdump -res-usage``: {mangled: {"REG": .., "STACK": .., "SHARED": .., "LOCAL": ..,
    "CONSTANT[0]": .., ...}} and the unrecognised lines.  SHARED includes the 1 KiB per block that
    sm_80+ reserves for the system (it reads 1024 for a kernel with no shared memory at all)."""
    out: dict[str, dict[str, int]] = {}
    unparsed: list[str] = []
    cur: str | None = None
    for line in text.splitlines():
        s = line.strip()
        if not s or s in ("Resource usage:", "Common:") or s.startswith("GLOBAL:") \
                or s.startswith("Fatbin") or s.startswith("=") or s.startswith("arch =") \
                or s.startswith("code version") or s.startswith("host =") \
                or s.startswith("compile_size"):
            continue
        if m := _R_FUNC.match(line):
            cur = m.group(1)
            out[cur] = {}
        elif cur is not None and (fields := _R_FIELD.findall(s)):
            out[cur].update({k: int(v) for k, v in fields})
        else:
            unparsed.append(line)
    return out, unparsed


# ------------------------------------------------------------------------------------- SASS parsing
@dataclass(frozen=True)
class Instr:
    """One SASS instruction: byte address in its function, guard predicate (``@P0``, ``@!P1``),
    full opcode with modifiers (``IMAD.WIDE.U32``), operands, and the target address of a ``BRA``
    or ``CALL.REL`` with an immediate target (None otherwise)."""

    addr: int
    pred: str | None
    opcode: str
    operands: tuple[str, ...]
    target: int | None = None

    @property
    def base(self) -> str:
        """The mnemonic without modifiers: ``IMAD.WIDE.U32`` -> ``IMAD``."""
        return self.opcode.split(".", 1)[0]


@dataclass
class SassFunction:
    mangled: str
    instrs: list[Instr]


_S_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")
_S_INSTR = re.compile(r"^\s*/\*([0-9a-fA-F]+)\*/\s+(.*?)\s*;\s*(?:/\*.*\*/)?\s*$")
_S_ENCODING = re.compile(r"^\s*/\*\s*0x[0-9a-fA-F]+\s*\*/\s*$")
_S_PRED = re.compile(r"^(@!?U?P(?:T|\d+))\s+(.*)$")
_S_SKIP = re.compile(r"^\s*(?:$|code for sm_\w+|\.target\s|\.headerflags\s|Fatbin |=+$|arch = |"
                     r"code version = |host = |compile_size = |\.+$|\.section\s|\.elftype\s)")


def _split_operands(text: str) -> tuple[str, ...]:
    """Operands split at top-level commas (sm_90's ``[..]`` memory and constant operands hold no
    comma, so only text with braces or parentheses needs the bracket-aware split)."""
    if not text:
        return ()
    if "{" not in text and "(" not in text:
        return tuple(p.strip() for p in text.split(","))
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if "".join(cur).strip():
        out.append("".join(cur).strip())
    return tuple(out)


def parse_instr(addr: int, text: str) -> Instr:
    """One instruction's text (``@!P0 BRA 0x1cb0``) at ``addr``."""
    pred = None
    if m := _S_PRED.match(text):
        pred, text = m.group(1), m.group(2)
    opcode, _, rest = text.partition(" ")
    ops = _split_operands(rest.strip())
    target = None
    if opcode.split(".", 1)[0] in ("BRA", "CALL") and ops:
        tm = re.fullmatch(r"(?:`\()?(0x[0-9a-fA-F]+)\)?", ops[-1])
        if tm:
            target = int(tm.group(1), 16)
    return Instr(addr, pred, opcode, ops, target)


def parse_sass(text: str) -> tuple[dict[str, SassFunction], list[str]]:
    """``cuobjdump -sass`` output: {mangled: function} and the lines not understood.  The second
    16-hex-digit half of each instruction's encoding (a comment-only line) and the section headers
    are skipped; an instruction line before any ``Function :`` header is a :class:`ParseError`."""
    funcs: dict[str, SassFunction] = {}
    unparsed: list[str] = []
    cur: SassFunction | None = None
    for line in text.splitlines():
        if _S_ENCODING.match(line) or _S_SKIP.match(line):
            continue
        if m := _S_FUNC.match(line):
            cur = funcs.setdefault(m.group(1), SassFunction(m.group(1), []))
        elif m := _S_INSTR.match(line):
            if cur is None:
                raise ParseError(f"SASS instruction outside any function: {line!r}")
            cur.instrs.append(parse_instr(int(m.group(1), 16), m.group(2)))
        else:
            unparsed.append(line)
    return funcs, unparsed


# --------------------------------------------------------------------------- instruction classes
#: the classes counted besides the IMAD family: the memory spaces (LDL/STL local = stack frame and
#: spills; LDS/STS shared; LDG/STG global), warp collectives (SHFL, VOTE), and the adds of carry
#: chains (IADD3) and uniform-datapath multiplies (UIMAD, one per warp, not per thread)
COUNTED_BASES = ("SHFL", "VOTE", "LDL", "STL", "LDS", "STS", "LDG", "STG", "IADD3", "UIMAD",
                 "BAR", "CALL")
_IMM = re.compile(r"^-?(?:0x[0-9a-fA-F]+|\d+)$")
_PRED_OPERAND = re.compile(r"^!?U?P(?:T|\d+)$")


def _bare(op: str) -> str:
    """A source operand without negation/abs marks and modifiers (``-R4.reuse`` -> ``R4``)."""
    op = op.lstrip("-~|!").rstrip("|")
    return op.split(".", 1)[0] if op.startswith(("R", "UR")) else op


def imad_kind(ins: Instr) -> str | None:
    """The class of an IMAD-family instruction (None for any other):

    * ``mov`` / ``shl`` / ``iadd``: IMAD.MOV*, IMAD.SHL*, IMAD.IADD* -- ptxas issues moves, shifts
      and adds on the IMAD pipe; no multiply;
    * ``nonmul``: another IMAD whose multiplicand is RZ or 1 (a move or add in disguise);
    * ``wide`` (IMAD.WIDE, IMAD.WIDE.U32: 32x32 -> 64, **2 slots**), ``hi`` (IMAD.HI*: the high
      half, 1 slot), ``x`` (IMAD.X: with carry-in, 1 slot), ``lo`` (plain IMAD / IMAD.U32: the low
      32 bits, 1 slot) -- the *multiply class*.
    """
    if ins.base != "IMAD":
        return None
    mods = ins.opcode.split(".")[1:]
    if "MOV" in mods:
        return "mov"
    if "SHL" in mods:
        return "shl"
    if "IADD" in mods:
        return "iadd"
    srcs = [o for o in ins.operands[1:] if not _PRED_OPERAND.match(o)]
    if len(srcs) >= 2:
        a, b = _bare(srcs[0]), _bare(srcs[1])
        if a in ("RZ", "URZ") or b in ("RZ", "URZ") or a in ("0x1", "1") or b in ("0x1", "1"):
            return "nonmul"
    if "WIDE" in mods:
        return "wide"
    if "HI" in mods:
        return "hi"
    if "X" in mods:
        return "x"
    return "lo"


#: IMAD issue slots per multiply-class instruction: a 32x32->64 product (IMAD.WIDE*) takes 2
IMAD_SLOTS = {"wide": 2, "hi": 1, "x": 1, "lo": 1}


def multiplies_immediate(ins: Instr) -> bool:
    """A multiply-class IMAD with an immediate multiplicand (address scaling such as ``i*8``)."""
    srcs = [o for o in ins.operands[1:] if not _PRED_OPERAND.match(o)]
    return len(srcs) >= 2 and bool(_IMM.match(srcs[1]) or _IMM.match(srcs[0]))


CLASS_KEYS = ("total", "imad", "imad_mul", "imad_slots", "imad_wide", "imad_hi", "imad_x",
              "imad_lo", "imad_wide_x", "imad_mul_imm", "imad_mov", "imad_shl", "imad_iadd",
              "imad_nonmul", *COUNTED_BASES)


def classify(ins: Instr) -> dict[str, int]:
    """What one instruction adds to each class of :func:`count_classes`."""
    c = {"total": 1}
    kind = imad_kind(ins)
    if kind is not None:
        c["imad"] = 1
        c[f"imad_{kind}"] = 1
        if kind == "wide" and "X" in ins.opcode.split(".")[1:]:
            c["imad_wide_x"] = 1
        if kind in IMAD_SLOTS:
            c["imad_mul"] = 1
            c["imad_slots"] = IMAD_SLOTS[kind]
            if multiplies_immediate(ins):
                c["imad_mul_imm"] = 1
    elif ins.base in COUNTED_BASES:
        c[ins.base] = 1
    return c


def count_classes(instrs: Iterable[Instr]) -> dict[str, int]:
    """Static instruction counts of a span of SASS.

    ``total``: every instruction (NOPs included); ``imad``: the IMAD family;
    ``imad_mov/shl/iadd/nonmul``: IMADs doing no multiply (see :func:`imad_kind`);
    ``imad_wide/hi/x/lo``: the multiply class by kind, ``imad_mul`` their sum, ``imad_mul_imm`` the
    part with an immediate multiplicand (address arithmetic, not bignum words), ``imad_wide_x``:
    IMAD.WIDE*.X, the carry-in product that ends each 64x64 high half (``__umul64hi``) in nvcc
    13.0's lowering -- one per 64-bit word product, so a count of them; ``imad_slots``:
    2 per IMAD.WIDE* + 1 per other multiply; then one count per :data:`COUNTED_BASES` mnemonic
    (``LDL``, ``STL``, ...; ``LDG`` covers LDG.E.64 etc.).
    """
    c: Counter[str] = Counter()
    for ins in instrs:
        c.update(classify(ins))
    return {k: c.get(k, 0) for k in CLASS_KEYS}


class _Prefix:
    """Prefix sums of the class counts over a function's instructions: the counts of any range of
    positions in O(classes)."""

    def __init__(self, instrs: Sequence[Instr]) -> None:
        cls = [classify(ins) for ins in instrs]
        self.sums: dict[str, list[int]] = {
            k: list(itertools.accumulate((c.get(k, 0) for c in cls), initial=0))
            for k in CLASS_KEYS}

    def counts(self, ranges: Iterable[tuple[int, int]]) -> dict[str, int]:
        """Counts over the union of disjoint position ranges [i, j)."""
        rs = list(ranges)
        return {k: sum(arr[j] - arr[i] for i, j in rs) for k, arr in self.sums.items()}


# ------------------------------------------------------------------------------------------ loops
#: instructions that end a basic block without falling through when unguarded
_STOPS = ("EXIT", "RET", "KILL", "BRX", "JMX")


def _is_conditional(ins: Instr) -> bool:
    """A branch that may fall through: guarded by a predicate other than PT, or testing a uniform
    predicate / divergence operand (``BRA.U !UP0, X``, ``BRA.DIV UR4, X``)."""
    return (ins.pred not in (None, "@PT")) or len(ins.operands) > 1 or "DIV" in ins.opcode


def control_flow(instrs: Sequence[Instr], follow_div: bool = False
                 ) -> tuple[list[tuple[int, int]], list[list[int]]]:
    """Basic blocks of a function -- (first, past-last) instruction positions -- and the successor
    block indices of each.  ``BRA`` targets and the fall-through of conditional branches make the
    edges; an unguarded EXIT/RET/BRX ends a path (BRX's targets are not known from the text; CALL
    falls through).  ``BRA.DIV`` (taken only when the warp has diverged, to a slow path of the warp
    collectives) is followed only if ``follow_div``: by default the analysis assumes converged
    warps, so those fallback blocks are outside every loop."""
    if not instrs:
        return [], []
    index = {ins.addr: n for n, ins in enumerate(instrs)}
    leaders = {0}
    for n, ins in enumerate(instrs):
        if ins.base == "BRA":
            if ins.target is not None and ins.target in index:
                leaders.add(index[ins.target])
            leaders.add(n + 1)
        elif ins.base in _STOPS or ins.base == "CALL":
            leaders.add(n + 1)
    starts = sorted(p for p in leaders if p < len(instrs))
    blocks = [(a, b) for a, b in zip(starts, [*starts[1:], len(instrs)])]
    block_of = {a: k for k, (a, _) in enumerate(blocks)}
    succs: list[list[int]] = []
    for k, (_, b) in enumerate(blocks):
        last = instrs[b - 1]
        out: list[int] = []
        falls = k + 1 < len(blocks)
        if last.base == "BRA":
            div = "DIV" in last.opcode.split(".")[1:]
            if last.target is not None and last.target in index and (follow_div or not div):
                out.append(block_of[index[last.target]])
            falls = falls and (_is_conditional(last) or (div and not follow_div))
        elif last.base in _STOPS:
            falls = falls and last.pred not in (None, "@PT")
        if falls and k + 1 not in out:
            out.append(k + 1)
        succs.append(out)
    return blocks, succs


def _dominators(succs: Sequence[Sequence[int]], root: int = 0) -> list[int]:
    """Immediate dominator of each block reachable from ``root`` (-1: unreachable; the root is
    its own); Cooper, Harvey and Kennedy's iterative algorithm over the reverse postorder."""
    n = len(succs)
    order: list[int] = []
    seen = [False] * n
    stack: list[tuple[int, int]] = [(root, 0)] if n else []
    if n:
        seen[root] = True
    while stack:   # iterative DFS postorder
        node, k = stack.pop()
        if k < len(succs[node]):
            stack.append((node, k + 1))
            nxt = succs[node][k]
            if not seen[nxt]:
                seen[nxt] = True
                stack.append((nxt, 0))
        else:
            order.append(node)
    rpo = order[::-1]
    rank = {b: r for r, b in enumerate(rpo)}
    preds: list[list[int]] = [[] for _ in range(n)]
    for b in rpo:
        for c in succs[b]:
            preds[c].append(b)
    idom = [-1] * n
    if n:
        idom[root] = root
    changed = True
    while changed:
        changed = False
        for b in rpo[1:]:
            new = -1
            for p in preds[b]:
                if idom[p] == -1:
                    continue
                if new == -1:
                    new = p
                    continue
                x, y = p, new
                while x != y:
                    while rank[x] > rank[y]:
                        x = idom[x]
                    while rank[y] > rank[x]:
                        y = idom[y]
                new = x
            if new != idom[b]:
                idom[b] = new
                changed = True
    return idom


@dataclass
class Loop:
    """A natural loop of a function: ``header`` (the address its back edges jump to), its body as
    address ranges of basic blocks (``blocks``: (first, last) instruction address, inclusive),
    ``start``/``end`` the lowest and highest address in it.  ``counts``: the classes of every
    instruction in the body; ``own``: without those of nested loops (what one trip executes
    outside its inner loops if every path is taken -- a static count, branches inside the body
    are not weighed).  ``depth`` 0 is outermost."""

    header: int
    blocks: list[tuple[int, int]]
    depth: int = 0
    innermost: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    own: dict[str, int] = field(default_factory=dict)
    ranges: list[tuple[int, int]] = field(default_factory=list)      #: ``blocks``, adjacent merged
    own_ranges: list[tuple[int, int]] = field(default_factory=list)  #: the same, own code only

    @property
    def start(self) -> int:
        return self.blocks[0][0]

    @property
    def end(self) -> int:
        return self.blocks[-1][1]

    @property
    def label(self) -> str:
        return f"{self.start:#06x}-{self.end:#06x}"

    def contains(self, other: Loop) -> bool:
        """``other`` is nested in this loop (a proper subset of its blocks)."""
        mine = set(self.blocks)
        return self is not other and set(other.blocks) < mine


def find_loops(instrs: Sequence[Instr], follow_div: bool = False) -> list[Loop]:
    """The natural loops of a function, from its control flow graph (:func:`control_flow`): an
    edge u -> h whose target dominates its source is a back edge, and the loop of header h is h
    with every block that reaches a back-edge source without passing h (back edges to one header
    make one loop).  Blocks placed after the function's exit that jump back into it (the
    ``BRA.DIV`` fallbacks of the warp collectives, cold paths) are inside a loop only when they
    close a cycle through its header.  Irreducible cycles (no dominating header; ptxas does not
    emit them for structured source) are not found.  A subroutine of the function (the target of
    a ``CALL.REL``) is analysed as a second entry, but a call is not followed: a loop calling one
    counts the ``CALL``, not the callee.  The branch-to-self trap after the last EXIT is
    unreachable, so no loop."""
    blocks, succs = control_flow(instrs, follow_div)
    if not blocks:
        return []
    # a virtual root entering the function and every subroutine it calls (CALL.REL to an address
    # of its own, e.g. 64-bit division), so the subroutines' loops are found too
    first = {instrs[a].addr: k for k, (a, _) in enumerate(blocks)}
    calls = sorted({first[i.target] for i in instrs
                    if i.base == "CALL" and i.target is not None and i.target in first})
    root = len(blocks)
    idom = _dominators([*succs, [0, *calls]], root)
    preds: list[list[int]] = [[] for _ in blocks]
    for b, out in enumerate(succs):
        if idom[b] != -1:
            for c in out:
                preds[c].append(b)

    def dominates(h: int, b: int) -> bool:
        while True:
            if b == h:
                return True
            if b == root or idom[b] == -1:
                return False
            b = idom[b]

    bodies: dict[int, set[int]] = {}
    for u, out in enumerate(succs):
        if idom[u] == -1:
            continue
        for h in out:
            if dominates(h, u):
                body = bodies.setdefault(h, {h})
                work = [u]
                while work:
                    x = work.pop()
                    if x not in body:
                        body.add(x)
                        work.extend(preds[x])
    prefix = _Prefix(instrs)

    def span(b: int) -> tuple[int, int]:
        a, z = blocks[b]
        return instrs[a].addr, instrs[z - 1].addr

    def merged(bs: Iterable[int]) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []   # position ranges of consecutive blocks, as addresses
        for b in sorted(bs):
            a, z = blocks[b]
            if out and out[-1][1] == a:
                out[-1] = (out[-1][0], z)
            else:
                out.append((a, z))
        return [(instrs[a].addr, instrs[z - 1].addr) for a, z in out]

    loops: list[Loop] = []
    sets: list[set[int]] = []
    for h, body in sorted(bodies.items(), key=lambda kv: blocks[kv[0]][0]):
        loops.append(Loop(instrs[blocks[h][0]].addr, sorted(span(b) for b in body)))
        sets.append(body)
    for lp, body in zip(loops, sets):
        inner = [o for o in sets if o is not body and o < body]
        lp.depth = sum(1 for o in sets if o is not body and body < o)
        lp.innermost = not inner
        lp.counts = prefix.counts(blocks[b] for b in body)
        nested = set().union(*inner) if inner else set()
        own = sorted(body - nested)
        lp.own = prefix.counts(blocks[b] for b in own)
        lp.ranges, lp.own_ranges = merged(body), merged(own)
    return loops


def multiply_loops(loops: Iterable[Loop]) -> list[Loop]:
    """The innermost loops holding multiply-class IMADs of two runtime values (loops whose only
    multiplies are by immediates -- address scaling such as ``j*8`` -- are left out)."""
    return [lp for lp in loops
            if lp.innermost and lp.counts.get("imad_mul", 0) > lp.counts.get("imad_mul_imm", 0)]


# --------------------------------------------------------------------------------------- occupancy
@dataclass(frozen=True)
class SmLimits:
    """Per-SM limits of a GPU for the occupancy model (defaults: H100, compute capability 9.0;
    the values of the CUDA occupancy calculator, ``cuda_occupancy.h``)."""

    name: str = "H100 (sm_90)"
    regs_per_sm: int = 65536
    reg_alloc_unit: int = 256            #: registers, allocated per warp in multiples of this
    max_regs_per_thread: int = 255
    regs_per_block: int = 65536
    sub_partitions: int = 4              #: the register file is split over 4 SM sub-partitions
    max_threads_per_sm: int = 2048
    max_threads_per_block: int = 1024
    max_blocks_per_sm: int = 32
    max_warps_per_sm: int = 64
    warp_size: int = 32
    smem_per_sm: int = 228 * 1024        #: with the largest carveout (the driver may pick less)
    smem_per_block: int = 227 * 1024     #: opt-in maximum (static + dynamic); 48 KiB without it
    smem_per_block_default: int = 48 * 1024
    smem_reserved_per_block: int = 1024  #: reserved by the system in every block
    smem_alloc_unit: int = 128


H100 = SmLimits()


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


@dataclass
class Occupancy:
    """Theoretical occupancy of one SM: how many blocks/warps *can* be resident at once.

    ``blocks_by``: the block limit each resource allows (registers, shared memory, threads, warps,
    the 32-block cap); the smallest wins, and ``limiter`` names every resource at that limit
    (``registers+threads+warps`` when they tie).  ``occupancy`` = active warps / 64.
    Local memory (the stack frame) does not limit occupancy -- it lives in device memory -- but
    ``local_kib_per_sm`` (frame x resident threads) is the working set those threads keep in the
    SM's L1 (256 KiB with shared memory) and the L2 (50 MiB for 132 SMs).
    """

    block_size: int
    dyn_smem: int
    warps_per_block: int
    regs_per_warp: int
    smem_per_block: int
    blocks_by: dict[str, int]
    active_blocks: int
    active_warps: int
    occupancy: float
    limiter: str
    local_kib_per_sm: float | None = None
    notes: list[str] = field(default_factory=list)


def occupancy(registers: int, block_size: int, static_smem: int = 0, dyn_smem: int = 0,
              stack_frame: int | None = None, limits: SmLimits = H100) -> Occupancy:
    """Resident blocks and warps per SM for a kernel using ``registers`` per thread, launched with
    ``block_size`` threads and ``dyn_smem`` bytes of dynamic shared memory per block, as the CUDA
    occupancy calculator computes it (no partitioned global caching):

    * registers: regs x 32 rounded up to 256 per warp; each of the 4 sub-partitions holds
      floor(16384 / that) warps; blocks = 4 x that / warps per block (0 if a block needs more than
      65,536 registers: the launch fails);
    * shared memory: static + dynamic + 1 KiB reserved, rounded up to 128 B, into 228 KiB (the
      largest carveout); 0 blocks past 227 KiB + 1 KiB per block;
    * threads (2048), warps (64) and blocks (32) per SM.
    """
    if not 1 <= block_size <= limits.max_threads_per_block:
        raise OccupancyError(f"block size {block_size} outside 1..{limits.max_threads_per_block}")
    if not 0 <= registers <= limits.max_regs_per_thread:
        raise OccupancyError(f"{registers} registers per thread: the limit is "
                             f"{limits.max_regs_per_thread}")
    if static_smem < 0 or dyn_smem < 0:
        raise OccupancyError("shared memory sizes must be >= 0")
    notes: list[str] = []
    warps = -(-block_size // limits.warp_size)
    per_warp = _round_up(registers * limits.warp_size, limits.reg_alloc_unit)
    assumed = per_warp * _round_up(warps, limits.sub_partitions)
    if per_warp == 0:
        by_regs = limits.max_blocks_per_sm
    elif assumed > limits.regs_per_block or per_warp * warps > limits.regs_per_block:
        by_regs = 0
        notes.append("too many registers for one block: the launch fails")
    else:
        per_sub = (limits.regs_per_sm // limits.sub_partitions) // per_warp
        by_regs = per_sub * limits.sub_partitions // warps
    smem = _round_up(static_smem + dyn_smem + limits.smem_reserved_per_block,
                     limits.smem_alloc_unit)
    if smem > limits.smem_per_block + limits.smem_reserved_per_block:
        by_smem = 0
        notes.append(f"{static_smem + dyn_smem} B of shared memory per block: over the "
                     f"{limits.smem_per_block // 1024} KiB limit, the launch fails")
    else:
        by_smem = limits.smem_per_sm // smem
        if static_smem + dyn_smem > limits.smem_per_block_default:
            notes.append("over 48 KiB of shared memory per block: needs the "
                         "cudaFuncAttributeMaxDynamicSharedMemorySize opt-in")
    blocks_by = {
        "registers": by_regs,
        "shared": by_smem,
        "threads": limits.max_threads_per_sm // block_size,
        "warps": limits.max_warps_per_sm // warps,
        "blocks": limits.max_blocks_per_sm,
    }
    active = min(blocks_by.values())
    limiter = "+".join(k for k, v in blocks_by.items() if v == active)
    active_warps = active * warps
    local = None if stack_frame is None else stack_frame * active * block_size / 1024
    return Occupancy(block_size, dyn_smem, warps, per_warp, smem, blocks_by, active, active_warps,
                     active_warps / limits.max_warps_per_sm, limiter, local, notes)


#: threads per block the runtime launches each kernel with: (regex on the short demangled name,
#: threads or "class").  "class" is gpu_runtime.cu's ``block_size(LM)``: 64 threads for size
#: classes of 64 limbs and more, else 128 (LM: the kernel's template argument).  First match wins;
#: edit this table when the runtime's launches change.
BLOCK_SIZE_TABLE: list[tuple[str, int | str]] = [
    (r"_g<|group", 128),                     # cooperative (group) kernels
    (r"^k_relayout$", 256),
    (r"^k_(mul|exp|powers|prod_round|encrypt|encrypt_owner|decrypt)<\d+>$", "class"),
]
DEFAULT_BLOCK_SIZE = 128


def runtime_block_size(lmax: int) -> int:
    """gpu_runtime.cu's ``block_size(lmax)``."""
    return 64 if lmax >= 64 else 128


def block_size_for(name: str, table: Sequence[tuple[str, int | str]] = BLOCK_SIZE_TABLE
                   ) -> tuple[int, str]:
    """(threads per block, where it came from) for a kernel's short name."""
    for pattern, rule in table:
        if re.search(pattern, name):
            if rule == "class":
                m = re.search(r"<(\d+)", name)
                if m is None:
                    raise ProxyError(f"{name}: block size rule 'class' needs a <LM> template "
                                     f"argument")
                return runtime_block_size(int(m.group(1))), f"block_size({m.group(1)})"
            return int(rule), f"table {pattern!r}"
    return DEFAULT_BLOCK_SIZE, "default (no table entry)"


# ------------------------------------------------------------------------------------------ report
@dataclass
class KernelProxies:
    """Everything measured about one kernel (see the module doc for what each figure means)."""

    mangled: str
    demangled: str
    name: str
    registers: int | None = None
    barriers: int | None = None
    stack_frame: int | None = None
    spill_stores: int | None = None     #: None: no ptxas log (spills are only known from it)
    spill_loads: int | None = None
    static_smem: int | None = None
    cmem0: int | None = None
    cumulative_stack: int | None = None
    ptxas_warnings: list[str] = field(default_factory=list)
    block_size: int = DEFAULT_BLOCK_SIZE
    block_source: str = ""
    occupancy: Occupancy | None = None
    sass: dict[str, int] | None = None
    loops: list[Loop] = field(default_factory=list)
    instrs: list[Instr] = field(default_factory=list)

    @property
    def spills(self) -> int | None:
        if self.spill_stores is None or self.spill_loads is None:
            return None
        return self.spill_stores + self.spill_loads


@dataclass
class Report:
    kernels: list[KernelProxies]
    arch: str
    cubin: str
    compile_seconds: float | None
    command: list[str]
    nvcc_version: str | None
    limits: SmLimits
    warnings: list[str] = field(default_factory=list)

    def kernel(self, pattern: str) -> KernelProxies:
        """The one kernel whose short or demangled name matches ``pattern`` (regex search)."""
        hits = [k for k in self.kernels if _matches(pattern, k)]
        if len(hits) != 1:
            raise ProxyError(f"{len(hits)} kernels match {pattern!r}"
                             + (f": {', '.join(k.name for k in hits)}" if hits else ""))
        return hits[0]


def _matches(pattern: str, k: KernelProxies) -> bool:
    return bool(re.search(pattern, k.name) or re.search(pattern, k.demangled))


def _run_cuobjdump(args: Sequence[str], cubin: Path) -> str:
    exe = find_tool("cuobjdump")
    env = dict(os.environ)
    dirs = [os.path.dirname(exe)]
    if "-sass" in args:
        dirs.insert(0, os.path.dirname(find_tool("nvdisasm")))   # cuobjdump -sass runs nvdisasm
    env["PATH"] = os.pathsep.join([*dirs, env.get("PATH", "")])
    res = subprocess.run([exe, *args, str(cubin)], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise ProxyError(f"cuobjdump {' '.join(args)} failed ({res.returncode}): "
                         f"{res.stderr.strip()[-2000:]}")
    return res.stdout


def build_report(compiled: Compiled, kernel_re: str | None = None, dyn_smem: int = 0,
                 block_sizes: Mapping[str, int] | None = None, sass: bool = True,
                 limits: SmLimits = H100, dyn_smem_by: Mapping[str, int] | None = None) -> Report:
    """Measure the kernels of ``compiled`` (those whose short or demangled name matches
    ``kernel_re``).  ``block_sizes``: {regex on the short name: threads per block} overriding
    :data:`BLOCK_SIZE_TABLE`; ``dyn_smem``: dynamic shared memory per block, bytes, for every
    kernel, or per kernel from ``dyn_smem_by`` ({regex on the short name: bytes}, first match
    wins; e.g. the group kernels' key blob + window tables); ``sass``: also disassemble (needs
    cuobjdump and nvdisasm)."""
    warnings: list[str] = []
    res_usage, res_unparsed = parse_res_usage(_run_cuobjdump(["-res-usage"], compiled.cubin))
    warnings += [f"cuobjdump -res-usage: unparsed line {ln!r}" for ln in res_unparsed]
    log = parse_ptxas(compiled.ptxas_log) if compiled.ptxas_log is not None else None
    if log is None:
        warnings.append("no ptxas log for this cubin: spills are unknown (compile it with this "
                        "tool, or pass --ptxas-log)")
    else:
        warnings += [f"ptxas: {w}" for w in log.warnings]
        warnings += [f"compiler output not understood: {ln!r}" for ln in log.unparsed]
    funcs: dict[str, SassFunction] = {}
    if sass:
        funcs, sass_unparsed = parse_sass(_run_cuobjdump(["-sass"], compiled.cubin))
        warnings += [f"cuobjdump -sass: unparsed line {ln!r}" for ln in sass_unparsed]
    names = demangle(res_usage)
    table = [(p, n) for p, n in (block_sizes or {}).items()] + list(BLOCK_SIZE_TABLE)
    kernels: list[KernelProxies] = []
    for mangled, ru in res_usage.items():
        dem = names[mangled]
        k = KernelProxies(mangled, dem, short_name(dem))
        if kernel_re and not _matches(kernel_re, k):
            continue
        k.registers = ru.get("REG")
        k.stack_frame = ru.get("STACK")
        k.cmem0 = ru.get("CONSTANT[0]")
        if "SHARED" in ru:
            k.static_smem = max(0, ru["SHARED"] - limits.smem_reserved_per_block)
        pf = log.functions.get(mangled) if log is not None else None
        if log is not None and pf is None:
            warnings.append(f"{k.name}: not in the ptxas log (a log of another compile?)")
        if pf is not None:
            for attr, theirs in (("registers", pf.registers), ("stack_frame", pf.stack_frame)):
                ours = getattr(k, attr)
                if theirs is not None and ours is not None and theirs != ours:
                    warnings.append(f"{k.name}: {attr} {theirs} in the ptxas log but {ours} in the "
                                    f"cubin (a log of another compile?)")
            k.registers = pf.registers if pf.registers is not None else k.registers
            k.stack_frame = pf.stack_frame if pf.stack_frame is not None else k.stack_frame
            k.spill_stores, k.spill_loads = pf.spill_stores, pf.spill_loads
            k.barriers, k.cumulative_stack = pf.barriers, pf.cumulative_stack
            if pf.smem is not None:
                k.static_smem = pf.smem
            k.ptxas_warnings = list(pf.warnings)
            warnings += [f"{k.name}: ptxas: {w}" for w in pf.warnings]
        k.block_size, k.block_source = block_size_for(k.name, table)
        if k.registers is not None:
            dyn = next((b for p, b in (dyn_smem_by or {}).items() if re.search(p, k.name)),
                       dyn_smem)
            k.occupancy = occupancy(k.registers, k.block_size, k.static_smem or 0, dyn,
                                    k.stack_frame, limits)
        if sass:
            sf = funcs.get(mangled)
            if sf is None:
                warnings.append(f"{k.name}: no SASS for this kernel in the cubin")
            else:
                k.instrs = sf.instrs
                k.sass = count_classes(sf.instrs)
                if any(i.base in ("BRX", "JMX") for i in sf.instrs):
                    warnings.append(f"{k.name}: indirect branches (BRX/JMX): loops through them "
                                    f"are not found")
                k.loops = find_loops(sf.instrs)
        kernels.append(k)
    return Report(kernels, ARCH, str(compiled.cubin), compiled.seconds, compiled.command,
                  compiled.nvcc_version, limits, warnings)


# ------------------------------------------------------------------------------ MontMult model
def montmult_model(bits: int) -> dict[str, int]:
    """The multiply work of one ``bits``-bit Montgomery multiplication in 32-bit words.

    n = bits / 32 words; CIOS does n^2 word products for a*b and n^2 for q*m, each 32x32 -> 64,
    which costs 2 IMAD issue slots on sm_90 (IMAD.WIDE.U32: the IMAD pipe takes two passes for the
    64-bit result) -> 4n^2 slots.  With 64-bit limbs (L = n/2) the same work is 2L^2 products of
    64x64 -> 128 bits, each 4 32-bit products = 8 slots: 16L^2 = 4n^2.  The q = t0*n0inv terms
    (n of them, the low half only) are left out of the model.
    """
    if bits <= 0 or bits % 32:
        raise ValueError(f"bits must be a positive multiple of 32, not {bits}")
    n = bits // 32
    return {"bits": bits, "n": n, "word_products": 2 * n * n, "imad_slots": 4 * n * n}


@dataclass(frozen=True)
class Span:
    """Code counted in :func:`imad_slots_per_montmult`: address ranges (first, last instruction
    address, inclusive) of one kernel and how many times they run per MontMult *per lane*;
    ``note``: what the code is."""

    ranges: tuple[tuple[int, int], ...]
    trips: float
    note: str = ""

    @property
    def label(self) -> str:
        return ",".join(f"{a:#06x}-{b:#06x}" for a, b in self.ranges)


def loop_span(loop: Loop, trips: float, note: str = "", own: bool = False) -> Span:
    """A :class:`Span` covering a loop's body (only the code outside its nested loops if
    ``own``)."""
    return Span(tuple(loop.own_ranges if own else loop.ranges), trips,
                note or (f"{loop.label} own" if own else loop.label))


def select_loops(kernel: KernelProxies, refs: Sequence[str]) -> list[Loop]:
    """Loops of a kernel by reference: ``"#i"`` -- the i-th innermost multiply loop
    (:func:`multiply_loops`, in address order); ``"0x1ed0"`` -- the loop with that header;
    ``"0x1ed0-0x2530"`` -- the loop with that label (lowest-highest address)."""
    if not kernel.instrs:
        raise ProxyError(f"{kernel.name}: no SASS, so no loops (the report was built without it)")
    mloops = multiply_loops(kernel.loops)
    out: list[Loop] = []
    for ref in refs:
        if ref.startswith("#"):
            try:
                i = int(ref[1:])
            except ValueError:
                raise ProxyError(f"bad loop reference {ref!r}") from None
            if not 0 <= i < len(mloops):
                raise ProxyError(f"{kernel.name}: no multiply loop {ref} ({len(mloops)} of them)")
            out.append(mloops[i])
            continue
        try:
            start, _, end = ref.partition("-")
            hits = [lp for lp in kernel.loops
                    if (lp.header == int(start, 16) if not end else
                        (lp.start, lp.end) == (int(start, 16), int(end, 16)))]
        except ValueError:
            raise ProxyError(f"bad loop reference {ref!r}") from None
        if len(hits) != 1:
            raise ProxyError(f"{kernel.name}: no loop {ref!r}; loops: "
                             + ", ".join(lp.label for lp in kernel.loops))
        out.append(hits[0])
    return out


def imad_slots_per_montmult(kernel: KernelProxies, bits: int, spans: Sequence[Span],
                            lanes: int = 1) -> dict[str, Any]:
    """IMAD slots one MontMult issues, from static per-trip counts and the caller's trip counts:
    Σ over ``spans`` of (multiply-class IMAD slots in the span) x trips, times ``lanes`` (the
    threads that share one MontMult: 1 for the thread-per-instance kernels, TPI for the
    cooperative ones, whose span trips are per lane), and its ratio to 4n^2
    (:func:`montmult_model`).

    The trip counts are the caller's knowledge of the source (how many times the loop over words
    runs for a given size, the unroll factor ptxas chose -- the loop's counts show it), not
    something read from the binary.  Static counts assume every instruction in a span runs on each
    trip; predicated-off or skipped code inside a span is still counted.

    Accounting of the thread kernel ``k_mul<32>`` (2048-bit modulus, n = 64, L = 32 limbs of 64
    bits; nvcc 13.0.88 for sm_90): each inlined ``mont_mul`` is an outer loop over i (L trips) with
    two inner loops, ``t[j] = mac(t[j], a_i, b[j], c)`` for j = 0..L-1 and
    ``t[j-1] = mac(t[j], q, m[j], c)`` for j = 1..L-1, each unrolled 4x by the compiler (the loop's
    ``imad_wide_x`` count, one per mac, shows the factor), the remainders as straight-line code.

    * One ``mac`` in the loops (64x64 -> 128 plus two carries) is 5 IMAD.WIDE.U32 (the last one
      ``.X``) + 2 plain IMAD = **12 slots**: ``x*y`` (mul.lo.u64) becomes IMAD.WIDE.U32 lo*lo + 2
      IMAD for the low halves of the cross terms (4 slots) and ``__umul64hi`` (mul.hi.u64) 4
      IMAD.WIDE.U32 (8 slots) that compute lo*lo and the cross terms again: ptxas does not share
      the partial products of the two, so a mac costs 12 slots where the model counts 8 (4 products
      of 32x32 -> 64).
    * Per trip of an inner loop: 4 macs = 48 slots.  Trips per MontMult: (L/4)·L = 256 for the
      first loop, floor((L-1)/4)·L = 224 for the second; its 3 other macs per i are remainder code
      (36 slots, L trips), the first loop's remainder code runs 0 times (L % 4 = 0).
    * Per i also q = t0·n0inv (mul.lo.u64: 4 slots) and the q·m[0] mac whose low half is not
      stored (here ptxas does share the partial products: 4 IMAD.WIDE.U32 = 8 slots).

    Total: 256·48 + 224·48 + 32·36 + 32·12 = 24,576 slots = **1.50 x 4n^2** (16,384); the inner
    loops alone are 23,040 = 1.41 x.  That is 2L^2 = 2,048 macs at 12 slots -- 1.5x the model,
    all of it the mul.lo / mul.hi duplication; the q terms happen to cost exactly one mac's worth.
    On the CLI: ``--montmult '^k_mul<32>$' --span '#2=256' --span '#3=224' --span
    0x33f0-0x3990=32 --span 0x2aa0-0x2c70=32`` (the addresses of the remainder and q code are
    those of that compile; ``--loops`` lists the loops).

    The cooperative kernels, as first compiled in this session (``k_mul_g<32>``: TPI = 8 lanes,
    LPT = 8 32-bit words per lane): the loop over source words runs n32 / LPT = 8 trips per lane,
    and one trip (the k-steps unrolled) is 8 x (8 + 8 IMAD.WIDE.U32 for a_i·b and q·m, + 1 IMAD
    for q) = 264 slots; ``--span '#0=8' --lanes 8`` gives 264·8·8 = 16,896 = 1.03 x 4n^2, the
    excess being q = t0·m0inv, which every lane computes (TPI·n32 = 512 slots).
    """
    model = montmult_model(bits)
    if not kernel.instrs:
        raise ProxyError(f"{kernel.name}: no SASS to count (the report was built without it)")
    if lanes < 1:
        raise ValueError("lanes must be >= 1")
    rows: list[dict[str, Any]] = []
    total = 0.0
    for sp in spans:
        body = [i for i in kernel.instrs if any(a <= i.addr <= b for a, b in sp.ranges)]
        if not body:
            raise ProxyError(f"{kernel.name}: no instructions in {sp.label}")
        counts = count_classes(body)
        slots = counts["imad_slots"] * sp.trips
        total += slots
        rows.append({"span": sp.label, "note": sp.note, "trips": sp.trips,
                     "slots_per_trip": counts["imad_slots"], "imad_wide": counts["imad_wide"],
                     "imad_lo": counts["imad_lo"], "imad_hi": counts["imad_hi"],
                     "imad_x": counts["imad_x"], "slots": slots})
    total *= lanes
    return {"kernel": kernel.name, "bits": bits, "n": model["n"], "lanes": lanes, "spans": rows,
            "imad_slots_per_montmult": total, "model_4n2": model["imad_slots"],
            "ratio": total / model["imad_slots"]}


def parse_span(kernel: KernelProxies, text: str) -> Span:
    """``REF=TRIPS[:own]`` (the CLI's ``--span``): REF a loop reference of :func:`select_loops`
    (``#0``, ``0x1ed0``, ``0x1ed0-0x2530``; ``:own``: its code outside nested loops) or, when no
    loop has that label, the address range ``0xA-0xB`` as it stands."""
    ref, sep, rest = text.partition("=")
    if not sep:
        raise ProxyError(f"--span {text!r}: expected REF=TRIPS[:own]")
    trips_s, _, flag = rest.partition(":")
    if flag not in ("", "own"):
        raise ProxyError(f"--span {text!r}: unknown flag {flag!r} (only ':own')")
    try:
        trips = float(trips_s)
    except ValueError:
        raise ProxyError(f"--span {text!r}: trips {trips_s!r} is not a number") from None
    try:
        (lp,) = select_loops(kernel, [ref])
        return loop_span(lp, trips, own=flag == "own")
    except ProxyError:
        start, dash, end = ref.partition("-")
        if ref.startswith("#") or not dash or flag:
            raise
        try:
            return Span(((int(start, 16), int(end, 16)),), trips, ref)
        except ValueError:
            raise ProxyError(f"--span {text!r}: bad address range") from None


def parse_dyn_smem(values: Sequence[str]) -> tuple[int, dict[str, int]]:
    """The CLI's ``--dyn-smem`` values: (bytes for every kernel, {regex: bytes})."""
    every = 0
    by: dict[str, int] = {}
    for v in values:
        pattern, sep, num = v.rpartition("=")
        try:
            n = int(num)
        except ValueError:
            raise ProxyError(f"--dyn-smem {v!r}: expected BYTES or REGEX=BYTES") from None
        if n < 0:
            raise ProxyError(f"--dyn-smem {v!r}: bytes must be >= 0")
        if sep:
            by[pattern] = n
        else:
            every = n
    return every, by


# ------------------------------------------------------------------------------------ check, output
def check(report: Report, pattern: str = r"_g<", max_stack: int = 2048) -> list[str]:
    """The failures of the threshold check: each kernel whose short or demangled name matches
    ``pattern`` must have no spills (known from the ptxas log) and a stack frame of at most
    ``max_stack`` bytes.  No kernel matching is itself a failure, never a silent pass."""
    hits = [k for k in report.kernels if _matches(pattern, k)]
    if not hits:
        return [f"no kernel matched the check pattern {pattern!r} (of {len(report.kernels)} "
                f"kernels measured: nothing was checked)"]
    out: list[str] = []
    for k in hits:
        if k.spills is None:
            out.append(f"{k.name}: spills unknown (no ptxas log for this cubin)")
        elif k.spills > 0:
            out.append(f"{k.name}: spills {k.spill_stores} B stores / {k.spill_loads} B loads")
        if k.stack_frame is None:
            out.append(f"{k.name}: stack frame unknown")
        elif k.stack_frame > max_stack:
            out.append(f"{k.name}: stack frame {k.stack_frame} B > {max_stack} B")
    return out


def _n(v: int | float | None) -> str:
    return "?" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.1f}"


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max([len(h), *(len(r[i]) for r in rows)]) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(head), "  ".join("-" * w for w in widths), *(line(r) for r in rows)])


def format_resources(report: Report) -> str:
    """The ptxas + occupancy table: one row per kernel."""
    head = ["kernel", "regs", "stack B", "spill st/ld B", "smem B", "cmem0 B", "block", "dyn smem",
            "warps/SM", "occ %", "limit", "lmem KiB/SM"]
    rows = []
    for k in report.kernels:
        o = k.occupancy
        spill = "?" if k.spills is None else f"{k.spill_stores}/{k.spill_loads}"
        rows.append([k.name, _n(k.registers), _n(k.stack_frame), spill, _n(k.static_smem),
                     _n(k.cmem0), str(k.block_size), _n(o.dyn_smem) if o else "?",
                     _n(o.active_warps) if o else "?", f"{100 * o.occupancy:.1f}" if o else "?",
                     o.limiter if o else "?",
                     _n(o.local_kib_per_sm) if o and o.local_kib_per_sm is not None else "?"])
    return _table(head, rows)


SASS_COLUMNS = [("total", "instrs"), ("imad", "IMAD"), ("imad_mul", "mul"), ("imad_slots", "slots"),
                ("imad_wide", "WIDE"), ("imad_hi", "HI"), ("imad_x", "X"), ("imad_lo", "lo"),
                ("imad_mul_imm", "mul imm"), ("imad_mov", "MOV"), ("imad_shl", "SHL"),
                ("imad_iadd", "IADD"), ("imad_nonmul", "nonmul"), ("SHFL", "SHFL"),
                ("VOTE", "VOTE"), ("LDL", "LDL"), ("STL", "STL"), ("LDS", "LDS"),
                ("STS", "STS"), ("LDG", "LDG"), ("STG", "STG")]


def format_sass(report: Report) -> str:
    """The SASS class counts: one row per kernel (static counts over the whole kernel)."""
    head = ["kernel", *(h for _, h in SASS_COLUMNS), "mul loops"]
    rows = [[k.name, *(_n(k.sass[c]) for c, _ in SASS_COLUMNS), str(len(multiply_loops(k.loops)))]
            for k in report.kernels if k.sass is not None]
    return _table(head, rows)


LOOP_COLUMNS = [("total", "instrs"), ("imad_mul", "mul"), ("imad_slots", "slots"),
                ("imad_wide", "WIDE"), ("imad_wide_x", "WIDE.X"), ("imad_hi", "HI"),
                ("imad_lo", "lo"), ("imad_mov", "MOV"), ("imad_iadd", "IADD"),
                ("imad_nonmul", "nonmul"), ("IADD3", "IADD3"), ("LDL", "LDL"), ("STL", "STL"),
                ("LDS", "LDS"), ("LDG", "LDG"), ("SHFL", "SHFL")]


def format_loops(report: Report) -> str:
    """The innermost multiply loops of each kernel with their per-trip class counts."""
    head = ["kernel / loop", "depth", *(h for _, h in LOOP_COLUMNS)]
    rows = []
    for k in report.kernels:
        for i, lp in enumerate(multiply_loops(k.loops)):
            rows.append([f"{k.name} #{i} {lp.label}", str(lp.depth),
                         *(_n(lp.counts[c]) for c, _ in LOOP_COLUMNS)])
    return _table(head, rows)


def to_json(report: Report) -> dict[str, Any]:
    """The report as JSON-ready data (instructions left out; loops with their counts)."""
    kernels = []
    for k in report.kernels:
        d = {f.name: getattr(k, f.name) for f in dataclasses.fields(k)
             if f.name not in ("instrs", "loops", "occupancy")}
        d["spills"] = k.spills
        d["occupancy"] = dataclasses.asdict(k.occupancy) if k.occupancy else None
        mul = {id(lp) for lp in multiply_loops(k.loops)}
        d["loops"] = [dataclasses.asdict(lp) | {"label": lp.label, "start": lp.start,
                                                "end": lp.end, "multiply_loop": id(lp) in mul}
                      for lp in k.loops]
        kernels.append(d)
    return {"schema": "unifl-gpu-proxies/1", "arch": f"sm_{report.arch}", "cubin": report.cubin,
            "compile_seconds": report.compile_seconds, "command": report.command,
            "nvcc_version": report.nvcc_version, "limits": dataclasses.asdict(report.limits),
            "warnings": report.warnings, "kernels": kernels}


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI (see the module doc); 0 ok, 1 the check failed, 2 an error."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--cubin", type=Path, help="reuse this cubin instead of compiling")
    ap.add_argument("--ptxas-log", type=Path, help="ptxas -v log of --cubin (default: "
                    "<cubin>.ptxas.txt when present)")
    ap.add_argument("--out-dir", type=Path, help="keep the compiled cubin and its ptxas log here")
    ap.add_argument("--json", type=Path, help="write the full report as JSON here")
    ap.add_argument("--kernel", help="only kernels whose short or demangled name matches (regex)")
    ap.add_argument("--block-size", type=int, help="threads per block for every kernel (default: "
                    "the runtime's, BLOCK_SIZE_TABLE)")
    ap.add_argument("--dyn-smem", action="append", default=[], metavar="[REGEX=]BYTES",
                    help="dynamic shared memory per block: BYTES for every kernel (default 0), or "
                         "REGEX=BYTES for the kernels whose short name matches (repeatable, first "
                         "match wins)")
    ap.add_argument("--no-sass", action="store_true", help="skip the disassembly")
    ap.add_argument("--loops", action="store_true", help="list the innermost multiply loops "
                    "(default: only with --kernel)")
    ap.add_argument("--check", action="store_true", help="fail when a kernel matching "
                    "--check-pattern spills or has a stack frame over --max-stack")
    ap.add_argument("--check-pattern", default=r"_g<", help="regex (default: '_g<')")
    ap.add_argument("--max-stack", type=int, default=2048, help="bytes (default 2048)")
    ap.add_argument("--montmult", metavar="KERNEL", help="IMAD slots per MontMult of this kernel "
                    "(regex matching one kernel), with --bits, --span and --lanes")
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--span", action="append", default=[], metavar="REF=TRIPS[:own]",
                    help="code counted per MontMult: a loop (#i, 0xHEAD, 0xA-0xB) or an address "
                         "range, with its trips per lane")
    ap.add_argument("--lanes", type=int, default=1, help="threads sharing one MontMult (TPI)")
    args = ap.parse_args(argv)
    try:
        if args.cubin is not None:
            compiled = reuse_cubin(args.cubin, args.ptxas_log)
        else:
            compiled = compile_cubin(args.out_dir)
        sizes = {".": args.block_size} if args.block_size else None
        dyn_all, dyn_by = parse_dyn_smem(args.dyn_smem)
        report = build_report(compiled, args.kernel, dyn_all, sizes, not args.no_sass,
                              dyn_smem_by=dyn_by)
        for w in report.warnings:
            print(f"warning: {w}", file=sys.stderr)
        how = (f"compiled in {report.compile_seconds:.1f} s ({report.nvcc_version})"
               if report.compile_seconds is not None else "reused")
        print(f"gpu proxies: {report.cubin} (sm_{report.arch}, {how}); occupancy for "
              f"{report.limits.name}; static counts, not timings")
        if not report.kernels:
            print(f"no kernel matches --kernel {args.kernel!r}")
        else:
            print(format_resources(report))
            if not args.no_sass:
                print()
                print(format_sass(report))
                if args.loops or args.kernel:
                    print()
                    print(format_loops(report))
        data = to_json(report)
        if args.montmult:
            k = report.kernel(args.montmult)
            if not args.span:
                raise ProxyError("--montmult needs at least one --span REF=TRIPS")
            mm = imad_slots_per_montmult(k, args.bits, [parse_span(k, s) for s in args.span],
                                         args.lanes)
            data["montmult"] = mm
            print()
            for row in mm["spans"]:
                print(f"  {row['note'] or row['span']}: {row['slots_per_trip']} slots/trip x "
                      f"{row['trips']:g} = {row['slots']:,.0f}")
            print(f"{k.name}: {mm['imad_slots_per_montmult']:,.0f} IMAD slots per {args.bits}-bit "
                  f"MontMult (x{mm['lanes']} lanes) = {mm['ratio']:.3f} x 4n^2 "
                  f"({mm['model_4n2']:,})")
        rc = 0
        if args.check:
            fails = check(report, args.check_pattern, args.max_stack)
            data["check"] = {"pattern": args.check_pattern, "max_stack": args.max_stack,
                             "failures": fails}
            print()
            for f in fails:
                print(f"CHECK FAILED: {f}")
            if not fails:
                print(f"check passed: kernels matching {args.check_pattern!r} have no spills and "
                      f"stack frames <= {args.max_stack} B")
            rc = 1 if fails else 0
        if args.json:
            args.json.write_text(json.dumps(data, indent=1, default=str), encoding="utf-8")
        return rc
    except (ProxyError, ValueError) as exc:
        print(f"gpu_proxies: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

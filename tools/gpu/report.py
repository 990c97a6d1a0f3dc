"""Per-kernel figures of a compiled cubin (:func:`build_report`: ptxas, res-usage, SASS classes,
loops, occupancy), the CI gate on them (:func:`check`: no spills, a bounded stack frame) and their
text tables and JSON."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .controlflow import Loop, find_loops, multiply_loops
from .errors import ProxyError
from .occupancy import DEFAULT_BLOCK_SIZE, BLOCK_SIZE_TABLE, H100, Occupancy, SmLimits, \
    block_size_for, occupancy
from .ptxas import parse_ptxas, parse_res_usage
from .sass import Instr, SassFunction, count_classes, parse_sass
from .toolchain import ARCH, Compiled, demangle, find_tool, short_name


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

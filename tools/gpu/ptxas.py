"""Parsers of what the compiler reports per kernel: nvcc's ``-Xptxas -v`` log (registers, stack
frame, spill bytes, shared and constant memory) and ``cuobjdump -res-usage``.  A line of a known
shape that does not parse is a :class:`ParseError`; a line of no known shape is kept and reported,
never dropped silently."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .errors import ParseError


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

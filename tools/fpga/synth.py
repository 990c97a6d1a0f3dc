"""Synthesis figures of the RTL MontMult engine (``rtl/unifl_mm_engine.v``) and of the
exponentiation unit around it (``rtl/unifl_modexp.v``) with yosys.

For each configuration (design × family × operand size) this runs yosys once, from nothing (a
fresh temporary directory per run: no netlist, log or figure is kept from an earlier run):

    read_verilog -sv rtl/unifl_mm_parts.v rtl/unifl_mm_engine.v [rtl/unifl_modexp.v]
    chparam -set W 64 -set D <bits/64> [-set NE <engines> -set NM <contexts>] <top>
    synth_xilinx    -family xcup        -noiopad -noclkbuf -flatten -top <top>  (UltraScale+)
    synth_intel_alm -family cyclone10gx -noiopad -noclkbuf -top <top>  (Cyclone 10 GX; flattens by default)
    rename -top <top>
    tee -o stat.txt stat ; tee -o check.txt check -noinit ; write_json netlist.json

The designs (``DESIGNS``): ``engine`` (one MontMult engine) and ``unit`` (``unifl_modexp`` with
``engines`` engines and ``contexts`` key contexts).  The unit's own share -- window tables and
running values in block RAM, the exponent LUT RAM, slot sequencers, loader and unloader -- is its
figure less ``engines`` times the engine's (:func:`unit_own`).

``-noiopad -noclkbuf``: the engine is a block inside a kernel, not a chip top (out-of-context), so
no I/O buffer is counted; ``-flatten``: one netlist, so the walk below sees every path.  From
``stat`` it takes DSP, LUT, FF, carry, BRAM and LUTRAM counts (and the LUT sites the LUT RAMs
occupy); from the log, latches and ABC failures; from ``check``, logic loops and other problems.

yosys 0.23 packs no flip-flop into a DSP48E2 (AREG/BREG/MREG/PREG stay 0 even for a textbook
registered 27x18 multiplier, checked by hand), so the engine's operand, product and output
registers around each multiplier remain fabric flip-flops and each DSP counts here as an
unregistered block between two registers; Vivado absorbs such registers into the DSP.

Longest register-to-register path (a netlist walk, not static timing analysis)
------------------------------------------------------------------------------
yosys 0.23 has no timing model for these cell libraries (``sta`` needs liberty-style timing the
xilinx / intel_alm flows do not carry), so the path is found by walking the synthesized netlist
(``write_json``): every flip-flop output (and every DSP whose internal registers are enabled) is
a start point, every flip-flop input (D, CE, R/S) an end point, and the combinational cells in
between are a DAG (a logic loop is reported, never followed).  Each cell adds an ASSUMED delay by
class -- LUT (incl. the net into it), wide mux (MUXF7/8/9), carry element (CARRY4 = 4 bits; an
Intel ALUT_ARITH = 1 bit), unregistered DSP -- plus a fixed flip-flop overhead (clock-to-out,
setup, the net into the end point).  Two weight sets bracket the estimate (``FAST`` and ``SLOW``
below); the path reported is the slowest under each, with its make-up: LUT levels, mux levels,
carry cells and DSPs (DSPs are counted separately, never as "cells").  ``max_levels`` is the
most LUT + mux levels on any register-to-register path (carry and DSP excluded).

Limits of the walk: the delays are per-cell assumptions, not the vendor's timing, and nets have
no placement (a 100-engine design routes worse than one engine alone); it works at cell
granularity (a multi-output cell's outputs all take its latest input, so a path through a carry
cell may be overstated by one element); a DSP is a single block delay whatever ports it uses;
Vivado / Quartus re-synthesize (retarget CARRY4 to CARRY8, absorb inverters, pack ALMs, re-time)
and would find different paths.  It answers "how many LUT levels and DSPs lie between two
registers", which is what decides whether this engine can be clocked near 300 MHz.  It is an
estimate; nothing here ran on an FPGA.

On Cyclone 10 GX the counts are usable but the path is not: yosys 0.23's intel_alm flow builds the
multi-operand sums ($macc) as LUT logic rather than ALM carry chains, which Quartus would not do;
and ABC9's &mfs step aborts on this design (an assertion in giaMfs.c), after which yosys keeps
the LUT mapping ABC wrote before that step (reported as ``abc_assertions``).

Usage: ``python -m tools.fpga.synth [--design engine|unit] [--engines N] [--config xcup:1024 ...]
[--json out.json] [--keep DIR]`` (default: the engine, the four configurations xcup / cyclone10gx
× 1024 / 2048).  Needs ``yosys`` (Debian: ``apt-get install yosys``, 0.23).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# the engine and its building blocks (adder tree, LUT RAM, block RAM, low-half multiplier)
RTL = [ROOT / "rtl" / "unifl_mm_parts.v", ROOT / "rtl" / "unifl_mm_engine.v"]
TOP = "unifl_mm_engine"
W = 64  # limb width of the engine (the module's W parameter)


@dataclass(frozen=True)
class Design:
    """A synthesizable top: its module, its sources, and the parameters set besides W and D."""

    name: str
    top: str
    sources: tuple[Path, ...]


DESIGNS = {
    "engine": Design("engine", TOP, tuple(RTL)),
    "unit": Design("unit", "unifl_modexp", tuple(RTL) + (ROOT / "rtl" / "unifl_modexp.v",)),
}

# ---- cell classes per family --------------------------------------------------------------------
# ff: sequential start/end points; lut: LUT levels; mux: dedicated wide muxes; carry: carry-chain
# elements; inv: inverters (absorbed into LUTs by the vendor tools: no delay, no level); dsp:
# multiplier blocks; bram / lutram / uram: memories; buf: I/O and clock buffers; latch.
XILINX_CLASSES = {
    **{t: "ff" for t in ("FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1")},
    **{t: "latch" for t in ("LDCE", "LDPE", "LDCE_1", "LDPE_1")},
    **{f"LUT{k}": "lut" for k in range(1, 7)},
    "MUXF7": "mux", "MUXF8": "mux", "MUXF9": "mux",
    "CARRY4": "carry", "CARRY8": "carry",
    "INV": "inv",
    "DSP48E1": "dsp", "DSP48E2": "dsp",
    "RAMB18E2": "bram", "RAMB36E2": "bram", "RAMB18E1": "bram", "RAMB36E1": "bram",
    "FIFO18E2": "bram", "FIFO36E2": "bram",
    "URAM288": "uram",
    **{t: "lutram" for t in ("RAM32X1S", "RAM64X1S", "RAM128X1S", "RAM256X1S", "RAM512X1S",
                             "RAM32X1D", "RAM64X1D", "RAM128X1D", "RAM256X1D", "RAM32M",
                             "RAM64M", "RAM32M16", "RAM64M8", "SRL16E", "SRLC16E", "SRLC32E")},
    **{t: "buf" for t in ("IBUF", "OBUF", "OBUFT", "IOBUF", "BUFG", "BUFGCE")},
}
INTEL_CLASSES = {
    "MISTRAL_FF": "ff",
    **{f"MISTRAL_ALUT{k}": "lut" for k in range(2, 7)},
    "MISTRAL_ALUT_ARITH": "carry",
    "MISTRAL_NOT": "inv",
    "MISTRAL_MUL27X27": "dsp", "MISTRAL_MUL18X18": "dsp", "MISTRAL_MUL9X9": "dsp",
    "MISTRAL_M10K": "bram", "__MISTRAL_M20K_SDP": "bram", "MISTRAL_M20K": "bram",
    "MISTRAL_MLAB": "lutram",
    "MISTRAL_IB": "buf", "MISTRAL_OB": "buf", "MISTRAL_IO": "buf", "MISTRAL_CLKBUF": "buf",
}

# DSP blocks per MAC cell: a Cyclone 10 GX / Arria 10 / Stratix 10 variable-precision DSP block
# is one 27x27 or two 18x19 multipliers (three 9x9 on Cyclone V; counted as 1/3 here too).
DSP_BLOCKS = {"MISTRAL_MUL27X27": 1.0, "MISTRAL_MUL18X18": 0.5, "MISTRAL_MUL9X9": 1 / 3}
# LUTs of a SLICEM that a distributed-RAM / shift-register cell occupies (UltraScale+ CLB guide):
# the "LUT" budget of an engine is logic LUTs plus these
LUTRAM_SITES = {"RAM32M16": 8, "RAM64M8": 8, "RAM32M": 4, "RAM64M": 4, "RAM32X1D": 2,
                "RAM64X1D": 2, "RAM128X1D": 4, "RAM256X1D": 8, "RAM32X1S": 1, "RAM64X1S": 1,
                "RAM128X1S": 2, "RAM256X1S": 4, "RAM512X1S": 8, "SRL16E": 1, "SRLC16E": 1,
                "SRLC32E": 1,
                # a MISTRAL_MLAB cell is a 32 x 1 slice; an MLAB (one LAB, 10 ALMs) holds 640 bits
                "MISTRAL_MLAB": 0.5}
# BRAM36-equivalents per cell
BRAM_UNITS = {"RAMB18E2": 0.5, "RAMB18E1": 0.5, "FIFO18E2": 0.5}

# ---- assumed delays (ns) -------------------------------------------------------------------------
# UltraScale+ -2: a LUT with the net into it 0.35-0.55 ns; MUXF7/8/9 (in-slice, dedicated)
# 0.05-0.10; a CARRY4 element (4 bits of ripple) 0.05-0.10; an unregistered DSP48E2 multiply,
# A/B in to P out, 2.4-3.0 ns (DS923: 410 MHz at -2 for a DSP without its pipeline registers
# MREG/ADREG, i.e. ~2.44 ns register to register through the multiplier); flip-flop overhead
# (clock-to-out + setup + the net into the end point) 0.4-0.7.
# Cyclone 10 GX (20 nm, Arria 10 class, slowest speed grades): an ALUT with its net 0.45-0.70;
# one bit of ALM carry 0.02-0.04; an unregistered 27x27 multiply 3.0-4.0; overhead 0.5-0.8.
# A block RAM is a register boundary (its address / data inputs end paths, its read data start
# them) whose read data come "bram" ns after the clock (no output register): RAMB36E2 1.2-1.8,
# M20K 1.5-2.2 (assumed, like every weight here).
FAST = {
    "xcup": {"lut": 0.35, "mux": 0.05, "carry": 0.05, "dsp": 2.4, "inv": 0.0, "ff": 0.4,
             "bram": 1.2},
    "cyclone10gx": {"lut": 0.45, "mux": 0.05, "carry": 0.02, "dsp": 3.0, "inv": 0.0, "ff": 0.5,
                    "bram": 1.5},
}
SLOW = {
    "xcup": {"lut": 0.55, "mux": 0.10, "carry": 0.10, "dsp": 3.0, "inv": 0.0, "ff": 0.7,
             "bram": 1.8},
    "cyclone10gx": {"lut": 0.70, "mux": 0.10, "carry": 0.04, "dsp": 4.0, "inv": 0.0, "ff": 0.8,
                    "bram": 2.2},
}


@dataclass(frozen=True)
class Family:
    name: str
    title: str
    synth: str          # the yosys command, with {top} for the top module
    classes: dict[str, str]


FAMILIES = {
    "xcup": Family("xcup", "AMD UltraScale+ (yosys synth_xilinx -family xcup)",
                   "synth_xilinx -family xcup -noiopad -noclkbuf -flatten -top {top}", XILINX_CLASSES),
    "cyclone10gx": Family("cyclone10gx", "Intel Cyclone 10 GX (yosys synth_intel_alm -family "
                          "cyclone10gx)",
                          "synth_intel_alm -family cyclone10gx -noiopad -noclkbuf -top {top}",
                          INTEL_CLASSES),
}
DEFAULT_CONFIGS = [("xcup", 1024), ("xcup", 2048), ("cyclone10gx", 1024), ("cyclone10gx", 2048)]


def yosys_path() -> str | None:
    return shutil.which("yosys")


def yosys_version(yosys: str | None = None) -> str:
    exe = yosys or yosys_path()
    if exe is None:
        raise FileNotFoundError("yosys not installed (apt-get install -y yosys)")
    return subprocess.run([exe, "-V"], capture_output=True, text=True, check=True).stdout.strip()


# ---- stat / log parsing --------------------------------------------------------------------------
def parse_stat(text: str) -> dict[str, int]:
    """Cell counts by type from yosys ``stat`` output (the top module's block)."""
    counts: dict[str, int] = {}
    in_cells = False
    for line in text.splitlines():
        if re.match(r"\s*Number of cells:\s+\d+", line):
            in_cells = True
            counts = {}
            continue
        if in_cells:
            m = re.match(r"\s+(\S+)\s+(\d+)\s*$", line)
            if m:
                counts[m.group(1)] = int(m.group(2))
            elif line.strip():
                in_cells = False
    return counts


def summarize_cells(fam: Family, counts: dict[str, int]) -> dict[str, Any]:
    """DSP / LUT / FF / BRAM / LUTRAM figures from cell counts."""
    by_class: Counter[str] = Counter()
    unknown = {}
    for t, n in counts.items():
        cls = fam.classes.get(t)
        if cls is None:
            unknown[t] = n
            cls = "lut"  # an unknown cell is taken as logic (and reported)
        by_class[cls] += n
    dsp_blocks = sum(DSP_BLOCKS.get(t, 1.0) * n for t, n in counts.items()
                     if fam.classes.get(t) == "dsp")
    bram = sum(BRAM_UNITS.get(t, 1.0) * n for t, n in counts.items()
               if fam.classes.get(t) == "bram")
    out = {
        "dsp": int(round(dsp_blocks)) if dsp_blocks == int(dsp_blocks) else round(dsp_blocks, 1),
        "dsp_cells": {t: n for t, n in counts.items() if fam.classes.get(t) == "dsp"},
        "lut": by_class["lut"],
        "lut_by_type": {t: n for t, n in sorted(counts.items()) if fam.classes.get(t) == "lut"},
        "carry": by_class["carry"],
        "mux": by_class["mux"],
        "inv": by_class["inv"],
        "ff": by_class["ff"],
        "latches": by_class["latch"],
        "bram": bram,
        "lutram": by_class["lutram"],
        "lutram_cells": {t: n for t, n in counts.items() if fam.classes.get(t) == "lutram"},
        # logic LUTs plus the LUT sites the distributed RAMs and shift registers occupy
        "lut_sites": int(by_class["lut"] + sum(LUTRAM_SITES.get(t, 1) * n
                                               for t, n in counts.items()
                                               if fam.classes.get(t) == "lutram")),
        "uram": by_class["uram"],
        "unknown_cells": unknown,
    }
    if fam.name == "cyclone10gx":
        # yosys does not pack ALMs: a 6-input ALUT takes a whole ALM; two smaller ones may share
        # one (Quartus decides).  Rough ALM figure: ALUT6 + ALUT5 + the rest / 2 (incl. carry).
        small = sum(n for t, n in counts.items()
                    if t in ("MISTRAL_ALUT2", "MISTRAL_ALUT3", "MISTRAL_ALUT4", "MISTRAL_NOT"))
        # plus the ALMs of the MLABs that hold the LUT RAMs (half an ALM per 32 x 1 slice)
        out["alm_est"] = int(counts.get("MISTRAL_ALUT6", 0) + counts.get("MISTRAL_ALUT5", 0)
                             + (small + counts.get("MISTRAL_ALUT_ARITH", 0)) / 2
                             + LUTRAM_SITES["MISTRAL_MLAB"] * counts.get("MISTRAL_MLAB", 0))
    return out


# ---- the register-to-register walk ---------------------------------------------------------------
def _is_registered_dsp(cell: dict[str, Any]) -> bool:
    """A DSP with any of its internal pipeline registers enabled (AREG, BREG, MREG, PREG, ...)."""
    for k, v in cell.get("parameters", {}).items():
        if k.endswith("REG") and not k.startswith("IS_"):
            try:
                if int(str(v), 2 if set(str(v)) <= {"0", "1"} else 10):
                    return True
            except ValueError:
                continue
    return False


def walk(netlist: dict[str, Any], fam: Family, top: str = TOP) -> dict[str, Any]:
    """Longest register-to-register paths of the top module under the FAST and SLOW weights, and
    the most LUT + mux levels on any such path (see the module docstring)."""
    mod = netlist["modules"][top]
    cells = mod["cells"]
    names = list(cells)
    cls: list[str] = []
    bram_cells: set[int] = set()
    for n in names:
        c = cells[n]
        kind = fam.classes.get(c["type"], "lut")
        if kind == "dsp" and _is_registered_dsp(c):
            kind = "ff"  # registered DSP: treated as a register boundary (coarse)
        if kind in ("bram", "uram"):
            bram_cells.add(len(cls))
            kind = "ff"  # synchronous read: a boundary, its read data late by weight["bram"]
        cls.append(kind)
    driver: dict[int, int] = {}
    for i, n in enumerate(names):
        c = cells[n]
        dirs = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            if dirs.get(port) == "output":
                for b in bits:
                    if isinstance(b, int):
                        driver[b] = i
    # fan-in (driver cells) of every cell, from its input bits
    fanin: list[list[int]] = []
    for n in names:
        c = cells[n]
        dirs = c.get("port_directions", {})
        src: set[int] = set()
        for port, bits in c["connections"].items():
            if dirs.get(port, "input") != "output":
                for b in bits:
                    if isinstance(b, int) and b in driver:
                        src.add(driver[b])
        fanin.append(sorted(src))

    # a readable name per cell output: the public net its first output bit drives
    netname: dict[int, str] = {}
    for nm, info in mod.get("netnames", {}).items():
        if info.get("hide_name"):
            continue
        for k, b in enumerate(info["bits"]):
            if isinstance(b, int) and b not in netname:
                netname[b] = nm if len(info["bits"]) == 1 else f"{nm}[{k}]"

    def label(i: int) -> str:
        c = cells[names[i]]
        dirs = c.get("port_directions", {})
        for port, bits in c["connections"].items():
            if dirs.get(port) == "output":
                for b in bits:
                    if isinstance(b, int) and b in netname:
                        return netname[b]
        return c["type"]

    comb = {"lut", "mux", "carry", "inv", "dsp", "buf"}
    # topological order of the combinational cells (iterative DFS); a back edge is a logic loop
    order: list[int] = []
    state = [0] * len(names)  # 0 new, 1 on stack, 2 done
    loops = 0
    for s in range(len(names)):
        if cls[s] not in comb or state[s]:
            continue
        stack = [(s, 0)]
        state[s] = 1
        while stack:
            v, k = stack[-1]
            fi = fanin[v]
            while k < len(fi) and (cls[fi[k]] not in comb or state[fi[k]] == 2):
                k += 1
            if k < len(fi):
                u = fi[k]
                stack[-1] = (v, k + 1)
                if state[u] == 1:
                    loops += 1
                    continue
                state[u] = 1
                stack.append((u, 0))
            else:
                stack.pop()
                state[v] = 2
                order.append(v)

    NEG = float("-inf")

    def longest(weight: dict[str, float]) -> tuple[float, list[int], int]:
        arr = [NEG] * len(names)
        pred = [-1] * len(names)
        for i in range(len(names)):
            if cls[i] == "ff":
                arr[i] = weight.get("bram", 0.0) if i in bram_cells else 0.0
        for v in order:
            best, arg = NEG, -1
            for u in fanin[v]:
                if arr[u] > best:
                    best, arg = arr[u], u
            if best > NEG:
                arr[v] = best + weight.get(cls[v], weight["lut"])
                pred[v] = arg
        best, end, end_ff = NEG, -1, -1
        for i in range(len(names)):
            if cls[i] != "ff":
                continue
            for u in fanin[i]:
                if arr[u] > best:
                    best, end, end_ff = arr[u], u, i
        if best == NEG:  # no register-to-register path at all
            return weight["ff"], [], -1
        path: list[int] = []
        v = end
        while v >= 0:
            path.append(v)
            if cls[v] == "ff":
                break
            v = pred[v]
        path.reverse()
        return best + weight["ff"], path, end_ff

    def describe(total: float, path: list[int], end_ff: int) -> dict[str, Any]:
        inner = [v for v in path if cls[v] != "ff"]
        kinds = Counter(cls[v] for v in inner)
        return {
            "est_ns": round(total, 2),
            "lut_levels": kinds["lut"], "mux_levels": kinds["mux"],
            "carry_cells": kinds["carry"], "dsp": kinds["dsp"],
            "cells": kinds["lut"] + kinds["mux"] + kinds["carry"],
            "through": _compress([cells[names[v]]["type"] for v in inner]),
            "start": label(path[0]) if path and cls[path[0]] == "ff" else None,
            "end": label(end_ff) if end_ff >= 0 else None,
        }

    fast = describe(*longest(FAST[fam.name]))
    slow = describe(*longest(SLOW[fam.name]))
    unit = {"lut": 1.0, "mux": 1.0, "carry": 0.0, "dsp": 0.0, "inv": 0.0, "buf": 0.0, "ff": 0.0}
    levels, lpath, lend = longest(unit)
    lp = describe(levels - unit["ff"], lpath, lend)
    return {
        "fast": fast, "slow": slow,
        "max_levels": int(levels), "max_levels_path": lp,
        "logic_loops": loops,
        "fmax_mhz": [round(1000 / slow["est_ns"]), round(1000 / fast["est_ns"])],
    }


def _compress(types: list[str]) -> str:
    """'LUT6 MUXF7 MUXF8 DSP48E2 CARRY4×12 LUT3' style run-length summary of a path."""
    out: list[str] = []
    i = 0
    while i < len(types):
        j = i
        while j < len(types) and types[j] == types[i]:
            j += 1
        out.append(types[i] if j - i == 1 else f"{types[i]}×{j - i}")
        i = j
    return " ".join(out)



# ---- one synthesis -------------------------------------------------------------------------------
def chparams(design: Design, bits: int, engines: int, contexts: int) -> str:
    """The ``chparam`` arguments of ``design`` at ``bits``."""
    extra = f" -set NE {engines} -set NM {contexts}" if design.name == "unit" else ""
    return f"-set W {W} -set D {bits // W}{extra}"


def synthesize(family: str, bits: int, keep: Path | None = None,
               yosys: str | None = None, design: str = "engine", engines: int = 1,
               contexts: int = 1) -> dict[str, Any]:
    """Synthesize ``design`` for ``family`` at ``bits`` (D = bits/64 words of 64 bits; the unit
    with ``engines`` engines and ``contexts`` key contexts); return the figures.  Runs in a fresh
    temporary directory (or ``keep``, which receives the log, stat, check output and the JSON
    netlist)."""
    fam = FAMILIES[family]
    des = DESIGNS[design]
    top = des.top
    exe = yosys or yosys_path()
    if exe is None:
        raise FileNotFoundError("yosys not installed (apt-get install -y yosys)")
    if bits % W:
        raise ValueError(f"bits must be a multiple of {W}")
    d = bits // W
    with tempfile.TemporaryDirectory(prefix="unifl-synth-") as tmp:
        wd = Path(tmp)
        script = "; ".join([
            "read_verilog -sv " + " ".join(str(f) for f in des.sources),
            f"chparam {chparams(des, bits, engines, contexts)} {top}",
            fam.synth.format(top=top),
            f"rename -top {top}",   # the parameterised top keeps its plain name in the netlist
            "tee -q -o stat.txt stat",
            "tee -q -o check.txt check -noinit",
            "write_json netlist.json",
        ])
        t0 = time.perf_counter()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run([exe, "-q", "-l", "yosys.log", "-p", script], cwd=wd,
                              capture_output=True, text=True)
        seconds = time.perf_counter() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_seconds = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        log = (wd / "yosys.log").read_text(errors="replace") if (wd / "yosys.log").exists() else ""
        if proc.returncode != 0:
            raise RuntimeError(f"yosys failed ({proc.returncode}) for {family}:{bits}:\n"
                               f"{proc.stderr[-3000:] or log[-3000:]}")
        counts = parse_stat((wd / "stat.txt").read_text())
        check = (wd / "check.txt").read_text()
        t1 = time.perf_counter()
        netlist = json.loads((wd / "netlist.json").read_text())
        path = walk(netlist, fam, top)
        walk_seconds = time.perf_counter() - t1
        json_counts = Counter(c["type"] for c in netlist["modules"][top]["cells"].values())
        if dict(json_counts) != counts:
            raise RuntimeError(f"stat and the JSON netlist disagree: {counts} vs {dict(json_counts)}")
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            for f in ("yosys.log", "stat.txt", "check.txt", "netlist.json"):
                shutil.copy(wd / f, keep / f"{design}_{family}_{bits}_{f}")
    m = re.search(r"Found and reported (\d+) problems", check)
    abc_failures = re.findall(r"ABC: execution of command .* failed: return code (\d+)", log)
    abc_asserts = sorted(set(re.findall(r"ABC: (\S+: \S+: .*Assertion .*failed\.)", log)))
    res = {
        "design": design, "top": top, "engines": engines if design == "unit" else 1,
        "contexts": contexts,
        "family": family, "title": fam.title, "bits": bits, "W": W, "D": d,
        "yosys": yosys_version(exe),
        "command": fam.synth.format(top=top),
        "seconds": round(seconds, 1), "cpu_seconds": round(cpu_seconds, 1),
        "walk_seconds": round(walk_seconds, 1),
        "cells": counts,
        **summarize_cells(fam, counts),
        "latches_inferred": len(re.findall(r"^Latch inferred", log, re.M)),
        "check_problems": int(m.group(1)) if m else None,
        "abc_failures": [int(c) for c in abc_failures],
        "abc_assertions": abc_asserts,
        "path": path,
    }
    return res


def gate_netlist(bits: int, out: Path, flow: str = "generic", yosys: str | None = None,
                 design: str = "engine", engines: int = 1, contexts: int = 1,
                 params: str = "") -> Path:
    """Synthesize ``design`` at ``bits`` (W = 64; ``params``: further ``-set NAME VALUE`` pairs
    for chparam) and write the gate-level netlist to ``out``
    (``write_verilog -noattr``) for simulation against the RTL's testbench.

    ``flow``: "generic" -- yosys's technology-independent ``synth -flatten``; the netlist is made
    of yosys's gate cells and simulates with ``simcells.v`` (``gate_sim_library``).  "xcup-nodsp"
    -- the UltraScale+ mapping (LUTs, CARRY4, FDRE, RAM32M16/RAM64M8, SRL16E) with multipliers in
    LUTs, simulated with yosys's ``xilinx/cells_sim.v``: yosys 0.23 ships no DSP48E2 simulation
    model, so the DSP-mapped netlist itself cannot be simulated here."""
    exe = yosys or yosys_path()
    if exe is None:
        raise FileNotFoundError("yosys not installed (apt-get install -y yosys)")
    if bits % W:
        raise ValueError(f"bits must be a multiple of {W}")
    des = DESIGNS[design]
    top = des.top
    synth_cmd = {"generic": f"synth -flatten -top {top}",
                 "xcup-nodsp": f"synth_xilinx -family xcup -noiopad -noclkbuf -flatten -nodsp "
                               f"-top {top}"}
    if flow not in synth_cmd:
        raise ValueError(f"unknown flow {flow!r}: {sorted(synth_cmd)}")
    out.parent.mkdir(parents=True, exist_ok=True)
    script = "; ".join(["read_verilog -sv -DSYNTHESIS " + " ".join(str(f) for f in des.sources),
                        f"chparam {chparams(des, bits, engines, contexts)} {params} {top}",
                        synth_cmd[flow], f"rename -top {top}",
                        f"write_verilog -noattr {out}"])
    proc = subprocess.run([exe, "-q", "-p", script], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"yosys failed ({proc.returncode}) writing the {flow} netlist at "
                           f"{bits} bits:\n{proc.stderr[-3000:]}")
    return out


def gate_sim_library(flow: str = "generic", yosys: str | None = None) -> Path:
    """The cell library a ``gate_netlist`` of ``flow`` simulates with (from yosys's share dir)."""
    exe = yosys or yosys_path()
    if exe is None:
        raise FileNotFoundError("yosys not installed (apt-get install -y yosys)")
    share = Path(exe).resolve().parent.parent / "share" / "yosys"
    lib = share / ("simcells.v" if flow == "generic" else "xilinx/cells_sim.v")
    if not lib.exists():
        raise FileNotFoundError(f"{lib} not found (yosys share directory)")
    return lib


# ---- output --------------------------------------------------------------------------------------
#: figures that add up over the parts of a design (what :func:`unit_own` subtracts)
ADDITIVE = ("dsp", "lut", "lut_sites", "ff", "carry", "bram", "lutram", "alm_est")


def unit_own(unit: dict[str, Any], engine: dict[str, Any]) -> dict[str, float]:
    """The unit's own share: its figures less ``engines`` times the engine's (same family and
    size; the engine synthesized alone, with the unit's number of modulus banks or not -- the
    difference is a few LUT RAM cells)."""
    if (unit["family"], unit["bits"]) != (engine["family"], engine["bits"]):
        raise ValueError("unit and engine figures of different configurations")
    n = unit["engines"]
    return {k: round(float(unit[k]) - n * float(engine[k]), 1) for k in ADDITIVE
            if k in unit and k in engine}


def table(results: list[dict[str, Any]]) -> str:
    head = ("| design | family | bits | DSP | LUT | FF | carry | BRAM | LUTRAM | latches | "
            "reg→reg path (slow weights) | max LUT+mux levels | est. ns | est. MHz | "
            "yosys s (CPU) |")
    rows = [head, "|" + "---|" * 15]
    for r in results:
        p = r["path"]
        s = p["slow"]
        dsp = r["dsp"]
        if r["family"] == "cyclone10gx":
            dsp = f"{dsp} ({'+'.join(f'{n}×{t[8:]}' for t, n in r['dsp_cells'].items())})"
        lut = f"{r['lut']}" + (f" (~{r['alm_est']} ALM)" if "alm_est" in r else
                                f" (+{r['lut_sites'] - r['lut']} as RAM)")
        design = r.get("design", "engine")
        if design == "unit":
            design = f"unit ({r['engines']} engine{'s' if r['engines'] > 1 else ''})"
        rows.append(
            f"| {design} | {r['family']} | {r['bits']} | {dsp} | {lut} | {r['ff']} | {r['carry']} | "
            f"{r['bram']} | {r['lutram']} | {r['latches'] + r['latches_inferred']} | "
            f"{s['lut_levels']} LUT + {s['mux_levels']} mux + {s['carry_cells']} carry + "
            f"{s['dsp']} DSP | {p['max_levels']} | {p['fast']['est_ns']}–{s['est_ns']} | "
            f"{p['fmax_mhz'][0]}–{p['fmax_mhz'][1]} | {r['seconds']} ({r['cpu_seconds']}) |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", action="append", metavar="FAMILY:BITS",
                    help="xcup:1024, xcup:2048, cyclone10gx:1024, cyclone10gx:2048 (default all)")
    ap.add_argument("--json", metavar="PATH", help="write the figures as JSON ('-' = stdout)")
    ap.add_argument("--keep", metavar="DIR", type=Path,
                    help="copy each run's log, stat, check output and netlist here")
    ap.add_argument("--paths", action="store_true", help="print the cell types along each path")
    ap.add_argument("--design", action="append", choices=sorted(DESIGNS),
                    help="engine and/or unit (default: engine)")
    ap.add_argument("--engines", type=int, action="append",
                    help="engines of the unit (repeatable; default 1)")
    ap.add_argument("--contexts", type=int, default=2,
                    help="key contexts of the unit (default 2: CRT decryption)")
    args = ap.parse_args(argv)
    if yosys_path() is None:
        print("yosys not installed (apt-get install -y yosys)", file=sys.stderr)
        return 2
    configs = DEFAULT_CONFIGS
    if args.config:
        configs = []
        for c in args.config:
            fam, _, bits = c.partition(":")
            if fam not in FAMILIES or not bits.isdigit():
                ap.error(f"bad --config {c!r} (FAMILY:BITS, FAMILY in {sorted(FAMILIES)})")
            configs.append((fam, int(bits)))
    print(f"# {yosys_version()}; {' '.join(str(f.relative_to(ROOT)) for f in RTL)}, W = {W}",
          file=sys.stderr)
    runs: list[tuple[str, int]] = []
    for design in args.design or ["engine"]:
        for n in (args.engines or [1]) if design == "unit" else [1]:
            runs.append((design, n))
    results = []
    for (design, n), (fam, bits) in ((r, c) for r in runs for c in configs):  # one yosys at a time
        print(f"# synthesizing {design} ({n} engine) {fam} {bits} bits ...", file=sys.stderr,
              flush=True)
        r = synthesize(fam, bits, keep=args.keep, design=design, engines=n,
                       contexts=args.contexts)
        print(f"#   {r['seconds']} s wall, {r['cpu_seconds']} s CPU (+ {r['walk_seconds']} s "
              "netlist walk)", file=sys.stderr)
        for warn in r["abc_assertions"]:
            print(f"#   warning: {warn} (yosys kept the mapping ABC wrote before it)",
                  file=sys.stderr)
        results.append(r)
    print(table(results))
    engines = {(r["family"], r["bits"]): r for r in results if r["design"] == "engine"}
    for r in results:
        if r["design"] == "unit" and (r["family"], r["bits"]) in engines:
            r["own"] = unit_own(r, engines[(r["family"], r["bits"])])
            print(f"unit ({r['engines']} engines) {r['family']} {r['bits']}: own share {r['own']}")
    if any(r["family"] == "cyclone10gx" for r in results):
        print("\nnote: cyclone10gx paths are not a clock estimate (yosys 0.23 builds the multi-"
              "operand sums in LUTs, not ALM carry chains); its counts are usable")
    if args.paths:
        for r in results:
            print(f"\n{r['family']} {r['bits']}: slow-weight path {r['path']['slow']['through']}"
                  f"\n  from {r['path']['slow']['start']}")
    if args.json:
        text = json.dumps({"estimate_note": "cell counts are yosys synthesis results; the path "
                           "delays and MHz are estimates from assumed per-cell delays, not timing "
                           "analysis; nothing ran on an FPGA",
                           "delays_ns": {"fast": FAST, "slow": SLOW}, "results": results},
                          indent=1)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""yosys synthesis of the RTL MontMult engine (rtl/unifl_mm_engine.v) through tools.fpga.synth.

One synthesis (UltraScale+, ``synth_xilinx -family xcup``, 1024 bits: W = 64, D = 16) is shared by
the module.  The tests hold the engine to its resource targets per 1024-bit engine -- at most 40
DSP48E2 and at most 5k LUTs, LUTs used as distributed RAM included -- to its structure (operands
in LUT RAM, not flip-flops; no latch or logic loop) and to its pipelining: no register-to-register
path holds a DSP together with any other logic, or more than a few LUT levels and one adder's
carry chain.  The measured figures are pinned within a margin, so a change to the engine shows up
here and in docs/backends/fpga.md together.  Skips, saying why, when yosys is missing (CI installs it).

The walk itself is also checked on a hand-made netlist, without yosys.
"""

from __future__ import annotations

import json
import os

import shutil
from pathlib import Path
from typing import Any

import pytest

from tools.fpga import synth

from tests.helpers.rtl_sim import ROOT, engine_interval, icarus_runner

pytestmark = pytest.mark.rtl

# Measured here with Debian's yosys 0.23 (0.23-6) on the engine as it stands; update them (and
# docs/backends/fpga.md) when the engine changes.
MEASURED = {"dsp": 31, "lut": 2047, "lut_sites": 2565, "ff": 4876}
TARGETS = {"dsp": 40, "lut_sites": 5000}   # per 1024-bit engine on UltraScale+

needs_yosys = pytest.mark.skipif(
    shutil.which("yosys") is None,
    reason="yosys not installed (apt-get install -y yosys): the engine's synthesis is not checked")


@pytest.fixture(scope="module")
def xcup1024() -> dict[str, Any]:
    return synth.synthesize("xcup", 1024)


@needs_yosys
def test_synthesizes_without_latch_or_loop(xcup1024: dict[str, Any]) -> None:
    r = xcup1024
    assert r["yosys"].startswith("Yosys "), r["yosys"]
    assert r["latches"] == 0 and r["latches_inferred"] == 0
    assert r["path"]["logic_loops"] == 0
    assert r["check_problems"] == 0
    assert r["unknown_cells"] == {}, "a cell type the walk does not know: add it to the classes"
    assert r["abc_failures"] == [], r["abc_assertions"]


@needs_yosys
def test_resource_targets(xcup1024: dict[str, Any]) -> None:
    """At most 40 DSP48E2 (two 64x64 products of 12 tiles each, 7 q-unit tiles: 31) and at most
    5k LUT sites, logic plus distributed RAM."""
    r = xcup1024
    assert r["dsp_cells"] == {"DSP48E2": r["dsp"]}
    assert r["dsp"] <= TARGETS["dsp"], r["dsp"]
    assert r["lut_sites"] <= TARGETS["lut_sites"], (r["lut"], r["lutram_cells"])


@needs_yosys
def test_resources_as_measured(xcup1024: dict[str, Any]) -> None:
    """The figures docs/backends/fpga.md quotes: DSPs exactly, LUTs and FFs within 5 %; operands, T, M and
    the result banks in LUT RAM (RAM32M16), no block RAM."""
    r = xcup1024
    msg = (f"engine changed? update MEASURED and docs/backends/fpga.md ({r['dsp']} DSP, {r['lut']} LUT, "
           f"{r['lut_sites']} LUT sites, {r['ff']} FF)")
    assert r["dsp"] == MEASURED["dsp"], msg
    for k in ("lut", "lut_sites", "ff"):
        assert abs(r[k] - MEASURED[k]) <= 0.05 * MEASURED[k], msg
    assert r["lutram_cells"].get("RAM32M16", 0) >= 30, r["lutram_cells"]
    assert r["bram"] == 0 and r["uram"] == 0, msg


@needs_yosys
def test_every_path_is_short(xcup1024: dict[str, Any]) -> None:
    """Pipelined: a DSP never shares a register-to-register path with other logic, and no path
    has more than 4 LUT levels or one 72-bit carry chain (18 CARRY4).  Under the walk's slow
    weights that is >= 240 MHz (docs/backends/fpga.md states 250 MHz), the old engine's 81-127 MHz."""
    p = xcup1024["path"]
    for k in ("fast", "slow"):
        w = p[k]
        if w["dsp"]:
            assert w["dsp"] == 1 and w["cells"] == 0, w
        assert w["lut_levels"] <= 4 and w["carry_cells"] <= 18, w
    lo, hi = p["fmax_mhz"]
    assert 240 <= lo <= hi, p


# ---- the parsers and the walk, on hand-made inputs (no yosys needed) ----------------------------
STAT = """
=== unifl_mm_engine ===

   Number of wires:                 10
   Number of cells:                  7
     CARRY4                          1
     DSP48E2                         1
     FDRE                            2
     LUT2                            1
     LUT6                            1
     MUXF7                           1

"""


def test_parse_stat_and_summary() -> None:
    counts = synth.parse_stat(STAT)
    assert counts == {"CARRY4": 1, "DSP48E2": 1, "FDRE": 2, "LUT2": 1, "LUT6": 1, "MUXF7": 1}
    s = synth.summarize_cells(synth.FAMILIES["xcup"], counts)
    assert (s["dsp"], s["lut"], s["ff"], s["carry"], s["mux"], s["bram"]) == (1, 2, 2, 1, 1, 0)
    c10 = synth.summarize_cells(synth.FAMILIES["cyclone10gx"],
                                {"MISTRAL_MUL27X27": 2, "MISTRAL_MUL18X18": 2, "MISTRAL_FF": 3})
    assert c10["dsp"] == 3 and c10["ff"] == 3   # two 18x18 share one variable-precision block


def _cell(typ: str, ins: dict[str, list[Any]], outs: dict[str, list[Any]], **params: str
          ) -> dict[str, Any]:
    dirs = {**{p: "input" for p in ins}, **{p: "output" for p in outs}}
    return {"type": typ, "port_directions": dirs, "connections": {**ins, **outs},
            "parameters": params}


def test_walk_counts_levels_and_dsp_separately() -> None:
    """ff1 -> LUT6 -> MUXF7 -> DSP -> LUT2 -> CARRY4 -> CARRY4 -> ff2, plus a short ff1 -> LUT2 ->
    ff2 path: the slow path is the long one, with 1 DSP counted apart from its 5 cells."""
    cells = {
        "ff1": _cell("FDRE", {"D": [100], "C": [1]}, {"Q": [2]}),
        "l6": _cell("LUT6", {"I0": [2], "I1": ["0"]}, {"O": [3]}),
        "mx": _cell("MUXF7", {"I0": [3], "I1": [3], "S": [2]}, {"O": [4]}),
        "dsp": _cell("DSP48E2", {"A": [4], "B": [2]}, {"P": [5]}, AREG="0", PREG="0"),
        "l2": _cell("LUT2", {"I0": [5], "I1": [2]}, {"O": [6]}),
        "c1": _cell("CARRY4", {"S": [6]}, {"CO": [7]}),
        "c2": _cell("CARRY4", {"CI": [7]}, {"O": [8]}),
        "short": _cell("LUT2", {"I0": [2], "I1": [2]}, {"O": [9]}),
        "ff2": _cell("FDRE", {"D": [8], "CE": [9], "C": [1]}, {"Q": [100]}),
    }
    netlist = {"modules": {synth.TOP: {"cells": cells, "netnames": {
        "a": {"bits": [2], "hide_name": 0}, "z": {"bits": [100], "hide_name": 0}}}}}
    r = synth.walk(netlist, synth.FAMILIES["xcup"])
    s = r["slow"]
    assert (s["lut_levels"], s["mux_levels"], s["carry_cells"], s["dsp"]) == (2, 1, 2, 1)
    assert s["cells"] == 5 and s["start"] == "a" and s["end"] == "z"
    w = synth.SLOW["xcup"]
    assert s["est_ns"] == pytest.approx(2 * w["lut"] + w["mux"] + 2 * w["carry"] + w["dsp"]
                                        + w["ff"])
    assert r["logic_loops"] == 0 and r["max_levels"] == 3
    # a registered DSP cuts the path: it becomes a start and an end point
    cells["dsp"]["parameters"]["PREG"] = "1"
    s2 = synth.walk(netlist, synth.FAMILIES["xcup"])["slow"]
    assert s2["dsp"] == 0 and s2["est_ns"] < s["est_ns"]


def test_walk_reports_a_logic_loop() -> None:
    cells = {
        "ff": _cell("FDRE", {"D": [4]}, {"Q": [2]}),
        "a": _cell("LUT2", {"I0": [2], "I1": [4]}, {"O": [3]}),
        "b": _cell("LUT2", {"I0": [3]}, {"O": [4]}),
    }
    r = synth.walk({"modules": {synth.TOP: {"cells": cells}}}, synth.FAMILIES["xcup"])
    assert r["logic_loops"] == 1


# ---- gate-level simulation: the synthesized netlist against the RTL's own testbench -----------
def _gate_level(bits: int, flow: str, nvec: int, tmp_path: Path) -> dict[str, Any]:
    runner = icarus_runner()
    from cocotb_tools.runner import get_results
    netlist = synth.gate_netlist(bits, tmp_path / f"{flow}_{bits}.v", flow=flow)
    build = tmp_path / "sim_build"
    runner.build(sources=[netlist, synth.gate_sim_library(flow)], hdl_toplevel=synth.TOP,
                 build_dir=build, timescale=("1ns", "1ps"), build_args=["-g2012"])
    result = tmp_path / "timing.json"
    rtl = ROOT / "rtl"
    xml = runner.test(hdl_toplevel=synth.TOP, test_module="test_mm_engine", test_dir=rtl / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"),
                      testcase=["vectors_back_to_back"],
                      extra_env={"UNIFL_TB_BITS": str(bits), "UNIFL_TB_VECTORS": str(nvec),
                                 "UNIFL_TB_MODULI": "1", "UNIFL_TB_W": str(synth.W),
                                 "UNIFL_TB_D": str(bits // synth.W),
                                 "UNIFL_TB_RESULT": str(result),
                                 "PYTHONPATH": os.pathsep.join([str(rtl / "tb"), str(ROOT)])})
    total, failed = get_results(xml)
    assert total == 1 and failed == 0, "the gate-level netlist disagrees with the reference"
    return json.loads(result.read_text())


@needs_yosys
@pytest.mark.slow
@pytest.mark.parametrize("bits,flow", [(256, "generic"), (256, "xcup-nodsp"), (1024, "generic"),
                                       (2048, "generic")])
def test_gate_level_netlist_bit_exact(bits: int, flow: str, tmp_path: Path) -> None:
    """yosys's gate-level netlist of the engine runs the RTL testbench's edge and random vectors
    bit-exactly, with the RTL's timing (the interval is a property of the netlist too).  Slow
    (Icarus runs the gate netlist at ~10 cycles/s: minutes per size), so in `make test-full`."""
    rep = _gate_level(bits, flow, 1 if bits > 256 else 10, tmp_path)
    assert rep["interval"] == [engine_interval(bits // 64)], rep
    print(f"\ngate-level ({flow}) {bits}-bit: {rep['vectors']} vectors bit-exact, "
          f"interval {rep['interval'][0]} cycles")


# ---- the exponentiation unit (rtl/unifl_modexp.v) ---------------------------------------------
# One engine, two key contexts, 1024 bits, UltraScale+; measured with yosys 0.23 like MEASURED
UNIT_MEASURED = {"dsp": 31, "lut": 2303, "lut_sites": 2973, "ff": 5015, "bram": 2.0}
UNIT_TARGETS = {"dsp": 40, "lut_sites": 6000, "bram": 8}   # per 1024-bit unit with one engine


@pytest.fixture(scope="module")
def unit1024() -> dict[str, Any]:
    if shutil.which("yosys") is None:
        pytest.skip("yosys not installed (apt-get install -y yosys)")
    return synth.synthesize("xcup", 1024, design="unit", engines=1, contexts=2)


@needs_yosys
@pytest.mark.rtl
def test_unit_within_targets(unit1024: dict[str, Any]) -> None:
    """unifl_modexp with one engine at 1024 bits: no latch, no logic loop, at most 40 DSP48E2,
    6,000 LUT sites and 8 RAMB36; its tables in block RAM; every path as short as the engine's
    (a DSP alone, at most 4 LUT levels and one 72-bit carry chain), and the figures docs/backends/fpga.md
    quotes within 5 %."""
    r = unit1024
    assert r["latches"] == 0 and r["latches_inferred"] == 0 and r["check_problems"] == 0
    assert r["path"]["logic_loops"] == 0 and r["unknown_cells"] == {}
    assert r["dsp"] <= UNIT_TARGETS["dsp"] and r["lut_sites"] <= UNIT_TARGETS["lut_sites"]
    assert 1 <= r["bram"] <= UNIT_TARGETS["bram"], r["bram"]
    for k in ("fast", "slow"):
        w = r["path"][k]
        if w["dsp"]:
            assert w["dsp"] == 1 and w["cells"] == 0, w
        assert w["lut_levels"] <= 4 and w["carry_cells"] <= 18, w
    assert r["path"]["fmax_mhz"][0] >= 240, r["path"]
    msg = (f"unit changed? update UNIT_MEASURED and docs/backends/fpga.md ({r['dsp']} DSP, {r['lut']} LUT, "
           f"{r['lut_sites']} LUT sites, {r['ff']} FF, {r['bram']} BRAM)")
    assert r["dsp"] == UNIT_MEASURED["dsp"] and r["bram"] == UNIT_MEASURED["bram"], msg
    for k in ("lut", "lut_sites", "ff"):
        assert abs(r[k] - UNIT_MEASURED[k]) <= 0.05 * UNIT_MEASURED[k], msg


@needs_yosys
@pytest.mark.slow
@pytest.mark.rtl
def test_unit_gate_level_netlist_bit_exact(tmp_path: Path) -> None:
    """yosys's generic gate-level netlist of unifl_modexp at 256 bits (one engine, K = 2 windows,
    two key contexts) runs the RTL testbench's edge jobs bit-exactly (slow: Icarus runs the gate
    netlist at a few cycles per second)."""
    runner = icarus_runner()
    from cocotb_tools.runner import get_results
    params = {"W": 64, "D": 4, "NE": 1, "S": 2, "K": 2, "NM": 2}
    netlist = synth.gate_netlist(256, tmp_path / "unit_256.v", design="unit", engines=1,
                                 contexts=2, params="-set K 2")
    build = tmp_path / "sim_build"
    runner.build(sources=[netlist, synth.gate_sim_library("generic")], hdl_toplevel="unifl_modexp",
                 build_dir=build, timescale=("1ns", "1ps"), build_args=["-g2012"])
    rtl = ROOT / "rtl"
    result = tmp_path / "measured.json"
    xml = runner.test(hdl_toplevel="unifl_modexp", test_module="test_modexp", test_dir=rtl / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"),
                      testcase=["modexp_back_to_back"],
                      extra_env={"UNIFL_TB_BITS": "256", "UNIFL_TB_EBITS": "4",
                                 "UNIFL_TB_JOBS": "0", "UNIFL_TB_RESULT": str(result),
                                 **{f"UNIFL_TB_{k}": str(v) for k, v in params.items()},
                                 "PYTHONPATH": os.pathsep.join([str(rtl / "tb"), str(ROOT)])})
    total, failed = get_results(xml)
    assert total == 1 and failed == 0, "the unit's gate-level netlist disagrees with pow"
    rep = json.loads(result.read_text())
    assert rep["modexp"]["jobs"] >= 5

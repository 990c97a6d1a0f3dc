"""Intel FPGA OpenCL RTL library (rtl/ocl_lib/) simulated with Icarus Verilog under cocotb 2.x.

Builds rtl/ocl_lib/unifl_mm1024_ocl.v over the engine cluster (rtl/unifl_mm_engine.v,
rtl/unifl_mm_cluster.v) in both variants and runs rtl/tb/test_ocl_mm1024.py: bit-exact vectors,
Intel's reset rule, back-pressure, per-call modulus changes, throughput, latency and capacity.
The measurements are then compared with what the library specs (unifl_mm1024.xml,
unifl_mm1024_fixed.xml) declare, so a spec cannot drift from the RTL it describes.
Skips (with the reason) when iverilog or cocotb is missing; CI installs both.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.helpers.rtl_sim import CLUSTER_SOURCES, RTL, ROOT, engine_interval, icarus_runner

pytestmark = pytest.mark.rtl

LIB = RTL / "ocl_lib"
D = 16
ENGINE_II = engine_interval(D)  # cycles between MontMult starts on one engine


def _sources() -> list[Path]:
    return CLUSTER_SOURCES + [LIB / "unifl_mm1024_ocl.v"]


def _spec(name: str) -> dict:
    """FUNCTION name/module, ATTRIBUTES values, INTERFACE ports and REQUIREMENTS files of a spec."""
    root = ET.parse(LIB / name).getroot()
    fn = root.find("FUNCTION")
    attrs = {e.tag: e.get("value") for e in fn.find("ATTRIBUTES") if e.tag != "PARAMETER"}
    params = {e.get("name"): int(e.get("value")) for e in fn.find("ATTRIBUTES")
              if e.tag == "PARAMETER"}
    ports = {e.get("port"): (e.tag, e.get("type") or e.get("width")) for e in fn.find("INTERFACE")}
    files = [e.get("name") for e in fn.find("REQUIREMENTS")]
    return {"name": fn.get("name"), "module": fn.get("module"), "attrs": attrs, "params": params,
            "ports": ports,
            "files": files, "c_model": [e.get("name") for e in fn.find("C_MODEL")]}


def _simulate(tmp_path: Path, n: int, fixed: bool, nvec: int, tests: list[str] | None) -> dict:
    runner = icarus_runner()
    top = "unifl_mm1024_ocl_fixed" if fixed else "unifl_mm1024_ocl"
    build = tmp_path / "sim_build"
    runner.build(sources=_sources(), hdl_toplevel=top, parameters={"N": n}, build_dir=build,
                 timescale=("1ns", "1ps"), defines={"UNIFL_OCL_CHECKS": 1})
    result = tmp_path / "measured.json"
    log = tmp_path / "sim.log"
    xml = runner.test(hdl_toplevel=top, test_module="test_ocl_mm1024", test_dir=RTL / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"), testcase=tests,
                      log_file=log,
                      extra_env={"UNIFL_TB_N": str(n), "UNIFL_TB_FIXED": "1" if fixed else "0",
                                 "UNIFL_TB_VECTORS": str(nvec), "UNIFL_TB_RESULT": str(result),
                                 "PYTHONPATH": os.pathsep.join([str(RTL / "tb"), str(ROOT)])})
    from cocotb_tools.runner import get_results
    total, failed = get_results(xml)
    text = log.read_text(errors="replace") if log.exists() else ""
    assert failed == 0 and total == (len(tests) if tests else 4), \
        f"{failed} of {total} cocotb tests failed:\n{text[-6000:]}"
    assert "UNIFL_OCL_ERROR" not in text, "cluster out_last disagrees with the word count"
    return json.loads(result.read_text())


def test_specs_name_the_rtl_and_the_emulation_model() -> None:
    """Both specs: the OpenCL function the kernel calls, the port set and widths of the module,
    files that exist, and the attribute combinations Intel allows."""
    for name, module in (("unifl_mm1024.xml", "unifl_mm1024_ocl"),
                         ("unifl_mm1024_fixed.xml", "unifl_mm1024_ocl_fixed")):
        s = _spec(name)
        assert s["name"] == "unifl_mm1024" and s["module"] == module
        assert s["ports"] == {
            "clock": ("AVALON", "clock"), "resetn": ("AVALON", "resetn"),
            "ivalid": ("AVALON", "ivalid"), "iready": ("AVALON", "iready"),
            "ovalid": ("AVALON", "ovalid"), "oready": ("AVALON", "oready"),
            "a": ("INPUT", "1024"), "b": ("INPUT", "1024"), "m": ("INPUT", "1024"),
            "n0": ("INPUT", "64"), "result": ("OUTPUT", "1024")}, s["ports"]
        for f in s["files"] + s["c_model"]:
            assert (LIB / f).resolve().is_file(), f"{name} names a missing file {f}"
        assert {"../unifl_mm_engine.v", "../unifl_mm_cluster.v", "unifl_mm1024_ocl.v"} <= \
            set(s["files"]), s["files"]
        a = s["attrs"]
        # Intel: IS_STALL_FREE=yes needs IS_FIXED_LATENCY=yes and an input every cycle, which a
        # word-serial engine cannot take; neither variant may claim it
        assert a["IS_STALL_FREE"] == "no"
        assert int(a["EXPECTED_LATENCY"]) >= 1 and int(a["CAPACITY"]) >= 1
    assert _spec("unifl_mm1024.xml")["attrs"]["IS_FIXED_LATENCY"] == "no"
    assert _spec("unifl_mm1024_fixed.xml")["attrs"]["IS_FIXED_LATENCY"] == "yes"
    # the module's Verilog ports have the directions Intel's interface gives them
    src = (LIB / "unifl_mm1024_ocl.v").read_text()
    for decl in ("input  wire          ivalid", "output wire          oready",
                 "output wire          ovalid", "input  wire          iready"):
        assert src.count(decl) == 2, decl


# The stallable build runs the whole bench; the fixed-latency build differs only in its admission
# rule, so it runs the two tests that exercise it (latency under load and across modulus changes,
# capacity): about 6 and 3 simulated MontMult periods per second of Icarus time keep this < 90 s.
VARIANTS = {
    "stallable": (False, ["ocl_vectors", "ocl_reset_rule", "ocl_modulus_alternation",
                          "ocl_throughput"]),
    "fixed_latency": (True, ["ocl_modulus_alternation", "ocl_throughput"]),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_rtl_intel_ocl_library(variant: str, tmp_path: Path) -> None:
    """The library module with the spec's N engines, and the spec's numbers: EXPECTED_LATENCY is
    the latency measured without downstream stalls (exact, and the only one, for the fixed-latency
    variant), CAPACITY the calls it holds while the downstream stalls."""
    fixed, tests = VARIANTS[variant]
    spec = _spec("unifl_mm1024_fixed.xml" if fixed else "unifl_mm1024.xml")
    n = spec["params"]["N"]
    rep = _simulate(tmp_path, n, fixed, nvec=4, tests=tests)
    thr, alt = rep["throughput"], rep["alternation"]
    expected = int(spec["attrs"]["EXPECTED_LATENCY"])
    if fixed:
        assert thr["latencies"] == [expected] and alt["latencies"] == [expected], (thr, alt)
        assert thr["capacity"] == n == int(spec["attrs"]["CAPACITY"])
    else:
        assert min(thr["latencies"]) == expected == min(alt["latencies"]), (thr, alt)
        assert thr["capacity"] == int(spec["attrs"]["CAPACITY"]), thr
        # Intel: oready/ovalid low within 40 cycles of reset; here they are low at the first sample
        # (both resets of the bench, one of them with a result held and calls in the engines), and
        # the first call after reset waits only for its modulus (D+1 beats) and operands (D beats)
        rst = rep["reset"]
        assert rst["samples_high_into_reset"] == 0, rst
        assert rst["first_oready_after_release"] == 2 * D + 3, rst
        assert rep["vectors"] >= 40
    # throughput: N engines, each starting a MontMult every ENGINE_II (about) cycles, behind a
    # serializer that needs D+1 cycles per call; the fixed-latency variant starts streaming call
    # k+N when call k's result is taken (latency L after its handshake), so N calls take L + D + 1
    if fixed:
        rate = 1000 * min(n / (expected + D + 1), 1 / (D + 1))
    else:
        rate = 1000 * min(n / ENGINE_II, 1 / (D + 1))
    assert 0.95 * rate <= thr["accepted_per_1000_cycles"] <= 1.05 * rate, (thr, rate)
    print(f"\nIntel OCL library ({variant}, N={n}): "
          f"{rep.get('vectors', 0) + thr['calls'] + alt['calls']} calls bit-exact; "
          f"{thr['accepted_per_1000_cycles']:.2f} calls per 1000 cycles; latency "
          f"{thr['latencies']}; capacity {thr['capacity']}; alternating moduli: "
          f"{alt['accept_interval']} cycles between calls")


@pytest.mark.slow
@pytest.mark.parametrize("n", [1, 8])
def test_rtl_intel_ocl_throughput_scales_with_engines(n: int, tmp_path: Path) -> None:
    """The stallable module with 1 and 8 engines: throughput within 10% of min(N/II, 1/(D+1))."""
    rep = _simulate(tmp_path, n, False, nvec=4, tests=["ocl_throughput"])
    thr = rep["throughput"]
    rate = 1000 * min(n / ENGINE_II, 1 / (D + 1))
    assert 0.95 * rate <= thr["accepted_per_1000_cycles"] <= 1.05 * rate, (thr, rate)
    print(f"\nIntel OCL library N={n}: {thr['accepted_per_1000_cycles']:.1f} calls per 1000 "
          f"cycles, latency {thr['latencies']}, capacity {thr['capacity']}")


# ---- unifl_mexp1024: the exponentiation unit behind an OpenCL library function ---------------
def test_mexp_spec_names_the_rtl_and_the_emulation_model() -> None:
    """unifl_mexp1024.xml: the function mont_exp_L16 calls, the module's ports and widths, files
    that exist, Intel's allowed attribute combination, and a capacity of two calls per engine plus
    the result port."""
    s = _spec("unifl_mexp1024.xml")
    assert s["name"] == "unifl_mexp1024" and s["module"] == "unifl_mexp1024_ocl"
    assert s["ports"] == {
        "clock": ("AVALON", "clock"), "resetn": ("AVALON", "resetn"),
        "ivalid": ("AVALON", "ivalid"), "iready": ("AVALON", "iready"),
        "ovalid": ("AVALON", "ovalid"), "oready": ("AVALON", "oready"),
        "x": ("INPUT", "1024"), "e": ("INPUT", "1024"), "m": ("INPUT", "1024"),
        "r_mod": ("INPUT", "1024"), "n0": ("INPUT", "64"), "ebits": ("INPUT", "32"),
        "result": ("OUTPUT", "1024")}, s["ports"]
    for f in s["files"] + s["c_model"]:
        assert (LIB / f).resolve().is_file(), f
    assert {"../unifl_modexp.v", "../unifl_mm_engine.v", "unifl_mexp1024_ocl.v"} <= set(s["files"])
    a = s["attrs"]
    assert a["IS_STALL_FREE"] == "no" and a["IS_FIXED_LATENCY"] == "no"
    assert int(a["CAPACITY"]) == 2 * s["params"]["NE"] + 1
    kernel = (LIB / "montmul_rtl_kernel.cl").read_text()
    assert "__kernel void mont_exp_L16(__global const ulong *restrict base" in kernel


@pytest.mark.rtl
def test_rtl_intel_mexp_library(tmp_path: Path) -> None:
    """unifl_mexp1024_ocl with two engines: calls over two key contexts (the module reloads the
    unit between them), bases 0, R mod m and m among them, random downstream stalls; every result
    bit-exact (x̄^e in the Montgomery domain) and in call order."""
    runner = icarus_runner()
    from tests.helpers.rtl_sim import ENGINE_SOURCES
    build = tmp_path / "sim_build"
    runner.build(sources=ENGINE_SOURCES + [RTL / "unifl_modexp.v", LIB / "unifl_mexp1024_ocl.v"],
                 hdl_toplevel="unifl_mexp1024_ocl", parameters={"NE": 2}, build_dir=build,
                 timescale=("1ns", "1ps"))
    xml = runner.test(hdl_toplevel="unifl_mexp1024_ocl", test_module="test_ocl_mexp1024",
                      test_dir=RTL / "tb", build_dir=build,
                      results_xml=str(tmp_path / "results.xml"),
                      extra_env={"UNIFL_TB_CALLS": "1", "UNIFL_TB_EBITS": "4",
                                 "PYTHONPATH": os.pathsep.join([str(RTL / "tb"), str(ROOT)])})
    from cocotb_tools.runner import get_results
    total, failed = get_results(xml)
    assert total == 1 and failed == 0

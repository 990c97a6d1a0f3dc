"""The RTL MontMult engine (rtl/unifl_mm_engine.v) and a cluster of engines (rtl/unifl_mm_cluster.v)
simulated with Icarus Verilog under cocotb 2.x.

Each size builds the design with W=64 (and once W=32) and D=bits/W and runs rtl/tb/test_mm_engine.py:
edge and random vectors streamed back to back, bit-exact against unifl.core.montgomery.mont_mul_ref;
random producer gaps and consumer stalls; the reset and modulus-loading rules.  The timing is
checked against the schedule the engine's header states: an iteration takes P = max(D, PQ) cycles,
PQ = ST + 4 + LQ the q unit's wait for the new T_0 (17 at W = 64), the last one max(D, 2 LQ + 1)
(it computes the next MontMult's q_0 with T = 0: 13 at W = 64), so back-to-back MontMults start
every (D-1) P + max(D, 2 LQ + 1) cycles.
Skips (with the reason) when iverilog or cocotb is missing; CI installs both.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
RTL = ROOT / "rtl"
ENGINE = [RTL / "unifl_mm_parts.v", RTL / "unifl_mm_engine.v"]

# (bits, word width W, random vectors for the main random modulus) -- sized for CI on 2 cores;
# the handshake tests (stalls, reset, modulus rules) do not depend on the size and run at the
# small sizes only, the large ones stream the vectors of two moduli (Icarus: ~2k cycles/s here)
SIZES = [(256, 64, 60), (256, 32, 30), (512, 64, 20), (1024, 64, 6), (2048, 64, 1)]
FULL_UP_TO = 512


def _runner():
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog not installed (apt-get install -y iverilog)")
    try:
        from cocotb_tools.runner import get_runner
    except ImportError:
        pytest.skip("cocotb not installed (pip install cocotb==2.1.0)")
    return get_runner("icarus")


def _load_estimate() -> Any:
    """bench/fpga_estimate.py, whose interval formula the docs' estimates use (loaded by path:
    bench is no package)."""
    name = "unifl_bench_fpga_estimate"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "fpga_estimate.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


expected_interval = _load_estimate().interval_cycles


def _simulate(tmp_path: Path, top: str, sources: list[Path], parameters: dict[str, int],
              bits: int, nvec: int) -> dict:
    full = bits <= FULL_UP_TO
    runner = _runner()
    build = tmp_path / "sim_build"
    runner.build(sources=sources, hdl_toplevel=top, parameters=parameters, build_dir=build,
                 timescale=("1ns", "1ps"))
    result = tmp_path / "timing.json"
    xml = runner.test(hdl_toplevel=top, test_module="test_mm_engine", test_dir=RTL / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"),
                      testcase=None if full else ["vectors_back_to_back"],
                      extra_env={"UNIFL_TB_BITS": str(bits), "UNIFL_TB_VECTORS": str(nvec),
                                 "UNIFL_TB_MODULI": "4" if full else "2",
                                 "UNIFL_TB_RESULT": str(result),
                                 "PYTHONPATH": os.pathsep.join([str(RTL / "tb"), str(ROOT)])})
    from cocotb_tools.runner import get_results
    total, failed = get_results(xml)
    assert total == (3 if full else 1) and failed == 0, \
        f"{failed} of {total} cocotb tests failed (see log above)"
    return json.loads(result.read_text())


@pytest.mark.parametrize("bits,w,nvec", SIZES)
def test_rtl_engine_bit_exact(bits: int, w: int, nvec: int, tmp_path: Path) -> None:
    d = bits // w
    rep = _simulate(tmp_path, "unifl_mm_engine", ENGINE, {"W": w, "D": d}, bits, nvec)
    assert rep["vectors"] >= nvec
    # back to back, one MontMult starts every `interval` cycles, the same for every vector
    # (constant time); the operands of the next one load while this one computes
    assert rep["interval"] == [expected_interval(d, w)], rep
    print(f"\nRTL engine {bits}-bit (W={w}): {rep['vectors']} vectors bit-exact, latency "
          f"{rep['latency']} cycles, one MontMult every {rep['interval'][0]} cycles")


def test_rtl_cluster_bit_exact(tmp_path: Path) -> None:
    """Three engines (not a power of two) behind one port set: results in input order, a
    MontMult accepted every interval/3 cycles, the modulus broadcast once."""
    d = 4
    rep = _simulate(tmp_path, "unifl_mm_cluster", ENGINE + [RTL / "unifl_mm_cluster.v"],
                    {"W": 64, "D": d, "N": 3}, 256, 60)
    iv = expected_interval(d)
    # in steady state the three engines overlap: three results per engine interval
    assert rep["mean_interval"] <= iv / 3 + 1, rep
    print(f"\nRTL cluster of 3 x 256-bit engines: {rep['vectors']} vectors bit-exact, one "
          f"MontMult every {rep['mean_interval']:.1f} cycles (one engine alone: {iv})")

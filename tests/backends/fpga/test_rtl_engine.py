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

import json
import os
from pathlib import Path

import pytest

from tests.helpers.rtl_sim import CLUSTER_SOURCES, ENGINE_SOURCES, RTL, ROOT, engine_interval, icarus_runner

pytestmark = pytest.mark.rtl


# (bits, word width W, random vectors for the main random modulus) -- sized for CI on 2 cores;
# the handshake tests (stalls, reset, modulus rules) do not depend on the size and run at the
# small sizes only; 1024 bits streams the vectors of two moduli, 2048 bits of one (the random
# modulus: edge operands and a random pair; Icarus runs the 2048-bit engine at ~1k cycles/s here)
SIZES = [(256, 64, 60), (256, 32, 30), (512, 64, 20), (1024, 64, 6), (2048, 64, 1)]
FULL_UP_TO = 512


def _simulate(tmp_path: Path, top: str, sources: list[Path], parameters: dict[str, int],
              bits: int, nvec: int) -> dict:
    full = bits <= FULL_UP_TO
    runner = icarus_runner()
    build = tmp_path / "sim_build"
    runner.build(sources=sources, hdl_toplevel=top, parameters=parameters, build_dir=build,
                 timescale=("1ns", "1ps"))
    result = tmp_path / "timing.json"
    xml = runner.test(hdl_toplevel=top, test_module="test_mm_engine", test_dir=RTL / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"),
                      testcase=None if full else ["vectors_back_to_back"],
                      extra_env={"UNIFL_TB_BITS": str(bits), "UNIFL_TB_VECTORS": str(nvec),
                                 "UNIFL_TB_MODULI": "4" if full else "2" if bits <= 1024 else "1",
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
    rep = _simulate(tmp_path, "unifl_mm_engine", ENGINE_SOURCES, {"W": w, "D": d}, bits, nvec)
    assert rep["vectors"] >= nvec
    # back to back, one MontMult starts every `interval` cycles, the same for every vector
    # (constant time); the operands of the next one load while this one computes
    assert rep["interval"] == [engine_interval(d, w)], rep
    print(f"\nRTL engine {bits}-bit (W={w}): {rep['vectors']} vectors bit-exact, latency "
          f"{rep['latency']} cycles, one MontMult every {rep['interval'][0]} cycles")


def test_rtl_cluster_bit_exact(tmp_path: Path) -> None:
    """Three engines (not a power of two) behind one port set: results in input order, a
    MontMult accepted every interval/3 cycles, the modulus broadcast once."""
    d = 4
    rep = _simulate(tmp_path, "unifl_mm_cluster", CLUSTER_SOURCES,
                    {"W": 64, "D": d, "N": 3}, 256, 60)
    iv = engine_interval(d)
    # in steady state the three engines overlap: three results per engine interval
    assert rep["mean_interval"] <= iv / 3 + 1, rep
    print(f"\nRTL cluster of 3 x 256-bit engines: {rep['vectors']} vectors bit-exact, one "
          f"MontMult every {rep['mean_interval']:.1f} cycles (one engine alone: {iv})")

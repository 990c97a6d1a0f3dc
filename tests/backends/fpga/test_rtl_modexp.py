"""The exponentiation unit (rtl/unifl_modexp.v) simulated with Icarus Verilog under cocotb 2.x.

rtl/tb/test_modexp.py streams MODEXP jobs (edge bases 0, 1, M-1, M and 2^(W D)-1, edge exponents
0, 1, all ones and a lone top bit, every combination of plain / Montgomery entry and exit, random
jobs) and Paillier encryptions back to back, with random producer gaps and consumer stalls, and
the CRT decryption's two half-size ladders on two key contexts held at once; every result is
checked bit-exactly against gmpy2's ``powmod`` (the ``cpu`` backend's arithmetic).  The
MontMults the engines start per cycle are measured and held to the engine's interval: with two
exponentiations per engine the engine never waits for the unit.

Default set: 256 bits (one and two engines, the whole bench) and 512, 1024 and 2048 bits with
short exponents (the window logic does not depend on the size; the engine's datapath does, and
every size's results are checked).  Slow set (`make test-full`): full-length exponents at 1024
bits and encryption at 512 bits.  Skips, saying why, when iverilog or cocotb is missing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.rtl_sim import ENGINE_SOURCES, RTL, ROOT, engine_interval, icarus_runner

pytestmark = pytest.mark.rtl

SOURCES = ENGINE_SOURCES + [RTL / "unifl_modexp.v"]
ALL_TESTS = ["modexp_back_to_back", "stalls_and_gaps", "paillier_crt_decryption"]


def simulate(tmp_path: Path, bits: int, params: dict[str, int], env: dict[str, str],
             tests: list[str] | None = None, sources: list[Path] | None = None,
             top: str = "unifl_modexp") -> dict:
    runner = icarus_runner()
    build = tmp_path / "sim_build"
    runner.build(sources=sources or SOURCES, hdl_toplevel=top, parameters=params,
                 build_dir=build, timescale=("1ns", "1ps"),
                 build_args=["-g2012"] if sources else [])
    result = tmp_path / "measured.json"
    log = tmp_path / "sim.log"
    xml = runner.test(hdl_toplevel=top, test_module="test_modexp", test_dir=RTL / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"),
                      testcase=tests, log_file=log,
                      extra_env={"UNIFL_TB_BITS": str(bits), "UNIFL_TB_RESULT": str(result),
                                 "PYTHONPATH": os.pathsep.join([str(RTL / "tb"), str(ROOT)]),
                                 **env})
    from cocotb_tools.runner import get_results
    total, failed = get_results(xml)
    text = log.read_text(errors="replace") if log.exists() else ""
    assert failed == 0 and total == len(tests or ALL_TESTS), \
        f"{failed} of {total} cocotb tests failed:\n{text[-6000:]}"
    assert "ERROR" not in text, text[-4000:]
    return json.loads(result.read_text()) if result.exists() else {}


# name -> (bits, parameters, testbench settings, cocotb tests).  Sized for CI on 2 cores (Icarus
# runs this design at roughly 1k cycles per CPU second whatever the size): the whole bench at 256
# bits; two engines; the other sizes with K = 2 windows (a 3-MontMult table) and short exponents,
# every result still bit-exact.
CASES = {
    "256": (256, {"D": 4, "NE": 1, "NM": 2},
            {"EBITS": 16, "JOBS": 1, "ENC_BITS": 32, "DEC_BITS": 32}, ALL_TESTS),
    "256-two-engines": (256, {"D": 4, "NE": 2, "NM": 1}, {"EBITS": 8, "JOBS": 1},
                        ["modexp_back_to_back"]),
    "512": (512, {"D": 8, "NE": 1, "NM": 2, "K": 2}, {"EBITS": 4, "JOBS": 1},
            ["modexp_back_to_back"]),
    "1024": (1024, {"D": 16, "NE": 1, "NM": 1, "K": 2}, {"EBITS": 4, "JOBS": 0},
             ["modexp_back_to_back"]),
    "2048": (2048, {"D": 32, "NE": 1, "NM": 1, "K": 2}, {"EBITS": 4, "JOBS": 2, "EDGE": 0},
             ["modexp_back_to_back"]),
}


def utilization(rep: dict, d: int, engines: int) -> float:
    """MontMults the engines took per engine interval: 1.0 means no engine ever waited for the
    unit (a short stream's start and drain, one MontMult latency each, count against it)."""
    return rep["montmults"] * engine_interval(d) / (engines * rep["cycles"])


@pytest.mark.rtl
@pytest.mark.parametrize("case", list(CASES))
def test_modexp_unit_bit_exact(case: str, tmp_path: Path) -> None:
    bits, params, tb, tests = CASES[case]
    rep = simulate(tmp_path, bits, params, {f"UNIFL_TB_{k}": str(v) for k, v in tb.items()},
                   tests)
    mx = rep["modexp"]
    busy = utilization(mx, params["D"], params["NE"])
    extra = "".join(f", {rep[k]['jobs']} {k}" for k in ("enc", "decrypt", "stalls") if k in rep)
    print(f"\nunifl_modexp {case}: {mx['jobs']} MODEXP jobs{extra} bit-exact; {mx['montmults']} "
          f"MontMults in {mx['cycles']} cycles ({busy:.0%} of the engines' rate)")
    # with two slots per engine the unit keeps the engine fed; short jobs lose their first and
    # last MontMult latency
    assert busy >= (0.85 if mx["montmults"] >= 60 * params["NE"] else 0.5), rep


@pytest.mark.slow
@pytest.mark.rtl
@pytest.mark.parametrize("bits,tb", [
    (1024, {"EBITS": 1024, "JOBS": 0, "EDGE": 0, "STEADY": 2}),
    (512, {"EBITS": 512, "JOBS": 0, "EDGE": 0, "ENC_BITS": 256, "STEADY": 2}),
])
def test_modexp_unit_full_exponents(bits: int, tb: dict[str, int], tmp_path: Path) -> None:
    """Full-length exponents with K = 4 (and at 512 bits encryption with an n of half the size):
    in the steady stream every engine starts a MontMult every interval (>= 97 %)."""
    d = bits // 64
    rep = simulate(tmp_path, bits, {"D": d, "NE": 1, "NM": 1},
                   {f"UNIFL_TB_{k}": str(v) for k, v in tb.items()}, ["modexp_back_to_back"])
    assert utilization(rep["steady"], d, 1) >= 0.97, rep

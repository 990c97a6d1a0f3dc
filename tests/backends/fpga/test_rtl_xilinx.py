"""The Vitis RTL kernel (rtl/xilinx/montmul_kernel.v) around the MontMult cluster, simulated with
Icarus Verilog under cocotb 2.x: rtl/tb/test_vitis_kernel.py programs the ap_ctrl_hs registers
over AXI4-Lite and serves a / b / out / consts from an AXI4 memory model that checks the protocol
(4 KiB boundaries, burst length, stable VALID, WLAST) on every beat.  Every row is checked
bit-exactly against unifl.core.montgomery.mont_mul_ref.

What runs is a simulator (Icarus); nothing here ran on an FPGA.  Skips (with the reason) when
iverilog or cocotb is missing; CI installs both.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.helpers.rtl_sim import CLUSTER_SOURCES, ENGINE_SOURCES, RTL, ROOT, engine_interval, icarus_runner

pytestmark = pytest.mark.rtl

SOURCES = CLUSTER_SOURCES + [RTL / "xilinx" / "montmul_kernel.v"]
MODEXP_SOURCES = ENGINE_SOURCES + [RTL / "unifl_modexp.v", RTL / "xilinx" / "modexp_kernel.v"]


def _simulate(tmp_path: Path, top: str, engines: int, env: dict[str, str],
              testcase: list[str] | None = None, module: str = "test_vitis_kernel",
              params: dict[str, int] | None = None) -> tuple[int, dict]:
    runner = icarus_runner()
    build = tmp_path / "sim_build"
    modexp = module == "test_vitis_modexp"
    runner.build(sources=MODEXP_SOURCES if modexp else SOURCES, hdl_toplevel=top,
                 parameters=params or {"N": engines}, build_dir=build, timescale=("1ns", "1ps"))
    result = tmp_path / "kernel.json"
    xml = runner.test(hdl_toplevel=top, test_module=module, test_dir=RTL / "tb",
                      build_dir=build, results_xml=str(tmp_path / "results.xml"),
                      testcase=testcase,
                      extra_env={**env, "UNIFL_TB_RESULT": str(result),
                                 "PYTHONPATH": os.pathsep.join([str(RTL / "tb"), str(ROOT)])})
    from cocotb_tools.runner import get_results
    total, failed = get_results(xml)
    assert failed == 0, f"{failed} of {total} cocotb tests failed (see the log above)"
    return total, json.loads(result.read_text()) if result.exists() else {}


def test_vitis_kernel_1024_four_engines(tmp_path: Path) -> None:
    """montmul_L16 with N = 4 engines: edge moduli and operands over several launches (n = 1, 0 and
    row counts that are not a multiple of N), random back-pressure on all five AXI channels, the
    control / interrupt registers across consecutive starts, and the throughput."""
    total, rep = _simulate(tmp_path, "montmul_L16", 4,
                           {"UNIFL_TB_BITS": "1024", "UNIFL_TB_ROWS": "2"})
    assert total == 5
    assert rep["rows_checked"] >= 4 * 11 + 1 and rep["backpressure_rows"] >= 18
    tp = rep["throughput"]
    # the cluster's own rate: N engines, each starting a MontMult every `interval` cycles; the AXI
    # wrapper (64-bit port: 32 read beats and 16 write beats a row) must not be what limits 4
    # engines at 1024 bits once the first wave is out
    bound = 1000.0 * tp["engines"] / engine_interval(16)
    assert tp["steady_rows_per_1000_cycles"] >= 0.97 * bound, (tp, bound)
    print(f"\nVitis RTL kernel, 1024-bit, N={tp['engines']}: {tp['rows']} rows in {tp['cycles']} "
          f"cycles = {tp['rows_per_1000_cycles']} rows / 1000 cycles end to end, "
          f"{tp['steady_rows_per_1000_cycles']} steady (cluster bound {bound:.2f})")


def test_vitis_kernel_2048_two_engines(tmp_path: Path) -> None:
    """montmul_L32 (the same kernel at D = 32) with N = 2: the edge operands of one random modulus,
    then n = 1 and n = 0 -- kept short, a 2048-bit MontMult is ~4x the simulation work."""
    total, rep = _simulate(tmp_path, "montmul_L32", 2,
                           {"UNIFL_TB_BITS": "2048", "UNIFL_TB_ROWS": "0", "UNIFL_TB_MODULI": "1"},
                           testcase=["edge_moduli_and_operands"])
    assert total == 1 and rep["rows_checked"] >= 10


@pytest.mark.rtl
def test_vitis_modexp_kernel(tmp_path: Path) -> None:
    """The mont_exp kernel's logic (unifl_vitis_modexp, the module behind mont_exp_L16 / L32) at
    256 bits with two engines: per-row and shared exponents bit-exact, and the three error paths
    (RRESP, BRESP, an exponent too long) each set their status bit and poison or keep the rows."""
    total, _ = _simulate(tmp_path, "unifl_vitis_modexp", 2, {"UNIFL_TB_BITS": "256"},
                         module="test_vitis_modexp", params={"D": 4, "NE": 2},
                         testcase=["modexp_rows", "memory_errors_surface"])
    assert total == 2


@pytest.mark.rtl
def test_vitis_paillier_enc_kernel(tmp_path: Path) -> None:
    """The paillier_enc kernel's logic (unifl_vitis_modexp with ENC = 1) at 256 bits: m and r rows
    of n's words in, (1 + m·n)·r^n·R mod n² out, bit-exact (n of 32 bits keeps it short)."""
    total, _ = _simulate(tmp_path, "unifl_vitis_modexp", 2,
                         {"UNIFL_TB_BITS": "256", "UNIFL_TB_ENC": "1", "UNIFL_TB_NBITS": "32"},
                         module="test_vitis_modexp", params={"D": 4, "NE": 2, "ENC": 1},
                         testcase=["paillier_encryption"])
    assert total == 1


@pytest.mark.slow
@pytest.mark.rtl
def test_vitis_modexp_kernel_1024(tmp_path: Path) -> None:
    """mont_exp_L16 itself (1024 bits, two engines), every test of the bench."""
    total, _ = _simulate(tmp_path, "mont_exp_L16", 2, {"UNIFL_TB_BITS": "1024"},
                         module="test_vitis_modexp",
                         testcase=["modexp_rows", "memory_errors_surface"])
    assert total == 2


def _opencl_args(kernel: str) -> list[tuple[str, str, bool]]:
    """(name, ulong | uint, pointer) of montmul.cl's kernel ``kernel``, in order."""
    import re
    src = (ROOT / "unifl" / "backends" / "fpga" / "kernels" / "montmul.cl").read_text()
    sig = re.search(r"__kernel void SFX\(" + kernel + r"\)\((.*?)\)\s*\{", src, re.S)
    assert sig, f"{kernel} kernel signature not found in montmul.cl"
    out = []
    for part in sig.group(1).split(","):
        words = part.replace("*", " * ").split()
        out.append((words[-1], "ulong" if "ulong" in words else "uint", "*" in words))
    return out


@pytest.mark.parametrize("kernel,xml_file,tops", [
    ("mont_exp", "kernel_modexp.xml", "mont_exp_L16"),
    ("paillier_enc", "kernel_paillier_enc.xml", "paillier_enc_L32"),
])
def test_modexp_kernel_xml_matches_opencl_signature_and_register_map(kernel: str, xml_file: str,
                                                                     tops: str) -> None:
    """kernel_modexp.xml / kernel_paillier_enc.xml against montmul.cl's mont_exp / paillier_enc
    (names, order, pointer or scalar, width), the offsets modexp_kernel.v decodes for ENC = 0 / 1
    and the testbench drives."""
    import re
    import xml.etree.ElementTree as ET

    k = ET.parse(RTL / "xilinx" / xml_file).getroot().find("kernel")
    assert k is not None and k.get("name") == tops
    args = [(a.get("name"), a.get("type"), a.get("addressQualifier"), int(a.get("offset"), 16),
             int(a.get("size"), 16), a.get("port")) for a in k.iter("arg")]
    cl_args = _opencl_args(kernel)
    assert [a[0] for a in args] == [c[0] for c in cl_args], (args, cl_args)
    for (name, typ, qual, _off, size, port), (_n, ctype, pointer) in zip(args, cl_args):
        assert typ == ctype + ("*" if pointer else ""), (name, typ, ctype)
        assert (qual == "1") == pointer and port == ("m_axi_gmem" if pointer else "s_axi_control")
        assert size == (8 if pointer or ctype == "ulong" else 4), (name, size)
    enc = kernel == "paillier_enc"
    verilog = (RTL / "xilinx" / "modexp_kernel.v").read_text()
    regs = {}
    for name, a, b in re.findall(r"(A_\w+)\s*=\s*ENC \? 12'h([0-9A-F]+) : 12'h([0-9A-F]+)", verilog):
        regs[name] = int(a if enc else b, 16)
    for name, v in re.findall(r"(A_\w+)\s*=\s*12'h([0-9A-Fa-f]+)", verilog):
        regs.setdefault(name, int(v, 16))
    low = {"base": "A_X_LO", "exps": "A_E_LO", "out": "A_O_LO", "scratch": "A_S_LO",
           "consts": "A_C_LO", "n0": "A_N0_LO", "n": "A_N", "le": "A_LE", "e_stride": "A_ES",
           "ebits": "A_EB", "w": "A_W", "msg": "A_M_LO", "rnd": "A_X_LO", "nexp": "A_E_LO"}
    for name, _t, _q, off, size, _p in args:
        assert regs[low[name]] == off, (name, off, regs[low[name]])
        if size == 8:
            assert regs[low[name].replace("_LO", "_HI")] == off + 4, name
    tb_text = (RTL / "tb" / "test_vitis_modexp.py").read_text()
    for name, _t, _q, off, _s, _p in args:
        assert f'"{name}": {off:#04x}' in tb_text, (name, off)


def test_kernel_xml_matches_opencl_signature_and_register_map() -> None:
    """kernel.xml (what v++ and XRT read) against the two things it must agree with: the argument
    list of montmul_L<n> in kernels/montmul.cl (names, order, pointer or scalar, width) and the
    register offsets decoded by montmul_kernel.v (and driven by the testbench)."""
    import re
    import xml.etree.ElementTree as ET

    root = ET.parse(RTL / "xilinx" / "kernel.xml").getroot()
    kernel = root.find("kernel")
    assert kernel is not None and kernel.get("name") == "montmul_L16"
    assert kernel.get("hwControlProtocol") == "ap_ctrl_hs" and kernel.get("workGroupSize") == "1"
    ports = {p.get("name"): p for p in kernel.iter("port")}
    assert ports["m_axi_gmem"].get("dataWidth") == "64" and ports["m_axi_gmem"].get("mode") == "master"
    args = [(a.get("name"), a.get("type"), a.get("addressQualifier"), int(a.get("offset"), 16),
             int(a.get("size"), 16), a.get("port")) for a in kernel.iter("arg")]
    assert [int(a.get("id")) for a in kernel.iter("arg")] == list(range(len(args)))

    src = (ROOT / "unifl" / "backends" / "fpga" / "kernels" / "montmul.cl").read_text()
    sig = re.search(r"__kernel void SFX\(montmul\)\((.*?)\)\s*\{", src, re.S)
    assert sig, "montmul kernel signature not found in montmul.cl"
    cl_args = []
    for part in sig.group(1).split(","):
        words = part.replace("*", " * ").split()
        cl_args.append((words[-1], "ulong" if "ulong" in words else "uint", "*" in words))
    assert [a[0] for a in args] == [c[0] for c in cl_args], (args, cl_args)
    for (name, typ, qual, _off, size, port), (_n, ctype, pointer) in zip(args, cl_args):
        assert typ == ctype + ("*" if pointer else ""), (name, typ, ctype, pointer)
        assert (qual == "1") == pointer and port == ("m_axi_gmem" if pointer else "s_axi_control")
        assert size == (8 if pointer or ctype == "ulong" else 4), (name, size)

    verilog = (RTL / "xilinx" / "montmul_kernel.v").read_text()
    regs = {k: int(v, 16) for k, v in re.findall(r"(A_\w+) = 12'h([0-9A-Fa-f]+)", verilog)}
    low_word = {"a": "A_A_LO", "b": "A_B_LO", "out": "A_O_LO", "consts": "A_C_LO", "n0": "A_N0_LO",
                "n": "A_N"}
    for name, _typ, _q, off, size, _port in args:
        assert regs[low_word[name]] == off, (name, off, regs[low_word[name]])
        if size == 8:                                   # 64-bit: the high word follows
            assert regs[low_word[name].replace("_LO", "_HI")] == off + 4, name
    assert (regs["A_CTRL"], regs["A_GIE"], regs["A_IER"], regs["A_ISR"]) == (0, 4, 8, 0xC)
    tb = (RTL / "tb" / "test_vitis_kernel.py").read_text()
    assert "ARG_A, ARG_B, ARG_OUT, ARG_CONSTS, ARG_N0, ARG_N = 0x10, 0x18, 0x20, 0x28, 0x30, 0x38" in tb
    assert [a[3] for a in args] == [0x10, 0x18, 0x20, 0x28, 0x30, 0x38]

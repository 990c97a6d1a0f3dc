"""What the RTL simulation tests share: the Icarus runner of cocotb (or a skip saying what is
missing) and the engine's Verilog sources."""

from __future__ import annotations

import shutil
from typing import Any

import pytest

from .paths import ROOT

RTL = ROOT / "rtl"
#: the engine (unifl_mm_engine.v with its building blocks) and the cluster of engines
ENGINE_SOURCES = [RTL / "unifl_mm_parts.v", RTL / "unifl_mm_engine.v"]
CLUSTER_SOURCES = ENGINE_SOURCES + [RTL / "unifl_mm_cluster.v"]


def icarus_runner() -> Any:
    """cocotb's Icarus Verilog runner; skips the test, saying how to install what is missing."""
    if shutil.which("iverilog") is None:
        pytest.skip("iverilog not installed (apt-get install -y iverilog)")
    try:
        from cocotb_tools.runner import get_runner
    except ImportError:
        pytest.skip("cocotb not installed (pip install cocotb==2.1.0)")
    return get_runner("icarus")


def engine_interval(d: int, w: int = 64) -> int:
    """Cycles between back-to-back MontMult starts of one engine (tools.fpga.estimate's formula,
    the one the docs' estimates use and the engine's simulation checks)."""
    from tools.fpga.estimate import interval_cycles
    return interval_cycles(d, w)

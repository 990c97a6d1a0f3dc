"""What the RTL simulation tests share: the Icarus runner of cocotb (or a skip saying what is
missing) and the engine's Verilog sources."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
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


def bench_module(name: str) -> Any:
    """bench/<name>.py, loaded by path (bench is no package) and registered, so that its
    dataclasses resolve their module; loaded once per process."""
    import importlib.util
    import sys
    key = f"unifl_bench_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, ROOT / "bench" / f"{name}.py")
        assert spec and spec.loader
        mod = importlib.util.module_from_spec(spec)
        sys.modules[key] = mod
        spec.loader.exec_module(mod)
    return sys.modules[key]


def engine_interval(d: int, w: int = 64) -> int:
    """Cycles between back-to-back MontMult starts of one engine (bench/fpga_estimate.py's formula,
    the one the docs' estimates use and the engine's simulation checks)."""
    return int(bench_module("fpga_estimate").interval_cycles(d, w))

"""Build step of the ``fpga`` backend, run by setup.py (which finds every
``unifl/backends/<name>/build.py`` and loads it from its path, before unifl itself is importable).

Nothing is compiled at install time: the OpenCL C kernels are built at run time by the OpenCL
platform (or loaded as a prebuilt .aocx / .xclbin), so they ship as package data.
"""

from __future__ import annotations


def package_data(ctx: object) -> list[str]:
    """The OpenCL C kernel sources."""
    return ["kernels/*.cl", "kernels/*.h"]


def extras_require(ctx: object) -> dict[str, list[str]]:
    """``pip install unifl[fpga]``: the OpenCL host runtime and, as the stand-in where no card is
    installed, PoCL from pip -- a CPU OpenCL platform that pyopencl's bundled ICD loader finds
    without any system package or root step (a card's own runtime is found beside it, and is
    preferred: ``runtime.select_device``)."""
    return {"fpga": ["pyopencl==2026.1.4", "pocl-binary-distribution==3.0"]}

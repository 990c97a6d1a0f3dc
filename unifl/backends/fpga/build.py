"""Build step of the ``fpga`` backend, run by setup.py (which finds every
``unifl/backends/<name>/build.py`` and loads it from its path, before unifl itself is importable).

Nothing is compiled at install time: the OpenCL C kernels are built at run time by the OpenCL
platform (or loaded as a prebuilt .aocx / .xclbin), so they ship as package data.
"""

from __future__ import annotations


def package_data(ctx: object) -> list[str]:
    """The OpenCL C kernel sources."""
    return ["kernels/*.cl"]

"""The errors of the GPU proxy tools: one base class, one subclass per kind of failure."""

from __future__ import annotations


class ProxyError(Exception):
    """Base class of this tool's errors."""


class ToolMissing(ProxyError):
    """A CUDA tool (nvcc, cuobjdump, nvdisasm) or the demangler is not installed."""


class CompileError(ProxyError):
    """nvcc failed to compile the kernels."""


class ParseError(ProxyError):
    """A tool's output did not have the structure this parser knows."""


class OccupancyError(ProxyError):
    """Inputs outside what an H100 can launch at all (block size, registers per thread)."""

"""Hardware implementations of the layers: one folder per backend, registered by name."""

from .base import OPS, Backend, ProbeResult
from .registry import available, backend, backend_class, default_backend, names, probe, register

__all__ = ["OPS", "Backend", "ProbeResult", "available", "backend", "backend_class",
           "default_backend", "names", "probe", "register"]

"""Small helpers shared by the phe_sdk modules."""

from __future__ import annotations

import numpy as np

from ..core.backend import Backend
from ..core.registry import backend as _backend, default_backend


def resolve_backend(backend: Backend | str | None) -> Backend:
    """``None`` -> the default backend (native if built, else cpu); a name -> that backend."""
    if backend is None:
        return default_backend()
    if isinstance(backend, str):
        return _backend(backend)
    return backend


def pad_limbs(limbs: np.ndarray, num_limbs: int) -> np.ndarray:
    """Zero-extend an (N, L) limb array to (N, num_limbs)."""
    if limbs.shape[1] == num_limbs:
        return limbs
    out = np.zeros((limbs.shape[0], num_limbs), np.uint64)
    out[:, :limbs.shape[1]] = limbs
    return out

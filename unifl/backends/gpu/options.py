"""Options of the ``gpu`` backend: one definition, parsed by ``GpuBackend(**options)`` and by a
party's ``gpu:`` YAML section alike (:class:`unifl.core.options.BackendOptions`).

One instance drives one CUDA device (``device``); a party that lists several devices gets one
instance per device, and the scheduler's multi-device backend is the one policy that splits a batch
over them (``unifl.scheduler.multi``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ...core.options import BackendOptions, option


@dataclass(frozen=True)
class GpuOptions(BackendOptions):
    """Which CUDA device the backend runs on, and which kernels."""

    device: int = option(0, "the CUDA device index this instance runs on (one device per "
                            "instance; the scheduler splits batches over several instances)", ge=0)

    kernels: Literal["thread", "group", "auto"] = option(
        "auto", "which kernel bodies run the ops that have both: thread (one thread per instance, "
                "64-bit limbs in local memory), group (cooperative: TPI threads per instance, "
                "32-bit words in registers) or auto (per size class, by timing both once on the "
                "device and keeping the choice in the private tuning record for later jobs; "
                "docs/backends/gpu.md)")

    window: Literal["auto", 3, 4, 5] = option(
        "auto", "exponent window of the cooperative kernels, in bits (2^w table entries per group "
                "in shared memory): 3, 4, 5, or auto (the largest whose tables cost no occupancy "
                "against 3-bit ones on the device; docs/backends/gpu.md)")

    lanes: Literal["auto", "normal", "wide"] = option(
        "auto", "threads per instance of the cooperative exponentiation kernels (ModExp, public "
                "encryption): normal (the size class's), wide (twice as many, half the words each: "
                "a lower latency per instance, up to 4096-bit moduli) or auto (wide for a call too "
                "small to give the device 4 warps per SM)")

    cgbn: Optional[bool] = option(
        None, "the optional CGBN ModExp (a CGBN build only, docs/backends/gpu.md); null: env "
              "UNIFL_GPU_CGBN=1")

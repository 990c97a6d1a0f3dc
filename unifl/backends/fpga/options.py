"""Options of the ``fpga`` backend: one definition, parsed by ``FpgaBackend(**options)`` and by a
party's ``fpga:`` YAML section alike (:class:`unifl.core.options.BackendOptions`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ...core.options import BackendOptions, option

MODES = ("montmul", "modexp")


@dataclass(frozen=True)
class FpgaOptions(BackendOptions):
    """Which OpenCL device and binary, and how the MontMult engine is driven."""

    platform: Optional[str] = option(
        None, "substring of the OpenCL platform name; null: env UNIFL_FPGA_PLATFORM, else the "
              "first non-PoCL platform, else PoCL")
    device: Optional[str] = option(
        None, "substring of the OpenCL device name; null: env UNIFL_FPGA_DEVICE, else the "
              "platform's first device")
    binary: Optional[str] = option(
        None, "a prebuilt .aocx / .xclbin / program binary with montmul_L<n> kernels (its kind is "
              "read from its magic and must suit the platform); null builds kernels/montmul.cl "
              "from source per limb count")
    engines: int = option(16, "processing elements (work-items) per launch; an .xclbin is "
                              "launched as one task (clEnqueueTask) whatever this says", ge=1)
    mode: Optional[Literal["montmul", "modexp"]] = option(
        None, "montmul (only MontMult on the device, UniFL) or modexp (FLASH-style on-device "
              "exponentiation loop); null: env UNIFL_FPGA_MODE, else montmul")
    chunk: int = option(4096, "rows per host-device transfer", ge=1)
    in_flight: int = option(3, "slots of the transfer ring (one command queue each)", ge=1)
    local_size: Optional[int] = option(
        1, "OpenCL work-group size; null lets the OpenCL runtime choose", ge=1)
    build_options: str = option("", "extra OpenCL compiler flags for the source build")
    window: Optional[int] = option(
        None, "window bits of the on-device ModExp (mode modexp); null: chosen by exponent "
              "length", ge=1, le=8)

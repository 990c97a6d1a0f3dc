"""``fpga``: the BASE OP (MontMult) on an OpenCL device, as UniFL §V-C / Fig. 7 put it on the FPGA.

Only MontMult runs on the device (``kernels/montmul.cl``: a fixed number of processing elements, the
modulus constants uploaded once per Montgomery context, operands through a ring of device buffers).
ModMult, ModExp, Paillier and RSA are composed on the host from repeated device MontMult batches by
the generic layers (``unifl.mod_op``, ``unifl.phe_sdk``), exactly as for any backend that declares
only ``mont_mul``.

Beyond UniFL, ``mode="modexp"`` adds the FLASH-style on-device exponentiation loop: ``mont_exp`` is
then native, and one ModExp is one kernel launch instead of ~1.2·bits MontMult launches.

Options (the ``fpga:`` section of a party's YAML arrives here as keyword arguments):

* ``platform`` / ``device``: substrings of the OpenCL platform / device names (default: the first
  non-PoCL device, else PoCL); env ``UNIFL_FPGA_PLATFORM`` / ``UNIFL_FPGA_DEVICE`` when not given;
* ``binary``: a prebuilt ``.aocx`` / ``.xclbin`` / program binary holding ``montmul_L<n>`` kernels
  (built from ``kernels/all_sizes.cl``); ``None`` builds ``montmul.cl`` from source per limb count;
* ``engines``: processing elements (work-items) per launch; ``mode``: ``"montmul"`` | ``"modexp"``
  (env ``UNIFL_FPGA_MODE`` when not given);
* ``chunk`` (rows per transfer), ``in_flight`` (ring slots / queues), ``local_size``,
  ``build_options`` (extra OpenCL compiler flags), ``window`` (ModExp window, default by length).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...core.montgomery import MontContext
from ...core.errors import BackendUnavailable, ConfigError
from ...core.backend import Backend, ProbeResult

MODES = ("montmul", "modexp")


def _exp_bits(exps: np.ndarray) -> int:
    """Largest bit length among the exponent rows (vectorised: top non-zero limb column)."""
    cols = np.flatnonzero(exps.any(axis=0))
    if cols.size == 0:
        return 0
    top = int(cols[-1])
    return 64 * top + int(exps[:, top].max()).bit_length()


class FpgaBackend(Backend):
    name = "fpga"
    #: class-level declaration (what every fpga instance runs natively); an instance in
    #: ``mode="modexp"`` adds ``mont_exp`` (see __init__), which ``implements()`` reads.
    native_ops = frozenset({"mont_mul"})

    def __init__(self, platform: str | None = None, device: str | None = None,
                 binary: str | None = None, engines: int = 16, mode: str | None = None,
                 chunk: int = 4096, in_flight: int = 3, local_size: int | None = 1,
                 build_options: str = "", window: int | None = None, **options: Any) -> None:
        super().__init__(**options)
        mode = mode or os.environ.get("UNIFL_FPGA_MODE") or "montmul"
        if mode not in MODES:
            raise ConfigError(f"fpga.mode must be one of {MODES}, got {mode!r}")
        if int(engines) < 1:
            raise ConfigError(f"fpga.engines must be >= 1, got {engines!r}")
        if window is not None and not 1 <= int(window) <= 8:
            raise ConfigError(f"fpga.window must be in 1..8, got {window!r}")
        from .runtime import ClRuntime
        self.mode = mode
        self.window = None if window is None else int(window)
        self.native_ops = frozenset({"mont_mul", "mont_exp"} if mode == "modexp"
                                    else {"mont_mul"})
        self.runtime = ClRuntime(
            platform=platform or os.environ.get("UNIFL_FPGA_PLATFORM") or None,
            device=device or os.environ.get("UNIFL_FPGA_DEVICE") or None,
            binary=binary, engines=engines, chunk=chunk, in_flight=in_flight,
            local_size=local_size, build_options=build_options)
        # the state key includes the runtime's identity: two instances never share device buffers

    @classmethod
    def probe(cls) -> ProbeResult:
        """Available when the OpenCL ICD loader lists a device (the one UNIFL_FPGA_PLATFORM /
        UNIFL_FPGA_DEVICE name, if set); stand_in says PoCL when that is all there is."""
        try:
            from .runtime import is_pocl, list_devices, select_device
            plat = os.environ.get("UNIFL_FPGA_PLATFORM") or None
            dev = os.environ.get("UNIFL_FPGA_DEVICE") or None
            p, _ = select_device(plat, dev)
            devices = [f"{q.name.strip()}: {d.name.strip()}" for q, d in list_devices()]
        except BackendUnavailable as exc:
            return ProbeResult(False, str(exc))
        except Exception as exc:  # noqa: BLE001 - probe must never raise
            return ProbeResult(False, f"OpenCL probe failed: {exc}")
        return ProbeResult(True, f"OpenCL platform {p.name.strip()!r}", devices,
                           "PoCL (OpenCL on the CPU)" if is_pocl(p) else None)

    @property
    def devices(self) -> list[str]:
        return [self.runtime.describe()]

    def describe(self) -> str:
        extra = f" [{self.runtime.stand_in}]" if self.runtime.stand_in else ""
        return f"fpga{extra} {self.runtime.describe()} mode={self.mode} engines={self.runtime.engines}"

    def _consts(self, ctx: MontContext):
        """The modulus constants on the device, uploaded once per context (UniFL: key parameters
        passed once, not per batch)."""
        from ...core.limbs import to_limbs
        return self.state.get(ctx, "constants", lambda: self.runtime.upload_constants(
            ctx.m_limbs, to_limbs([ctx.r_mod], ctx.num_limbs)[0]))

    # ---- BASE OP
    def op_mont_mul(self, ctx: MontContext, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a·b·R^-1 mod m on the device, R = 2^(64·L)."""
        return self.runtime.mont_mul(self._consts(ctx), ctx.n0inv, a, b)

    # ---- optional on-device ModExp (mode="modexp")
    def op_mont_exp(self, ctx: MontContext, base_mont: np.ndarray, exps: np.ndarray) -> np.ndarray:
        """x̄^e in the Montgomery domain (x̄ = x·R mod m in, x^e·R mod m out), looped on the device
        by fixed windows of w bits: ~ebits squarings + ebits/w multiplications + 2^w table."""
        from ...core.exponents import window_bits
        ebits = _exp_bits(exps)
        w = self.window or min(window_bits(max(ebits, 1)), 6)
        return self.runtime.mont_exp(self._consts(ctx), ctx.n0inv,
                                     np.ascontiguousarray(base_mont), np.ascontiguousarray(exps),
                                     ebits, w)

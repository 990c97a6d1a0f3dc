"""``fpga``: the BASE OP (MontMult) on an OpenCL device, as UniFL §V-C / Fig. 7 put it on the FPGA.

Only MontMult runs on the device (``kernels/montmul.cl``: a fixed number of processing elements, the
modulus constants uploaded once per Montgomery context, operands through a ring of device buffers).
ModMult, ModExp, Paillier and RSA are composed on the host from repeated device MontMult batches by
the generic layers (``unifl.mod_op``, ``unifl.phe_sdk``), exactly as for any backend that declares
only ``mont_mul``.

Beyond UniFL, ``mode="modexp"`` adds the FLASH-style on-device exponentiation loop: ``mont_exp`` is
then native, and one ModExp is one kernel launch instead of ~1.2·bits MontMult launches; so is
``paillier_encrypt`` ((1 + m·n)·r^n mod n², ``paillier_enc_L<n>``) where the program carries it
(always when built from source; a prebuilt binary only if it has that kernel).

One instance drives one OpenCL device; several cards are several instances, and a batch is split
across them only by the scheduler's multi-device wrapper.  What an instance derives from a
Montgomery context (the modulus constants uploaded to its device) is kept in its own ``self.state``,
weakly keyed by the context, never on the context itself: two instances never share a device
buffer, and the buffer goes when the context does.  An OpenCL call that fails mid-run raises
:class:`~unifl.backends.fpga.runtime.FpgaDeviceError` (a :class:`~unifl.core.errors.DeviceError`
naming the device and the call), which the scheduler's fallback chain takes over.

Options: :class:`unifl.backends.fpga.options.FpgaOptions` (``platform``, ``device``, ``binary``,
``engines``, ``mode``, ``chunk``, ``in_flight``, ``local_size``, ``build_options``, ``window``), the
one model that both the constructor and the ``fpga:`` section of a party's YAML are checked by.  A
``binary`` holds ``montmul_L<n>`` kernels built from ``kernels/all_sizes.cl``.  A scalar entry of a
party's ``devices:`` list is a substring of an instance's OpenCL device name.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.contract import Limbs
from ...core.keys import PaillierPublicMaterial
from ...core.montgomery import MontContext
from ...core.errors import BackendUnavailable, ConfigError
from ...core.backend import Backend, ProbeResult, Request, Support
from .options import MODES, FpgaOptions

if TYPE_CHECKING:       # for annotations only: pyopencl is imported lazily, by the runtime
    import pyopencl


def _host(x: Limbs) -> np.ndarray:
    """``x`` as the host array the OpenCL runtime copies from (an array as is, so a squaring's
    ``b is a`` still holds; another backend's device batch read back)."""
    return x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.uint64)


class FpgaBackend(Backend):
    name = "fpga"
    #: the class-level declaration the registry checks: what every fpga instance runs natively.
    #: An instance in ``mode="modexp"`` also runs ``mont_exp`` natively: its own ``instance_ops``,
    #: which ``implements()`` reads.
    native_ops = frozenset({"mont_mul"})
    options_model = FpgaOptions
    options: FpgaOptions

    def __init__(self, **options: Any) -> None:
        """``options``: see :class:`~unifl.backends.fpga.options.FpgaOptions`."""
        super().__init__(**options)
        opts = self.options
        # the environment fills in what the options leave open; it is checked like an option
        mode = opts.mode or os.environ.get("UNIFL_FPGA_MODE") or "montmul"
        if mode not in MODES:
            raise ConfigError(f"fpga mode (env UNIFL_FPGA_MODE) must be one of {MODES}, "
                              f"got {mode!r}")
        from .runtime import ClRuntime
        self.mode = mode
        self.window = opts.window
        #: what this instance runs natively (its mode decides whether ``mont_exp`` is one)
        self.instance_ops: frozenset[str] = (self.native_ops | {"mont_exp"} if mode == "modexp"
                                             else self.native_ops)
        self.runtime = ClRuntime(
            platform=opts.platform or os.environ.get("UNIFL_FPGA_PLATFORM") or None,
            device=opts.device or os.environ.get("UNIFL_FPGA_DEVICE") or None,
            binary=opts.binary, engines=opts.engines, chunk=opts.chunk,
            in_flight=opts.in_flight, local_size=opts.local_size,
            build_options=opts.build_options)
        # the whole encryption on the device, where the program has the kernel for it
        carried = self.runtime.binary_kernels()       # None: built from source, every kernel
        if mode == "modexp" and (carried is None or any(
                k.startswith("paillier_enc_L") for k in carried)):
            self.instance_ops = self.instance_ops | {"paillier_encrypt"}

    @classmethod
    def select_device(cls, value: Any) -> dict[str, Any]:
        """A scalar entry of ``devices:`` is a substring of that instance's OpenCL device name
        (``devices: [card0, card1]``: one instance per card)."""
        return {"device": value}

    @classmethod
    def probe(cls) -> ProbeResult:
        """Available when the OpenCL ICD loader lists a device (the one UNIFL_FPGA_PLATFORM /
        UNIFL_FPGA_DEVICE name, if set) that can run our kernels: a CPU platform must compile and
        run a small kernel first (pip's PoCL 3.0 lists a device on CPUs its LLVM does not know, then
        fails every build); stand_in says PoCL when that is all there is."""
        try:
            from .runtime import is_pocl, list_devices, select_device
            plat = os.environ.get("UNIFL_FPGA_PLATFORM") or None
            dev = os.environ.get("UNIFL_FPGA_DEVICE") or None
            p, _ = select_device(plat, dev)
            devices = [f"{q.name.strip()}: {d.name.strip()}" for q, d in list_devices()]
        except BackendUnavailable as exc:
            return ProbeResult(False, str(exc), remedy=exc.remedy)
        except Exception as exc:  # noqa: BLE001 - probe must never raise
            return ProbeResult(False, f"OpenCL probe failed: {exc}")
        return ProbeResult(True, f"OpenCL platform {p.name.strip()!r}", devices,
                           "PoCL (OpenCL on the CPU)" if is_pocl(p) else None)

    def implements(self, op: str) -> bool:
        """True when ``op`` runs natively on this instance (``mont_exp`` only in mode modexp)."""
        return op in self.instance_ops

    def supports(self, request: Request) -> Support:
        """With a prebuilt ``binary``, only the modulus sizes it carries kernels for
        (``montmul_L<n>``, and ``mont_exp_L<n>`` in mode modexp); built from source, any size."""
        base = super().supports(request)
        have = self.runtime.binary_kernels()
        if have is None:
            return base
        kinds = ("montmul",) + (("mont_exp",) if self.mode == "modexp" else ())
        missing = [f"{k}_L{n}" for n in request.limb_counts() for k in kinds
                   if f"{k}_L{n}" not in have]
        if not missing:
            return base
        sizes = sorted(int(k.rsplit("_L", 1)[1]) for k in have if k.startswith("montmul_L"))
        return Support.of(list(base.reasons) + [
            f"fpga.binary {self.runtime.binary_path!r} lacks {', '.join(missing)} (it carries "
            f"limb counts {sizes}; the request's moduli need {request.limb_counts()})"])

    @property
    def devices(self) -> list[str]:
        return [self.runtime.describe()]

    def describe(self) -> str:
        extra = f" [{self.runtime.stand_in}]" if self.runtime.stand_in else ""
        return f"fpga{extra} {self.runtime.describe()} mode={self.mode} engines={self.runtime.engines}"

    def _consts(self, ctx: MontContext) -> pyopencl.Buffer:
        """The modulus constants on the device, uploaded once per context (UniFL: key parameters
        passed once, not per batch)."""
        from ...core.limbs import to_limbs
        return self.state.get(ctx, "constants", lambda: self.runtime.upload_constants(
            ctx.m_limbs, to_limbs([ctx.r_mod], ctx.num_limbs)[0]))

    # ---- BASE OP
    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        """a·b·R^-1 mod m on the device, R = 2^(64·L)."""
        host_a = _host(a)
        return self.runtime.mont_mul(self._consts(ctx), ctx.n0inv, host_a,
                                     host_a if b is a else _host(b), ctx.m_limbs)

    # ---- optional on-device ModExp (mode="modexp")
    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        """x̄^e in the Montgomery domain (x̄ = x·R mod m in, x^e·R mod m out), looped on the device
        by fixed windows of w bits: ~ebits squarings + ebits/w multiplications + 2^w table."""
        from ...core.exponents import exp_bits, window_bits
        ebits = exp_bits(exps)
        w = self.window or min(window_bits(max(ebits, 1)), 6)
        return self.runtime.mont_exp(self._consts(ctx), ctx.n0inv,
                                     np.ascontiguousarray(base_mont), np.ascontiguousarray(exps),
                                     ebits, w, ctx.m_limbs)

    # ---- Paillier encryption on the device (mode="modexp", kernel paillier_enc_L<n>)
    def op_paillier_encrypt(self, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
        """(1 + m·n)·r^n mod n² in Montgomery form, the exponentiation over e = n on the device;
        the key's constants [n², R, R², n·R mod n²] are uploaded once per key record."""
        from ...core.exponents import window_bits
        from ...core.limbs import to_limbs
        ctx = pk.nsquare_ctx
        L = ctx.num_limbs
        consts = self.state.get(pk, "paillier_constants", lambda: self.runtime.upload_rows(
            [ctx.m_limbs, *to_limbs([ctx.r_mod, ctx.r2, pk.n * ctx.R % ctx.m], L)],
            "Paillier key constants"))
        ebits = pk.n.bit_length()
        w = self.window or min(window_bits(ebits), 6)
        nexp = np.ascontiguousarray(pk.n_ctx.m_limbs.reshape(1, -1))
        return self.runtime.paillier_enc(consts, ctx.n0inv, np.ascontiguousarray(_host(m)),
                                         np.ascontiguousarray(_host(r)), nexp, ebits, w, L,
                                         ctx.m_limbs)

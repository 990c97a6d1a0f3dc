"""``qat``: ModExp on Intel QuickAssist (cpaCyLnModExp), ModMult on the CPU, pipelined (UniFL §V-B).

QAT's only big-number primitive is ModExp, so this backend runs natively:

* ``mod_exp`` on QAT through our driver (``src/qat_driver.cpp``: asynchronous submissions with a
  callback, one polling thread per instance, bounded in-flight window, RETRY back-off, pinned
  buffer pool, big-endian and size-class padding at that boundary only), with an IPCL-style
  ``cpu_share`` of the ModExps computed by the ``native`` backend at the same time;
* ``mont_exp`` the same, leaving and re-entering the Montgomery domain on the CPU;
* ``paillier_encrypt`` as the two-stage pipeline of Alg. 6 (``unifl.backends.qat.pipeline``): r^n on
  QAT, (1 + m·n)·r^n on the CPU as soon as each r^n lands;
* ``mont_multi_exp`` (ciphertext × plaintext matmul) as Alg. 7 when ``matmul_on_qat=True``: the
  K·N ModExps y_j^(x_kj) on QAT, each row's product folded on the CPU as results land.  Off by
  default: the CPU's multi-exponentiation shares its squarings across all N bases, so K·N separate
  device ModExps pay off only with a device much faster than the host;
* ``mont_mul`` / ``mod_mul`` (the base op and ModMult, which QAT lacks), the grouped products and
  (by default) the multi-exponentiation are served by the CPU ``native`` backend.  Paillier decryption is composed
  by the SDK from ``mod_exp`` mod p² and q², so its exponentiations run on QAT too.

Every request the device fails (or cannot take: operands over 8192 bits, or a size class the
library refuses -- older libraries refuse 8192 bits: after the first refusal that class goes to the
CPU directly for the rest of the session, with one ``QatSizeClassWarning``) is recomputed on the
CPU; results are bit-identical to ``cpu``.  Crypto instances without the large-number API
(symmetric-only ones) are left out, and a session with none left is refused.  A driver call that fails on the session itself (a submission
refused, pinned memory exhausted, a session closed and not reopenable) raises
:class:`~unifl.backends.qat.runtime.QatError`, a :class:`~unifl.core.errors.DeviceError` naming the
library, configuration section and call, and the scheduler's fallback chain takes the batch over.

State: the driver session is one per process (qatlib's rule, :mod:`unifl.backends.qat.runtime`);
what an instance derives from a modulus (R³ mod m for the pipeline's ModMult) is kept in its own
``self.state``, weakly keyed by the Montgomery context; its CPU side is a private ``native``
instance with state of its own.  Batches are split across QAT endpoints only by the scheduler's
multi-device wrapper; inside one session the driver hands each request to the next free instance.

Secret exponents (``mod_exp_secret``: Paillier CRT decryption, the key owner's obfuscators, RSA
signing) run through the same pipeline, but every part of them computed on the host -- the
``cpu_share`` and the recomputation of failed requests -- uses the native backend's constant-time
exponentiation (OpenSSL BN_mod_exp_mont_consttime).  What the card does with them is the vendor's
implementation (cpaCyLnModExp); we make no timing claim for it, nor for our simulator.

Where no QAT library is installed, our simulator library (``src/qat_sim.cpp``, same C ABI) is
loaded instead, and the probe, ``describe()`` and every report say "QAT simulator".

Options: :class:`unifl.backends.qat.options.QatOptions` (``library``, ``instances``,
``max_in_flight``, ``cpu_share``, ``simulator``, ``section``, ``matmul_on_qat``), the one model that
both the constructor and the ``qat:`` section of a party's YAML are checked by.  A scalar entry of a
party's ``devices:`` list is an instance's ``instances``.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ...core.contract import Limbs, OpContract
from ...core.keys import PaillierPublicMaterial
from ...core.limbs import to_limbs
from ...core.montgomery import MontContext
from ...core.errors import BackendUnavailable
from ...core.backend import Backend, ProbeResult
from . import runtime
from .options import QatOptions


class QatBackend(Backend):
    name = "qat"
    native_ops = frozenset({"mont_mul", "mod_mul", "mod_exp", "mod_exp_secret", "mont_exp",
                            "mont_multi_exp", "mont_prod_groups", "paillier_encrypt"})

    options_model = QatOptions
    options: QatOptions

    def __init__(self, **options: Any) -> None:
        """``options``: see :class:`~unifl.backends.qat.options.QatOptions`."""
        super().__init__(**options)
        opts = self.options
        self.instances = 0 if opts.instances == "all" else int(opts.instances)   # 0: every one
        self.max_in_flight = opts.max_in_flight
        self.matmul_on_qat = opts.matmul_on_qat
        self.cpu_share = opts.cpu_share
        self._library, self._simulator, self._section = opts.library, opts.simulator, opts.section
        from ...core import registry
        if not registry.probe("native").available:
            raise BackendUnavailable("backend 'qat' needs the 'native' backend for its CPU-side "
                                     f"ModMult: {registry.probe('native').reason}")
        # a private native instance (registry.backend() would re-enter the registry's lock)
        native = registry.backend_class("native")()
        native.probe_result = registry.probe("native")
        # the registry types it as a Backend, whose base class declares no op_* methods; the
        # native backend defines every op this backend calls on it (mont_mul, mod_mul, mod_exp,
        # mod_exp_secret, mont_multi_exp, mont_prod_groups), as the contract types them
        self.cpu = cast(OpContract, native)
        info = self.session().info()          # starts the driver now: errors surface here
        self.simulator = bool(info["simulator"])
        self.library = info["library"]
        self._devices = [f"{'QAT simulator' if self.simulator else 'QAT'} instance "
                         f"{i['name'] or k} ({i['part']})" for k, i in enumerate(info["instances"])]
        if self.instances:
            self._devices = self._devices[:self.instances]

    # ---- registration-time description
    @classmethod
    def select_device(cls, value: Any) -> dict[str, Any]:
        """A scalar entry of ``devices:`` is how many crypto instances that backend instance uses
        ('all' or a count)."""
        return {"instances": value}

    @classmethod
    def probe(cls) -> ProbeResult:
        if not runtime.BUILT:
            return ProbeResult(False, f"QAT driver extension not built ({runtime.IMPORT_ERROR})")
        try:
            qat_names, _, is_sim = runtime.resolve()
        except BackendUnavailable as exc:
            return ProbeResult(False, str(exc))
        if is_sim:
            return ProbeResult(True, "no libqat installed: our QAT simulator library (same C ABI, "
                                     "ModExp in software) stands in",
                               ["QAT simulator"], stand_in=runtime.SIMULATOR_LABEL)
        return ProbeResult(True, f"QAT library {qat_names[0]}", [f"QAT ({qat_names[0]})"])

    @property
    def devices(self) -> list[str]:
        return list(self._devices)

    def describe(self) -> str:
        return f"qat [{runtime.SIMULATOR_LABEL}]" if self.simulator else "qat"

    def session(self) -> runtime.Session:
        """The process's live QAT driver session (reopened if it was closed)."""
        return runtime.session(self._library, self._simulator, self._section)

    def close(self, timeout: float = 10.0) -> None:
        """Close the QAT session (shared by the process); requests in flight get ``timeout``
        seconds, the rest are recomputed on the CPU.  A later call opens a new session."""
        runtime.close(timeout)

    def stats(self) -> dict[str, Any]:
        """Driver counters: submitted, completed, retries, device/submit failures, oversize,
        class_fallbacks (requests of a size class the library refused, sent to the CPU directly),
        abandoned, busy_seconds (and the simulator's engine counters when it runs);
        ``cpu_size_classes``: the refused size classes (bits)."""
        sess = self.session()
        out: dict[str, Any] = dict(sess.stats())
        out["cpu_size_classes"] = sess.cpu_size_classes()
        out["stand_in"] = runtime.SIMULATOR_LABEL if self.simulator else None
        return out

    # ---- CPU side (QAT has no MontMult / ModMult)
    #: the private ``native`` instance made in __init__ that serves it, seen through the op
    #: contract (its op_* methods are the contract's, which the Backend base class does not declare)
    cpu: OpContract

    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return self.cpu.op_mont_mul(ctx, a, b)

    def op_mod_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return self.cpu.op_mod_mul(ctx, a, b)

    def op_mont_multi_exp(self, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray) -> Limbs:
        if self.matmul_on_qat:  # Alg. 7: K·N ModExps on QAT, products folded on the CPU
            from .pipeline import mont_multi_exp
            return mont_multi_exp(self, ctx, _host(bases_mont), exps)
        return self.cpu.op_mont_multi_exp(ctx, bases_mont, exps)

    def op_mont_prod_groups(self, ctx: MontContext, a_mont: Limbs, groups: np.ndarray,
                            num_groups: int) -> Limbs:
        return self.cpu.op_mont_prod_groups(ctx, a_mont, groups, num_groups)

    # ---- QAT side
    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        from .pipeline import hybrid_mod_exp
        return hybrid_mod_exp(self, ctx, _host(base), exps)

    def op_mod_exp_secret(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        """Secret exponents: on the card as ``mod_exp``, but the host's share and its recomputations
        through the constant-time native op (the pipeline reaches the CPU only as ``.cpu``)."""
        from .pipeline import hybrid_mod_exp
        return hybrid_mod_exp(_SecretSide(self), ctx, _host(base), exps)

    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        n = base_mont.shape[0]
        one = np.repeat(to_limbs([1], ctx.num_limbs), n, axis=0)
        r2 = np.repeat(to_limbs([ctx.r2], ctx.num_limbs), n, axis=0)
        base = self.cpu.op_mont_mul(ctx, np.ascontiguousarray(base_mont, dtype=np.uint64), one)
        return self.cpu.op_mont_mul(ctx, np.asarray(self.op_mod_exp(ctx, base, exps)), r2)

    def op_paillier_encrypt(self, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
        from .pipeline import paillier_encrypt
        return paillier_encrypt(self, pk, _host(m), _host(r))


def _host(x: Limbs) -> np.ndarray:
    """``x`` as the host array the pipeline cuts into tasks (an array as is; another backend's
    device batch read back)."""
    return x if isinstance(x, np.ndarray) else np.asarray(x, dtype=np.uint64)


class _ConstTimeCpu:
    """The native backend as the pipeline's CPU side for secret exponents: ``op_mod_exp`` is the
    constant-time ``op_mod_exp_secret``; everything else is the native backend's."""

    def __init__(self, native: OpContract) -> None:
        self._native = native

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        return self._native.op_mod_exp_secret(ctx, base, exps)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._native, name)


class _SecretSide:
    """A QatBackend seen by the ModExp pipeline with the constant-time CPU side."""

    def __init__(self, qat: QatBackend) -> None:
        self._qat = qat
        self.cpu = _ConstTimeCpu(qat.cpu)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._qat, name)

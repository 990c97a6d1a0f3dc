"""The ``Backend`` base class: registered by name, with a probe and a declaration of what it does
natively (SecretFlow-HEU style).

A backend implements natively a subset of the ops of :mod:`unifl.core.contract`, each as a method
``op_<name>``, and lists them in ``native_ops``; everything else is composed by the layer that owns the
op, on the same backend.  Only ``mont_mul`` (the base op) is mandatory.  A backend declares its
options as a model (``options_model``, a :class:`unifl.core.options.BackendOptions` dataclass that
both its constructor and the party schema parse, unknown names refused), how a scalar entry of a
party's ``devices:`` list selects one of its devices (``select_device``), and keeps per-key and
per-modulus state in ``self.state`` (:class:`unifl.core.state.DeviceState`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from .contract import OPS
from .errors import ConfigError
from .limbs import limb_count
from .montgomery import MAX_MODULUS_BITS
from .options import BackendOptions
from .state import DeviceState

__all__ = ["Backend", "ProbeResult", "Request", "Support", "OPS"]


@dataclass
class ProbeResult:
    """What a backend's probe found: usable or not, why, and which devices it sees."""

    available: bool
    reason: str = ""
    devices: list[str] = field(default_factory=list)
    stand_in: str | None = None  # e.g. "PoCL (OpenCL on the CPU)", "QAT simulator"; None for real hardware
    #: system commands (argvs, run in order) that would make an unavailable backend available, e.g.
    #: a package to install; empty when there is none or the reason is not a missing package
    remedy: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True)
class Request:
    """What a party will ask of a backend, known before anything runs (HEU's checkers answer the
    same question): the ops it needs and the widths of the moduli they will meet.  The scheduler
    asks every candidate at selection time (:meth:`Backend.supports`), so a gap -- a modulus
    size a prebuilt kernel binary lacks, a width beyond a device's limb capacity -- skips the
    backend with its reason before the job starts, instead of failing mid-run."""

    modulus_bits: frozenset[int] = frozenset()
    ops: frozenset[str] = frozenset(OPS)

    @classmethod
    def paillier(cls, key_bits: int, ops: frozenset[str] = frozenset(OPS)) -> "Request":
        """The moduli of Paillier with a ``key_bits``-bit n: p and q (key_bits/2), n, p², q²
        (key_bits) and n² (2·key_bits)."""
        half = -(-key_bits // 2)
        return cls(frozenset({half, key_bits, 2 * key_bits}), frozenset(ops))

    def limb_counts(self) -> list[int]:
        """The limb counts of the moduli, ascending."""
        return sorted({limb_count(b) for b in self.modulus_bits})


@dataclass(frozen=True)
class Support:
    """A backend's answer to a :class:`Request`: served, or not and why (one reason per gap)."""

    served: bool
    reasons: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.served

    @classmethod
    def of(cls, reasons: list[str]) -> "Support":
        """Served exactly when there is no reason against it."""
        return cls(not reasons, tuple(reasons))


class Backend:
    """Base class of backends.  Subclasses set ``name`` and ``native_ops`` and define ``op_<name>``
    with the signatures of :class:`unifl.core.contract.OpContract`.  Python-int conveniences over
    any backend are in :mod:`unifl.mod_op.ints`."""

    name: ClassVar[str] = "abstract"
    native_ops: ClassVar[frozenset[str]] = frozenset()
    #: every option this backend takes, with its default and checks (the empty model: none)
    options_model: ClassVar[type[BackendOptions]] = BackendOptions
    #: True when an instance drives exactly one of the devices its probe lists (chosen by
    #: ``select_device``): ``devices: all`` then means one instance per device, split by the
    #: scheduler; False when one instance already uses every device it sees
    one_device_per_instance: ClassVar[bool] = False
    #: the widest modulus this backend computes with (every op); the Montgomery layer's limit
    #: unless a backend's kernels have a smaller capacity
    max_modulus_bits: ClassVar[int] = MAX_MODULUS_BITS

    def __init__(self, **options: Any) -> None:
        #: this instance's options, parsed by ``options_model`` (an unknown or bad one: ConfigError)
        self.options: BackendOptions = self.options_model.parse(options, backend=self.name)
        self.probe_result: ProbeResult | None = None
        #: state this instance derived from keys and moduli (weakly keyed by them)
        self.state = DeviceState()

    # ---- registration-time description --------------------------------------------------------
    @classmethod
    def probe(cls) -> ProbeResult:
        """Answer whether this backend can run here (cheap, cached by the registry)."""
        return ProbeResult(True, "always available")

    @classmethod
    def select_device(cls, value: Any) -> dict[str, Any]:
        """The options that make one instance use the device a scalar entry of a party's
        ``devices:`` list names (``devices: [0, 1]``: one instance per entry).  The result is
        merged over the backend's section and parsed by ``options_model``, so a selector only maps
        and leaves validation to the model.  A backend without an override has no device
        selector: a scalar entry is a ConfigError, and mappings of options select instead."""
        raise ConfigError(f"backend {cls.name!r} has no device selector, so the scalar entry "
                          f"{value!r} of devices cannot choose one of its devices; give a mapping "
                          f"of its options instead, e.g. {{backend: {cls.name}}}")

    def supports(self, request: Request) -> Support:
        """Whether this instance serves ``request``: every op is served (natively, or composed
        from the ones it has), every modulus up to :attr:`max_modulus_bits`.  A backend whose
        instances can serve less (a prebuilt binary with some kernel sizes only) overrides this and
        adds its reasons to ``super().supports(request)``'s."""
        reasons = [f"{op!r} is not an op of the contract" for op in sorted(request.ops - set(OPS))]
        wide = sorted(b for b in request.modulus_bits if b > self.max_modulus_bits)
        if wide:
            reasons.append(f"moduli of {', '.join(map(str, wide))} bits exceed its limit of "
                           f"{self.max_modulus_bits} bits")
        return Support.of(reasons)

    def implements(self, op: str) -> bool:
        """True when ``op`` runs natively on this backend (else the generic composition is used)."""
        return op in self.native_ops

    @property
    def devices(self) -> list[str]:
        return self.probe_result.devices if self.probe_result else []

    def own_batch(self, x: Any) -> Any:
        """``x`` in the form this backend's ``op_*`` take: a contiguous ``uint64`` host array here.
        A backend that keeps results in device memory (``unifl.core.limbs.DeviceBatch``) overrides this
        to pass its own batches through untouched; the layers call it instead of converting, so they
        never branch on hardware and never fetch what the backend can use in place."""
        return np.ascontiguousarray(x, dtype=np.uint64)

    # ---- what an instance measured about itself, for the next one on the same device ----------
    def tuning_key(self) -> str | None:
        """Names the device, build and options behind what this instance measures about itself
        at run time (the GPU backend's ``kernels: auto`` timing, say), so that a later instance
        with the same key may take it over (:meth:`tuning`, :meth:`adopt_tuning`) instead of
        measuring again.  None, the default: nothing worth keeping."""
        return None

    def tuning(self) -> dict[str, Any]:
        """What this instance has measured so far, as JSON-able data for :meth:`adopt_tuning`."""
        return {}

    def adopt_tuning(self, state: Any) -> int:
        """Take over ``state``, recorded by an instance with the same :meth:`tuning_key` (it may
        come from a file: anything this instance cannot check is ignored); returns how many
        measurements it took."""
        return 0

    def describe(self) -> str:
        pr = self.probe_result
        extra = f" [{pr.stand_in}]" if pr and pr.stand_in else ""
        return f"{self.name}{extra}"

    def __repr__(self) -> str:
        return f"<unifl backend {self.describe()}>"


"""The one interface every backend implements (SecretFlow-HEU style: registered by name, with a probe
and a declaration of what it does natively).

A backend implements *natively* a subset of the operations in :data:`OPS`, each as a method
``op_<name>``.  Everything it does not implement is composed, once and generically, by the layer that
owns the operation (``unifl.base_op``, ``unifl.mod_op``, ``unifl.phe_sdk``) from the layer below it,
running on the same backend.  Only ``mont_mul`` (the base op) is mandatory.

All limb arguments use the canonical layout of :mod:`unifl.base_op.limbs`: ``uint64`` arrays of shape
``(N, L)``, little-endian limbs -- or, for a backend that keeps data on its device, its own
``DeviceBatch`` (see :meth:`Backend.own_batch`); results may be either, and every consumer reads them
through the NumPy array protocol.  Exponent batches are limb arrays too: shape ``(N, Le)`` for one
exponent per element, or ``(1, Le)`` for an exponent shared by the batch.

``mod_exp_secret`` is ``mod_exp`` for exponents that are secret (the CRT decryption exponents p−1,
q−1, RSA's d mod (p−1), the key owner's obfuscators): a backend implements it only with an
exponentiation whose running time does not depend on the exponent's or the base's value (``cpu``:
GMP's mpz_powm_sec; ``native``: OpenSSL's BN_mod_exp_mont_consttime).  Without it, ``unifl.mod_op``
composes a fixed-schedule MontMult ladder, which is not claimed constant time.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import numpy as np

#: The native-op contract.  name -> signature of ``op_<name>`` (all limb arrays, see module doc).
OPS: dict[str, str] = {
    # base_op
    "mont_mul": "op_mont_mul(ctx, a, b) -> a·b·R^-1 mod m                       [(N,L) each]",
    # mod_op
    "mod_mul": "op_mod_mul(ctx, a, b) -> a·b mod m",
    "mod_exp": "op_mod_exp(ctx, base, exps) -> base^e mod m                       [exps (N|1, Le)]",
    "mod_exp_secret": "op_mod_exp_secret(ctx, base, exps) -> base^e mod m for a SECRET e (and base): "
                      "time independent of their values beyond their limb counts       [exps (N|1, Le)]",
    "mont_exp": "op_mont_exp(ctx, base_mont, exps) -> (base^e)·R mod m, in and out of the domain",
    "mont_multi_exp": "op_mont_multi_exp(ctx, bases_mont (N,L), exps (K,N,Le)) -> (K,L): "
                      "prod_i base_i^e_ki, Montgomery form",
    "mont_prod_groups": "op_mont_prod_groups(ctx, a_mont (N,L), groups (N,) int64, G) -> (G,L): "
                        "product per group, Montgomery form (R mod m for an empty group)",
    "mont_inverse": "op_mont_inverse(ctx, a_mont (N,L)) -> (x^-1)·R mod m for a = x·R, "
                    "Montgomery form in and out; ValueError when some x shares a factor with m",
    # phe_sdk (fused Paillier)
    "paillier_encrypt": "op_paillier_encrypt(pk, m (N,Ln), r (N,Ln)) -> (1+m·n)·r^n mod n², "
                        "Montgomery form mod n²",
    "paillier_encrypt_fixed_base": "op_paillier_encrypt_fixed_base(pk, m (N,Ln), a (N,La)) -> "
                                   "(1+m·n)·hs^a mod n², Montgomery form (DJN variant)",
    "paillier_decrypt": "op_paillier_decrypt(sk, c_mont (N,L2)) -> m (N,Ln), CRT",
}


@dataclass
class ProbeResult:
    """What a backend's probe found: usable or not, why, and which devices it sees."""

    available: bool
    reason: str = ""
    devices: list[str] = field(default_factory=list)
    stand_in: str | None = None  # e.g. "PoCL (OpenCL on the CPU)", "QAT simulator"; None for real hardware


class Backend:
    """Base class of backends.  Subclasses set ``name`` and ``native_ops`` and define ``op_<name>``.

    Public Python-int facade (the API contract): :meth:`mont_mul`, :meth:`mod_mul`, :meth:`mod_exp`.
    """

    name: ClassVar[str] = "abstract"
    native_ops: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **options: Any) -> None:
        self.options = options
        self.probe_result: ProbeResult | None = None

    # ---- registration-time description --------------------------------------------------------
    @classmethod
    def probe(cls) -> ProbeResult:
        """Answer whether this backend can run here (cheap, cached by the registry)."""
        return ProbeResult(True, "always available")

    def implements(self, op: str) -> bool:
        """True when ``op`` runs natively on this backend (else the generic composition is used)."""
        return op in self.native_ops

    @property
    def devices(self) -> list[str]:
        return self.probe_result.devices if self.probe_result else []

    def own_batch(self, x) -> Any:
        """``x`` in the form this backend's ``op_*`` take: a contiguous ``uint64`` host array here.
        A backend that keeps results in device memory (``unifl.base_op.DeviceBatch``) overrides this
        to pass its own batches through untouched; the layers call it instead of converting, so they
        never branch on hardware and never fetch what the backend can use in place."""
        return np.ascontiguousarray(x, dtype=np.uint64)

    def describe(self) -> str:
        pr = self.probe_result
        extra = f" [{pr.stand_in}]" if pr and pr.stand_in else ""
        return f"{self.name}{extra}"

    # ---- the Python-int facade ------------------------------------------------------------------
    def mont_mul(self, a: Sequence[int], b: Sequence[int], m: int | Sequence[int]) -> list[int]:
        """Batched a·b·R^-1 mod m, R = 2^(64·ceil(bits(m)/64)).  Raises OperandError (a ValueError)
        for operands outside [0, m) and for even m."""
        from .. import base_op
        return _per_modulus(a, b, m, lambda ctx, x, y: base_op.mont_mul(self, ctx, x, y))

    def mod_mul(self, a: Sequence[int], b: Sequence[int], m: int | Sequence[int]) -> list[int]:
        """Batched a·b mod m (UniFL Alg. 2 when composed)."""
        from .. import mod_op
        return _per_modulus(a, b, m, lambda ctx, x, y: mod_op.mod_mul(self, ctx, x, y))

    def mod_exp(self, base: Sequence[int], exp: int | Sequence[int],
                m: int | Sequence[int]) -> list[int]:
        """Batched base^exp mod m; ``exp`` one non-negative int for the batch, or one per element."""
        from .. import mod_op
        from ..base_op.limbs import as_int_list
        from ..errors import OperandError
        base = as_int_list(base)
        shared = isinstance(exp, (int, np.integer))
        exps = as_int_list(exp, len(base))
        if not shared and len(exps) != len(base):
            raise OperandError(f"mod_exp: {len(base)} bases but {len(exps)} exponents")
        if any(e < 0 for e in exps):
            raise OperandError("mod_exp: negative exponent")
        return _per_modulus(
            base, exps, m,
            lambda ctx, x, e: mod_op.mod_exp(self, ctx, x, mod_op.exp_limbs(e)),
            second_is_exponent=True, shared_second=shared)

    def __repr__(self) -> str:
        return f"<unifl backend {self.describe()}>"


def _per_modulus(a, b, m, fn, second_is_exponent: bool = False, shared_second: bool = False):
    """Run ``fn(ctx, a_limbs, b)`` per distinct modulus and put results back in input order."""
    from ..base_op.limbs import as_int_list, from_limbs
    from ..base_op.montgomery import mont_context
    from ..errors import OperandError

    a = as_int_list(a)
    b = as_int_list(b)
    if not shared_second and len(a) != len(b):
        raise OperandError(f"operand batches differ in length: {len(a)} and {len(b)}")
    if isinstance(m, (int, np.integer)):
        groups = {int(m): list(range(len(a)))}
    else:
        ms = [int(x) for x in m]
        if len(ms) != len(a):
            raise OperandError(f"{len(a)} operands but {len(ms)} moduli")
        groups = {}
        for i, mi in enumerate(ms):
            groups.setdefault(mi, []).append(i)
    out: list[int] = [0] * len(a)
    for mod, idx in groups.items():
        ctx = mont_context(mod)
        x = ctx.to_limbs([a[i] for i in idx])
        if second_is_exponent:
            y = [b[0]] if shared_second else [b[i] for i in idx]
        else:
            y = ctx.to_limbs([b[i] for i in idx])
        for i, v in zip(idx, from_limbs(fn(ctx, x, y))):
            out[i] = v
    return out

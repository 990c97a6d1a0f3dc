"""Layer 4, the base op: batched Montgomery multiplication (MontMult), the one hardware primitive.

``mont_mul(backend, ctx, a, b)`` = a·b·R^-1 mod m, element-wise over (N, L) limb batches.  Entering and
leaving the Montgomery domain are themselves MontMults: to_mont(x) = MontMult(x, R² mod m),
from_mont(x̄) = MontMult(x̄, 1).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from ..core.backend import Backend
from ..core.contract import Composition, Limbs, OpContract
from ..core.errors import OperandError
from ..core.limbs import LIMB_BITS, DeviceBatch, from_limbs, limb_count, to_limbs
from ..core.montgomery import MontContext, check_modulus, mont_context, mont_mul_ref

__all__ = ["MontContext", "mont_context", "check_modulus", "mont_mul", "to_mont", "from_mont",
           "constant", "to_limbs", "from_limbs", "limb_count", "mont_mul_ref", "LIMB_BITS",
           "DeviceBatch", "operand", "native", "Limbs", "COMPOSITIONS"]


def native(backend: Backend) -> OpContract:
    """``backend`` seen through the op contract, so that every ``op_<name>`` call is checked against
    the contract's typed signature.  A layer calls an op this way only when
    ``backend.implements(name)`` (``mont_mul`` always): the contract types the call, the backend's
    ``native_ops`` decides whether the method exists."""
    return cast(OpContract, backend)


def constant(ctx: MontContext, value: int, n: int) -> np.ndarray:
    """An (n, L) batch holding ``value`` (already reduced mod m) in every row."""
    row = to_limbs([value % ctx.m], ctx.num_limbs)
    return np.repeat(row, n, axis=0)


def operand(backend: Backend, ctx: MontContext, x: Limbs, name: str, checked: bool = True
            ) -> Limbs:
    """``x`` as ``backend``'s ops take it (``backend.own_batch``): a batch already in the backend's
    device memory as is, anything else as a contiguous host array, range-checked unless
    ``checked=False``.  A device batch is not checked: it was produced by the backend's own kernels,
    whose results are reduced, and checking it would fetch it."""
    if isinstance(x, DeviceBatch) and backend.own_batch(x) is x:
        if x.shape[1] != ctx.num_limbs:
            raise OperandError(f"{name}: expected shape (N, {ctx.num_limbs}) for a {ctx.bits}-bit "
                               f"modulus, got {x.shape}")
        return x
    host = ctx.check_operands(x, name) if checked else x
    batch: Limbs = backend.own_batch(host)
    return batch


def mont_mul(backend: Backend, ctx: MontContext, a: Limbs, b: Limbs, *, checked: bool = True
             ) -> Limbs:
    """Batched MontMult on ``backend``.  ``b`` may be one row (broadcast to the batch).

    ``checked=False`` skips the range checks; the layers above use it for values they produced.
    """
    a = operand(backend, ctx, a, "a", checked)
    if b.shape[0] == 1 and a.shape[0] != 1:
        b = ctx.check_operands(b, "b") if checked else np.asarray(b, dtype=np.uint64)
        # a zero-stride view: a backend that reads one shared row (gpu) keeps it and is spared n copies
        b = backend.own_batch(np.broadcast_to(b, a.shape))
    else:
        b = operand(backend, ctx, b, "b", checked)
    if a.shape != b.shape:
        raise OperandError(f"mont_mul: batch shapes differ, {a.shape} and {b.shape}")
    if a.shape[0] == 0:
        return np.empty(a.shape, np.uint64)
    return native(backend).op_mont_mul(ctx, a, b)


def to_mont(backend: Backend, ctx: MontContext, x: Limbs) -> Limbs:
    """x·R mod m, as MontMult(x, R²)."""
    return mont_mul(backend, ctx, x, constant(ctx, ctx.r2, 1), checked=False)


def from_mont(backend: Backend, ctx: MontContext, x: Limbs) -> Limbs:
    """x̄·R^-1 mod m, as MontMult(x̄, 1)."""
    return mont_mul(backend, ctx, x, constant(ctx, 1, 1), checked=False)


#: the op of the contract this layer owns (the scheduler's registry of compositions)
COMPOSITIONS: dict[str, Composition] = {"mont_mul": mont_mul}

"""The mod_op layer on Python ints, over any backend: batched MontMult, ModMult and ModExp with one
modulus for the batch or one per element (grouped per distinct modulus).

These are conveniences at the API edge; the layers above work on limb batches
(:mod:`unifl.mod_op`, :mod:`unifl.base_op`) and convert once.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from .. import base_op
from ..core.backend import Backend
from ..core.contract import Limbs
from ..core.errors import OperandError
from ..core.exponents import exp_limbs
from ..core.limbs import as_int_list, from_limbs
from ..core.montgomery import MontContext, mont_context
from . import mod_exp as _mod_exp
from . import mod_mul as _mod_mul

__all__ = ["mont_mul", "mod_mul", "mod_exp"]

IntBatch = Sequence[int]


def mont_mul(backend: Backend, a: IntBatch, b: IntBatch, m: int | Sequence[int]) -> list[int]:
    """a·b·R^−1 mod m element-wise, R = 2^(64·ceil(bits(m)/64)).

    Raises:
        OperandError: operands outside [0, m), an even or tiny m, or batches of different lengths.
    """
    return _per_modulus(a, b, m, lambda ctx, x, y: base_op.mont_mul(backend, ctx, x, y))


def mod_mul(backend: Backend, a: IntBatch, b: IntBatch, m: int | Sequence[int]) -> list[int]:
    """a·b mod m element-wise (two MontMults when composed)."""
    return _per_modulus(a, b, m, lambda ctx, x, y: _mod_mul(backend, ctx, x, y))


def mod_exp(backend: Backend, base: IntBatch, exp: int | Sequence[int],
            m: int | Sequence[int]) -> list[int]:
    """base^exp mod m element-wise; ``exp`` one non-negative int for the batch, or one per element."""
    bases = as_int_list(base)
    shared = isinstance(exp, (int, np.integer))
    exps = as_int_list(exp, len(bases))
    if not shared and len(exps) != len(bases):
        raise OperandError(f"mod_exp: {len(bases)} bases but {len(exps)} exponents")
    if any(e < 0 for e in exps):
        raise OperandError("mod_exp: negative exponent")
    return _per_modulus(bases, exps, m, lambda ctx, x, e: _mod_exp(backend, ctx, x, e),
                        second_is_exponent=True, shared_second=shared)


def _per_modulus(a: IntBatch, b: IntBatch, m: int | Sequence[int],
                 fn: Callable[[MontContext, np.ndarray, np.ndarray], Limbs],
                 second_is_exponent: bool = False, shared_second: bool = False) -> list[int]:
    """Run ``fn(ctx, a_limbs, b_limbs)`` per distinct modulus and put results back in input order;
    ``b`` goes in as operand limbs mod m, or as exponent limbs when ``second_is_exponent`` (one
    shared exponent row when ``shared_second``)."""
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
            y = exp_limbs([b[0]] if shared_second else [b[i] for i in idx])
        else:
            y = ctx.to_limbs([b[i] for i in idx])
        for i, v in zip(idx, from_limbs(fn(ctx, x, y))):
            out[i] = v
    return out

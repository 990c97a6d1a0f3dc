"""Inputs for every op of the contract (``GENERATORS``: op -> a function returning argument
tuples), shared by the scheduler's contract tests and the Ray executor's."""

from __future__ import annotations

import functools
import secrets
from typing import Callable

import numpy as np

import unifl
from unifl import base_op, mod_op
from unifl.core import registry
from unifl.core.backend import Backend
from unifl.core.limbs import to_limbs

from .keys import random_odd_modulus

CPU = registry.backend("cpu")
HAVE_NATIVE = registry.probe("native").available
N = 23                       # rows of a generated batch: uneven pieces over three members


# ------------------------------------------------------------------ inputs per op
@functools.lru_cache(maxsize=None)
def _keys():
    """A key of its own (the DJN fixed base is switched on, which the shared test keys must not
    see), with a small comb window so that building tables stays cheap."""
    pk, sk = unifl.keygen(1024)
    pk.enable_fixed_base(window=4)
    return pk, sk


@functools.lru_cache(maxsize=None)
def _ctx():
    return base_op.mont_context(random_odd_modulus(1024))


def _below(bound: int, count: int, limbs: int) -> np.ndarray:
    return to_limbs([secrets.randbelow(bound - 1) + 1 for _ in range(count)], limbs)


def _exps(count: int, bits: int = 200) -> np.ndarray:
    return mod_op.exp_limbs([secrets.randbits(bits) for _ in range(count)])


def _ring(shared_exps: bool) -> Callable[[], list[tuple]]:
    def make() -> list[tuple]:
        ctx = _ctx()
        a = _below(ctx.m, N, ctx.num_limbs)
        return [(ctx, a, _exps(1, 300) if shared_exps else _exps(N))]
    return make


def _mont_mul_args() -> list[tuple]:
    ctx = _ctx()
    return [(ctx, _below(ctx.m, N, ctx.num_limbs), _below(ctx.m, N, ctx.num_limbs))]


def _exp_args() -> list[tuple]:
    return _ring(False)() + _ring(True)()


def _multi_exp_args() -> list[tuple]:
    ctx = _ctx()
    bases = _below(ctx.m, N, ctx.num_limbs)
    # K = 1 < members: split over the N bases with partial products; K = 5: split over K
    return [(ctx, bases, np.stack([_exps(N, 64) for _ in range(k)])) for k in (1, 5)]


def _prod_groups_args() -> list[tuple]:
    ctx = _ctx()
    groups = np.array([secrets.randbelow(6) for _ in range(N)], np.int64)
    groups[groups == 3] = 2                            # group 3 stays empty
    return [(ctx, _below(ctx.m, N, ctx.num_limbs), groups, 6)]


def _inverse_args() -> list[tuple]:
    ctx = base_op.mont_context(int(__import__("gmpy2").next_prime(random_odd_modulus(1024))))
    return [(ctx, _below(ctx.m, N, ctx.num_limbs))]


def _plaintexts(pk) -> np.ndarray:
    return to_limbs([secrets.randbelow(pk.n) for _ in range(N)], pk.n_ctx.num_limbs)


def _fixed_base_exps(fb) -> np.ndarray:
    return to_limbs([secrets.randbits(fb.exp_bits) for _ in range(N)], -(-fb.exp_bits // 64))


def _encrypt_args() -> list[tuple]:
    pk, _ = _keys()
    return [(pk.material, _plaintexts(pk), _below(pk.n, N, pk.n_ctx.num_limbs))]


def _encrypt_fixed_base_args() -> list[tuple]:
    pk, _ = _keys()
    return [(pk.material, _plaintexts(pk), _fixed_base_exps(pk.material.fixed_base))]


def _owner_args() -> list[tuple]:
    pk, sk = _keys()
    mat = sk.material
    return [(mat, _plaintexts(pk), _below(mat.p, N, mat.p_limbs), _below(mat.q, N, mat.q_limbs))]


def _owner_fixed_base_args() -> list[tuple]:
    pk, sk = _keys()
    return [(sk.material, _plaintexts(pk), _fixed_base_exps(pk.material.fixed_base))]


def _owner_generator_args() -> list[tuple]:
    pk, sk = _keys()
    mat = sk.material
    return [(mat, _plaintexts(pk), _below(mat.p - 1, N, mat.p_limbs),
             _below(mat.q - 1, N, mat.q_limbs))]


def _decrypt_args() -> list[tuple]:
    pk, sk = _keys()
    m, r = _plaintexts(pk), _below(pk.n, N, pk.n_ctx.num_limbs)
    c = unifl.phe_sdk.paillier.encrypt_limbs(CPU, pk, m, r=r, use_pool=False)
    return [(sk.material, np.asarray(c))]


GENERATORS: dict[str, Callable[[], list[tuple]]] = {
    "mont_mul": _mont_mul_args,
    "mod_mul": _mont_mul_args,
    "mod_exp": _exp_args,
    "mod_exp_secret": _exp_args,
    "mont_exp": _exp_args,
    "mont_multi_exp": _multi_exp_args,
    "mont_prod_groups": _prod_groups_args,
    "mont_inverse": _inverse_args,
    "paillier_encrypt": _encrypt_args,
    "paillier_encrypt_fixed_base": _encrypt_fixed_base_args,
    "paillier_encrypt_owner": _owner_args,
    "paillier_encrypt_owner_fixed_base": _owner_fixed_base_args,
    "paillier_encrypt_owner_generator": _owner_generator_args,
    "paillier_decrypt": _decrypt_args,
}


def _natives(op: str) -> list[Backend]:
    """The cpu / native backends that implement ``op`` natively."""
    names = ["cpu"] + (["native"] if HAVE_NATIVE else [])
    return [registry.backend(n) for n in names if registry.backend(n).implements(op)]


def _same(x, y) -> bool:
    return np.array_equal(np.asarray(x), np.asarray(y))



"""Comb tables of fixed bases: base^a as a grouped product of precomputed powers base^(d·2^(w·j)),
built once per key record and backend instance.  The DJN fixed base hs (short random exponents): the
full-size table mod n² (public key) and the two half-size tables mod p², q² (key owner).  The key
owner's generators gp mod p², gq mod q² (full-length exponents, exact Paillier obfuscation)."""

from __future__ import annotations

import numpy as np

from ... import base_op, mod_op
from ...base_op import MontContext
from ...core.backend import Backend
from ...core.contract import Limbs
from ...core.exponents import check_covered, window_digits
from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.limbs import from_limbs


def fixed_base_table(be: Backend, pk: PaillierPublicMaterial) -> np.ndarray:
    """The comb table (nwin, 2^w − 1, L2) of the record's fixed base mod n², cached per key.

    Held by the backend instance, keyed by the key's record: a new fixed base (a new record) never
    meets an old table, and the build runs once however many threads ask at the same time."""
    fb = pk.require_fixed_base()
    return be.state.get(pk, "fixed_base_table", lambda: comb_table(
        be, pk.nsquare_ctx, fb.hs_mont[None, :].copy(), fb.exp_bits, fb.window))


def owner_fixed_base_tables(be: Backend, sk: PaillierPrivateMaterial
                            ) -> tuple[np.ndarray, np.ndarray]:
    """The comb tables of hs mod p² and hs mod q² (Montgomery form of each half-size modulus), held
    by the backend instance and keyed by the private record (a new fixed base is a new record)."""
    def build() -> tuple[np.ndarray, np.ndarray]:
        pk = sk.public_key
        fb = pk.require_fixed_base()
        hs = from_limbs(base_op.from_mont(be, pk.nsquare_ctx, fb.hs_mont[None, :]))[0]
        out = []
        for ctx in (sk.psquare_ctx, sk.qsquare_ctx):
            base = base_op.to_mont(be, ctx, ctx.to_limbs([hs % ctx.m]))
            out.append(comb_table(be, ctx, np.asarray(base, np.uint64), fb.exp_bits, fb.window))
        return out[0], out[1]
    return be.state.get(sk, "owner_fixed_base_tables", build)


def comb_table(be: Backend, ctx: MontContext, base_mont: np.ndarray, exp_bits: int, window: int
               ) -> np.ndarray:
    """table[j, d−1] = base^(d·2^(window·j)) (Montgomery form), j < ceil(exp_bits/window).

    The window bases base^(2^(window·j)) take ``window`` squarings each, in sequence; then each
    multiple d is one batched MontMult over all windows (2^window − 2 calls, not one per entry)."""
    nwin = -(-exp_bits // window)
    per = (1 << window) - 1
    table = np.empty((nwin, per, ctx.num_limbs), np.uint64)
    base: Limbs = base_mont
    for j in range(nwin):
        table[j, 0] = np.asarray(base)[0]
        if j + 1 < nwin:
            for _ in range(window):
                base = base_op.mont_mul(be, ctx, base, base, checked=False)
    bases = np.ascontiguousarray(table[:, 0])
    for d in range(1, per):
        table[:, d] = np.asarray(base_op.mont_mul(be, ctx, np.ascontiguousarray(table[:, d - 1]),
                                                  bases, checked=False))
    return table


def owner_generator_tables(be: Backend, sk: PaillierPrivateMaterial
                           ) -> tuple[np.ndarray, np.ndarray]:
    """The comb tables of the owner's generators gp mod p² and gq mod q² (Montgomery form of each
    modulus), for exponents of p's and q's bit length; held by the backend instance and keyed by
    the private record."""
    gens = sk.require_generators()

    def build() -> tuple[np.ndarray, np.ndarray]:
        out = []
        for ctx, g, prime in ((sk.psquare_ctx, gens.gp, sk.p), (sk.qsquare_ctx, gens.gq, sk.q)):
            base = base_op.to_mont(be, ctx, ctx.to_limbs([g]))
            out.append(comb_table(be, ctx, np.asarray(base, np.uint64), prime.bit_length(),
                                  gens.window))
        return out[0], out[1]
    return be.state.get(sk, "owner_generator_tables", build)


def comb_power(be: Backend, ctx: MontContext, table: np.ndarray, window: int, a: np.ndarray
               ) -> Limbs:
    """base^a for each row of ``a``, as a grouped product of comb-table entries (Montgomery form).

    Raises:
        OperandError: an exponent is longer than the table covers."""
    nwin = table.shape[0]
    a = np.ascontiguousarray(a, dtype=np.uint64)
    check_covered(a, nwin * window)
    digits = window_digits(a, window, nwin)[::-1]          # (nwin, N), least significant first
    j_idx, rows = np.nonzero(digits)
    entries = table[j_idx, digits[j_idx, rows] - 1]
    return mod_op.mont_prod_groups(be, ctx, entries, rows, a.shape[0])


def fixed_base_obfuscators(be: Backend, pk: PaillierPublicMaterial, a: np.ndarray) -> Limbs:
    """hs^a mod n² for each row of ``a`` (Montgomery form), from the full-size comb table."""
    fb = pk.require_fixed_base()
    return comb_power(be, pk.nsquare_ctx, fixed_base_table(be, pk), fb.window, a)

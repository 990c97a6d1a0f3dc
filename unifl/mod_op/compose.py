"""Generic compositions of the mod_op layer from batched MontMults (written once, for every backend
that has no native version).  Every step is one batched ``mont_mul`` call, so a device backend sees a
few large batches rather than one call per element.
"""

from __future__ import annotations

import numpy as np

from ..base_op import MontContext, constant, mont_mul
from ..core.backend import Backend
from ..core.contract import Limbs
from ..core.exponents import exp_bits, window_bits, window_digits as _digits
from ..core.limbs import from_limbs


def _mm(backend: Backend, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
    return mont_mul(backend, ctx, a, b, checked=False)


def _mm_host(backend: Backend, ctx: MontContext, a: Limbs, b: Limbs) -> np.ndarray:
    """:func:`_mm` as a host array, for a step whose result is then updated in place (a device
    batch is read-only; the backends that keep results on the device run these ops natively)."""
    return np.asarray(_mm(backend, ctx, a, b))


def _odd_powers(backend: Backend, ctx: MontContext, x: Limbs, w: int) -> list[Limbs]:
    """[x, x^3, x^5, ..., x^(2^w - 1)] (Montgomery form), each (N, L)."""
    table = [x]
    if w > 1:
        x2 = _mm(backend, ctx, x, x)
        for _ in range((1 << (w - 1)) - 1):
            table.append(_mm(backend, ctx, table[-1], x2))
    return table


def _all_powers(backend: Backend, ctx: MontContext, x: Limbs, w: int) -> np.ndarray:
    """Array T of shape (2^w, N, L) with T[d] = x^d (Montgomery form), T[0] = R mod m."""
    n = x.shape[0]
    t = np.empty((1 << w, n, ctx.num_limbs), np.uint64)
    t[0] = constant(ctx, ctx.r_mod, n)
    t[1] = x
    for d in range(2, 1 << w):
        t[d] = _mm(backend, ctx, t[d - 1], x)  # x^d = x^(d-1)·x; d even could square, same count
    return t


def _window(e: int, i: int, w: int) -> tuple[int, int]:
    """(j, value) of the sliding window of ``e`` whose top bit is the set bit i: bits [j, i], at
    most w wide, ending on a set bit so that the value is odd."""
    j = max(i - w + 1, 0)
    while not (e >> j) & 1:
        j += 1
    return j, (e >> j) & ((1 << (i - j + 1)) - 1)


def _sliding_exp(backend: Backend, ctx: MontContext, x: Limbs, e: int) -> Limbs:
    """x^e for one exponent shared by the batch: left-to-right sliding windows."""
    n = x.shape[0]
    if e == 0:
        return constant(ctx, ctx.r_mod, n)
    w = window_bits(e.bit_length())
    table = _odd_powers(backend, ctx, x, w)
    # the top bit of e is set, so the first window starts there and seeds the accumulator
    j, val = _window(e, e.bit_length() - 1, w)
    acc: Limbs = table[val >> 1].copy()
    i = j - 1
    while i >= 0:
        if not (e >> i) & 1:
            acc = _mm(backend, ctx, acc, acc)
            i -= 1
            continue
        j, val = _window(e, i, w)
        for _ in range(i - j + 1):
            acc = _mm(backend, ctx, acc, acc)
        acc = _mm(backend, ctx, acc, table[val >> 1])
        i = j - 1
    return acc


def mont_exp(backend: Backend, ctx: MontContext, x: Limbs, exps: np.ndarray) -> Limbs:
    """x^e (Montgomery form in and out) for one exponent per row, or one shared exponent (1, Le):
    sliding windows for a shared exponent; otherwise fixed windows over a table of all 2^w powers,
    every row running the same squarings and multiplying only the rows whose digit is non-zero."""
    if exps.shape[0] == 1:
        return _sliding_exp(backend, ctx, x, from_limbs(exps)[0])
    # one exponent per element: fixed windows, same squaring schedule for all, table gathered
    ebits = exp_bits(exps)
    n = x.shape[0]
    if ebits == 0:
        return constant(ctx, ctx.r_mod, n)
    w = min(window_bits(ebits), 6)
    nw = -(-ebits // w)
    table = _all_powers(backend, ctx, x, w)
    digits = _digits(exps, w, nw)
    rows = np.arange(n)
    acc = table[digits[0], rows].copy()
    for j in range(1, nw):
        for _ in range(w):
            acc = _mm_host(backend, ctx, acc, acc)
        sel = np.flatnonzero(digits[j])
        if sel.size:
            acc[sel] = _mm(backend, ctx, acc[sel], table[digits[j, sel], sel])
    return acc


#: window of the fixed-schedule ladder (16-entry table, as the gpu kernels use)
SECRET_WINDOW = 4


def mont_exp_fixed_schedule(backend: Backend, ctx: MontContext, x: Limbs, exps: np.ndarray
                            ) -> Limbs:
    """x^e (Montgomery form in and out) by a fixed-window ladder whose schedule depends only on the
    exponent's limb count Le: a table of all 2^w powers, then for each of the 64·Le/w windows, w
    squarings and ONE multiplication by the table entry of the digit -- digit 0 included, whose
    entry is R mod m (the Montgomery one: MontMult(acc, R) = acc), so no zero window is skipped and
    no leading zero bit is trimmed.  Every element of the batch, and every exponent of that length,
    runs the same batched MontMults.

    For backends without a constant-time ``mod_exp_secret``.  Not claimed constant time: the table
    entries are gathered by NumPy fancy indexing (addresses follow the digits) and the backend's
    MontMult may itself branch on the data (a final conditional subtraction).
    """
    n = x.shape[0]
    le = exps.shape[1]
    w = SECRET_WINDOW
    nw = -(-64 * le // w)
    table = _all_powers(backend, ctx, x, w)                 # (2^w, N, L), table[0] = R mod m
    if exps.shape[0] == 1 and n > 1:
        exps = np.repeat(exps, n, axis=0)
    digits = _digits(exps, w, nw)                           # (nw, N), most significant first
    rows = np.arange(n)
    acc: Limbs = table[digits[0], rows].copy()
    for j in range(1, nw):
        for _ in range(w):
            acc = _mm(backend, ctx, acc, acc)
        acc = _mm(backend, ctx, acc, table[digits[j], rows])
    return acc


def _tree_product(backend: Backend, ctx: MontContext, vals: np.ndarray) -> np.ndarray:
    """Product over axis 1 of (K, N, L) -> (K, L), by pairwise batched MontMults."""
    while vals.shape[1] > 1:
        half = vals.shape[1] // 2
        k, _, nl = vals.shape
        prod = _mm_host(backend, ctx, vals[:, :half].reshape(-1, nl),
                        vals[:, half:2 * half].reshape(-1, nl)).reshape(k, half, nl)
        if vals.shape[1] % 2:
            prod = np.concatenate([prod, vals[:, -1:]], axis=1)
        vals = prod
    return vals[:, 0]


def mont_multi_exp(backend: Backend, ctx: MontContext, bases: Limbs, exps: np.ndarray) -> Limbs:
    """Straus' method vectorised: one power table per base shared by all K outputs; per window, the
    K·N table entries are multiplied together by a batched tree and folded into the accumulators."""
    k, n, le = exps.shape
    ebits = exp_bits(exps.reshape(k * n, le))
    if ebits == 0:
        return constant(ctx, ctx.r_mod, k)
    w = min(window_bits(ebits), 5)
    nw = -(-ebits // w)
    table = _all_powers(backend, ctx, bases, w)                      # (2^w, N, L)
    digits = _digits(exps.reshape(k * n, le), w, nw).reshape(nw, k, n)
    cols = np.arange(n)
    acc: Limbs = _tree_product(backend, ctx, table[digits[0], cols])  # (K, L)
    for j in range(1, nw):
        for _ in range(w):
            acc = _mm(backend, ctx, acc, acc)
        acc = _mm(backend, ctx, acc, _tree_product(backend, ctx, table[digits[j], cols]))
    return acc


def mont_prod_groups(backend: Backend, ctx: MontContext, a: Limbs, groups: np.ndarray,
                     num_groups: int) -> np.ndarray:
    """Grouped products by rounds of pairwise MontMults over all groups at once."""
    out = constant(ctx, ctx.r_mod, num_groups)
    if a.shape[0] == 0:
        return out
    order = np.argsort(groups, kind="stable")
    vals, gs = a[order], groups[order]
    while True:
        starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
        if len(starts) == len(gs):
            break
        run = np.diff(np.r_[starts, len(gs)])
        pos = np.arange(len(gs)) - np.repeat(starts, run)
        nxt_same = np.r_[gs[1:] == gs[:-1], False]
        left = (pos % 2 == 0) & nxt_same
        li = np.flatnonzero(left)
        prod = _mm(backend, ctx, vals[li], vals[li + 1])
        keep = ~np.r_[False, left[:-1]]          # drop the right partner of every pair
        vals = vals.copy()
        vals[li] = prod
        vals, gs = vals[keep], gs[keep]
    out[gs] = vals
    return out

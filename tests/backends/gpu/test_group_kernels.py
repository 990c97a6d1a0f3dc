"""The cooperative gpu kernels (src/bn_group.cuh, src/kernels_group.cuh) through the host harness,
where the TPI lanes of each group run in lockstep with shuffles and votes emulated: the parts the
shared kernel tests (tests/backends/gpu/test_thread_kernels.py) do not reach on their own -- carries that ripple across
lanes, the one-launch reductions split into several parts, batch inversion chunks, property tests
over sizes -- each against Python integers."""

from __future__ import annotations

import secrets

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import unifl
from unifl import mod_op
from unifl.backends.gpu import keys
from unifl.backends.gpu.host import GpuHostBackend, _gpu_host
from unifl.backends.gpu.kernel_backend import balanced_chunk, exp_cost, group_plan
from unifl.base_op import from_limbs, mont_context, to_limbs
from unifl.core.errors import OperandError


pytestmark = pytest.mark.skipif(_gpu_host is None, reason="gpu host harness not built")


def _mont(x: int, ctx) -> int:
    return x * ctx.R % ctx.m


def _rows(vals: list[int], L: int) -> np.ndarray:
    return to_limbs(vals, L)


@pytest.mark.parametrize("bits", [64, 127, 1024, 2048, 3072, 4096, 6144, 8192])
def test_carries_ripple_across_every_lane(bits):
    """Moduli and operands made of all-ones words: every lane propagates, so a carry or borrow
    generated in lane 0 must travel through all of them (the vote-based lookahead), and the final
    subtraction of m hits its borrow chain end to end."""
    ones = (1 << bits) - 1
    for m in (ones, ones ^ (1 << (bits // 2)), (1 << (bits - 1)) + 1):
        ctx = mont_context(m)
        key = keys.ctx_blob(ctx)
        vals = [m - 1, m - 2, 1, 0, ((1 << (bits // 2)) - 1) % m, (ones >> 7) % m]
        a = _rows(vals, ctx.num_limbs)
        b = _rows(vals[::-1], ctx.num_limbs)
        for soa in (True, False):
            got = from_limbs(_gpu_host.mul(key, a, b, 1, soa, 2, group=True))
            assert got == [x * y % m for x, y in zip(vals, vals[::-1])], (bits, hex(m)[:12])


@settings(max_examples=25, deadline=None)
@given(bits=st.integers(min_value=2, max_value=4096), data=st.data())
def test_mont_mul_and_exp_match_python(bits, data):
    m = data.draw(st.integers(min_value=3, max_value=(1 << bits) - 1).filter(lambda v: v & 1))
    ctx = mont_context(m)
    key = keys.ctx_blob(ctx)
    xs = [data.draw(st.integers(0, m - 1)) for _ in range(3)]
    es = [data.draw(st.integers(0, (1 << min(bits, 256)) - 1)) for _ in range(3)]
    L = ctx.num_limbs
    got = from_limbs(_gpu_host.mul(key, _rows(xs, L), _rows(xs[::-1], L), 0, True, 1, group=True))
    assert got == [x * y * pow(ctx.R, -1, m) % m for x, y in zip(xs, xs[::-1])]
    le = max(1, -(-min(bits, 256) // 64))
    got = from_limbs(_gpu_host.exp(key, _rows(xs, L), _rows(es, le), 1, True, 1, group=True))
    assert got == [pow(x, e, m) for x, e in zip(xs, es)]


@pytest.mark.parametrize("chunk", [1, 2, 5, 64])
def test_multi_exp_one_launch_reduction_over_parts(chunk):
    """Rows split into ceil(N/chunk) parts: the last part of each row to arrive multiplies the
    partials; every split gives the same products."""
    m = secrets.randbits(2048) | (1 << 2047) | 1
    ctx = mont_context(m)
    key = keys.ctx_blob(ctx)
    N, K = 11, 3
    bases = [secrets.randbelow(m) for _ in range(N)]
    exps = [[secrets.randbits(96) for _ in range(N)] for _ in range(K)]
    bm = _rows([_mont(b, ctx) for b in bases], ctx.num_limbs)
    ex = np.stack([_rows(row, 2) for row in exps])
    got = from_limbs(_gpu_host.multi_exp(key, bm, ex, True, 2, group=True, chunk=chunk))
    want = []
    for row in exps:
        acc = 1
        for b, e in zip(bases, row):
            acc = acc * pow(b, e, m) % m
        want.append(_mont(acc, ctx))
    assert got == want


def test_group_plan_covers_every_row_and_empty_group():
    groups = np.array([3, 0, 3, 3, 1, 3, 3, 0], np.int64)
    order, plan = group_plan(groups, 5, chunk=2)
    assert sorted(order.tolist()) == list(range(8))
    seen = []
    for g, b, e, first, parts in plan.tolist():
        rows = order[b:e].tolist()
        assert all(groups[r] == g for r in rows)
        seen += rows
        assert plan[first][0] == g and len(plan[first:first + parts]) == parts
    assert sorted(seen) == list(range(8))
    assert {g for g, *_ in plan.tolist()} == {0, 1, 2, 3, 4}   # 2 and 4 empty: one chunk each


@pytest.mark.parametrize("n", [1, 7, 30])
def test_prod_groups_matches_python(n):
    be = GpuHostBackend(threads=2)
    m = secrets.randbits(1024) | (1 << 1023) | 1
    ctx = mont_context(m)
    vals = [secrets.randbelow(m) for _ in range(n)]
    groups = np.array([secrets.randbelow(4) for _ in range(n)], np.int64)
    got = from_limbs(be.op_mont_prod_groups(ctx, _rows([_mont(v, ctx) for v in vals],
                                                       ctx.num_limbs), groups, 6))
    for g in range(6):
        acc = 1
        for v, gg in zip(vals, groups):
            if gg == g:
                acc = acc * v % m
        assert got[g] == _mont(acc, ctx)


@pytest.mark.parametrize("bits", [64, 1024, 2048, 4096])
def test_batch_inverse_chunks_and_refusal(bits):
    be = GpuHostBackend(threads=2)
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = mont_context(m)
    vals = [1, m - 1, 2] + [secrets.randbelow(m - 1) + 1 for _ in range(14)]
    vals = [v for v in vals if _coprime(v, m)]
    rows = _rows([_mont(v, ctx) for v in vals], ctx.num_limbs)
    got = from_limbs(be.op_mont_inverse(ctx, rows))
    assert got == [_mont(pow(v, -1, m), ctx) for v in vals]
    # a row sharing a factor with m (m = 3·k): the whole batch is refused, not half-answered
    m3 = 3 * (secrets.randbits(bits - 2) | 1)
    c3 = mont_context(m3)
    bad = _rows([_mont(v, c3) for v in (1, 2, 6, 5)], c3.num_limbs)
    with pytest.raises(OperandError, match="no inverse"):
        mod_op.mont_inverse(be, c3, bad)


def _coprime(v: int, m: int) -> bool:
    import math
    return math.gcd(v, m) == 1


def test_fixed_base_refuses_an_exponent_longer_than_the_table():
    pk, _ = unifl.keygen(1024)   # a fresh key: the cached pair is shared, and this adds a fixed base
    pk.enable_fixed_base(window=4, backend=unifl.backend("cpu"))
    be = GpuHostBackend(threads=2)
    fb = pk.fixed_base
    covered = -(-fb.exp_bits // 4) * 4
    a = to_limbs([1 << covered], -(-covered // 64) + 1)
    with pytest.raises(OperandError, match="longer than"):
        be.op_paillier_encrypt_fixed_base(pk.material, to_limbs([1], pk.material.n_ctx.num_limbs), a)


def test_every_cooperative_op_is_one_launch():
    """The ops that used to be composed with host steps are one kernel call each now, and their
    results stay resident (the harness's device-memory model counts what the CUDA runtime counts)."""
    pk, sk = unifl.keygen(1024)   # a fresh key: the cached pair is shared, and this adds a fixed base
    pk.enable_fixed_base(window=4, backend=unifl.backend("cpu"))
    be = GpuHostBackend(threads=2, resident=True)
    ctx = pk.material.nsquare_ctx
    m = secrets.randbits(1024)
    rows = _rows([_mont(secrets.randbelow(ctx.m - 2) + 1, ctx) for _ in range(20)], ctx.num_limbs)
    fb = pk.fixed_base
    a = to_limbs([secrets.randbits(fb.exp_bits) for _ in range(20)], -(-fb.exp_bits // 64))
    msg = to_limbs([m % pk.material.n] * 20, pk.material.n_ctx.num_limbs)
    ops = {
        "prod_groups": lambda: be.op_mont_prod_groups(ctx, rows, np.arange(20) % 3, 3),
        "inverse": lambda: be.op_mont_inverse(ctx, rows),
        "multi_exp": lambda: be.op_mont_multi_exp(ctx, rows, to_limbs([7] * 20, 1)[None]),
        "fixed_base": lambda: be.op_paillier_encrypt_fixed_base(pk.material, msg, a),
        "owner_fixed_base": lambda: be.op_paillier_encrypt_owner_fixed_base(sk.material, msg, a),
    }
    for name, op in ops.items():
        op()   # the first call also uploads the comb tables
        before = be.engine.counters()
        out = op()
        after = be.engine.counters()
        assert after["launches"] - before["launches"] == 1, name
        assert after["downloads"] == before["downloads"], name      # nothing fetched
        assert be.engine.holds(out), name


# ---- the tuning of the cooperative exponentiations: 3-, 4- and 5-bit windows, the wide shapes
@pytest.mark.parametrize("window", [3, 4, 5])
@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("bits", [61, 1024, 1536, 2047, 3072, 4096])
def test_windows_and_wide_shapes_match_python(window, wide, bits):
    """Every window and, up to 4096 bits, the wide shape (twice the lanes, LPT 4) give pow(x, e, m),
    with exponents of every length class: 0, 1, digit boundaries, full width."""
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = mont_context(m)
    key = keys.ctx_blob(ctx)
    xs = [0, 1, m - 1, 2] + [secrets.randbelow(m) for _ in range(4)]
    eb = min(bits, 320)   # every digit path is met by a few hundred bits; full widths cost minutes
    es = [0, 1, (1 << window) - 1, 1 << window, (1 << 60) + 3, m - 2 if bits <= 1024 else 5,
          secrets.randbits(eb), (1 << eb) - 1]
    L = ctx.num_limbs
    for soa in (True, False):
        got = from_limbs(_gpu_host.exp(key, _rows(xs, L), _rows(es, L), 1, soa, 2, group=True,
                                       window=window, wide=wide))
        assert got == [pow(x, e, m) for x, e in zip(xs, es)], (bits, window, wide)
    shared = _rows([es[-2]], L)
    got = from_limbs(_gpu_host.exp(key, _rows(xs, L), shared, 1, True, 2, group=True,
                                   window=window, wide=wide))
    assert got == [pow(x, es[-2], m) for x in xs]
    # the device's converged-warp schedule: every group runs the longest digit count of its warp
    # and multiplies at every digit (zero digits, leading zeros included)
    got = from_limbs(_gpu_host.exp(key, _rows(xs, L), _rows(es, L), 1, True, 2, group=True,
                                   window=window, wide=wide, converged=True))
    assert got == [pow(x, e, m) for x, e in zip(xs, es)], (bits, window, wide, "converged")


@pytest.mark.parametrize("window", [3, 5])
def test_paillier_ops_under_every_window_and_shape(window):
    pk, sk = unifl.keygen(1024)
    n = pk.material.n
    msgs = [0, 1, n - 1] + [secrets.randbelow(n) for _ in range(5)]
    for lanes in ("normal", "wide"):
        be = GpuHostBackend(threads=2, window=window, lanes=lanes)
        ref = GpuHostBackend(threads=2)
        Ln = pk.material.n_ctx.num_limbs
        r = _rows([secrets.randbelow(n - 1) + 1 for _ in msgs], Ln)
        m = _rows(msgs, Ln)
        assert np.array_equal(be.op_paillier_encrypt(pk.material, m, r),
                              ref.op_paillier_encrypt(pk.material, m, r))
        yp = _rows([secrets.randbelow(sk.material.p) for _ in msgs], sk.material.p_limbs)
        yq = _rows([secrets.randbelow(sk.material.q) for _ in msgs], sk.material.q_limbs)
        owner = be.op_paillier_encrypt_owner(sk.material, m, yp, yq)
        assert np.array_equal(owner, ref.op_paillier_encrypt_owner(sk.material, m, yp, yq))
        assert from_limbs(be.op_paillier_decrypt(sk.material, owner)) == msgs


def test_a_window_or_shape_outside_the_kernels_is_refused():
    m = (1 << 127) - 1
    ctx = mont_context(m)
    key = keys.ctx_blob(ctx)
    x = _rows([3], ctx.num_limbs)
    for w in (0, 2, 6):
        with pytest.raises(ValueError, match="window"):
            _gpu_host.exp(key, x, x, 1, True, 1, group=True, window=w)
    with pytest.raises(ValueError, match="wide"):
        _gpu_host.exp(key, x, x, 1, True, 1, group=False, wide=True)
    big = mont_context((1 << 6000) + 1)
    with pytest.raises(ValueError, match="no wide shape"):
        _gpu_host.exp(keys.ctx_blob(big), _rows([3], big.num_limbs), _rows([5], 1), 1, True, 1,
                      group=True, wide=True)
    with pytest.raises(ValueError, match="window"):
        GpuHostBackend(window=6)
    with pytest.raises(ValueError, match="lanes"):
        GpuHostBackend(lanes="wider")


def _longest_chain(plan: np.ndarray) -> int:
    """MontMults on the longest path of a one-launch grouped product: a chunk's own rows, then, for
    the last chunk of its group to finish, the join of the group's partials."""
    rows = plan[:, 2] - plan[:, 1]
    join = np.where(plan[:, 4] > 1, plan[:, 4], 0)
    return int((rows + join).max())


@pytest.mark.parametrize("counts", [[24_000], [100_000, 3, 0, 5_000], [1] * 50, [9, 0, 64]])
@pytest.mark.parametrize("fill", [1, 3, 40])
def test_group_plan_keeps_each_join_short(counts, fill):
    """However small the fill chunk (a device's worth of groups over a small batch gives one row
    per chunk), no group's chain is longer than its rows cut at the balanced size allow:
    max(fill, ceil(sqrt(n))) rows, then ceil(n / that) partials."""
    groups = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    groups = groups[np.random.default_rng(7).permutation(len(groups))]
    order, plan = group_plan(groups, len(counts), chunk=fill)
    assert sorted(order.tolist()) == list(range(len(groups)))
    bound = 0
    for n in counts:
        c = max(fill, balanced_chunk(n))
        bound = max(bound, min(c, n) + (-(-n // c) if n > c else 0))
    assert _longest_chain(plan) == bound
    # one group of 24,000 rows: the join is short (2·155), not the 8,000 partials of fill 3
    if counts == [24_000] and fill == 3:
        assert bound <= 2 * 155


def test_balanced_chunk_minimises_the_chain():
    for rows in (1, 2, 10, 24_000, 10**6):
        for cost in (1.0, 47.0, 4000.0):
            c = balanced_chunk(rows, cost)

            def chain(k: int) -> float:
                return k * cost + -(-rows // k)
            best = min(chain(k) for k in range(1, min(rows, 5000) + 1))
            assert chain(c) <= best * 1.01 + cost + 1, (rows, cost, c)


def test_exp_cost_counts_the_windows():
    e = np.zeros((3, 2), np.uint64)
    assert exp_cost(e, 4) == 14                 # the table alone
    e[1, 0] = (1 << 25) - 1
    assert exp_cost(e, 4) == 14 + 25 + 7
    e[2, 1] = 1                                 # bit 64 set: 65 bits
    assert exp_cost(e, 5) == 30 + 65 + 13


def test_multi_exp_parts_are_balanced():
    """A one-row multi-exponentiation over 48,000 columns on a device of 8,192 groups: parts of
    balanced_chunk columns (their chain about 2·sqrt(N·cost)), not the fill's 6 columns and 8,000
    partials."""
    be = GpuHostBackend(threads=1)
    be.engine.parallel_groups = 8192
    cost = 14 + 25 + 7
    c = be._joined_chunk(48_000, 48_000, cost)
    assert c == balanced_chunk(48_000, cost) > be._chunk(48_000)
    assert c * cost + -(-48_000 // c) < 1.05 * 2 * (48_000 * cost) ** 0.5
    assert be._joined_chunk(48_000 * 100, 48_000, cost) == be._chunk(48_000 * 100)


def test_prod_groups_one_large_group_matches_python():
    """One group of 43 rows on the harness's 8 groups: chunks of 7 (balanced) rather than 6
    (fill), so the join and a short last chunk both run."""
    be = GpuHostBackend(threads=2)
    m = secrets.randbits(1024) | (1 << 1023) | 1
    ctx = mont_context(m)
    vals = [secrets.randbelow(m) for _ in range(40)] + [m - 1, 1, m - 2]
    _, plan = group_plan(np.zeros(len(vals), np.int64), 1, be._chunk(len(vals)))
    assert (plan[:, 2] - plan[:, 1]).tolist() == [7] * 6 + [1]
    got = from_limbs(be.op_mont_prod_groups(ctx, _rows([_mont(v, ctx) for v in vals],
                                                       ctx.num_limbs),
                                            np.zeros(len(vals), np.int64), 1))
    acc = 1
    for v in vals:
        acc = acc * v % m
    assert got == [_mont(acc, ctx)]

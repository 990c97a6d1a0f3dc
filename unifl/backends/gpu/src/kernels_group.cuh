// UniFL gpu backend: the cooperative kernel bodies (one instance per group of TPI threads, numbers
// in registers; arithmetic in bn_group.cuh).  Each body is a template over the lane policy G and
// the words per lane LPT; the CUDA wrappers (kernels.cu) instantiate it with WarpLanes, the
// host harness (gpu_host.cpp) with HostLanes, and both call it once per instance index i.
//
// Key blobs, layouts and results are those of the one-thread bodies (kernels.cuh): the same ops,
// bit for bit.  Besides them, the ops that used to be composed with host steps are bodies here:
// grouped products (histograms), batch inversion, DJN fixed-base encryption from a device-resident
// comb table (public and key-owner), and a multi-exponentiation whose reduction over the columns
// finishes in the same launch (the last group of a row to arrive multiplies the row's partials).
//
// Size classes (Shape<LMAX>): the capacity in 64-bit limbs, as kernels.cuh, held as TPI lanes of
// LPT 32-bit words (TPI·LPT = 2·LMAX).  LPT = 8 where TPI can stay at or below 16 (fewer shuffles
// per product), LPT = 6 for the 48- and 96-limb classes.  The CRT bodies (key-owner encryption,
// decryption) run in the class of 4·max(Lp, Lq) limbs: each half group (TPI/2 lanes) holds one
// CRT half's numbers (p², q², and the (x − 1)·p^-1 exactness product of 4·Lp words), the full
// group the n-size results.
#pragma once

#include "bn_group.cuh"
#include "kernels.cuh"

namespace unifl_gpu {
namespace coop {

template <int LMAX, bool kWide = false>
struct Shape;
template <>
struct Shape<16> {
    static constexpr int TPI = 4, LPT = 8;
};  // up to 1024 bits
template <>
struct Shape<32> {
    static constexpr int TPI = 8, LPT = 8;
};  // 2048
template <>
struct Shape<48> {
    static constexpr int TPI = 16, LPT = 6;
};  // 3072
template <>
struct Shape<64> {
    static constexpr int TPI = 16, LPT = 8;
};  // 4096
template <>
struct Shape<96> {
    static constexpr int TPI = 32, LPT = 6;
};  // 6144
template <>
struct Shape<128> {
    static constexpr int TPI = 32, LPT = 8;
};  // 8192
// The wide shapes: twice the threads per instance (half the words each, a lower latency per
// instance) for the batches too small to fill the device; the classes whose TPI is under 32.  The
// 48-limb class takes the 64-limb class's wide shape (LPT must stay even: whole 64-bit limbs).
template <>
struct Shape<16, true> {
    static constexpr int TPI = 8, LPT = 4;
};
template <>
struct Shape<32, true> {
    static constexpr int TPI = 16, LPT = 4;
};
template <>
struct Shape<48, true> {
    static constexpr int TPI = 32, LPT = 4;
};
template <>
struct Shape<64, true> {
    static constexpr int TPI = 32, LPT = 4;
};

// whether a class has a wide shape
UNIFL_HD constexpr bool has_wide_shape(int lmax) {
    return lmax == 16 || lmax == 32 || lmax == 48 || lmax == 64;
}

// The class of the CRT bodies for a key with primes of Lp, Lq limbs (0: none fits).
UNIFL_HD int crt_lmax(int Lp, int Lq) { return lmax_class(4 * (Lp > Lq ? Lp : Lq)); }

inline int owner_group_lmax(const u64 *blob) {
    const OwnerKey k = parse_owner(blob);
    const int c = crt_lmax(k.Lp, k.Lq);
    if (!c || k.n2.L > c || k.p2.L > c / 2 || k.q2.L > c / 2 || k.p2.L > k.q2.L) return 0;
    return c;
}

inline int priv_group_lmax(const u64 *blob) {
    const PrivKey k = parse_priv(blob);
    const int c = crt_lmax(k.p.L, k.q.L);
    if (!c || k.Ln > c || k.p2.L > c / 2 || k.q2.L > c / 2) return 0;
    return c;
}

// The context of CRT half s (0: p's, 1: q's), copied: a reference to one of two members picked at
// run time takes the key struct's address and puts it in local memory (ptxas: a stack frame).
UNIFL_HD ModCtx either(int s, const ModCtx &p, const ModCtx &q) {
    ModCtx c;
    c.m = s ? q.m : p.m;
    c.r1 = s ? q.r1 : p.r1;
    c.r2 = s ? q.r2 : p.r2;
    c.n0inv = s ? q.n0inv : p.n0inv;
    c.L = s ? q.L : p.L;
    return c;
}

// a per-lane value that is 1 on the group's lane 0, else 0 (adds 1 to a number through add_in)
template <class G>
UNIFL_HD typename G::D one_at_lane0() {
    return widen(sel(G::lane() == 0u, typename G::W(1u), typename G::W(0u)));
}

// ------------------------------------------------------------------------------ base ops
template <class G, int LPT>
UNIFL_HD void gbody_mul(long long i, const u64 *key, u64 *out, Lay lo, const u64 *a, Lay la,
                        const u64 *b, Lay lb, int mode) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    const Mod<G, LPT> md = make_mod<G, LPT>(k);
    Num<G, LPT> x, y;
    load<G, LPT>(x, a, la, i, k.L);
    load<G, LPT>(y, b, lb, i, k.L);
    // ModMul is a MontMult by b, then one by R² (to_mont): one copy of the MontMult code, run once
    // or twice
    for (int pass = 0; pass < (mode == kModMul ? 2 : 1); ++pass) {
        if (pass) load_const<G, LPT>(y, k.r2, k.L);
        mont_mul<G, LPT>(x, x, y, md);
    }
    store<G, LPT>(out, lo, i, k.L, x);
}

template <class G, int LPT>
UNIFL_HD void gbody_exp(long long i, const u64 *key, u32 *tab, int win, u64 *out, Lay lo,
                        const u64 *base, Lay lb, const u64 *exps, int Le, int e_shared, int mode) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    const Mod<G, LPT> md = make_mod<G, LPT>(k);
    Num<G, LPT> x;
    load<G, LPT>(x, base, lb, i, k.L);
    if (mode == kModExp) to_mont<G, LPT>(x, x, md);
    const u64 *e = exps + (e_shared ? 0 : i * (long long)Le);
    // one exponent per instance and a converged warp: every group runs the warp's longest digit
    // schedule and multiplies at every digit, so no group branches apart from the others
    const bool per_instance = G::kConverged && !e_shared;
    const int nd = per_instance ? G::warp_max(exp_digits(e, Le, win)) : exp_digits(e, Le, win);
    mont_exp<G, LPT>(x, x, e, Le, nd, per_instance, md, tab, win);
    if (mode == kModExp) from_mont<G, LPT>(x, x, md);
    store<G, LPT>(out, lo, i, k.L, x);
}

// ------------------------------------------------------------------------------ Paillier helpers
// g = (1 + m_i·n)·R mod n² (Montgomery form) for m_i < n
template <class G, int LPT>
UNIFL_HD void paillier_g(Num<G, LPT> &g, const u64 *m, const Lay &lay_m, long long i, const u64 *n,
                         int Ln, const Mod<G, LPT> &n2) {
    Num<G, LPT> v, nn;
    load<G, LPT>(v, m, lay_m, i, Ln);
    load_const<G, LPT>(nn, n, Ln);
    mul_low<G, LPT>(g, v, 2 * Ln, nn, n2.n32);  // m·n < n²
    add_in<G, LPT>(g, one_at_lane0<G>());       // + 1 < n²
    to_mont<G, LPT>(g, g, n2);
}

// Key-owner finish: xh holds x_p (plain, < p²) in half 0 and x_q (< q²) in half 1.
//   t = (x_q − x_p)·(p²)^-1 mod q²,  x = x_p + p²·t < n²,  c̄ = (1 + m·n)·x·R mod n².
template <class G, int LPT>
UNIFL_HD void owner_finish(long long i, const OwnerKey &k, const Num<G, LPT> &xh, u64 *out,
                           const Lay &lay_2, const u64 *m, const Lay &lay_m) {
    typedef typename G::Half H;
    constexpr int half = G::TPI / 2;
    Num<G, LPT> xp_up, tq = xh;
    UNIFL_UNROLL
    for (int w = 0; w < LPT; ++w) xp_up.w[w] = G::up(xh.w[w], half);  // x_p beside x_q
    G::halves([&](H, int s) {
        if (!s) return;
        const Mod<H, LPT> mq = make_mod<H, LPT>(k.q2);
        Num<H, LPT> xq = to_half<G, LPT>(xh, 1), xp = to_half<G, LPT>(xp_up, 1), j;
        mod_sub<H, LPT>(xq, xq, xp, mq);
        load_const<H, LPT>(j, k.psqinv, k.q2.L);
        mont_mul<H, LPT>(xq, xq, j, mq);  // (x_q − x_p)·(p²)^-1 mod q², plain
        from_half<G, LPT>(tq, xq, 1);
    });
    const Mod<G, LPT> n2 = make_mod<G, LPT>(k.n2);
    Num<G, LPT> t, xp = xh, x, g;
    UNIFL_UNROLL
    for (int w = 0; w < LPT; ++w) t.w[w] = G::down(tq.w[w], half);  // t to the lower lanes
    keep_lanes_below<G, LPT>(xp, half);
    load_const<G, LPT>(g, k.p2.m, k.p2.L);
    mul_low<G, LPT>(x, g, 2 * k.p2.L, t, n2.n32);  // p²·t, exact (< n²)
    add<G, LPT>(x, x, xp);
    paillier_g<G, LPT>(g, m, lay_m, i, k.n, k.Ln, n2);  // (1 + m·n)·R
    mont_mul<G, LPT>(g, g, x, n2);                      // (1 + m·n)·x
    to_mont<G, LPT>(g, g, n2);                          // (1 + m·n)·x·R
    store<G, LPT>(out, lay_2, i, k.n2.L, g);
}

// ------------------------------------------------------------------------------ Paillier
// c̄_i = (1 + m_i·n)·r_i^n·R mod n²  (UniFL Alg. 4)
template <class G, int LPT>
UNIFL_HD void gbody_paillier_encrypt(long long i, const u64 *key, u32 *tab, int win, u64 *out,
                                     Lay lay_2, const u64 *m, Lay lay_m, const u64 *r, Lay lay_r) {
    const PubKey k = parse_pub(key);
    const Mod<G, LPT> n2 = make_mod<G, LPT>(k.n2);
    Num<G, LPT> v, g;
    load<G, LPT>(v, r, lay_r, i, k.Ln);
    to_mont<G, LPT>(v, v, n2);
    mont_exp<G, LPT>(v, v, k.n, k.Ln, exp_digits(k.n, k.Ln, win), false, n2, tab, win);  // r^n·R
    paillier_g<G, LPT>(g, m, lay_m, i, k.n, k.Ln, n2);
    mont_mul<G, LPT>(g, g, v, n2);
    store<G, LPT>(out, lay_2, i, k.n2.L, g);
}

// Key-owner encryption with the CRT: the half groups raise y_p^p mod p² and y_q^q mod q² in step
// (same digit count, every digit multiplies), then owner_finish.
template <class G, int LPT>
UNIFL_HD void gbody_paillier_encrypt_owner(long long i, const u64 *key, u32 *tab, int win, u64 *out,
                                           Lay lay_2, const u64 *m, Lay lay_m, const u64 *yp,
                                           Lay lay_p, const u64 *yq, Lay lay_q) {
    typedef typename G::Half H;
    const OwnerKey k = parse_owner(key);
    const int ndp = exp_digits(k.p, k.Lp, win), ndq = exp_digits(k.q, k.Lq, win);
    const int nd = ndp > ndq ? ndp : ndq;
    Num<G, LPT> xh;
    G::halves([&](H, int s) {
        const Mod<H, LPT> md = make_mod<H, LPT>(either(s, k.p2, k.q2));
        Num<H, LPT> x;
        if (s) load<H, LPT>(x, yq, lay_q, i, k.Lq);
        else load<H, LPT>(x, yp, lay_p, i, k.Lp);
        to_mont<H, LPT>(x, x, md);
        mont_exp<H, LPT>(x, x, s ? k.q : k.p, s ? k.Lq : k.Lp, nd, true, md,
                         tab + s * table_words<H, LPT>(win), win);
        from_mont<H, LPT>(x, x, md);
        from_half<G, LPT>(xh, x, s);
    });
    owner_finish<G, LPT>(i, k, xh, out, lay_2, m, lay_m);
}

// CRT decryption (same result and sentinel as body_paillier_decrypt).  Each half group: c·Rs² mod
// s² by a wide reduction over chunks of c, x = c^(s−1) mod s², the exactness check of (x − 1)/s
// as y = (x − 1)·s^-1 mod 2^(64·Ls) with y·s == x − 1, and y·h_s; then the full group joins them.
template <class G, int LPT>
UNIFL_HD void gbody_paillier_decrypt(long long i, const u64 *key, u32 *tab, int win, u64 *out,
                                     Lay lay_n, const u64 *c, Lay lay_2) {
    typedef typename G::Half H;
    constexpr int half = G::TPI / 2;
    const PrivKey k = parse_priv(key);
    const int ndp = exp_digits(k.pm1, k.Lep, win), ndq = exp_digits(k.qm1, k.Leq, win);
    const int nd = ndp > ndq ? ndp : ndq;
    Num<G, LPT> res, unit;
    G::halves([&](H, int s) {
        const ModCtx sqc = either(s, k.p2, k.q2), sc = either(s, k.p, k.q);
        const Mod<H, LPT> msq = make_mod<H, LPT>(sqc);
        const int K = s ? k.Kq : k.Kp;
        const u64 *Wc = s ? k.Wq : k.Wp;
        Num<H, LPT> x, ch, w;
        set_u32<H, LPT>(x, 0u);
        for (int j = 0; j < K; ++j) {  // c·Rs² mod s² = Σ_j MontMult(chunk_j(c), W_j)
            const int left = k.L2 - j * sqc.L;
            load<H, LPT>(ch, c, lay_2, i, left < sqc.L ? left : sqc.L, j * sqc.L);
            load_const<H, LPT>(w, Wc + (long long)j * sqc.L, sqc.L);
            mont_mul<H, LPT>(ch, ch, w, msq);
            mod_add<H, LPT>(x, x, ch, msq);
        }
        mont_exp<H, LPT>(x, x, s ? k.qm1 : k.pm1, s ? k.Leq : k.Lep, nd, true, msq,
                         tab + s * table_words<H, LPT>(win), win);
        from_mont<H, LPT>(x, x, msq);  // c^(s−1) mod s², ≡ 1 mod s for a unit
        const bool nonzero = !equal_u32<H, LPT>(x, 0u);
        Num<H, LPT> y, z;
        set_u32<H, LPT>(w, 1u);
        sub<H, LPT>(x, x, w);  // x − 1
        load_const<H, LPT>(w, s ? k.qinv_w : k.pinv, sc.L);
        mul_low<H, LPT>(y, x, msq.n32, w, 2 * sc.L);  // (x − 1)·s^-1 mod 2^(64·Ls)
        load_const<H, LPT>(w, sc.m, sc.L);
        mul_low<H, LPT>(z, y, 2 * sc.L, w, LPT * H::TPI);  // y·s, the full product
        const bool exact = equal<H, LPT>(z, x);
        const Mod<H, LPT> ms = make_mod<H, LPT>(sc);
        load_const<H, LPT>(w, s ? k.hqR : k.hpR2, sc.L);
        mont_mul<H, LPT>(y, y, w, ms);  // m_p·Rp (half 0), m_q (half 1)
        from_half<G, LPT>(res, y, s);
        set_u32<H, LPT>(z, nonzero && exact ? 1u : 0u);
        from_half<G, LPT>(unit, z, s);
    });
    Num<G, LPT> mq, h;
    UNIFL_UNROLL
    for (int w = 0; w < LPT; ++w) mq.w[w] = G::down(res.w[w], half);  // m_q beside m_p
    h = res;
    G::halves([&](H, int s) {
        if (s) return;
        const Mod<H, LPT> mp = make_mod<H, LPT>(k.p);
        Num<H, LPT> mpv = to_half<G, LPT>(res, 0), q = to_half<G, LPT>(mq, 0), t, ch, w;
        set_u32<H, LPT>(t, 0u);
        for (int j = 0; j < k.Kpq; ++j) {  // m_q·Rp mod p
            shift_down_words<H, LPT>(ch, q, j * 2 * k.p.L);
            keep_words_below<H, LPT>(ch, 2 * k.p.L);
            load_const<H, LPT>(w, k.Wpq + (long long)j * k.p.L, k.p.L);
            mont_mul<H, LPT>(ch, ch, w, mp);
            mod_add<H, LPT>(t, t, ch, mp);
        }
        mod_sub<H, LPT>(t, mpv, t, mp);
        load_const<H, LPT>(w, k.qinv_p, k.p.L);
        mont_mul<H, LPT>(t, t, w, mp);  // (m_p − m_q)·q^-1 mod p, plain
        from_half<G, LPT>(h, t, 0);
    });
    keep_lanes_below<G, LPT>(h, half);
    Num<G, LPT> q, mm;
    load_const<G, LPT>(q, k.qv, k.q.L);
    mul_low<G, LPT>(mm, h, 2 * k.p.L, q, LPT * G::TPI);  // q·h < n
    add<G, LPT>(mm, mm, mq);                             // + m_q
    const bool ok = G::bcast(unit.w[0], 0) && G::bcast(unit.w[0], half);
    if (!ok) {  // the all-ones sentinel row (see body_paillier_decrypt)
        UNIFL_UNROLL
        for (int w = 0; w < LPT; ++w) mm.w[w] = 0xffffffffu;
    }
    store<G, LPT>(out, lay_n, i, k.Ln, mm);
}

// ------------------------------------------------------------------------------ one-launch reductions
// A part's product `acc` of output row `row`: written there when it is the only part; else kept in
// scratch slot `slot`, and the last of the row's `parts` parts to arrive (slots first..first+parts)
// multiplies them all into the row.  The partials are read past L1 (gather_cg): other groups of
// this launch wrote them.
template <class G, int LPT>
UNIFL_HD void join_parts(Num<G, LPT> &acc, u64 *out, const Lay &lo, long long row, u64 *scratch,
                         long long slot, long long first, long long parts, unsigned int *counter,
                         const Mod<G, LPT> &md) {
    const int L = md.ctx.L;
    if (parts == 1) {
        store<G, LPT>(out, lo, row, L, acc);
        return;
    }
    const Lay ls{L, 1};
    store<G, LPT>(scratch, ls, slot, L, acc);
    if (G::arrive(counter) != (u32)(parts - 1)) return;
    Num<G, LPT> x;
    mont_one<G, LPT>(acc, md);
    for (long long q = 0; q < parts; ++q) {
        load_cg<G, LPT>(x, scratch, ls, first + q, L);
        mont_mul<G, LPT>(acc, acc, x, md);
    }
    store<G, LPT>(out, lo, row, L, acc);
}

// mont_multi_exp (UniFL Alg. 5) in one launch: instance = (row kk, part) with P parts per row of
// `chunk` columns; it multiplies base_col^e_(kk,col) over its columns, and the last part of a row
// to arrive multiplies the row's P partials (scratch: K·P rows of L limbs, element-major; counters:
// K zeros before the launch).  exps: (K, N, Le) element-major.
template <class G, int LPT>
UNIFL_HD void gbody_multi_exp(long long inst, const u64 *key, u32 *tab, int win, u64 *out, Lay lo,
                              const u64 *bases, Lay lb, const u64 *exps, int Le, long long N,
                              long long P, long long chunk, u64 *scratch, unsigned int *counters) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    const Mod<G, LPT> md = make_mod<G, LPT>(k);
    const long long row = inst / P, part = inst % P;
    const long long c0 = part * chunk, c1 = c0 + chunk < N ? c0 + chunk : N;
    Num<G, LPT> acc, x;
    mont_one<G, LPT>(acc, md);
    for (long long col = c0; col < c1; ++col) {
        load<G, LPT>(x, bases, lb, col, k.L);
        const u64 *e = exps + (row * N + col) * Le;
        mont_exp<G, LPT>(x, x, e, Le, exp_digits(e, Le, win), false, md, tab, win);
        mont_mul<G, LPT>(acc, acc, x, md);
    }
    join_parts<G, LPT>(acc, out, lo, row, scratch, inst, row * P, P, counters + row, md);
}

// mont_prod_groups in one launch.  plan: one row of 5 int64 per instance (a chunk of one group's
// rows): [group, begin, end, first chunk of the group, chunks of the group]; `order` lists the
// input rows group by group (begin/end index it).  An empty group has one empty chunk (R mod m).
// The last chunk of a group to arrive multiplies the group's partials (scratch, counters as in
// gbody_multi_exp).
template <class G, int LPT>
UNIFL_HD void gbody_prod_groups(long long inst, const u64 *key, u64 *out, Lay lo, const u64 *a,
                                Lay la, const long long *order, const long long *plan, u64 *scratch,
                                unsigned int *counters) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    const Mod<G, LPT> md = make_mod<G, LPT>(k);
    const long long *pl = plan + inst * 5;
    const long long grp = pl[0], b = pl[1], e = pl[2], first = pl[3], parts = pl[4];
    Num<G, LPT> acc, x;
    mont_one<G, LPT>(acc, md);
    for (long long j = b; j < e; ++j) {
        load<G, LPT>(x, a, la, order[j], k.L);
        mont_mul<G, LPT>(acc, acc, x, md);
    }
    join_parts<G, LPT>(acc, out, lo, grp, scratch, inst, first, parts, counters + grp, md);
}

// ---- inversion
template <class G, int LPT>
UNIFL_HD bool is_even(const Num<G, LPT> &x) {
    return (G::bcast(x.w[0], 0) & 1u) == 0;
}

// x = (x + top·2^(32·C)) / 2 for a uniform top bit
template <class G, int LPT>
UNIFL_HD void shr1(Num<G, LPT> &x, u32 top) {
    const typename G::W next = G::down(x.w[0], 1);
    const typename G::W topw = sel(G::lane() == (u32)(G::TPI - 1), typename G::W(top), next);
    UNIFL_UNROLL
    for (int w = 0; w < LPT - 1; ++w) x.w[w] = (x.w[w] >> 1) | (x.w[w + 1] << 31);
    x.w[LPT - 1] = (x.w[LPT - 1] >> 1) | (topw << 31);
}

// x = x/2 mod m (m odd, x < m)
template <class G, int LPT>
UNIFL_HD void half_mod(Num<G, LPT> &x, const Mod<G, LPT> &md) {
    u32 c = 0;
    if (!is_even<G, LPT>(x)) c = add<G, LPT>(x, x, md.m);
    shr1<G, LPT>(x, c);
}

// r = x^-1 mod m for a plain x < m (m odd) by the binary extended Euclid: u = x, v = m with
// x1·x ≡ u, x2·x ≡ v (mod m); false when gcd(x, m) != 1.  Every decision is uniform in the group.
template <class G, int LPT>
UNIFL_HD bool mod_inverse(Num<G, LPT> &r, const Num<G, LPT> &x, const Mod<G, LPT> &md) {
    Num<G, LPT> u = x, v = md.m, x1, x2, t;
    set_u32<G, LPT>(x1, 1u);
    set_u32<G, LPT>(x2, 0u);
    while (!equal_u32<G, LPT>(u, 1u) && !equal_u32<G, LPT>(v, 1u)) {
        if (equal_u32<G, LPT>(u, 0u) || equal_u32<G, LPT>(v, 0u)) return false;  // gcd = v or u > 1
        while (is_even<G, LPT>(u)) {
            shr1<G, LPT>(u, 0u);
            half_mod<G, LPT>(x1, md);
        }
        while (is_even<G, LPT>(v)) {
            shr1<G, LPT>(v, 0u);
            half_mod<G, LPT>(x2, md);
        }
        if (!sub<G, LPT>(t, u, v)) {
            u = t;
            mod_sub<G, LPT>(x1, x1, x2, md);
        } else {
            sub<G, LPT>(v, v, u);
            mod_sub<G, LPT>(x2, x2, x1, md);
        }
    }
    r = equal_u32<G, LPT>(u, 1u) ? x1 : x2;
    return true;
}

// Batch mont_inverse, one group per chunk of rows (Montgomery's trick): prefix products into out,
// one inversion of the chunk's product, then back-substitution -- 3 MontMults per row and one
// extended Euclid per chunk.  A chunk with a non-invertible row counts in *bad (its rows are
// then undefined; the host refuses the whole batch).
template <class G, int LPT>
UNIFL_HD void gbody_inverse(long long inst, const u64 *key, u64 *out, Lay lo, const u64 *a, Lay la,
                            long long n, long long chunk, unsigned int *bad) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    const Mod<G, LPT> md = make_mod<G, LPT>(k);
    const long long first = inst * chunk, last = (first + chunk < n ? first + chunk : n) - 1;
    Num<G, LPT> acc, x, inv;
    load<G, LPT>(acc, a, la, first, k.L);
    store<G, LPT>(out, lo, first, k.L, acc);
    for (long long j = first + 1; j <= last; ++j) {
        load<G, LPT>(x, a, la, j, k.L);
        mont_mul<G, LPT>(acc, acc, x, md);  // (x_first..x_j)·R
        store<G, LPT>(out, lo, j, k.L, acc);
    }
    from_mont<G, LPT>(acc, acc, md);
    if (!mod_inverse<G, LPT>(inv, acc, md)) {
        G::flag(bad);
        return;
    }
    to_mont<G, LPT>(inv, inv, md);  // (x_first..x_last)^-1·R
    for (long long j = last; j > first; --j) {
        load<G, LPT>(acc, out, lo, j - 1, k.L);  // this lane's own earlier stores
        load<G, LPT>(x, a, la, j, k.L);
        mont_mul<G, LPT>(acc, inv, acc, md);  // x_j^-1·R
        store<G, LPT>(out, lo, j, k.L, acc);
        mont_mul<G, LPT>(inv, inv, x, md);
    }
    store<G, LPT>(out, lo, first, k.L, inv);
}

// ------------------------------------------------------------------------------ DJN fixed base
// Π_j T[j][d_j − 1] over the w-bit digits d_j of a_i (La limbs), Montgomery form; T: nwin rows of
// (2^w − 1) entries of L limbs, element-major, resident in device memory.
template <class G, int LPT>
UNIFL_HD void comb_power(Num<G, LPT> &acc, const u64 *table, int w, int nwin, const u64 *a, int La,
                         const Mod<G, LPT> &md) {
    const int L = md.ctx.L;
    const Lay lt{L, 1};
    const long long per = (1LL << w) - 1;
    Num<G, LPT> t;
    mont_one<G, LPT>(acc, md);
    for (int j = 0; j < nwin; ++j) {
        const unsigned d = bits_at(a, La, j * w, w);
        if (!d) continue;
        load<G, LPT>(t, table, lt, j * per + d - 1, L);
        mont_mul<G, LPT>(acc, acc, t, md);
    }
}

// c̄_i = (1 + m_i·n)·hs^(a_i)·R mod n², hs^a from the comb table of n²
template <class G, int LPT>
UNIFL_HD void gbody_fixed_base(long long i, const u64 *key, const u64 *table, int w, int nwin,
                               u64 *out, Lay lay_2, const u64 *m, Lay lay_m, const u64 *a, int La) {
    const PubKey k = parse_pub(key);
    const Mod<G, LPT> n2 = make_mod<G, LPT>(k.n2);
    Num<G, LPT> h, g;
    comb_power<G, LPT>(h, table, w, nwin, a + i * (long long)La, La, n2);
    paillier_g<G, LPT>(g, m, lay_m, i, k.n, k.Ln, n2);
    mont_mul<G, LPT>(g, g, h, n2);
    store<G, LPT>(out, lay_2, i, k.n2.L, g);
}

// the key owner's: bp^ap mod p² and bq^aq mod q² from the half-size comb tables (tp of bp, tq of
// bq), then owner_finish.  DJN: bp = bq = hs and ap = aq = a; the owner's generators: gp, gq with
// their own exponents kp, kq.
template <class G, int LPT>
UNIFL_HD void gbody_owner_fixed_base(long long i, const u64 *key, const u64 *tp, const u64 *tq,
                                     int w, int nwin, u64 *out, Lay lay_2, const u64 *m, Lay lay_m,
                                     const u64 *ap, const u64 *aq, int La) {
    typedef typename G::Half H;
    const OwnerKey k = parse_owner(key);
    Num<G, LPT> xh;
    G::halves([&](H, int s) {
        const Mod<H, LPT> md = make_mod<H, LPT>(either(s, k.p2, k.q2));
        Num<H, LPT> x;
        comb_power<H, LPT>(x, s ? tq : tp, w, nwin, (s ? aq : ap) + i * (long long)La, La, md);
        from_mont<H, LPT>(x, x, md);
        from_half<G, LPT>(xh, x, s);
    });
    owner_finish<G, LPT>(i, k, xh, out, lay_2, m, lay_m);
}

// Calls `body` with compile-time LM (the class) and its shape (TPI, LPT); false if the class is
// none.  UNIFL_WITH_WIDE_SHAPE: the wide shape, for the classes that have one.
#define UNIFL_SHAPE_CASE(lm, wide, ...) \
    case lm: { \
        constexpr int LM = lm; \
        constexpr int TPI = unifl_gpu::coop::Shape<lm, wide>::TPI; \
        constexpr int LPT = unifl_gpu::coop::Shape<lm, wide>::LPT; \
        (void)LM; \
        (void)TPI; \
        (void)LPT; \
        __VA_ARGS__; \
        return true; \
    }
#define UNIFL_WITH_SHAPE(lmax, ...) \
    [&]() -> bool { \
        switch (lmax) { \
            UNIFL_SHAPE_CASE(16, false, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(32, false, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(48, false, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(64, false, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(96, false, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(128, false, __VA_ARGS__) \
            default: return false; \
        } \
    }()
#define UNIFL_WITH_WIDE_SHAPE(lmax, ...) \
    [&]() -> bool { \
        switch (lmax) { \
            UNIFL_SHAPE_CASE(16, true, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(32, true, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(48, true, __VA_ARGS__) \
            UNIFL_SHAPE_CASE(64, true, __VA_ARGS__) \
            default: return false; \
        } \
    }()

}  // namespace coop
}  // namespace unifl_gpu

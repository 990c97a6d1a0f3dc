// UniFL gpu backend: the kernel bodies.  Each is a __host__ __device__ function of (instance index,
// pointers, sizes); the __global__ wrappers in kernels.cu only stage the key in shared memory,
// compute the index and call the body, and the host harness (gpu_host.cpp, built by g++) calls the
// same bodies for every index on the CPU.
//
// Layout.  One thread per instance.  A batch of big numbers is addressed through `Lay`: limb j of
// element i is at i*se + j*sl.  The CUDA runtime stages batches limb-major (se = 1, sl = N: limb j
// of 32 neighbouring threads is 32 consecutive words, one coalesced 256-byte access); the canonical
// host layout is element-major (se = L, sl = 1).  The host harness runs both.
//
// Key blobs.  Per-modulus / per-key constants travel as one uint64 array, uploaded once per key and
// copied into shared memory by each block (UniFL Alg. 4 lines 5-9).  Their layouts are defined once,
// in key_layout.h; the structs and parsers below are expanded from those tables.
//
// Size classes.  LMAX (array capacity) is a template parameter instantiated for 16, 32, 48, 64, 96
// and 128 limbs; a modulus of L limbs runs in the smallest class >= L (any 64..8192-bit modulus).
// Loops run to the real L, so R = 2^(64·L) exactly as in unifl.core.montgomery and results are bit-identical.
#pragma once

#include "bn_core.cuh"
#include "key_layout.h"

namespace unifl_gpu {

struct Lay {
    long long se;  // stride between elements
    long long sl;  // stride between limbs
};

UNIFL_HD void load(u64 *dst, const u64 *src, const Lay &y, long long i, int L) {
    for (int j = 0; j < L; ++j) dst[j] = src[i * y.se + j * y.sl];
}

UNIFL_HD void store(u64 *dst, const u64 *src, const Lay &y, long long i, int L) {
    for (int j = 0; j < L; ++j) dst[i * y.se + j * y.sl] = src[j];
}

// ------------------------------------------------------------------------------------ key blobs
// The key structs (a ModCtx per CTX field, an int per WORD, a pointer into the blob per LIMBS) and
// their parsers, expanded from the tables of key_layout.h.  A parser walks the blob with `at`; each
// CTX and WORD field is also a local of its name, so the tables' counts (`Kp * p2.L`) read as C++.
#define UNIFL_KEY_FIELD_CTX(name)          ModCtx name;
#define UNIFL_KEY_FIELD_WORD(name)         int name;
#define UNIFL_KEY_FIELD_VALUE(name)        u64 name;
#define UNIFL_KEY_FIELD_LIMBS(name, count) const u64 *name;
#define UNIFL_KEY_FIELDS(table) \
    table(UNIFL_KEY_FIELD_CTX, UNIFL_KEY_FIELD_WORD, UNIFL_KEY_FIELD_VALUE, UNIFL_KEY_FIELD_LIMBS)

#define UNIFL_KEY_PARSE_CTX(name) \
    k.name = parse_ctx(at); \
    const ModCtx &name = k.name; \
    (void)name;
#define UNIFL_KEY_PARSE_WORD(name) \
    k.name = (int)*at++; \
    const long long name = (long long)k.name; \
    (void)name;
#define UNIFL_KEY_PARSE_VALUE(name) k.name = *at++;
#define UNIFL_KEY_PARSE_LIMBS(name, count) \
    k.name = at; \
    at += (long long)(count);
#define UNIFL_KEY_PARSE(table) \
    table(UNIFL_KEY_PARSE_CTX, UNIFL_KEY_PARSE_WORD, UNIFL_KEY_PARSE_VALUE, UNIFL_KEY_PARSE_LIMBS)

// a modulus context (ModCtx, bn_core.cuh); `at` moves past it
UNIFL_HD ModCtx parse_ctx(const u64 *&at) {
    ModCtx k;
    UNIFL_KEY_PARSE(UNIFL_LAYOUT_MOD_CTX)
    return k;
}

struct PubKey {
    UNIFL_KEY_FIELDS(UNIFL_LAYOUT_PUB_KEY)
};
UNIFL_HD PubKey parse_pub(const u64 *at) {
    PubKey k;
    UNIFL_KEY_PARSE(UNIFL_LAYOUT_PUB_KEY)
    return k;
}

struct PrivKey {
    UNIFL_KEY_FIELDS(UNIFL_LAYOUT_PRIV_KEY)
};
UNIFL_HD PrivKey parse_priv(const u64 *at) {
    PrivKey k;
    UNIFL_KEY_PARSE(UNIFL_LAYOUT_PRIV_KEY)
    return k;
}

struct OwnerKey {
    UNIFL_KEY_FIELDS(UNIFL_LAYOUT_OWNER_KEY)
};
UNIFL_HD OwnerKey parse_owner(const u64 *at) {
    OwnerKey k;
    UNIFL_KEY_PARSE(UNIFL_LAYOUT_OWNER_KEY)
    return k;
}

// Largest limb count of any number in a key blob (the 8192-bit class).
constexpr int MAX_BLOB_LIMBS = 128;

// Smallest instantiated capacity >= L limbs (0 when L exceeds 8192 bits).
UNIFL_HD int lmax_class(int L) {
    return L <= 16    ? 16
           : L <= 32  ? 32
           : L <= 48  ? 48
           : L <= 64  ? 64
           : L <= 96  ? 96
           : L <= 128 ? 128
                      : 0;
}

// Capacity a key's bodies need: the widest number they hold in local arrays.
inline int ctx_lmax(const u64 *blob) { return lmax_class((int)blob[1]); }

inline int pub_lmax(const u64 *blob) { return lmax_class((int)blob[1]); }

inline int priv_lmax(const u64 *blob) {
    PrivKey k = parse_priv(blob);
    int L = k.p2.L;
    if (k.q2.L > L) L = k.q2.L;
    if (k.Ln > L) L = k.Ln;
    return lmax_class(L);
}

// The owner body's class is that of the half-size moduli p², q²; its full-size numbers (n², of at
// most Lp2 + Lq2 limbs) live in arrays of twice that.  0 when the sizes do not fit that scheme.
inline int owner_lmax(const u64 *blob) {
    OwnerKey k = parse_owner(blob);
    const int L = k.p2.L > k.q2.L ? k.p2.L : k.q2.L;
    const int c = lmax_class(L);
    if (!c || k.n2.L > 2 * c || k.Ln > k.n2.L || k.Lp > k.p2.L || k.Lq > k.q2.L || k.p2.L > k.q2.L)
        return 0;
    return c;
}

// Calls `body` with a compile-time LM equal to the runtime class `lmax`; returns false if none.
#define UNIFL_WITH_LMAX(lmax, ...) \
    [&]() -> bool { \
        switch (lmax) { \
            case 16: { \
                constexpr int LM = 16; \
                __VA_ARGS__; \
                return true; \
            } \
            case 32: { \
                constexpr int LM = 32; \
                __VA_ARGS__; \
                return true; \
            } \
            case 48: { \
                constexpr int LM = 48; \
                __VA_ARGS__; \
                return true; \
            } \
            case 64: { \
                constexpr int LM = 64; \
                __VA_ARGS__; \
                return true; \
            } \
            case 96: { \
                constexpr int LM = 96; \
                __VA_ARGS__; \
                return true; \
            } \
            case 128: { \
                constexpr int LM = 128; \
                __VA_ARGS__; \
                return true; \
            } \
            default: return false; \
        } \
    }()

// ------------------------------------------------------------------------------------ bodies
enum MulMode { kMontMul = 0, kModMul = 1 };
enum ExpMode { kMontExp = 0, kModExp = 1 };

// out_i = a_i·b_i·R^-1 mod m (kMontMul) or a_i·b_i mod m (kModMul: one more MontMult by R²).
// Each operand has its own layout (a shared row is Lay{0, 1}).
template <int LMAX>
UNIFL_HD void body_mul(long long i, const u64 *key, u64 *out, Lay lay_o, const u64 *a, Lay lay_a,
                       const u64 *b, Lay lay_b, int mode) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    u64 x[LMAX], y[LMAX];
    load(x, a, lay_a, i, k.L);
    load(y, b, lay_b, i, k.L);
    mm<LMAX>(x, x, y, k);
    if (mode == kModMul) to_mont<LMAX>(x, x, k);
    store(out, x, lay_o, i, k.L);
}

// dst_i = src_i, L limbs, from one layout to another (device-side transposes for fetches and uploads).
UNIFL_HD void body_relayout(long long i, int L, u64 *dst, Lay lay_d, const u64 *src, Lay lay_s) {
    for (int j = 0; j < L; ++j) dst[i * lay_d.se + j * lay_d.sl] = src[i * lay_s.se + j * lay_s.sl];
}

// kMontExp: out_i = x_i^e_i·R for x̄_i in the domain.  kModExp: out_i = x_i^e_i mod m, plain in and
// out (enters and leaves the domain once).  exps: element-major (N|1, Le); e_shared: one row for all.
template <int LMAX>
UNIFL_HD void body_exp(long long i, const u64 *key, u64 *out, Lay lay_o, const u64 *base, Lay lay_b,
                       const u64 *exps, int Le, int e_shared, int mode) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    u64 x[LMAX];
    load(x, base, lay_b, i, k.L);
    if (mode == kModExp) to_mont<LMAX>(x, x, k);
    mont_exp<LMAX>(x, x, exps + (e_shared ? 0 : i * (long long)Le), Le, k);
    if (mode == kModExp) from_mont<LMAX>(x, x, k);
    store(out, x, lay_o, i, k.L);
}

// Fused Paillier encryption (UniFL Alg. 4): c̄_i = (1 + m_i·n)·r_i^n·R mod n², Montgomery form.
// r and g = 1 + m·n enter the domain once each; the result stays in it (the SDK keeps ciphertexts
// in Montgomery form).  m (lay_m), r (lay_r): Ln limbs; out: L2 limbs (lay_2).
template <int LMAX>
UNIFL_HD void body_paillier_encrypt(long long i, const u64 *key, u64 *out, Lay lay_2, const u64 *m,
                                    Lay lay_m, const u64 *r, Lay lay_r) {
    const PubKey k = parse_pub(key);
    const int L2 = k.n2.L;
    u64 t[LMAX], g[LMAX], v[LMAX];
    set_zero(v, L2);
    load(v, r, lay_r, i, k.Ln);
    to_mont<LMAX>(v, v, k.n2);              // r̄ = r·R mod n²
    mont_exp<LMAX>(t, v, k.n, k.Ln, k.n2);  // r^n·R
    load(v, m, lay_m, i, k.Ln);
    mul_low(g, L2, v, k.Ln, k.n, k.Ln);  // m·n < n², fits L2 limbs
    for (int j = 0; j < L2; ++j) {       // + 1, m·n + 1 < n²
        if (++g[j] != 0) break;
    }
    to_mont<LMAX>(g, g, k.n2);
    mm<LMAX>(g, g, t, k.n2);  // (1 + m·n)·r^n·R
    store(out, g, lay_2, i, L2);
}

// Key-owner encryption with the CRT, one instance per element:
//   x_p = y_p^p mod p², x_q = y_q^q mod q²            (half-size moduli, exponents of n/2 bits)
//   x   = x_p + p²·((x_q − x_p)·(p²)^-1 mod q²)       (Garner; x_p < p² < q² needs no reduction)
//   c̄   = (1 + m·n)·x·R mod n²                        (MontMult(g, x) = g·x·R^-1, then ·R³)
// m (Ln limbs, lay_m), yp (Lp, lay_p), yq (Lq, lay_q); out: L2 limbs (lay_2), Montgomery form as the
// SDK keeps ciphertexts.  LMAX is the class of p² and q² (the window tables of the two ModExps);
// n²-size numbers use 2·LMAX.  Not constant time (see bn_core.cuh): the exponentiation skips zero
// digits of p and q, the same for every lane, so there is no divergence but the time follows them.
template <int LMAX>
UNIFL_HD void body_paillier_encrypt_owner(long long i, const u64 *key, u64 *out, Lay lay_2,
                                          const u64 *m, Lay lay_m, const u64 *yp, Lay lay_p,
                                          const u64 *yq, Lay lay_q) {
    constexpr int W = 2 * LMAX;
    const OwnerKey k = parse_owner(key);
    const int Lp2 = k.p2.L, Lq2 = k.q2.L, L2 = k.n2.L;
    u64 xp[LMAX], xq[LMAX];
    set_zero(xp, Lp2);
    load(xp, yp, lay_p, i, k.Lp);
    to_mont<LMAX>(xp, xp, k.p2);
    mont_exp<LMAX>(xp, xp, k.p, k.Lp, k.p2);
    from_mont<LMAX>(xp, xp, k.p2);  // y_p^p mod p²
    set_zero(xq, Lq2);
    load(xq, yq, lay_q, i, k.Lq);
    to_mont<LMAX>(xq, xq, k.q2);
    mont_exp<LMAX>(xq, xq, k.q, k.Lq, k.q2);
    from_mont<LMAX>(xq, xq, k.q2);  // y_q^q mod q²
    {
        u64 t[LMAX];
        set_zero(t, Lq2);
        copy(t, xp, Lp2);
        mod_sub(xq, xq, t, k.q2.m, Lq2);   // x_q − x_p mod q²
        mm<LMAX>(xq, xq, k.psqinv, k.q2);  // ·(p²)^-1 mod q², plain
    }
    u64 x[W], g[W];
    mul_low(x, L2, k.p2.m, Lp2, xq, Lq2);  // p²·t < n²: exact in L2 limbs
    u64 carry = 0;
    for (int j = 0; j < L2; ++j) {  // + x_p, still < n²
        const u64 a = j < Lp2 ? xp[j] : 0;
        u64 s = x[j] + carry;
        const u64 c1 = (s < carry);
        s += a;
        carry = c1 | (s < a);
        x[j] = s;
    }
    {
        u64 v[W];
        load(v, m, lay_m, i, k.Ln);
        mul_low(g, L2, v, k.Ln, k.n, k.Ln);  // m·n < n²
    }
    for (int j = 0; j < L2; ++j) {  // + 1
        if (++g[j] != 0) break;
    }
    mm<W>(g, g, x, k.n2);     // g·x·R^-1
    mm<W>(g, g, k.r3, k.n2);  // g·x·R
    store(out, g, lay_2, i, L2);
}

// mont_multi_exp, step 1 (UniFL Alg. 5 lines 1-11): instance i = kk·N + col computes
// base_col^e_(kk,col)·R into scratch element i.  exps: (K, N, Le) element-major.
template <int LMAX>
UNIFL_HD void body_multi_exp_powers(long long i, const u64 *key, u64 *scratch, Lay lay_s,
                                    const u64 *bases, Lay lay_b, const u64 *exps, int Le,
                                    long long N) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    u64 x[LMAX];
    load(x, bases, lay_b, i % N, k.L);
    mont_exp<LMAX>(x, x, exps + i * (long long)Le, Le, k);
    store(scratch, x, lay_s, i, k.L);
}

// mont_multi_exp, step 2 (Alg. 5 lines 12-19, as a tree on the device): one halving round over every
// row kk of scratch (rows of N elements, first `cnt` live): element j < cnt − half of row kk becomes
// x_j·x_(j+half), half = ceil(cnt/2).  Instances: K·(cnt − half); log2(N) rounds leave the row
// product in element 0.
template <int LMAX>
UNIFL_HD void body_prod_round(long long i, const u64 *key, u64 *scratch, Lay lay_s, long long N,
                              long long cnt) {
    const u64 *p = key;
    const ModCtx k = parse_ctx(p);
    const long long half = (cnt + 1) / 2, pairs = cnt - half;
    const long long row = i / pairs, j = i % pairs;
    u64 x[LMAX], y[LMAX];
    load(x, scratch, lay_s, row * N + j, k.L);
    load(y, scratch, lay_s, row * N + j + half, k.L);
    mm<LMAX>(x, x, y, k);
    store(scratch, x, lay_s, row * N + j, k.L);
}

// One CRT half of decryption: res = L_s(c^(s−1) mod s²)·h_s mod s, where the caller's `hconst`
// chooses the output form (h·Rs² mod s: Montgomery form; h·Rs mod s: plain).  L_s(x) = (x − 1)/s is
// an exact division, done as a multiplication by s^-1 mod 2^(64·Ls).
// Returns false when c is not a unit modulo s: for a unit, Fermat gives x = c^(s−1) mod s² ≡ 1
// (mod s); otherwise (x = 0 included: c a multiple of s) L_s(x) would be a value that factors n.
// The check: y = (x − 1)·s^-1 mod 2^(64·Ls) times s must give back x − 1 over all 2·Ls limbs
// (exact iff s divides x − 1; 2·Ls <= LMAX since s² < 2^(64·sq.L) and the classes are even).
template <int LMAX, class Load>
UNIFL_HD bool crt_half(u64 *res, Load load_c, const ModCtx &sq, const ModCtx &s, int K,
                       const u64 *W, const u64 *e, int Le, const u64 *inv, const u64 *hconst) {
    u64 x[LMAX], y[LMAX];
    reduce_wide<LMAX>(x, load_c, K, W, sq);  // c·Rs² mod s²
    mont_exp<LMAX>(x, x, e, Le, sq);
    from_mont<LMAX>(x, x, sq);  // c^(s−1) mod s², ≡ 1 mod s for a unit
    u64 nonzero = 0;
    for (int j = 0; j < sq.L; ++j) nonzero |= x[j];
    for (int j = 0; j < sq.L; ++j) {  // − 1
        if (x[j]-- != 0) break;
    }
    mul_low(y, s.L, x, sq.L, inv, s.L);  // (x − 1)/s < s, when exact
    u64 diff = 0;
    {
        u64 z[LMAX];
        mul_low(z, 2 * s.L, y, s.L, s.m, s.L);  // y·s, the full product
        for (int j = 0; j < 2 * s.L; ++j) diff |= z[j] ^ (j < sq.L ? x[j] : 0);
    }
    mm<LMAX>(res, y, hconst, s);
    return nonzero != 0 && diff == 0;
}

// CRT decryption: m_i from c̄_i (Montgomery form mod n², L2 limbs, lay_2) into Ln limbs (lay_n):
// m = m_q + q·((m_p − m_q)·q^-1 mod p); the all-ones row for a c̄_i that is not a unit mod n².
template <int LMAX>
UNIFL_HD void body_paillier_decrypt(long long i, const u64 *key, u64 *out, Lay lay_n, const u64 *c,
                                    Lay lay_2) {
    const PrivKey k = parse_priv(key);
    const int L2 = k.L2;
    auto load_c = [&](int j) -> u64 { return j < L2 ? c[i * lay_2.se + j * lay_2.sl] : 0; };
    u64 mp[LMAX], mq[LMAX], t[LMAX], h[LMAX];
    bool unit =
        crt_half<LMAX>(mp, load_c, k.p2, k.p, k.Kp, k.Wp, k.pm1, k.Lep, k.pinv, k.hpR2);  // m_p·Rp
    unit = crt_half<LMAX>(mq, load_c, k.q2, k.q, k.Kq, k.Wq, k.qm1, k.Leq, k.qinv_w, k.hqR) &&
           unit;  // m_q
    const int Lq = k.q.L;
    auto load_mq = [&](int j) -> u64 { return j < Lq ? mq[j] : 0; };
    reduce_wide<LMAX>(t, load_mq, k.Kpq, k.Wpq, k.p);  // m_q·Rp mod p
    mod_sub(t, mp, t, k.p.m, k.p.L);
    mm<LMAX>(h, t, k.qinv_p, k.p);         // (m_p − m_q)·q^-1 mod p, plain
    mul_low(t, k.Ln, k.qv, Lq, h, k.p.L);  // q·h < n
    u64 carry = 0;
    for (int j = 0; j < k.Ln; ++j) {  // + m_q
        const u64 a = j < Lq ? mq[j] : 0;
        u64 s = t[j] + carry;
        const u64 c1 = (s < carry);
        s += a;
        carry = c1 | (s < a);
        t[j] = s;
    }
    // not a unit: the all-ones sentinel row (no plaintext m < n < 2^(64·Ln) equals it); the host
    // code that launched the kernel raises on it
    if (!unit)
        for (int j = 0; j < k.Ln; ++j) t[j] = ~u64(0);
    store(out, t, lay_n, i, k.Ln);
}

}  // namespace unifl_gpu

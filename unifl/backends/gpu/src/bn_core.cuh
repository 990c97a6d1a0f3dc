// UniFL gpu backend: big-number arithmetic on one instance, shared by the CUDA kernels and the host
// harness (the same text is compiled by nvcc for the device and by g++ for the CPU).
//
// Numbers are little-endian 64-bit limbs.  A function works on L limbs (the modulus' own limb count,
// so R = 2^(64·L) exactly as in unifl.core.montgomery) held in local arrays of a compile-time capacity LMAX
// (the instantiated size class, see kernels.cuh): loops run to the runtime L, arrays are sized LMAX.
//
// Math (Montgomery 1985; CIOS schedule of Koç, Acar and Kaliski 1996):
//   mont_mul(a, b) = a·b·R^-1 mod m      for a < R, b < m, m odd, n0inv = -m^-1 mod 2^64
// Every word step computes t + x·y + c < 2^128, so a 64x64->128 multiply and two carries suffice.
// Not constant-time (like CGBN and GMP's mpz): the secret-dependent parts of UniFL (decryption) run
// at the key owner's site on its own hardware.
#pragma once

#include <stdint.h>

#ifndef __CUDACC__
#define __host__
#define __device__
#define __forceinline__ inline
#endif

#define UNIFL_HD __host__ __device__ __forceinline__

namespace unifl_gpu {

typedef uint64_t u64;

// ------------------------------------------------------------------------------- word operations
UNIFL_HD u64 mul_hi(u64 a, u64 b) {
#ifdef __CUDA_ARCH__
    return __umul64hi(a, b);
#else
    return (u64)(((unsigned __int128)a * b) >> 64);
#endif
}

// (hi, lo) = t + x·y + c; never overflows 128 bits.
UNIFL_HD u64 mac(u64 t, u64 x, u64 y, u64 &c) {
    u64 lo = x * y;
    u64 hi = mul_hi(x, y);
    lo += t;
    hi += (lo < t);
    lo += c;
    hi += (lo < c);
    c = hi;
    return lo;
}

// ------------------------------------------------------------------------------ limb-array helpers
UNIFL_HD void set_zero(u64 *r, int L) {
    for (int j = 0; j < L; ++j) r[j] = 0;
}

UNIFL_HD void copy(u64 *r, const u64 *a, int L) {
    for (int j = 0; j < L; ++j) r[j] = a[j];
}

// a >= b on L limbs
UNIFL_HD bool geq(const u64 *a, const u64 *b, int L) {
    for (int j = L - 1; j >= 0; --j) {
        if (a[j] != b[j]) return a[j] > b[j];
    }
    return true;
}

// r = a - b on L limbs; returns the borrow out
UNIFL_HD u64 sub(u64 *r, const u64 *a, const u64 *b, int L) {
    u64 borrow = 0;
    for (int j = 0; j < L; ++j) {
        u64 x = a[j], y = b[j];
        u64 d = x - y;
        u64 b1 = (x < y);
        u64 d2 = d - borrow;
        u64 b2 = (d < borrow);
        r[j] = d2;
        borrow = b1 | b2;
    }
    return borrow;
}

// r = a + b on L limbs; returns the carry out
UNIFL_HD u64 add(u64 *r, const u64 *a, const u64 *b, int L) {
    u64 carry = 0;
    for (int j = 0; j < L; ++j) {
        u64 s = a[j] + carry;
        u64 c1 = (s < carry);
        u64 s2 = s + b[j];
        u64 c2 = (s2 < s);
        r[j] = s2;
        carry = c1 | c2;
    }
    return carry;
}

// r = (a + b) mod m for a, b < m
UNIFL_HD void mod_add(u64 *r, const u64 *a, const u64 *b, const u64 *m, int L) {
    u64 carry = add(r, a, b, L);
    if (carry || geq(r, m, L)) sub(r, r, m, L);
}

// r = (a - b) mod m for a, b < m
UNIFL_HD void mod_sub(u64 *r, const u64 *a, const u64 *b, const u64 *m, int L) {
    if (sub(r, a, b, L)) add(r, r, m, L);
}

// r = low Lr limbs of a (La limbs) · b (Lb limbs); r must not alias a or b.
UNIFL_HD void mul_low(u64 *r, int Lr, const u64 *a, int La, const u64 *b, int Lb) {
    set_zero(r, Lr);
    for (int i = 0; i < La && i < Lr; ++i) {
        u64 c = 0;
        int j = 0;
        for (; j < Lb && i + j < Lr; ++j) r[i + j] = mac(r[i + j], a[i], b[j], c);
        for (int k = i + j; k < Lr && c; ++k) {  // carry into the limbs above
            u64 s = r[k] + c;
            c = (s < c);
            r[k] = s;
        }
    }
}

// --------------------------------------------------------------------------------- Montgomery
// r = a·b·R^-1 mod m (CIOS).  a < R, b < m.  r may alias a or b (written only at the end).
template <int LMAX>
UNIFL_HD void mont_mul(u64 *r, const u64 *a, const u64 *b, const u64 *m, u64 n0inv, int L) {
    u64 t[LMAX + 2];
    for (int j = 0; j < L + 2; ++j) t[j] = 0;
    for (int i = 0; i < L; ++i) {
        u64 c = 0;
        const u64 ai = a[i];
        for (int j = 0; j < L; ++j) t[j] = mac(t[j], ai, b[j], c);
        u64 s = t[L] + c;
        t[L + 1] = (s < c);
        t[L] = s;
        const u64 q = t[0] * n0inv;  // makes t + q·m divisible by 2^64
        c = 0;
        (void)mac(t[0], q, m[0], c);
        for (int j = 1; j < L; ++j) t[j - 1] = mac(t[j], q, m[j], c);
        s = t[L] + c;
        t[L - 1] = s;
        t[L] = t[L + 1] + (s < c);
    }
    // t < 2m: one conditional subtraction
    if (t[L] || geq(t, m, L)) {
        sub(r, t, m, L);
    } else {
        copy(r, t, L);
    }
}

// One modulus' constants as a key blob holds them (key_layout.h, UNIFL_LAYOUT_MOD_CTX): m, R mod m,
// R² mod m.
struct ModCtx {
    const u64 *m;
    const u64 *r1;  // R mod m: Montgomery form of 1
    const u64 *r2;  // R² mod m: MontMult(x, r2) = x·R enters the domain
    u64 n0inv;
    int L;
};

template <int LMAX>
UNIFL_HD void mm(u64 *r, const u64 *a, const u64 *b, const ModCtx &k) {
    mont_mul<LMAX>(r, a, b, k.m, k.n0inv, k.L);
}

template <int LMAX>
UNIFL_HD void to_mont(u64 *r, const u64 *a, const ModCtx &k) {
    mont_mul<LMAX>(r, a, k.r2, k.m, k.n0inv, k.L);
}

template <int LMAX>
UNIFL_HD void from_mont(u64 *r, const u64 *a, const ModCtx &k) {
    u64 one[LMAX];
    set_zero(one, k.L);
    one[0] = 1;
    mont_mul<LMAX>(r, a, one, k.m, k.n0inv, k.L);
}

// Fixed-window exponentiation in the Montgomery domain: r = x^e·R mod m for x̄ = x·R mod m.
// Window 4 (16-entry table): 64 is a multiple of 4, so no digit straddles two limbs, and every
// instance of a batch follows the same squaring schedule (no divergence on a GPU).
// e has Le limbs; e = 0 gives R mod m.
constexpr int kWindow = 4;

template <int LMAX>
UNIFL_HD void mont_exp(u64 *r, const u64 *xbar, const u64 *e, int Le, const ModCtx &k) {
    const int L = k.L;
    int top = Le - 1;
    while (top >= 0 && e[top] == 0) --top;
    if (top < 0) {
        copy(r, k.r1, L);
        return;
    }
    u64 table[1 << kWindow][LMAX];
    copy(table[0], k.r1, L);
    copy(table[1], xbar, L);
    for (int d = 2; d < (1 << kWindow); ++d) mm<LMAX>(table[d], table[d - 1], xbar, k);
    const int digits_per_limb = 64 / kWindow;
    int nd = (top + 1) * digits_per_limb;  // skip leading zero digits of the top limb
    while (nd > 1 && ((e[(nd - 1) / digits_per_limb] >> (((nd - 1) % digits_per_limb) * kWindow)) &
                      ((1u << kWindow) - 1)) == 0)
        --nd;
    u64 acc[LMAX];
    {
        const int d = nd - 1;
        const unsigned dig =
            (unsigned)(e[d / digits_per_limb] >> ((d % digits_per_limb) * kWindow)) &
            ((1u << kWindow) - 1);
        copy(acc, table[dig], L);
    }
    for (int d = nd - 2; d >= 0; --d) {
        for (int s = 0; s < kWindow; ++s) mm<LMAX>(acc, acc, acc, k);
        const unsigned dig =
            (unsigned)(e[d / digits_per_limb] >> ((d % digits_per_limb) * kWindow)) &
            ((1u << kWindow) - 1);
        if (dig) mm<LMAX>(acc, acc, table[dig], k);
    }
    copy(r, acc, L);
}

// Montgomery form (mod k.m) of a wide x of K·k.L limbs: Σ_j mont_mul(X_j, W_j) where X_j is the j-th
// L-limb chunk of x and W_j = R^(j+2)·F mod m, so the sum is x·R·F mod m (F folds in any factor, e.g.
// R'^-1 to leave another modulus' domain).  Each term: X_j < R, W_j < m, so it is < m.
// x is read through `load`, a callable (j, limb index) -> limb (0 beyond the number's length).
template <int LMAX, class Load>
UNIFL_HD void reduce_wide(u64 *r, Load load, int K, const u64 *W, const ModCtx &k) {
    const int L = k.L;
    u64 chunk[LMAX], term[LMAX];
    set_zero(r, L);
    for (int j = 0; j < K; ++j) {
        for (int l = 0; l < L; ++l) chunk[l] = load(j * L + l);
        mm<LMAX>(term, chunk, W + (long long)j * L, k);
        mod_add(r, r, term, k.m, L);
    }
}

}  // namespace unifl_gpu

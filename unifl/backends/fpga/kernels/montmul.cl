/* UniFL fpga backend: the BASE OP (MontMult) and the optional on-device ModExp engine, in OpenCL C 1.2.
 *
 * Size-generic in the CGBN style: compiled once per limb count with -DL=<limbs> (L 64-bit limbs,
 * R = 2^(64 L)).  Every kernel and helper name carries the suffix _L<limbs>, so one offline-compiled
 * FPGA binary can hold several sizes (see all_sizes.cl, the translation unit an offline compiler such
 * as aoc or v++ is given) and the host looks kernels up by name.
 *
 * Data layout: the canonical UniFL batch, N rows of L little-endian ulong limbs, row-major; the
 * modulus m (L limbs) and R mod m live in a constant buffer uploaded once per Montgomery context,
 * n0' = -m^-1 mod 2^64 is a scalar kernel argument.
 *
 * Processing elements: each work-item is one PE (UniFL Fig. 7) that loads its operands into private
 * memory (the DLU), runs word-serial CIOS Montgomery multiplication (FLASH Algorithm 1 with the usual
 * reordering: the outer loop over b's limbs, q = t_0 n0' computed once per outer iteration), and writes
 * the row back (the DSU).  A launch has `engines` work-items that stride over the batch, as a fixed
 * number of hardware engines would.
 *
 * Math: for 0 <= a, b < m < R, m odd, CIOS keeps t < 2m after every outer iteration, so one final
 * conditional subtraction gives a b R^-1 mod m exactly.
 */

#ifndef L
#error "build with -DL=<number of 64-bit limbs>"
#endif

#define UNIFL_CAT_(a, b) a##b
#define UNIFL_CAT(a, b) UNIFL_CAT_(a, b)
#define SFX(name) UNIFL_CAT(UNIFL_CAT(name, _L), L)

/* out = a b R^-1 mod m, all private arrays of L limbs (m held in registers / on-chip RAM by the PE,
 * as the constants of an engine are), n0 = -m^-1 mod 2^64.  Used by the kernels below and, alone
 * (-DUNIFL_MM_ONLY), as the emulation model of the RTL engine (rtl/ocl_lib). */
static void SFX(mm)(const ulong *a, const ulong *b, ulong *out, const ulong *m, ulong n0)
{
    ulong t[L + 2];
    for (int j = 0; j < L + 2; ++j) t[j] = 0;
    for (int i = 0; i < L; ++i) {
        /* t += a * b[i]: one 64x64 multiplier (Mul 1 of FLASH) */
        const ulong bi = b[i];
        ulong c = 0;
        for (int j = 0; j < L; ++j) {
            ulong lo = a[j] * bi;
            ulong hi = mul_hi(a[j], bi);
            lo += t[j];
            hi += (lo < t[j]);
            lo += c;
            hi += (lo < c);
            t[j] = lo;
            c = hi;
        }
        ulong s = t[L] + c;
        t[L + 1] = (s < c);
        t[L] = s;
        /* q makes t + q m divisible by 2^64; then t = (t + q m) / 2^64 (Mul 2 of FLASH) */
        const ulong q = t[0] * n0;
        ulong lo = q * m[0];
        ulong hi = mul_hi(q, m[0]);
        lo += t[0];
        hi += (lo < t[0]);
        c = hi;
        for (int j = 1; j < L; ++j) {
            lo = q * m[j];
            hi = mul_hi(q, m[j]);
            lo += t[j];
            hi += (lo < t[j]);
            lo += c;
            hi += (lo < c);
            t[j - 1] = lo;
            c = hi;
        }
        s = t[L] + c;
        t[L - 1] = s;
        t[L] = t[L + 1] + (s < c);
    }
    /* t < 2m: subtract m once when t >= m (t[L] set means t >= R > m) */
    ulong ge = t[L];
    if (!ge) {
        ge = 1; /* equal counts as >= */
        for (int j = L - 1; j >= 0; --j) {
            if (t[j] != m[j]) { ge = t[j] > m[j]; break; }
        }
    }
    if (ge) {
        ulong borrow = 0;
        for (int j = 0; j < L; ++j) {
            ulong d = t[j] - m[j];
            ulong b1 = t[j] < m[j];
            ulong d2 = d - borrow;
            ulong b2 = d < borrow;
            out[j] = d2;
            borrow = b1 | b2;
        }
    } else {
        for (int j = 0; j < L; ++j) out[j] = t[j];
    }
}

#ifndef UNIFL_MM_ONLY

/* BASE OP: out[i] = a[i] b[i] R^-1 mod m for i < n.  consts = [m (L limbs), R mod m (L limbs)]. */
__kernel void SFX(montmul)(__global const ulong *restrict a, __global const ulong *restrict b,
                           __global ulong *restrict out, __constant const ulong *consts,
                           const ulong n0, const uint n)
{
    const uint stride = (uint)get_global_size(0);
    ulong x[L], y[L], z[L], mod[L];
    for (int j = 0; j < L; ++j) mod[j] = consts[j];
    for (uint i = (uint)get_global_id(0); i < n; i += stride) {
        const size_t base = (size_t)i * L;
        for (int j = 0; j < L; ++j) { x[j] = a[base + j]; y[j] = b[base + j]; }
        SFX(mm)(x, y, z, mod, n0);
        for (int j = 0; j < L; ++j) out[base + j] = z[j];
    }
}

/* On-device ModExp engine (FLASH-style dataflow loop over the MontMult engine):
 * out[i] = x_i^e_i R mod m for x̄_i = x_i R mod m (Montgomery form in and out).
 * Exponents: rows of le limbs, row i at exps[i * e_stride] (e_stride = 0: one exponent for all).
 * Left-to-right fixed windows of w bits over the top `ebits` bits; leading zero windows are skipped,
 * so a short exponent costs only its own length.  The table of x̄^d, d < 2^w, lives in `scratch`
 * (global_size * 2^w rows of L limbs), the on-chip RAM of a hardware engine. */
__kernel void SFX(mont_exp)(__global const ulong *restrict base, __global const ulong *restrict exps,
                            __global ulong *restrict out, __global ulong *restrict scratch,
                            __constant const ulong *consts, const ulong n0, const uint n,
                            const uint le, const uint e_stride, const uint ebits, const uint w)
{
    const uint stride = (uint)get_global_size(0);
    const uint gid = (uint)get_global_id(0);
    __global ulong *table = scratch + (size_t)gid * ((size_t)1 << w) * L;
    __constant const ulong *r_mod = consts + L;
    const uint nwin = (ebits + w - 1) / w;
    const ulong mask = (w >= 64) ? ~(ulong)0 : (((ulong)1 << w) - 1);
    ulong x[L], acc[L], tmp[L], mod[L];
    for (int j = 0; j < L; ++j) mod[j] = consts[j];
    for (uint i = gid; i < n; i += stride) {
        const size_t row = (size_t)i * L;
        __global const ulong *e = exps + (size_t)i * e_stride;
        /* table[0] = 1 (R mod m), table[1] = x̄, table[d] = table[d-1] x̄ */
        for (int j = 0; j < L; ++j) {
            x[j] = base[row + j];
            table[j] = r_mod[j];
            table[L + j] = x[j];
            acc[j] = x[j];
        }
        for (uint d = 2; d < ((uint)1 << w); ++d) {
            SFX(mm)(acc, x, tmp, mod, n0);
            for (int j = 0; j < L; ++j) { acc[j] = tmp[j]; table[(size_t)d * L + j] = tmp[j]; }
        }
        int started = 0;
        for (int j = 0; j < L; ++j) acc[j] = r_mod[j];
        for (int win = (int)nwin - 1; win >= 0; --win) {
            if (started) {
                for (uint s = 0; s < w; ++s) {
                    SFX(mm)(acc, acc, tmp, mod, n0);
                    for (int j = 0; j < L; ++j) acc[j] = tmp[j];
                }
            }
            const uint p = (uint)win * w;
            const uint limb = p >> 6, off = p & 63;
            ulong v = e[limb] >> off;
            if (off + w > 64 && limb + 1 < le) v |= e[limb + 1] << (64 - off);
            const uint digit = (uint)(v & mask);
            if (digit) {
                __global const ulong *t = table + (size_t)digit * L;
                if (started) {
                    for (int j = 0; j < L; ++j) x[j] = t[j];
                    SFX(mm)(acc, x, tmp, mod, n0);
                    for (int j = 0; j < L; ++j) acc[j] = tmp[j];
                } else {
                    for (int j = 0; j < L; ++j) acc[j] = t[j];
                    started = 1;
                }
            }
        }
        for (int j = 0; j < L; ++j) out[row + j] = acc[j];
    }
}

/* Paillier encryption with g = n + 1, the whole exponentiation on the device (mode modexp):
 * out[i] = (1 + msg_i n) r_i^n R mod n^2, the ciphertext in Montgomery form, for msg_i, r_i rows of
 * le limbs (< n, zero-extended to L) and nexp = n (le limbs, ebits bits).  consts = [n^2, R mod n^2,
 * R^2 mod n^2, n R mod n^2] (L limbs each).  r enters the domain with R^2; 1 + m n is m (n R) R^-1
 * plus one (m n < n^2: no reduction), taken into the domain with R^2; the ladder is mont_exp's. */
__kernel void SFX(paillier_enc)(__global const ulong *restrict msg, __global const ulong *restrict rnd,
                                __global const ulong *restrict nexp, __global ulong *restrict out,
                                __global ulong *restrict scratch, __constant const ulong *consts,
                                const ulong n0, const uint n, const uint le, const uint ebits,
                                const uint w)
{
    const uint stride = (uint)get_global_size(0);
    const uint gid = (uint)get_global_id(0);
    __global ulong *table = scratch + (size_t)gid * ((size_t)1 << w) * L;
    __constant const ulong *r_mod = consts + L;
    const uint nwin = (ebits + w - 1) / w;
    const ulong mask = (w >= 64) ? ~(ulong)0 : (((ulong)1 << w) - 1);
    ulong x[L], acc[L], tmp[L], mod[L], c2[L], g[L];
    for (int j = 0; j < L; ++j) mod[j] = consts[j];
    for (uint i = gid; i < n; i += stride) {
        /* r into the domain: table[1] = r R */
        for (int j = 0; j < L; ++j) {
            tmp[j] = (uint)j < le ? rnd[(size_t)i * le + j] : 0;
            c2[j] = consts[2 * L + j];
        }
        SFX(mm)(tmp, c2, x, mod, n0);
        for (int j = 0; j < L; ++j) {
            table[j] = r_mod[j];
            table[L + j] = x[j];
            acc[j] = x[j];
        }
        for (uint d = 2; d < ((uint)1 << w); ++d) {
            SFX(mm)(acc, x, tmp, mod, n0);
            for (int j = 0; j < L; ++j) { acc[j] = tmp[j]; table[(size_t)d * L + j] = tmp[j]; }
        }
        int started = 0;
        for (int j = 0; j < L; ++j) acc[j] = r_mod[j];
        for (int win = (int)nwin - 1; win >= 0; --win) {
            if (started) {
                for (uint s = 0; s < w; ++s) {
                    SFX(mm)(acc, acc, tmp, mod, n0);
                    for (int j = 0; j < L; ++j) acc[j] = tmp[j];
                }
            }
            const uint p = (uint)win * w;
            const uint limb = p >> 6, off = p & 63;
            ulong v = nexp[limb] >> off;
            if (off + w > 64 && limb + 1 < le) v |= nexp[limb + 1] << (64 - off);
            const uint digit = (uint)(v & mask);
            if (digit) {
                __global const ulong *t = table + (size_t)digit * L;
                if (started) {
                    for (int j = 0; j < L; ++j) x[j] = t[j];
                    SFX(mm)(acc, x, tmp, mod, n0);
                    for (int j = 0; j < L; ++j) acc[j] = tmp[j];
                } else {
                    for (int j = 0; j < L; ++j) acc[j] = t[j];
                    started = 1;
                }
            }
        }
        /* G = 1 + m n, then G R */
        for (int j = 0; j < L; ++j) {
            tmp[j] = (uint)j < le ? msg[(size_t)i * le + j] : 0;
            c2[j] = consts[3 * L + j];
        }
        SFX(mm)(tmp, c2, g, mod, n0);
        ulong carry = 1;
        for (int j = 0; j < L; ++j) { g[j] += carry; carry = carry && g[j] == 0; }
        for (int j = 0; j < L; ++j) c2[j] = consts[2 * L + j];
        SFX(mm)(g, c2, tmp, mod, n0);
        SFX(mm)(acc, tmp, x, mod, n0);
        for (int j = 0; j < L; ++j) out[(size_t)i * L + j] = x[j];
    }
}

#endif /* UNIFL_MM_ONLY */

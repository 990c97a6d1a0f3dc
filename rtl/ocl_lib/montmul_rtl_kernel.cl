/* The kernels of the RTL library: montmul_L16 on unifl_mm1024 and mont_exp_L16 on unifl_mexp1024.
 *
 * The BASE OP kernel for 1024-bit moduli built on the RTL library function unifl_mm1024 (each call
 * is one hand-off to the library's cluster of MontMult engines; the modulus is the same for every
 * call of a launch, so the library loads it once).  Same name and arguments as montmul_L16 in
 * montmul.cl, so a binary compiled from this file (aoc -l unifl_rtl.aoclib montmul_rtl_kernel.cl)
 * is a drop-in `fpga.binary` for the host runtime.  consts = [m (16 limbs), R mod m (16 limbs)].
 * Vectors are gathered and scattered element by element (unifl_v16.h), never through
 * vload16/vstore16.  Build with -I <repo>/unifl/backends/fpga/kernels. */
#include "unifl_v16.h"

ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0);

__kernel void montmul_L16(__global const ulong *restrict a, __global const ulong *restrict b,
                          __global ulong *restrict out, __constant const ulong *consts,
                          const ulong n0, const uint n)
{
    const ulong16 m = UNIFL_V16_LOAD(consts);
    const uint stride = (uint)get_global_size(0);
    for (uint i = (uint)get_global_id(0); i < n; i += stride) {
        const ulong16 r = unifl_mm1024(UNIFL_V16_LOAD(a + 16 * (size_t)i),
                                       UNIFL_V16_LOAD(b + 16 * (size_t)i), m, n0);
        UNIFL_V16_STORE(r, out + 16 * (size_t)i);
    }
}

/* The whole exponentiation on the RTL unit, a drop-in for mont_exp_L16 of montmul.cl (mode
 * modexp): same name and arguments; out[i] = x̄_i^e_i in the Montgomery domain.  The unit's table
 * lives on chip, so scratch is not used, and its windows are fixed at 4 bits, so w is not either
 * (the result does not depend on them).  The unit holds exponents of up to 1024 bits: a launch
 * with more (ebits > 1024) writes all-ones rows, above any m, which the host refuses. */
ulong16 unifl_mexp1024(ulong16 x, ulong16 e, ulong16 m, ulong16 r_mod, ulong n0, uint ebits);

__kernel void mont_exp_L16(__global const ulong *restrict base, __global const ulong *restrict exps,
                           __global ulong *restrict out, __global ulong *restrict scratch,
                           __constant const ulong *consts, const ulong n0, const uint n,
                           const uint le, const uint e_stride, const uint ebits, const uint w)
{
    const ulong16 m = UNIFL_V16_LOAD(consts);
    const ulong16 r_mod = UNIFL_V16_LOAD(consts + 16);
    const uint stride = (uint)get_global_size(0);
    for (uint i = (uint)get_global_id(0); i < n; i += stride) {
        ulong ew[16];
        for (uint j = 0; j < 16; ++j)
            ew[j] = j < le ? exps[(size_t)i * e_stride + j] : 0;
        const ulong16 res = ebits > 1024 ? (ulong16)(~(ulong)0)
                          : unifl_mexp1024(UNIFL_V16_LOAD(base + 16 * (size_t)i), UNIFL_V16_LOAD(ew), m, r_mod, n0, ebits);
        UNIFL_V16_STORE(res, out + 16 * (size_t)i);
    }
}

/* The BASE OP kernel for 1024-bit moduli built on the RTL library function unifl_mm1024 (each call
 * is one hand-off to the library's cluster of MontMult engines; the modulus is the same for every
 * call of a launch, so the library loads it once).  Same name and arguments as montmul_L16 in
 * montmul.cl, so a binary compiled from this file (aoc -l unifl_rtl.aoclib montmul_rtl_kernel.cl)
 * is a drop-in `fpga.binary` for the host runtime.  consts = [m (16 limbs), R mod m (16 limbs)].
 * Vectors are gathered and scattered element by element (no vload16/vstore16: see unifl_mm1024.cl). */
#define UNIFL_V16_LOAD(p) ((ulong16)((p)[0], (p)[1], (p)[2], (p)[3], (p)[4], (p)[5], (p)[6], \
    (p)[7], (p)[8], (p)[9], (p)[10], (p)[11], (p)[12], (p)[13], (p)[14], (p)[15]))
#define UNIFL_V16_STORE(v, p) do { (p)[0] = (v).s0; (p)[1] = (v).s1; (p)[2] = (v).s2; \
    (p)[3] = (v).s3; (p)[4] = (v).s4; (p)[5] = (v).s5; (p)[6] = (v).s6; (p)[7] = (v).s7; \
    (p)[8] = (v).s8; (p)[9] = (v).s9; (p)[10] = (v).sa; (p)[11] = (v).sb; (p)[12] = (v).sc; \
    (p)[13] = (v).sd; (p)[14] = (v).se; (p)[15] = (v).sf; } while (0)
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

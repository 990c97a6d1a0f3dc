/* The BASE OP kernel for 1024-bit moduli built on the RTL library function unifl_mm1024 (each call
 * is one hand-off to the library's cluster of MontMult engines; the modulus is the same for every
 * call of a launch, so the library loads it once).  Same name and arguments as montmul_L16 in
 * montmul.cl, so a binary compiled from this file (aoc -l unifl_rtl.aoclib montmul_rtl_kernel.cl)
 * is a drop-in `fpga.binary` for the host runtime.  consts = [m (16 limbs), R mod m (16 limbs)]. */
ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0);

__kernel void montmul_L16(__global const ulong *restrict a, __global const ulong *restrict b,
                          __global ulong *restrict out, __constant const ulong *consts,
                          const ulong n0, const uint n)
{
    const ulong16 m = vload16(0, consts);
    const uint stride = (uint)get_global_size(0);
    for (uint i = (uint)get_global_id(0); i < n; i += stride)
        vstore16(unifl_mm1024(vload16(i, a), vload16(i, b), m, n0), i, out);
}

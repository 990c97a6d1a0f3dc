/* Emulation model (C model) of the RTL library function unifl_mm1024: the same MontMult as the RTL
 * engine, written in OpenCL C, used by the emulator and by any device without the RTL.  It is the
 * fpga backend's own word-serial CIOS (montmul.cl compiled with L = 16 and UNIFL_MM_ONLY), so the
 * RTL, the emulation model and the software reference are three implementations of one function
 * that the tests compare bit for bit.  Build with -I <repo>/unifl/backends/fpga/kernels.
 *
 * Vectors move element by element, never through vload16/vstore16: those are calls into the OpenCL
 * implementation's builtin library, and a PoCL whose library variant has AVX-512 while its compiler
 * targets a CPU name without it (pip's PoCL 3.0 on AMD Zen 4, which LLVM 14 calls znver3) passes a
 * ulong16 by a different ABI on each side of the call -- wrong results, no error. */
#define UNIFL_V16_TO(v, p) do { (p)[0] = (v).s0; (p)[1] = (v).s1; (p)[2] = (v).s2; \
    (p)[3] = (v).s3; (p)[4] = (v).s4; (p)[5] = (v).s5; (p)[6] = (v).s6; (p)[7] = (v).s7; \
    (p)[8] = (v).s8; (p)[9] = (v).s9; (p)[10] = (v).sa; (p)[11] = (v).sb; (p)[12] = (v).sc; \
    (p)[13] = (v).sd; (p)[14] = (v).se; (p)[15] = (v).sf; } while (0)
#define UNIFL_V16_FROM(p) ((ulong16)((p)[0], (p)[1], (p)[2], (p)[3], (p)[4], (p)[5], (p)[6], \
    (p)[7], (p)[8], (p)[9], (p)[10], (p)[11], (p)[12], (p)[13], (p)[14], (p)[15]))
#define L 16
#define UNIFL_MM_ONLY
#include "montmul.cl"
#undef UNIFL_MM_ONLY
#undef L

ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0)
{
    ulong x[16], y[16], mod[16], z[16];
    UNIFL_V16_TO(a, x);
    UNIFL_V16_TO(b, y);
    UNIFL_V16_TO(m, mod);
    mm_L16(x, y, z, mod, n0);
    return UNIFL_V16_FROM(z);
}

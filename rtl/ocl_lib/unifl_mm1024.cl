/* Emulation model (C model) of the RTL library function unifl_mm1024: the same MontMult as the RTL
 * engine, written in OpenCL C, used by the emulator and by any device without the RTL.  It is the
 * fpga backend's own word-serial CIOS (montmul.cl compiled with L = 16 and UNIFL_MM_ONLY), so the
 * RTL, the emulation model and the software reference are three implementations of one function
 * that the tests compare bit for bit.  Build with -I <repo>/unifl/backends/fpga/kernels.
 * Vectors move element by element (unifl_v16.h), never through vload16/vstore16. */
#include "unifl_v16.h"
#ifndef UNIFL_MM_L16_DEFINED
#define UNIFL_MM_L16_DEFINED
#define L 16
#define UNIFL_MM_ONLY
#include "montmul.cl"
#undef UNIFL_MM_ONLY
#undef L
#endif

ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0)
{
    ulong x[16], y[16], mod[16], z[16];
    UNIFL_V16_STORE(a, x);
    UNIFL_V16_STORE(b, y);
    UNIFL_V16_STORE(m, mod);
    mm_L16(x, y, z, mod, n0);
    return UNIFL_V16_LOAD(z);
}

/* Emulation model (C model) of the RTL library function unifl_mexp1024: the exponentiation of
 * rtl/unifl_modexp.v -- entry MontMult by R mod m (reduces x), a table of x̄^d for d < 16, fixed
 * 4-bit windows with a product at every window, exit MontMult by R mod m -- over the fpga
 * backend's word-serial CIOS (montmul.cl with L = 16 and UNIFL_MM_ONLY).  Every step returns a
 * value below m, so the result is x^e R mod m whatever the schedule: the RTL, this model and the
 * software reference are three implementations of one function that the tests compare bit for
 * bit.  Build with -I <repo>/unifl/backends/fpga/kernels. */
#include "unifl_v16.h"
#ifndef UNIFL_MM_L16_DEFINED
#define UNIFL_MM_L16_DEFINED
#define L 16
#define UNIFL_MM_ONLY
#include "montmul.cl"
#undef UNIFL_MM_ONLY
#undef L
#endif

ulong16 unifl_mexp1024(ulong16 x, ulong16 e, ulong16 m, ulong16 r_mod, ulong n0, uint ebits)
{
    ulong mod[16], one[16], ew[16], tab[16][16], acc[16], tmp[16], t[16];
    UNIFL_V16_STORE(m, mod);
    UNIFL_V16_STORE(r_mod, one);
    UNIFL_V16_STORE(e, ew);
    UNIFL_V16_STORE(x, t);
    for (int j = 0; j < 16; ++j) tab[0][j] = one[j];
    mm_L16(t, one, tab[1], mod, n0);                       /* entry: reduce x below m */
    for (int d = 2; d < 16; ++d) mm_L16(tab[d - 1], tab[1], tab[d], mod, n0);
    const int nwin = ebits == 0 ? 1 : (int)((ebits + 3) / 4);
    const int top = nwin - 1;
    int dig = (int)((ew[(top * 4) / 64] >> ((top * 4) % 64)) & 15);
    for (int j = 0; j < 16; ++j) acc[j] = tab[dig][j];
    for (int win = nwin - 2; win >= 0; --win) {
        for (int s = 0; s < 4; ++s) {
            mm_L16(acc, acc, tmp, mod, n0);
            for (int j = 0; j < 16; ++j) acc[j] = tmp[j];
        }
        dig = (int)((ew[(win * 4) / 64] >> ((win * 4) % 64)) & 15);
        mm_L16(acc, tab[dig], tmp, mod, n0);
        for (int j = 0; j < 16; ++j) acc[j] = tmp[j];
    }
    mm_L16(acc, one, tmp, mod, n0);                        /* exit: Montgomery form kept */
    return UNIFL_V16_LOAD(tmp);
}

/* A ulong16 gathered from / scattered to 16 consecutive limbs, element by element, for OpenCL C
 * that moves 512-bit vectors (the RTL library's kernels and emulation models, rtl/ocl_lib).  Never
 * vload16/vstore16 instead: those are calls into the OpenCL implementation's builtin library, and a
 * PoCL whose library variant has AVX-512 while its compiler targets a CPU name without it (pip's
 * PoCL 3.0 on AMD Zen 4, which LLVM 14 calls znver3) passes a ulong16 by a different ABI on each
 * side of the call: wrong results, no error. */
#ifndef UNIFL_V16_H
#define UNIFL_V16_H
#define UNIFL_V16_LOAD(p) \
    ((ulong16)((p)[0], (p)[1], (p)[2], (p)[3], (p)[4], (p)[5], (p)[6], (p)[7], (p)[8], (p)[9], \
               (p)[10], (p)[11], (p)[12], (p)[13], (p)[14], (p)[15]))
#define UNIFL_V16_STORE(v, p) \
    do { \
        (p)[0] = (v).s0; \
        (p)[1] = (v).s1; \
        (p)[2] = (v).s2; \
        (p)[3] = (v).s3; \
        (p)[4] = (v).s4; \
        (p)[5] = (v).s5; \
        (p)[6] = (v).s6; \
        (p)[7] = (v).s7; \
        (p)[8] = (v).s8; \
        (p)[9] = (v).s9; \
        (p)[10] = (v).sa; \
        (p)[11] = (v).sb; \
        (p)[12] = (v).sc; \
        (p)[13] = (v).sd; \
        (p)[14] = (v).se; \
        (p)[15] = (v).sf; \
    } while (0)
#endif

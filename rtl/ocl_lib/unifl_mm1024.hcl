/* Declaration of the RTL library function unifl_mm1024 (the header an Intel FPGA OpenCL library
 * carries with its objects).  result = a*b*2^-1024 mod m for a, b < m, m odd of 1024 bits,
 * n0 = -m^-1 mod 2^64; the 16 ulongs of each ulong16 are the 64-bit words, least significant first.
 * Implemented by unifl_mm1024_ocl.v (specs unifl_mm1024.xml, unifl_mm1024_fixed.xml); emulated by
 * unifl_mm1024.cl. */
ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0);

/* result = x^e R mod m for x = x R mod m (Montgomery form in and out), e = the low ebits <= 1024
 * bits of e, r_mod = R mod m; any x below 2^1024 (reduced on entry).  Implemented by
 * unifl_mexp1024_ocl.v (spec unifl_mexp1024.xml); emulated by unifl_mexp1024.cl. */
ulong16 unifl_mexp1024(ulong16 x, ulong16 e, ulong16 m, ulong16 r_mod, ulong n0, uint ebits);

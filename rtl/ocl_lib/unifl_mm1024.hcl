/* Declaration of the RTL library function unifl_mm1024 (the header an Intel FPGA OpenCL library
 * carries with its objects).  result = a*b*2^-1024 mod m for a, b < m, m odd of 1024 bits,
 * n0 = -m^-1 mod 2^64; the 16 ulongs of each ulong16 are the 64-bit words, least significant first.
 * Implemented by unifl_mm1024_ocl.v (specs unifl_mm1024.xml, unifl_mm1024_fixed.xml); emulated by
 * unifl_mm1024.cl. */
ulong16 unifl_mm1024(ulong16 a, ulong16 b, ulong16 m, ulong n0);

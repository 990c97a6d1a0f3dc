/* One translation unit with every size a prebuilt FPGA binary should carry: the input an offline
 * compiler is given (Intel: `aoc all_sizes.cl -o kernels.aocx`; Xilinx: `v++ -c -t hw ... all_sizes.cl`).
 * Each inclusion of montmul.cl defines montmul_L<n> and mont_exp_L<n>; the host looks them up by name.
 * Limb counts: 4 (256-bit), 8 (512), 16 (1024-bit n, RSA-1024), 32 (2048: n of a 2048-bit key, n² of
 * a 1024-bit key), 64 (4096: n² of a 2048-bit key).  Edit the list to fit the board's resources. */
#define L 4
#include "montmul.cl"
#undef L
#define L 8
#include "montmul.cl"
#undef L
#define L 16
#include "montmul.cl"
#undef L
#define L 32
#include "montmul.cl"
#undef L
#define L 64
#include "montmul.cl"
#undef L

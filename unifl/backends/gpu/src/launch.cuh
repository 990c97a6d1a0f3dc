// UniFL gpu backend: the launch functions of the kernels (defined in kernels.cu, next to the
// kernels they launch; called by the C interface, c_api.cu, inside run_op with the device's mutex
// held).  Each picks the kernel for the key's size class and family and launches it on the device's
// stream (in waves for the exponentiations); it returns 0, kErrSize when no kernel is instantiated
// for the class, kErrShape / kErrSmem for a launch that cannot work, or a CUDA error.  The caller
// then waits for the stream (finish).
#pragma once

#include "device_runtime.cuh"

namespace unifl_gpu {
namespace rt {

// How the cooperative exponentiation kernels run:
//   window  3, 4 or 5 bits (2^w table entries in shared memory per group), or 0: the largest window
//           whose tables cost no occupancy against 3-bit ones on this device (the CUDA occupancy
//           calculator on the kernel as compiled; remembered per kernel and key size)
//   shape   1: the class's shape; 2: the wide one (twice the threads per instance, for lower
//           latency: coop::Shape<LM, true>, the classes of up to 4096 bits); 0: wide when the call
//           alone would give the device under kWideWarpsPerSm warps per SM in the normal shape
struct Tuning {
    int window = 0;
    int shape = 0;
};
constexpr int kWideWarpsPerSm = 4;

int launch_relayout(Device &d, long long n, int L, u64 *dst, Lay ld, const u64 *src, Lay ls);

int launch_mul(Device &d, const Key &k, bool group, long long n, const DBatch &o, const View &a,
               const View &b, int mode);
int launch_exp(Device &d, const Key &k, bool group, Tuning t, long long n, const DBatch &o,
               const View &base, const View &exps, int le, int e_shared, int mode);
// multi-exponentiation: the cooperative one-launch form (K·P groups; scratch and counters staged)
int launch_multi_exp_group(Device &d, const Key &k, Tuning t, long long KP, const DBatch &res,
                           const u64 *bases, Lay lay_b, const u64 *exps, int le, long long N,
                           long long P, long long chunk, u64 *scratch, unsigned int *counters);
// ... and the one-thread form: K·N powers into scratch (waves), then the halving rounds
int launch_multi_exp_thread(Device &d, const Key &k, long long K, long long N, u64 *scratch,
                            const u64 *bases, Lay lay_b, const u64 *exps, int le);
int launch_prod_groups(Device &d, const Key &k, long long chunks, const DBatch &res, const u64 *a,
                       Lay lay_a, const long long *order, const long long *plan, u64 *scratch,
                       unsigned int *counters);
int launch_inverse(Device &d, const Key &k, long long inst, const DBatch &o, const View &a,
                   long long n, long long chunk, unsigned int *bad);
int launch_fixed_base(Device &d, const Key &k, const Table &t, int w, int nwin, long long n,
                      const DBatch &o, const View &m, const u64 *a, int La);
int launch_owner_fixed_base(Device &d, const Key &k, const Table &tp, const Table &tq, int w,
                            int nwin, long long n, const DBatch &o, const View &m, const u64 *ap,
                            const u64 *aq, int La);
int launch_encrypt(Device &d, const Key &k, bool group, Tuning t, long long n, const DBatch &o,
                   const View &m, const View &r);
int launch_encrypt_owner(Device &d, const Key &k, bool group, Tuning t, long long n,
                         const DBatch &o, const View &m, const View &yp, const View &yq);
int launch_decrypt(Device &d, const Key &k, bool group, Tuning t, long long n, const DBatch &o,
                   const View &c);

}  // namespace rt
}  // namespace unifl_gpu

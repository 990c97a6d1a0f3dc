// UniFL gpu backend: the CUDA kernels and their launch functions (launch.cuh).  Each __global__
// wrapper copies the key blob into shared memory (UniFL Alg. 4 lines 5-9), computes its instance
// index and calls a __host__ __device__ body -- the same bodies the host harness runs on the CPU
// (gpu_host.cpp).  Two families:
//   k_<op><LM>     one thread per instance, the bodies of kernels.cuh (64-bit limbs in local arrays);
//   k_<op>_g<LM>   one instance per group of TPI threads (coop::Shape<LM> of kernels_group.cuh), the
//                  cooperative bodies of kernels_group.cuh with the lane policy WarpLanes<TPI>
//                  (32-bit words in registers, carries across lanes by shuffles and votes); their
//                  window tables live in shared memory, one slice per group after the key.
// The ops mont_prod_groups, mont_inverse and the two DJN fixed-base encryptions exist only as
// group kernels; mont_multi_exp has both (the group one finishes its reduction in the same launch).
// This is the library's one translation unit with device code (tools.gpu.proxies compiles it).
#include <climits>

#include "kernels_group.cuh"  // the cooperative bodies; includes kernels.cuh (the one-thread ones)
#include "launch.cuh"

using unifl_gpu::Lay;
using unifl_gpu::u64;
namespace coop = unifl_gpu::coop;
typedef unifl_gpu::coop::u32 u32;

namespace unifl_gpu {
namespace rt {
namespace {

// ------------------------------------------------------------------------------ one-thread kernels
__device__ __forceinline__ const u64 *stage_key(const u64 *key, int key_len) {
    extern __shared__ u64 smem[];
    for (int j = threadIdx.x; j < key_len; j += blockDim.x) smem[j] = key[j];
    __syncthreads();
    return smem;
}

__device__ __forceinline__ long long instance() {
    return (long long)blockIdx.x * blockDim.x + threadIdx.x;
}

template <int LM>
__global__ void k_mul(long long n, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *a,
                      Lay la, const u64 *b, Lay lb, int mode) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_mul<LM>(i, k, out, lo, a, la, b, lb, mode);
}

template <int LM>
__global__ void k_exp(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lo,
                      const u64 *base, Lay lb, const u64 *exps, int le, int e_shared, int mode) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_exp<LM>(i, k, out, lo, base, lb, exps, le, e_shared, mode);
}

template <int LM>
__global__ void k_powers(long long i0, long long n, const u64 *key, int key_len, u64 *scratch,
                         Lay lay_s, const u64 *bases, Lay lay_b, const u64 *exps, int le,
                         long long N) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n)
        unifl_gpu::body_multi_exp_powers<LM>(i, k, scratch, lay_s, bases, lay_b, exps, le, N);
}

template <int LM>
__global__ void k_prod_round(long long n, const u64 *key, int key_len, u64 *scratch, Lay lay_s,
                             long long N, long long cnt) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_prod_round<LM>(i, k, scratch, lay_s, N, cnt);
}

template <int LM>
__global__ void k_encrypt(long long i0, long long n, const u64 *key, int key_len, u64 *out,
                          Lay lay_2, const u64 *m, Lay lay_m, const u64 *r, Lay lay_r) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_paillier_encrypt<LM>(i, k, out, lay_2, m, lay_m, r, lay_r);
}

template <int LM>
__global__ void k_encrypt_owner(long long i0, long long n, const u64 *key, int key_len, u64 *out,
                                Lay lay_2, const u64 *m, Lay lay_m, const u64 *yp, Lay lay_p,
                                const u64 *yq, Lay lay_q) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n)
        unifl_gpu::body_paillier_encrypt_owner<LM>(i, k, out, lay_2, m, lay_m, yp, lay_p, yq,
                                                   lay_q);
}

template <int LM>
__global__ void k_decrypt(long long i0, long long n, const u64 *key, int key_len, u64 *out,
                          Lay lay_n, const u64 *c, Lay lay_2) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_paillier_decrypt<LM>(i, k, out, lay_n, c, lay_2);
}

__global__ void k_relayout(long long n, int L, u64 *dst, Lay ld, const u64 *src, Lay ls) {
    const long long i = instance();
    if (i < n) unifl_gpu::body_relayout(i, L, dst, ld, src, ls);
}

// -------------------------------------------------------------------------------- group kernels
// k_<op>_g<LM[, wide]>.  Threads per block: 128, a multiple of 32 and of every TPI, so no group
// straddles a warp or a block.  Dynamic shared memory: the key blob (key_len words), then, for the
// bodies with a window table, one table_words<G, LPT>(window) slice of u32 per group of the block
// (the key is whole u64 words, so the tables start 8-byte aligned).
constexpr int kGroupBlock = 128;

template <int LM, bool kWide = false>
struct GroupShape {
    static constexpr int TPI = coop::Shape<LM, kWide>::TPI;
    static constexpr int LPT = coop::Shape<LM, kWide>::LPT;
    typedef coop::WarpLanes<TPI> G;                    // groups of a warp may diverge
    typedef coop::WarpLanes<TPI, true> GW;             // the warp stays converged (see WarpLanes)
    static constexpr int kGroups = kGroupBlock / TPI;  // groups per block
    static_assert(kGroupBlock % 32 == 0 && kGroupBlock % TPI == 0,
                  "whole groups, whole warps per block");

    __device__ __forceinline__ static long long group_instance() {
        return (long long)blockIdx.x * kGroups + threadIdx.x / TPI;
    }
    // this group's window table: after the key, table_words(window) apart
    __device__ __forceinline__ static u32 *table(int key_len, int window) {
        extern __shared__ u64 smem[];
        return reinterpret_cast<u32 *>(smem + key_len) +
               (threadIdx.x / TPI) * (unsigned)coop::table_words<G, LPT>(window);
    }
    // dynamic shared memory of a launch: the key, then (window > 0) one window table per group
    static size_t smem(int key_len, int window) {
        return size_t(key_len) * 8 +
               (window ? size_t(kGroups) * coop::table_words<G, LPT>(window) * 4 : 0);
    }
    static unsigned grid(long long inst) { return (unsigned)((inst + kGroups - 1) / kGroups); }
};

// Launch bounds of the group kernels: at most kGroupBlock threads, and at least ONE block per SM.
// With the thread count alone, ptxas caps registers to fit more blocks (measured for sm_90: 96 or
// 80 registers and up to 140 B of spills in the 48/96-limb classes); one block lets it keep the
// numbers in registers, and the shared-memory tables bound the blocks per SM anyway.
#define UNIFL_GROUP_BOUNDS __launch_bounds__(kGroupBlock, 1)

// The kernels on the converged-warp policy (GW): a group past the last instance runs the last
// instance again and writes nothing, so the groups of a warp stay together.
#define UNIFL_CONVERGED_INSTANCE(S, first, count) \
    long long i = (first) + S::group_instance(); \
    const bool live = i < (count); \
    if (!live) i = (count) - 1

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_mul_g(long long n, const u64 *key, int key_len, u64 *out,
                                           Lay lo, const u64 *a, Lay la, const u64 *b, Lay lb,
                                           int mode) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    UNIFL_CONVERGED_INSTANCE(S, 0, n);
    coop::gbody_mul<typename S::GW, S::LPT>(i, k, live ? out : nullptr, lo, a, la, b, lb, mode);
}

template <int LM, bool kWide>
__global__ void UNIFL_GROUP_BOUNDS k_exp_g(long long i0, long long n, const u64 *key, int key_len,
                                           int win, u64 *out, Lay lo, const u64 *base, Lay lb,
                                           const u64 *exps, int le, int e_shared, int mode) {
    typedef GroupShape<LM, kWide> S;
    const u64 *k = stage_key(key, key_len);
    UNIFL_CONVERGED_INSTANCE(S, i0, n);
    coop::gbody_exp<typename S::GW, S::LPT>(i, k, S::table(key_len, win), win, live ? out : nullptr,
                                            lo, base, lb, exps, le, e_shared, mode);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_multi_exp_g(long long inst, const u64 *key, int key_len,
                                                 int win, u64 *out, Lay lo, const u64 *bases,
                                                 Lay lb, const u64 *exps, int le, long long N,
                                                 long long P, long long chunk, u64 *scratch,
                                                 unsigned int *counters) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = S::group_instance();
    if (i >= inst) return;
    coop::gbody_multi_exp<typename S::G, S::LPT>(i, k, S::table(key_len, win), win, out, lo, bases,
                                                 lb, exps, le, N, P, chunk, scratch, counters);
}

template <int LM, bool kWide>
__global__ void UNIFL_GROUP_BOUNDS k_encrypt_g(long long i0, long long n, const u64 *key,
                                               int key_len, int win, u64 *out, Lay lay_2,
                                               const u64 *m, Lay lay_m, const u64 *r, Lay lay_r) {
    typedef GroupShape<LM, kWide> S;
    const u64 *k = stage_key(key, key_len);
    UNIFL_CONVERGED_INSTANCE(S, i0, n);
    coop::gbody_paillier_encrypt<typename S::GW, S::LPT>(
        i, k, S::table(key_len, win), win, live ? out : nullptr, lay_2, m, lay_m, r, lay_r);
}

// (the CRT kernels keep the group mask: their two half groups may run different trip counts when
// p² and q² differ in size)
template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_encrypt_owner_g(long long i0, long long n, const u64 *key,
                                                     int key_len, int win, u64 *out, Lay lay_2,
                                                     const u64 *m, Lay lay_m, const u64 *yp,
                                                     Lay lay_p, const u64 *yq, Lay lay_q) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + S::group_instance();
    if (i >= n) return;
    coop::gbody_paillier_encrypt_owner<typename S::G, S::LPT>(
        i, k, S::table(key_len, win), win, out, lay_2, m, lay_m, yp, lay_p, yq, lay_q);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_decrypt_g(long long i0, long long n, const u64 *key,
                                               int key_len, int win, u64 *out, Lay lay_n,
                                               const u64 *c, Lay lay_2) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + S::group_instance();
    if (i >= n) return;
    coop::gbody_paillier_decrypt<typename S::G, S::LPT>(i, k, S::table(key_len, win), win, out,
                                                        lay_n, c, lay_2);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_prod_groups_g(long long chunks, const u64 *key, int key_len,
                                                   u64 *out, Lay lo, const u64 *a, Lay la,
                                                   const long long *order, const long long *plan,
                                                   u64 *scratch, unsigned int *counters) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = S::group_instance();
    if (i >= chunks) return;
    coop::gbody_prod_groups<typename S::G, S::LPT>(i, k, out, lo, a, la, order, plan, scratch,
                                                   counters);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_inverse_g(long long inst, const u64 *key, int key_len,
                                               u64 *out, Lay lo, const u64 *a, Lay la, long long n,
                                               long long chunk, unsigned int *bad) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = S::group_instance();
    if (i >= inst) return;
    coop::gbody_inverse<typename S::G, S::LPT>(i, k, out, lo, a, la, n, chunk, bad);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_fixed_base_g(long long n, const u64 *key, int key_len,
                                                  const u64 *table, int w, int nwin, u64 *out,
                                                  Lay lay_2, const u64 *m, Lay lay_m, const u64 *a,
                                                  int La) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = S::group_instance();
    if (i >= n) return;
    coop::gbody_fixed_base<typename S::G, S::LPT>(i, k, table, w, nwin, out, lay_2, m, lay_m, a,
                                                  La);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS k_owner_fixed_base_g(long long n, const u64 *key, int key_len,
                                                        const u64 *tp, const u64 *tq, int w,
                                                        int nwin, u64 *out, Lay lay_2, const u64 *m,
                                                        Lay lay_m, const u64 *ap, const u64 *aq,
                                                        int La) {
    typedef GroupShape<LM> S;
    const u64 *k = stage_key(key, key_len);
    const long long i = S::group_instance();
    if (i >= n) return;
    coop::gbody_owner_fixed_base<typename S::G, S::LPT>(i, k, tp, tq, w, nwin, out, lay_2, m, lay_m,
                                                        ap, aq, La);
}

#undef UNIFL_CONVERGED_INSTANCE
#undef UNIFL_GROUP_BOUNDS

// ------------------------------------------------------------------------------ launch helpers
// Threads per block of the one-thread kernels: big local frames (the 16-entry window table) favour
// smaller blocks at large L.
inline int block_size(int lmax) { return lmax >= 64 ? 64 : 128; }
inline unsigned grid_size(long long n, int tpb) { return (unsigned)((n + tpb - 1) / tpb); }

// Grid of a one-launch group op: kErrShape past what one launch can address.
template <class S>
int one_launch_grid(long long inst, unsigned *grid) {
    const long long blocks = (inst + S::kGroups - 1) / S::kGroups;
    if (inst <= 0 || blocks > INT_MAX) return kErrShape;
    *grid = (unsigned)blocks;
    return 0;
}

// The window of a group exponentiation kernel (Tuning): the asked one, or the largest whose
// tables leave as many blocks per SM as 3-bit ones (remembered per kernel and key size).  Lets
// the kernel take the chosen tables' shared memory.
template <class S>
int window_for(Device &d, const void *kernel, int key_len, int want, int *win) {
    if (want) {
        if (want < coop::kMinWindow || want > coop::kMaxWindow) return kErrShape;
        *win = want;
        return allow_smem(d, kernel, S::smem(key_len, want));
    }
    const auto at = std::make_pair(kernel, key_len);
    auto it = d.window_choice.find(at);
    if (it == d.window_choice.end()) {
        int best = 0, least = 0, r;
        for (int w = coop::kMinWindow; w <= coop::kMaxWindow; ++w) {
            const size_t bytes = S::smem(key_len, w);
            if (bytes > d.smem_optin) break;
            if ((r = allow_smem(d, kernel, bytes))) return r;
            int blocks = 0;
            if ((r = (int)cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel,
                                                                        kGroupBlock, bytes)))
                return r;
            if (w == coop::kMinWindow) least = blocks;
            if (blocks > 0 && blocks >= least) best = w;
        }
        if (!best) return kErrSmem;
        it = d.window_choice.emplace(at, best).first;
    }
    *win = it->second;
    return allow_smem(d, kernel, S::smem(key_len, *win));
}

// threads per instance of a class's normal shape (0: no class)
inline int normal_tpi(int lmax) {
    int tpi = 0;
    (void)UNIFL_WITH_SHAPE(lmax, tpi = TPI);
    return tpi;
}

// The wide shape for this call?  (Tuning; only the classes that have one.)
inline bool use_wide(const Device &d, Tuning t, int lmax, int tpi, long long n) {
    if (!coop::has_wide_shape(lmax)) return false;
    if (t.shape) return t.shape == 2;
    return n * tpi < (long long)kWideWarpsPerSm * 32 * d.sms;
}

// A group exponentiation kernel over n instances in waves, after its window is chosen.
template <class S, class Kernel, class Launch>
int exp_waves(Device &d, Kernel kernel, int key_len, Tuning t, long long n, Launch l) {
    int win = 0;
    const int r = window_for<S>(d, (const void *)kernel, key_len, t.window, &win);
    if (r) return r;
    const size_t smem = S::smem(key_len, win);
    d.last_window = win;
    in_waves(d, n, [&](long long i0, long long w) { l(S::grid(w), smem, i0, win); });
    return 0;
}

}  // namespace

// ------------------------------------------------------------------------------ launch functions
int launch_relayout(Device &d, long long n, int L, u64 *dst, Lay ld, const u64 *src, Lay ls) {
    launch(d, [&] { k_relayout<<<grid_size(n, 256), 256, 0, d.stream>>>(n, L, dst, ld, src, ls); });
    return 0;
}

int launch_mul(Device &d, const Key &k, bool group, long long n, const DBatch &o, const View &a,
               const View &b, int mode) {
    const int kl = k.words();
    int r = 0;
    const bool ok =
        group ? UNIFL_WITH_SHAPE(k.glmax,
                                 {
                                     typedef GroupShape<LM> S;
                                     unsigned grid = 0;
                                     const size_t smem = S::smem(kl, 0);
                                     if (!(r = one_launch_grid<S>(n, &grid)) &&
                                         !(r = allow_smem(d, (const void *)k_mul_g<LM>, smem)))
                                         launch(d, [&] {
                                             k_mul_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                                                 n, k.ptr, kl, o.ptr, limb_major(o), a.ptr, a.lay,
                                                 b.ptr, b.lay, mode);
                                         });
                                 })
              : UNIFL_WITH_LMAX(k.lmax, {
                    const int tpb = block_size(LM);
                    launch(d, [&] {
                        k_mul<LM><<<grid_size(n, tpb), tpb, kl * 8, d.stream>>>(
                            n, k.ptr, kl, o.ptr, limb_major(o), a.ptr, a.lay, b.ptr, b.lay, mode);
                    });
                });
    return ok ? r : kErrSize;
}

int launch_exp(Device &d, const Key &k, bool group, Tuning t, long long n, const DBatch &o,
               const View &base, const View &exps, int le, int e_shared, int mode) {
    const int kl = k.words();
    int r = 0;
    if (!group) {
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, [&](long long i0, long long w) {
                k_exp<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                    i0, n, k.ptr, kl, o.ptr, limb_major(o), base.ptr, base.lay, exps.ptr, le,
                    e_shared, mode);
            });
        });
        return ok ? 0 : kErrSize;
    }
    auto run = [&](auto kernel, auto shape) {
        typedef decltype(shape) S;
        return exp_waves<S>(
            d, kernel, kl, t, n, [&](unsigned grid, size_t smem, long long i0, int win) {
                kernel<<<grid, kGroupBlock, smem, d.stream>>>(i0, n, k.ptr, kl, win, o.ptr,
                                                              limb_major(o), base.ptr, base.lay,
                                                              exps.ptr, le, e_shared, mode);
            });
    };
    const bool wide = use_wide(d, t, k.glmax, normal_tpi(k.glmax), n);
    d.last_wide = wide;
    const bool ok =
        wide ? UNIFL_WITH_WIDE_SHAPE(k.glmax, r = run(k_exp_g<LM, true>, GroupShape<LM, true>()))
             : UNIFL_WITH_SHAPE(k.glmax, r = run(k_exp_g<LM, false>, GroupShape<LM, false>()));
    return ok ? r : kErrSize;
}

int launch_multi_exp_group(Device &d, const Key &k, Tuning t, long long KP, const DBatch &res,
                           const u64 *bases, Lay lay_b, const u64 *exps, int le, long long N,
                           long long P, long long chunk, u64 *scratch, unsigned int *counters) {
    const int kl = k.words();
    int r = 0;
    const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
        typedef GroupShape<LM> S;
        unsigned grid = 0;
        int win = 0;
        if (!(r = one_launch_grid<S>(KP, &grid)) &&
            !(r = window_for<S>(d, (const void *)k_multi_exp_g<LM>, kl, t.window, &win))) {
            d.last_window = win;
            d.last_wide = 0;
            launch(d, [&] {
                k_multi_exp_g<LM><<<grid, kGroupBlock, S::smem(kl, win), d.stream>>>(
                    KP, k.ptr, kl, win, res.ptr, limb_major(res), bases, lay_b, exps, le, N, P,
                    chunk, scratch, counters);
            });
        }
    });
    return ok ? r : kErrSize;
}

int launch_multi_exp_thread(Device &d, const Key &k, long long K, long long N, u64 *scratch,
                            const u64 *bases, Lay lay_b, const u64 *exps, int le) {
    const int kl = k.words();
    const long long S = K * N;
    const Lay lay_s{1, S};
    const bool ok = UNIFL_WITH_LMAX(k.lmax, {
        const int tpb = block_size(LM);
        in_waves(d, S, [&](long long i0, long long w) {
            k_powers<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                i0, S, k.ptr, kl, scratch, lay_s, bases, lay_b, exps, le, N);
        });
        for (long long cnt = N; cnt > 1; cnt = (cnt + 1) / 2) {
            const long long inst = K * (cnt - (cnt + 1) / 2);
            launch(d, [&] {
                k_prod_round<LM><<<grid_size(inst, tpb), tpb, kl * 8, d.stream>>>(
                    inst, k.ptr, kl, scratch, lay_s, N, cnt);
            });
        }
    });
    return ok ? 0 : kErrSize;
}

int launch_prod_groups(Device &d, const Key &k, long long chunks, const DBatch &res, const u64 *a,
                       Lay lay_a, const long long *order, const long long *plan, u64 *scratch,
                       unsigned int *counters) {
    const int kl = k.words();
    int r = 0;
    const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
        typedef GroupShape<LM> S;
        unsigned grid = 0;
        const size_t smem = S::smem(kl, 0);
        if (!(r = one_launch_grid<S>(chunks, &grid)) &&
            !(r = allow_smem(d, (const void *)k_prod_groups_g<LM>, smem)))
            launch(d, [&] {
                k_prod_groups_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                    chunks, k.ptr, kl, res.ptr, limb_major(res), a, lay_a, order, plan, scratch,
                    counters);
            });
    });
    return ok ? r : kErrSize;
}

int launch_inverse(Device &d, const Key &k, long long inst, const DBatch &o, const View &a,
                   long long n, long long chunk, unsigned int *bad) {
    const int kl = k.words();
    int r = 0;
    const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
        typedef GroupShape<LM> S;
        unsigned grid = 0;
        const size_t smem = S::smem(kl, 0);
        if (!(r = one_launch_grid<S>(inst, &grid)) &&
            !(r = allow_smem(d, (const void *)k_inverse_g<LM>, smem)))
            launch(d, [&] {
                k_inverse_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                    inst, k.ptr, kl, o.ptr, limb_major(o), a.ptr, a.lay, n, chunk, bad);
            });
    });
    return ok ? r : kErrSize;
}

int launch_fixed_base(Device &d, const Key &k, const Table &t, int w, int nwin, long long n,
                      const DBatch &o, const View &m, const u64 *a, int La) {
    const int kl = k.words();
    int r = 0;
    const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
        typedef GroupShape<LM> S;
        unsigned grid = 0;
        const size_t smem = S::smem(kl, 0);
        if (!(r = one_launch_grid<S>(n, &grid)) &&
            !(r = allow_smem(d, (const void *)k_fixed_base_g<LM>, smem)))
            launch(d, [&] {
                k_fixed_base_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                    n, k.ptr, kl, t.ptr, w, nwin, o.ptr, limb_major(o), m.ptr, m.lay, a, La);
            });
    });
    return ok ? r : kErrSize;
}

int launch_owner_fixed_base(Device &d, const Key &k, const Table &tp, const Table &tq, int w,
                            int nwin, long long n, const DBatch &o, const View &m, const u64 *ap,
                            const u64 *aq, int La) {
    const int kl = k.words();
    int r = 0;
    const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
        typedef GroupShape<LM> S;
        unsigned grid = 0;
        const size_t smem = S::smem(kl, 0);
        if (!(r = one_launch_grid<S>(n, &grid)) &&
            !(r = allow_smem(d, (const void *)k_owner_fixed_base_g<LM>, smem)))
            launch(d, [&] {
                k_owner_fixed_base_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                    n, k.ptr, kl, tp.ptr, tq.ptr, w, nwin, o.ptr, limb_major(o), m.ptr, m.lay, ap,
                    aq, La);
            });
    });
    return ok ? r : kErrSize;
}

int launch_encrypt(Device &d, const Key &k, bool group, Tuning t, long long n, const DBatch &o,
                   const View &m, const View &r_) {
    const int kl = k.words();
    int r = 0;
    if (!group) {
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, [&](long long i0, long long w) {
                k_encrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                    i0, n, k.ptr, kl, o.ptr, limb_major(o), m.ptr, m.lay, r_.ptr, r_.lay);
            });
        });
        return ok ? 0 : kErrSize;
    }
    auto run = [&](auto kernel, auto shape) {
        typedef decltype(shape) S;
        return exp_waves<S>(
            d, kernel, kl, t, n, [&](unsigned grid, size_t smem, long long i0, int win) {
                kernel<<<grid, kGroupBlock, smem, d.stream>>>(
                    i0, n, k.ptr, kl, win, o.ptr, limb_major(o), m.ptr, m.lay, r_.ptr, r_.lay);
            });
    };
    const bool wide = use_wide(d, t, k.glmax, normal_tpi(k.glmax), n);
    d.last_wide = wide;
    const bool ok =
        wide
            ? UNIFL_WITH_WIDE_SHAPE(k.glmax, r = run(k_encrypt_g<LM, true>, GroupShape<LM, true>()))
            : UNIFL_WITH_SHAPE(k.glmax, r = run(k_encrypt_g<LM, false>, GroupShape<LM, false>()));
    return ok ? r : kErrSize;
}

// Key-owner encryption with the CRT (both halves, the combine and the finish in one launch per
// wave); the group kernels run in the class of 4·max(Lp, Lq) limbs (owner_group_lmax), the
// one-thread ones in p²'s class with the n²-size numbers in twice that.
int launch_encrypt_owner(Device &d, const Key &k, bool group, Tuning t, long long n,
                         const DBatch &o, const View &m, const View &yp, const View &yq) {
    const int kl = k.words();
    int r = 0;
    const bool ok =
        group ? UNIFL_WITH_SHAPE(k.glmax,
                                 {
                                     typedef GroupShape<LM> S;
                                     r = exp_waves<S>(
                                         d, k_encrypt_owner_g<LM>, kl, t, n,
                                         [&](unsigned grid, size_t smem, long long i0, int win) {
                                             k_encrypt_owner_g<LM>
                                                 <<<grid, kGroupBlock, smem, d.stream>>>(
                                                     i0, n, k.ptr, kl, win, o.ptr, limb_major(o),
                                                     m.ptr, m.lay, yp.ptr, yp.lay, yq.ptr, yq.lay);
                                         });
                                     d.last_wide = 0;
                                 })
              : UNIFL_WITH_LMAX(k.lmax, {
                    const int tpb = block_size(LM);
                    in_waves(d, n, [&](long long i0, long long w) {
                        k_encrypt_owner<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                            i0, n, k.ptr, kl, o.ptr, limb_major(o), m.ptr, m.lay, yp.ptr, yp.lay,
                            yq.ptr, yq.lay);
                    });
                });
    return ok ? r : kErrSize;
}

int launch_decrypt(Device &d, const Key &k, bool group, Tuning t, long long n, const DBatch &o,
                   const View &c) {
    const int kl = k.words();
    int r = 0;
    const bool ok =
        group ? UNIFL_WITH_SHAPE(k.glmax,
                                 {
                                     typedef GroupShape<LM> S;
                                     r = exp_waves<S>(
                                         d, k_decrypt_g<LM>, kl, t, n,
                                         [&](unsigned grid, size_t smem, long long i0, int win) {
                                             k_decrypt_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                                                 i0, n, k.ptr, kl, win, o.ptr, limb_major(o), c.ptr,
                                                 c.lay);
                                         });
                                     d.last_wide = 0;
                                 })
              : UNIFL_WITH_LMAX(k.lmax, {
                    const int tpb = block_size(LM);
                    in_waves(d, n, [&](long long i0, long long w) {
                        k_decrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                            i0, n, k.ptr, kl, o.ptr, limb_major(o), c.ptr, c.lay);
                    });
                });
    return ok ? r : kErrSize;
}

}  // namespace rt
}  // namespace unifl_gpu

#ifdef UNIFL_WITH_CGBN
// Optional CGBN variant (needs CGBN_INCLUDE_DIR at build time; uses the device runtime).
#include <cstring>
using namespace unifl_gpu::rt;
#include "gpu_cgbn.cuh"
#endif

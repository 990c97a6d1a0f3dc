// UniFL gpu backend: CUDA kernels and their host runtime, built by nvcc into libunifl_gpu.so and
// loaded by unifl/backends/gpu/runtime.py with ctypes (a plain C ABI: the Python side needs no
// pybind11 build with nvcc, and a missing driver shows up as an error code, not an import failure).
//
// Kernels: each __global__ wrapper copies the key blob into shared memory (UniFL Alg. 4 lines 5-9),
// computes its instance index and calls a __host__ __device__ body.  Two families:
//   k_<op><LM>     one thread per instance, the bodies of kernels.cuh (64-bit limbs in local arrays);
//   k_<op>_g<LM>   one instance per group of TPI threads (Shape<LM> of kernels_group.cuh), the
//                  cooperative bodies of kernels_group.cuh with the lane policy WarpLanes<TPI>
//                  (32-bit words in registers, carries across lanes by shuffles and votes); their
//                  window tables live in shared memory, one slice per group after the key.
// The ops mont_prod_groups, mont_inverse and the two DJN fixed-base encryptions exist only as
// group kernels; mont_multi_exp has both (the group one finishes its reduction in the same launch).
//
// One device per caller: a key is uploaded to one device, and every op runs on its key's device.
// Splitting a batch over several GPUs is the scheduler's job (unifl.scheduler.multi, one gpu
// backend instance per device), so there is one splitting policy, not two nested ones.
//
// Residency: every op returns a *device batch* (DBatch): n elements of L limbs that stay in the
// memory of their device, limb-major (limb j of 32 neighbouring elements is one coalesced 256-byte
// load for a warp).  An op's operand is either such a batch on the op's device (no copy at all:
// chained SDK operations never leave the device) or host rows (staged through the device's pinned
// buffer into its scratch arena and read there element-major by the kernel, so uploads need no
// transpose).  Only unifl_gpu_batch_download copies back, after a device-side relayout to
// element-major rows.  A batch on another device is refused (kErrLayout); the caller moves it.
//
// Per device, created on first use: one non-blocking stream, one pinned staging buffer and one
// scratch arena (grown on demand, reused), a stream-ordered pool for batch memory (cudaMallocAsync),
// and counters of kernel launches and host<->device copies (unifl_gpu_counters), which the tests
// and benches read to check what an op costs in traffic.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "kernels_group.cuh"  // the cooperative bodies; includes kernels.cuh (the one-thread ones)

using unifl_gpu::Lay;
using unifl_gpu::u64;
namespace coop = unifl_gpu::coop;
typedef unifl_gpu::coop::u32 u32;

// An operand as the C interface receives it: a device batch, or host rows (element-major, `rows` of
// them: 1 = one row shared by the whole batch, else one per element) of `limbs` words.  Declared
// outside the unnamed namespace: a parameter type with internal linkage would give the extern "C"
// functions internal linkage too.
struct Operand {
    void *batch;
    const u64 *host;
    long long rows;
    int limbs;
};


// ------------------------------------------------------------------------------------- kernels
namespace {

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
__global__ void k_mul(long long n, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *a, Lay la,
                      const u64 *b, Lay lb, int mode) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_mul<LM>(i, k, out, lo, a, la, b, lb, mode);
}

template <int LM>
__global__ void k_exp(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *base, Lay lb,
                      const u64 *exps, int le, int e_shared, int mode) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_exp<LM>(i, k, out, lo, base, lb, exps, le, e_shared, mode);
}

template <int LM>
__global__ void k_powers(long long i0, long long n, const u64 *key, int key_len, u64 *scratch, Lay lay_s,
                         const u64 *bases, Lay lay_b, const u64 *exps, int le, long long N) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_multi_exp_powers<LM>(i, k, scratch, lay_s, bases, lay_b, exps, le, N);
}

template <int LM>
__global__ void k_prod_round(long long n, const u64 *key, int key_len, u64 *scratch, Lay lay_s,
                             long long N, long long cnt) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_prod_round<LM>(i, k, scratch, lay_s, N, cnt);
}

template <int LM>
__global__ void k_encrypt(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lay_2, const u64 *m,
                          Lay lay_m, const u64 *r, Lay lay_r) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_paillier_encrypt<LM>(i, k, out, lay_2, m, lay_m, r, lay_r);
}

template <int LM>
__global__ void k_encrypt_owner(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lay_2,
                                const u64 *m, Lay lay_m, const u64 *yp, Lay lay_p, const u64 *yq, Lay lay_q) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_paillier_encrypt_owner<LM>(i, k, out, lay_2, m, lay_m, yp, lay_p, yq, lay_q);
}

template <int LM>
__global__ void k_decrypt(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lay_n, const u64 *c,
                          Lay lay_2) {
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + instance();
    if (i < n) unifl_gpu::body_paillier_decrypt<LM>(i, k, out, lay_n, c, lay_2);
}

__global__ void k_relayout(long long n, int L, u64 *dst, Lay ld, const u64 *src, Lay ls) {
    const long long i = instance();
    if (i < n) unifl_gpu::body_relayout(i, L, dst, ld, src, ls);
}

// ---- group kernels (k_<op>_g<LM>).  Threads per block: 128, a multiple of 32 and of every TPI, so
// no group straddles a warp or a block.  Dynamic shared memory: the key blob (key_len words), then,
// for the bodies with a window table, one table_words<G, LPT>() slice of u32 per group of the block
// (the key is whole u64 words, so the tables start 8-byte aligned).  A group whose instance is past
// n returns as a whole, after the block's __syncthreads of the key staging: its lanes leave
// together, so the shuffles and votes of the groups that stay see full groups.
constexpr int kGroupBlock = 128;

template <int LM>
struct GroupShape {
    static constexpr int TPI = coop::Shape<LM>::TPI;
    static constexpr int LPT = coop::Shape<LM>::LPT;
    typedef coop::WarpLanes<TPI> G;
    static constexpr int kGroups = kGroupBlock / TPI;  // groups per block
    static constexpr int kTableWords = coop::table_words<G, LPT>();
    static_assert(kGroupBlock % 32 == 0 && kGroupBlock % TPI == 0, "whole groups, whole warps per block");
};

template <int LM>
__device__ __forceinline__ long long group_instance() {
    return (long long)blockIdx.x * (blockDim.x / GroupShape<LM>::TPI) + threadIdx.x / GroupShape<LM>::TPI;
}

// this group's window table: after the key, table_words apart
template <int LM>
__device__ __forceinline__ u32 *group_table(int key_len) {
    extern __shared__ u64 smem[];
    return reinterpret_cast<u32 *>(smem + key_len) +
           (threadIdx.x / GroupShape<LM>::TPI) * (unsigned)GroupShape<LM>::kTableWords;
}

// Launch bounds of the group kernels: at most kGroupBlock threads, and at least ONE block per SM.
// With the thread count alone, ptxas caps registers to fit more blocks (measured for sm_90: 96 or
// 80 registers and up to 140 B of spills in the 48/96-limb classes); one block lets it keep the
// numbers in registers, and the shared-memory tables bound the blocks per SM anyway (3 blocks of
// 64.5 KiB on an H100).
#define UNIFL_GROUP_BOUNDS __launch_bounds__(kGroupBlock, 1)

#define UNIFL_GROUP_TYPES(LM)             \
    typedef GroupShape<LM> S;             \
    typedef typename S::G G;              \
    constexpr int LPT = S::LPT

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_mul_g(long long n, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *a, Lay la, const u64 *b,
            Lay lb, int mode) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = group_instance<LM>();
    if (i >= n) return;
    coop::gbody_mul<G, LPT>(i, k, out, lo, a, la, b, lb, mode);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_exp_g(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *base, Lay lb,
            const u64 *exps, int le, int e_shared, int mode) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + group_instance<LM>();
    if (i >= n) return;
    coop::gbody_exp<G, LPT>(i, k, group_table<LM>(key_len), out, lo, base, lb, exps, le, e_shared, mode);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_multi_exp_g(long long inst, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *bases, Lay lb,
                  const u64 *exps, int le, long long N, long long P, long long chunk, u64 *scratch,
                  unsigned int *counters) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = group_instance<LM>();
    if (i >= inst) return;
    coop::gbody_multi_exp<G, LPT>(i, k, group_table<LM>(key_len), out, lo, bases, lb, exps, le, N, P, chunk,
                                  scratch, counters);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_encrypt_g(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lay_2, const u64 *m,
                Lay lay_m, const u64 *r, Lay lay_r) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + group_instance<LM>();
    if (i >= n) return;
    coop::gbody_paillier_encrypt<G, LPT>(i, k, group_table<LM>(key_len), out, lay_2, m, lay_m, r, lay_r);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_encrypt_owner_g(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lay_2, const u64 *m,
                      Lay lay_m, const u64 *yp, Lay lay_p, const u64 *yq, Lay lay_q) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + group_instance<LM>();
    if (i >= n) return;
    coop::gbody_paillier_encrypt_owner<G, LPT>(i, k, group_table<LM>(key_len), out, lay_2, m, lay_m, yp, lay_p,
                                               yq, lay_q);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_decrypt_g(long long i0, long long n, const u64 *key, int key_len, u64 *out, Lay lay_n, const u64 *c,
                Lay lay_2) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = i0 + group_instance<LM>();
    if (i >= n) return;
    coop::gbody_paillier_decrypt<G, LPT>(i, k, group_table<LM>(key_len), out, lay_n, c, lay_2);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_prod_groups_g(long long chunks, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *a, Lay la,
                    const long long *order, const long long *plan, u64 *scratch, unsigned int *counters) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = group_instance<LM>();
    if (i >= chunks) return;
    coop::gbody_prod_groups<G, LPT>(i, k, out, lo, a, la, order, plan, scratch, counters);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_inverse_g(long long inst, const u64 *key, int key_len, u64 *out, Lay lo, const u64 *a, Lay la, long long n,
                long long chunk, unsigned int *bad) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = group_instance<LM>();
    if (i >= inst) return;
    coop::gbody_inverse<G, LPT>(i, k, out, lo, a, la, n, chunk, bad);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_fixed_base_g(long long n, const u64 *key, int key_len, const u64 *table, int w, int nwin, u64 *out,
                   Lay lay_2, const u64 *m, Lay lay_m, const u64 *a, int La) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = group_instance<LM>();
    if (i >= n) return;
    coop::gbody_fixed_base<G, LPT>(i, k, table, w, nwin, out, lay_2, m, lay_m, a, La);
}

template <int LM>
__global__ void UNIFL_GROUP_BOUNDS
    k_owner_fixed_base_g(long long n, const u64 *key, int key_len, const u64 *tp, const u64 *tq, int w, int nwin,
                         u64 *out, Lay lay_2, const u64 *m, Lay lay_m, const u64 *a, int La) {
    UNIFL_GROUP_TYPES(LM);
    const u64 *k = stage_key(key, key_len);
    const long long i = group_instance<LM>();
    if (i >= n) return;
    coop::gbody_owner_fixed_base<G, LPT>(i, k, tp, tq, w, nwin, out, lay_2, m, lay_m, a, La);
}

#undef UNIFL_GROUP_TYPES
#undef UNIFL_GROUP_BOUNDS

// Threads per block of the one-thread kernels: big local frames (the 16-entry window table) favour
// smaller blocks at large L.
inline int block_size(int lmax) { return lmax >= 64 ? 64 : 128; }
inline unsigned grid_size(long long n, int tpb) { return (unsigned)((n + tpb - 1) / tpb); }

// Blocks of a group launch of `inst` instances (kGroupBlock / TPI groups per block).
template <int LM>
unsigned group_grid(long long inst) {
    return (unsigned)((inst + GroupShape<LM>::kGroups - 1) / GroupShape<LM>::kGroups);
}

// Dynamic shared memory of a group launch: the key, then (tables) one window table per group.
template <int LM>
size_t group_smem(int key_len, bool tables) {
    typedef GroupShape<LM> S;
    return size_t(key_len) * 8 + (tables ? size_t(S::kGroups) * S::kTableWords * 4 : 0);
}

// Exponentiation-class kernels run in waves of at most wave_size(LMAX) instances, one launch each.
// Why: every thread of the one-thread kernels keeps a 16-entry window table (16·LMAX limbs) and
// temporaries in local memory, and past a point more threads in flight make throughput *drop*
// (their working set falls out of the caches).  The sizes compared and the measurements behind 16384
// are in docs/gpu.md ("Wave size"); the 96/128-limb classes (> 4096-bit moduli) were not measured and
// use the same.  The group kernels (tables in shared memory, numbers in registers) use the same
// wave size until a device measurement says otherwise (bench/bench_gpu_waves.py runs both).
// UNIFL_GPU_WAVE overrides it for both families (0: one launch).
long long g_wave_override = -1;

inline long long wave_size(int /*lmax*/) {
    if (g_wave_override >= 0) return g_wave_override ? g_wave_override : (1LL << 62);
    return 16384;
}

// ------------------------------------------------------------------------------------- runtime
constexpr int kErrSize = -1;      // a size outside what the kernels are instantiated for
constexpr int kErrNoDevice = -2;  // no device initialised, or a device index out of range
constexpr int kErrAlloc = -3;     // host allocation failed
constexpr int kErrLayout = -4;    // a device batch (or table) lives on another device than the op's key
constexpr int kErrShape = -5;     // an operand's row or limb count does not fit the op
constexpr int kErrSmem = -6;      // a group launch needs more shared memory per block than the device has
constexpr int kMaxSharedKey = 48 * 1024;

struct Device {
    int id = 0;
    cudaStream_t stream = nullptr;
    std::mutex mu;                 // one op at a time per device (pinned/arena reuse)
    u64 *pinned = nullptr;         // host staging (cudaHostAlloc)
    size_t pinned_words = 0;
    u64 *arena = nullptr;          // device scratch for staged host operands
    size_t arena_words = 0;
    size_t smem_optin = 48 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
    // the dynamic shared memory each group kernel was allowed on this device (under mu)
    std::map<const void *, size_t> smem_allowed;
    // traffic counters: kernel launches, host->device and device->host copies
    std::atomic<long long> launches{0}, uploads{0}, downloads{0};

    cudaError_t reserve(size_t host_words, size_t dev_words) {
        cudaError_t e;
        if (host_words > pinned_words) {
            if (pinned) cudaFreeHost(pinned);
            pinned = nullptr;
            pinned_words = 0;
            if ((e = cudaHostAlloc((void **)&pinned, host_words * 8, cudaHostAllocDefault))) return e;
            pinned_words = host_words;
        }
        if (dev_words > arena_words) {
            if (arena) cudaFree(arena);
            arena = nullptr;
            arena_words = 0;
            if ((e = cudaMalloc((void **)&arena, dev_words * 8))) return e;
            arena_words = dev_words;
        }
        return cudaSuccess;
    }
};

int g_device_count = 0;
std::vector<Device *> g_devices;   // index = CUDA device id; created on first use
std::mutex g_devices_mu;
std::once_flag g_init_once;
int g_init_error = 0;

void init_runtime() {
    if (const char *w = std::getenv("UNIFL_GPU_WAVE")) g_wave_override = std::atoll(w);
    cudaError_t e = cudaGetDeviceCount(&g_device_count);
    if (e != cudaSuccess) {
        g_device_count = 0;
        g_init_error = (int)e;
        return;
    }
    if (g_device_count <= 0) {
        g_init_error = kErrNoDevice;
        return;
    }
    g_devices.assign(size_t(g_device_count), nullptr);
}

int ensure_init() {
    std::call_once(g_init_once, init_runtime);
    return g_init_error;
}

// The Device of CUDA device `id`, its stream created on first use (a context is made only on the
// devices an engine is opened on).
int open_device(int id, Device **out) {
    *out = nullptr;
    int e = ensure_init();
    if (e) return e;
    if (id < 0 || id >= g_device_count) return kErrNoDevice;
    std::lock_guard<std::mutex> g(g_devices_mu);
    if (!g_devices[size_t(id)]) {
        Device *dev = new (std::nothrow) Device();
        if (!dev) return kErrAlloc;
        dev->id = id;
        cudaError_t ce;
        int optin = 0;
        if ((ce = cudaSetDevice(id)) || (ce = cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking)) ||
            (ce = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, id))) {
            delete dev;
            return (int)ce;
        }
        dev->smem_optin = size_t(std::max(optin, 48 * 1024));
        g_devices[size_t(id)] = dev;
    }
    *out = g_devices[size_t(id)];
    return 0;
}

// Runs fn(device) with the device's mutex held and the device current on this thread.
template <class F>
int on_device(Device &d, F fn) {
    std::lock_guard<std::mutex> lock(d.mu);
    cudaError_t e = cudaSetDevice(d.id);
    return e ? (int)e : fn(d);
}

int finish(Device &d) {
    cudaError_t e = cudaGetLastError();
    if (e) return (int)e;
    return (int)cudaStreamSynchronize(d.stream);
}

// Launch helper: counts the launch on the device.
template <class Launch>
void launch(Device &d, Launch l) {
    l();
    d.launches += 1;
}

template <class Launch>
void in_waves(Device &d, long long n, int lmax, Launch l) {
    const long long w = wave_size(lmax);
    for (long long i0 = 0; i0 < n; i0 += w) launch(d, [&] { l(i0, std::min(n, i0 + w) - i0); });
}

// Lets `kernel` take `bytes` of dynamic shared memory per block on d (with d.mu held).  Past 48 KiB
// a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize, per kernel and device; set once
// and remembered); past the device's opt-in limit no launch can work, so the op is refused with
// kErrSmem rather than failing at launch.  The group kernels with window tables need it: 128
// threads of LPT = 8 take 64.5 KiB of tables per block (16 entries of LPT words per thread).
int allow_smem(Device &d, const void *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return 0;
    if (bytes > d.smem_optin) return kErrSmem;
    size_t &allowed = d.smem_allowed[kernel];
    if (allowed >= bytes) return 0;
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e) return (int)e;
    allowed = bytes;
    return 0;
}

// Grid of a one-launch group op: kErrShape past what one launch can address.
template <int LM>
int one_launch_grid(long long inst, unsigned *grid) {
    const long long blocks = (inst + GroupShape<LM>::kGroups - 1) / GroupShape<LM>::kGroups;
    if (inst <= 0 || blocks > INT_MAX) return kErrShape;
    *grid = (unsigned)blocks;
    return 0;
}

// A key blob on the host and on its device.  lmax: the one-thread kernels' class of the key, glmax
// the group kernels' (for the CRT keys the class of 4·max(Lp, Lq) limbs, owner_group_lmax /
// priv_group_lmax); 0: that family does not take the key (a call with it is kErrSize).
struct Key {
    std::vector<u64> host;
    Device *dev = nullptr;
    u64 *ptr = nullptr;
    int lmax = 0;
    int glmax = 0;
};

// A comb table of the DJN fixed-base kernels (nwin·(2^w − 1) entries of one modulus' L limbs,
// element-major), resident in plain device memory: at 10-bit windows it is megabytes, far past
// shared memory, and every group reads a different entry per window anyway.
struct Table {
    Device *dev = nullptr;
    u64 *ptr = nullptr;
    long long words = 0;
};

// ---- device batches: n elements of L limbs on one device, limb-major
// (limb j of element i at ptr[j·n + i])
struct DBatch {
    long long n = 0;
    int L = 0;
    Device *dev = nullptr;
    u64 *ptr = nullptr;
};

Lay limb_major(const DBatch &b) { return Lay{1, b.n}; }

void free_batch(DBatch *b) {
    if (!b) return;
    if (b->ptr) {
        cudaSetDevice(b->dev->id);
        cudaFreeAsync(b->ptr, b->dev->stream);
    }
    delete b;
}

// Where a kernel reads an operand: its pointer and layout.
struct View {
    const u64 *ptr;
    Lay lay;
};

// A block of host words to stage.
struct HostBlock {
    const void *host;
    size_t words;
};

// Host blocks staged into the device arena: one memcpy each into pinned memory and one
// host-to-device copy for all of them; dev[j] is where block j lies.  `extra_dev_words` of arena
// after them are reserved for the op (scratch, counters), starting at *rest.
int stage_blocks(Device &d, const std::vector<HostBlock> &blocks, std::vector<u64 *> &dev,
                 size_t extra_dev_words = 0, u64 **rest = nullptr) {
    size_t total = 0;
    for (const HostBlock &b : blocks) total += b.words;
    cudaError_t e = d.reserve(std::max<size_t>(total, 1), total + extra_dev_words + 1);
    if (e) return (int)e;
    size_t off = 0;
    dev.clear();
    for (const HostBlock &b : blocks) {
        if (b.words) std::memcpy(d.pinned + off, b.host, b.words * 8);
        dev.push_back(d.arena + off);
        off += b.words;
    }
    if (total) {
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, total * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        d.uploads += 1;
    }
    if (rest) *rest = d.arena + total;
    return 0;
}

// Host operands of an op staged into the device arena (stage_blocks); each then reads element-major
// (Lay{limbs, 1}) or, for a shared row, Lay{0, 1}.
int stage(Device &d, long long cnt, const std::vector<const Operand *> &ops, std::vector<View> &out,
          size_t extra_dev_words = 0, u64 **rest = nullptr) {
    std::vector<HostBlock> blocks;
    for (const Operand *o : ops) blocks.push_back(HostBlock{o->host, size_t(o->rows == 1 ? 1 : cnt) * o->limbs});
    std::vector<u64 *> dev;
    int r = stage_blocks(d, blocks, dev, extra_dev_words, rest);
    if (r) return r;
    out.clear();
    for (size_t j = 0; j < ops.size(); ++j) {
        View s;
        s.ptr = dev[j];
        s.lay.se = ops[j]->rows == 1 ? 0 : ops[j]->limbs;   // (a conditional of two Lay{...} crashes cicc 13.0)
        s.lay.sl = 1;
        out.push_back(s);
    }
    return 0;
}

// Checks an operand against the op's element count, limb width and device.
int check_operand(const Operand &o, long long n, int limbs, const Device &d) {
    if (o.batch) {
        const DBatch *b = (const DBatch *)o.batch;
        if (b->n != n || b->L != limbs) return kErrShape;
        return b->dev == &d ? 0 : kErrLayout;
    }
    if (!o.host || (o.rows != 1 && o.rows != n) || o.limbs != limbs) return kErrShape;
    return 0;
}

// Runs fn(device, result) for an op whose result (n rows of out_L limbs on d) is allocated here,
// with the device's mutex held; *out set only on success (the result is freed on failure).
template <class F>
int with_result(Device &d, long long n, int out_L, void **out, F fn) {
    *out = nullptr;
    if (n <= 0 || out_L <= 0) return kErrShape;
    DBatch *res = new (std::nothrow) DBatch();
    if (!res) return kErrAlloc;
    res->n = n;
    res->L = out_L;
    res->dev = &d;
    int e = on_device(d, [&](Device &dv) -> int {
        int r = (int)cudaMallocAsync((void **)&res->ptr, size_t(n) * out_L * 8 + 8, dv.stream);
        return r ? r : fn(dv, *res);
    });
    if (e) {
        free_batch(res);
        return e;
    }
    *out = res;
    return 0;
}

// Runs an op of n elements on device d: every operand checked; the output (out_L limbs) allocated;
// the host operands staged (with `extra_dev_words` of arena after them, at `rest`);
// fn(device, output, views, rest) called, views[j] being where input j lies (its batch for a device
// batch, else its staged rows); *out set only on success.
template <class F>
int run_op(Device &d, long long n, std::vector<const Operand *> inputs, std::vector<int> widths, int out_L,
           void **out, F fn, size_t extra_dev_words = 0) {
    *out = nullptr;
    if (n <= 0 || out_L <= 0) return kErrShape;
    int e;
    for (size_t j = 0; j < inputs.size(); ++j)
        if ((e = check_operand(*inputs[j], n, widths[j], d))) return e;
    std::vector<const Operand *> hosts;
    for (const Operand *o : inputs)
        if (!o->batch) hosts.push_back(o);
    return with_result(d, n, out_L, out, [&](Device &dv, DBatch &res) -> int {
        std::vector<View> staged, views;
        u64 *rest = nullptr;
        int r = stage(dv, n, hosts, staged, extra_dev_words, &rest);
        if (r) return r;
        size_t next = 0;
        for (const Operand *o : inputs) {
            if (o->batch) {
                const DBatch *b = (const DBatch *)o->batch;
                views.push_back(View{b->ptr, limb_major(*b)});
            } else {
                views.push_back(staged[next++]);
            }
        }
        return fn(dv, res, views, rest);
    });
}

// The exponent rows a (n, La) must not reach past the `covered` bits the comb table covers (a longer
// one would be cut silently by the kernel); the same check as the host harness's check_exponents.
bool exponents_fit(const u64 *a, long long n, int La, long long covered) {
    for (int l = 0; l < La; ++l) {
        const long long lo = 64LL * l;
        const u64 keep = covered >= lo + 64 ? ~0ull : covered <= lo ? 0ull : ((1ull << (covered - lo)) - 1);
        if (keep == ~0ull) continue;
        for (long long i = 0; i < n; ++i)
            if (a[i * La + l] & ~keep) return false;
    }
    return true;
}

// A table handle of the op's device holding nwin·(2^w − 1) entries of L limbs.
int check_table(const void *t, const Device &d, int w, int nwin, int L) {
    const Table *tb = (const Table *)t;
    if (!tb || w < 1 || w > 16 || nwin < 1) return kErrShape;
    if (tb->dev != &d) return kErrLayout;
    return tb->words == (long long)nwin * ((1LL << w) - 1) * L ? 0 : kErrShape;
}

}  // namespace

// ---------------------------------------------------------------------------------- C interface
extern "C" {

// cudaGetDeviceCount's status (35: no/insufficient driver, 100: no device) and the count.
int unifl_gpu_device_count(int *count) {
    *count = 0;
    int e = ensure_init();
    if (e) return e;
    *count = g_device_count;
    return 0;
}

const char *unifl_gpu_error_string(int err) {
    if (err == kErrSize) return "operand size outside the instantiated kernels (up to 8192 bits)";
    if (err == kErrNoDevice) return "no such CUDA device";
    if (err == kErrAlloc) return "host allocation failed";
    if (err == kErrLayout) return "a device batch or table lives on another device than the operation";
    if (err == kErrShape) return "operand rows or limbs do not fit the operation";
    if (err == kErrSmem)
        return "the group kernel needs more shared memory per block (key blob and window tables) than "
               "this device allows";
    return cudaGetErrorString((cudaError_t)err);
}

int unifl_gpu_device_name(int dev, char *buf, int len) {
    cudaDeviceProp prop;
    cudaError_t e = cudaGetDeviceProperties(&prop, dev);
    if (e) return (int)e;
    std::strncpy(buf, prop.name, (size_t)len - 1);
    buf[len - 1] = 0;
    return 0;
}

// Kernel launches, host->device copies and device->host copies on a device since it was opened
// (key uploads included); zeros for a device not opened yet.
int unifl_gpu_counters(int device, long long *out3) {
    out3[0] = out3[1] = out3[2] = 0;
    int e = ensure_init();
    if (e) return e;
    if (device < 0 || device >= g_device_count) return kErrNoDevice;
    std::lock_guard<std::mutex> g(g_devices_mu);
    const Device *d = g_devices[size_t(device)];
    if (d) {
        out3[0] = d->launches.load();
        out3[1] = d->uploads.load();
        out3[2] = d->downloads.load();
    }
    return 0;
}

// kind: 0 ModCtx, 1 Paillier public key, 2 Paillier private key (decryption), 3 key-owner
// encryption; uploaded to `device` only.  kErrSize when neither kernel family takes the key.
int unifl_gpu_key_upload(const u64 *blob, long long len, int kind, int device, void **handle) {
    *handle = nullptr;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Key *k = new (std::nothrow) Key();
    if (!k) return kErrAlloc;
    k->host.assign(blob, blob + len);
    k->dev = d;
    k->lmax = kind == 0 ? unifl_gpu::ctx_lmax(blob) : kind == 1 ? unifl_gpu::pub_lmax(blob)
              : kind == 2 ? unifl_gpu::priv_lmax(blob) : kind == 3 ? unifl_gpu::owner_lmax(blob) : 0;
    k->glmax = kind == 0 ? unifl_gpu::ctx_lmax(blob) : kind == 1 ? unifl_gpu::pub_lmax(blob)
               : kind == 2 ? coop::priv_group_lmax(blob) : kind == 3 ? coop::owner_group_lmax(blob) : 0;
    if ((!k->lmax && !k->glmax) || len * 8 > kMaxSharedKey) {
        delete k;
        return kErrSize;
    }
    e = on_device(*d, [&](Device &dv) -> int {
        cudaError_t ce;
        if ((ce = cudaMalloc((void **)&k->ptr, len * 8))) return (int)ce;
        if ((ce = cudaMemcpy(k->ptr, blob, len * 8, cudaMemcpyHostToDevice))) return (int)ce;
        dv.uploads += 1;
        return 0;
    });
    if (e) {
        if (k->ptr) {
            cudaSetDevice(d->id);
            cudaFree(k->ptr);
        }
        delete k;
        return e;
    }
    *handle = k;
    return 0;
}

// The size classes (in 64-bit limbs) a key runs in: one-thread kernels, group kernels; 0 = that
// family does not take the key.
void unifl_gpu_key_classes(void *key, int *lmax, int *glmax) {
    const Key *k = (const Key *)key;
    *lmax = k->lmax;
    *glmax = k->glmax;
}

void unifl_gpu_key_free(void *handle) {
    Key *k = (Key *)handle;
    if (!k) return;
    if (k->ptr) {
        cudaSetDevice(k->dev->id);
        cudaFree(k->ptr);
    }
    delete k;
}

// ---- fixed-base comb tables: uploaded once per key (one upload), resident until freed
int unifl_gpu_table_upload(const u64 *host, long long words, int device, void **handle) {
    *handle = nullptr;
    if (!host || words <= 0) return kErrShape;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Table *t = new (std::nothrow) Table();
    if (!t) return kErrAlloc;
    t->dev = d;
    t->words = words;
    e = on_device(*d, [&](Device &dv) -> int {
        cudaError_t ce;
        if ((ce = cudaMalloc((void **)&t->ptr, size_t(words) * 8))) return (int)ce;
        if ((ce = cudaMemcpy(t->ptr, host, size_t(words) * 8, cudaMemcpyHostToDevice))) return (int)ce;
        dv.uploads += 1;
        return 0;
    });
    if (e) {
        if (t->ptr) {
            cudaSetDevice(d->id);
            cudaFree(t->ptr);
        }
        delete t;
        return e;
    }
    *handle = t;
    return 0;
}

void unifl_gpu_table_free(void *handle) {
    Table *t = (Table *)handle;
    if (!t) return;
    if (t->ptr) {
        cudaSetDevice(t->dev->id);
        cudaFree(t->ptr);
    }
    delete t;
}

// ---- device batches: upload, download, shape, free
// rows (n, L) element-major host -> a new device batch on `device`.
int unifl_gpu_batch_upload(const u64 *host, long long n, int L, int device, void **out) {
    *out = nullptr;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Operand src{nullptr, host, n, L};
    return run_op(*d, n, {&src}, {L}, L, out, [&](Device &dv, DBatch &o, const std::vector<View> &v, u64 *) -> int {
        launch(dv, [&] {
            k_relayout<<<grid_size(n, 256), 256, 0, dv.stream>>>(n, L, o.ptr, limb_major(o), v[0].ptr, v[0].lay);
        });
        return finish(dv);
    });
}

// device batch -> (n, L) element-major host rows (relayout on the device, then one copy).
int unifl_gpu_batch_download(void *batch, u64 *host) {
    DBatch *b = (DBatch *)batch;
    const long long n = b->n;
    const int L = b->L;
    return on_device(*b->dev, [&](Device &d) -> int {
        const size_t w = size_t(n) * L;
        cudaError_t e = d.reserve(w, w);
        if (e) return (int)e;
        launch(d, [&] {
            k_relayout<<<grid_size(n, 256), 256, 0, d.stream>>>(n, L, d.arena, Lay{L, 1}, b->ptr, limb_major(*b));
        });
        if ((e = cudaMemcpyAsync(d.pinned, d.arena, w * 8, cudaMemcpyDeviceToHost, d.stream))) return (int)e;
        d.downloads += 1;
        int r = finish(d);
        if (!r) std::memcpy(host, d.pinned, w * 8);
        return r;
    });
}

// n, L and the device of a batch.
void unifl_gpu_batch_shape(void *batch, long long *n, int *L, int *device) {
    const DBatch *b = (const DBatch *)batch;
    *n = b->n;
    *L = b->L;
    *device = b->dev->id;
}

void unifl_gpu_batch_free(void *batch) { free_batch((DBatch *)batch); }

// ---- ops: every result is a new device batch (*out) on the key's device.  `group` != 0 runs the
// cooperative kernel (k_<op>_g) of the key's group class; kErrSize when that family does not take
// the key (no silent switch to the other family: the caller chose it).
// out = a·b·R^-1 (mode 0) or a·b mod m (mode 1); b may be one shared host row.
int unifl_gpu_mul(void *key, Operand a, Operand b, long long n, int mode, int group, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    return run_op(*k.dev, n, {&a, &b}, {L, L}, L, out, [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        const View &va = v[0], &vb = v[1];
        int r = 0;
        const bool ok = group ? UNIFL_WITH_SHAPE(k.glmax, {
            unsigned grid = 0;
            if (!(r = one_launch_grid<LM>(n, &grid)) && !(r = allow_smem(d, (const void *)k_mul_g<LM>, group_smem<LM>(kl, false))))
                launch(d, [&] {
                    k_mul_g<LM><<<grid, kGroupBlock, group_smem<LM>(kl, false), d.stream>>>(
                        n, k.ptr, kl, o.ptr, limb_major(o), va.ptr, va.lay, vb.ptr, vb.lay, mode);
                });
        }) : UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            launch(d, [&] {
                k_mul<LM><<<grid_size(n, tpb), tpb, kl * 8, d.stream>>>(n, k.ptr, kl, o.ptr, limb_major(o), va.ptr,
                                                                        va.lay, vb.ptr, vb.lay, mode);
            });
        });
        return !ok ? kErrSize : r ? r : finish(d);
    });
}

// out = base^e (mode 1: plain in/out) or x̄^e in the domain (mode 0); exps: host rows (n|1, le).
int unifl_gpu_exp(void *key, Operand base, Operand exps, long long n, int mode, int group, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (exps.batch || exps.limbs < 1) return kErrShape;
    if (group && !k.glmax) return kErrSize;
    return run_op(*k.dev, n, {&base, &exps}, {L, exps.limbs}, L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        const View &vb = v[0], &ve = v[1];
        const int shared = exps.rows == 1 && n != 1;
        int r = 0;
        const bool ok = group ? UNIFL_WITH_SHAPE(k.glmax, {
            const size_t smem = group_smem<LM>(kl, true);
            if (!(r = allow_smem(d, (const void *)k_exp_g<LM>, smem)))
                in_waves(d, n, LM, [&](long long i0, long long w) {
                    k_exp_g<LM><<<group_grid<LM>(w), kGroupBlock, smem, d.stream>>>(
                        i0, n, k.ptr, kl, o.ptr, limb_major(o), vb.ptr, vb.lay, ve.ptr, exps.limbs, shared, mode);
                });
        }) : UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_exp<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, n, k.ptr, kl, o.ptr, limb_major(o),
                                                                        vb.ptr, vb.lay, ve.ptr, exps.limbs, shared,
                                                                        mode);
            });
        });
        return !ok ? kErrSize : r ? r : finish(d);
    });
}

// out[kk] = prod_i bases_i^exps[kk, i] (Montgomery form), kk < K (UniFL Alg. 5).  exps: host
// (K, N, le), staged with the bases (host bases) into the arena.
//   group == 0: K·N powers into a scratch after them (waves), then log2(N) halving rounds (one launch
//               each), then a relayout of the K products;
//   group != 0: ONE launch of K·P groups, P = ceil(N / chunk): each multiplies the powers of its
//               `chunk` columns, and the last part of a row to arrive multiplies the row's P partials
//               (scratch: K·P rows, element-major; K counters zeroed before the launch).
int unifl_gpu_multi_exp(void *key, Operand bases, long long N, const u64 *exps, long long K, int le, int group,
                        long long chunk, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (N <= 0 || K <= 0 || le < 1 || !exps || (group && chunk < 1)) return kErrShape;
    if (group && !k.glmax) return kErrSize;
    if (bases.batch) {
        const DBatch *b = (const DBatch *)bases.batch;
        if (b->n != N || b->L != L) return kErrShape;
        if (b->dev != k.dev) return kErrLayout;
    } else if (!bases.host || bases.rows != N || bases.limbs != L) {
        return kErrShape;
    }
    return with_result(*k.dev, K, L, out, [&](Device &d, DBatch &res) -> int {
        const long long S = K * N;
        std::vector<HostBlock> hs{HostBlock{exps, size_t(S) * le}};
        if (!bases.batch) hs.push_back(HostBlock{bases.host, size_t(N) * L});
        const u64 *bptr = bases.batch ? ((const DBatch *)bases.batch)->ptr : nullptr;
        const Lay lay_b = bases.batch ? Lay{1, N} : Lay{L, 1};
        std::vector<u64 *> st;
        u64 *rest = nullptr;
        int r = 0;
        if (group) {
            const long long P = (N + chunk - 1) / chunk;
            const size_t scratch_words = P > 1 ? size_t(K * P) * L : 0;
            if ((r = stage_blocks(d, hs, st, scratch_words + size_t(K + 1) / 2, &rest))) return r;
            if (!bases.batch) bptr = st[1];
            u64 *scratch = rest;
            unsigned int *counters = reinterpret_cast<unsigned int *>(rest + scratch_words);
            if ((r = (int)cudaMemsetAsync(counters, 0, size_t(K) * sizeof(unsigned int), d.stream))) return r;
            const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
                const size_t smem = group_smem<LM>(kl, true);
                unsigned grid = 0;
                if (!(r = one_launch_grid<LM>(K * P, &grid)) && !(r = allow_smem(d, (const void *)k_multi_exp_g<LM>, smem)))
                    launch(d, [&] {
                        k_multi_exp_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                            K * P, k.ptr, kl, res.ptr, limb_major(res), bptr, lay_b, st[0], le, N, P, chunk,
                            scratch, counters);
                    });
            });
            return !ok ? kErrSize : r ? r : finish(d);
        }
        const size_t ws = size_t(S) * L;
        if ((r = stage_blocks(d, hs, st, ws, &rest))) return r;
        if (!bases.batch) bptr = st[1];
        u64 *scratch = rest;
        const Lay lay_s{1, S};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, S, LM, [&](long long i0, long long w) {
                k_powers<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, S, k.ptr, kl, scratch, lay_s, bptr,
                                                                           lay_b, st[0], le, N);
            });
            for (long long cnt = N; cnt > 1; cnt = (cnt + 1) / 2) {
                const long long inst = K * (cnt - (cnt + 1) / 2);
                launch(d, [&] {
                    k_prod_round<LM><<<grid_size(inst, tpb), tpb, kl * 8, d.stream>>>(inst, k.ptr, kl, scratch,
                                                                                      lay_s, N, cnt);
                });
            }
        });
        if (!ok) return kErrSize;
        // element kk·N of the scratch is row kk's product: gather them into the output
        launch(d, [&] {
            k_relayout<<<grid_size(K, 256), 256, 0, d.stream>>>(K, L, res.ptr, limb_major(res), scratch, Lay{N, S});
        });
        return finish(d);
    });
}

// Grouped products (mont_prod_groups) in one launch: out[g] = Π_{rows of group g} a (Montgomery
// form), num_groups rows.  order (n int64): the rows group by group; plan (chunks × 5 int64): one
// row [group, begin, end, first chunk of the group, chunks of the group] per group of threads
// (begin/end index order); an empty group has one empty chunk (R mod m).  Both are host arrays,
// staged with a host `a`.  The kernel trusts them, so every index is checked here first: a stray
// one would read or write out of bounds, and a device fault poisons the whole CUDA context.
int unifl_gpu_prod_groups(void *key, Operand a, long long n, const long long *order, const long long *plan,
                          long long chunks, long long num_groups, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (n < 0 || chunks < 1 || num_groups < 1 || !plan || (n > 0 && !order)) return kErrShape;
    if (!k.glmax) return kErrSize;
    int e = n > 0 ? check_operand(a, n, L, *k.dev) : 0;
    if (e) return e;
    if (n > 0 && !a.batch && a.rows != n) return kErrShape;   // one shared row is no grouped input
    {
        std::vector<char> seen(size_t(n), 0), covered(size_t(num_groups), 0);
        for (long long j = 0; j < n; ++j) {
            if (order[j] < 0 || order[j] >= n || seen[size_t(order[j])]) return kErrShape;
            seen[size_t(order[j])] = 1;
        }
        for (long long c = 0; c < chunks; ++c) {
            const long long *r = plan + c * 5;
            if (!(r[0] >= 0 && r[0] < num_groups && 0 <= r[1] && r[1] <= r[2] && r[2] <= n && r[4] >= 1 &&
                  r[3] >= 0 && r[3] + r[4] <= chunks && c >= r[3] && c < r[3] + r[4]))
                return kErrShape;
            // the chunks of one group agree on it (the counter's last arrival is chunks − 1)
            const long long *f = plan + r[3] * 5;
            if (f[0] != r[0] || f[3] != r[3] || f[4] != r[4]) return kErrShape;
            covered[size_t(r[0])] = 1;
        }
        // every group has a chunk: a group without one would leave its output row unwritten
        if (std::find(covered.begin(), covered.end(), 0) != covered.end()) return kErrShape;
    }
    return with_result(*k.dev, num_groups, L, out, [&](Device &d, DBatch &res) -> int {
        std::vector<HostBlock> hs{HostBlock{plan, size_t(chunks) * 5}};
        if (n > 0) hs.push_back(HostBlock{order, size_t(n)});
        if (n > 0 && !a.batch) hs.push_back(HostBlock{a.host, size_t(n) * L});
        const size_t scratch_words = size_t(chunks) * L;
        std::vector<u64 *> st;
        u64 *rest = nullptr;
        int r = stage_blocks(d, hs, st, scratch_words + size_t(num_groups + 1) / 2, &rest);
        if (r) return r;
        const long long *dplan = reinterpret_cast<const long long *>(st[0]);
        const long long *dorder = n > 0 ? reinterpret_cast<const long long *>(st[1]) : nullptr;
        const u64 *aptr = n == 0 ? nullptr : a.batch ? ((const DBatch *)a.batch)->ptr : st[2];
        Lay lay_a;   // (a conditional of two Lay{...} crashes cicc 13.0)
        lay_a.se = a.batch ? 1 : L;
        lay_a.sl = a.batch ? n : 1;
        u64 *scratch = rest;
        unsigned int *counters = reinterpret_cast<unsigned int *>(rest + scratch_words);
        if ((r = (int)cudaMemsetAsync(counters, 0, size_t(num_groups) * sizeof(unsigned int), d.stream))) return r;
        const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
            unsigned grid = 0;
            const size_t smem = group_smem<LM>(kl, false);
            if (!(r = one_launch_grid<LM>(chunks, &grid)) && !(r = allow_smem(d, (const void *)k_prod_groups_g<LM>, smem)))
                launch(d, [&] {
                    k_prod_groups_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                        chunks, k.ptr, kl, res.ptr, limb_major(res), aptr, lay_a, dorder, dplan, scratch, counters);
                });
        });
        return !ok ? kErrSize : r ? r : finish(d);
    });
}

// Batch inversion (mont_inverse): out_i = a_i^-1·R for Montgomery-form a (n rows), one group per
// `chunk` rows (Montgomery's trick), one launch.  *bad: the number of chunks holding a row that
// shares a factor with the modulus (their rows are then undefined; the caller refuses the batch),
// copied back after the launch (counted as a download).
int unifl_gpu_inverse(void *key, Operand a, long long n, long long chunk, void **out, unsigned int *bad) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    *bad = 0;
    if (chunk < 1) return kErrShape;
    if (!k.glmax) return kErrSize;
    if (!a.batch && a.rows != n) return kErrShape;   // a shared row: no batch to invert
    const long long inst = n > 0 ? (n + chunk - 1) / chunk : 0;
    return run_op(*k.dev, n, {&a}, {L}, L, out, [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *rest) {
        unsigned int *dbad = reinterpret_cast<unsigned int *>(rest);
        int r = (int)cudaMemsetAsync(dbad, 0, sizeof(unsigned int), d.stream);
        if (r) return r;
        const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
            unsigned grid = 0;
            const size_t smem = group_smem<LM>(kl, false);
            if (!(r = one_launch_grid<LM>(inst, &grid)) && !(r = allow_smem(d, (const void *)k_inverse_g<LM>, smem)))
                launch(d, [&] {
                    k_inverse_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(inst, k.ptr, kl, o.ptr, limb_major(o),
                                                                           v[0].ptr, v[0].lay, n, chunk, dbad);
                });
        });
        if (!ok) return kErrSize;
        if (r) return r;
        // d.pinned holds at least one word (stage reserves it); the copy is stream-ordered after the
        // staging upload that used it
        if ((r = (int)cudaMemcpyAsync(d.pinned, dbad, sizeof(unsigned int), cudaMemcpyDeviceToHost, d.stream)))
            return r;
        d.downloads += 1;
        if ((r = finish(d))) return r;
        std::memcpy(bad, d.pinned, sizeof(unsigned int));
        return 0;
    }, 1);
}

// DJN fixed-base encryption (public key): out_i = (1 + m_i·n)·hs^(a_i)·R mod n², hs^a from the comb
// table of n² (`table`: nwin × (2^w − 1) entries of L2 limbs, unifl_gpu_table_upload), m (n, Ln),
// a host rows (n, La) whose bits past nwin·w must be zero.  One launch.
int unifl_gpu_fixed_base(void *pub, void *table, int w, int nwin, Operand m, const u64 *a, int La, long long n,
                         void **out) {
    Key &k = *(Key *)pub;
    const unifl_gpu::PubKey pk = unifl_gpu::parse_pub(k.host.data());
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (!k.glmax) return kErrSize;
    int e = check_table(table, *k.dev, w, nwin, pk.n2.L);
    if (e) return e;
    if (!a || La < 1 || n <= 0 || !exponents_fit(a, n, La, (long long)nwin * w)) return kErrShape;
    Operand ea{nullptr, a, n, La};
    const Table &t = *(const Table *)table;
    return run_op(*k.dev, n, {&m, &ea}, {pk.Ln, La}, pk.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        int r = 0;
        const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
            unsigned grid = 0;
            const size_t smem = group_smem<LM>(kl, false);
            if (!(r = one_launch_grid<LM>(n, &grid)) && !(r = allow_smem(d, (const void *)k_fixed_base_g<LM>, smem)))
                launch(d, [&] {
                    k_fixed_base_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                        n, k.ptr, kl, t.ptr, w, nwin, o.ptr, limb_major(o), v[0].ptr, v[0].lay, v[1].ptr, La);
                });
        });
        return !ok ? kErrSize : r ? r : finish(d);
    });
}

// The key owner's DJN encryption: hs^a mod p² and mod q² from the comb tables tp (nwin × (2^w − 1)
// entries of Lp2 limbs) and tq (of Lq2 limbs) in the two half groups, Garner's combine and the
// finish in one launch.  Same operands as unifl_gpu_fixed_base otherwise.
int unifl_gpu_owner_fixed_base(void *owner, void *tp, void *tq, int w, int nwin, Operand m, const u64 *a, int La,
                               long long n, void **out) {
    Key &k = *(Key *)owner;
    const unifl_gpu::OwnerKey ok_ = unifl_gpu::parse_owner(k.host.data());
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (!k.glmax) return kErrSize;
    int e;
    if ((e = check_table(tp, *k.dev, w, nwin, ok_.p2.L)) || (e = check_table(tq, *k.dev, w, nwin, ok_.q2.L))) return e;
    if (!a || La < 1 || n <= 0 || !exponents_fit(a, n, La, (long long)nwin * w)) return kErrShape;
    Operand ea{nullptr, a, n, La};
    const Table &p = *(const Table *)tp, &q = *(const Table *)tq;
    return run_op(*k.dev, n, {&m, &ea}, {ok_.Ln, La}, ok_.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        int r = 0;
        const bool ok = UNIFL_WITH_SHAPE(k.glmax, {
            unsigned grid = 0;
            const size_t smem = group_smem<LM>(kl, false);
            if (!(r = one_launch_grid<LM>(n, &grid)) &&
                !(r = allow_smem(d, (const void *)k_owner_fixed_base_g<LM>, smem)))
                launch(d, [&] {
                    k_owner_fixed_base_g<LM><<<grid, kGroupBlock, smem, d.stream>>>(
                        n, k.ptr, kl, p.ptr, q.ptr, w, nwin, o.ptr, limb_major(o), v[0].ptr, v[0].lay, v[1].ptr, La);
                });
        });
        return !ok ? kErrSize : r ? r : finish(d);
    });
}

// Fused Paillier encryption (Alg. 4): m, r (n, Ln); out (n, L2), Montgomery form mod n².
int unifl_gpu_paillier_encrypt(void *pub, Operand m, Operand r, long long n, int group, void **out) {
    Key &k = *(Key *)pub;
    const unifl_gpu::PubKey pk = unifl_gpu::parse_pub(k.host.data());
    const int Ln = pk.Ln, L2 = pk.n2.L;
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    return run_op(*k.dev, n, {&m, &r}, {Ln, Ln}, L2, out, [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        const View &vm = v[0], &vr = v[1];
        int e = 0;
        const bool ok = group ? UNIFL_WITH_SHAPE(k.glmax, {
            const size_t smem = group_smem<LM>(kl, true);
            if (!(e = allow_smem(d, (const void *)k_encrypt_g<LM>, smem)))
                in_waves(d, n, LM, [&](long long i0, long long w) {
                    k_encrypt_g<LM><<<group_grid<LM>(w), kGroupBlock, smem, d.stream>>>(
                        i0, n, k.ptr, kl, o.ptr, limb_major(o), vm.ptr, vm.lay, vr.ptr, vr.lay);
                });
        }) : UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_encrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, n, k.ptr, kl, o.ptr, limb_major(o),
                                                                            vm.ptr, vm.lay, vr.ptr, vr.lay);
            });
        });
        return !ok ? kErrSize : e ? e : finish(d);
    });
}

// Key-owner encryption with the CRT (body_paillier_encrypt_owner): m (n, Ln), yp (n, Lp),
// yq (n, Lq); out (n, L2), Montgomery form mod n².  Both halves, the combine and the finish in one
// kernel launch (per wave); the three operands staged in one copy when they come from the host.
int unifl_gpu_paillier_encrypt_owner(void *owner, Operand m, Operand yp, Operand yq, long long n, int group,
                                     void **out) {
    Key &k = *(Key *)owner;
    const unifl_gpu::OwnerKey ok_ = unifl_gpu::parse_owner(k.host.data());
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    return run_op(*k.dev, n, {&m, &yp, &yq}, {ok_.Ln, ok_.Lp, ok_.Lq}, ok_.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        const View &vm = v[0], &vp = v[1], &vq = v[2];
        int e = 0;
        const bool ok = group ? UNIFL_WITH_SHAPE(k.glmax, {
            // the class of 4·max(Lp, Lq) limbs: each half group holds one CRT half (owner_group_lmax)
            const size_t smem = group_smem<LM>(kl, true);
            if (!(e = allow_smem(d, (const void *)k_encrypt_owner_g<LM>, smem)))
                in_waves(d, n, LM, [&](long long i0, long long w) {
                    k_encrypt_owner_g<LM><<<group_grid<LM>(w), kGroupBlock, smem, d.stream>>>(
                        i0, n, k.ptr, kl, o.ptr, limb_major(o), vm.ptr, vm.lay, vp.ptr, vp.lay, vq.ptr, vq.lay);
                });
        }) : UNIFL_WITH_LMAX(k.lmax, {
            // the local frame is that of the half-size class LM (its window table) plus a few
            // numbers of the full size 2·LM
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_encrypt_owner<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                    i0, n, k.ptr, kl, o.ptr, limb_major(o), vm.ptr, vm.lay, vp.ptr, vp.lay, vq.ptr, vq.lay);
            });
        });
        return !ok ? kErrSize : e ? e : finish(d);
    });
}

// CRT decryption: c (n, L2) Montgomery form mod n² -> m (n, Ln).
int unifl_gpu_paillier_decrypt(void *priv, Operand c, long long n, int group, void **out) {
    Key &k = *(Key *)priv;
    const unifl_gpu::PrivKey sk = unifl_gpu::parse_priv(k.host.data());
    const int Ln = sk.Ln, L2 = sk.L2;
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    return run_op(*k.dev, n, {&c}, {L2}, Ln, out, [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
        const View &vc = v[0];
        int e = 0;
        const bool ok = group ? UNIFL_WITH_SHAPE(k.glmax, {
            const size_t smem = group_smem<LM>(kl, true);
            if (!(e = allow_smem(d, (const void *)k_decrypt_g<LM>, smem)))
                in_waves(d, n, LM, [&](long long i0, long long w) {
                    k_decrypt_g<LM><<<group_grid<LM>(w), kGroupBlock, smem, d.stream>>>(
                        i0, n, k.ptr, kl, o.ptr, limb_major(o), vc.ptr, vc.lay);
                });
        }) : UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_decrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, n, k.ptr, kl, o.ptr, limb_major(o),
                                                                            vc.ptr, vc.lay);
            });
        });
        return !ok ? kErrSize : e ? e : finish(d);
    });
}

}  // extern "C"

#ifdef UNIFL_WITH_CGBN
// Optional CGBN variant (needs CGBN_INCLUDE_DIR at build time; uses the runtime helpers above).
#include "gpu_cgbn.cuh"
#endif

// UniFL gpu backend: the device runtime (host code) -- devices and their streams, staging memory,
// device batches, key blobs and comb tables on a device, and the one way every op stages its
// operands and allocates its result (run_op).  Defined in device_runtime.cu; the kernels' launch
// functions (kernels.cu, declared in launch.cuh) and the C interface (c_api.cu) build on it.
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
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "kernels.cuh"  // Lay, u64

// An operand as the C interface receives it: a device batch, or host rows (element-major, `rows` of
// them: 1 = one row shared by the whole batch, else one per element) of `limbs` words.  Global
// (not in a namespace): it is a parameter type of the extern "C" functions.
struct Operand {
    void *batch;
    const unifl_gpu::u64 *host;
    long long rows;
    int limbs;
};

namespace unifl_gpu {
namespace rt {

using unifl_gpu::Lay;

// the library's own error codes (runtime.py knows them)
constexpr int kErrSize = -1;      // a size outside what the kernels are instantiated for
constexpr int kErrNoDevice = -2;  // no device initialised, or a device index out of range
constexpr int kErrAlloc = -3;     // host allocation failed
constexpr int kErrLayout =
    -4;  // a device batch (or table) lives on another device than the op's key
constexpr int kErrShape = -5;  // an operand's row or limb count does not fit the op
constexpr int kErrSmem =
    -6;  // a group launch needs more shared memory per block than the device has
constexpr int kMaxSharedKey = 48 * 1024;

struct Device {
    int id = 0;
    int sms = 1;  // streaming multiprocessors (the wide-shape rule, launch.cuh)
    cudaStream_t stream = nullptr;
    std::mutex mu;          // one op at a time per device (pinned/arena reuse)
    u64 *pinned = nullptr;  // host staging (cudaHostAlloc)
    size_t pinned_words = 0;
    u64 *arena = nullptr;  // device scratch for staged host operands
    size_t arena_words = 0;
    size_t smem_optin = 48 * 1024;  // cudaDevAttrMaxSharedMemoryPerBlockOptin
    // the dynamic shared memory each group kernel was allowed on this device (under mu)
    std::map<const void *, size_t> smem_allowed;
    // the window the occupancy rule picked per (kernel, key words) (under mu; launch.cuh)
    std::map<std::pair<const void *, int>, int> window_choice;
    // what the last exponentiation launch ran with (window bits, wide shape), for reports
    int last_window = 0, last_wide = 0;
    // traffic counters: kernel launches, host->device and device->host copies
    std::atomic<long long> launches{0}, uploads{0}, downloads{0};

    cudaError_t reserve(size_t host_words, size_t dev_words);
};

int ensure_init();
int device_count();
// The Device of CUDA device `id`, its stream created on first use.
int open_device(int id, Device **out);
// an opened device, or null (for the counters)
const Device *opened_device(int id);

// Runs fn(device) with the device's mutex held and the device current on this thread.
template <class F>
int on_device(Device &d, F fn) {
    std::lock_guard<std::mutex> lock(d.mu);
    cudaError_t e = cudaSetDevice(d.id);
    return e ? (int)e : fn(d);
}

// The launch's error, then the stream's.
int finish(Device &d);

// Launch helper: counts the launch on the device.
template <class Launch>
void launch(Device &d, Launch l) {
    l();
    d.launches += 1;
}

// Exponentiation-class kernels run in waves of at most wave_size() instances, one launch each: every
// thread of the one-thread kernels keeps a 16-entry window table (16·LMAX limbs) and temporaries in
// local memory, and past a point more threads in flight make throughput *drop* (their working set
// falls out of the caches); docs/backends/gpu.md ("Wave size").  The group kernels (tables in shared memory,
// numbers in registers) use the same wave size until a device measurement says otherwise.
// UNIFL_GPU_WAVE overrides it for both families (0: one launch).
long long wave_size();

template <class Launch>
void in_waves(Device &d, long long n, Launch l) {
    const long long w = wave_size();
    for (long long i0 = 0; i0 < n; i0 += w)
        launch(d, [&] { l(i0, (n < i0 + w ? n : i0 + w) - i0); });
}

// Lets `kernel` take `bytes` of dynamic shared memory per block on d (with d.mu held); kErrSmem past
// the device's opt-in limit.
int allow_smem(Device &d, const void *kernel, size_t bytes);

// A key blob on the host and on its device.  lmax: the one-thread kernels' class of the key, glmax
// the group kernels' (for the CRT keys the class of 4·max(Lp, Lq) limbs, owner_group_lmax /
// priv_group_lmax); 0: that family does not take the key (a call with it is kErrSize).
struct Key {
    std::vector<u64> host;
    Device *dev = nullptr;
    u64 *ptr = nullptr;
    int lmax = 0;
    int glmax = 0;
    int words() const { return (int)host.size(); }
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

inline Lay limb_major(const DBatch &b) { return Lay{1, b.n}; }
void free_batch(DBatch *b);

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
                 size_t extra_dev_words = 0, u64 **rest = nullptr);

// Host operands of an op staged into the device arena (stage_blocks); each then reads element-major
// (Lay{limbs, 1}) or, for a shared row, Lay{0, 1}.
int stage(Device &d, long long cnt, const std::vector<const Operand *> &ops, std::vector<View> &out,
          size_t extra_dev_words = 0, u64 **rest = nullptr);

// Checks an operand against the op's element count, limb width and device.
int check_operand(const Operand &o, long long n, int limbs, const Device &d);

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
int run_op(Device &d, long long n, std::vector<const Operand *> inputs, std::vector<int> widths,
           int out_L, void **out, F fn, size_t extra_dev_words = 0) {
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
bool exponents_fit(const u64 *a, long long n, int La, long long covered);

// A table handle of the op's device holding nwin·(2^w − 1) entries of L limbs.
int check_table(const void *t, const Device &d, int w, int nwin, int L);

}  // namespace rt
}  // namespace unifl_gpu

// UniFL gpu backend: CUDA kernels and their host runtime, built by nvcc into libunifl_gpu.so and
// loaded by unifl/backends/gpu/runtime.py with ctypes (a plain C ABI: the Python side needs no
// pybind11 build with nvcc, and a missing driver shows up as an error code, not an import failure).
//
// Kernels: each __global__ wrapper copies the key blob into shared memory (UniFL Alg. 4 lines 5-9),
// computes its instance index (one thread per instance) and calls the __host__ __device__ body of
// kernels.cuh.
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
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <vector>

#include "kernels.cuh"

using unifl_gpu::Lay;
using unifl_gpu::u64;

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

// Threads per block: big local frames (the 16-entry window table) favour smaller blocks at large L.
inline int block_size(int lmax) { return lmax >= 64 ? 64 : 128; }
inline unsigned grid_size(long long n, int tpb) { return (unsigned)((n + tpb - 1) / tpb); }

// Exponentiation-class kernels run in waves of at most wave_size(LMAX) instances, one launch each.
// Why: every thread keeps a 16-entry window table (16·LMAX limbs) and temporaries in local memory,
// and past a point more threads in flight make throughput *drop* (their working set falls out of the
// caches).  The sizes compared and the measurements behind 16384 are in docs/gpu.md ("Wave size");
// the 96/128-limb classes (> 4096-bit moduli) were not measured and use the same.  UNIFL_GPU_WAVE
// overrides it (0: one launch).
long long g_wave_override = -1;

inline long long wave_size(int /*lmax*/) {
    if (g_wave_override >= 0) return g_wave_override ? g_wave_override : (1LL << 62);
    return 16384;
}

// ------------------------------------------------------------------------------------- runtime
constexpr int kErrSize = -1;      // a size outside what the kernels are instantiated for
constexpr int kErrNoDevice = -2;  // no device initialised, or a device index out of range
constexpr int kErrAlloc = -3;     // host allocation failed
constexpr int kErrLayout = -4;    // a device batch lives on another device than the op's key
constexpr int kErrShape = -5;     // an operand's row or limb count does not fit the op
constexpr int kMaxSharedKey = 48 * 1024;

struct Device {
    int id = 0;
    cudaStream_t stream = nullptr;
    std::mutex mu;                 // one op at a time per device (pinned/arena reuse)
    u64 *pinned = nullptr;         // host staging (cudaHostAlloc)
    size_t pinned_words = 0;
    u64 *arena = nullptr;          // device scratch for staged host operands
    size_t arena_words = 0;
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
        if ((ce = cudaSetDevice(id)) || (ce = cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking))) {
            delete dev;
            return (int)ce;
        }
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

// A key blob on the host and on its device.
struct Key {
    std::vector<u64> host;
    Device *dev = nullptr;
    u64 *ptr = nullptr;
    int lmax = 0;
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

// Host operands of an op staged into the device arena: one memcpy into pinned memory and one
// host-to-device copy for all of them; each then reads element-major (Lay{limbs, 1}) or, for a shared
// row, Lay{0, 1}.  extra_dev_words: arena space the op needs after them.
int stage(Device &d, long long cnt, const std::vector<const Operand *> &ops, std::vector<View> &out,
          size_t extra_dev_words = 0) {
    size_t total = 0;
    for (const Operand *o : ops) total += size_t(o->rows == 1 ? 1 : cnt) * o->limbs;
    cudaError_t e = d.reserve(std::max<size_t>(total, 1), total + extra_dev_words + 1);
    if (e) return (int)e;
    size_t off = 0;
    out.clear();
    for (const Operand *o : ops) {
        const size_t rows = o->rows == 1 ? 1 : size_t(cnt);
        std::memcpy(d.pinned + off, o->host, rows * o->limbs * 8);
        View s;
        s.ptr = d.arena + off;
        s.lay.se = o->rows == 1 ? 0 : o->limbs;   // (a conditional of two Lay{...} crashes cicc 13.0)
        s.lay.sl = 1;
        out.push_back(s);
        off += rows * o->limbs;
    }
    if (total) {
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, total * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        d.uploads += 1;
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

// Runs an op of n elements on device d: every operand checked; the output (out_L limbs) allocated;
// the host operands staged; fn(device, output, views) called, views[j] being where input j lies
// (its batch for a device batch, else its staged rows); *out set only on success.
template <class F>
int run_op(Device &d, long long n, std::vector<const Operand *> inputs, std::vector<int> widths, int out_L,
           void **out, F fn) {
    *out = nullptr;
    if (n <= 0 || out_L <= 0) return kErrShape;
    int e;
    for (size_t j = 0; j < inputs.size(); ++j)
        if ((e = check_operand(*inputs[j], n, widths[j], d))) return e;
    std::vector<const Operand *> hosts;
    for (const Operand *o : inputs)
        if (!o->batch) hosts.push_back(o);
    DBatch *res = new (std::nothrow) DBatch();
    if (!res) return kErrAlloc;
    res->n = n;
    res->L = out_L;
    res->dev = &d;
    e = on_device(d, [&](Device &dv) -> int {
        int r = (int)cudaMallocAsync((void **)&res->ptr, size_t(n) * out_L * 8 + 8, dv.stream);
        std::vector<View> staged, views;
        if (!r) r = stage(dv, n, hosts, staged);
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
        return fn(dv, *res, views);
    });
    if (e) {
        free_batch(res);
        return e;
    }
    *out = res;
    return 0;
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
    if (err == kErrLayout) return "a device batch lives on another device than the operation";
    if (err == kErrShape) return "operand rows or limbs do not fit the operation";
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
// encryption; uploaded to `device` only.
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
    if (!k->lmax || len * 8 > kMaxSharedKey) {
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

void unifl_gpu_key_free(void *handle) {
    Key *k = (Key *)handle;
    if (!k) return;
    if (k->ptr) {
        cudaSetDevice(k->dev->id);
        cudaFree(k->ptr);
    }
    delete k;
}

// ---- device batches: upload, download, shape, free
// rows (n, L) element-major host -> a new device batch on `device`.
int unifl_gpu_batch_upload(const u64 *host, long long n, int L, int device, void **out) {
    *out = nullptr;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Operand src{nullptr, host, n, L};
    return run_op(*d, n, {&src}, {L}, L, out, [&](Device &dv, DBatch &o, const std::vector<View> &v) -> int {
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

// ---- ops: every result is a new device batch (*out) on the key's device
// out = a·b·R^-1 (mode 0) or a·b mod m (mode 1); b may be one shared host row.
int unifl_gpu_mul(void *key, Operand a, Operand b, long long n, int mode, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    return run_op(*k.dev, n, {&a, &b}, {L, L}, L, out, [&](Device &d, DBatch &o, const std::vector<View> &v) {
        const View &va = v[0], &vb = v[1];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            launch(d, [&] {
                k_mul<LM><<<grid_size(n, tpb), tpb, kl * 8, d.stream>>>(n, k.ptr, kl, o.ptr, limb_major(o), va.ptr,
                                                                        va.lay, vb.ptr, vb.lay, mode);
            });
        });
        return ok ? finish(d) : kErrSize;
    });
}

// out = base^e (mode 1: plain in/out) or x̄^e in the domain (mode 0); exps: host rows (n|1, le).
int unifl_gpu_exp(void *key, Operand base, Operand exps, long long n, int mode, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    if (exps.batch) return kErrShape;
    return run_op(*k.dev, n, {&base, &exps}, {L, exps.limbs}, L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v) {
        const View &vb = v[0], &ve = v[1];
        const int shared = exps.rows == 1 && n != 1;
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_exp<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, n, k.ptr, kl, o.ptr, limb_major(o),
                                                                        vb.ptr, vb.lay, ve.ptr, exps.limbs, shared,
                                                                        mode);
            });
        });
        return ok ? finish(d) : kErrSize;
    });
}

// out[kk] = prod_i bases_i^exps[kk, i] (Montgomery form), kk < K (UniFL Alg. 5).  exps: host
// (K, N, le), staged with the bases (host bases) into the arena, followed by the K·N scratch.
int unifl_gpu_multi_exp(void *key, Operand bases, long long N, const u64 *exps, long long K, int le,
                        void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    if (N <= 0 || K <= 0) return kErrShape;
    if (bases.batch) {
        const DBatch *b = (const DBatch *)bases.batch;
        if (b->n != N || b->L != L) return kErrShape;
        if (b->dev != k.dev) return kErrLayout;
    } else if (!bases.host || bases.rows != N || bases.limbs != L) {
        return kErrShape;
    }
    DBatch *res = new (std::nothrow) DBatch();
    if (!res) return kErrAlloc;
    res->n = K;
    res->L = L;
    res->dev = k.dev;
    int e = on_device(*k.dev, [&](Device &d) -> int {
        int r = (int)cudaMallocAsync((void **)&res->ptr, size_t(K) * L * 8 + 8, d.stream);
        if (r) return r;
        const long long S = K * N;
        // staged as one shared "row" each: the exponents of every row and (host bases) all N bases
        Operand ex{nullptr, exps, 1, int(S * le)};
        Operand hb{nullptr, bases.host, 1, int(N * L)};
        std::vector<View> st;
        std::vector<const Operand *> hs{&ex};
        if (!bases.batch) hs.push_back(&hb);
        const size_t ws = size_t(S) * L;
        r = stage(d, 1, hs, st, ws);
        if (r) return r;
        const u64 *bptr = bases.batch ? ((const DBatch *)bases.batch)->ptr : st[1].ptr;
        const Lay lay_b = bases.batch ? Lay{1, N} : Lay{L, 1};
        u64 *scratch = d.arena + size_t(S) * le + (bases.batch ? 0 : size_t(N) * L);
        const Lay lay_s{1, S};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, S, LM, [&](long long i0, long long w) {
                k_powers<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, S, k.ptr, kl, scratch, lay_s, bptr,
                                                                           lay_b, st[0].ptr, le, N);
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
            k_relayout<<<grid_size(K, 256), 256, 0, d.stream>>>(K, L, res->ptr, limb_major(*res), scratch, Lay{N, S});
        });
        return finish(d);
    });
    if (e) {
        free_batch(res);
        return e;
    }
    *out = res;
    return 0;
}

// Fused Paillier encryption (Alg. 4): m, r (n, Ln); out (n, L2), Montgomery form mod n².
int unifl_gpu_paillier_encrypt(void *pub, Operand m, Operand r, long long n, void **out) {
    Key &k = *(Key *)pub;
    const unifl_gpu::PubKey pk = unifl_gpu::parse_pub(k.host.data());
    const int Ln = pk.Ln, L2 = pk.n2.L;
    const int kl = (int)k.host.size();
    return run_op(*k.dev, n, {&m, &r}, {Ln, Ln}, L2, out, [&](Device &d, DBatch &o, const std::vector<View> &v) {
        const View &vm = v[0], &vr = v[1];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_encrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, n, k.ptr, kl, o.ptr, limb_major(o),
                                                                            vm.ptr, vm.lay, vr.ptr, vr.lay);
            });
        });
        return ok ? finish(d) : kErrSize;
    });
}

// Key-owner encryption with the CRT (body_paillier_encrypt_owner): m (n, Ln), yp (n, Lp),
// yq (n, Lq); out (n, L2), Montgomery form mod n².  Both halves, the combine and the finish in one
// kernel launch (per wave); the three operands staged in one copy when they come from the host.
int unifl_gpu_paillier_encrypt_owner(void *owner, Operand m, Operand yp, Operand yq, long long n, void **out) {
    Key &k = *(Key *)owner;
    const unifl_gpu::OwnerKey ok_ = unifl_gpu::parse_owner(k.host.data());
    const int kl = (int)k.host.size();
    return run_op(*k.dev, n, {&m, &yp, &yq}, {ok_.Ln, ok_.Lp, ok_.Lq}, ok_.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v) {
        const View &vm = v[0], &vp = v[1], &vq = v[2];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            // the local frame is that of the half-size class LM (its window table) plus a few
            // numbers of the full size 2·LM
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_encrypt_owner<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(
                    i0, n, k.ptr, kl, o.ptr, limb_major(o), vm.ptr, vm.lay, vp.ptr, vp.lay, vq.ptr, vq.lay);
            });
        });
        return ok ? finish(d) : kErrSize;
    });
}

// CRT decryption: c (n, L2) Montgomery form mod n² -> m (n, Ln).
int unifl_gpu_paillier_decrypt(void *priv, Operand c, long long n, void **out) {
    Key &k = *(Key *)priv;
    const unifl_gpu::PrivKey sk = unifl_gpu::parse_priv(k.host.data());
    const int Ln = sk.Ln, L2 = sk.L2;
    const int kl = (int)k.host.size();
    return run_op(*k.dev, n, {&c}, {L2}, Ln, out, [&](Device &d, DBatch &o, const std::vector<View> &v) {
        const View &vc = v[0];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(d, n, LM, [&](long long i0, long long w) {
                k_decrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, n, k.ptr, kl, o.ptr, limb_major(o),
                                                                            vc.ptr, vc.lay);
            });
        });
        return ok ? finish(d) : kErrSize;
    });
}

}  // extern "C"

#ifdef UNIFL_WITH_CGBN
// Optional CGBN variant (needs CGBN_INCLUDE_DIR at build time; uses the runtime helpers above).
#include "gpu_cgbn.cuh"
#endif

// UniFL gpu backend: CUDA kernels and their host runtime, built by nvcc into libunifl_gpu.so and
// loaded by unifl/backends/gpu/runtime.py with ctypes (a plain C ABI: the Python side needs no
// pybind11 build with nvcc, and a missing driver shows up as an error code, not an import failure).
//
// Kernels: each __global__ wrapper copies the key blob into shared memory (UniFL Alg. 4 lines 5-9),
// computes its instance index (one thread per instance) and calls the __host__ __device__ body of
// kernels.cuh.
//
// Residency: every op returns a *device batch* (DBatch): n elements of L limbs that stay in device
// memory, limb-major (limb j of 32 neighbouring elements is one coalesced 256-byte load for a warp),
// split in chunks over the devices.  An op's operand is either such a batch (no copy at all: chained
// SDK operations never leave the device) or host rows (staged through the device's pinned buffer into
// its scratch arena and read there element-major by the kernel, so uploads need no transpose).  Only
// unifl_gpu_batch_download copies back, after a device-side relayout to element-major rows.
//
// Devices: found with cudaGetDeviceCount; per device one non-blocking stream, one pinned staging
// buffer and one scratch arena (grown on demand, reused), and a stream-ordered pool for batch memory
// (cudaMallocAsync).  A new batch is split over the devices, least-loaded first; an op on batches runs
// each chunk on the chunk's device (one host thread per device when there are several).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
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
// caches).  Measured on an H100, 65,536 instances (bench/bench_gpu_waves.py), waves of
// none / 8192 / 16384 / 32768: 2048-bit ModExp 31.5k / 25.6k / 47.9k / 36.6k per s; Paillier
// encryption, 1024-bit key 141.5k / 77.0k / 150.4k / 136.7k, 2048-bit key 8.1k / 10.5k / 18.8k /
// 14.6k.  16384 was best for both limb classes measured (32 and 64); the 96/128-limb classes
// (> 4096-bit moduli) were not measured and use the same.  UNIFL_GPU_WAVE overrides it (0: one
// launch).
long long g_wave_override = -1;

inline long long wave_size(int /*lmax*/) {
    if (g_wave_override >= 0) return g_wave_override ? g_wave_override : (1LL << 62);
    return 16384;
}

template <class Launch>
void in_waves(long long n, int lmax, Launch launch) {
    const long long w = wave_size(lmax);
    for (long long i0 = 0; i0 < n; i0 += w) launch(i0, std::min(n, i0 + w) - i0);
}

// ------------------------------------------------------------------------------------- runtime
constexpr int kErrSize = -1;      // a size outside what the kernels are instantiated for
constexpr int kErrNoDevice = -2;  // no device initialised
constexpr int kErrAlloc = -3;     // host allocation failed
constexpr int kErrLayout = -4;    // device batches split differently over the devices
constexpr int kErrShape = -5;     // an operand's row or limb count does not fit the op
constexpr int kMaxSharedKey = 48 * 1024;

struct Device {
    int id = 0;
    cudaStream_t stream = nullptr;
    std::mutex mu;                 // one op chunk at a time per device (pinned/arena reuse)
    std::atomic<long long> load{0};
    u64 *pinned = nullptr;         // host staging (cudaHostAlloc)
    size_t pinned_words = 0;
    u64 *arena = nullptr;          // device scratch for staged host operands
    size_t arena_words = 0;

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

std::vector<Device *> g_devices;
std::once_flag g_init_once;
int g_init_error = 0;

void init_devices() {
    if (const char *w = std::getenv("UNIFL_GPU_WAVE")) g_wave_override = std::atoll(w);
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        g_init_error = (int)e;
        return;
    }
    for (int d = 0; d < count; ++d) {
        Device *dev = new (std::nothrow) Device();
        if (!dev) {
            g_init_error = kErrAlloc;
            return;
        }
        dev->id = d;
        if ((e = cudaSetDevice(d)) || (e = cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking))) {
            g_init_error = (int)e;
            delete dev;
            return;
        }
        g_devices.push_back(dev);
    }
    if (g_devices.empty()) g_init_error = kErrNoDevice;
}

int ensure_init() {
    std::call_once(g_init_once, init_devices);
    return g_init_error;
}

// A key blob on the host and on every device.
struct Key {
    std::vector<u64> host;
    std::vector<u64 *> dev;
    int lmax = 0;
};

// One part of a batch: elements [lo, hi) on one device.
struct Part {
    Device *dev;
    long long lo, hi;
};

// Split n elements over the devices, least-loaded first (equal parts; a device's load is the number
// of elements it has in flight from every caller).
std::vector<Part> plan(long long n) {
    std::vector<Device *> order(g_devices);
    std::stable_sort(order.begin(), order.end(),
                     [](Device *a, Device *b) { return a->load.load() < b->load.load(); });
    const long long parts = std::min<long long>((long long)order.size(), std::max<long long>(n, 1));
    const long long each = (n + parts - 1) / parts;
    std::vector<Part> out;
    for (long long p = 0, lo = 0; p < parts && lo < n; ++p, lo += each)
        out.push_back(Part{order[p], lo, std::min(n, lo + each)});
    return out;
}

// Runs fn(p) for every part p, on the part's device with its mutex held; one host thread per part
// when there are several (devices run concurrently); returns the first error.
template <class F>
int run_on(std::vector<Part> &parts, F fn) {
    std::vector<int> errs(parts.size(), 0);
    auto one = [&](size_t p) {
        Part &pt = parts[p];
        std::lock_guard<std::mutex> lock(pt.dev->mu);
        pt.dev->load += pt.hi - pt.lo;
        cudaError_t e = cudaSetDevice(pt.dev->id);
        errs[p] = e ? (int)e : fn(p);
        pt.dev->load -= pt.hi - pt.lo;
    };
    if (parts.size() == 1) {
        one(0);
    } else {
        std::vector<std::thread> threads;
        for (size_t p = 0; p < parts.size(); ++p) threads.emplace_back(one, p);
        for (auto &t : threads) t.join();
    }
    for (int e : errs)
        if (e) return e;
    return 0;
}

// The host-array path of the optional CGBN build: fn(part) per device part of n elements.
template <class F>
int run_parts(long long n, F fn) {
    std::vector<Part> parts = plan(n);
    return run_on(parts, [&](size_t p) { return fn(parts[p]); });
}

int finish(Device &d) {
    cudaError_t e = cudaGetLastError();
    if (e) return (int)e;
    return (int)cudaStreamSynchronize(d.stream);
}

// ---- device batches
struct Chunk {
    Device *dev;
    long long lo, hi;
    u64 *ptr = nullptr;  // limb-major: limb j of element lo + i at ptr[j·(hi − lo) + i]
};

struct DBatch {
    long long n = 0;
    int L = 0;
    std::vector<Chunk> chunks;
};

Lay limb_major(const Chunk &c) { return Lay{1, c.hi - c.lo}; }

void free_batch(DBatch *b) {
    if (!b) return;
    for (Chunk &c : b->chunks)
        if (c.ptr) {
            cudaSetDevice(c.dev->id);
            cudaFreeAsync(c.ptr, c.dev->stream);
        }
    delete b;
}


// The chunking an op runs with: that of its first device-batch operand, else a fresh plan.
std::vector<Part> parts_of(const DBatch *b) {
    std::vector<Part> out;
    for (const Chunk &c : b->chunks) out.push_back(Part{c.dev, c.lo, c.hi});
    return out;
}

bool same_split(const DBatch *b, const std::vector<Part> &parts) {
    if (b->chunks.size() != parts.size()) return false;
    for (size_t p = 0; p < parts.size(); ++p)
        if (b->chunks[p].dev != parts[p].dev || b->chunks[p].lo != parts[p].lo || b->chunks[p].hi != parts[p].hi)
            return false;
    return true;
}

// Where a kernel reads an operand for one chunk: its pointer and layout.
struct View {
    const u64 *ptr;
    Lay lay;
};

// Host operands of one chunk staged into the device arena: one memcpy into pinned memory and one
// host-to-device copy for all of them; each then reads element-major (Lay{limbs, 1}) or, for a shared
// row, Lay{0, 1}.
int stage(Device &d, const Part &pt, std::vector<const Operand *> ops, std::vector<View> &out,
          size_t extra_dev_words = 0) {
    const long long cnt = pt.hi - pt.lo;
    size_t total = 0;
    for (const Operand *o : ops) total += size_t(o->rows == 1 ? 1 : cnt) * o->limbs;
    cudaError_t e = d.reserve(std::max<size_t>(total, 1), total + extra_dev_words + 1);
    if (e) return (int)e;
    size_t off = 0;
    out.clear();
    for (const Operand *o : ops) {
        const size_t rows = o->rows == 1 ? 1 : size_t(cnt);
        const u64 *src = o->host + (o->rows == 1 ? 0 : pt.lo * (long long)o->limbs);
        std::memcpy(d.pinned + off, src, rows * o->limbs * 8);
        View s;
        s.ptr = d.arena + off;
        s.lay.se = o->rows == 1 ? 0 : o->limbs;   // (a conditional of two Lay{...} crashes cicc 13.0)
        s.lay.sl = 1;
        out.push_back(s);
        off += rows * o->limbs;
    }
    if (total && (e = cudaMemcpyAsync(d.arena, d.pinned, total * 8, cudaMemcpyHostToDevice, d.stream)))
        return (int)e;
    return 0;
}

// Checks an operand against the op's element count, limb width and chunking; a batch operand gives
// its chunk pointer directly.
int check_operand(const Operand &o, long long n, int limbs, const std::vector<Part> &parts) {
    if (o.batch) {
        const DBatch *b = (const DBatch *)o.batch;
        if (b->n != n || b->L != limbs) return kErrShape;
        return same_split(b, parts) ? 0 : kErrLayout;
    }
    if (!o.host || (o.rows != 1 && o.rows != n) || o.limbs != limbs) return kErrShape;
    return 0;
}

// Allocates the output batch (limbs per element) with the op's chunking.
DBatch *new_batch(long long n, int L, const std::vector<Part> &parts) {
    DBatch *b = new (std::nothrow) DBatch();
    if (!b) return nullptr;
    b->n = n;
    b->L = L;
    for (const Part &p : parts) b->chunks.push_back(Chunk{p.dev, p.lo, p.hi, nullptr});
    return b;
}

int alloc_chunk(Chunk &c, int L) {
    return (int)cudaMallocAsync((void **)&c.ptr, size_t(c.hi - c.lo) * L * 8 + 8, c.dev->stream);
}

// Runs an op: chunking from `lead` (a batch of n elements), else from the first batch operand, else a
// fresh plan of n; every operand checked; the output (out_L limbs) allocated; per chunk the host
// operands staged and fn(part, output chunk, views) called, views[j] being where input j lies (its
// own chunk for a batch operand, else its staged rows); *out set only on success.
template <class F>
int run_op(long long n, const DBatch *lead, std::vector<const Operand *> inputs, std::vector<int> widths,
           int out_L, void **out, F fn) {
    *out = nullptr;
    int e = ensure_init();
    if (e) return e;
    if (n <= 0 || out_L <= 0 || (lead && lead->n != n)) return kErrShape;
    for (const Operand *o : inputs)
        if (!lead && o->batch) lead = (const DBatch *)o->batch;
    std::vector<Part> parts = lead ? parts_of(lead) : plan(n);
    for (size_t j = 0; j < inputs.size(); ++j)
        if ((e = check_operand(*inputs[j], n, widths[j], parts))) return e;
    std::vector<const Operand *> hosts;
    for (const Operand *o : inputs)
        if (!o->batch) hosts.push_back(o);
    DBatch *res = new_batch(n, out_L, parts);
    if (!res) return kErrAlloc;
    e = run_on(parts, [&](size_t p) -> int {
        std::vector<View> staged, views;
        int r = alloc_chunk(res->chunks[p], out_L);
        if (!r) r = stage(*parts[p].dev, parts[p], hosts, staged);
        if (r) return r;
        size_t next = 0;
        for (const Operand *o : inputs) {
            if (o->batch) {
                const Chunk &c = ((const DBatch *)o->batch)->chunks[p];
                views.push_back(View{c.ptr, limb_major(c)});
            } else {
                views.push_back(staged[next++]);
            }
        }
        return fn(parts[p], res->chunks[p], views);
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
    *count = (int)g_devices.size();
    return 0;
}

const char *unifl_gpu_error_string(int err) {
    if (err == kErrSize) return "operand size outside the instantiated kernels (up to 8192 bits)";
    if (err == kErrNoDevice) return "no CUDA device";
    if (err == kErrAlloc) return "host allocation failed";
    if (err == kErrLayout) return "device batches are split differently over the devices";
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

// kind: 0 ModCtx, 1 Paillier public key, 2 Paillier private key
int unifl_gpu_key_upload(const u64 *blob, long long len, int kind, void **handle) {
    *handle = nullptr;
    int e = ensure_init();
    if (e) return e;
    Key *k = new (std::nothrow) Key();
    if (!k) return kErrAlloc;
    k->host.assign(blob, blob + len);
    k->lmax = kind == 0 ? unifl_gpu::ctx_lmax(blob) : kind == 1 ? unifl_gpu::pub_lmax(blob)
                                                                : unifl_gpu::priv_lmax(blob);
    if (!k->lmax || len * 8 > kMaxSharedKey) {
        delete k;
        return kErrSize;
    }
    for (Device *d : g_devices) {
        u64 *p = nullptr;
        cudaError_t ce;
        if ((ce = cudaSetDevice(d->id)) || (ce = cudaMalloc((void **)&p, len * 8)) ||
            (ce = cudaMemcpy(p, blob, len * 8, cudaMemcpyHostToDevice))) {
            if (p) cudaFree(p);
            for (size_t j = 0; j < k->dev.size(); ++j) {
                cudaSetDevice(g_devices[j]->id);
                cudaFree(k->dev[j]);
            }
            delete k;
            return (int)ce;
        }
        k->dev.push_back(p);
    }
    *handle = k;
    return 0;
}

void unifl_gpu_key_free(void *handle) {
    Key *k = (Key *)handle;
    if (!k) return;
    for (size_t j = 0; j < k->dev.size(); ++j) {
        cudaSetDevice(g_devices[j]->id);
        cudaFree(k->dev[j]);
    }
    delete k;
}

// ---- device batches: upload, download, shape, free
// rows (n, L) element-major host -> a new device batch, split like `like` (a batch of n elements)
// or over the devices (like == null).
int unifl_gpu_batch_upload(const u64 *host, long long n, int L, void *like, void **out) {
    Operand src{nullptr, host, n, L};
    return run_op(n, (const DBatch *)like, {&src}, {L}, L, out,
                  [&](const Part &pt, Chunk &c, const std::vector<View> &v) -> int {
                      const long long cnt = c.hi - c.lo;
                      k_relayout<<<grid_size(cnt, 256), 256, 0, pt.dev->stream>>>(cnt, L, c.ptr, limb_major(c),
                                                                                  v[0].ptr, v[0].lay);
                      return finish(*pt.dev);
                  });
}

// device batch -> (n, L) element-major host rows (relayout on the device, then one copy per chunk).
int unifl_gpu_batch_download(void *batch, u64 *host) {
    DBatch *b = (DBatch *)batch;
    std::vector<Part> parts = parts_of(b);
    const int L = b->L;
    return run_on(parts, [&](size_t p) -> int {
        Chunk &c = b->chunks[p];
        Device &d = *c.dev;
        const long long cnt = c.hi - c.lo;
        const size_t w = size_t(cnt) * L;
        cudaError_t e = d.reserve(w, w);
        if (e) return (int)e;
        k_relayout<<<grid_size(cnt, 256), 256, 0, d.stream>>>(cnt, L, d.arena, Lay{L, 1}, c.ptr, limb_major(c));
        if ((e = cudaMemcpyAsync(d.pinned, d.arena, w * 8, cudaMemcpyDeviceToHost, d.stream))) return (int)e;
        int r = finish(d);
        if (!r) std::memcpy(host + c.lo * (long long)L, d.pinned, w * 8);
        return r;
    });
}

// n, L and the number of chunks (devices) of a batch.
void unifl_gpu_batch_shape(void *batch, long long *n, int *L, int *chunks) {
    const DBatch *b = (const DBatch *)batch;
    *n = b->n;
    *L = b->L;
    *chunks = (int)b->chunks.size();
}

void unifl_gpu_batch_free(void *batch) { free_batch((DBatch *)batch); }

// ---- ops: every result is a new device batch (*out)
// out = a·b·R^-1 (mode 0) or a·b mod m (mode 1); b may be one shared host row.
int unifl_gpu_mul(void *key, Operand a, Operand b, long long n, int mode, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    return run_op(n, nullptr, {&a, &b}, {L, L}, L, out, [&](const Part &pt, Chunk &o, const std::vector<View> &v) {
        Device &d = *pt.dev;
        const View &va = v[0], &vb = v[1];
        const long long cnt = pt.hi - pt.lo;
        const u64 *kd = k.dev[d.id];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            k_mul<LM><<<grid_size(cnt, tpb), tpb, kl * 8, d.stream>>>(cnt, kd, kl, o.ptr, limb_major(o), va.ptr,
                                                                      va.lay, vb.ptr, vb.lay, mode);
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
    return run_op(n, nullptr, {&base, &exps}, {L, exps.limbs}, L, out,
                  [&](const Part &pt, Chunk &o, const std::vector<View> &v) {
        Device &d = *pt.dev;
        const View &vb = v[0], &ve = v[1];
        const long long cnt = pt.hi - pt.lo;
        const u64 *kd = k.dev[d.id];
        const int shared = exps.rows == 1 && n != 1;
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(cnt, LM, [&](long long i0, long long w) {
                k_exp<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, cnt, kd, kl, o.ptr, limb_major(o),
                                                                        vb.ptr, vb.lay, ve.ptr, exps.limbs, shared,
                                                                        mode);
            });
        });
        return ok ? finish(d) : kErrSize;
    });
}

// out[kk] = prod_i bases_i^exps[kk, i] (Montgomery form), kk < K (UniFL Alg. 5).  exps: host
// (K, N, le).  Host bases: K split over the devices, every part stages all N bases.  Batch bases
// (one chunk): on that chunk's device; several chunks: kErrLayout (the caller fetches them).
int unifl_gpu_multi_exp(void *key, Operand bases, long long N, const u64 *exps, long long K, int le,
                        void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    *out = nullptr;
    int e0 = ensure_init();
    if (e0) return e0;
    if (N <= 0 || K <= 0) return kErrShape;
    std::vector<Part> parts;
    if (bases.batch) {
        const DBatch *b = (const DBatch *)bases.batch;
        if (b->n != N || b->L != L) return kErrShape;
        if (b->chunks.size() != 1) return kErrLayout;
        parts.push_back(Part{b->chunks[0].dev, 0, K});
    } else {
        if (!bases.host || bases.rows != N || bases.limbs != L) return kErrShape;
        parts = plan(K);
    }
    DBatch *res = new_batch(K, L, parts);
    if (!res) return kErrAlloc;
    int e = run_on(parts, [&](size_t p) -> int {
        Part &pt = parts[p];
        Device &d = *pt.dev;
        Chunk &o = res->chunks[p];
        int r = alloc_chunk(o, L);
        if (r) return r;
        const long long rows = pt.hi - pt.lo, S = rows * N;
        // staged: the exponents of rows [lo, hi) and (host bases) all N bases, as one part of N·rows
        Operand ex{nullptr, exps + pt.lo * N * le, 1, int(S * le)};
        Operand hb{nullptr, bases.host, 1, int(N * L)};
        std::vector<View> st;
        std::vector<const Operand *> hs{&ex};
        if (!bases.batch) hs.push_back(&hb);
        const size_t ws = size_t(S) * L;
        r = stage(d, pt, hs, st, ws);
        if (r) return r;
        const u64 *bptr = bases.batch ? ((const DBatch *)bases.batch)->chunks[0].ptr : st[1].ptr;
        const Lay lay_b = bases.batch ? Lay{1, N} : Lay{L, 1};
        u64 *scratch = d.arena + size_t(S) * le + (bases.batch ? 0 : size_t(N) * L);
        const Lay lay_s{1, S};
        const u64 *kd = k.dev[d.id];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(S, LM, [&](long long i0, long long w) {
                k_powers<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, S, kd, kl, scratch, lay_s, bptr,
                                                                           lay_b, st[0].ptr, le, N);
            });
            for (long long cnt = N; cnt > 1; cnt = (cnt + 1) / 2) {
                const long long inst = rows * (cnt - (cnt + 1) / 2);
                k_prod_round<LM><<<grid_size(inst, tpb), tpb, kl * 8, d.stream>>>(inst, kd, kl, scratch, lay_s,
                                                                                  N, cnt);
            }
        });
        if (!ok) return kErrSize;
        // element kk·N of the scratch is row kk's product: gather them into the output chunk
        k_relayout<<<grid_size(rows, 256), 256, 0, d.stream>>>(rows, L, o.ptr, limb_major(o), scratch, Lay{N, S});
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
    return run_op(n, nullptr, {&m, &r}, {Ln, Ln}, L2, out, [&](const Part &pt, Chunk &o, const std::vector<View> &v) {
        Device &d = *pt.dev;
        const View &vm = v[0], &vr = v[1];
        const long long cnt = pt.hi - pt.lo;
        const u64 *kd = k.dev[d.id];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(cnt, LM, [&](long long i0, long long w) {
                k_encrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, cnt, kd, kl, o.ptr, limb_major(o),
                                                                            vm.ptr, vm.lay, vr.ptr, vr.lay);
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
    return run_op(n, nullptr, {&c}, {L2}, Ln, out, [&](const Part &pt, Chunk &o, const std::vector<View> &v) {
        Device &d = *pt.dev;
        const View &vc = v[0];
        const long long cnt = pt.hi - pt.lo;
        const u64 *kd = k.dev[d.id];
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            in_waves(cnt, LM, [&](long long i0, long long w) {
                k_decrypt<LM><<<grid_size(w, tpb), tpb, kl * 8, d.stream>>>(i0, cnt, kd, kl, o.ptr, limb_major(o),
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

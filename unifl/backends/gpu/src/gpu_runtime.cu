// UniFL gpu backend: CUDA kernels and their host runtime, built by nvcc into libunifl_gpu.so and
// loaded by unifl/backends/gpu/runtime.py with ctypes (a plain C ABI: the Python side needs no
// pybind11 build with nvcc, and a missing driver shows up as an error code, not an import failure).
//
// Kernels: each __global__ wrapper copies the key blob into shared memory (UniFL Alg. 4 lines 5-9),
// computes its instance index (one thread per instance) and calls the __host__ __device__ body of
// kernels.cuh.  Runtime: devices found with cudaGetDeviceCount; per device one non-blocking stream,
// one pinned host staging buffer and one device arena, both grown on demand and reused; keys are
// uploaded once to every device; a batch is split across the devices, least-loaded first, each part
// transposed to the limb-major device layout in the pinned buffer, copied, computed and copied back
// on its device's stream (one host thread per device part, so devices run concurrently).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <new>
#include <thread>
#include <vector>

#include "kernels.cuh"

using unifl_gpu::Lay;
using unifl_gpu::u64;

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
__global__ void k_mul(long long n, const u64 *key, int key_len, u64 *out, const u64 *a, const u64 *b,
                      Lay lay, int mode) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_mul<LM>(i, k, out, a, b, lay, mode);
}

template <int LM>
__global__ void k_exp(long long n, const u64 *key, int key_len, u64 *out, const u64 *base, Lay lay,
                      const u64 *exps, int le, int e_shared, int mode) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_exp<LM>(i, k, out, base, lay, exps, le, e_shared, mode);
}

template <int LM>
__global__ void k_powers(long long n, const u64 *key, int key_len, u64 *scratch, Lay lay_s,
                         const u64 *bases, Lay lay_b, const u64 *exps, int le, long long N) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
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
__global__ void k_encrypt(long long n, const u64 *key, int key_len, u64 *out, Lay lay_2, const u64 *m,
                          const u64 *r, Lay lay_n) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_paillier_encrypt<LM>(i, k, out, lay_2, m, r, lay_n);
}

template <int LM>
__global__ void k_decrypt(long long n, const u64 *key, int key_len, u64 *out, Lay lay_n, const u64 *c,
                          Lay lay_2) {
    const u64 *k = stage_key(key, key_len);
    const long long i = instance();
    if (i < n) unifl_gpu::body_paillier_decrypt<LM>(i, k, out, lay_n, c, lay_2);
}

// Threads per block: big local frames (the 16-entry window table) favour smaller blocks at large L.
inline int block_size(int lmax) { return lmax >= 64 ? 64 : 128; }
inline unsigned grid_size(long long n, int tpb) { return (unsigned)((n + tpb - 1) / tpb); }

// ------------------------------------------------------------------------------------- runtime
constexpr int kErrSize = -1;      // a size outside what the kernels are instantiated for
constexpr int kErrNoDevice = -2;  // no device initialised
constexpr int kErrAlloc = -3;     // host allocation failed
constexpr int kMaxSharedKey = 48 * 1024;

struct Device {
    int id = 0;
    cudaStream_t stream = nullptr;
    std::mutex mu;                 // one batch part at a time per device
    std::atomic<long long> load{0};
    u64 *pinned = nullptr;         // host staging (cudaHostAlloc)
    size_t pinned_words = 0;
    u64 *arena = nullptr;          // device buffers
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

// Runs fn(part) for every part, one host thread per device; returns the first error.
template <class F>
int run_parts(long long n, F fn) {
    std::vector<Part> parts = plan(n);
    std::vector<int> errs(parts.size(), 0);
    std::vector<std::thread> threads;
    for (size_t p = 0; p < parts.size(); ++p) {
        threads.emplace_back([&, p]() {
            Part &pt = parts[p];
            std::lock_guard<std::mutex> lock(pt.dev->mu);
            pt.dev->load += pt.hi - pt.lo;
            cudaError_t e = cudaSetDevice(pt.dev->id);
            errs[p] = e ? (int)e : fn(pt);
            pt.dev->load -= pt.hi - pt.lo;
        });
    }
    for (auto &t : threads) t.join();
    for (int e : errs)
        if (e) return e;
    return 0;
}

// element-major rows [lo, hi) of src (L limbs) -> limb-major dst (stride cnt), and back
void to_soa(u64 *dst, const u64 *src, long long lo, long long hi, int L) {
    const long long cnt = hi - lo;
    for (long long i = 0; i < cnt; ++i)
        for (int j = 0; j < L; ++j) dst[j * cnt + i] = src[(lo + i) * L + j];
}

void from_soa(u64 *dst, const u64 *src, long long lo, long long hi, int L) {
    const long long cnt = hi - lo;
    for (long long i = 0; i < cnt; ++i)
        for (int j = 0; j < L; ++j) dst[(lo + i) * L + j] = src[j * cnt + i];
}

int finish(Device &d) {
    cudaError_t e = cudaGetLastError();
    if (e) return (int)e;
    return (int)cudaStreamSynchronize(d.stream);
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

// out = a·b·R^-1 (mode 0) or a·b mod m (mode 1); a, b, out: (n, L) element-major host arrays.
int unifl_gpu_mul(void *key, const u64 *a, const u64 *b, u64 *out, long long n, int mode) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    return run_parts(n, [&](Part &pt) -> int {
        Device &d = *pt.dev;
        const long long cnt = pt.hi - pt.lo;
        const size_t w = size_t(cnt) * L;
        cudaError_t e = d.reserve(3 * w, 3 * w);
        if (e) return (int)e;
        to_soa(d.pinned, a, pt.lo, pt.hi, L);
        to_soa(d.pinned + w, b, pt.lo, pt.hi, L);
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, 2 * w * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        const u64 *kd = k.dev[d.id];
        const Lay lay{1, cnt};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            k_mul<LM><<<grid_size(cnt, tpb), tpb, kl * 8, d.stream>>>(cnt, kd, kl, d.arena + 2 * w, d.arena,
                                                                      d.arena + w, lay, mode);
        });
        if (!ok) return kErrSize;
        if ((e = cudaMemcpyAsync(d.pinned + 2 * w, d.arena + 2 * w, w * 8, cudaMemcpyDeviceToHost, d.stream)))
            return (int)e;
        int r = finish(d);
        if (!r) from_soa(out, d.pinned + 2 * w, pt.lo, pt.hi, L);
        return r;
    });
}

// out = base^e (mode 1: plain in/out) or x̄^e in the domain (mode 0); exps (n|1, le) element-major.
int unifl_gpu_exp(void *key, const u64 *base, const u64 *exps, int le, int e_shared, u64 *out, long long n,
                  int mode) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    return run_parts(n, [&](Part &pt) -> int {
        Device &d = *pt.dev;
        const long long cnt = pt.hi - pt.lo;
        const size_t w = size_t(cnt) * L;
        const size_t we = size_t(e_shared ? 1 : cnt) * le;
        cudaError_t e = d.reserve(2 * w + we, 2 * w + we);
        if (e) return (int)e;
        to_soa(d.pinned, base, pt.lo, pt.hi, L);
        std::memcpy(d.pinned + w, exps + (e_shared ? 0 : pt.lo * le), we * 8);
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, (w + we) * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        const u64 *kd = k.dev[d.id];
        const Lay lay{1, cnt};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            k_exp<LM><<<grid_size(cnt, tpb), tpb, kl * 8, d.stream>>>(cnt, kd, kl, d.arena + w + we, d.arena,
                                                                      lay, d.arena + w, le, e_shared, mode);
        });
        if (!ok) return kErrSize;
        if ((e = cudaMemcpyAsync(d.pinned + w + we, d.arena + w + we, w * 8, cudaMemcpyDeviceToHost, d.stream)))
            return (int)e;
        int r = finish(d);
        if (!r) from_soa(out, d.pinned + w + we, pt.lo, pt.hi, L);
        return r;
    });
}

// out[kk] = prod_i bases_i^exps[kk, i] (Montgomery form), kk < K; split over kk across devices.
int unifl_gpu_multi_exp(void *key, const u64 *bases, long long N, const u64 *exps, long long K, int le,
                        u64 *out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    const int kl = (int)k.host.size();
    if (N <= 0) return kErrSize;
    return run_parts(K, [&](Part &pt) -> int {
        Device &d = *pt.dev;
        const long long rows = pt.hi - pt.lo, S = rows * N;
        const size_t wb = size_t(N) * L, we = size_t(S) * le, ws = size_t(S) * L, wo = size_t(rows) * L;
        cudaError_t e = d.reserve(wb + we + wo, wb + we + ws);
        if (e) return (int)e;
        to_soa(d.pinned, bases, 0, N, L);
        std::memcpy(d.pinned + wb, exps + pt.lo * N * le, we * 8);
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, (wb + we) * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        const u64 *kd = k.dev[d.id];
        u64 *scratch = d.arena + wb + we;
        const Lay lay_b{1, N}, lay_s{1, S};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            k_powers<LM><<<grid_size(S, tpb), tpb, kl * 8, d.stream>>>(S, kd, kl, scratch, lay_s, d.arena, lay_b,
                                                                       d.arena + wb, le, N);
            for (long long cnt = N; cnt > 1; cnt = (cnt + 1) / 2) {
                const long long inst = rows * (cnt - (cnt + 1) / 2);
                k_prod_round<LM><<<grid_size(inst, tpb), tpb, kl * 8, d.stream>>>(inst, kd, kl, scratch, lay_s,
                                                                                  N, cnt);
            }
        });
        if (!ok) return kErrSize;
        // element kk·N of the limb-major scratch, for every limb: a strided 2-D copy per limb
        u64 *host_out = d.pinned + wb + we;
        for (int j = 0; j < L; ++j) {
            if ((e = cudaMemcpy2DAsync(host_out + size_t(j) * rows, 8, scratch + size_t(j) * S, size_t(N) * 8, 8,
                                       (size_t)rows, cudaMemcpyDeviceToHost, d.stream)))
                return (int)e;
        }
        int r = finish(d);
        if (!r) from_soa(out, host_out, pt.lo, pt.hi, L);
        return r;
    });
}

// Fused Paillier encryption (Alg. 4): m, r (n, Ln); out (n, L2), Montgomery form mod n².
int unifl_gpu_paillier_encrypt(void *pub, const u64 *m, const u64 *r, u64 *out, long long n) {
    Key &k = *(Key *)pub;
    const unifl_gpu::PubKey pk = unifl_gpu::parse_pub(k.host.data());
    const int Ln = pk.Ln, L2 = pk.n2.L;
    const int kl = (int)k.host.size();
    return run_parts(n, [&](Part &pt) -> int {
        Device &d = *pt.dev;
        const long long cnt = pt.hi - pt.lo;
        const size_t wn = size_t(cnt) * Ln, w2 = size_t(cnt) * L2;
        cudaError_t e = d.reserve(2 * wn + w2, 2 * wn + w2);
        if (e) return (int)e;
        to_soa(d.pinned, m, pt.lo, pt.hi, Ln);
        to_soa(d.pinned + wn, r, pt.lo, pt.hi, Ln);
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, 2 * wn * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        const u64 *kd = k.dev[d.id];
        const Lay lay_n{1, cnt};
        const Lay lay_2{1, cnt};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            k_encrypt<LM><<<grid_size(cnt, tpb), tpb, kl * 8, d.stream>>>(cnt, kd, kl, d.arena + 2 * wn, lay_2,
                                                                          d.arena, d.arena + wn, lay_n);
        });
        if (!ok) return kErrSize;
        if ((e = cudaMemcpyAsync(d.pinned + 2 * wn, d.arena + 2 * wn, w2 * 8, cudaMemcpyDeviceToHost, d.stream)))
            return (int)e;
        int res = finish(d);
        if (!res) from_soa(out, d.pinned + 2 * wn, pt.lo, pt.hi, L2);
        return res;
    });
}

// CRT decryption: c (n, L2) Montgomery form mod n² -> m (n, Ln).
int unifl_gpu_paillier_decrypt(void *priv, const u64 *c, u64 *out, long long n) {
    Key &k = *(Key *)priv;
    const unifl_gpu::PrivKey sk = unifl_gpu::parse_priv(k.host.data());
    const int Ln = sk.Ln, L2 = sk.L2;
    const int kl = (int)k.host.size();
    return run_parts(n, [&](Part &pt) -> int {
        Device &d = *pt.dev;
        const long long cnt = pt.hi - pt.lo;
        const size_t wn = size_t(cnt) * Ln, w2 = size_t(cnt) * L2;
        cudaError_t e = d.reserve(w2 + wn, w2 + wn);
        if (e) return (int)e;
        to_soa(d.pinned, c, pt.lo, pt.hi, L2);
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, w2 * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        const u64 *kd = k.dev[d.id];
        const Lay lay_n{1, cnt};
        const Lay lay_2{1, cnt};
        const bool ok = UNIFL_WITH_LMAX(k.lmax, {
            const int tpb = block_size(LM);
            k_decrypt<LM><<<grid_size(cnt, tpb), tpb, kl * 8, d.stream>>>(cnt, kd, kl, d.arena + w2, lay_n,
                                                                          d.arena, lay_2);
        });
        if (!ok) return kErrSize;
        if ((e = cudaMemcpyAsync(d.pinned + w2, d.arena + w2, wn * 8, cudaMemcpyDeviceToHost, d.stream)))
            return (int)e;
        int res = finish(d);
        if (!res) from_soa(out, d.pinned + w2, pt.lo, pt.hi, Ln);
        return res;
    });
}

}  // extern "C"

#ifdef UNIFL_WITH_CGBN
// Optional CGBN variant (needs CGBN_INCLUDE_DIR at build time; uses the runtime helpers above).
#include "gpu_cgbn.cuh"
#endif

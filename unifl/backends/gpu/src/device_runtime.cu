// UniFL gpu backend: the device runtime (declarations and what each piece is for: device_runtime.cuh).
#include "device_runtime.cuh"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace unifl_gpu {
namespace rt {

namespace {

long long g_wave_override = -1;
int g_device_count = 0;
std::vector<Device *> g_devices;  // index = CUDA device id; created on first use
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

}  // namespace

cudaError_t Device::reserve(size_t host_words, size_t dev_words) {
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

int ensure_init() {
    std::call_once(g_init_once, init_runtime);
    return g_init_error;
}

int device_count() { return g_device_count; }

long long wave_size() {
    if (g_wave_override >= 0) return g_wave_override ? g_wave_override : (1LL << 62);
    return 16384;
}

// (a context is made only on the devices an engine is opened on)
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
        int optin = 0, sms = 0;
        if ((ce = cudaSetDevice(id)) ||
            (ce = cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking)) ||
            (ce = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, id)) ||
            (ce = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, id))) {
            delete dev;
            return (int)ce;
        }
        dev->smem_optin = size_t(std::max(optin, 48 * 1024));
        dev->sms = std::max(sms, 1);
        g_devices[size_t(id)] = dev;
    }
    *out = g_devices[size_t(id)];
    return 0;
}

const Device *opened_device(int id) {
    if (ensure_init() || id < 0 || id >= g_device_count) return nullptr;
    std::lock_guard<std::mutex> g(g_devices_mu);
    return g_devices[size_t(id)];
}

int finish(Device &d) {
    cudaError_t e = cudaGetLastError();
    if (e) return (int)e;
    return (int)cudaStreamSynchronize(d.stream);
}

// Past 48 KiB a kernel must opt in (cudaFuncAttributeMaxDynamicSharedMemorySize, per kernel and
// device; set once and remembered); past the device's opt-in limit no launch can work, so the op is
// refused with kErrSmem rather than failing at launch.  The group kernels with window tables need
// it: 128 threads of LPT = 8 take 64.5 KiB of 4-bit tables per block (16 entries of LPT words per
// thread).
int allow_smem(Device &d, const void *kernel, size_t bytes) {
    if (bytes <= 48 * 1024) return 0;
    if (bytes > d.smem_optin) return kErrSmem;
    size_t &allowed = d.smem_allowed[kernel];
    if (allowed >= bytes) return 0;
    cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e) return (int)e;
    allowed = bytes;
    return 0;
}

void free_batch(DBatch *b) {
    if (!b) return;
    if (b->ptr) {
        cudaSetDevice(b->dev->id);
        cudaFreeAsync(b->ptr, b->dev->stream);
    }
    delete b;
}

int stage_blocks(Device &d, const std::vector<HostBlock> &blocks, std::vector<u64 *> &dev,
                 size_t extra_dev_words, u64 **rest) {
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
        if ((e = cudaMemcpyAsync(d.arena, d.pinned, total * 8, cudaMemcpyHostToDevice, d.stream)))
            return (int)e;
        d.uploads += 1;
    }
    if (rest) *rest = d.arena + total;
    return 0;
}

int stage(Device &d, long long cnt, const std::vector<const Operand *> &ops, std::vector<View> &out,
          size_t extra_dev_words, u64 **rest) {
    std::vector<HostBlock> blocks;
    for (const Operand *o : ops)
        blocks.push_back(HostBlock{o->host, size_t(o->rows == 1 ? 1 : cnt) * o->limbs});
    std::vector<u64 *> dev;
    int r = stage_blocks(d, blocks, dev, extra_dev_words, rest);
    if (r) return r;
    out.clear();
    for (size_t j = 0; j < ops.size(); ++j) {
        View s;
        s.ptr = dev[j];
        s.lay.se = ops[j]->rows == 1
                       ? 0
                       : ops[j]->limbs;  // (a conditional of two Lay{...} crashes cicc 13.0)
        s.lay.sl = 1;
        out.push_back(s);
    }
    return 0;
}

int check_operand(const Operand &o, long long n, int limbs, const Device &d) {
    if (o.batch) {
        const DBatch *b = (const DBatch *)o.batch;
        if (b->n != n || b->L != limbs) return kErrShape;
        return b->dev == &d ? 0 : kErrLayout;
    }
    if (!o.host || (o.rows != 1 && o.rows != n) || o.limbs != limbs) return kErrShape;
    return 0;
}

bool exponents_fit(const u64 *a, long long n, int La, long long covered) {
    for (int l = 0; l < La; ++l) {
        const long long lo = 64LL * l;
        const u64 keep = covered >= lo + 64 ? ~0ull
                         : covered <= lo    ? 0ull
                                            : ((1ull << (covered - lo)) - 1);
        if (keep == ~0ull) continue;
        for (long long i = 0; i < n; ++i)
            if (a[i * La + l] & ~keep) return false;
    }
    return true;
}

int check_table(const void *t, const Device &d, int w, int nwin, int L) {
    const Table *tb = (const Table *)t;
    if (!tb || w < 1 || w > 16 || nwin < 1) return kErrShape;
    if (tb->dev != &d) return kErrLayout;
    return tb->words == (long long)nwin * ((1LL << w) - 1) * L ? 0 : kErrShape;
}

}  // namespace rt
}  // namespace unifl_gpu

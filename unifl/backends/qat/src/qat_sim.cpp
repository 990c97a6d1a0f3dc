// UniFL's QAT simulator: a shared library exporting the QAT C functions and struct layouts the
// driver uses (cpa_api.h), so our driver code runs unchanged where no QAT device exists.
//
// It behaves like a polled QAT endpoint where it matters to a driver:
// * operands are read and the result written asynchronously, on engine worker threads, after
//   cpaCyLnModExp has returned -- a driver that reuses a buffer before its callback gets caught;
// * completions are delivered only through icp_sal_CyPollInstance, on the polling thread;
// * each instance has a ring of `ring` slots; a slot is held from submission until the response is
//   polled out, and a full ring answers CPA_STATUS_RETRY;
// * every flat buffer must come from qaeMemAllocNUMA (it is translated with the function given to
//   cpaCySetAddressTranslation, and an untranslatable address is CPA_STATUS_INVALID_PARAM);
// * the documented operand limits hold (8192 bits, modulus > 0, result buffer >= modulus);
// * cpaCyQueryCapabilities answers per instance; a symmetric-only instance (no lnSupported) fails
//   every cpaCyLnModExp with CPA_STATUS_FAIL, as qatlib's instance-type check does;
// * a size class the "library" does not implement (UNIFL_QAT_SIM_MAX_BITS) is refused at submission
//   with CPA_STATUS_FAIL, as qatlib's size-class lookup does;
// * pinned memory freed after icp_sal_userStop is refused (not freed) and counted: USDM memory
//   belongs to the user-space process, so a driver must free it before stopping that process.
// It is loaded RTLD_LOCAL by the driver: its qaeMem*/icp_sal_* stay out of the global scope.
// ModExp is computed in software with libcrypto (BN_mod_exp_mont, declarations shared with the
// native backend in unifl/core/include/unifl/bn_api.h); the simulator supports odd moduli only (the only
// kind UniFL sends) and answers CPA_STATUS_UNSUPPORTED for an even one.
//
// Configuration (read at icp_sal_userStart, so a restart picks up new values):
//   UNIFL_QAT_SIM_INSTANCES  crypto instances (default 2)
//   UNIFL_QAT_SIM_RING       ring slots per instance (default 64, qatlib's CyNumConcurrentAsymRequests)
//   UNIFL_QAT_SIM_ENGINES    engine threads shared by all instances (default 2)
//   UNIFL_QAT_SIM_LATENCY_US minimum service time of one 2048-bit-class ModExp with a 2048-bit
//                            exponent; other ops scale as (class/2048)^2 * (exponent bits/2048),
//                            the cost shape of square-and-multiply on a fixed-width PKE slice
//                            (default 0: as fast as the host computes)
//   UNIFL_QAT_SIM_FAIL_RATE  fraction of requests completed with CPA_STATUS_FAIL (default 0)
//   UNIFL_QAT_SIM_SEED       seed of the (non-cryptographic) failure-injection generator
//   UNIFL_QAT_SIM_MAX_CORES  CpaInstanceInfo2 layout to write: 4096 (default) or 256
//   UNIFL_QAT_SIM_SYM_ONLY   how many instances (the first ones) are symmetric-only (default 0)
//   UNIFL_QAT_SIM_MAX_BITS   widest size class implemented (default 8192; 4096 plays a library
//                            that refuses 8192-bit operations); unifl_qat_sim_set_max_bits
//                            changes it while running
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "unifl/bn_api.h"
#include "cpa_api.h"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

using Clock = std::chrono::steady_clock;

struct Instance;

struct Request {
    Instance *inst;
    CpaCyGenFlatBufCbFunc cb;
    void *tag;
    const CpaCyLnModExpOpData *op;
    CpaFlatBuffer *result;
    bool inject_failure;
    CpaStatus status;
};

struct Instance {
    int id = 0;
    bool started = false;
    bool sym_only = false;  // no large-number API: cpaCyLnModExp fails
    CpaVirtualToPhysical v2p = nullptr;
    std::mutex mu;
    std::deque<Request> done;  // responses waiting to be polled out
    int occupancy = 0;         // ring slots in use (submitted, not yet polled out)
};

struct Sim {
    std::mutex mu;  // guards started/instances/pending/stop
    std::condition_variable cv;
    bool started = false;
    bool stop = false;
    std::vector<std::unique_ptr<Instance>> instances;
    std::deque<Request> pending;
    std::vector<std::thread> engines;
    int ring = 64, n_engines = 2, max_cores = 4096;
    std::atomic<unsigned> max_bits{8192};
    double latency_us = 0, fail_rate = 0;
    uint64_t rng = 1;
    // statistics
    std::atomic<uint64_t> submitted{0}, retries{0}, injected{0}, completed{0}, busy_ns{0};
    std::atomic<uint64_t> frees_after_stop{0};  // qaeMemFreeNUMA refused after icp_sal_userStop
    std::atomic<bool> stopped{false};           // icp_sal_userStop ran, no start since
    // pinned-memory registry: start address -> size
    std::mutex mem_mu;
    std::map<uintptr_t, size_t> allocations;
};

Sim g;

long env_long(const char *name, long dflt) {
    const char *v = std::getenv(name);
    return (v && *v) ? std::strtol(v, nullptr, 10) : dflt;
}
double env_double(const char *name, double dflt) {
    const char *v = std::getenv(name);
    return (v && *v) ? std::strtod(v, nullptr) : dflt;
}

// xorshift64*: failure injection only, never cryptographic
double next_uniform() {
    uint64_t x = g.rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    g.rng = x;
    return double((x * 0x2545F4914F6CDD1DULL) >> 11) / double(1ULL << 53);
}

unsigned significant_bytes(const CpaFlatBuffer &b) {
    unsigned i = 0;
    while (i < b.dataLenInBytes && b.pData[i] == 0) ++i;
    return b.dataLenInBytes - i;
}

// big-endian buffer -> BIGNUM (through the little-endian loader the shared header declares)
void load_be(BIGNUM *r, const CpaFlatBuffer &b, std::vector<unsigned char> &tmp) {
    tmp.assign(b.pData, b.pData + b.dataLenInBytes);
    std::reverse(tmp.begin(), tmp.end());
    BN_lebin2bn(tmp.data(), int(tmp.size()), r);
}

void compute(Request &rq, BN_CTX *ctx, BIGNUM *m, BIGNUM *x, BIGNUM *e, BIGNUM *r,
             std::vector<unsigned char> &tmp) {
    const auto t0 = Clock::now();
    const CpaCyLnModExpOpData &op = *rq.op;
    CpaFlatBuffer &out = *rq.result;
    if (rq.inject_failure) {
        std::memset(out.pData, 0xEE, out.dataLenInBytes);  // garbage a driver must not use
        rq.status = CPA_STATUS_FAIL;
    } else {
        load_be(m, op.modulus, tmp);
        load_be(x, op.base, tmp);
        load_be(e, op.exponent, tmp);
        if (!BN_mod_exp_mont(r, x, e, m, ctx, nullptr)) {
            rq.status = CPA_STATUS_FAIL;
        } else {
            tmp.assign(out.dataLenInBytes, 0);
            BN_bn2lebinpad(r, tmp.data(), int(tmp.size()));
            std::reverse(tmp.begin(), tmp.end());
            std::memcpy(out.pData, tmp.data(), tmp.size());
            rq.status = CPA_STATUS_SUCCESS;
        }
    }
    if (g.latency_us > 0) {  // the op occupies its engine at least this long
        unsigned cls =
            qat_class_bytes(std::max({significant_bytes(op.modulus), significant_bytes(op.base),
                                      significant_bytes(op.exponent), 1u})) *
            8;
        double ebits = std::max(64.0, 8.0 * significant_bytes(op.exponent));
        double us = g.latency_us * (cls / 2048.0) * (cls / 2048.0) * (ebits / 2048.0);
        auto until = t0 + std::chrono::nanoseconds(int64_t(us * 1000));
        std::this_thread::sleep_until(until);
    }
    g.busy_ns +=
        uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

void engine_loop() {
    BN_CTX *ctx = BN_CTX_new();
    BIGNUM *m = BN_new(), *x = BN_new(), *e = BN_new(), *r = BN_new();
    std::vector<unsigned char> tmp;
    for (;;) {
        Request rq;
        {
            std::unique_lock<std::mutex> lk(g.mu);
            g.cv.wait(lk, [] { return g.stop || !g.pending.empty(); });
            if (g.stop) break;  // requests still pending are dropped, as on a stopped device
            rq = g.pending.front();
            g.pending.pop_front();
        }
        compute(rq, ctx, m, x, e, r, tmp);
        std::lock_guard<std::mutex> lk(rq.inst->mu);
        rq.inst->done.push_back(rq);
        g.completed++;
    }
    BN_clear_free(m);
    BN_clear_free(x);
    BN_clear_free(e);
    BN_clear_free(r);
    BN_CTX_free(ctx);
}

bool translatable(Instance *inst, const CpaFlatBuffer &b) {
    return b.pData && b.dataLenInBytes && inst->v2p && inst->v2p(b.pData) != 0;
}

Instance *as_instance(CpaInstanceHandle h) {
    for (auto &p : g.instances)
        if (p.get() == h) return p.get();
    return nullptr;
}

}  // namespace

// ------------------------------------------------------------------ process / instance lifecycle
SIM_EXPORT const char *unifl_qat_sim_identity(void) { return "UniFL QAT simulator"; }

SIM_EXPORT CpaStatus icp_sal_userStart(const char *pProcessName) {
    std::lock_guard<std::mutex> lk(g.mu);
    if (g.started) return CPA_STATUS_FAIL;
    int n = int(std::clamp(env_long("UNIFL_QAT_SIM_INSTANCES", 2), 1L, 64L));
    g.ring = int(std::clamp(env_long("UNIFL_QAT_SIM_RING", 64), 1L, 4096L));
    g.n_engines = int(std::clamp(env_long("UNIFL_QAT_SIM_ENGINES", 2), 1L, 256L));
    g.latency_us = std::max(0.0, env_double("UNIFL_QAT_SIM_LATENCY_US", 0));
    g.fail_rate = std::clamp(env_double("UNIFL_QAT_SIM_FAIL_RATE", 0), 0.0, 1.0);
    g.rng = uint64_t(env_long("UNIFL_QAT_SIM_SEED", 1)) * 0x9E3779B97F4A7C15ULL | 1;
    g.max_cores = env_long("UNIFL_QAT_SIM_MAX_CORES", 4096) == 256 ? 256 : 4096;
    int sym_only = int(std::clamp(env_long("UNIFL_QAT_SIM_SYM_ONLY", 0), 0L, long(n)));
    g.max_bits = unsigned(std::clamp(env_long("UNIFL_QAT_SIM_MAX_BITS", 8192), 512L, 8192L));
    g.instances.clear();
    for (int i = 0; i < n; ++i) {
        g.instances.push_back(std::make_unique<Instance>());
        g.instances.back()->id = i;
        g.instances.back()->sym_only = i < sym_only;
    }
    g.pending.clear();
    g.stop = false;
    g.submitted = g.retries = g.injected = g.completed = g.busy_ns = 0;
    g.frees_after_stop = 0;
    g.stopped = false;
    for (int i = 0; i < g.n_engines; ++i) g.engines.emplace_back(engine_loop);
    g.started = true;
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus icp_sal_userStop(void) {
    {
        std::lock_guard<std::mutex> lk(g.mu);
        if (!g.started) return CPA_STATUS_FAIL;
        g.stop = true;
        g.started = false;
        g.stopped = true;
    }
    g.cv.notify_all();
    for (auto &t : g.engines) t.join();
    g.engines.clear();
    std::lock_guard<std::mutex> lk(g.mu);
    g.pending.clear();
    g.instances.clear();
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus cpaCyGetNumInstances(Cpa16U *pNumInstances) {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!pNumInstances) return CPA_STATUS_INVALID_PARAM;
    if (!g.started) return CPA_STATUS_FAIL;
    *pNumInstances = Cpa16U(g.instances.size());
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus cpaCyGetInstances(Cpa16U numInstances, CpaInstanceHandle *cyInstances) {
    std::lock_guard<std::mutex> lk(g.mu);
    if (!cyInstances || numInstances == 0 || numInstances > g.instances.size())
        return CPA_STATUS_INVALID_PARAM;
    for (Cpa16U i = 0; i < numInstances; ++i) cyInstances[i] = g.instances[i].get();
    return CPA_STATUS_SUCCESS;
}

template <unsigned MaxCores>
void fill_info(Instance *inst, void *out) {
    UniflCpaInstanceInfo2<MaxCores> info;
    std::memset(&info, 0, sizeof(info));
    info.head.accelerationServiceType = 0;  // crypto
    std::snprintf(reinterpret_cast<char *>(info.head.vendorName), 64, "UniFL");
    std::snprintf(reinterpret_cast<char *>(info.head.partName), 64, "QAT simulator");
    std::snprintf(reinterpret_cast<char *>(info.head.swVersion), 64, "unifl-qat-sim 0.1");
    std::snprintf(reinterpret_cast<char *>(info.head.instName), 64, "SSL_sim%d", inst->id);
    std::snprintf(reinterpret_cast<char *>(info.head.instID), 128, "sim:0:%d", inst->id);
    info.head.physInstId.executionEngineId = Cpa16U(inst->id);
    info.coreAffinity[0] = 1u;
    info.tail.nodeAffinity = 0;
    info.tail.operState = inst->started ? 1 : 0;
    info.tail.requiresPhysicallyContiguousMemory = CPA_TRUE;
    info.tail.isPolled = CPA_TRUE;
    info.tail.isOffloaded = CPA_FALSE;  // documented meaning: a software-only implementation
    std::memcpy(out, &info, sizeof(info));
}

SIM_EXPORT CpaStatus cpaCyInstanceGetInfo2(const CpaInstanceHandle h, void *pInstanceInfo2) {
    std::lock_guard<std::mutex> lk(g.mu);
    Instance *inst = as_instance(h);
    if (!inst || !pInstanceInfo2) return CPA_STATUS_INVALID_PARAM;
    if (g.max_cores == 256) fill_info<256>(inst, pInstanceInfo2);
    else fill_info<4096>(inst, pInstanceInfo2);
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus cpaCyStartInstance(CpaInstanceHandle h) {
    std::lock_guard<std::mutex> lk(g.mu);
    Instance *inst = as_instance(h);
    if (!inst) return CPA_STATUS_INVALID_PARAM;
    inst->started = true;
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus cpaCyStopInstance(CpaInstanceHandle h) {
    std::lock_guard<std::mutex> lk(g.mu);
    Instance *inst = as_instance(h);
    if (!inst) return CPA_STATUS_INVALID_PARAM;
    inst->started = false;
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus cpaCyQueryCapabilities(const CpaInstanceHandle h, void *pCapInfo) {
    std::lock_guard<std::mutex> lk(g.mu);
    Instance *inst = as_instance(h);
    if (!inst || !pCapInfo) return CPA_STATUS_INVALID_PARAM;
    if (!inst->started) return CPA_STATUS_FAIL;  // documented precondition: a started instance
    UniflCpaCyCapabilitiesInfo cap;
    std::memset(&cap, 0, sizeof(cap));
    cap.symSupported = CPA_TRUE;
    if (!inst->sym_only) cap.lnSupported = CPA_TRUE;  // the only asymmetric service we offer
    std::memcpy(pCapInfo, &cap, sizeof(cap));
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus cpaCySetAddressTranslation(const CpaInstanceHandle h,
                                                CpaVirtualToPhysical virtual2Physical) {
    std::lock_guard<std::mutex> lk(g.mu);
    Instance *inst = as_instance(h);
    if (!inst || !virtual2Physical) return CPA_STATUS_INVALID_PARAM;
    inst->v2p = virtual2Physical;
    return CPA_STATUS_SUCCESS;
}

// ------------------------------------------------------------------ the operation and the poll
SIM_EXPORT CpaStatus cpaCyLnModExp(const CpaInstanceHandle h, const CpaCyGenFlatBufCbFunc cb,
                                   void *tag, const CpaCyLnModExpOpData *op,
                                   CpaFlatBuffer *result) {
    std::unique_lock<std::mutex> lk(g.mu);
    Instance *inst = as_instance(h);
    if (!inst || !op || !result) return CPA_STATUS_INVALID_PARAM;
    if (!cb) return CPA_STATUS_UNSUPPORTED;  // the simulator offers the asynchronous mode only
    if (!g.started || !inst->started) return CPA_STATUS_FAIL;
    if (inst->sym_only) return CPA_STATUS_FAIL;  // qatlib: "the instance handle is the wrong type"
    for (const CpaFlatBuffer *b :
         {&op->modulus, &op->base, &op->exponent, (const CpaFlatBuffer *)result})
        if (!translatable(inst, *b) || b->dataLenInBytes > kQatMaxBytes)
            return CPA_STATUS_INVALID_PARAM;
    unsigned mod_bytes = significant_bytes(op->modulus);
    if (mod_bytes == 0 || result->dataLenInBytes < op->modulus.dataLenInBytes)
        return CPA_STATUS_INVALID_PARAM;
    if (!(op->modulus.pData[op->modulus.dataLenInBytes - 1] & 1)) return CPA_STATUS_UNSUPPORTED;
    {  // the size class the library would pick (widest operand, leading zeros not counted)
        unsigned widest = std::max({significant_bytes(op->modulus), significant_bytes(op->base),
                                    significant_bytes(op->exponent), 1u});
        if (qat_class_bytes(widest) * 8 > g.max_bits.load()) return CPA_STATUS_FAIL;
    }
    {
        std::lock_guard<std::mutex> ilk(inst->mu);
        if (inst->occupancy >= g.ring) {
            g.retries++;
            return CPA_STATUS_RETRY;
        }
        inst->occupancy++;
    }
    bool fail = g.fail_rate > 0 && next_uniform() < g.fail_rate;
    if (fail) g.injected++;
    g.pending.push_back(Request{inst, cb, tag, op, result, fail, CPA_STATUS_FAIL});
    g.submitted++;
    lk.unlock();
    g.cv.notify_one();
    return CPA_STATUS_SUCCESS;
}

SIM_EXPORT CpaStatus icp_sal_CyPollInstance(CpaInstanceHandle h, Cpa32U response_quota) {
    Instance *inst;
    {
        std::lock_guard<std::mutex> lk(g.mu);
        inst = as_instance(h);
        if (!inst) return CPA_STATUS_INVALID_PARAM;
        if (!g.started) return CPA_STATUS_FAIL;
    }
    std::deque<Request> batch;
    {
        std::lock_guard<std::mutex> lk(inst->mu);
        size_t n = response_quota ? std::min<size_t>(response_quota, inst->done.size())
                                  : inst->done.size();
        for (size_t i = 0; i < n; ++i) {
            batch.push_back(inst->done.front());
            inst->done.pop_front();
        }
        inst->occupancy -= int(n);  // a ring slot frees when its response is dequeued
    }
    if (batch.empty()) return CPA_STATUS_RETRY;  // documented: nothing to poll
    for (Request &rq : batch)
        rq.cb(rq.tag, rq.status, const_cast<CpaCyLnModExpOpData *>(rq.op), rq.result);
    return CPA_STATUS_SUCCESS;
}

// ------------------------------------------------------------------ USDM pinned memory
SIM_EXPORT int qaeMemInit(void) { return 0; }
SIM_EXPORT void qaeMemDestroy(void) {}

SIM_EXPORT void *qaeMemAllocNUMA(size_t size, int node, size_t phys_alignment_byte) {
    size_t align = std::max<size_t>(64, phys_alignment_byte);
    if (align & (align - 1)) return nullptr;
    size_t rounded = (std::max<size_t>(size, 1) + align - 1) / align * align;
    void *p = std::aligned_alloc(align, rounded);
    if (!p) return nullptr;
    std::memset(p, 0, rounded);
    std::lock_guard<std::mutex> lk(g.mem_mu);
    g.allocations[reinterpret_cast<uintptr_t>(p)] = rounded;
    return p;
}

SIM_EXPORT void qaeMemFreeNUMA(void **ptr) {
    if (!ptr || !*ptr) return;
    if (g.stopped.load()) {  // after icp_sal_userStop: refused (left allocated) and counted
        g.frees_after_stop++;
        return;
    }
    {
        std::lock_guard<std::mutex> lk(g.mem_mu);
        if (!g.allocations.erase(reinterpret_cast<uintptr_t>(*ptr))) return;  // not ours
    }
    std::free(*ptr);
    *ptr = nullptr;
}

// A stand-in "physical" address: the virtual one, for any address inside a live allocation; 0
// (the documented error value) otherwise.
SIM_EXPORT uint64_t qaeVirtToPhysNUMA(void *pVirtAddr) {
    auto a = reinterpret_cast<uintptr_t>(pVirtAddr);
    std::lock_guard<std::mutex> lk(g.mem_mu);
    auto it = g.allocations.upper_bound(a);
    if (it == g.allocations.begin()) return 0;
    --it;
    return a < it->first + it->second ? uint64_t(a) : 0;
}

// Simulator statistics (kSimStats entries): submitted, RETRY answers, injected failures,
// completed, engine-busy nanoseconds, engines, frees refused after icp_sal_userStop (since the last
// icp_sal_userStart), live pinned allocations.
SIM_EXPORT void unifl_qat_sim_stats(uint64_t out[kSimStats]) {
    out[0] = g.submitted;
    out[1] = g.retries;
    out[2] = g.injected;
    out[3] = g.completed;
    out[4] = g.busy_ns;
    out[5] = uint64_t(g.n_engines);
    out[6] = g.frees_after_stop;
    std::lock_guard<std::mutex> lk(g.mem_mu);
    out[7] = uint64_t(g.allocations.size());
}

// The widest size class implemented from now on (UNIFL_QAT_SIM_MAX_BITS while running).
SIM_EXPORT void unifl_qat_sim_set_max_bits(unsigned bits) {
    g.max_bits = std::clamp(bits, 512u, 8192u);
}

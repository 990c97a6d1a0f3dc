// UniFL's QAT driver: batched asynchronous cpaCyLnModExp through the documented QAT C API.
//
// Lifecycle (one Session per process and library, as qatlib allows one user-space process start):
//   dlopen libusdm (RTLD_GLOBAL) + libqat or our simulator (RTLD_LOCAL) -> qaeMemInit
//   -> icp_sal_userStart(section) -> cpaCyGetNumInstances / cpaCyGetInstances -> per instance:
//   cpaCyStartInstance, cpaCyInstanceGetInfo2, cpaCyQueryCapabilities (instances without the
//   large-number API, i.e. symmetric-only ones, are stopped and left out),
//   cpaCySetAddressTranslation(qaeVirtToPhysNUMA), one polling thread (icp_sal_CyPollInstance)
//   -> ... -> cpaCyStopInstance, qaeMemFreeNUMA (the pinned pool), icp_sal_userStop, qaeMemDestroy.
//
// Libraries.  USDM is loaded RTLD_GLOBAL before libqat: the QAT 1.x libqat_s.so takes the qaeMem*
// functions from the global scope.  The QAT library itself (and our simulator, which exports the
// same qaeMem*/icp_sal_* names) is loaded RTLD_LOCAL and used only through dlsym on its handle, so
// the simulator's copies never enter the global scope where another library could bind to them.
// A process runs either the simulator or a real library, never both (claim_process).
//
// A Job is one batch of ModExps base_i^e_i mod m.  Its submitter thread fills a slot -- op data and
// four operand buffers in one pinned block from a reused pool (qaeMemAllocNUMA) -- converting the
// little-endian limbs to big-endian octet strings padded to the op's size class (this boundary is
// the only place big-endian exists), and calls cpaCyLnModExp with a callback, round-robin over the
// instances, never more than max_in_flight outstanding.  CPA_STATUS_RETRY (ring full) backs off
// exponentially and resubmits, moving to the next instance.  The callback (on a polling thread)
// converts the result back, sets the element's completion flag and frees the slot.  Elements the
// device cannot or did not do -- operand wider than 8192 bits, a failed submission, a failed
// completion, a session closing -- are flagged FAILED and recomputed on the CPU by the caller;
// each element lands exactly once (a compare-and-swap on its flag decides).
//
// Size classes.  A library that does not implement a size class (older ones: 8192 bits) refuses the
// submission with CPA_STATUS_FAIL.  The first such refusal of a class that has never completed on
// the card sends that class to the CPU directly for the rest of the session (counted as
// class_fallbacks, listed by cpu_size_classes()); other classes keep using the card.  A class that
// has completed on the card is never switched off by a later failure (that is a fault, recomputed
// per request).
#include <dlfcn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "cpa_api.h"

namespace py = pybind11;
using u64 = uint64_t;
using Limbs = py::array_t<u64, py::array::c_style | py::array::forcecast>;
using Clock = std::chrono::steady_clock;

namespace {

enum Flag : uint8_t { PENDING = 0, DONE = 1, FAILED = 2, HOST = 3 };

std::string cpa_status_name(CpaStatus s) {
    switch (s) {
        case CPA_STATUS_SUCCESS: return "CPA_STATUS_SUCCESS";
        case CPA_STATUS_FAIL: return "CPA_STATUS_FAIL";
        case CPA_STATUS_RETRY: return "CPA_STATUS_RETRY";
        case CPA_STATUS_RESOURCE: return "CPA_STATUS_RESOURCE";
        case CPA_STATUS_INVALID_PARAM: return "CPA_STATUS_INVALID_PARAM";
        case CPA_STATUS_FATAL: return "CPA_STATUS_FATAL";
        case CPA_STATUS_UNSUPPORTED: return "CPA_STATUS_UNSUPPORTED";
        case CPA_STATUS_RESTARTING: return "CPA_STATUS_RESTARTING";
        default: return "CpaStatus(" + std::to_string(s) + ")";
    }
}

// ------------------------------------------------------------------ the library, resolved at run time
struct Api {
    void *h_qat = nullptr, *h_usdm = nullptr;
    std::string qat_path, usdm_path;
    bool simulator = false;
    fn_icp_sal_userStart userStart = nullptr;
    fn_icp_sal_userStop userStop = nullptr;
    fn_cpaCyGetNumInstances getNumInstances = nullptr;
    fn_cpaCyGetInstances getInstances = nullptr;
    fn_cpaCyInstanceGetInfo2 getInfo2 = nullptr;
    fn_cpaCyStartInstance startInstance = nullptr;
    fn_cpaCyQueryCapabilities queryCapabilities = nullptr;
    fn_cpaCyStopInstance stopInstance = nullptr;
    fn_cpaCySetAddressTranslation setAddressTranslation = nullptr;
    fn_cpaCyLnModExp lnModExp = nullptr;
    fn_icp_sal_CyPollInstance pollInstance = nullptr;
    fn_qaeMemInit memInit = nullptr;
    fn_qaeMemDestroy memDestroy = nullptr;
    fn_qaeMemAllocNUMA memAlloc = nullptr;
    fn_qaeMemFreeNUMA memFree = nullptr;
    fn_qaeVirtToPhysNUMA virtToPhys = nullptr;
    fn_unifl_qat_sim_stats simStats = nullptr;

    static void *open_first(const std::vector<std::string> &names, int mode, std::string &chosen,
                            std::string &errors) {
        for (const auto &n : names) {
            void *h = dlopen(n.c_str(), RTLD_NOW | mode);
            if (h) {
                chosen = n;
                return h;
            }
            const char *e = dlerror();
            errors += "\n  " + n + ": " + (e ? e : "not found");
        }
        return nullptr;
    }

    template <class F>
    F sym(const char *name, bool required = true) {
        void *p = dlsym(h_qat, name);
        if (!p && h_usdm) p = dlsym(h_usdm, name);
        if (!p && required)
            throw std::runtime_error(std::string("QAT library ") + qat_path + " lacks " + name);
        return reinterpret_cast<F>(p);
    }

    Api(const std::vector<std::string> &qat_names, const std::vector<std::string> &usdm_names) {
        std::string errors;
        // USDM first and global (libqat_s.so resolves qaeMem* from the global scope); the QAT
        // library local: everything of it is reached through dlsym on its handle
        if (!usdm_names.empty()) h_usdm = open_first(usdm_names, RTLD_GLOBAL, usdm_path, errors);
        h_qat = open_first(qat_names, RTLD_LOCAL, qat_path, errors);
        if (!h_qat) throw std::runtime_error("no QAT library could be loaded; tried:" + errors);
        userStart = sym<fn_icp_sal_userStart>("icp_sal_userStart");
        userStop = sym<fn_icp_sal_userStop>("icp_sal_userStop");
        getNumInstances = sym<fn_cpaCyGetNumInstances>("cpaCyGetNumInstances");
        getInstances = sym<fn_cpaCyGetInstances>("cpaCyGetInstances");
        getInfo2 = sym<fn_cpaCyInstanceGetInfo2>("cpaCyInstanceGetInfo2");
        startInstance = sym<fn_cpaCyStartInstance>("cpaCyStartInstance");
        queryCapabilities = sym<fn_cpaCyQueryCapabilities>("cpaCyQueryCapabilities");
        stopInstance = sym<fn_cpaCyStopInstance>("cpaCyStopInstance");
        setAddressTranslation = sym<fn_cpaCySetAddressTranslation>("cpaCySetAddressTranslation");
        lnModExp = sym<fn_cpaCyLnModExp>("cpaCyLnModExp");
        pollInstance = sym<fn_icp_sal_CyPollInstance>("icp_sal_CyPollInstance");
        memInit = sym<fn_qaeMemInit>("qaeMemInit", false);
        memDestroy = sym<fn_qaeMemDestroy>("qaeMemDestroy", false);
        memAlloc = sym<fn_qaeMemAllocNUMA>("qaeMemAllocNUMA");
        memFree = sym<fn_qaeMemFreeNUMA>("qaeMemFreeNUMA");
        virtToPhys = sym<fn_qaeVirtToPhysNUMA>("qaeVirtToPhysNUMA");
        simulator = sym<fn_unifl_qat_sim_identity>("unifl_qat_sim_identity", false) != nullptr;
        simStats = sym<fn_unifl_qat_sim_stats>("unifl_qat_sim_stats", false);
        claim_process(simulator, qat_path);
    }

    // One process runs the simulator or a real QAT library, not both: the two export the same
    // qaeMem*/icp_sal_* functions, and a real library bound to the simulator's copies would hand
    // unpinned memory to the device.  The first library a session starts with claims the process.
    static void claim_process(bool simulator, const std::string &path) {
        static std::mutex mu;
        static int kind = 0;  // 0: none yet, 1: a real library, 2: the simulator
        static std::string first;
        std::lock_guard<std::mutex> lk(mu);
        int want = simulator ? 2 : 1;
        if (kind == 0) {
            kind = want;
            first = path;
            return;
        }
        if (kind == want) return;
        if (kind == 2)
            throw std::runtime_error(
                "this process already loaded the QAT simulator (" + first +
                "); the real QAT "
                "library " +
                path +
                " cannot be started in the same process (both export "
                "qaeMem*/icp_sal_*, and a real library bound to the simulator's copies would give "
                "the device unpinned memory): run it in a new process");
        throw std::runtime_error(
            "this process already loaded the real QAT library " + first + "; the QAT simulator (" +
            path +
            ") cannot be started in the same process (both export qaeMem*/icp_sal_*): run "
            "it in a new process");
    }
    // No dlclose: a library with threads of its own is safest left mapped until exit.
};

// ------------------------------------------------------------------ CpaInstanceInfo2, read safely
struct InstanceInfo {
    std::string name, part, vendor, sw_version, layout;
    unsigned node = 0;
    bool polled = true, contiguous = true, offloaded = true, oper_up = false;
};

std::string c_string(const Cpa8U *p, size_t cap) {
    size_t n = 0;
    while (n < cap && p[n]) ++n;
    return std::string(reinterpret_cast<const char *>(p), n);
}

// See cpa_api.h: pass a canary-filled buffer larger than any documented layout; the leading fields
// are at fixed offsets; the tail's position is recognised from where the library's writes end.
InstanceInfo read_instance_info(const Api &api, CpaInstanceHandle h) {
    constexpr unsigned char kCanary = 0xA5;
    std::vector<unsigned char> buf(8192, kCanary);
    CpaStatus st = api.getInfo2(h, buf.data());
    if (st != CPA_STATUS_SUCCESS)
        throw std::runtime_error("cpaCyInstanceGetInfo2 failed: " + cpa_status_name(st));
    InstanceInfo out;
    UniflCpaInstanceInfo2Head head;
    std::memcpy(&head, buf.data(), sizeof(head));
    out.vendor = c_string(head.vendorName, sizeof(head.vendorName));
    out.part = c_string(head.partName, sizeof(head.partName));
    out.sw_version = c_string(head.swVersion, sizeof(head.swVersion));
    out.name = c_string(head.instName, sizeof(head.instName));
    auto try_tail = [&](size_t size) -> bool {
        // the last byte of the struct is the top byte of isOffloaded (0 for a 0/1 enum) and the
        // library wrote nothing past the struct
        if (buf[size - 1] == kCanary) return false;
        for (size_t i = size; i < size + 64; ++i)
            if (buf[i] != kCanary) return false;
        UniflCpaInstanceInfo2Tail t;
        std::memcpy(&t, buf.data() + size - sizeof(t), sizeof(t));
        auto boolean = [](CpaBoolean b) { return b == CPA_TRUE || b == CPA_FALSE; };
        if (!boolean(t.requiresPhysicallyContiguousMemory) || !boolean(t.isPolled) ||
            !boolean(t.isOffloaded) || (t.operState != 0 && t.operState != 1))
            return false;
        out.node = t.nodeAffinity;
        out.oper_up = t.operState == 1;
        out.contiguous = t.requiresPhysicallyContiguousMemory == CPA_TRUE;
        out.polled = t.isPolled == CPA_TRUE;
        out.offloaded = t.isOffloaded == CPA_TRUE;
        return true;
    };
    if (try_tail(sizeof(UniflCpaInstanceInfo2<4096>))) out.layout = "CPA_MAX_CORES=4096";
    else if (try_tail(sizeof(UniflCpaInstanceInfo2<256>))) out.layout = "CPA_MAX_CORES=256";
    else out.layout = "unrecognised tail: leading fields only, assumed polled/contiguous/node 0";
    return out;
}

// ------------------------------------------------------------------ jobs and slots
struct Session;
struct Job;

struct Instance {
    CpaInstanceHandle handle = nullptr;
    InstanceInfo info;
    std::atomic<int> in_flight{0};
    std::mutex mu;
    std::condition_variable cv;  // wakes the poller when work is submitted
    std::thread poller;
};

struct SkippedInstance {
    InstanceInfo info;
    std::string reason;
};

struct Slot {
    CpaCyLnModExpOpData op{};
    CpaFlatBuffer result{};
    uint32_t class_bit = 0;  // 1 << index of the op's size class
    Cpa8U *mem = nullptr;    // pinned: modulus | base | exponent | result, kQatMaxBytes each
    std::shared_ptr<Job> job;
    int64_t index = -1;
    Instance *inst = nullptr;
    Session *session = nullptr;
};

struct Job {
    int64_t n = 0;
    int L = 0, Le = 0;
    bool shared_exp = false;
    int max_in_flight = 96, use_instances = 0;
    std::vector<u64> base, exps, mod;
    std::vector<u64> out;
    std::unique_ptr<std::atomic<uint8_t>[]> flags;
    std::atomic<int> in_flight{0};
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int64_t> landed;  // indices landed and not yet taken by the consumer
    int64_t n_landed = 0, n_taken = 0;
    std::thread submitter;

    ~Job() {
        if (!submitter.joinable()) return;
        if (submitter.get_id() == std::this_thread::get_id())
            submitter.detach();  // last ref was its own
        else submitter.join();
    }

    // Set element i's flag once (PENDING -> f); returns false when it had already landed.
    bool land(int64_t i, uint8_t f, const u64 *value) {
        uint8_t expect = PENDING;
        if (value) {  // write the value before publishing the flag; only the CAS winner writes
            if (flags[i].load() != PENDING) return false;
        }
        if (!flags[i].compare_exchange_strong(expect, f)) return false;
        if (value) std::memcpy(&out[size_t(i) * L], value, 8 * size_t(L));
        std::lock_guard<std::mutex> lk(mu);
        landed.push_back(i);
        ++n_landed;
        cv.notify_all();
        return true;
    }
};

// little-endian limbs (nlimbs) -> big-endian octets padded to `width` bytes
void to_be(Cpa8U *dst, unsigned width, const u64 *src, int nlimbs) {
    std::memset(dst, 0, width);
    const auto *bytes = reinterpret_cast<const unsigned char *>(src);  // LE host (x86-64/aarch64)
    size_t n = std::min<size_t>(8 * size_t(nlimbs), width);
    for (size_t k = 0; k < n; ++k) dst[width - 1 - k] = bytes[k];
}

// big-endian octets (width) -> little-endian limbs; false if the value needs more than nlimbs
bool from_be(u64 *dst, int nlimbs, const Cpa8U *src, unsigned width) {
    std::memset(dst, 0, 8 * size_t(nlimbs));
    auto *bytes = reinterpret_cast<unsigned char *>(dst);
    for (size_t k = 0; k < width; ++k) {
        unsigned char b = src[width - 1 - k];
        if (k < 8 * size_t(nlimbs)) bytes[k] = b;
        else if (b) return false;
    }
    return true;
}

unsigned sig_bytes(const u64 *limbs, int n) {
    for (int i = n - 1; i >= 0; --i)
        if (limbs[i]) return unsigned(8 * i + (64 - __builtin_clzll(limbs[i]) + 7) / 8);
    return 0;
}

struct Stats {
    std::atomic<uint64_t> submitted{0}, completed{0}, retries{0}, device_failures{0},
        submit_failures{0}, oversize{0}, host_trivial{0}, abandoned{0}, busy_ns{0},
        class_fallbacks{0};
};

void modexp_callback(void *tag, CpaStatus status, void *, CpaFlatBuffer *);

struct Session : std::enable_shared_from_this<Session> {
    std::unique_ptr<Api> api;
    std::string section;
    std::vector<std::unique_ptr<Instance>> instances;
    std::vector<SkippedInstance> skipped;  // found, but without the large-number API
    size_t instances_found = 0;
    std::atomic<uint32_t> cpu_classes{0};   // size classes sent to the CPU directly (bit per class)
    std::atomic<uint32_t> card_classes{0};  // size classes that completed on the card
    std::vector<std::unique_ptr<Slot>> slots;  // the reused pinned pool
    std::vector<Slot *> free_slots;
    std::mutex pool_mu;
    std::condition_variable pool_cv;
    int out_slots = 0;  // slots submitted or being submitted
    Clock::time_point busy_since;
    std::atomic<bool> closing{false}, closed{false};
    std::atomic<bool> stop_pollers{false};
    std::atomic<unsigned> rr{0};
    double retry_timeout_s;
    int poll_interval_us;
    bool mem_inited = false;
    Stats stats;

    Session(const std::vector<std::string> &qat_names, const std::vector<std::string> &usdm_names,
            const std::string &section_, double retry_timeout, int poll_interval)
        : section(section_), retry_timeout_s(retry_timeout), poll_interval_us(poll_interval) {
        api = std::make_unique<Api>(qat_names, usdm_names);
        if (api->memInit) {
            if (api->memInit() != 0)
                throw std::runtime_error("qaeMemInit failed (is the usdm_drv module loaded?)");
            mem_inited = true;
        }
        CpaStatus st = api->userStart(section.c_str());
        if (st != CPA_STATUS_SUCCESS) {
            if (mem_inited && api->memDestroy) api->memDestroy();
            throw std::runtime_error("icp_sal_userStart(\"" + section +
                                     "\") failed: " + cpa_status_name(st) + " (check the [" +
                                     section + "] section of the QAT configuration)");
        }
        try {
            Cpa16U n = 0;
            st = api->getNumInstances(&n);
            if (st != CPA_STATUS_SUCCESS || n == 0)
                throw std::runtime_error("no QAT crypto instances (" + cpa_status_name(st) + ")");
            std::vector<CpaInstanceHandle> handles(n);
            st = api->getInstances(n, handles.data());
            if (st != CPA_STATUS_SUCCESS)
                throw std::runtime_error("cpaCyGetInstances failed: " + cpa_status_name(st));
            instances_found = handles.size();
            for (auto h : handles) {
                auto inst = std::make_unique<Instance>();
                inst->handle = h;
                st = api->startInstance(h);
                if (st != CPA_STATUS_SUCCESS)
                    throw std::runtime_error("cpaCyStartInstance failed: " + cpa_status_name(st));
                try {
                    inst->info = read_instance_info(*api, h);
                    // cpaCyGetNumInstances counts symmetric-only instances too; cpaCyLnModExp
                    // fails on every one of them.  Keep only those with the large-number API.
                    std::string why = large_number_api(h);
                    if (!why.empty()) {
                        skipped.push_back(SkippedInstance{inst->info, why});
                        api->stopInstance(h);
                        continue;
                    }
                    st = api->setAddressTranslation(h, api->virtToPhys);
                    if (st != CPA_STATUS_SUCCESS)
                        throw std::runtime_error("cpaCySetAddressTranslation failed: " +
                                                 cpa_status_name(st));
                } catch (...) {
                    api->stopInstance(h);
                    throw;
                }
                instances.push_back(std::move(inst));
            }
            if (instances.empty()) {
                std::string which;
                for (auto &k : skipped)
                    which += (which.empty() ? "" : ", ") +
                             (k.info.name.empty() ? std::string("?") : k.info.name) + " (" +
                             k.reason + ")";
                throw std::runtime_error(
                    "none of the " + std::to_string(instances_found) +
                    " QAT crypto instance(s) "
                    "offers the large-number API that cpaCyLnModExp needs: " +
                    which +
                    "; enable "
                    "asymmetric crypto on the endpoint (qatlib: ServicesEnabled=asym, sym;asym or "
                    "asym;dc in /etc/sysconfig/qat; QAT 1.x: ServicesEnabled = cy in the "
                    "device's .conf)");
            }
        } catch (...) {
            for (auto &inst : instances) api->stopInstance(inst->handle);
            api->userStop();
            if (mem_inited && api->memDestroy) api->memDestroy();
            throw;
        }
        for (auto &inst : instances) {
            Instance *ip = inst.get();
            ip->poller = std::thread([this, ip] { poll_loop(ip); });
        }
    }

    ~Session() { close(10.0); }

    // "" when the instance offers the large-number API (CpaCyCapabilitiesInfo.lnSupported), else
    // why not.  The library writes its own, release-dependent, size of the struct: we pass a
    // zeroed buffer larger than any documented one and read lnSupported at its fixed offset.
    std::string large_number_api(CpaInstanceHandle h) {
        std::vector<unsigned char> buf(kCapabilitiesBufferBytes, 0);
        CpaStatus st = api->queryCapabilities(h, buf.data());
        if (st != CPA_STATUS_SUCCESS)
            return "cpaCyQueryCapabilities failed: " + cpa_status_name(st);
        CpaBoolean ln;
        const size_t at = offsetof(UniflCpaCyCapabilitiesInfo, lnSupported);
        std::memcpy(&ln, buf.data() + at, sizeof(ln));
        return ln == CPA_TRUE ? "" : "lnSupported = CPA_FALSE: symmetric-only";
    }

    // One polling thread per instance.  It sleeps on a condition variable while nothing is in
    // flight on its instance (so an idle session costs no CPU) and polls every poll_interval_us
    // otherwise: the completions arrive here and the callbacks run on this thread.
    void poll_loop(Instance *inst) {
        while (!stop_pollers.load()) {
            if (inst->in_flight.load() == 0) {
                std::unique_lock<std::mutex> lk(inst->mu);
                inst->cv.wait_for(lk, std::chrono::milliseconds(20), [&] {
                    return stop_pollers.load() || inst->in_flight.load() > 0;
                });
                continue;
            }
            CpaStatus st = api->pollInstance(inst->handle, 0);
            if (st != CPA_STATUS_SUCCESS)
                std::this_thread::sleep_for(std::chrono::microseconds(poll_interval_us));
        }
    }

    void grow_pool(int want) {  // under pool_mu
        while (int(slots.size()) < want) {
            auto s = std::make_unique<Slot>();
            // 8-byte aligned per operand (QAT's PKE works in quad-words); 64 for the block
            s->mem = static_cast<Cpa8U *>(
                api->memAlloc(4 * kQatMaxBytes, int(instances[0]->info.node), 64));
            if (!s->mem) {
                if (slots.empty())
                    throw std::runtime_error("qaeMemAllocNUMA failed (pinned memory)");
                return;  // run with the slots we have
            }
            s->session = this;
            free_slots.push_back(s.get());
            slots.push_back(std::move(s));
        }
    }

    // The slot's owner (job, index) is recorded under pool_mu, so close() always sees who owns a
    // slot that is out, even one whose submission is still under way.
    Slot *acquire_slot(const std::shared_ptr<Job> &job, int64_t index) {
        std::unique_lock<std::mutex> lk(pool_mu);
        pool_cv.wait(lk, [&] { return closing.load() || !free_slots.empty(); });
        if (closing.load()) return nullptr;
        Slot *s = free_slots.back();
        free_slots.pop_back();
        s->job = job;
        s->index = index;
        if (out_slots++ == 0) busy_since = Clock::now();
        return s;
    }

    void release_slot(Slot *s) {
        std::lock_guard<std::mutex> lk(pool_mu);
        s->job.reset();
        s->index = -1;
        free_slots.push_back(s);
        if (--out_slots == 0)
            stats.busy_ns += uint64_t(
                std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - busy_since)
                    .count());
        pool_cv.notify_all();
    }

    // Submit element i of the job (on the submitter thread).
    void submit_one(const std::shared_ptr<Job> &job, int64_t i) {
        const u64 *e = &job->exps[size_t(job->shared_exp ? 0 : i) * job->Le];
        unsigned e_bytes = sig_bytes(e, job->Le);
        if (e_bytes == 0) {  // x^0 = 1: not sent (the API does not promise a zero exponent)
            std::vector<u64> one(job->L, 0);
            one[0] = 1;
            stats.host_trivial++;
            job->land(i, HOST, one.data());
            return;
        }
        unsigned mod_bytes = sig_bytes(job->mod.data(), job->L);
        unsigned cls = qat_class_bytes(std::max(mod_bytes, e_bytes));
        if (cls == 0) {  // wider than QAT's 8192-bit limit
            stats.oversize++;
            job->land(i, FAILED, nullptr);
            return;
        }
        uint32_t class_bit = 1u << qat_class_index(cls);
        if (cpu_classes.load() & class_bit) {  // the library refused this class: the CPU does it
            stats.class_fallbacks++;
            job->land(i, FAILED, nullptr);
            return;
        }
        {  // per-job bound on outstanding requests
            std::unique_lock<std::mutex> lk(job->mu);
            while (!closing.load() && job->in_flight.load() >= job->max_in_flight)
                job->cv.wait_for(lk, std::chrono::milliseconds(10));
        }
        Slot *s = closing.load() ? nullptr : acquire_slot(job, i);
        if (!s) {
            job->land(i, FAILED, nullptr);
            return;
        }
        Cpa8U *m = s->mem, *b = m + kQatMaxBytes, *x = b + kQatMaxBytes, *r = x + kQatMaxBytes;
        to_be(m, cls, job->mod.data(), job->L);
        to_be(b, cls, &job->base[size_t(i) * job->L], job->L);
        to_be(x, cls, e, job->Le);
        s->op.modulus = CpaFlatBuffer{cls, m};
        s->op.base = CpaFlatBuffer{cls, b};
        s->op.exponent = CpaFlatBuffer{cls, x};
        s->result = CpaFlatBuffer{cls, r};
        s->class_bit = class_bit;
        job->in_flight++;
        int n_inst = std::max(1, std::min<int>(job->use_instances, int(instances.size())));
        auto deadline = Clock::now() + std::chrono::duration<double>(retry_timeout_s);
        int backoff_us = 1;
        for (;;) {
            Instance *inst = instances[rr.fetch_add(1) % n_inst].get();
            s->inst = inst;
            inst->in_flight++;  // before the call: the callback may run before it returns
            CpaStatus st = api->lnModExp(inst->handle, modexp_callback, s, &s->op, &s->result);
            if (st == CPA_STATUS_SUCCESS) {
                stats.submitted++;
                { std::lock_guard<std::mutex> lk(inst->mu); }  // no lost wake-up of an idle poller
                inst->cv.notify_one();
                return;
            }
            inst->in_flight--;
            bool again = (st == CPA_STATUS_RETRY || st == CPA_STATUS_RESTARTING) &&
                         !closing.load() && Clock::now() < deadline;
            if (st == CPA_STATUS_RETRY) stats.retries++;
            if (!again) {
                stats.submit_failures++;
                if (st == CPA_STATUS_FAIL && !closing.load()) class_refused(class_bit);
                job->in_flight--;
                release_slot(s);
                job->land(i, FAILED, nullptr);
                job->cv.notify_all();
                return;
            }
            std::this_thread::sleep_for(std::chrono::microseconds(backoff_us));
            backoff_us = std::min(backoff_us * 2, 256);
        }
    }

    // A submission of a class refused with CPA_STATUS_FAIL: unless that class has completed on the
    // card before, the library does not implement it, and the class goes to the CPU from now on.
    void class_refused(uint32_t class_bit) {
        if (card_classes.load() & class_bit) return;
        cpu_classes.fetch_or(class_bit);
    }

    std::vector<unsigned> cpu_size_classes() const {
        std::vector<unsigned> out;
        uint32_t mask = cpu_classes.load();
        for (unsigned k = 0; k < kQatSizeClasses; ++k)
            if (mask & (1u << k)) out.push_back(kQatSizeClassesBits[k]);
        return out;
    }

    void on_complete(Slot *s, CpaStatus status) {
        std::shared_ptr<Job> job = s->job;  // keep alive past release
        int64_t i = s->index;
        bool ok = status == CPA_STATUS_SUCCESS;
        std::vector<u64> value;
        if (ok) {
            value.resize(job->L);
            ok = from_be(value.data(), job->L, s->result.pData, s->result.dataLenInBytes);
        }
        if (ok) {
            stats.completed++;
            card_classes.fetch_or(s->class_bit);
        } else {
            stats.device_failures++;
        }
        Instance *inst = s->inst;
        release_slot(s);
        inst->in_flight--;
        job->land(i, ok ? DONE : FAILED, ok ? value.data() : nullptr);
        job->in_flight--;
        {
            std::lock_guard<std::mutex> lk(job->mu);
            job->cv.notify_all();
        }
    }

    std::shared_ptr<Job> start(Limbs base, Limbs exps, Limbs mod, int max_in_flight,
                               int use_instances) {
        if (closing.load()) throw std::runtime_error("QAT session is closed");
        if (base.ndim() != 2 || exps.ndim() != 2 || mod.ndim() != 1)
            throw std::invalid_argument("expected base (N,L), exps (N|1,Le), mod (L,)");
        auto job = std::make_shared<Job>();
        job->n = base.shape(0);
        job->L = int(base.shape(1));
        job->Le = int(exps.shape(1));
        if (mod.shape(0) != job->L)
            throw std::invalid_argument("modulus limbs differ from base limbs");
        if (exps.shape(0) != job->n && exps.shape(0) != 1)
            throw std::invalid_argument("exponents must have N rows or one");
        job->shared_exp = exps.shape(0) == 1 && job->n != 1;
        job->max_in_flight = std::max(1, max_in_flight);
        job->use_instances = use_instances <= 0 ? int(instances.size()) : use_instances;
        job->base.assign(base.data(), base.data() + base.size());
        job->exps.assign(exps.data(), exps.data() + exps.size());
        job->mod.assign(mod.data(), mod.data() + mod.size());
        job->out.assign(size_t(job->n) * job->L, 0);
        job->flags.reset(new std::atomic<uint8_t>[size_t(std::max<int64_t>(job->n, 1))]);
        for (int64_t i = 0; i < job->n; ++i) job->flags[i].store(PENDING);
        {
            std::lock_guard<std::mutex> lk(pool_mu);
            grow_pool(job->max_in_flight);
        }
        auto self = shared_from_this();
        std::weak_ptr<Job> weak = job;
        job->submitter = std::thread([self, weak] {
            auto j = weak.lock();
            if (!j) return;
            for (int64_t i = 0; i < j->n; ++i) self->submit_one(j, i);
        });
        return job;
    }

    // Stop accepting work, let what is in flight land (up to timeout_s), then tear down.  Requests
    // still out at the deadline are flagged FAILED (the caller recomputes them on the CPU) and their
    // pinned slots are deliberately leaked: the device may still own them.
    void close(double timeout_s) {
        if (closed.exchange(true)) return;
        closing = true;
        pool_cv.notify_all();
        auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
        {
            std::unique_lock<std::mutex> lk(pool_mu);
            while (out_slots > 0 && Clock::now() < deadline)
                pool_cv.wait_for(lk, std::chrono::milliseconds(5));
        }
        stop_pollers = true;
        for (auto &inst : instances) {
            inst->cv.notify_all();
            if (inst->poller.joinable()) inst->poller.join();
        }
        std::vector<Slot *> abandoned;
        std::vector<std::pair<std::shared_ptr<Job>, int64_t>> owners;
        {
            std::lock_guard<std::mutex> lk(pool_mu);
            for (auto &s : slots)
                if (std::find(free_slots.begin(), free_slots.end(), s.get()) == free_slots.end()) {
                    abandoned.push_back(s.get());
                    if (s->job && s->index >= 0) owners.emplace_back(s->job, s->index);
                }
        }
        for (auto &[job, index] : owners) {
            if (job->land(index, FAILED, nullptr)) {  // a racing submission cannot land it twice
                stats.abandoned++;
                job->in_flight--;
                std::lock_guard<std::mutex> lk(job->mu);
                job->cv.notify_all();
            }
        }
        for (auto &inst : instances) api->stopInstance(inst->handle);
        // the pinned pool goes back while the user-space process still stands: USDM memory is
        // mapped for the process's devices, which icp_sal_userStop releases
        for (auto &s : slots) {
            bool gone = std::find(abandoned.begin(), abandoned.end(), s.get()) != abandoned.end();
            if (!gone && s->mem) {
                void *p = s->mem;
                api->memFree(&p);
                s->mem = nullptr;
            }
        }
        api->userStop();
        if (abandoned.empty() && mem_inited && api->memDestroy) api->memDestroy();
    }

    py::dict info() const {
        py::dict d;
        d["library"] = api->qat_path;
        d["usdm_library"] = api->usdm_path;
        d["simulator"] = api->simulator;
        d["section"] = section;
        py::list insts;
        for (auto &inst : instances) {
            py::dict i;
            i["name"] = inst->info.name;
            i["part"] = inst->info.part;
            i["vendor"] = inst->info.vendor;
            i["sw_version"] = inst->info.sw_version;
            i["node"] = inst->info.node;
            i["polled"] = inst->info.polled;
            i["contiguous_memory"] = inst->info.contiguous;
            i["offloaded"] = inst->info.offloaded;
            i["info2_layout"] = inst->info.layout;
            insts.append(i);
        }
        d["instances"] = insts;
        py::list skipped_list;
        for (auto &k : skipped) {
            py::dict i;
            i["name"] = k.info.name;
            i["part"] = k.info.part;
            i["reason"] = k.reason;
            skipped_list.append(i);
        }
        d["skipped_instances"] = skipped_list;
        d["instances_found"] = instances_found;
        return d;
    }

    py::dict stats_dict() const {
        py::dict d;
        d["submitted"] = stats.submitted.load();
        d["completed"] = stats.completed.load();
        d["retries"] = stats.retries.load();
        d["device_failures"] = stats.device_failures.load();
        d["submit_failures"] = stats.submit_failures.load();
        d["oversize"] = stats.oversize.load();
        d["host_trivial"] = stats.host_trivial.load();
        d["abandoned"] = stats.abandoned.load();
        d["class_fallbacks"] = stats.class_fallbacks.load();
        d["size_classes_on_cpu"] = cpu_size_classes().size();
        d["busy_seconds"] = double(stats.busy_ns.load()) * 1e-9;
        d["pool_slots"] = slots.size();
        if (api->simStats && !closed.load()) {
            uint64_t s[kSimStats];
            api->simStats(s);
            d["sim_engine_busy_seconds"] = double(s[4]) * 1e-9;
            d["sim_engines"] = s[5];
            d["sim_retries"] = s[1];
            d["sim_injected_failures"] = s[2];
        }
        return d;
    }
};

void modexp_callback(void *tag, CpaStatus status, void *, CpaFlatBuffer *) {
    auto *s = static_cast<Slot *>(tag);
    s->session->on_complete(s, status);
}

// wait until at least min_batch (or all the rest) have landed, or the timeout passes; returns
// (indices landed since the last call, done)
py::tuple wait_landed(Job &job, double timeout_s, int64_t min_batch) {
    std::vector<int64_t> got;
    bool done;
    {
        py::gil_scoped_release nogil;
        std::unique_lock<std::mutex> lk(job.mu);
        auto pred = [&] {
            int64_t want = std::max<int64_t>(1, std::min(min_batch, job.n - job.n_taken));
            return int64_t(job.landed.size()) >= want || job.n_taken == job.n;
        };
        if (timeout_s < 0) job.cv.wait(lk, pred);
        else job.cv.wait_for(lk, std::chrono::duration<double>(timeout_s), pred);
        got.swap(job.landed);
        job.n_taken += int64_t(got.size());
        done = job.n_taken == job.n;
    }
    py::array_t<int64_t> idx(py::ssize_t(got.size()));
    if (!got.empty()) std::memcpy(idx.mutable_data(), got.data(), 8 * got.size());
    return py::make_tuple(idx, done);
}

py::tuple job_result(Job &job) {
    Limbs out({py::ssize_t(job.n), py::ssize_t(job.L)});
    if (job.n) std::memcpy(out.mutable_data(), job.out.data(), 8 * job.out.size());
    py::array_t<uint8_t> flags(py::ssize_t(job.n));
    for (int64_t i = 0; i < job.n; ++i) flags.mutable_data()[i] = job.flags[i].load();
    return py::make_tuple(out, flags);
}

// results and flags of the given (landed) rows
py::tuple job_rows(Job &job, py::array_t<int64_t, py::array::c_style | py::array::forcecast> idx) {
    py::ssize_t k = idx.size();
    Limbs out({k, py::ssize_t(job.L)});
    py::array_t<uint8_t> flags(k);
    const int64_t *ix = idx.data();
    for (py::ssize_t j = 0; j < k; ++j) {
        int64_t i = ix[j];
        if (i < 0 || i >= job.n) throw std::out_of_range("row index out of range");
        std::memcpy(out.mutable_data() + j * job.L, &job.out[size_t(i) * job.L], 8 * size_t(job.L));
        flags.mutable_data()[j] = job.flags[i].load();
    }
    return py::make_tuple(out, flags);
}

}  // namespace

PYBIND11_MODULE(_qat, m) {
    m.doc() = "UniFL QAT driver (cpaCyLnModExp, asynchronous, polled)";
    m.attr("PENDING") = int(PENDING);
    m.attr("DONE") = int(DONE);
    m.attr("FAILED") = int(FAILED);
    m.attr("HOST") = int(HOST);
    m.def(
        "class_bits", [](unsigned bits) { return qat_class_bytes((bits + 7) / 8) * 8; },
        "QAT operand size class (bits) for a widest operand of `bits` bits; 0 if over 8192");
    py::class_<Job, std::shared_ptr<Job>>(m, "Job")
        .def_property_readonly("size", [](const Job &j) { return j.n; })
        .def("wait_landed", &wait_landed, py::arg("timeout") = -1.0, py::arg("min_batch") = 1)
        .def("result", &job_result)
        .def("rows", &job_rows)
        .def("join", [](Job &j) {
            py::gil_scoped_release nogil;
            std::unique_lock<std::mutex> lk(j.mu);
            j.cv.wait(lk, [&] { return j.n_landed == j.n; });
        });
    py::class_<Session, std::shared_ptr<Session>>(m, "Session")
        .def(py::init([](std::vector<std::string> qat, std::vector<std::string> usdm,
                         std::string section, double retry_timeout, int poll_interval_us) {
                 py::gil_scoped_release nogil;
                 return std::make_shared<Session>(qat, usdm, section, retry_timeout,
                                                  poll_interval_us);
             }),
             py::arg("qat_libraries"), py::arg("usdm_libraries"), py::arg("section") = "SSL",
             py::arg("retry_timeout") = 30.0, py::arg("poll_interval_us") = 20)
        .def("start", &Session::start, py::arg("base"), py::arg("exps"), py::arg("mod"),
             py::arg("max_in_flight") = 96, py::arg("instances") = 0)
        .def(
            "close",
            [](Session &s, double timeout) {
                py::gil_scoped_release nogil;
                s.close(timeout);
            },
            py::arg("timeout") = 10.0)
        .def_property_readonly("closed", [](const Session &s) { return s.closed.load(); })
        .def_property_readonly("num_instances", [](const Session &s) { return s.instances.size(); })
        .def("info", &Session::info)
        .def("cpu_size_classes", &Session::cpu_size_classes)
        .def("stats", &Session::stats_dict);
}

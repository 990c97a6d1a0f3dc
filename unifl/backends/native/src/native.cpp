// UniFL native backend: batched Montgomery arithmetic and fused Paillier ops on the CPU.
//
// Why OpenSSL's BIGNUM Montgomery code and not our own loops: libcrypto's mulx/adcx/adox
// bn_mul_mont (reached through BN_mod_mul_montgomery, which also switches to the dedicated sqr8x
// code when both operands are the same object) beats both GMP's mpn_mul_n + redc and a plain C++
// CIOS loop with unsigned __int128 (figures in docs/perf.md §3).  So every MontMult here is one
// BN_mod_mul_montgomery; what this file adds is the batching, the thread pool (GIL released), staying
// in the Montgomery domain across fused ops, windowed/fixed-base/multi-exponentiation algorithms and
// the CRT, none of which OpenSSL offers for batches.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "unifl/bn_api.h"

namespace py = pybind11;
using u64 = uint64_t;
using Limbs = py::array_t<u64, py::array::c_style | py::array::forcecast>;

namespace {

// ---------------------------------------------------------------- RAII helpers around BIGNUM
struct Bn {
    BIGNUM *p;
    Bn() : p(BN_new()) {
        if (!p) throw std::bad_alloc();
    }
    ~Bn() { BN_clear_free(p); }
    Bn(const Bn &) = delete;
    Bn &operator=(const Bn &) = delete;
    Bn(Bn &&o) noexcept : p(o.p) { o.p = nullptr; }
    operator BIGNUM *() const { return p; }
};

struct Ctx {
    BN_CTX *p;
    Ctx() : p(BN_CTX_new()) {
        if (!p) throw std::bad_alloc();
    }
    ~Ctx() { BN_CTX_free(p); }
    operator BN_CTX *() const { return p; }
};

inline void ok(int r, const char *what) {
    if (!r) throw std::runtime_error(std::string("OpenSSL BIGNUM call failed: ") + what);
}

// Limb transfer.  The documented way (BN_lebin2bn / BN_bn2lebinpad) walks byte by byte and costs
// a large share of a MontMult's time (see docs/perf.md §3).  libcrypto's BIGNUM has had the same
// layout {BN_ULONG *d; int top, dmax, neg, flags} since OpenSSL 1.1.0; we copy limbs straight into
// it, but only after a start-up self-check against the documented functions proves the layout (see
// layout_self_check), and fall back to the documented functions otherwise or when
// UNIFL_NATIVE_SAFE_BN=1.
struct BnLayout {
    BN_ULONG *d;
    int top, dmax, neg, flags;
};
constexpr int kFlagStaticData = 0x02, kFlagFixedTop = 0x10000;
bool g_direct = false;

inline void load(BIGNUM *r, const u64 *src, int limbs) {
    if (g_direct) {
        auto *b = reinterpret_cast<BnLayout *>(r);
        if (b->dmax >= limbs && !(b->flags & kFlagStaticData)) {
            int top = limbs;
            while (top > 0 && src[top - 1] == 0) --top;
            std::memcpy(b->d, src, 8 * size_t(top));
            b->top = top;
            b->neg = 0;
            b->flags &= ~kFlagFixedTop;
            return;
        }
    }
    // little-endian u64 limbs are little-endian bytes on x86-64 / aarch64
    if (!BN_lebin2bn(reinterpret_cast<const unsigned char *>(src), 8 * limbs, r))
        throw std::runtime_error("BN_lebin2bn failed");
}

inline void store(const BIGNUM *a, u64 *dst, int limbs) {
    if (g_direct) {
        auto *b = reinterpret_cast<const BnLayout *>(a);
        if (b->top <= limbs && b->neg == 0 && !(b->flags & kFlagFixedTop)) {
            std::memcpy(dst, b->d, 8 * size_t(b->top));
            std::memset(dst + b->top, 0, 8 * size_t(limbs - b->top));
            return;
        }
    }
    if (BN_bn2lebinpad(a, reinterpret_cast<unsigned char *>(dst), 8 * limbs) < 0)
        throw std::runtime_error("result wider than its limb slot");
}

// Decide g_direct: the struct view must agree with BN_lebin2bn / BN_bn2lebinpad on numbers with
// and without leading zero limbs, and on a Montgomery product.
bool layout_self_check() {
    const char *env = std::getenv("UNIFL_NATIVE_SAFE_BN");
    if (env && env[0] == '1') return false;
    const u64 vals[4] = {0x1122334455667788ull, 0x99aabbccddeeff00ull, 0x0123456789abcdefull, 0};
    BIGNUM *x = BN_new();
    bool good = x && BN_lebin2bn(reinterpret_cast<const unsigned char *>(vals), 32, x);
    if (good) {
        auto *b = reinterpret_cast<BnLayout *>(x);
        good = b->top == 3 && b->dmax >= 3 && b->neg == 0 && b->d && b->d[0] == vals[0] &&
               b->d[1] == vals[1] && b->d[2] == vals[2] && BN_num_bits(x) == 3 * 64 - 7;
    }
    if (good) {  // a direct load must read back identically through the documented API
        g_direct = true;
        const u64 other[4] = {5, 0, 7, 0};
        load(x, other, 4);
        u64 back[4] = {1, 1, 1, 1};
        good = BN_bn2lebinpad(x, reinterpret_cast<unsigned char *>(back), 32) == 32 &&
               std::memcmp(back, other, 32) == 0 && BN_num_bits(x) == 128 + 3;
        g_direct = false;
    }
    BN_free(x);
    return good;
}

int num_threads_default() {
    unsigned h = std::thread::hardware_concurrency();
    return h ? int(h) : 1;
}

// A persistent pool of worker threads: starting and joining a std::thread per batch costs more than
// a condition-variable round trip to a parked worker (far more on a loaded machine), a noticeable
// share of a small batch (see docs/perf.md §3).
// One submitter at a time owns the pool (try_lock); a concurrent or nested batch falls back to
// fresh threads.  After fork() the child builds its own pool (the parent's workers do not exist
// there).  The pool is never destroyed: its threads are detached and parked at interpreter exit.
class ThreadPool {
  public:
    static ThreadPool &instance() {
        static std::mutex create_mu;
        static ThreadPool *pool = nullptr;
        std::lock_guard<std::mutex> g(create_mu);
        if (!pool || pool->pid_ != getpid()) pool = new ThreadPool();  // fork: leak the parent's
        return *pool;
    }

    // Run task(0 .. ntasks-1): task 0 on the calling thread, the others on workers.  Returns false
    // (nothing run) when another batch owns the pool.
    bool try_run(size_t ntasks, const std::function<void(size_t)> &task) {
        std::unique_lock<std::mutex> own(submit_mu_, std::try_to_lock);
        if (!own.owns_lock()) return false;
        while (workers_ + 1 < ntasks) {  // a new worker starts waiting for the NEXT generation
            uint64_t now;
            {
                std::lock_guard<std::mutex> g(mu_);
                now = generation_;
            }
            std::thread(&ThreadPool::worker, this, workers_, now).detach();
            ++workers_;
        }
        {
            std::lock_guard<std::mutex> g(mu_);
            task_ = &task;
            ntasks_ = ntasks;
            remaining_ = ntasks - 1;
            ++generation_;
        }
        wake_.notify_all();
        task(0);
        std::unique_lock<std::mutex> l(mu_);
        done_.wait(l, [&] { return remaining_ == 0; });
        task_ = nullptr;
        return true;
    }

  private:
    ThreadPool() : pid_(getpid()) {}

    void worker(size_t k, uint64_t seen) {  // runs task k+1 of every batch that has one
        for (;;) {
            const std::function<void(size_t)> *task;
            {
                std::unique_lock<std::mutex> l(mu_);
                wake_.wait(l, [&] { return generation_ != seen; });
                seen = generation_;
                if (k + 1 >= ntasks_) continue;
                task = task_;
            }
            (*task)(k + 1);
            std::lock_guard<std::mutex> g(mu_);
            if (--remaining_ == 0) done_.notify_one();
        }
    }

    pid_t pid_;
    std::mutex submit_mu_, mu_;
    std::condition_variable wake_, done_;
    size_t workers_ = 0, ntasks_ = 0, remaining_ = 0;
    uint64_t generation_ = 0;
    const std::function<void(size_t)> *task_ = nullptr;
};

// Run f(begin, end) over [0, n) on up to `threads` threads (the calling thread is one of them), in
// chunks of at least min_chunk elements handed out from an atomic counter: about 8 chunks per
// thread, so a thread whose core is shared with another process (the normal case on this 2-vCPU
// box) takes fewer chunks instead of finishing last, as it did with one fixed half per thread.
// Exceptions in workers are re-thrown in the caller.
template <class F>
void parallel_for(size_t n, int threads, size_t min_chunk, F f) {
    if (n == 0) return;
    min_chunk = std::max<size_t>(1, min_chunk);
    size_t t =
        std::max<size_t>(1, std::min<size_t>(size_t(threads), (n + min_chunk - 1) / min_chunk));
    if (t == 1) {
        f(size_t(0), n);
        return;
    }
    std::exception_ptr err;
    std::mutex mu;
    size_t chunk = std::max(min_chunk, (n + 8 * t - 1) / (8 * t));
    std::atomic<size_t> next{0};
    std::function<void(size_t)> share = [&](size_t) {
        try {
            for (;;) {
                size_t b = next.fetch_add(chunk);
                if (b >= n) break;
                f(b, std::min(n, b + chunk));
            }
        } catch (...) {
            std::lock_guard<std::mutex> g(mu);
            if (!err) err = std::current_exception();
            next.store(n);  // the others stop at their next chunk
        }
    };
    if (!ThreadPool::instance().try_run(t, share)) {
        std::vector<std::thread> pool;
        for (size_t i = 1; i < t; ++i) pool.emplace_back(share, i);
        share(0);
        for (auto &th : pool) th.join();
    }
    if (err) std::rethrow_exception(err);
}

// Smallest batch share worth a thread of its own, for a loop doing `mults` MontMults per element on
// `limbs`-limb operands.  The cost model: a MontMult on L limbs takes about 1.2·L² ns (the constant
// below), and a share should carry >= ~100 µs of work, well above what starting a thread costs; a
// fixed minimum share size would keep mid-size batches of wide moduli on one thread.  The figures
// behind the model are in docs/perf.md §3.
size_t min_chunk_for(int limbs, int mults) {
    double ns = 1.2 * double(limbs) * double(limbs) * double(std::max(mults, 1));
    return std::max<size_t>(1, size_t(100000.0 / ns));
}

// ---------------------------------------------------------------- argument checks
// Every array that arrives from Python is checked here, before any pointer into it is taken: exact
// dtype uint64 in native byte order, C-contiguous, aligned, the number of dimensions, and each
// dimension against what the op reads (rows = the batch size or 1 where a shared row is part of the
// contract; limbs = the modulus' limb count).  Nothing is cast or copied silently: a float or int64
// array would be truncated/wrapped into different numbers, and a wrong row or limb count would make
// the loops below read past a buffer.  std::invalid_argument reaches Python as ValueError.
constexpr py::ssize_t kAny = -1;

std::string shape_of(const py::array &a) {
    std::string s = "(";
    for (py::ssize_t d = 0; d < a.ndim(); ++d) {
        if (d) s += ", ";
        s += std::to_string(a.shape(d));
    }
    return s + (a.ndim() == 1 ? ",)" : ")");
}

[[noreturn]] void bad_arg(const char *fn, const char *name, const std::string &what) {
    throw std::invalid_argument(std::string(fn) + ": argument '" + name + "' " + what);
}

template <class T>
void check_layout(const py::array &a, const char *fn, const char *name, const char *tname) {
    if (!a.dtype().equal(py::dtype::of<T>()))
        bad_arg(fn, name,
                std::string("must be a ") + tname + " array (native byte order), got dtype " +
                    std::string(py::str(a.dtype())));
    if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_))
        bad_arg(fn, name,
                "must be C-contiguous (np.ascontiguousarray), got a strided view of shape " +
                    shape_of(a));
    if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
        bad_arg(fn, name, "must be aligned");
}

// dims: the expected size of each dimension, kAny for any; one_ok: the first dimension may also be 1
Limbs limbs_arg(const py::array &a, const char *fn, const char *name, std::vector<py::ssize_t> dims,
                bool one_ok = false) {
    check_layout<u64>(a, fn, name, "uint64");
    auto want = [&]() {
        std::string s = "(";
        for (size_t d = 0; d < dims.size(); ++d) {
            if (d) s += ", ";
            if (d == 0 && one_ok) s += "1|";
            s += dims[d] != kAny        ? std::to_string(dims[d])
                 : d == 0               ? "N"
                 : d + 1 == dims.size() ? "Le"
                                        : "*";
        }
        return s + (dims.size() == 1 ? ",)" : ")");
    };
    if (a.ndim() != py::ssize_t(dims.size()))
        bad_arg(fn, name,
                "must have shape " + want() + ", got " + std::to_string(a.ndim()) + "-D shape " +
                    shape_of(a));
    for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == kAny || a.shape(d) == dims[d]) continue;
        if (d == 0 && one_ok && a.shape(0) == 1) continue;
        bad_arg(fn, name, "must have shape " + want() + ", got " + shape_of(a));
    }
    return Limbs::ensure(a);  // dtype and layout match: a view, no copy
}

int threads_arg(int threads, const char *fn) {
    if (threads < 1 || threads > 4096)
        throw std::invalid_argument(std::string(fn) + ": threads must be in [1, 4096], got " +
                                    std::to_string(threads));
    return threads;
}

// Exponent limb count: the loops read Le limbs per exponent; an empty exponent row is refused.
int exp_limbs_arg(const Limbs &e, const char *fn, const char *name) {
    py::ssize_t le = e.shape(e.ndim() - 1);
    if (le < 1 || le > 1024)
        bad_arg(fn, name, "must have 1..1024 limbs per exponent, got " + std::to_string(le));
    return int(le);
}

// ---------------------------------------------------------------- one modulus
struct Modulus {
    int limbs;
    Bn m, rr, one_mont;  // m, R^2 mod m, R mod m
    BN_MONT_CTX *mont;
    explicit Modulus(py::array m_arr) : limbs(0), mont(nullptr) {
        Limbs m_limbs = limbs_arg(m_arr, "Modulus", "m", {kAny});
        py::ssize_t L = m_limbs.shape(0);
        if (L < 1 || L > 256)
            bad_arg("Modulus", "m", "must have 1..256 limbs, got " + std::to_string(L));
        const u64 *pm = m_limbs.data();
        if (pm[L - 1] == 0)
            bad_arg("Modulus", "m", "has a zero top limb (limb count must be ceil(bits/64))");
        if (!(pm[0] & 1)) bad_arg("Modulus", "m", "must be odd (Montgomery arithmetic)");
        if (L == 1 && pm[0] < 3) bad_arg("Modulus", "m", "must be > 2");
        limbs = int(L);
        mont = BN_MONT_CTX_new();
        if (!mont) throw std::bad_alloc();
        load(m, pm, limbs);
        Ctx ctx;
        ok(BN_MONT_CTX_set(mont, m, ctx), "BN_MONT_CTX_set");
        Bn one;
        ok(BN_set_word(one, 1), "set_word");
        ok(BN_to_montgomery(one_mont, one, mont, ctx), "to_montgomery");
        ok(BN_to_montgomery(rr, one_mont, mont, ctx), "to_montgomery");  // R·R mod m
    }
    ~Modulus() { BN_MONT_CTX_free(mont); }
    void mul(BIGNUM *r, const BIGNUM *a, const BIGNUM *b, BN_CTX *ctx) const {
        ok(BN_mod_mul_montgomery(r, a, b, mont, ctx), "BN_mod_mul_montgomery");
    }
};

struct Exponent {  // a view of one exponent's limbs
    const u64 *e;
    int len;
    int bits() const {
        for (int i = len - 1; i >= 0; --i)
            if (e[i]) return 64 * i + 64 - __builtin_clzll(e[i]);
        return 0;
    }
    bool bit(int k) const { return (e[k >> 6] >> (k & 63)) & 1; }
    u64 digit(int pos, int c) const {  // bits [pos, pos+c), c <= 32
        int li = pos >> 6, sh = pos & 63;
        if (li >= len) return 0;
        u64 v = e[li] >> sh;
        if (sh + c > 64 && li + 1 < len) v |= e[li + 1] << (64 - sh);
        return v & ((u64(1) << c) - 1);
    }
};

// Sliding-window width for a `bits`-bit exponent.  Squarings (bits - 1) do not depend on w; the
// multiplications are about 2^(w-1) (odd-power table) + bits/(w+1) (one per window), so w beats w+1
// up to bits = (w+1)(w+2)·2^(w-1): 6, 24, 80, 240, 672, 1792.  (For the ~34-bit exponents of
// ct×float at 2048-bit keys, w = 3 rather than 4 saves ~2.3 of ~48 MontMults per element.)
int window_for(int bits) {
    if (bits <= 6) return 1;
    if (bits <= 24) return 2;
    if (bits <= 80) return 3;
    if (bits <= 240) return 4;
    if (bits <= 672) return 5;
    if (bits <= 1792) return 6;
    return 7;
}

// r = x^e in the Montgomery domain (x, r Montgomery form), left-to-right sliding window.
// Squarings pass the same object twice, which OpenSSL routes to its dedicated squaring code.
void mont_pow(const Modulus &M, BIGNUM *r, const BIGNUM *x, const Exponent &e, BN_CTX *ctx,
              std::vector<Bn> &table) {
    int nb = e.bits();
    if (nb == 0) {
        BN_copy(r, M.one_mont);
        return;
    }
    int w = window_for(nb);
    size_t tsize = size_t(1) << (w - 1);
    if (table.size() < tsize) table.resize(tsize);
    BN_copy(table[0], x);
    if (w > 1) {
        Bn x2;
        M.mul(x2, x, x, ctx);
        for (size_t k = 1; k < tsize; ++k) M.mul(table[k], table[k - 1], x2, ctx);
    }
    bool started = false;
    int i = nb - 1;
    while (i >= 0) {
        if (!e.bit(i)) {
            if (started) M.mul(r, r, r, ctx);
            --i;
            continue;
        }
        int j = std::max(i - w + 1, 0);
        while (!e.bit(j)) ++j;
        u64 val = 0;
        for (int k = i; k >= j; --k) val = (val << 1) | u64(e.bit(k));
        if (!started) {
            BN_copy(r, table[val >> 1]);
            started = true;
        } else {
            for (int k = 0; k < i - j + 1; ++k) M.mul(r, r, r, ctx);
            M.mul(r, r, table[val >> 1], ctx);
        }
        i = j - 1;
    }
}

Limbs new_out(py::ssize_t n, int limbs) { return Limbs({n, py::ssize_t(limbs)}); }

// ---------------------------------------------------------------- base_op / mod_op batches
Limbs mont_mul(const Modulus &M, py::array a_, py::array b_, int threads) {
    int L = M.limbs;
    threads_arg(threads, "mont_mul");
    Limbs a = limbs_arg(a_, "mont_mul", "a", {kAny, L});
    py::ssize_t n = a.shape(0);
    Limbs b = limbs_arg(b_, "mont_mul", "b", {n, L});
    Limbs out = new_out(n, L);
    const u64 *pa = a.data(), *pb = b.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, min_chunk_for(L, 1), [&](size_t s, size_t e) {
            Ctx ctx;
            Bn x, y, r;
            for (size_t i = s; i < e; ++i) {
                load(x, pa + i * L, L);
                if (pa + i * L == pb + i * L) {
                    M.mul(r, x, x, ctx);
                } else {
                    load(y, pb + i * L, L);
                    M.mul(r, x, y, ctx);
                }
                store(r, po + i * L, L);
            }
        });
    }
    return out;
}

Limbs mod_mul(const Modulus &M, py::array a_, py::array b_, int threads) {
    int L = M.limbs;
    threads_arg(threads, "mod_mul");
    Limbs a = limbs_arg(a_, "mod_mul", "a", {kAny, L});
    py::ssize_t n = a.shape(0);
    Limbs b = limbs_arg(b_, "mod_mul", "b", {n, L});
    Limbs out = new_out(n, L);
    const u64 *pa = a.data(), *pb = b.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, min_chunk_for(L, 2), [&](size_t s, size_t e) {
            Ctx ctx;
            Bn x, y, r;
            for (size_t i = s; i < e; ++i) {
                load(x, pa + i * L, L);
                load(y, pb + i * L, L);
                M.mul(r, x, y, ctx);     // a·b·R^-1
                M.mul(r, r, M.rr, ctx);  // ·R²·R^-1 = a·b
                store(r, po + i * L, L);
            }
        });
    }
    return out;
}

// Batched modular inverse in the Montgomery domain: out[i] = x_i^-1·R for a[i] = x_i·R.
// Montgomery's batch-inversion trick per thread share [s, e): prefix products P_i = x_s···x_i
// (stored in the output rows), ONE BN_mod_inverse of P_(e-1), then walking back
// out[i] = P_(i-1)·(P_i)^-1 and (P_(i-1))^-1 = (P_i)^-1·x_i: 3 MontMults per element instead of an
// extended gcd each (against gmpy2.invert per element on the host: see docs/perf.md §3).
// An element sharing a factor with m makes the share's product non-invertible: std::domain_error.
Limbs mont_inverse(const Modulus &M, py::array a_, int threads) {
    int L = M.limbs;
    threads_arg(threads, "mont_inverse");
    Limbs a = limbs_arg(a_, "mont_inverse", "a", {kAny, L});
    size_t n = size_t(a.shape(0));
    Limbs out = new_out(py::ssize_t(n), L);
    const u64 *pa = a.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        // one extended gcd per chunk: one chunk per thread (and >= 64 rows), no finer
        size_t per_thread = (n + size_t(std::max(threads, 1)) - 1) / size_t(std::max(threads, 1));
        size_t chunk = std::max({size_t(64), min_chunk_for(L, 3), per_thread});
        parallel_for(n, threads, chunk, [&](size_t s, size_t e) {
            Ctx ctx;
            Bn x, acc, inv, t;
            load(acc, pa + s * L, L);
            store(acc, po + s * L, L);
            for (size_t i = s + 1; i < e; ++i) {  // prefix products, Montgomery form
                load(x, pa + i * L, L);
                M.mul(acc, acc, x, ctx);
                store(acc, po + i * L, L);
            }
            // (P·R)  ->  P  ->  P^-1  ->  P^-1·R
            ok(BN_from_montgomery(t, acc, M.mont, ctx), "from_montgomery");
            if (!BN_mod_inverse(inv, t, M.m, ctx))
                throw std::domain_error("mont_inverse: an element is not invertible modulo m");
            M.mul(inv, inv, M.rr, ctx);
            for (size_t i = e - 1; i > s; --i) {
                load(t, po + (i - 1) * L, L);  // P_(i-1)·R
                M.mul(acc, inv, t, ctx);       // x_i^-1·R
                load(x, pa + i * L, L);
                M.mul(inv, inv, x, ctx);  // P_(i-1)^-1·R
                store(acc, po + i * L, L);
            }
            store(inv, po + s * L, L);
        });
    }
    return out;
}

// exps: (N|1, Le).  mont=true: bases and results in Montgomery form.
Limbs exp_batch(const Modulus &M, py::array base_, py::array exps_, bool mont, int threads) {
    int L = M.limbs;
    const char *fn = mont ? "mont_exp" : "mod_exp";
    threads_arg(threads, fn);
    Limbs base = limbs_arg(base_, fn, "base", {kAny, L});
    py::ssize_t n = base.shape(0);
    Limbs exps = limbs_arg(exps_, fn, "exps", {n, kAny}, true);
    int le = exp_limbs_arg(exps, fn, "exps");
    bool shared = exps.shape(0) == 1;
    Limbs out = new_out(n, L);
    const u64 *pb = base.data(), *pe = exps.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, 1, [&](size_t s, size_t e) {
            Ctx ctx;
            Bn x, r;
            std::vector<Bn> table;
            for (size_t i = s; i < e; ++i) {
                Exponent ex{pe + (shared ? 0 : i * le), le};
                load(x, pb + i * L, L);
                if (!mont) M.mul(x, x, M.rr, ctx);  // enter the domain
                mont_pow(M, r, x, ex, ctx, table);
                if (!mont) ok(BN_from_montgomery(r, r, M.mont, ctx), "from_montgomery");
                store(r, po + i * L, L);
            }
        });
    }
    return out;
}

// base^e mod m for SECRET exponents (and bases), plain in and out: OpenSSL's
// BN_mod_exp_mont_consttime per element.  Its window schedule is fixed, its table lookups read every
// entry under a mask (no secret-dependent addresses) and its Montgomery multiplications have no
// secret-dependent branch, so its time depends on the limb counts of m and e only, not on their
// values.  The sliding-window mont_pow above skips zero bits and picks table entries by exponent
// digits: fast, but its timing follows the exponent, which is right for public exponents only.
// Used for the CRT decryption exponents p−1, q−1, RSA's dp, dq and the key owner's obfuscators.
Limbs exp_secret(const Modulus &M, py::array base_, py::array exps_, int threads) {
    int L = M.limbs;
    threads_arg(threads, "mod_exp_secret");
    Limbs base = limbs_arg(base_, "mod_exp_secret", "base", {kAny, L});
    py::ssize_t n = base.shape(0);
    Limbs exps = limbs_arg(exps_, "mod_exp_secret", "exps", {n, kAny}, true);
    int le = exp_limbs_arg(exps, "mod_exp_secret", "exps");
    bool shared = exps.shape(0) == 1;
    Limbs out = new_out(n, L);
    const u64 *pb = base.data(), *pe = exps.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, 1, [&](size_t s, size_t e) {
            Ctx ctx;
            Bn x, ex, r;
            if (shared) load(ex, pe, le);
            for (size_t i = s; i < e; ++i) {
                if (!shared) load(ex, pe + i * le, le);
                load(x, pb + i * L, L);
                ok(BN_mod_exp_mont_consttime(r, x, ex, M.m, ctx, M.mont),
                   "BN_mod_exp_mont_consttime");
                store(r, po + i * L, L);
            }
        });
    }
    return out;
}

// Pippenger's bucket method for out[k] = prod_i base_i^e[k,i] (Montgomery form).  Work is split into
// (row, slice of bases) tasks so that even one row uses every thread; slices are multiplied at the end.
Limbs multi_exp(const Modulus &M, py::array bases_, py::array exps_, int threads) {
    int L = M.limbs;
    threads_arg(threads, "mont_multi_exp");
    Limbs bases = limbs_arg(bases_, "mont_multi_exp", "bases", {kAny, L});
    Limbs exps = limbs_arg(exps_, "mont_multi_exp", "exps", {kAny, bases.shape(0), kAny});
    size_t K = exps.shape(0), N = exps.shape(1);
    int le = exp_limbs_arg(exps, "mont_multi_exp", "exps");
    const u64 *pb = bases.data(), *pe = exps.data();
    Limbs out = new_out(py::ssize_t(K), L);
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        size_t slices = std::max<size_t>(1, std::min<size_t>(size_t(threads), N / 32 + 1));
        if (K >= size_t(threads)) slices = 1;
        size_t slice_len = (N + slices - 1) / slices;
        // bases loaded once, shared read-only by all tasks
        std::vector<Bn> B(N);
        for (size_t i = 0; i < N; ++i) load(B[i], pb + i * L, L);
        std::vector<Bn> partial(K * slices);
        std::vector<char> has(K * slices, 0);
        parallel_for(K * slices, threads, 1, [&](size_t s, size_t e) {
            Ctx ctx;
            for (size_t task = s; task < e; ++task) {
                size_t k = task / slices, sl = task % slices;
                size_t i0 = sl * slice_len, i1 = std::min(N, i0 + slice_len);
                if (i0 >= i1) continue;
                int ebits = 0;
                for (size_t i = i0; i < i1; ++i)
                    ebits = std::max(ebits, Exponent{pe + (k * N + i) * le, le}.bits());
                if (ebits == 0) continue;
                // window c minimising windows·(bases + 2·2^c)
                int c = 1;
                double best = 1e300;
                for (int cc = 1; cc <= 16; ++cc) {
                    double cost =
                        double((ebits + cc - 1) / cc) * double((i1 - i0) + (size_t(2) << cc));
                    if (cost < best) {
                        best = cost;
                        c = cc;
                    }
                }
                int nw = (ebits + c - 1) / c;
                std::vector<Bn> bucket(size_t(1) << c);
                std::vector<char> used(size_t(1) << c);
                Bn acc, running, total;
                bool acc_set = false;
                for (int j = nw - 1; j >= 0; --j) {
                    if (acc_set)
                        for (int q = 0; q < c; ++q) M.mul(acc, acc, acc, ctx);
                    std::fill(used.begin(), used.end(), 0);
                    for (size_t i = i0; i < i1; ++i) {
                        u64 d = Exponent{pe + (k * N + i) * le, le}.digit(j * c, c);
                        if (!d) continue;
                        if (used[d]) M.mul(bucket[d], bucket[d], B[i], ctx);
                        else {
                            BN_copy(bucket[d], B[i]);
                            used[d] = 1;
                        }
                    }
                    bool run_set = false, tot_set = false;
                    for (size_t d = (size_t(1) << c) - 1; d >= 1; --d) {
                        if (used[d]) {
                            if (run_set) M.mul(running, running, bucket[d], ctx);
                            else {
                                BN_copy(running, bucket[d]);
                                run_set = true;
                            }
                        }
                        if (run_set) {
                            if (tot_set) M.mul(total, total, running, ctx);
                            else {
                                BN_copy(total, running);
                                tot_set = true;
                            }
                        }
                    }
                    if (tot_set) {
                        if (acc_set) M.mul(acc, acc, total, ctx);
                        else {
                            BN_copy(acc, total);
                            acc_set = true;
                        }
                    }
                }
                if (acc_set) {
                    BN_copy(partial[task], acc);
                    has[task] = 1;
                }
            }
        });
        Ctx ctx;
        Bn r;
        for (size_t k = 0; k < K; ++k) {
            BN_copy(r, M.one_mont);
            for (size_t sl = 0; sl < slices; ++sl)
                if (has[k * slices + sl]) M.mul(r, r, partial[k * slices + sl], ctx);
            store(r, po + k * L, L);
        }
    }
    return out;
}

Limbs prod_groups(const Modulus &M, py::array a_, py::array groups_, int64_t G, int threads) {
    int L = M.limbs;
    threads_arg(threads, "mont_prod_groups");
    Limbs a = limbs_arg(a_, "mont_prod_groups", "a", {kAny, L});
    size_t n = a.shape(0);
    check_layout<int64_t>(groups_, "mont_prod_groups", "groups", "int64");
    if (groups_.ndim() != 1 || size_t(groups_.shape(0)) != n)
        bad_arg("mont_prod_groups", "groups",
                "must have shape (" + std::to_string(n) + ",), got " + shape_of(groups_));
    if (G < 0 || G > (int64_t(1) << 32))
        throw std::invalid_argument("mont_prod_groups: group count out of range: " +
                                    std::to_string(G));
    auto groups = py::array_t<int64_t, py::array::c_style>::ensure(groups_);
    const u64 *pa = a.data();
    const int64_t *pg = groups.data();
    for (size_t i = 0; i < n; ++i)
        if (pg[i] < 0 || pg[i] >= G) throw std::invalid_argument("group id out of range");
    Limbs out = new_out(G, L);
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        size_t T = std::max<size_t>(1, std::min<size_t>(size_t(threads), n / 64 + 1));
        std::vector<std::vector<Bn>> acc(T);
        std::vector<std::vector<char>> set(T);
        size_t step = (n + T - 1) / T;
        parallel_for(T, int(T), 1, [&](size_t s, size_t e) {
            Ctx ctx;
            Bn x;
            for (size_t t = s; t < e; ++t) {
                acc[t] = std::vector<Bn>(size_t(G));
                set[t].assign(size_t(G), 0);
                for (size_t i = t * step; i < std::min(n, (t + 1) * step); ++i) {
                    size_t g = size_t(pg[i]);
                    load(x, pa + i * L, L);
                    if (set[t][g]) M.mul(acc[t][g], acc[t][g], x, ctx);
                    else {
                        BN_copy(acc[t][g], x);
                        set[t][g] = 1;
                    }
                }
            }
        });
        Ctx ctx;
        Bn r;
        for (int64_t g = 0; g < G; ++g) {
            bool any = false;
            for (size_t t = 0; t < T; ++t) {
                if (!set[t][g]) continue;
                if (any) M.mul(r, r, acc[t][g], ctx);
                else {
                    BN_copy(r, acc[t][g]);
                    any = true;
                }
            }
            store(any ? r.p : M.one_mont.p, po + g * L, L);
        }
    }
    return out;
}

// ---------------------------------------------------------------- DJN fixed-base comb
// A comb table of one base on one modulus: entry (j, d) = base^(d·2^(w·j)) in Montgomery form, for
// d = 1 .. 2^w − 1, so base^a = ∏_j entry(j, digit_j(a)) costs one MontMult per non-zero w-bit digit
// of a and no squaring.  Built whole, then published as an immutable snapshot (shared_ptr<const>):
// an encryption takes a reference to the current snapshot, so setting a new table while another
// thread encrypts never frees or changes the entries that thread reads.
//
// Layout: one contiguous array of L-limb entries, not one BIGNUM per entry.  The table is large
// (tens of MB) and read at random, so each lookup misses the caches; a BIGNUM per entry made that
// two dependent misses (the BIGNUM, then its limbs) and left nothing to prefetch.  With flat entries
// comb_pow computes every address first and prefetches a few entries ahead of the multiplications,
// which overlaps the misses with the arithmetic.
struct CombTable {
    int w = 0, nwin = 0, limbs = 0;
    std::vector<u64> data;
    const u64 *entry(int j, u64 d) const {
        return data.data() + ((size_t(j) * ((size_t(1) << w) - 1)) + size_t(d - 1)) * size_t(limbs);
    }
};

// Build the table of base_mont (Montgomery form mod M) for exponents of up to exp_bits bits.
// Call without the GIL.  The window bases base^(2^(w·j)) take w squarings each (sequential,
// nwin·w ≈ exp_bits squarings), then the 2^w − 2 multiples of every window run on the pool.
std::shared_ptr<const CombTable> comb_build(const Modulus &M, const BIGNUM *base_mont, int exp_bits,
                                            int window, int threads) {
    auto t = std::make_shared<CombTable>();
    t->w = window;
    t->nwin = (exp_bits + window - 1) / window;
    t->limbs = M.limbs;
    const size_t per = (size_t(1) << window) - 1;
    const int nwin = t->nwin;
    const int L = M.limbs;
    t->data.assign(size_t(nwin) * per * size_t(L), 0);
    std::vector<Bn> bases(static_cast<size_t>(nwin));
    {
        Ctx ctx;
        BN_copy(bases[0], base_mont);
        for (int j = 1; j < nwin; ++j) {
            M.mul(bases[j], bases[j - 1], bases[j - 1], ctx);
            for (int q = 1; q < window; ++q) M.mul(bases[j], bases[j], bases[j], ctx);
        }
    }
    u64 *out = t->data.data();
    parallel_for(size_t(nwin), threads, 1, [&](size_t s, size_t e) {
        Ctx c2;
        Bn acc;
        for (size_t j = s; j < e; ++j) {
            BN_copy(acc, bases[j]);
            store(acc, out + (j * per) * size_t(L), L);
            for (size_t d = 1; d < per; ++d) {
                M.mul(acc, acc, bases[j], c2);
                store(acc, out + (j * per + d) * size_t(L), L);
            }
        }
    });
    return t;
}

// acc = base^a (Montgomery form) from the comb table; a longer than the table covers is refused.
// sel is the caller's scratch (one per thread, reused across elements).
void comb_pow(const Modulus &M, const CombTable &t, const Exponent &ex, BIGNUM *acc, BIGNUM *tmp,
              std::vector<const u64 *> &sel, BN_CTX *ctx) {
    if (ex.bits() > t.nwin * t.w) throw std::invalid_argument("fixed-base exponent too long");
    sel.clear();
    for (int j = 0; j < t.nwin; ++j) {
        const u64 d = ex.digit(j * t.w, t.w);
        if (d) sel.push_back(t.entry(j, d));
    }
    if (sel.empty()) {
        BN_copy(acc, M.one_mont);
        return;
    }
    const int L = t.limbs;
    constexpr size_t kAhead = 4;  // entries in flight: a few MontMults cover a memory round trip
    auto prefetch = [&](size_t k) {
        if (k >= sel.size()) return;
        for (int l = 0; l < L; l += 8)
            __builtin_prefetch(sel[k] + l);  // one 64-byte line per 8 limbs
    };
    for (size_t k = 0; k < kAhead; ++k) prefetch(k);
    load(acc, sel[0], L);
    for (size_t k = 1; k < sel.size(); ++k) {
        prefetch(k + kAhead - 1);
        load(tmp, sel[k], L);
        M.mul(acc, acc, tmp, ctx);
    }
}

// x86-64: compiled twice (AVX2 and baseline), the loader picks one; elsewhere once.
#if defined(__x86_64__) && defined(__GNUC__)
#define UNIFL_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define UNIFL_SIMD_CLONES
#endif

// sel = entry (j, d) of t, or one when d = 0, by a masked read of every entry of window j: no
// branch and no address depends on d.  Never throws (a clone's exceptions would not unwind).
UNIFL_SIMD_CLONES void comb_select(const CombTable &t, int j, u64 d, u64 *__restrict sel,
                                   const u64 *__restrict one) {
    const int L = t.limbs;
    const size_t per = (size_t(1) << t.w) - 1;
    const u64 m0 = ((d | (0 - d)) >> 63) - 1;  // all ones when d = 0, else zero
    for (int l = 0; l < L; ++l) sel[l] = one[l] & m0;
    const u64 *row = t.entry(j, 1);
    for (size_t k = 1; k <= per; ++k, row += L) {
        const u64 diff = d ^ u64(k);
        const u64 m = ((diff | (0 - diff)) >> 63) - 1;
        const u64 *__restrict in = row;
        for (int l = 0; l < L; ++l) sel[l] |= in[l] & m;
    }
}

// acc = base^a (Montgomery form) on a fixed schedule, for a secret exponent a: one MontMult per
// window whatever the digit (a zero digit multiplies by R mod m, the Montgomery one), each
// window's entry read by comb_select, so no branch and no table address depends on a.  sel
// (t.limbs) and one (R mod m, t.limbs) are the caller's.  The multiplications are
// BN_mod_mul_montgomery, which trims zero top limbs: a value whose top limb is zero is handled a
// little faster (not the strict constant time of BN_mod_exp_mont_consttime, which works on
// fixed-width arrays below the BIGNUM interface).
void comb_pow_fixed(const Modulus &M, const CombTable &t, const Exponent &ex, BIGNUM *acc,
                    BIGNUM *tmp, u64 *sel, const u64 *one, BN_CTX *ctx) {
    const int L = t.limbs;
    // an exponent longer than the table covers is refused; the test ORs the excess bits, so its
    // time does not depend on where the exponent's top bit is
    const int covered = t.nwin * t.w;
    u64 excess = 0;
    for (int i = covered / 64; i < ex.len; ++i) {
        const int lo = 64 * i >= covered ? 0 : covered - 64 * i;
        excess |= lo >= 64 ? 0 : ex.e[i] >> lo;
    }
    if (excess) throw std::invalid_argument("fixed-base exponent too long");
    for (int j = 0; j < t.nwin; ++j) {
        comb_select(t, j, ex.digit(j * t.w, t.w), sel, one);
        if (j == 0) {
            load(acc, sel, L);
        } else {
            load(tmp, sel, L);
            M.mul(acc, acc, tmp, ctx);
        }
    }
}

void check_comb_args(const char *fn, int exp_bits, int window, int limbs) {
    if (window < 1 || window > 16)
        throw std::invalid_argument(std::string(fn) + ": window must be in [1, 16], got " +
                                    std::to_string(window));
    if (exp_bits < 1 || exp_bits > 64 * limbs)
        throw std::invalid_argument(std::string(fn) + ": exp_bits must be in [1, " +
                                    std::to_string(64 * limbs) + "], got " +
                                    std::to_string(exp_bits));
}

// ---------------------------------------------------------------- Paillier
// Public key: n, n²; ciphertexts in Montgomery form mod n².  g = n + 1, so g^m = 1 + m·n mod n².
struct PaillierPublic {
    std::shared_ptr<Modulus> nsq;
    int n_limbs;
    Bn n;
    mutable std::mutex fb_mu;
    std::shared_ptr<const CombTable> fb;  // the DJN comb of hs mod n² (set_fixed_base)

    PaillierPublic(std::shared_ptr<Modulus> nsq_, py::array n_arr)
        : nsq(std::move(nsq_)), n_limbs(0) {
        if (!nsq) throw std::invalid_argument("PaillierPublic: argument 'nsq' is None");
        Limbs n_limbs_ = limbs_arg(n_arr, "PaillierPublic", "n", {kAny});
        py::ssize_t Ln = n_limbs_.shape(0);
        // n² has 2·Ln or 2·Ln − 1 limbs; anything else is the modulus of another key
        if (Ln < 1 || (nsq->limbs != 2 * Ln && nsq->limbs != 2 * Ln - 1))
            bad_arg(
                "PaillierPublic", "n",
                "has " + std::to_string(Ln) + " limbs, but n² has " + std::to_string(nsq->limbs));
        n_limbs = int(Ln);
        load(n, n_limbs_.data(), n_limbs);
        Ctx ctx;
        Bn sq;
        ok(BN_mul(sq, n, n, ctx), "mul");
        if (BN_ucmp(sq, nsq->m) != 0)
            bad_arg("PaillierPublic", "n", "does not square to the modulus nsq");
    }

    // tmp = g^m = 1 + m·n (< n² for m < n)
    void g_of(BIGNUM *tmp, const BIGNUM *m, BN_CTX *ctx) const {
        ok(BN_mul(tmp, m, n, ctx), "mul");
        ok(BN_add_word(tmp, 1), "add_word");
    }

    // c̄ = (1 + m·n)·obf  where obf is r^n (Montgomery form) -- two MontMults:
    // MontMult(g^m, obf̄) = g^m·obf (plain), then ·R² to re-enter the domain.
    void finish(BIGNUM *out, const BIGNUM *m, const BIGNUM *obf_mont, BN_CTX *ctx,
                BIGNUM *tmp) const {
        g_of(tmp, m, ctx);
        nsq->mul(out, tmp, obf_mont, ctx);
        nsq->mul(out, out, nsq->rr, ctx);
    }

    Limbs encrypt(py::array m_, py::array r_, int threads) {
        threads_arg(threads, "PaillierPublic.encrypt");
        Limbs m = limbs_arg(m_, "PaillierPublic.encrypt", "m", {kAny, n_limbs});
        size_t N = m.shape(0);
        Limbs r = limbs_arg(r_, "PaillierPublic.encrypt", "r", {py::ssize_t(N), n_limbs});
        int L2 = nsq->limbs;
        Limbs out = new_out(py::ssize_t(N), L2);
        const u64 *pm = m.data(), *pr = r.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(N, threads, 1, [&](size_t s, size_t e) {
                Ctx ctx;
                Bn x, rn, tmp, c;
                for (size_t i = s; i < e; ++i) {
                    load(x, pr + i * n_limbs, n_limbs);
                    ok(BN_mod_exp_mont(rn, x, n, nsq->m, ctx, nsq->mont), "BN_mod_exp_mont");
                    nsq->mul(rn, rn, nsq->rr, ctx);  // r^n into the domain
                    load(x, pm + i * n_limbs, n_limbs);
                    finish(c, x, rn, ctx, tmp);
                    store(c, po + i * L2, L2);
                }
            });
        }
        return out;
    }

    void set_fixed_base(py::array hs_arr, int exp_bits, int window, int threads) {
        const char *fn = "PaillierPublic.set_fixed_base";
        threads_arg(threads, fn);
        Limbs hs_mont = limbs_arg(hs_arr, fn, "hs_mont", {nsq->limbs});
        check_comb_args(fn, exp_bits, window, nsq->limbs);
        std::shared_ptr<const CombTable> t;
        {
            py::gil_scoped_release nogil;
            Bn hs;
            load(hs, hs_mont.data(), nsq->limbs);
            t = comb_build(*nsq, hs, exp_bits, window, threads);
        }
        std::lock_guard<std::mutex> g(fb_mu);
        fb = std::move(t);
    }

    std::shared_ptr<const CombTable> fixed_base() const {
        std::lock_guard<std::mutex> g(fb_mu);
        return fb;
    }

    Limbs encrypt_fixed_base(py::array m_, py::array a_, int threads) {
        const char *fn = "PaillierPublic.encrypt_fixed_base";
        threads_arg(threads, fn);
        std::shared_ptr<const CombTable> t = fixed_base();
        if (!t) throw std::logic_error(std::string(fn) + ": the fixed-base table is not set");
        Limbs m = limbs_arg(m_, fn, "m", {kAny, n_limbs});
        size_t N = m.shape(0);
        Limbs a = limbs_arg(a_, fn, "a", {py::ssize_t(N), kAny});
        int la = exp_limbs_arg(a, fn, "a");
        int L2 = nsq->limbs;
        Limbs out = new_out(py::ssize_t(N), L2);
        const u64 *pm = m.data(), *pa = a.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(N, threads, 8, [&](size_t s, size_t e) {
                Ctx ctx;
                Bn x, acc, tmp, c;
                std::vector<const u64 *> sel;
                for (size_t i = s; i < e; ++i) {
                    comb_pow(*nsq, *t, Exponent{pa + i * la, la}, acc, tmp, sel, ctx);
                    load(x, pm + i * n_limbs, n_limbs);
                    finish(c, x, acc, ctx, tmp);
                    store(c, po + i * L2, L2);
                }
            });
        }
        return out;
    }
};

// Private key: CRT decryption  m_p = L_p(c^(p-1) mod p²)·h_p mod p, likewise for q, then
// m = m_q + q·((m_p − m_q)·q^-1 mod p); and key-owner encryption with the CRT,
// c̄ = (1 + m·n)·x·R mod n² for x ≡ x_p (mod p²), x ≡ x_q (mod q²).
struct PaillierPrivate {
    std::shared_ptr<PaillierPublic> pub;
    std::shared_ptr<Modulus> psq, qsq;
    int n_limbs, p_limbs, q_limbs;
    Bn p, q, pm1, qm1, hp, hq, qinv;
    Bn psqinv_mont;  // (p²)^-1·R_q mod q²: a MontMult mod q² by it multiplies by (p²)^-1
    Bn r3;           // R³ mod n²: MontMult(g·x·R^-1, R³) = g·x·R, the Montgomery form of g·x
    mutable std::mutex fb_mu;
    std::shared_ptr<const CombTable> fbp, fbq;  // combs of hs mod p² and hs mod q² (set_fixed_base)
    std::shared_ptr<const CombTable> gtp, gtq;  // combs of gp mod p² and gq mod q² (set_generators)

    PaillierPrivate(std::shared_ptr<PaillierPublic> pub_, std::shared_ptr<Modulus> psq_,
                    std::shared_ptr<Modulus> qsq_, py::array p_, py::array q_, py::array hp_,
                    py::array hq_, py::array qinv_)
        : pub(std::move(pub_)),
          psq(std::move(psq_)),
          qsq(std::move(qsq_)),
          n_limbs(0),
          p_limbs(0),
          q_limbs(0) {
        const char *fn = "PaillierPrivate";
        if (!pub || !psq || !qsq)
            throw std::invalid_argument("PaillierPrivate: a key part is None");
        n_limbs = pub->n_limbs;
        // each constant is at most n's width; the products below tie them to the moduli
        const char *names[5] = {"p", "q", "hp", "hq", "qinv"};
        py::array *arrs[5] = {&p_, &q_, &hp_, &hq_, &qinv_};
        BIGNUM *dst[5] = {p, q, hp, hq, qinv};
        for (int k = 0; k < 5; ++k) {
            Limbs v = limbs_arg(*arrs[k], fn, names[k], {kAny});
            if (v.shape(0) < 1 || v.shape(0) > n_limbs)
                bad_arg(fn, names[k],
                        "must have 1.." + std::to_string(n_limbs) + " limbs, got " +
                            std::to_string(v.shape(0)));
            load(dst[k], v.data(), int(v.shape(0)));
        }
        Ctx ctx;
        Bn t;
        ok(BN_mul(t, p, p, ctx), "mul");
        if (BN_ucmp(t, psq->m) != 0) bad_arg(fn, "p", "does not square to the modulus psq");
        ok(BN_mul(t, q, q, ctx), "mul");
        if (BN_ucmp(t, qsq->m) != 0) bad_arg(fn, "q", "does not square to the modulus qsq");
        ok(BN_mul(t, p, q, ctx), "mul");
        if (BN_ucmp(t, pub->n) != 0) bad_arg(fn, "p", "times q is not the public key's n");
        if (BN_ucmp(p, q) >= 0)
            bad_arg(fn, "p", "must be the smaller prime (the CRT combine relies on p² < q²)");
        if (BN_ucmp(hp, p) >= 0 || BN_ucmp(hq, q) >= 0 || BN_ucmp(qinv, p) >= 0)
            throw std::invalid_argument(
                "PaillierPrivate: hp, hq, qinv must be reduced mod p, q, p");
        // Garner's constant of the owner's CRT, once per key object (p² and q² are coprime)
        if (!BN_mod_inverse(psqinv_mont, psq->m, qsq->m, ctx))
            bad_arg(fn, "p", "has no inverse mod q²");
        ok(BN_to_montgomery(psqinv_mont, psqinv_mont, qsq->mont, ctx), "to_montgomery");
        pub->nsq->mul(r3, pub->nsq->rr, pub->nsq->rr, ctx);
        BN_copy(pm1, p);
        ok(BN_sub_word(pm1, 1), "sub");
        BN_copy(qm1, q);
        ok(BN_sub_word(qm1, 1), "sub");
        p_limbs = (BN_num_bits(p) + 63) / 64;
        q_limbs = (BN_num_bits(q) + 63) / 64;
    }

    // One CRT half; false when c is not a unit modulo the prime pr.  For a unit c, Fermat gives
    // x = c^(pr−1) mod pr² ≡ 1 (mod pr).  Anything else (x = 0 included: c a multiple of pr) means c
    // shares the factor pr with n, and L(x) of it would be a value that factors n: refused.
    bool half(BIGNUM *out, const BIGNUM *c, const Modulus &M, const BIGNUM *pr, const BIGNUM *pr1,
              const BIGNUM *h, BN_CTX *ctx, BIGNUM *t, BIGNUM *rem) const {
        ok(BN_nnmod(t, c, M.m, ctx), "nnmod");
        ok(BN_mod_exp_mont_consttime(t, t, pr1, M.m, ctx, M.mont), "mod_exp_consttime");
        if (BN_is_zero(t)) return false;
        ok(BN_sub_word(t, 1), "sub_word");
        ok(BN_div(t, rem, t, pr, ctx), "div");  // L(x) = (x − 1) / p, exact for a unit
        if (!BN_is_zero(rem)) return false;
        ok(BN_mod_mul(out, t, h, pr, ctx), "mod_mul");
        return true;
    }

    Limbs decrypt(py::array c_arr, int threads) {
        const Modulus &NS = *pub->nsq;
        threads_arg(threads, "PaillierPrivate.decrypt");
        Limbs c_mont = limbs_arg(c_arr, "PaillierPrivate.decrypt", "c", {kAny, NS.limbs});
        size_t N = c_mont.shape(0);
        Limbs out = new_out(py::ssize_t(N), n_limbs);
        const u64 *pc = c_mont.data();
        u64 *po = out.mutable_data();
        std::vector<char> bad(N, 0);
        {
            py::gil_scoped_release nogil;
            parallel_for(N, threads, 1, [&](size_t s, size_t e) {
                Ctx ctx;
                Bn c, mp, mq, t, r, rem;
                for (size_t i = s; i < e; ++i) {
                    load(c, pc + i * NS.limbs, NS.limbs);
                    ok(BN_from_montgomery(c, c, NS.mont, ctx), "from_montgomery");
                    bool good = half(mp, c, *psq, p, pm1, hp, ctx, t, rem);
                    good = half(mq, c, *qsq, q, qm1, hq, ctx, t, rem) && good;
                    if (!good) {
                        bad[i] = 1;
                        std::memset(po + i * n_limbs, 0, 8 * size_t(n_limbs));
                        continue;
                    }
                    ok(BN_mod_sub(t, mp, mq, p, ctx), "mod_sub");
                    ok(BN_mod_mul(t, t, qinv, p, ctx), "mod_mul");
                    ok(BN_mul(r, t, q, ctx), "mul");
                    ok(BN_add(r, r, mq), "add");
                    store(r, po + i * n_limbs, n_limbs);
                }
            });
        }
        auto first = std::find(bad.begin(), bad.end(), 1);
        if (first != bad.end()) {
            // the typed error of the SDK (a ValueError), raised here so that no caller of the
            // extension can receive the degenerate halves
            py::object err =
                py::module_::import("unifl.core.errors").attr("InvalidCiphertextError");
            std::string msg = "ciphertext #" + std::to_string(first - bad.begin()) +
                              " is not a unit mod n² (a CRT half of its decryption degenerates); "
                              "refused, since decrypting it could reveal the key";
            PyErr_SetString(err.ptr(), msg.c_str());
            throw py::error_already_set();
        }
        return out;
    }

    // ---- key-owner encryption
    // c = (1 + m·n)·x·R mod n² for x < n² with x ≡ xp (mod p²), x ≡ xq (mod q²), xp < p², xq < q².
    // Garner oriented so that nothing needs reducing first (p < q, so xp < p² < q²):
    // x = xp + p²·t, t = (xq − xp)·(p²)^-1 mod q², and p²·t + xp < n² exactly.  The time of these
    // steps follows the values of the obfuscator halves (BN_mul / BN_mod_sub normalise their
    // results), never the key: p and q appear only as the exponents of the constant-time ModExps.
    void combine_finish(u64 *out, const u64 *m, const BIGNUM *xp, const BIGNUM *xq, BN_CTX *ctx,
                        BIGNUM *t, BIGNUM *x, BIGNUM *g) const {
        const Modulus &NS = *pub->nsq;
        ok(BN_mod_sub(t, xq, xp, qsq->m, ctx), "mod_sub");
        qsq->mul(t, t, psqinv_mont, ctx);  // (xq − xp)·(p²)^-1 mod q², plain
        ok(BN_mul(x, t, psq->m, ctx), "mul");
        ok(BN_add(x, x, xp), "add");
        load(g, m, n_limbs);
        pub->g_of(g, g, ctx);   // 1 + m·n
        NS.mul(g, g, x, ctx);   // g·x·R^-1
        NS.mul(g, g, r3, ctx);  // g·x·R
        store(g, out, NS.limbs);
    }

    // yp (N, p_limbs), yq (N, q_limbs): xp = yp^p mod p², xq = yq^q mod q² with OpenSSL's
    // BN_mod_exp_mont_consttime (p and q are the key), then combine_finish.  One call per batch.
    Limbs encrypt_owner(py::array m_, py::array yp_, py::array yq_, int threads) {
        const char *fn = "PaillierPrivate.encrypt_owner";
        threads_arg(threads, fn);
        const int L2 = pub->nsq->limbs;
        Limbs m = limbs_arg(m_, fn, "m", {kAny, n_limbs});
        const py::ssize_t N = m.shape(0);
        Limbs yp = limbs_arg(yp_, fn, "yp", {N, p_limbs});
        Limbs yq = limbs_arg(yq_, fn, "yq", {N, q_limbs});
        Limbs out = new_out(N, L2);
        const u64 *pm = m.data(), *pyp = yp.data(), *pyq = yq.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(size_t(N), threads, 1, [&](size_t s, size_t e) {
                Ctx ctx;
                Bn y, xp, xq, t, x, g;
                for (size_t i = s; i < e; ++i) {
                    load(y, pyp + i * p_limbs, p_limbs);
                    ok(BN_mod_exp_mont_consttime(xp, y, p, psq->m, ctx, psq->mont),
                       "mod_exp_consttime");
                    load(y, pyq + i * q_limbs, q_limbs);
                    ok(BN_mod_exp_mont_consttime(xq, y, q, qsq->m, ctx, qsq->mont),
                       "mod_exp_consttime");
                    combine_finish(po + i * L2, pm + i * n_limbs, xp, xq, ctx, t, x, g);
                }
            });
        }
        return out;
    }

    // The DJN fixed base through the CRT: combs of hs mod p² and hs mod q² (each entry half the
    // size of n²'s, so a quarter of the MontMult cost), from hs̄ = hs·R mod n².
    void set_fixed_base(py::array hs_arr, int exp_bits, int window, int threads) {
        const char *fn = "PaillierPrivate.set_fixed_base";
        threads_arg(threads, fn);
        const Modulus &NS = *pub->nsq;
        Limbs hs_mont = limbs_arg(hs_arr, fn, "hs_mont", {NS.limbs});
        check_comb_args(fn, exp_bits, window, NS.limbs);
        std::shared_ptr<const CombTable> tp, tq;
        {
            py::gil_scoped_release nogil;
            Ctx ctx;
            Bn hs, base;
            load(hs, hs_mont.data(), NS.limbs);
            ok(BN_from_montgomery(hs, hs, NS.mont, ctx), "from_montgomery");
            ok(BN_nnmod(base, hs, psq->m, ctx), "nnmod");
            ok(BN_to_montgomery(base, base, psq->mont, ctx), "to_montgomery");
            tp = comb_build(*psq, base, exp_bits, window, threads);
            ok(BN_nnmod(base, hs, qsq->m, ctx), "nnmod");
            ok(BN_to_montgomery(base, base, qsq->mont, ctx), "to_montgomery");
            tq = comb_build(*qsq, base, exp_bits, window, threads);
        }
        std::lock_guard<std::mutex> g(fb_mu);
        fbp = std::move(tp);
        fbq = std::move(tq);
    }

    Limbs encrypt_owner_fixed_base(py::array m_, py::array a_, int threads) {
        const char *fn = "PaillierPrivate.encrypt_owner_fixed_base";
        threads_arg(threads, fn);
        std::shared_ptr<const CombTable> tp, tq;
        {
            std::lock_guard<std::mutex> g(fb_mu);
            tp = fbp;
            tq = fbq;
        }
        if (!tp || !tq)
            throw std::logic_error(std::string(fn) + ": the fixed-base tables are not set");
        const int L2 = pub->nsq->limbs;
        Limbs m = limbs_arg(m_, fn, "m", {kAny, n_limbs});
        const py::ssize_t N = m.shape(0);
        Limbs a = limbs_arg(a_, fn, "a", {N, kAny});
        const int la = exp_limbs_arg(a, fn, "a");
        Limbs out = new_out(N, L2);
        const u64 *pm = m.data(), *pa = a.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(size_t(N), threads, 8, [&](size_t s, size_t e) {
                Ctx ctx;
                Bn xp, xq, t, x, g;
                std::vector<const u64 *> sel;
                for (size_t i = s; i < e; ++i) {
                    const Exponent ex{pa + i * la, la};
                    comb_pow(*psq, *tp, ex, xp, t, sel, ctx);
                    ok(BN_from_montgomery(xp, xp, psq->mont, ctx), "from_montgomery");
                    comb_pow(*qsq, *tq, ex, xq, t, sel, ctx);
                    ok(BN_from_montgomery(xq, xq, qsq->mont, ctx), "from_montgomery");
                    combine_finish(po + i * L2, pm + i * n_limbs, xp, xq, ctx, t, x, g);
                }
            });
        }
        return out;
    }

    // The owner's generators of the n-th residues (gp̄ = gp·R mod p², gq̄ likewise): combs for
    // exponents of p's and q's bit length.  Whether gp, gq really generate is the SDK's to prove
    // (unifl.phe_sdk.paillier); any base gives the defined result CRT(gp^kp, gq^kq).
    void set_generators(py::array gp_arr, py::array gq_arr, int window, int threads) {
        const char *fn = "PaillierPrivate.set_generators";
        threads_arg(threads, fn);
        Limbs gp_mont = limbs_arg(gp_arr, fn, "gp_mont", {psq->limbs});
        Limbs gq_mont = limbs_arg(gq_arr, fn, "gq_mont", {qsq->limbs});
        const int pbits = BN_num_bits(p), qbits = BN_num_bits(q);
        check_comb_args(fn, pbits, window, psq->limbs);
        check_comb_args(fn, qbits, window, qsq->limbs);
        std::shared_ptr<const CombTable> tp, tq;
        {
            py::gil_scoped_release nogil;
            Bn base;
            load(base, gp_mont.data(), psq->limbs);
            if (BN_ucmp(base, psq->m) >= 0)
                throw std::invalid_argument(std::string(fn) + ": gp_mont is not below p²");
            tp = comb_build(*psq, base, pbits, window, threads);
            load(base, gq_mont.data(), qsq->limbs);
            if (BN_ucmp(base, qsq->m) >= 0)
                throw std::invalid_argument(std::string(fn) + ": gq_mont is not below q²");
            tq = comb_build(*qsq, base, qbits, window, threads);
        }
        std::lock_guard<std::mutex> g(fb_mu);
        gtp = std::move(tp);
        gtq = std::move(tq);
    }

    // c̄ = (1 + m·n)·CRT(gp^kp mod p², gq^kq mod q²)·R mod n², one call per batch: two comb
    // products of half size per element on the fixed schedule of comb_pow_fixed (the exponents
    // are the encryption's randomness), then combine_finish.  An exponent longer than p (q) is
    // refused.
    Limbs encrypt_owner_generator(py::array m_, py::array kp_, py::array kq_, int threads) {
        const char *fn = "PaillierPrivate.encrypt_owner_generator";
        threads_arg(threads, fn);
        std::shared_ptr<const CombTable> tp, tq;
        {
            std::lock_guard<std::mutex> g(fb_mu);
            tp = gtp;
            tq = gtq;
        }
        if (!tp || !tq)
            throw std::logic_error(std::string(fn) + ": the generator tables are not set");
        const int L2 = pub->nsq->limbs;
        Limbs m = limbs_arg(m_, fn, "m", {kAny, n_limbs});
        const py::ssize_t N = m.shape(0);
        Limbs kp = limbs_arg(kp_, fn, "kp", {N, p_limbs});
        Limbs kq = limbs_arg(kq_, fn, "kq", {N, q_limbs});
        Limbs out = new_out(N, L2);
        const u64 *pm = m.data(), *pkp = kp.data(), *pkq = kq.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(size_t(N), threads, 8, [&](size_t s, size_t e) {
                Ctx ctx;
                Bn xp, xq, t, x, g;
                const int Lp = psq->limbs, Lq = qsq->limbs;
                std::vector<u64> sel(static_cast<size_t>(std::max(Lp, Lq)));
                std::vector<u64> one_p(static_cast<size_t>(Lp)), one_q(static_cast<size_t>(Lq));
                store(psq->one_mont, one_p.data(), Lp);
                store(qsq->one_mont, one_q.data(), Lq);
                for (size_t i = s; i < e; ++i) {
                    comb_pow_fixed(*psq, *tp, Exponent{pkp + i * p_limbs, p_limbs}, xp, t,
                                   sel.data(), one_p.data(), ctx);
                    ok(BN_from_montgomery(xp, xp, psq->mont, ctx), "from_montgomery");
                    comb_pow_fixed(*qsq, *tq, Exponent{pkq + i * q_limbs, q_limbs}, xq, t,
                                   sel.data(), one_q.data(), ctx);
                    ok(BN_from_montgomery(xq, xq, qsq->mont, ctx), "from_montgomery");
                    combine_finish(po + i * L2, pm + i * n_limbs, xp, xq, ctx, t, x, g);
                }
            });
        }
        return out;
    }
};

}  // namespace

PYBIND11_MODULE(_native, mod) {
    mod.doc() =
        "UniFL native backend: batched Montgomery arithmetic and Paillier on OpenSSL's bn_mul_mont";
    g_direct = layout_self_check();
    mod.attr("direct_limb_transfer") = g_direct;
    mod.def("hardware_threads", &num_threads_default);
    py::class_<Modulus, std::shared_ptr<Modulus>>(mod, "Modulus").def(py::init<py::array>());
    mod.def("mont_mul", &mont_mul);
    mod.def("mod_mul", &mod_mul);
    mod.def("mod_exp", [](const Modulus &M, py::array b, py::array e, int t) {
        return exp_batch(M, b, e, false, t);
    });
    mod.def("mont_exp", [](const Modulus &M, py::array b, py::array e, int t) {
        return exp_batch(M, b, e, true, t);
    });
    mod.def("mod_exp_secret", &exp_secret);
    mod.def("mont_multi_exp", &multi_exp);
    mod.def("mont_prod_groups", &prod_groups);
    mod.def("mont_inverse", &mont_inverse);
    py::class_<PaillierPublic, std::shared_ptr<PaillierPublic>>(mod, "PaillierPublic")
        .def(py::init<std::shared_ptr<Modulus>, py::array>())
        .def("encrypt", &PaillierPublic::encrypt)
        .def("set_fixed_base", &PaillierPublic::set_fixed_base)
        .def("encrypt_fixed_base", &PaillierPublic::encrypt_fixed_base);
    py::class_<PaillierPrivate, std::shared_ptr<PaillierPrivate>>(mod, "PaillierPrivate")
        .def(py::init<std::shared_ptr<PaillierPublic>, std::shared_ptr<Modulus>,
                      std::shared_ptr<Modulus>, py::array, py::array, py::array, py::array,
                      py::array>())
        .def("decrypt", &PaillierPrivate::decrypt)
        .def("encrypt_owner", &PaillierPrivate::encrypt_owner)
        .def("set_fixed_base", &PaillierPrivate::set_fixed_base)
        .def("encrypt_owner_fixed_base", &PaillierPrivate::encrypt_owner_fixed_base)
        .def("set_generators", &PaillierPrivate::set_generators)
        .def("encrypt_owner_generator", &PaillierPrivate::encrypt_owner_generator);
}

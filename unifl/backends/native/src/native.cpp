// UniFL native backend: batched Montgomery arithmetic and fused Paillier ops on the CPU.
//
// Why OpenSSL's BIGNUM Montgomery code and not our own loops: measured on the 2-core Zen 3 box
// (shared/references/cpu-limits.md), plain C++ CIOS with unsigned __int128 is 2-3.5x slower than GMP,
// while libcrypto's mulx/adcx/adox bn_mul_mont (reached through BN_mod_mul_montgomery, which also
// switches to the dedicated sqr8x code when both operands are the same object) is ~1.25x faster than
// GMP's mpn_mul_n + redc (2048-bit MontMult 1352 ns vs 1692 ns).  So every MontMult here is one
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
#include <thread>
#include <vector>

#include <unistd.h>

#include "bn_api.h"

namespace py = pybind11;
using u64 = uint64_t;
using Limbs = py::array_t<u64, py::array::c_style | py::array::forcecast>;

namespace {

// ---------------------------------------------------------------- RAII helpers around BIGNUM
struct Bn {
    BIGNUM *p;
    Bn() : p(BN_new()) { if (!p) throw std::bad_alloc(); }
    ~Bn() { BN_clear_free(p); }
    Bn(const Bn &) = delete;
    Bn &operator=(const Bn &) = delete;
    Bn(Bn &&o) noexcept : p(o.p) { o.p = nullptr; }
    operator BIGNUM *() const { return p; }
};

struct Ctx {
    BN_CTX *p;
    Ctx() : p(BN_CTX_new()) { if (!p) throw std::bad_alloc(); }
    ~Ctx() { BN_CTX_free(p); }
    operator BN_CTX *() const { return p; }
};

inline void ok(int r, const char *what) {
    if (!r) throw std::runtime_error(std::string("OpenSSL BIGNUM call failed: ") + what);
}

// Limb transfer.  The documented way (BN_lebin2bn / BN_bn2lebinpad) walks byte by byte and costs
// ~65 % of a 2048-bit MontMult (measured: 727 ns for two loads and a store against 1105 ns for the
// multiplication).  libcrypto's BIGNUM has had the same layout {BN_ULONG *d; int top, dmax, neg,
// flags} since OpenSSL 1.1.0; we copy limbs straight into it, but only after a start-up self-check
// against the documented functions proves the layout (see layout_self_check), and fall back to the
// documented functions otherwise or when UNIFL_NATIVE_SAFE_BN=1.
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

// A persistent pool of worker threads.  Starting and joining a std::thread per batch cost 27 µs
// on a quiet moment of this 2-vCPU box and over 200 µs while it was loaded (measured: 2000
// create+join rounds), against ~10 µs for a condition-variable round trip to a parked worker; a
// 400-element ct+ct at a 2048-bit key is ~600 µs per thread, so start-up was 4-30 % of it.
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
    size_t t = std::max<size_t>(1, std::min<size_t>(size_t(threads), (n + min_chunk - 1) / min_chunk));
    if (t == 1) { f(size_t(0), n); return; }
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
// `limbs`-limb operands.  A MontMult costs about 1.2·L² ns here (measured: 1.23 µs at 32 limbs, 4.9 µs
// at 64 limbs, cpu-limits.md) and starting + joining a std::thread about 20-40 µs, so a share should
// carry >= ~100 µs of work.  A fixed 512-element minimum kept a 400-element ct+ct batch at 4096 bits
// (~1.2 ms of work) on one thread: 341k/s instead of the 2-thread rate.
size_t min_chunk_for(int limbs, int mults) {
    double ns = 1.2 * double(limbs) * double(limbs) * double(std::max(mults, 1));
    return std::max<size_t>(1, size_t(100000.0 / ns));
}

// ---------------------------------------------------------------- one modulus
struct Modulus {
    int limbs;
    Bn m, rr, one_mont;  // m, R^2 mod m, R mod m
    BN_MONT_CTX *mont;
    explicit Modulus(Limbs m_limbs) : limbs(int(m_limbs.shape(0))), mont(BN_MONT_CTX_new()) {
        if (!mont) throw std::bad_alloc();
        load(m, m_limbs.data(), limbs);
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
// up to bits = (w+1)(w+2)·2^(w-1): 6, 24, 80, 240, 672, 1792.  (The earlier table was one step too
// wide everywhere; for the ~34-bit exponents of ct×float at 2048-bit keys w=3 instead of 4 saves
// ~2.3 of ~48 MontMults per element.)
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
    if (nb == 0) { BN_copy(r, M.one_mont); return; }
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

void check2(const Limbs &a, int limbs, const char *name) {
    if (a.ndim() != 2 || a.shape(1) != limbs)
        throw std::invalid_argument(std::string(name) + ": bad limb array shape");
}

Limbs new_out(py::ssize_t n, int limbs) { return Limbs({n, py::ssize_t(limbs)}); }

// ---------------------------------------------------------------- base_op / mod_op batches
Limbs mont_mul(const Modulus &M, Limbs a, Limbs b, int threads) {
    int L = M.limbs;
    check2(a, L, "a"); check2(b, L, "b");
    py::ssize_t n = a.shape(0);
    if (b.shape(0) != n) throw std::invalid_argument("mont_mul: batch sizes differ");
    Limbs out = new_out(n, L);
    const u64 *pa = a.data(), *pb = b.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, min_chunk_for(L, 1), [&](size_t s, size_t e) {
            Ctx ctx; Bn x, y, r;
            for (size_t i = s; i < e; ++i) {
                load(x, pa + i * L, L);
                if (pa + i * L == pb + i * L) { M.mul(r, x, x, ctx); }
                else { load(y, pb + i * L, L); M.mul(r, x, y, ctx); }
                store(r, po + i * L, L);
            }
        });
    }
    return out;
}

Limbs mod_mul(const Modulus &M, Limbs a, Limbs b, int threads) {
    int L = M.limbs;
    check2(a, L, "a"); check2(b, L, "b");
    py::ssize_t n = a.shape(0);
    Limbs out = new_out(n, L);
    const u64 *pa = a.data(), *pb = b.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, min_chunk_for(L, 2), [&](size_t s, size_t e) {
            Ctx ctx; Bn x, y, r;
            for (size_t i = s; i < e; ++i) {
                load(x, pa + i * L, L); load(y, pb + i * L, L);
                M.mul(r, x, y, ctx);       // a·b·R^-1
                M.mul(r, r, M.rr, ctx);    // ·R²·R^-1 = a·b
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
// extended gcd each.  Measured at a 4096-bit modulus (Paillier n² of a 2048-bit key), one thread:
// gmpy2.invert on the host ~33 µs per element plus two limb conversions, against ~3 × 4.9 µs here.
// An element sharing a factor with m makes the share's product non-invertible: std::domain_error.
Limbs mont_inverse(const Modulus &M, Limbs a, int threads) {
    int L = M.limbs;
    check2(a, L, "a");
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
            Ctx ctx; Bn x, acc, inv, t;
            load(acc, pa + s * L, L);
            store(acc, po + s * L, L);
            for (size_t i = s + 1; i < e; ++i) {           // prefix products, Montgomery form
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
                load(t, po + (i - 1) * L, L);               // P_(i-1)·R
                M.mul(acc, inv, t, ctx);                    // x_i^-1·R
                load(x, pa + i * L, L);
                M.mul(inv, inv, x, ctx);                    // P_(i-1)^-1·R
                store(acc, po + i * L, L);
            }
            store(inv, po + s * L, L);
        });
    }
    return out;
}

// exps: (N|1, Le).  mont=true: bases and results in Montgomery form.
Limbs exp_batch(const Modulus &M, Limbs base, Limbs exps, bool mont, int threads) {
    int L = M.limbs;
    check2(base, L, "base");
    py::ssize_t n = base.shape(0);
    if (exps.ndim() != 2 || (exps.shape(0) != 1 && exps.shape(0) != n))
        throw std::invalid_argument("exponents must be (1|N, Le)");
    int le = int(exps.shape(1));
    bool shared = exps.shape(0) == 1;
    Limbs out = new_out(n, L);
    const u64 *pb = base.data(), *pe = exps.data();
    u64 *po = out.mutable_data();
    {
        py::gil_scoped_release nogil;
        parallel_for(size_t(n), threads, 1, [&](size_t s, size_t e) {
            Ctx ctx; Bn x, r;
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

// Pippenger's bucket method for out[k] = prod_i base_i^e[k,i] (Montgomery form).  Work is split into
// (row, slice of bases) tasks so that even one row uses every thread; slices are multiplied at the end.
Limbs multi_exp(const Modulus &M, Limbs bases, py::array_t<u64, py::array::c_style | py::array::forcecast> exps,
                int threads) {
    int L = M.limbs;
    check2(bases, L, "bases");
    if (exps.ndim() != 3 || exps.shape(1) != bases.shape(0))
        throw std::invalid_argument("exponents must be (K, N, Le)");
    size_t K = exps.shape(0), N = exps.shape(1);
    int le = int(exps.shape(2));
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
                    double cost = double((ebits + cc - 1) / cc) * double((i1 - i0) + (size_t(2) << cc));
                    if (cost < best) { best = cost; c = cc; }
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
                        else { BN_copy(bucket[d], B[i]); used[d] = 1; }
                    }
                    bool run_set = false, tot_set = false;
                    for (size_t d = (size_t(1) << c) - 1; d >= 1; --d) {
                        if (used[d]) {
                            if (run_set) M.mul(running, running, bucket[d], ctx);
                            else { BN_copy(running, bucket[d]); run_set = true; }
                        }
                        if (run_set) {
                            if (tot_set) M.mul(total, total, running, ctx);
                            else { BN_copy(total, running); tot_set = true; }
                        }
                    }
                    if (tot_set) {
                        if (acc_set) M.mul(acc, acc, total, ctx);
                        else { BN_copy(acc, total); acc_set = true; }
                    }
                }
                if (acc_set) { BN_copy(partial[task], acc); has[task] = 1; }
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

Limbs prod_groups(const Modulus &M, Limbs a, py::array_t<int64_t, py::array::c_style | py::array::forcecast> groups,
                  int64_t G, int threads) {
    int L = M.limbs;
    check2(a, L, "a");
    size_t n = a.shape(0);
    if (size_t(groups.size()) != n) throw std::invalid_argument("one group id per row");
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
            Ctx ctx; Bn x;
            for (size_t t = s; t < e; ++t) {
                acc[t] = std::vector<Bn>(size_t(G));
                set[t].assign(size_t(G), 0);
                for (size_t i = t * step; i < std::min(n, (t + 1) * step); ++i) {
                    size_t g = size_t(pg[i]);
                    load(x, pa + i * L, L);
                    if (set[t][g]) M.mul(acc[t][g], acc[t][g], x, ctx);
                    else { BN_copy(acc[t][g], x); set[t][g] = 1; }
                }
            }
        });
        Ctx ctx; Bn r;
        for (int64_t g = 0; g < G; ++g) {
            bool any = false;
            for (size_t t = 0; t < T; ++t) {
                if (!set[t][g]) continue;
                if (any) M.mul(r, r, acc[t][g], ctx); else { BN_copy(r, acc[t][g]); any = true; }
            }
            store(any ? r.p : M.one_mont.p, po + g * L, L);
        }
    }
    return out;
}

// ---------------------------------------------------------------- Paillier
// Public key: n, n²; ciphertexts in Montgomery form mod n².  g = n + 1, so g^m = 1 + m·n mod n².
struct PaillierPublic {
    std::shared_ptr<Modulus> nsq;
    int n_limbs;
    Bn n;
    // fixed-base (DJN) table: tab[j·(2^w-1) + d-1] = hs^(d·2^(w·j)) in Montgomery form
    int w = 0, nwin = 0;
    std::vector<Bn> tab;

    PaillierPublic(std::shared_ptr<Modulus> nsq_, Limbs n_limbs_) : nsq(std::move(nsq_)), n_limbs(int(n_limbs_.shape(0))) {
        load(n, n_limbs_.data(), n_limbs);
    }

    // c̄ = (1 + m·n)·obf  where obf is r^n (Montgomery form) -- two MontMults:
    // MontMult(g^m, obf̄) = g^m·obf (plain), then ·R² to re-enter the domain.
    void finish(BIGNUM *out, const BIGNUM *m, const BIGNUM *obf_mont, BN_CTX *ctx, BIGNUM *tmp) const {
        ok(BN_mul(tmp, m, n, ctx), "mul");
        ok(BN_add_word(tmp, 1), "add_word");
        nsq->mul(out, tmp, obf_mont, ctx);
        nsq->mul(out, out, nsq->rr, ctx);
    }

    Limbs encrypt(Limbs m, Limbs r, int threads) {
        check2(m, n_limbs, "m"); check2(r, n_limbs, "r");
        size_t N = m.shape(0);
        int L2 = nsq->limbs;
        Limbs out = new_out(py::ssize_t(N), L2);
        const u64 *pm = m.data(), *pr = r.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(N, threads, 1, [&](size_t s, size_t e) {
                Ctx ctx; Bn x, rn, tmp, c;
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

    void set_fixed_base(Limbs hs_mont, int exp_bits, int window, int threads) {
        if (window < 1 || window > 16) throw std::invalid_argument("window must be in [1, 16]");
        w = window;
        nwin = (exp_bits + w - 1) / w;
        size_t per = (size_t(1) << w) - 1;
        std::vector<Bn> t(size_t(nwin) * per);
        {
            py::gil_scoped_release nogil;
            // the window bases hs^(2^(w·j)) by w squarings each (sequential, nwin·w ~ exp_bits
            // squarings), then the (2^w − 2) multiples of every window on the thread pool
            Ctx ctx;
            load(t[0], hs_mont.data(), nsq->limbs);
            for (int j = 1; j < nwin; ++j) {
                nsq->mul(t[j * per], t[(j - 1) * per], t[(j - 1) * per], ctx);
                for (int q = 1; q < w; ++q) nsq->mul(t[j * per], t[j * per], t[j * per], ctx);
            }
            parallel_for(size_t(nwin), threads, 1, [&](size_t s, size_t e) {
                Ctx c2;
                for (size_t j = s; j < e; ++j)
                    for (size_t d = 1; d < per; ++d)
                        nsq->mul(t[j * per + d], t[j * per + d - 1], t[j * per], c2);
            });
        }
        tab = std::move(t);
    }

    Limbs encrypt_fixed_base(Limbs m, Limbs a, int threads) {
        if (tab.empty()) throw std::logic_error("fixed-base table not set");
        check2(m, n_limbs, "m");
        size_t N = m.shape(0);
        if (a.ndim() != 2 || size_t(a.shape(0)) != N) throw std::invalid_argument("a: bad shape");
        int la = int(a.shape(1));
        int L2 = nsq->limbs;
        Limbs out = new_out(py::ssize_t(N), L2);
        const u64 *pm = m.data(), *pa = a.data();
        u64 *po = out.mutable_data();
        size_t per = (size_t(1) << w) - 1;
        {
            py::gil_scoped_release nogil;
            parallel_for(N, threads, 8, [&](size_t s, size_t e) {
                Ctx ctx; Bn x, acc, tmp, c;
                for (size_t i = s; i < e; ++i) {
                    Exponent ex{pa + i * la, la};
                    if (ex.bits() > nwin * w) throw std::invalid_argument("fixed-base exponent too long");
                    bool set = false;
                    for (int j = 0; j < nwin; ++j) {
                        u64 d = ex.digit(j * w, w);
                        if (!d) continue;
                        const Bn &t = tab[j * per + d - 1];
                        if (set) nsq->mul(acc, acc, t, ctx); else { BN_copy(acc, t); set = true; }
                    }
                    if (!set) BN_copy(acc, nsq->one_mont);
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
// m = m_q + q·((m_p − m_q)·q^-1 mod p).
struct PaillierPrivate {
    std::shared_ptr<PaillierPublic> pub;
    std::shared_ptr<Modulus> psq, qsq;
    int n_limbs;
    Bn p, q, pm1, qm1, hp, hq, qinv;

    PaillierPrivate(std::shared_ptr<PaillierPublic> pub_, std::shared_ptr<Modulus> psq_,
                    std::shared_ptr<Modulus> qsq_, Limbs p_, Limbs q_, Limbs hp_, Limbs hq_, Limbs qinv_)
        : pub(std::move(pub_)), psq(std::move(psq_)), qsq(std::move(qsq_)), n_limbs(pub->n_limbs) {
        load(p, p_.data(), int(p_.shape(0)));
        load(q, q_.data(), int(q_.shape(0)));
        load(hp, hp_.data(), int(hp_.shape(0)));
        load(hq, hq_.data(), int(hq_.shape(0)));
        load(qinv, qinv_.data(), int(qinv_.shape(0)));
        BN_copy(pm1, p); ok(BN_sub_word(pm1, 1), "sub");
        BN_copy(qm1, q); ok(BN_sub_word(qm1, 1), "sub");
    }

    void half(BIGNUM *out, const BIGNUM *c, const Modulus &M, const BIGNUM *pr, const BIGNUM *pr1,
              const BIGNUM *h, BN_CTX *ctx, BIGNUM *t) const {
        ok(BN_nnmod(t, c, M.m, ctx), "nnmod");
        ok(BN_mod_exp_mont_consttime(t, t, pr1, M.m, ctx, M.mont), "mod_exp_consttime");
        ok(BN_sub_word(t, 1), "sub_word");
        ok(BN_div(t, nullptr, t, pr, ctx), "div");      // L(x) = (x − 1) / p, exact
        ok(BN_mod_mul(out, t, h, pr, ctx), "mod_mul");
    }

    Limbs decrypt(Limbs c_mont, int threads) {
        const Modulus &NS = *pub->nsq;
        check2(c_mont, NS.limbs, "c");
        size_t N = c_mont.shape(0);
        Limbs out = new_out(py::ssize_t(N), n_limbs);
        const u64 *pc = c_mont.data();
        u64 *po = out.mutable_data();
        {
            py::gil_scoped_release nogil;
            parallel_for(N, threads, 1, [&](size_t s, size_t e) {
                Ctx ctx; Bn c, mp, mq, t, r;
                for (size_t i = s; i < e; ++i) {
                    load(c, pc + i * NS.limbs, NS.limbs);
                    ok(BN_from_montgomery(c, c, NS.mont, ctx), "from_montgomery");
                    half(mp, c, *psq, p, pm1, hp, ctx, t);
                    half(mq, c, *qsq, q, qm1, hq, ctx, t);
                    ok(BN_mod_sub(t, mp, mq, p, ctx), "mod_sub");
                    ok(BN_mod_mul(t, t, qinv, p, ctx), "mod_mul");
                    ok(BN_mul(r, t, q, ctx), "mul");
                    ok(BN_add(r, r, mq), "add");
                    store(r, po + i * n_limbs, n_limbs);
                }
            });
        }
        return out;
    }
};

}  // namespace

PYBIND11_MODULE(_native, mod) {
    mod.doc() = "UniFL native backend: batched Montgomery arithmetic and Paillier on OpenSSL's bn_mul_mont";
    g_direct = layout_self_check();
    mod.attr("direct_limb_transfer") = g_direct;
    mod.def("hardware_threads", &num_threads_default);
    py::class_<Modulus, std::shared_ptr<Modulus>>(mod, "Modulus").def(py::init<Limbs>());
    mod.def("mont_mul", &mont_mul);
    mod.def("mod_mul", &mod_mul);
    mod.def("mod_exp", [](const Modulus &M, Limbs b, Limbs e, int t) { return exp_batch(M, b, e, false, t); });
    mod.def("mont_exp", [](const Modulus &M, Limbs b, Limbs e, int t) { return exp_batch(M, b, e, true, t); });
    mod.def("mont_multi_exp", &multi_exp);
    mod.def("mont_prod_groups", &prod_groups);
    mod.def("mont_inverse", &mont_inverse);
    py::class_<PaillierPublic, std::shared_ptr<PaillierPublic>>(mod, "PaillierPublic")
        .def(py::init<std::shared_ptr<Modulus>, Limbs>())
        .def("encrypt", &PaillierPublic::encrypt)
        .def("set_fixed_base", &PaillierPublic::set_fixed_base)
        .def("encrypt_fixed_base", &PaillierPublic::encrypt_fixed_base);
    py::class_<PaillierPrivate, std::shared_ptr<PaillierPrivate>>(mod, "PaillierPrivate")
        .def(py::init<std::shared_ptr<PaillierPublic>, std::shared_ptr<Modulus>, std::shared_ptr<Modulus>,
                      Limbs, Limbs, Limbs, Limbs, Limbs>())
        .def("decrypt", &PaillierPrivate::decrypt);
}

// UniFL gpu backend: host harness.  Compiled by the ordinary C++ compiler (no nvcc, no GPU) from the
// same kernel bodies as the CUDA library (kernels.cuh) and exposed to Python as
// unifl.backends.gpu._gpu_host.  It runs the body of every instance index on the CPU, with the
// batches either element-major (the canonical host layout) or limb-major (what the CUDA runtime
// stages on the device), so index arithmetic, layout and carries are checked without a GPU.
// The cooperative bodies' PTX carry chains run through HostChain (bn_group.cuh): the carry flag per
// lane, and every chain checked to read only flags it set; their invariants (G::check) abort here.
// It is a verification tool, not a fast path: one plain C++ loop per limb, no assembly.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

// GCC cannot see that the local limb arrays (capacity LMAX) are written up to the runtime length L
// before they are read, and warns "may be used uninitialized" through the inlined bodies.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels_group.cuh"

namespace py = pybind11;
using unifl_gpu::Lay;
using unifl_gpu::u64;
using unifl_gpu::coop::u32;
using Limbs = py::array_t<u64, py::array::c_style | py::array::forcecast>;

namespace {

// Runs fn(i) for i in [0, n) on `threads` threads (GIL released by the caller).
template <class F>
void parallel_for(long long n, int threads, F fn) {
    threads = std::max(1, std::min<int>(threads, (int)std::max<long long>(1, n / 4)));
    if (threads == 1) {
        for (long long i = 0; i < n; ++i) fn(i);
        return;
    }
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([=]() {
            for (long long i = t; i < n; i += threads) fn(i);  // interleaved, like GPU lanes
        });
    }
    for (auto &th : pool) th.join();
}

// Runs a cooperative body for every instance: one HostLanes<TPI> group (all TPI lanes in lockstep)
// per call, with its own window table (the shared-memory slice a group has on the device).
template <int TPI, int LPT, class F>
void run_groups(long long n, int threads, F body, int window = unifl_gpu::coop::kMaxWindow) {
    const int words = unifl_gpu::coop::table_words<unifl_gpu::coop::HostLanes<TPI>, LPT>(window);
    parallel_for(n, threads, [&](long long i) {
        thread_local std::vector<u32> tab;
        if ((int)tab.size() < words) tab.resize(size_t(words));
        body(i, tab.data());
    });
}

#define HL unifl_gpu::coop::HostLanes<TPI>

// a compile-time int as a value (to hand a shape's TPI and LPT to a generic lambda)
template <int V>
using Int = std::integral_constant<int, V>;

// A batch in the layout under test: element-major views the numpy buffer in place, limb-major
// copies it transposed (as the CUDA runtime's staging does).
struct Batch {
    std::vector<u64> buf;
    u64 *ptr;
    Lay lay;
    long long n;
    int L;
    Batch(u64 *data, long long n_, int L_, bool soa) : n(n_), L(L_) {
        if (soa) {
            buf.resize(size_t(n) * L);
            for (long long i = 0; i < n; ++i)
                for (int j = 0; j < L; ++j) buf[size_t(j) * n + i] = data[i * L + j];
            ptr = buf.data();
            lay = Lay{1, n};
        } else {
            ptr = data;
            lay = Lay{L, 1};
        }
    }
    void copy_out(u64 *data) const {
        if (buf.empty()) return;
        for (long long i = 0; i < n; ++i)
            for (int j = 0; j < L; ++j) data[i * L + j] = buf[size_t(j) * n + i];
    }
};

// ---- argument checks.  Every array from Python is checked before a pointer into it is used:
// dtype uint64 (native byte order, never cast), C-contiguous, aligned, its dimensions against what
// the bodies read.  Key blobs are walked field by field with bounds: a truncated or inconsistent
// blob would make the bodies read past it.  std::invalid_argument reaches Python as ValueError.
constexpr long long kAny = -1;

std::string shape_of(const py::array &a) {
    std::string s = "(";
    for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

[[noreturn]] void bad_arg(const char *fn, const char *name, const std::string &what) {
    throw std::invalid_argument(std::string(fn) + ": argument '" + name + "' " + what);
}

Limbs arr(const py::array &a, const char *fn, const char *name, std::vector<long long> dims,
          bool one_ok = false) {
    if (!a.dtype().equal(py::dtype::of<u64>()))
        bad_arg(fn, name,
                "must be a uint64 array (native byte order), got dtype " +
                    std::string(py::str(a.dtype())));
    if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_))
        bad_arg(fn, name,
                "must be C-contiguous (np.ascontiguousarray), got a strided view of shape " +
                    shape_of(a));
    if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
        bad_arg(fn, name, "must be aligned");
    std::string want = "(";
    for (size_t d = 0; d < dims.size(); ++d)
        want += (d ? ", " : "") + std::string(d == 0 && one_ok ? "1|" : "") +
                (dims[d] == kAny ? std::string("*") : std::to_string(dims[d]));
    want += dims.size() == 1 ? ",)" : ")";
    if (a.ndim() != py::ssize_t(dims.size()))
        bad_arg(fn, name,
                "must have shape " + want + ", got " + std::to_string(a.ndim()) + "-D shape " +
                    shape_of(a));
    for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == kAny || a.shape(d) == dims[d] || (d == 0 && one_ok && a.shape(0) == 1))
            continue;
        bad_arg(fn, name, "must have shape " + want + ", got " + shape_of(a));
    }
    return Limbs::ensure(a);
}

// Walks a blob along its table in key_layout.h with bounds: every field the bodies use must lie
// inside the blob, every count must be in [1, MAX_BLOB_LIMBS], and nothing may follow the last
// field.  `fields` (when asked for) records each field's (name, offset, words), for the layout
// test against keys.py.
struct Extent {
    long long L;  // a context's limb count, as `name.L` in the tables' counts
};

struct BlobWalk {
    const u64 *b;
    long long len, pos = 0;
    const char *fn;
    std::vector<std::tuple<std::string, long long, long long>> *fields = nullptr;

    void note(const std::string &name, long long at, long long words) {
        if (fields) fields->emplace_back(name, at, words);
    }
    long long word(const std::string &name, bool count) {
        if (pos >= len) bad_arg(fn, "key", "is truncated before " + name);
        const u64 v = b[pos];
        if (count && (v < 1 || v > (u64)unifl_gpu::MAX_BLOB_LIMBS))
            bad_arg(fn, "key",
                    "has " + name + " = " + std::to_string(v) + " outside [1, " +
                        std::to_string(unifl_gpu::MAX_BLOB_LIMBS) + "]");
        note(name, pos, 1);
        ++pos;
        return (long long)v;
    }
    void skip(const std::string &name, long long words) {
        if (words < 0 || pos + words > len) bad_arg(fn, "key", "is truncated in " + name);
        note(name, pos, words);
        pos += words;
    }
    Extent ctx(const std::string &name);
    void end() {
        if (pos != len) bad_arg(fn, "key", "has " + std::to_string(len - pos) + " trailing words");
    }
};

#define UNIFL_WALK_CTX(name) \
    const Extent name = w.ctx(pre + #name); \
    (void)name;
#define UNIFL_WALK_WORD(name) \
    const long long name = w.word(pre + #name, true); \
    (void)name;
#define UNIFL_WALK_VALUE(name)        w.word(pre + #name, false);
#define UNIFL_WALK_LIMBS(name, count) w.skip(pre + #name, (long long)(count));
#define UNIFL_WALK(table) table(UNIFL_WALK_CTX, UNIFL_WALK_WORD, UNIFL_WALK_VALUE, UNIFL_WALK_LIMBS)

// a context inside a blob; its fields are named "<ctx>.<field>"
Extent BlobWalk::ctx(const std::string &name) {
    BlobWalk &w = *this;
    const std::string pre = name.empty() ? name : name + ".";
    UNIFL_WALK(UNIFL_LAYOUT_MOD_CTX)
    return Extent{L};
}

// The four blob kinds (kernel_backend.KIND_*): 0 a modulus context, 1 public, 2 private, 3 owner.
// Returns the walk's sizes: L for kind 0, else the counts and context sizes the checks below need.
struct Walked {
    long long L = 0, L2 = 0, Ln = 0, Lp = 0, Lq = 0, Lp2 = 0, Lq2 = 0, Kp = 0, Kq = 0, Kpq = 0;
};

Walked walk_blob(const u64 *blob, long long len, int kind, const char *fn,
                 std::vector<std::tuple<std::string, long long, long long>> *fields = nullptr) {
    BlobWalk w{blob, len, 0, fn, fields};
    const std::string pre;
    Walked r;
    if (kind == 0) {
        const Extent m = w.ctx("");
        r.L = m.L;
    } else if (kind == 1) {
        UNIFL_WALK(UNIFL_LAYOUT_PUB_KEY)
        r.L2 = n2.L;
        r.Ln = Ln;
    } else if (kind == 2) {
        UNIFL_WALK(UNIFL_LAYOUT_PRIV_KEY)
        r.L2 = L2;
        r.Ln = Ln;
        r.Lp = p.L;
        r.Lq = q.L;
        r.Lp2 = p2.L;
        r.Lq2 = q2.L;
        r.Kp = Kp;
        r.Kq = Kq;
        r.Kpq = Kpq;
    } else if (kind == 3) {
        UNIFL_WALK(UNIFL_LAYOUT_OWNER_KEY)
        r.L2 = n2.L;
        r.Ln = Ln;
        r.Lp = Lp;
        r.Lq = Lq;
        r.Lp2 = p2.L;
        r.Lq2 = q2.L;
    } else {
        bad_arg(fn, "kind",
                "must be 0 (modulus context), 1 (public), 2 (private) or 3 (owner), got " +
                    std::to_string(kind));
    }
    w.end();
    return r;
}

Walked walk(const py::array &k, const char *fn, int kind) {
    Limbs key = arr(k, fn, "key", {kAny});
    return walk_blob(key.data(), key.shape(0), kind, fn);
}

// A modulus context blob; returns its limb count.
int check_ctx_blob(const py::array &k, const char *fn) { return (int)walk(k, fn, 0).L; }

void check_pub_blob(const py::array &k, const char *fn) {
    const Walked s = walk(k, fn, 1);
    if (s.L2 != 2 * s.Ln && s.L2 != 2 * s.Ln - 1)
        bad_arg(fn, "key", "has n and n² of inconsistent sizes");
}

void check_priv_blob(const py::array &k, const char *fn) {
    const Walked s = walk(k, fn, 2);
    // the bodies' local arrays hold max(Lp2, Lq2, Ln) limbs, the exactness check 2·Ls of them, and
    // the wide reductions read K chunks of the ciphertext
    if ((s.Lp2 != 2 * s.Lp && s.Lp2 != 2 * s.Lp - 1) ||
        (s.Lq2 != 2 * s.Lq && s.Lq2 != 2 * s.Lq - 1) || s.Kp * s.Lp2 < s.L2 ||
        s.Kq * s.Lq2 < s.L2 || s.Kpq * s.Lp < s.Lq || (s.L2 != 2 * s.Ln && s.L2 != 2 * s.Ln - 1))
        bad_arg(fn, "key", "has inconsistent sizes");
}

void check_owner_blob(const py::array &k, const char *fn) {
    const Walked s = walk(k, fn, 3);
    // the body holds p² and q² numbers in arrays of their class and n²-size ones in twice that;
    // p² <= q² lets x_p stand as a residue mod q²; n² (< p²·q²) fits Lp2 + Lq2 limbs
    if ((s.L2 != 2 * s.Ln && s.L2 != 2 * s.Ln - 1) || s.Lp > s.Lp2 || s.Lq > s.Lq2 ||
        s.Lp2 > s.Lq2 || s.L2 > s.Lp2 + s.Lq2 || !unifl_gpu::owner_lmax((const u64 *)k.data()))
        bad_arg(fn, "key", "has inconsistent sizes");
}

// (name, offset, words) of every field of a blob as the C++ tables walk it (tests/test_gpu_key_layout.py
// compares it with keys.py's reading of the same file)
py::list blob_fields(py::array key_, int kind) {
    Limbs key = arr(key_, "blob_fields", "key", {kAny});
    std::vector<std::tuple<std::string, long long, long long>> fields;
    walk_blob(key.data(), key.shape(0), kind, "blob_fields", &fields);
    py::list out;
    for (const auto &f : fields)
        out.append(py::make_tuple(std::get<0>(f), std::get<1>(f), std::get<2>(f)));
    return out;
}

u64 *mut(Limbs &a) { return a.mutable_data(); }

// inputs are only read (the Batch views them in place in element-major mode)
u64 *ro(const Limbs &a) { return const_cast<u64 *>(a.data()); }

void need(bool ok, const char *what) {
    if (!ok) throw std::invalid_argument(what);
}

Limbs mul(py::array key_, py::array a_, py::array b_, int mode, bool soa, int threads, bool group) {
    const int L = check_ctx_blob(key_, "mul");
    Limbs key = arr(key_, "mul", "key", {kAny});
    const u64 *kb = key.data();
    Limbs a = arr(a_, "mul", "a", {kAny, L});
    const long long n = a.shape(0);
    Limbs b = arr(b_, "mul", "b", {n, L});
    Limbs out({(py::ssize_t)n, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        Batch A(ro(a), n, L, soa), B(ro(b), n, L, soa), O(mut(out), n, L, soa);
        const int lm = unifl_gpu::ctx_lmax(kb);
        need(group ? UNIFL_WITH_SHAPE(lm,
                                      run_groups<TPI, LPT>(n, threads,
                                                           [&](long long i, u32 *) {
                                                               unifl_gpu::coop::gbody_mul<HL, LPT>(
                                                                   i, kb, O.ptr, O.lay, A.ptr,
                                                                   A.lay, B.ptr, B.lay, mode);
                                                           }))
                   : UNIFL_WITH_LMAX(lm, parallel_for(n, threads,
                                                      [&](long long i) {
                                                          unifl_gpu::body_mul<LM>(
                                                              i, kb, O.ptr, O.lay, A.ptr, A.lay,
                                                              B.ptr, B.lay, mode);
                                                      })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

// the cooperative bodies' window (3, 4 or 5 bits) and shape (wide: twice the threads per instance)
void check_tuning(int window, bool wide, bool group, const char *fn) {
    if (window < unifl_gpu::coop::kMinWindow || window > unifl_gpu::coop::kMaxWindow)
        bad_arg(fn, "window", "must be 3, 4 or 5, got " + std::to_string(window));
    if (wide && !group) bad_arg(fn, "wide", "is a shape of the cooperative (group) bodies only");
}

Limbs power(py::array key_, py::array base_, py::array exps_, int mode, bool soa, int threads,
            bool group, int window, bool wide, bool converged) {
    check_tuning(window, wide, group, "exp");
    if (converged && !group)
        bad_arg("exp", "converged", "is a policy of the cooperative (group) bodies only");
    const int L = check_ctx_blob(key_, "exp");
    Limbs key = arr(key_, "exp", "key", {kAny});
    const u64 *kb = key.data();
    Limbs base = arr(base_, "exp", "base", {kAny, L});
    const long long n = base.shape(0);
    Limbs exps = arr(exps_, "exp", "exps", {n, kAny}, true);
    const int Le = (int)exps.shape(1);
    need(Le >= 1, "exp: exps need at least one limb");
    const int shared = exps.shape(0) == 1 && n != 1;
    Limbs out({(py::ssize_t)n, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        Batch X(ro(base), n, L, soa), O(mut(out), n, L, soa);
        const u64 *e = exps.data();
        const int lm = unifl_gpu::ctx_lmax(kb);
        // converged: the device's converged-warp path (every group runs the longest digit schedule
        // of its warp and multiplies at every digit), with the whole call standing in for a warp
        if (converged) {
            int most = 0;
            for (long long i = 0; i < (shared ? 1 : n); ++i)
                most = std::max(most, unifl_gpu::coop::exp_digits(e + i * Le, Le, window));
            unifl_gpu::coop::host_warp_digits() = most;
        }
        auto body = [&](auto tpi, auto lpt) {
            constexpr int TPI = decltype(tpi)::value, LPT = decltype(lpt)::value;
            run_groups<TPI, LPT>(
                n, threads,
                [&](long long i, u32 *tab) {
                    if (converged)
                        unifl_gpu::coop::gbody_exp<unifl_gpu::coop::HostLanes<TPI, true>, LPT>(
                            i, kb, tab, window, O.ptr, O.lay, X.ptr, X.lay, e, Le, shared, mode);
                    else
                        unifl_gpu::coop::gbody_exp<HL, LPT>(i, kb, tab, window, O.ptr, O.lay, X.ptr,
                                                            X.lay, e, Le, shared, mode);
                },
                window);
        };
        need(wide    ? UNIFL_WITH_WIDE_SHAPE(lm, body(Int<TPI>(), Int<LPT>()))
             : group ? UNIFL_WITH_SHAPE(lm, body(Int<TPI>(), Int<LPT>()))
                     : UNIFL_WITH_LMAX(lm, parallel_for(n, threads,
                                                        [&](long long i) {
                                                            unifl_gpu::body_exp<LM>(
                                                                i, kb, O.ptr, O.lay, X.ptr, X.lay,
                                                                e, Le, shared, mode);
                                                        })),
             wide ? "no wide shape for this modulus size" : "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs multi_exp(py::array key_, py::array bases_, py::array exps_, bool soa, int threads,
                bool group, long long chunk, int window) {
    check_tuning(window, false, group, "multi_exp");
    const int L = check_ctx_blob(key_, "multi_exp");
    Limbs key = arr(key_, "multi_exp", "key", {kAny});
    const u64 *kb = key.data();
    Limbs bases = arr(bases_, "multi_exp", "bases", {kAny, L});
    const long long N = bases.shape(0);
    Limbs exps = arr(exps_, "multi_exp", "exps", {kAny, N, kAny});
    const long long K = exps.shape(0);
    const int Le = (int)exps.shape(2);
    need(Le >= 1, "multi_exp: exps need at least one limb");
    need(N > 0, "multi-exp needs at least one base");
    Limbs out({(py::ssize_t)K, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        if (group) {  // one launch: parts of `chunk` columns, the last part of a row reduces it
            need(chunk >= 1, "multi_exp: chunk must be >= 1");
            const long long P = (N + chunk - 1) / chunk;
            std::vector<u64> partials(size_t(K * P) * L);
            std::vector<unsigned int> counters(size_t(K), 0u);
            Batch B(ro(bases), N, L, soa), O(mut(out), K, L, soa);
            const u64 *e = exps.data();
            need(UNIFL_WITH_SHAPE(unifl_gpu::ctx_lmax(kb),
                                  run_groups<TPI, LPT>(
                                      K * P, threads,
                                      [&](long long i, u32 *tab) {
                                          unifl_gpu::coop::gbody_multi_exp<HL, LPT>(
                                              i, kb, tab, window, O.ptr, O.lay, B.ptr, B.lay, e, Le,
                                              N, P, chunk, partials.data(), counters.data());
                                      },
                                      window)),
                 "modulus wider than 8192 bits");
            O.copy_out(mut(out));
            return out;
        }
        std::vector<u64> scratch(size_t(K * N) * L);
        Batch B(ro(bases), N, L, soa);
        Batch S(scratch.data(), K * N, L, soa);
        const u64 *e = exps.data();
        need(UNIFL_WITH_LMAX(unifl_gpu::ctx_lmax(kb),
                             {
                                 parallel_for(K * N, threads, [&](long long i) {
                                     unifl_gpu::body_multi_exp_powers<LM>(i, kb, S.ptr, S.lay,
                                                                          B.ptr, B.lay, e, Le, N);
                                 });
                                 for (long long cnt = N; cnt > 1; cnt = (cnt + 1) / 2) {
                                     const long long pairs = cnt - (cnt + 1) / 2;
                                     parallel_for(K * pairs, threads, [&](long long i) {
                                         unifl_gpu::body_prod_round<LM>(i, kb, S.ptr, S.lay, N,
                                                                        cnt);
                                     });
                                 }
                             }),
             "modulus wider than 8192 bits");
        S.copy_out(scratch.data());
        u64 *o = mut(out);
        for (long long kk = 0; kk < K; ++kk)
            std::copy(scratch.begin() + size_t(kk * N) * L,
                      scratch.begin() + size_t(kk * N + 1) * L, o + kk * L);
    }
    return out;
}

Limbs paillier_encrypt(py::array pub_, py::array m_, py::array r_, bool soa, int threads,
                       bool group, int window, bool wide) {
    check_tuning(window, wide, group, "paillier_encrypt");
    check_pub_blob(pub_, "paillier_encrypt");
    Limbs pub = arr(pub_, "paillier_encrypt", "key", {kAny});
    const u64 *kb = pub.data();
    const auto k = unifl_gpu::parse_pub(kb);
    Limbs m = arr(m_, "paillier_encrypt", "m", {kAny, k.Ln});
    const long long n = m.shape(0);
    Limbs r = arr(r_, "paillier_encrypt", "r", {n, k.Ln});
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.n2.L});
    {
        py::gil_scoped_release nogil;
        Batch M(ro(m), n, k.Ln, soa), R(ro(r), n, k.Ln, soa), O(mut(out), n, k.n2.L, soa);
        const int lm = unifl_gpu::pub_lmax(kb);
        auto body = [&](auto tpi, auto lpt) {
            constexpr int TPI = decltype(tpi)::value, LPT = decltype(lpt)::value;
            run_groups<TPI, LPT>(
                n, threads,
                [&](long long i, u32 *tab) {
                    unifl_gpu::coop::gbody_paillier_encrypt<HL, LPT>(
                        i, kb, tab, window, O.ptr, O.lay, M.ptr, M.lay, R.ptr, R.lay);
                },
                window);
        };
        need(wide    ? UNIFL_WITH_WIDE_SHAPE(lm, body(Int<TPI>(), Int<LPT>()))
             : group ? UNIFL_WITH_SHAPE(lm, body(Int<TPI>(), Int<LPT>()))
                     : UNIFL_WITH_LMAX(lm, parallel_for(n, threads,
                                                        [&](long long i) {
                                                            unifl_gpu::body_paillier_encrypt<LM>(
                                                                i, kb, O.ptr, O.lay, M.ptr, M.lay,
                                                                R.ptr, R.lay);
                                                        })),
             wide ? "no wide shape for this modulus size" : "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs paillier_encrypt_owner(py::array owner_, py::array m_, py::array yp_, py::array yq_, bool soa,
                             int threads, bool group, int window) {
    const char *fn = "paillier_encrypt_owner";
    check_tuning(window, false, group, fn);
    check_owner_blob(owner_, fn);
    Limbs owner = arr(owner_, fn, "key", {kAny});
    const u64 *kb = owner.data();
    const auto k = unifl_gpu::parse_owner(kb);
    Limbs m = arr(m_, fn, "m", {kAny, k.Ln});
    const long long n = m.shape(0);
    Limbs yp = arr(yp_, fn, "yp", {n, k.Lp});
    Limbs yq = arr(yq_, fn, "yq", {n, k.Lq});
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.n2.L});
    {
        py::gil_scoped_release nogil;
        Batch M(ro(m), n, k.Ln, soa), P(ro(yp), n, k.Lp, soa), Q(ro(yq), n, k.Lq, soa),
            O(mut(out), n, k.n2.L, soa);
        need(group
                 ? UNIFL_WITH_SHAPE(unifl_gpu::coop::owner_group_lmax(kb),
                                    run_groups<TPI, LPT>(
                                        n, threads,
                                        [&](long long i, u32 *tab) {
                                            unifl_gpu::coop::gbody_paillier_encrypt_owner<HL, LPT>(
                                                i, kb, tab, window, O.ptr, O.lay, M.ptr, M.lay,
                                                P.ptr, P.lay, Q.ptr, Q.lay);
                                        },
                                        window))
                 : UNIFL_WITH_LMAX(unifl_gpu::owner_lmax(kb),
                                   parallel_for(n, threads,
                                                [&](long long i) {
                                                    unifl_gpu::body_paillier_encrypt_owner<LM>(
                                                        i, kb, O.ptr, O.lay, M.ptr, M.lay, P.ptr,
                                                        P.lay, Q.ptr, Q.lay);
                                                })),
             "key outside the instantiated size classes");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs paillier_decrypt(py::array priv_, py::array c_, bool soa, int threads, bool group,
                       int window) {
    check_tuning(window, false, group, "paillier_decrypt");
    check_priv_blob(priv_, "paillier_decrypt");
    Limbs priv = arr(priv_, "paillier_decrypt", "key", {kAny});
    const u64 *kb = priv.data();
    const auto k = unifl_gpu::parse_priv(kb);
    Limbs c = arr(c_, "paillier_decrypt", "c", {kAny, k.L2});
    const long long n = c.shape(0);
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.Ln});
    {
        py::gil_scoped_release nogil;
        Batch C(ro(c), n, k.L2, soa), O(mut(out), n, k.Ln, soa);
        need(group ? UNIFL_WITH_SHAPE(unifl_gpu::coop::priv_group_lmax(kb),
                                      run_groups<TPI, LPT>(
                                          n, threads,
                                          [&](long long i, u32 *tab) {
                                              unifl_gpu::coop::gbody_paillier_decrypt<HL, LPT>(
                                                  i, kb, tab, window, O.ptr, O.lay, C.ptr, C.lay);
                                          },
                                          window))
                   : UNIFL_WITH_LMAX(unifl_gpu::priv_lmax(kb),
                                     parallel_for(n, threads,
                                                  [&](long long i) {
                                                      unifl_gpu::body_paillier_decrypt<LM>(
                                                          i, kb, O.ptr, O.lay, C.ptr, C.lay);
                                                  })),
             "key outside the instantiated size classes");
        O.copy_out(mut(out));
    }
    return out;
}

// ---- ops that only the cooperative kernels have
// plan: (chunks, 5) int64 rows [group, begin, end, first chunk of the group, chunks of the group]
// over `order` (the input rows group by group); see gbody_prod_groups.
Limbs prod_groups(py::array key_, py::array a_, py::array order_, py::array plan_,
                  long long num_groups, bool soa, int threads) {
    const char *fn = "prod_groups";
    const int L = check_ctx_blob(key_, fn);
    Limbs key = arr(key_, fn, "key", {kAny});
    const u64 *kb = key.data();
    Limbs a = arr(a_, fn, "a", {kAny, L});
    const long long n = a.shape(0);
    using I64 = py::array_t<long long, py::array::c_style>;
    if (!order_.dtype().equal(py::dtype::of<long long>()) ||
        !plan_.dtype().equal(py::dtype::of<long long>()))
        bad_arg(fn, "order/plan", "must be int64 arrays");
    I64 order = I64::ensure(order_), plan = I64::ensure(plan_);
    need(order.ndim() == 1 && order.shape(0) == n, "prod_groups: order must list every row once");
    need(plan.ndim() == 2 && plan.shape(1) == 5, "prod_groups: plan must have shape (chunks, 5)");
    need(num_groups >= 1, "prod_groups: need at least one group");
    const long long chunks = plan.shape(0);
    const long long *o = order.data(), *pl = plan.data();
    std::vector<char> seen(size_t(n), 0);
    for (long long j = 0; j < n; ++j) {
        need(o[j] >= 0 && o[j] < n && !seen[size_t(o[j])],
             "prod_groups: order must be a permutation of the rows");
        seen[size_t(o[j])] = 1;
    }
    for (long long c = 0; c < chunks; ++c) {
        const long long *r = pl + c * 5;
        need(r[0] >= 0 && r[0] < num_groups && 0 <= r[1] && r[1] <= r[2] && r[2] <= n &&
                 r[4] >= 1 && r[3] >= 0 && r[3] + r[4] <= chunks && c >= r[3] && c < r[3] + r[4],
             "prod_groups: inconsistent plan row");
    }
    Limbs out({(py::ssize_t)num_groups, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        std::vector<u64> partials(size_t(chunks) * L);
        std::vector<unsigned int> counters(size_t(num_groups), 0u);
        Batch A(ro(a), n, L, soa), O(mut(out), num_groups, L, soa);
        need(UNIFL_WITH_SHAPE(unifl_gpu::ctx_lmax(kb),
                              run_groups<TPI, LPT>(chunks, threads,
                                                   [&](long long i, u32 *) {
                                                       unifl_gpu::coop::gbody_prod_groups<HL, LPT>(
                                                           i, kb, O.ptr, O.lay, A.ptr, A.lay, o, pl,
                                                           partials.data(), counters.data());
                                                   })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

// (x^-1·R rows, count of chunks with a non-invertible row)
py::tuple inverse(py::array key_, py::array a_, long long chunk, bool soa, int threads) {
    const char *fn = "inverse";
    const int L = check_ctx_blob(key_, fn);
    Limbs key = arr(key_, fn, "key", {kAny});
    const u64 *kb = key.data();
    Limbs a = arr(a_, fn, "a", {kAny, L});
    const long long n = a.shape(0);
    need(chunk >= 1, "inverse: chunk must be >= 1");
    need(n >= 1, "inverse: need at least one row");
    Limbs out({(py::ssize_t)n, (py::ssize_t)L});
    unsigned int bad = 0;
    {
        py::gil_scoped_release nogil;
        Batch A(ro(a), n, L, soa), O(mut(out), n, L, soa);
        need(UNIFL_WITH_SHAPE(unifl_gpu::ctx_lmax(kb),
                              run_groups<TPI, LPT>((n + chunk - 1) / chunk, threads,
                                                   [&](long long i, u32 *) {
                                                       unifl_gpu::coop::gbody_inverse<HL, LPT>(
                                                           i, kb, O.ptr, O.lay, A.ptr, A.lay, n,
                                                           chunk, &bad);
                                                   })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return py::make_tuple(out, bad);
}

// a comb table: (nwin, 2^w − 1, L) uint64
Limbs table_arr(const py::array &t, const char *fn, const char *name, int w, int L) {
    need(w >= 1 && w <= 16, "fixed base: window must be in [1, 16]");
    return arr(t, fn, name, {kAny, (1LL << w) - 1, L});
}

// the exponents must fit the bits the table covers (nwin·w): a longer one would be cut silently
void check_exponents(const Limbs &a, long long covered, const char *fn, const char *name = "a") {
    const long long n = a.shape(0), La = a.shape(1);
    for (long long i = 0; i < n; ++i)
        for (long long l = 0; l < La; ++l) {
            const long long lo = 64 * l;
            const u64 keep = covered >= lo + 64 ? ~0ull
                             : covered <= lo    ? 0ull
                                                : ((1ull << (covered - lo)) - 1);
            if (a.data()[i * La + l] & ~keep)
                bad_arg(fn, name,
                        "row " + std::to_string(i) + ": a fixed-base exponent longer than the " +
                            std::to_string(covered) + " bits the comb table covers");
        }
}

Limbs fixed_base(py::array pub_, py::array table_, int w, py::array m_, py::array a_, bool soa,
                 int threads) {
    const char *fn = "fixed_base";
    check_pub_blob(pub_, fn);
    Limbs pub = arr(pub_, fn, "key", {kAny});
    const u64 *kb = pub.data();
    const auto k = unifl_gpu::parse_pub(kb);
    Limbs table = table_arr(table_, fn, "table", w, k.n2.L);
    const int nwin = (int)table.shape(0);
    Limbs m = arr(m_, fn, "m", {kAny, k.Ln});
    const long long n = m.shape(0);
    Limbs a = arr(a_, fn, "a", {n, kAny});
    const int La = (int)a.shape(1);
    check_exponents(a, (long long)nwin * w, fn);
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.n2.L});
    {
        py::gil_scoped_release nogil;
        Batch M(ro(m), n, k.Ln, soa), O(mut(out), n, k.n2.L, soa);
        const u64 *t = table.data(), *e = a.data();
        need(UNIFL_WITH_SHAPE(unifl_gpu::pub_lmax(kb),
                              run_groups<TPI, LPT>(n, threads,
                                                   [&](long long i, u32 *) {
                                                       unifl_gpu::coop::gbody_fixed_base<HL, LPT>(
                                                           i, kb, t, w, nwin, O.ptr, O.lay, M.ptr,
                                                           M.lay, e, La);
                                                   })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs owner_fixed_base(py::array owner_, py::array tp_, py::array tq_, int w, py::array m_,
                       py::array ap_, py::array aq_, bool soa, int threads) {
    const char *fn = "owner_fixed_base";
    check_owner_blob(owner_, fn);
    Limbs owner = arr(owner_, fn, "key", {kAny});
    const u64 *kb = owner.data();
    const auto k = unifl_gpu::parse_owner(kb);
    Limbs tp = table_arr(tp_, fn, "tp", w, k.p2.L);
    const int nwin = (int)tp.shape(0);
    Limbs tq = arr(tq_, fn, "tq", {nwin, (1LL << w) - 1, k.q2.L});
    Limbs m = arr(m_, fn, "m", {kAny, k.Ln});
    const long long n = m.shape(0);
    Limbs ap = arr(ap_, fn, "ap", {n, kAny});
    const int La = (int)ap.shape(1);
    Limbs aq = arr(aq_, fn, "aq", {n, La});
    check_exponents(ap, (long long)nwin * w, fn, "ap");
    check_exponents(aq, (long long)nwin * w, fn, "aq");
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.n2.L});
    {
        py::gil_scoped_release nogil;
        Batch M(ro(m), n, k.Ln, soa), O(mut(out), n, k.n2.L, soa);
        const u64 *p = tp.data(), *q = tq.data(), *ep = ap.data(), *eq = aq.data();
        need(UNIFL_WITH_SHAPE(
                 unifl_gpu::coop::owner_group_lmax(kb),
                 run_groups<TPI, LPT>(n, threads,
                                      [&](long long i, u32 *) {
                                          unifl_gpu::coop::gbody_owner_fixed_base<HL, LPT>(
                                              i, kb, p, q, w, nwin, O.ptr, O.lay, M.ptr, M.lay, ep,
                                              eq, La);
                                      })),
             "key outside the instantiated size classes");
        O.copy_out(mut(out));
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_gpu_host, mod) {
    mod.doc() = "UniFL gpu kernel bodies run on the host CPU (verification harness, no GPU)";
    mod.def("lmax_class", [](int L) { return unifl_gpu::lmax_class(L); });
    mod.def("blob_fields", &blob_fields, py::arg("key"), py::arg("kind"));
    // group=True: the cooperative bodies (kernels_group.cuh), lanes emulated in lockstep
    mod.def("mul", &mul, py::arg("key"), py::arg("a"), py::arg("b"), py::arg("mode"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false);
    // window: the cooperative bodies' exponent window (3, 4, 5); wide: their wide shape
    // converged: the converged-warp policy's exponent schedule (the call standing in for a warp)
    mod.def("exp", &power, py::arg("key"), py::arg("base"), py::arg("exps"), py::arg("mode"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false, py::arg("window") = 4,
            py::arg("wide") = false, py::arg("converged") = false);
    mod.def("multi_exp", &multi_exp, py::arg("key"), py::arg("bases"), py::arg("exps"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false, py::arg("chunk") = 1,
            py::arg("window") = 4);
    mod.def("paillier_encrypt", &paillier_encrypt, py::arg("pub"), py::arg("m"), py::arg("r"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false, py::arg("window") = 4,
            py::arg("wide") = false);
    mod.def("paillier_encrypt_owner", &paillier_encrypt_owner, py::arg("owner"), py::arg("m"),
            py::arg("yp"), py::arg("yq"), py::arg("soa"), py::arg("threads"),
            py::arg("group") = false, py::arg("window") = 4);
    mod.def("paillier_decrypt", &paillier_decrypt, py::arg("priv"), py::arg("c"), py::arg("soa"),
            py::arg("threads"), py::arg("group") = false, py::arg("window") = 4);
    mod.def("prod_groups", &prod_groups, py::arg("key"), py::arg("a"), py::arg("order"),
            py::arg("plan"), py::arg("num_groups"), py::arg("soa"), py::arg("threads"));
    mod.def("inverse", &inverse, py::arg("key"), py::arg("a"), py::arg("chunk"), py::arg("soa"),
            py::arg("threads"));
    mod.def("fixed_base", &fixed_base, py::arg("pub"), py::arg("table"), py::arg("w"), py::arg("m"),
            py::arg("a"), py::arg("soa"), py::arg("threads"));
    mod.def("owner_fixed_base", &owner_fixed_base, py::arg("owner"), py::arg("tp"), py::arg("tq"),
            py::arg("w"), py::arg("m"), py::arg("ap"), py::arg("aq"), py::arg("soa"),
            py::arg("threads"));
}

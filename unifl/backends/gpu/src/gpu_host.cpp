// UniFL gpu backend: host harness.  Compiled by the ordinary C++ compiler (no nvcc, no GPU) from the
// same kernel bodies as the CUDA library (kernels.cuh) and exposed to Python as
// unifl.backends.gpu._gpu_host.  It runs the body of every instance index on the CPU, with the
// batches either element-major (the canonical host layout) or limb-major (what the CUDA runtime
// stages on the device), so index arithmetic, layout and carries are checked without a GPU.
// It is a verification tool, not a fast path: one plain C++ loop per limb, no assembly.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>
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
void run_groups(long long n, int threads, F body) {
    const int words = unifl_gpu::coop::table_words<unifl_gpu::coop::HostLanes<TPI>, LPT>();
    parallel_for(n, threads, [&](long long i) {
        thread_local std::vector<u32> tab;
        if ((int)tab.size() < words) tab.resize(size_t(words));
        body(i, tab.data());
    });
}

#define HL unifl_gpu::coop::HostLanes<TPI>

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

Limbs arr(const py::array &a, const char *fn, const char *name, std::vector<long long> dims, bool one_ok = false) {
    if (!a.dtype().equal(py::dtype::of<u64>()))
        bad_arg(fn, name, "must be a uint64 array (native byte order), got dtype " + std::string(py::str(a.dtype())));
    if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_))
        bad_arg(fn, name, "must be C-contiguous (np.ascontiguousarray), got a strided view of shape " + shape_of(a));
    if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_)) bad_arg(fn, name, "must be aligned");
    std::string want = "(";
    for (size_t d = 0; d < dims.size(); ++d)
        want += (d ? ", " : "") + std::string(d == 0 && one_ok ? "1|" : "") +
                (dims[d] == kAny ? std::string("*") : std::to_string(dims[d]));
    want += dims.size() == 1 ? ",)" : ")";
    if (a.ndim() != py::ssize_t(dims.size()))
        bad_arg(fn, name, "must have shape " + want + ", got " + std::to_string(a.ndim()) + "-D shape " + shape_of(a));
    for (size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] == kAny || a.shape(d) == dims[d] || (d == 0 && one_ok && a.shape(0) == 1)) continue;
        bad_arg(fn, name, "must have shape " + want + ", got " + shape_of(a));
    }
    return Limbs::ensure(a);
}

// Reads a blob's header words with bounds; every field the bodies use must lie inside the blob.
struct BlobWalk {
    const u64 *b;
    long long len, pos = 0;
    const char *fn;
    u64 word(long long lo, long long hi, const char *what) {
        if (pos >= len) bad_arg(fn, "key", std::string("is truncated before ") + what);
        const u64 v = b[pos++];
        if ((long long)v < lo || (long long)v > hi)
            bad_arg(fn, "key", std::string("has ") + what + " = " + std::to_string(v) + " outside [" +
                                   std::to_string(lo) + ", " + std::to_string(hi) + "]");
        return v;
    }
    void skip(long long words, const char *what) {
        if (words < 0 || pos + words > len) bad_arg(fn, "key", std::string("is truncated in ") + what);
        pos += words;
    }
    int ctx(const char *what) {  // [n0inv, L, m, R mod m, R² mod m]
        skip(1, what);
        const int L = (int)word(1, unifl_gpu::MAX_BLOB_LIMBS, what);
        skip(3LL * L, what);
        return L;
    }
    void end() {
        if (pos != len) bad_arg(fn, "key", "has " + std::to_string(len - pos) + " trailing words");
    }
};

long long key_len(const py::array &k, const char *fn) {
    Limbs key = arr(k, fn, "key", {kAny});
    return key.shape(0);
}

// A modulus context blob; returns its limb count.
int check_ctx_blob(const py::array &k, const char *fn) {
    BlobWalk w{(const u64 *)k.data(), key_len(k, fn), 0, fn};
    const int L = w.ctx("the modulus context");
    w.end();
    return L;
}

void check_pub_blob(const py::array &k, const char *fn) {
    BlobWalk w{(const u64 *)k.data(), key_len(k, fn), 0, fn};
    const int L2 = w.ctx("n²'s context");
    const int Ln = (int)w.word(1, unifl_gpu::MAX_BLOB_LIMBS, "Ln");
    w.skip(Ln, "n");
    w.end();
    if (L2 != 2 * Ln && L2 != 2 * Ln - 1) bad_arg(fn, "key", "has n and n² of inconsistent sizes");
}

void check_priv_blob(const py::array &k, const char *fn) {
    BlobWalk w{(const u64 *)k.data(), key_len(k, fn), 0, fn};
    const long long M = unifl_gpu::MAX_BLOB_LIMBS;
    const int Lp2 = w.ctx("p²'s context"), Lq2 = w.ctx("q²'s context");
    const int Lp = w.ctx("p's context"), Lq = w.ctx("q's context");
    const int L2 = (int)w.word(1, M, "L2");
    const int Kp = (int)w.word(1, M, "Kp");
    w.skip((long long)Kp * Lp2, "Wp");
    const int Kq = (int)w.word(1, M, "Kq");
    w.skip((long long)Kq * Lq2, "Wq");
    w.skip((long long)w.word(1, M, "Lep"), "p − 1");
    w.skip((long long)w.word(1, M, "Leq"), "q − 1");
    w.skip(2LL * (Lp + Lq), "the division and h constants");
    const int Kpq = (int)w.word(1, M, "Kpq");
    w.skip((long long)Kpq * Lp, "Wpq");
    w.skip((long long)Lp + Lq, "q^-1 mod p and q");
    const int Ln = (int)w.word(1, M, "Ln");
    w.end();
    // the bodies' local arrays hold max(Lp2, Lq2, Ln) limbs, the exactness check 2·Ls of them, and
    // the wide reductions read K chunks of the ciphertext
    if ((Lp2 != 2 * Lp && Lp2 != 2 * Lp - 1) || (Lq2 != 2 * Lq && Lq2 != 2 * Lq - 1) ||
        Kp * Lp2 < L2 || Kq * Lq2 < L2 || Kpq * Lp < Lq || (L2 != 2 * Ln && L2 != 2 * Ln - 1))
        bad_arg(fn, "key", "has inconsistent sizes");
}

// The key-owner blob: [ctx n²][ctx p²][ctx q²][Ln, n][Lp, p][Lq, q][(p²)^-1·Rq2 (Lq2)][R³ (L2)].
void check_owner_blob(const py::array &k, const char *fn) {
    BlobWalk w{(const u64 *)k.data(), key_len(k, fn), 0, fn};
    const long long M = unifl_gpu::MAX_BLOB_LIMBS;
    const int L2 = w.ctx("n²'s context"), Lp2 = w.ctx("p²'s context"), Lq2 = w.ctx("q²'s context");
    const int Ln = (int)w.word(1, M, "Ln");
    w.skip(Ln, "n");
    const int Lp = (int)w.word(1, M, "Lp");
    w.skip(Lp, "p");
    const int Lq = (int)w.word(1, M, "Lq");
    w.skip(Lq, "q");
    w.skip(Lq2, "(p²)^-1 mod q²");
    w.skip(L2, "R³ mod n²");
    w.end();
    // the body holds p² and q² numbers in arrays of their class and n²-size ones in twice that;
    // p² <= q² lets x_p stand as a residue mod q²; n² (< p²·q²) fits Lp2 + Lq2 limbs
    if ((L2 != 2 * Ln && L2 != 2 * Ln - 1) || Lp > Lp2 || Lq > Lq2 || Lp2 > Lq2 || L2 > Lp2 + Lq2 ||
        !unifl_gpu::owner_lmax((const u64 *)k.data()))
        bad_arg(fn, "key", "has inconsistent sizes");
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
        need(group ? UNIFL_WITH_SHAPE(lm, run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *) {
                         unifl_gpu::coop::gbody_mul<HL, LPT>(i, kb, O.ptr, O.lay, A.ptr, A.lay, B.ptr, B.lay, mode);
                     }))
                   : UNIFL_WITH_LMAX(lm, parallel_for(n, threads, [&](long long i) {
                         unifl_gpu::body_mul<LM>(i, kb, O.ptr, O.lay, A.ptr, A.lay, B.ptr, B.lay, mode);
                     })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs power(py::array key_, py::array base_, py::array exps_, int mode, bool soa, int threads, bool group) {
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
        need(group ? UNIFL_WITH_SHAPE(lm, run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *tab) {
                         unifl_gpu::coop::gbody_exp<HL, LPT>(i, kb, tab, O.ptr, O.lay, X.ptr, X.lay, e, Le, shared,
                                                             mode);
                     }))
                   : UNIFL_WITH_LMAX(lm, parallel_for(n, threads, [&](long long i) {
                         unifl_gpu::body_exp<LM>(i, kb, O.ptr, O.lay, X.ptr, X.lay, e, Le, shared, mode);
                     })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs multi_exp(py::array key_, py::array bases_, py::array exps_, bool soa, int threads, bool group,
                long long chunk) {
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
            need(UNIFL_WITH_SHAPE(unifl_gpu::ctx_lmax(kb), run_groups<TPI, LPT>(K * P, threads, [&](long long i, u32 *tab) {
                     unifl_gpu::coop::gbody_multi_exp<HL, LPT>(i, kb, tab, O.ptr, O.lay, B.ptr, B.lay, e, Le, N, P,
                                                               chunk, partials.data(), counters.data());
                 })),
                 "modulus wider than 8192 bits");
            O.copy_out(mut(out));
            return out;
        }
        std::vector<u64> scratch(size_t(K * N) * L);
        Batch B(ro(bases), N, L, soa);
        Batch S(scratch.data(), K * N, L, soa);
        const u64 *e = exps.data();
        need(UNIFL_WITH_LMAX(unifl_gpu::ctx_lmax(kb), {
                 parallel_for(K * N, threads, [&](long long i) {
                     unifl_gpu::body_multi_exp_powers<LM>(i, kb, S.ptr, S.lay, B.ptr, B.lay, e, Le, N);
                 });
                 for (long long cnt = N; cnt > 1; cnt = (cnt + 1) / 2) {
                     const long long pairs = cnt - (cnt + 1) / 2;
                     parallel_for(K * pairs, threads, [&](long long i) {
                         unifl_gpu::body_prod_round<LM>(i, kb, S.ptr, S.lay, N, cnt);
                     });
                 }
             }),
             "modulus wider than 8192 bits");
        S.copy_out(scratch.data());
        u64 *o = mut(out);
        for (long long kk = 0; kk < K; ++kk)
            std::copy(scratch.begin() + size_t(kk * N) * L, scratch.begin() + size_t(kk * N + 1) * L,
                      o + kk * L);
    }
    return out;
}

Limbs paillier_encrypt(py::array pub_, py::array m_, py::array r_, bool soa, int threads, bool group) {
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
        need(group ? UNIFL_WITH_SHAPE(lm, run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *tab) {
                         unifl_gpu::coop::gbody_paillier_encrypt<HL, LPT>(i, kb, tab, O.ptr, O.lay, M.ptr, M.lay,
                                                                          R.ptr, R.lay);
                     }))
                   : UNIFL_WITH_LMAX(lm, parallel_for(n, threads, [&](long long i) {
                         unifl_gpu::body_paillier_encrypt<LM>(i, kb, O.ptr, O.lay, M.ptr, M.lay, R.ptr, R.lay);
                     })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs paillier_encrypt_owner(py::array owner_, py::array m_, py::array yp_, py::array yq_, bool soa,
                             int threads, bool group) {
    const char *fn = "paillier_encrypt_owner";
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
        need(group ? UNIFL_WITH_SHAPE(unifl_gpu::coop::owner_group_lmax(kb),
                                      run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *tab) {
                                          unifl_gpu::coop::gbody_paillier_encrypt_owner<HL, LPT>(
                                              i, kb, tab, O.ptr, O.lay, M.ptr, M.lay, P.ptr, P.lay, Q.ptr, Q.lay);
                                      }))
                   : UNIFL_WITH_LMAX(unifl_gpu::owner_lmax(kb), parallel_for(n, threads, [&](long long i) {
                         unifl_gpu::body_paillier_encrypt_owner<LM>(i, kb, O.ptr, O.lay, M.ptr, M.lay, P.ptr, P.lay,
                                                                    Q.ptr, Q.lay);
                     })),
             "key outside the instantiated size classes");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs paillier_decrypt(py::array priv_, py::array c_, bool soa, int threads, bool group) {
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
                                      run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *tab) {
                                          unifl_gpu::coop::gbody_paillier_decrypt<HL, LPT>(i, kb, tab, O.ptr, O.lay,
                                                                                           C.ptr, C.lay);
                                      }))
                   : UNIFL_WITH_LMAX(unifl_gpu::priv_lmax(kb), parallel_for(n, threads, [&](long long i) {
                         unifl_gpu::body_paillier_decrypt<LM>(i, kb, O.ptr, O.lay, C.ptr, C.lay);
                     })),
             "key outside the instantiated size classes");
        O.copy_out(mut(out));
    }
    return out;
}

// ---- ops that only the cooperative kernels have
// plan: (chunks, 5) int64 rows [group, begin, end, first chunk of the group, chunks of the group]
// over `order` (the input rows group by group); see gbody_prod_groups.
Limbs prod_groups(py::array key_, py::array a_, py::array order_, py::array plan_, long long num_groups,
                  bool soa, int threads) {
    const char *fn = "prod_groups";
    const int L = check_ctx_blob(key_, fn);
    Limbs key = arr(key_, fn, "key", {kAny});
    const u64 *kb = key.data();
    Limbs a = arr(a_, fn, "a", {kAny, L});
    const long long n = a.shape(0);
    using I64 = py::array_t<long long, py::array::c_style>;
    if (!order_.dtype().equal(py::dtype::of<long long>()) || !plan_.dtype().equal(py::dtype::of<long long>()))
        bad_arg(fn, "order/plan", "must be int64 arrays");
    I64 order = I64::ensure(order_), plan = I64::ensure(plan_);
    need(order.ndim() == 1 && order.shape(0) == n, "prod_groups: order must list every row once");
    need(plan.ndim() == 2 && plan.shape(1) == 5, "prod_groups: plan must have shape (chunks, 5)");
    need(num_groups >= 1, "prod_groups: need at least one group");
    const long long chunks = plan.shape(0);
    const long long *o = order.data(), *pl = plan.data();
    std::vector<char> seen(size_t(n), 0);
    for (long long j = 0; j < n; ++j) {
        need(o[j] >= 0 && o[j] < n && !seen[size_t(o[j])], "prod_groups: order must be a permutation of the rows");
        seen[size_t(o[j])] = 1;
    }
    for (long long c = 0; c < chunks; ++c) {
        const long long *r = pl + c * 5;
        need(r[0] >= 0 && r[0] < num_groups && 0 <= r[1] && r[1] <= r[2] && r[2] <= n && r[4] >= 1 &&
                 r[3] >= 0 && r[3] + r[4] <= chunks && c >= r[3] && c < r[3] + r[4],
             "prod_groups: inconsistent plan row");
    }
    Limbs out({(py::ssize_t)num_groups, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        std::vector<u64> partials(size_t(chunks) * L);
        std::vector<unsigned int> counters(size_t(num_groups), 0u);
        Batch A(ro(a), n, L, soa), O(mut(out), num_groups, L, soa);
        need(UNIFL_WITH_SHAPE(unifl_gpu::ctx_lmax(kb), run_groups<TPI, LPT>(chunks, threads, [&](long long i, u32 *) {
                 unifl_gpu::coop::gbody_prod_groups<HL, LPT>(i, kb, O.ptr, O.lay, A.ptr, A.lay, o, pl,
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
                              run_groups<TPI, LPT>((n + chunk - 1) / chunk, threads, [&](long long i, u32 *) {
                                  unifl_gpu::coop::gbody_inverse<HL, LPT>(i, kb, O.ptr, O.lay, A.ptr, A.lay, n,
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
void check_exponents(const Limbs &a, long long covered, const char *fn) {
    const long long n = a.shape(0), La = a.shape(1);
    for (long long i = 0; i < n; ++i)
        for (long long l = 0; l < La; ++l) {
            const long long lo = 64 * l;
            const u64 keep = covered >= lo + 64 ? ~0ull : covered <= lo ? 0ull : ((1ull << (covered - lo)) - 1);
            if (a.data()[i * La + l] & ~keep)
                bad_arg(fn, "a", "row " + std::to_string(i) + ": a fixed-base exponent longer than the " +
                                     std::to_string(covered) + " bits the comb table covers");
        }
}

Limbs fixed_base(py::array pub_, py::array table_, int w, py::array m_, py::array a_, bool soa, int threads) {
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
        need(UNIFL_WITH_SHAPE(unifl_gpu::pub_lmax(kb), run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *) {
                 unifl_gpu::coop::gbody_fixed_base<HL, LPT>(i, kb, t, w, nwin, O.ptr, O.lay, M.ptr, M.lay, e, La);
             })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs owner_fixed_base(py::array owner_, py::array tp_, py::array tq_, int w, py::array m_, py::array a_, bool soa,
                       int threads) {
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
    Limbs a = arr(a_, fn, "a", {n, kAny});
    const int La = (int)a.shape(1);
    check_exponents(a, (long long)nwin * w, fn);
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.n2.L});
    {
        py::gil_scoped_release nogil;
        Batch M(ro(m), n, k.Ln, soa), O(mut(out), n, k.n2.L, soa);
        const u64 *p = tp.data(), *q = tq.data(), *e = a.data();
        need(UNIFL_WITH_SHAPE(unifl_gpu::coop::owner_group_lmax(kb),
                              run_groups<TPI, LPT>(n, threads, [&](long long i, u32 *) {
                                  unifl_gpu::coop::gbody_owner_fixed_base<HL, LPT>(i, kb, p, q, w, nwin, O.ptr, O.lay,
                                                                                   M.ptr, M.lay, e, La);
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
    // group=True: the cooperative bodies (kernels_group.cuh), lanes emulated in lockstep
    mod.def("mul", &mul, py::arg("key"), py::arg("a"), py::arg("b"), py::arg("mode"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false);
    mod.def("exp", &power, py::arg("key"), py::arg("base"), py::arg("exps"), py::arg("mode"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false);
    mod.def("multi_exp", &multi_exp, py::arg("key"), py::arg("bases"), py::arg("exps"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false, py::arg("chunk") = 1);
    mod.def("paillier_encrypt", &paillier_encrypt, py::arg("pub"), py::arg("m"), py::arg("r"),
            py::arg("soa"), py::arg("threads"), py::arg("group") = false);
    mod.def("paillier_encrypt_owner", &paillier_encrypt_owner, py::arg("owner"), py::arg("m"), py::arg("yp"),
            py::arg("yq"), py::arg("soa"), py::arg("threads"), py::arg("group") = false);
    mod.def("paillier_decrypt", &paillier_decrypt, py::arg("priv"), py::arg("c"), py::arg("soa"),
            py::arg("threads"), py::arg("group") = false);
    mod.def("prod_groups", &prod_groups, py::arg("key"), py::arg("a"), py::arg("order"), py::arg("plan"),
            py::arg("num_groups"), py::arg("soa"), py::arg("threads"));
    mod.def("inverse", &inverse, py::arg("key"), py::arg("a"), py::arg("chunk"), py::arg("soa"),
            py::arg("threads"));
    mod.def("fixed_base", &fixed_base, py::arg("pub"), py::arg("table"), py::arg("w"), py::arg("m"),
            py::arg("a"), py::arg("soa"), py::arg("threads"));
    mod.def("owner_fixed_base", &owner_fixed_base, py::arg("owner"), py::arg("tp"), py::arg("tq"), py::arg("w"),
            py::arg("m"), py::arg("a"), py::arg("soa"), py::arg("threads"));
}

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
#include <thread>
#include <vector>

// GCC cannot see that the local limb arrays (capacity LMAX) are written up to the runtime length L
// before they are read, and warns "may be used uninitialized" through the inlined bodies.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels.cuh"

namespace py = pybind11;
using unifl_gpu::Lay;
using unifl_gpu::u64;
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

Limbs rows(const Limbs &a, const char *name, int L) {
    if (a.ndim() != 2 || a.shape(1) != L)
        throw std::invalid_argument(std::string(name) + ": expected shape (N, " + std::to_string(L) + ")");
    return a;
}

u64 *mut(Limbs &a) { return a.mutable_data(); }

// inputs are only read (the Batch views them in place in element-major mode)
u64 *ro(const Limbs &a) { return const_cast<u64 *>(a.data()); }

void need(bool ok, const char *what) {
    if (!ok) throw std::invalid_argument(what);
}

Limbs mul(Limbs key, Limbs a, Limbs b, int mode, bool soa, int threads) {
    const u64 *kb = key.data();
    const int L = (int)kb[1];
    rows(a, "a", L);
    rows(b, "b", L);
    const long long n = a.shape(0);
    need(b.shape(0) == n, "a and b differ in length");
    Limbs out({(py::ssize_t)n, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        Batch A(ro(a), n, L, soa), B(ro(b), n, L, soa), O(mut(out), n, L, soa);
        need(UNIFL_WITH_LMAX(unifl_gpu::ctx_lmax(kb), parallel_for(n, threads, [&](long long i) {
                 unifl_gpu::body_mul<LM>(i, kb, O.ptr, O.lay, A.ptr, A.lay, B.ptr, B.lay, mode);
             })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs power(Limbs key, Limbs base, Limbs exps, int mode, bool soa, int threads) {
    const u64 *kb = key.data();
    const int L = (int)kb[1];
    rows(base, "base", L);
    const long long n = base.shape(0);
    need(exps.ndim() == 2 && (exps.shape(0) == 1 || exps.shape(0) == n), "exps must be (1|N, Le)");
    const int Le = (int)exps.shape(1);
    const int shared = exps.shape(0) == 1 && n != 1;
    Limbs out({(py::ssize_t)n, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
        Batch X(ro(base), n, L, soa), O(mut(out), n, L, soa);
        const u64 *e = exps.data();
        need(UNIFL_WITH_LMAX(unifl_gpu::ctx_lmax(kb), parallel_for(n, threads, [&](long long i) {
                 unifl_gpu::body_exp<LM>(i, kb, O.ptr, O.lay, X.ptr, X.lay, e, Le, shared, mode);
             })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs multi_exp(Limbs key, Limbs bases, py::array_t<u64, py::array::c_style | py::array::forcecast> exps,
                bool soa, int threads) {
    const u64 *kb = key.data();
    const int L = (int)kb[1];
    rows(bases, "bases", L);
    const long long N = bases.shape(0);
    need(exps.ndim() == 3 && exps.shape(1) == N, "exps must be (K, N, Le)");
    const long long K = exps.shape(0);
    const int Le = (int)exps.shape(2);
    need(N > 0, "multi-exp needs at least one base");
    Limbs out({(py::ssize_t)K, (py::ssize_t)L});
    {
        py::gil_scoped_release nogil;
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

Limbs paillier_encrypt(Limbs pub, Limbs m, Limbs r, bool soa, int threads) {
    const u64 *kb = pub.data();
    const auto k = unifl_gpu::parse_pub(kb);
    rows(m, "m", k.Ln);
    rows(r, "r", k.Ln);
    const long long n = m.shape(0);
    need(r.shape(0) == n, "m and r differ in length");
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.n2.L});
    {
        py::gil_scoped_release nogil;
        Batch M(ro(m), n, k.Ln, soa), R(ro(r), n, k.Ln, soa), O(mut(out), n, k.n2.L, soa);
        need(UNIFL_WITH_LMAX(unifl_gpu::pub_lmax(kb), parallel_for(n, threads, [&](long long i) {
                 unifl_gpu::body_paillier_encrypt<LM>(i, kb, O.ptr, O.lay, M.ptr, M.lay, R.ptr, R.lay);
             })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

Limbs paillier_decrypt(Limbs priv, Limbs c, bool soa, int threads) {
    const u64 *kb = priv.data();
    const auto k = unifl_gpu::parse_priv(kb);
    rows(c, "c", k.L2);
    const long long n = c.shape(0);
    Limbs out({(py::ssize_t)n, (py::ssize_t)k.Ln});
    {
        py::gil_scoped_release nogil;
        Batch C(ro(c), n, k.L2, soa), O(mut(out), n, k.Ln, soa);
        need(UNIFL_WITH_LMAX(unifl_gpu::priv_lmax(kb), parallel_for(n, threads, [&](long long i) {
                 unifl_gpu::body_paillier_decrypt<LM>(i, kb, O.ptr, O.lay, C.ptr, C.lay);
             })),
             "modulus wider than 8192 bits");
        O.copy_out(mut(out));
    }
    return out;
}

}  // namespace

PYBIND11_MODULE(_gpu_host, mod) {
    mod.doc() = "UniFL gpu kernel bodies run on the host CPU (verification harness, no GPU)";
    mod.def("lmax_class", [](int L) { return unifl_gpu::lmax_class(L); });
    mod.def("mul", &mul, py::arg("key"), py::arg("a"), py::arg("b"), py::arg("mode"),
            py::arg("soa"), py::arg("threads"));
    mod.def("exp", &power, py::arg("key"), py::arg("base"), py::arg("exps"), py::arg("mode"),
            py::arg("soa"), py::arg("threads"));
    mod.def("multi_exp", &multi_exp, py::arg("key"), py::arg("bases"), py::arg("exps"),
            py::arg("soa"), py::arg("threads"));
    mod.def("paillier_encrypt", &paillier_encrypt, py::arg("pub"), py::arg("m"), py::arg("r"),
            py::arg("soa"), py::arg("threads"));
    mod.def("paillier_decrypt", &paillier_decrypt, py::arg("priv"), py::arg("c"), py::arg("soa"),
            py::arg("threads"));
}

// UniFL gpu backend: the C interface of libunifl_gpu.so, loaded by unifl/backends/gpu/runtime.py with
// ctypes (a plain C ABI: the Python side needs no pybind11 build with nvcc, and a missing driver
// shows up as an error code, not an import failure).  Each function checks what the caller sent
// against the key and the device before anything runs (the kernels trust their inputs, and a device
// fault would poison the CUDA context of the whole process), then runs the op through the device
// runtime (device_runtime.cuh: staging, result allocation) and the kernels' launch functions
// (launch.cuh), and waits for it.
#include <algorithm>
#include <cstring>
#include <new>
#include <vector>

#include "kernels_group.cuh"  // parse_pub ..., coop::owner_group_lmax / priv_group_lmax
#include "launch.cuh"

using unifl_gpu::Lay;
using unifl_gpu::u64;
using namespace unifl_gpu::rt;
namespace coop = unifl_gpu::coop;

namespace {

constexpr int kErrWindow = -7;  // a window outside 0 (chosen by occupancy), 3, 4, 5

bool window_ok(int w) { return w == 0 || (w >= coop::kMinWindow && w <= coop::kMaxWindow); }

}  // namespace

// ---------------------------------------------------------------------------------- C interface
extern "C" {

// cudaGetDeviceCount's status (35: no/insufficient driver, 100: no device) and the count.
int unifl_gpu_device_count(int *count) {
    *count = 0;
    int e = ensure_init();
    if (e) return e;
    *count = device_count();
    return 0;
}

const char *unifl_gpu_error_string(int err) {
    if (err == kErrSize) return "operand size outside the instantiated kernels (up to 8192 bits)";
    if (err == kErrNoDevice) return "no such CUDA device";
    if (err == kErrAlloc) return "host allocation failed";
    if (err == kErrLayout)
        return "a device batch or table lives on another device than the operation";
    if (err == kErrShape) return "operand rows or limbs do not fit the operation";
    if (err == kErrSmem)
        return "the group kernel needs more shared memory per block (key blob and window tables) "
               "than "
               "this device allows";
    if (err == kErrWindow) return "the window must be 3, 4 or 5 bits (0: chosen by occupancy)";
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

// Kernel launches, host->device copies and device->host copies on a device since it was opened
// (key uploads included); zeros for a device not opened yet.
int unifl_gpu_counters(int device, long long *out3) {
    out3[0] = out3[1] = out3[2] = 0;
    int e = ensure_init();
    if (e) return e;
    if (device < 0 || device >= device_count()) return kErrNoDevice;
    const Device *d = opened_device(device);
    if (d) {
        out3[0] = d->launches.load();
        out3[1] = d->uploads.load();
        out3[2] = d->downloads.load();
    }
    return 0;
}

// What the last exponentiation-class launch on a device ran with: the window (bits) and whether the
// wide shape (1) or the class's own (0); zeros before any.
int unifl_gpu_last_tuning(int device, int *window, int *wide) {
    *window = *wide = 0;
    int e = ensure_init();
    if (e) return e;
    if (device < 0 || device >= device_count()) return kErrNoDevice;
    const Device *d = opened_device(device);
    if (d) {
        *window = d->last_window;
        *wide = d->last_wide;
    }
    return 0;
}

// kind: 0 ModCtx, 1 Paillier public key, 2 Paillier private key (decryption), 3 key-owner
// encryption; uploaded to `device` only.  kErrSize when neither kernel family takes the key.
int unifl_gpu_key_upload(const u64 *blob, long long len, int kind, int device, void **handle) {
    *handle = nullptr;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Key *k = new (std::nothrow) Key();
    if (!k) return kErrAlloc;
    k->host.assign(blob, blob + len);
    k->dev = d;
    k->lmax = kind == 0   ? unifl_gpu::ctx_lmax(blob)
              : kind == 1 ? unifl_gpu::pub_lmax(blob)
              : kind == 2 ? unifl_gpu::priv_lmax(blob)
              : kind == 3 ? unifl_gpu::owner_lmax(blob)
                          : 0;
    k->glmax = kind == 0   ? unifl_gpu::ctx_lmax(blob)
               : kind == 1 ? unifl_gpu::pub_lmax(blob)
               : kind == 2 ? coop::priv_group_lmax(blob)
               : kind == 3 ? coop::owner_group_lmax(blob)
                           : 0;
    if ((!k->lmax && !k->glmax) || len * 8 > kMaxSharedKey) {
        delete k;
        return kErrSize;
    }
    e = on_device(*d, [&](Device &dv) -> int {
        cudaError_t ce;
        if ((ce = cudaMalloc((void **)&k->ptr, len * 8))) return (int)ce;
        if ((ce = cudaMemcpy(k->ptr, blob, len * 8, cudaMemcpyHostToDevice))) return (int)ce;
        dv.uploads += 1;
        return 0;
    });
    if (e) {
        if (k->ptr) {
            cudaSetDevice(d->id);
            cudaFree(k->ptr);
        }
        delete k;
        return e;
    }
    *handle = k;
    return 0;
}

// The size classes (in 64-bit limbs) a key runs in: one-thread kernels, group kernels; 0 = that
// family does not take the key.
void unifl_gpu_key_classes(void *key, int *lmax, int *glmax) {
    const Key *k = (const Key *)key;
    *lmax = k->lmax;
    *glmax = k->glmax;
}

void unifl_gpu_key_free(void *handle) {
    Key *k = (Key *)handle;
    if (!k) return;
    if (k->ptr) {
        cudaSetDevice(k->dev->id);
        cudaFree(k->ptr);
    }
    delete k;
}

// ---- fixed-base comb tables: uploaded once per key (one upload), resident until freed
int unifl_gpu_table_upload(const u64 *host, long long words, int device, void **handle) {
    *handle = nullptr;
    if (!host || words <= 0) return kErrShape;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Table *t = new (std::nothrow) Table();
    if (!t) return kErrAlloc;
    t->dev = d;
    t->words = words;
    e = on_device(*d, [&](Device &dv) -> int {
        cudaError_t ce;
        if ((ce = cudaMalloc((void **)&t->ptr, size_t(words) * 8))) return (int)ce;
        if ((ce = cudaMemcpy(t->ptr, host, size_t(words) * 8, cudaMemcpyHostToDevice)))
            return (int)ce;
        dv.uploads += 1;
        return 0;
    });
    if (e) {
        if (t->ptr) {
            cudaSetDevice(d->id);
            cudaFree(t->ptr);
        }
        delete t;
        return e;
    }
    *handle = t;
    return 0;
}

void unifl_gpu_table_free(void *handle) {
    Table *t = (Table *)handle;
    if (!t) return;
    if (t->ptr) {
        cudaSetDevice(t->dev->id);
        cudaFree(t->ptr);
    }
    delete t;
}

// ---- device batches: upload, download, shape, free
// rows (n, L) element-major host -> a new device batch on `device`.
int unifl_gpu_batch_upload(const u64 *host, long long n, int L, int device, void **out) {
    *out = nullptr;
    Device *d;
    int e = open_device(device, &d);
    if (e) return e;
    Operand src{nullptr, host, n, L};
    return run_op(*d, n, {&src}, {L}, L, out,
                  [&](Device &dv, DBatch &o, const std::vector<View> &v, u64 *) -> int {
                      const int r =
                          launch_relayout(dv, n, L, o.ptr, limb_major(o), v[0].ptr, v[0].lay);
                      return r ? r : finish(dv);
                  });
}

// device batch -> (n, L) element-major host rows (relayout on the device, then one copy).
int unifl_gpu_batch_download(void *batch, u64 *host) {
    DBatch *b = (DBatch *)batch;
    const long long n = b->n;
    const int L = b->L;
    return on_device(*b->dev, [&](Device &d) -> int {
        const size_t w = size_t(n) * L;
        cudaError_t e = d.reserve(w, w);
        if (e) return (int)e;
        launch_relayout(d, n, L, d.arena, Lay{L, 1}, b->ptr, limb_major(*b));
        if ((e = cudaMemcpyAsync(d.pinned, d.arena, w * 8, cudaMemcpyDeviceToHost, d.stream)))
            return (int)e;
        d.downloads += 1;
        int r = finish(d);
        if (!r) std::memcpy(host, d.pinned, w * 8);
        return r;
    });
}

// n, L and the device of a batch.
void unifl_gpu_batch_shape(void *batch, long long *n, int *L, int *device) {
    const DBatch *b = (const DBatch *)batch;
    *n = b->n;
    *L = b->L;
    *device = b->dev->id;
}

void unifl_gpu_batch_free(void *batch) { free_batch((DBatch *)batch); }

// ---- ops: every result is a new device batch (*out) on the key's device.  `group` != 0 runs the
// cooperative kernel (k_<op>_g) of the key's group class; kErrSize when that family does not take
// the key (no silent switch to the other family: the caller chose it).
// out = a·b·R^-1 (mode 0) or a·b mod m (mode 1); b may be one shared host row.
int unifl_gpu_mul(void *key, Operand a, Operand b, long long n, int mode, int group, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    return run_op(*k.dev, n, {&a, &b}, {L, L}, L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int r = launch_mul(d, k, group != 0, n, o, v[0], v[1], mode);
                      return r ? r : finish(d);
                  });
}

// out = base^e (mode 1: plain in/out) or x̄^e in the domain (mode 0); exps: host rows (n|1, le).
// window, shape: the cooperative kernels' Tuning (launch.cuh).
int unifl_gpu_exp(void *key, Operand base, Operand exps, long long n, int mode, int group,
                  int window, int shape, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    *out = nullptr;
    if (exps.batch || exps.limbs < 1) return kErrShape;
    if (group && !k.glmax) return kErrSize;
    if (!window_ok(window)) return kErrWindow;
    return run_op(*k.dev, n, {&base, &exps}, {L, exps.limbs}, L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int shared = exps.rows == 1 && n != 1;
                      const int r = launch_exp(d, k, group != 0, Tuning{window, shape}, n, o, v[0],
                                               v[1], exps.limbs, shared, mode);
                      return r ? r : finish(d);
                  });
}

// out[kk] = prod_i bases_i^exps[kk, i] (Montgomery form), kk < K (UniFL Alg. 5).  exps: host
// (K, N, le), staged with the bases (host bases) into the arena.
//   group == 0: K·N powers into a scratch after them (waves), then log2(N) halving rounds (one launch
//               each), then a relayout of the K products;
//   group != 0: ONE launch of K·P groups, P = ceil(N / chunk): each multiplies the powers of its
//               `chunk` columns, and the last part of a row to arrive multiplies the row's P partials
//               (scratch: K·P rows, element-major; K counters zeroed before the launch).
int unifl_gpu_multi_exp(void *key, Operand bases, long long N, const u64 *exps, long long K, int le,
                        int group, long long chunk, int window, void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    *out = nullptr;
    if (N <= 0 || K <= 0 || le < 1 || !exps || (group && chunk < 1)) return kErrShape;
    if (group && !k.glmax) return kErrSize;
    if (!window_ok(window)) return kErrWindow;
    if (bases.batch) {
        const DBatch *b = (const DBatch *)bases.batch;
        if (b->n != N || b->L != L) return kErrShape;
        if (b->dev != k.dev) return kErrLayout;
    } else if (!bases.host || bases.rows != N || bases.limbs != L) {
        return kErrShape;
    }
    return with_result(*k.dev, K, L, out, [&](Device &d, DBatch &res) -> int {
        const long long S = K * N;
        std::vector<HostBlock> hs{HostBlock{exps, size_t(S) * le}};
        if (!bases.batch) hs.push_back(HostBlock{bases.host, size_t(N) * L});
        const u64 *bptr = bases.batch ? ((const DBatch *)bases.batch)->ptr : nullptr;
        const Lay lay_b = bases.batch ? Lay{1, N} : Lay{L, 1};
        std::vector<u64 *> st;
        u64 *rest = nullptr;
        int r = 0;
        if (group) {
            const long long P = (N + chunk - 1) / chunk;
            const size_t scratch_words = P > 1 ? size_t(K * P) * L : 0;
            if ((r = stage_blocks(d, hs, st, scratch_words + size_t(K + 1) / 2, &rest))) return r;
            if (!bases.batch) bptr = st[1];
            u64 *scratch = rest;
            unsigned int *counters = reinterpret_cast<unsigned int *>(rest + scratch_words);
            if ((r = (int)cudaMemsetAsync(counters, 0, size_t(K) * sizeof(unsigned int), d.stream)))
                return r;
            r = launch_multi_exp_group(d, k, Tuning{window, 0}, K * P, res, bptr, lay_b, st[0], le,
                                       N, P, chunk, scratch, counters);
            return r ? r : finish(d);
        }
        const size_t ws = size_t(S) * L;
        if ((r = stage_blocks(d, hs, st, ws, &rest))) return r;
        if (!bases.batch) bptr = st[1];
        u64 *scratch = rest;
        if ((r = launch_multi_exp_thread(d, k, K, N, scratch, bptr, lay_b, st[0], le))) return r;
        // element kk·N of the scratch is row kk's product: gather them into the output
        launch_relayout(d, K, L, res.ptr, limb_major(res), scratch, Lay{N, S});
        return finish(d);
    });
}

// Grouped products (mont_prod_groups) in one launch: out[g] = Π_{rows of group g} a (Montgomery
// form), num_groups rows.  order (n int64): the rows group by group; plan (chunks × 5 int64): one
// row [group, begin, end, first chunk of the group, chunks of the group] per group of threads
// (begin/end index order); an empty group has one empty chunk (R mod m).  Both are host arrays,
// staged with a host `a`.  The kernel trusts them, so every index is checked here first: a stray
// one would read or write out of bounds, and a device fault poisons the whole CUDA context.
int unifl_gpu_prod_groups(void *key, Operand a, long long n, const long long *order,
                          const long long *plan, long long chunks, long long num_groups,
                          void **out) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    *out = nullptr;
    if (n < 0 || chunks < 1 || num_groups < 1 || !plan || (n > 0 && !order)) return kErrShape;
    if (!k.glmax) return kErrSize;
    int e = n > 0 ? check_operand(a, n, L, *k.dev) : 0;
    if (e) return e;
    if (n > 0 && !a.batch && a.rows != n) return kErrShape;  // one shared row is no grouped input
    {
        std::vector<char> seen(size_t(n), 0), covered(size_t(num_groups), 0);
        for (long long j = 0; j < n; ++j) {
            if (order[j] < 0 || order[j] >= n || seen[size_t(order[j])]) return kErrShape;
            seen[size_t(order[j])] = 1;
        }
        for (long long c = 0; c < chunks; ++c) {
            const long long *r = plan + c * 5;
            if (!(r[0] >= 0 && r[0] < num_groups && 0 <= r[1] && r[1] <= r[2] && r[2] <= n &&
                  r[4] >= 1 && r[3] >= 0 && r[3] + r[4] <= chunks && c >= r[3] && c < r[3] + r[4]))
                return kErrShape;
            // the chunks of one group agree on it (the counter's last arrival is chunks − 1)
            const long long *f = plan + r[3] * 5;
            if (f[0] != r[0] || f[3] != r[3] || f[4] != r[4]) return kErrShape;
            covered[size_t(r[0])] = 1;
        }
        // every group has a chunk: a group without one would leave its output row unwritten
        if (std::find(covered.begin(), covered.end(), 0) != covered.end()) return kErrShape;
    }
    return with_result(*k.dev, num_groups, L, out, [&](Device &d, DBatch &res) -> int {
        std::vector<HostBlock> hs{HostBlock{plan, size_t(chunks) * 5}};
        if (n > 0) hs.push_back(HostBlock{order, size_t(n)});
        if (n > 0 && !a.batch) hs.push_back(HostBlock{a.host, size_t(n) * L});
        const size_t scratch_words = size_t(chunks) * L;
        std::vector<u64 *> st;
        u64 *rest = nullptr;
        int r = stage_blocks(d, hs, st, scratch_words + size_t(num_groups + 1) / 2, &rest);
        if (r) return r;
        const long long *dplan = reinterpret_cast<const long long *>(st[0]);
        const long long *dorder = n > 0 ? reinterpret_cast<const long long *>(st[1]) : nullptr;
        const u64 *aptr = n == 0 ? nullptr : a.batch ? ((const DBatch *)a.batch)->ptr : st[2];
        Lay lay_a;  // (a conditional of two Lay{...} crashes cicc 13.0)
        lay_a.se = a.batch ? 1 : L;
        lay_a.sl = a.batch ? n : 1;
        u64 *scratch = rest;
        unsigned int *counters = reinterpret_cast<unsigned int *>(rest + scratch_words);
        if ((r = (int)cudaMemsetAsync(counters, 0, size_t(num_groups) * sizeof(unsigned int),
                                      d.stream)))
            return r;
        r = launch_prod_groups(d, k, chunks, res, aptr, lay_a, dorder, dplan, scratch, counters);
        return r ? r : finish(d);
    });
}

// Batch inversion (mont_inverse): out_i = a_i^-1·R for Montgomery-form a (n rows), one group per
// `chunk` rows (Montgomery's trick), one launch.  *bad: the number of chunks holding a row that
// shares a factor with the modulus (their rows are then undefined; the caller refuses the batch),
// copied back after the launch (counted as a download).
int unifl_gpu_inverse(void *key, Operand a, long long n, long long chunk, void **out,
                      unsigned int *bad) {
    Key &k = *(Key *)key;
    const int L = (int)k.host[1];
    *out = nullptr;
    *bad = 0;
    if (chunk < 1) return kErrShape;
    if (!k.glmax) return kErrSize;
    if (!a.batch && a.rows != n) return kErrShape;  // a shared row: no batch to invert
    const long long inst = n > 0 ? (n + chunk - 1) / chunk : 0;
    return run_op(
        *k.dev, n, {&a}, {L}, L, out,
        [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *rest) {
            unsigned int *dbad = reinterpret_cast<unsigned int *>(rest);
            int r = (int)cudaMemsetAsync(dbad, 0, sizeof(unsigned int), d.stream);
            if (r) return r;
            if ((r = launch_inverse(d, k, inst, o, v[0], n, chunk, dbad))) return r;
            // d.pinned holds at least one word (stage reserves it); the copy is stream-ordered after the
            // staging upload that used it
            if ((r = (int)cudaMemcpyAsync(d.pinned, dbad, sizeof(unsigned int),
                                          cudaMemcpyDeviceToHost, d.stream)))
                return r;
            d.downloads += 1;
            if ((r = finish(d))) return r;
            std::memcpy(bad, d.pinned, sizeof(unsigned int));
            return 0;
        },
        1);
}

// DJN fixed-base encryption (public key): out_i = (1 + m_i·n)·hs^(a_i)·R mod n², hs^a from the comb
// table of n² (`table`: nwin × (2^w − 1) entries of L2 limbs, unifl_gpu_table_upload), m (n, Ln),
// a host rows (n, La) whose bits past nwin·w must be zero.  One launch.
int unifl_gpu_fixed_base(void *pub, void *table, int w, int nwin, Operand m, const u64 *a, int La,
                         long long n, void **out) {
    Key &k = *(Key *)pub;
    const unifl_gpu::PubKey pk = unifl_gpu::parse_pub(k.host.data());
    *out = nullptr;
    if (!k.glmax) return kErrSize;
    int e = check_table(table, *k.dev, w, nwin, pk.n2.L);
    if (e) return e;
    if (!a || La < 1 || n <= 0 || !exponents_fit(a, n, La, (long long)nwin * w)) return kErrShape;
    Operand ea{nullptr, a, n, La};
    const Table &t = *(const Table *)table;
    return run_op(*k.dev, n, {&m, &ea}, {pk.Ln, La}, pk.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int r = launch_fixed_base(d, k, t, w, nwin, n, o, v[0], v[1].ptr, La);
                      return r ? r : finish(d);
                  });
}

// The key owner's fixed-base encryption: bp^ap mod p² and bq^aq mod q² from the comb tables tp of
// bp (nwin × (2^w − 1) entries of Lp2 limbs) and tq of bq (of Lq2 limbs) in the two half groups,
// Garner's combine and the finish in one launch.  DJN: both tables of hs, ap = aq; the owner's
// generators: tables of gp and gq, exponents kp and kq.  ap, aq: host rows (n, La) each, their
// bits past nwin·w zero.  Same operands as unifl_gpu_fixed_base otherwise.
int unifl_gpu_owner_fixed_base(void *owner, void *tp, void *tq, int w, int nwin, Operand m,
                               const u64 *ap, const u64 *aq, int La, long long n, void **out) {
    Key &k = *(Key *)owner;
    const unifl_gpu::OwnerKey ok_ = unifl_gpu::parse_owner(k.host.data());
    *out = nullptr;
    if (!k.glmax) return kErrSize;
    int e;
    if ((e = check_table(tp, *k.dev, w, nwin, ok_.p2.L)) ||
        (e = check_table(tq, *k.dev, w, nwin, ok_.q2.L)))
        return e;
    const long long covered = (long long)nwin * w;
    if (!ap || !aq || La < 1 || n <= 0 || !exponents_fit(ap, n, La, covered) ||
        !exponents_fit(aq, n, La, covered))
        return kErrShape;
    Operand eap{nullptr, ap, n, La}, eaq{nullptr, aq, n, La};
    const Table &p = *(const Table *)tp, &q = *(const Table *)tq;
    return run_op(*k.dev, n, {&m, &eap, &eaq}, {ok_.Ln, La, La}, ok_.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int r = launch_owner_fixed_base(d, k, p, q, w, nwin, n, o, v[0],
                                                            v[1].ptr, v[2].ptr, La);
                      return r ? r : finish(d);
                  });
}

// Fused Paillier encryption (Alg. 4): m, r (n, Ln); out (n, L2), Montgomery form mod n².
int unifl_gpu_paillier_encrypt(void *pub, Operand m, Operand r, long long n, int group, int window,
                               int shape, void **out) {
    Key &k = *(Key *)pub;
    const unifl_gpu::PubKey pk = unifl_gpu::parse_pub(k.host.data());
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    if (!window_ok(window)) return kErrWindow;
    return run_op(*k.dev, n, {&m, &r}, {pk.Ln, pk.Ln}, pk.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int e =
                          launch_encrypt(d, k, group != 0, Tuning{window, shape}, n, o, v[0], v[1]);
                      return e ? e : finish(d);
                  });
}

// Key-owner encryption with the CRT (body_paillier_encrypt_owner): m (n, Ln), yp (n, Lp),
// yq (n, Lq); out (n, L2), Montgomery form mod n².  Both halves, the combine and the finish in one
// kernel launch (per wave); the three operands staged in one copy when they come from the host.
int unifl_gpu_paillier_encrypt_owner(void *owner, Operand m, Operand yp, Operand yq, long long n,
                                     int group, int window, void **out) {
    Key &k = *(Key *)owner;
    const unifl_gpu::OwnerKey ok_ = unifl_gpu::parse_owner(k.host.data());
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    if (!window_ok(window)) return kErrWindow;
    return run_op(*k.dev, n, {&m, &yp, &yq}, {ok_.Ln, ok_.Lp, ok_.Lq}, ok_.n2.L, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int e = launch_encrypt_owner(d, k, group != 0, Tuning{window, 0}, n, o,
                                                         v[0], v[1], v[2]);
                      return e ? e : finish(d);
                  });
}

// CRT decryption: c (n, L2) Montgomery form mod n² -> m (n, Ln).
int unifl_gpu_paillier_decrypt(void *priv, Operand c, long long n, int group, int window,
                               void **out) {
    Key &k = *(Key *)priv;
    const unifl_gpu::PrivKey sk = unifl_gpu::parse_priv(k.host.data());
    *out = nullptr;
    if (group && !k.glmax) return kErrSize;
    if (!window_ok(window)) return kErrWindow;
    return run_op(*k.dev, n, {&c}, {sk.L2}, sk.Ln, out,
                  [&](Device &d, DBatch &o, const std::vector<View> &v, u64 *) {
                      const int e = launch_decrypt(d, k, group != 0, Tuning{window, 0}, n, o, v[0]);
                      return e ? e : finish(d);
                  });
}

}  // extern "C"

// UniFL gpu backend, optional CGBN variant (compiled only with -DUNIFL_WITH_CGBN=1, i.e. when
// CGBN_INCLUDE_DIR is set at build time; see docs/backends/gpu.md).  ModExp with plain values in and out, so
// CGBN's R = 2^BITS (ours is 2^(64·L)) never shows, on CGBN's cooperative layout: TPI threads of a
// warp share one instance (8, 16, 32 threads for the 1024, 2048, 4096-bit classes; 4 limbs of 32 bits
// per thread in each), a better fit than one thread per instance for small batches.  Fixed 4-bit
// windows, the 16-entry table in local memory (16·4 words per thread).
//
// Built against NVlabs/CGBN 6e6fdc1ab3e7c4e7899a83dc52ee1005b7e8c217 with nvcc 13.0.88 for sm_80 and
// sm_90 without warnings, and powm_fixed4 checked on the host against mpz_powm through CGBN's GMP
// model of the same API (bench/cgbn_build.sh repeats both); the kernels were never run (no GPU where
// this was written).
//
// How CGBN is included, and why:
// * CGBN only has a device implementation (cgbn_cuda.h, under __CUDA_ARCH__); its host pass wants
//   GMP (<gmp.h> first, else "#error You must use GMP for now").  We include <cgbn/cgbn.h> in the
//   device passes only and keep CGBN types out of every host-visible signature: the kernels take our
//   u64 rows and view them as cgbn_mem_t<BITS> in device code.  So the build needs no GMP, and no
//   CGBN host code (cgbn.cu's error-report helpers) lands in the library.
// * cgbn_cuda.h includes <cooperative_groups.h> and uses nothing from it (NVlabs/CGBN PR #32 drops
//   the include).  With CUDA 13 that header needs CCCL (<nv/target>), which the pinned pip toolchain
//   (nvidia-cuda-nvcc & co. without nvidia-cuda-cccl) lacks; with CUDA 12.5, including it in the
//   device pass only broke the host stub ("'::cuda' has not been declared", NVlabs/CGBN #31; not
//   seen with nvcc 13.0.88 when CCCL is there).
//   We pre-define its include guard around <cgbn/cgbn.h> (and declare the namespace CGBN aliases),
//   which is what PR #32 does, without touching the CGBN checkout; a checkout that has PR #32 is
//   unaffected.
#pragma once

#if defined(__CUDA_ARCH__)
#ifndef _COOPERATIVE_GROUPS_H_
#define _COOPERATIVE_GROUPS_H_
#define UNIFL_CGBN_SKIPPED_CG
#endif
namespace cooperative_groups {}  // namespace cooperative_groups
#include <cgbn/cgbn.h>
#ifdef UNIFL_CGBN_SKIPPED_CG
#undef _COOPERATIVE_GROUPS_H_  // a later #include <cooperative_groups.h> still gets the real header
#undef UNIFL_CGBN_SKIPPED_CG
#endif
#elif defined(UNIFL_CGBN_HOST_CHECK)
// bench/cgbn_build.sh's host check: the algorithm below on CGBN's GMP model (cgbn_mpz.h; the
// includer includes <gmp.h> first), compared with mpz_powm.  Only powm_fixed4 is defined then.
#include <cgbn/cgbn.h>
#endif

#if defined(__CUDA_ARCH__) || defined(UNIFL_CGBN_HOST_CHECK)
namespace unifl_cgbn {

// r = x^e mod m for one instance (all TPI lanes call it together): odd m > 1, any x < 2^BITS.
// Fixed 4-bit windows from the top digit of e, 4 squarings and one multiplication per digit (zero
// digits too: table[0] is R mod m); the schedule depends on the bit length of e only, but the table
// index is the digit, so this is not constant time (nor is CGBN).  clz and extract_bits_ui32 return
// instance-wide values, so the lanes of an instance never diverge.
template <class env_t>
__host__ __device__ __forceinline__ void powm_fixed4(env_t env, typename env_t::cgbn_t &r,
                                                     typename env_t::cgbn_t &x,
                                                     const typename env_t::cgbn_t &e,
                                                     const typename env_t::cgbn_t &m) {
    typename env_t::cgbn_t table[16];  // x^d·R mod m, d = 0..15 (local memory on the device)
    if (cgbn_compare(env, x, m) >= 0) cgbn_rem(env, x, x, m);  // bn2mont wants x < m
    const uint32_t np0 = cgbn_bn2mont(env, table[1], x, m);
    cgbn_set_ui32(env, r, 1);
    cgbn_bn2mont(env, table[0], r, m);
    for (int d = 2; d < 16; ++d) cgbn_mont_mul(env, table[d], table[d - 1], table[1], m, np0);
    const int nbits = (int)env_t::BITS - (int)cgbn_clz(env, e);
    int pos = nbits > 0 ? ((nbits + 3) / 4 - 1) * 4 : 0;
    cgbn_set(env, r, table[cgbn_extract_bits_ui32(env, e, (uint32_t)pos, 4)]);
    while (pos > 0) {
        for (int s = 0; s < 4; ++s) cgbn_mont_sqr(env, r, r, m, np0);
        pos -= 4;
        cgbn_mont_mul(env, r, r, table[cgbn_extract_bits_ui32(env, e, (uint32_t)pos, 4)], m, np0);
    }
    cgbn_mont2bn(env, r, r, m, np0);
}

}  // namespace unifl_cgbn
#endif

#ifndef UNIFL_CGBN_HOST_CHECK
namespace unifl_cgbn {

// CGBN's parameter class (cgbn_context_t<TPI, Params>) plus our TPI and BITS.
template <uint32_t tpi, uint32_t bits>
struct Params {
    static const uint32_t TPB = 0;  // any blockDim.x (a multiple of TPI)
    static const uint32_t MAX_ROTATION = 4;
    static const uint32_t SHM_LIMIT = 0;      // no shared memory for CGBN
    static const bool CONSTANT_TIME = false;  // CGBN has no constant-time algorithms
    static const uint32_t TPI = tpi;
    static const uint32_t BITS = bits;
    static const int WORDS = bits / 64;  // u64 words of a row
};

constexpr int kThreadsPerBlock = 128;

// out[i] = base[i]^exps[i or 0] mod mod, rows of P::WORDS u64 words (little-endian, zero-padded),
// one instance per TPI consecutive threads.  Needs an odd modulus > 1 (checked by the caller); bases
// need not be reduced.  The early return drops whole instances: CGBN syncs only the TPI lanes of an
// instance (instance_sync_mask), so instances of a warp may also run different exponent lengths.
template <class P>
__global__ void k_powm(u64 *out, const u64 *base, const u64 *exps, int e_shared, const u64 *mod,
                       long long n) {
#if defined(__CUDA_ARCH__)
    typedef cgbn_context_t<P::TPI, P> context_t;
    typedef cgbn_env_t<context_t, P::BITS> env_t;
    typedef cgbn_mem_t<P::BITS> mem_t;
    typedef typename env_t::cgbn_t bn_t;
    const long long inst = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / P::TPI;
    if (inst >= n) return;
    context_t ctx(cgbn_no_checks);
    env_t env(ctx);
    // cgbn_load/cgbn_store take non-const cgbn_mem_t pointers; the inputs are only read
    mem_t *const x_row = reinterpret_cast<mem_t *>(const_cast<u64 *>(base + inst * P::WORDS));
    mem_t *const e_row =
        reinterpret_cast<mem_t *>(const_cast<u64 *>(exps + (e_shared ? 0 : inst * P::WORDS)));
    mem_t *const m_row = reinterpret_cast<mem_t *>(const_cast<u64 *>(mod));
    bn_t x, e, m, r;
    cgbn_load(env, x, x_row);
    cgbn_load(env, e, e_row);
    cgbn_load(env, m, m_row);
    powm_fixed4(env, r, x, e, m);
    cgbn_store(env, reinterpret_cast<mem_t *>(out + inst * P::WORDS), r);
#else
    (void)out, (void)base, (void)exps, (void)e_shared, (void)mod, (void)n;
#endif
}

template <class P>
cudaError_t launch_powm(u64 *out, const u64 *base, const u64 *exps, int e_shared, const u64 *mod,
                        long long n, cudaStream_t stream) {
    const long long ipb = kThreadsPerBlock / P::TPI;  // instances per block
    k_powm<P><<<(unsigned)((n + ipb - 1) / ipb), kThreadsPerBlock, 0, stream>>>(out, base, exps,
                                                                                e_shared, mod, n);
    return cudaGetLastError();
}

}  // namespace unifl_cgbn

extern "C" {

// base^e mod m (plain in and out) for an odd modulus m > 1 of L <= 64 limbs, bases of L limbs (any
// value < 2^(64·L)) and exponents of le limbs (le <= the class width); rows element-major, exps one
// shared row when e_shared.  kErrSize (the caller falls back to the default kernels) when the sizes
// fall outside the CGBN classes or the modulus is even or 1.
int unifl_gpu_cgbn_mod_exp(int device, const u64 *mod, int L, const u64 *base, const u64 *exps,
                           int le, int e_shared, u64 *out, long long n) {
    const int W = L <= 0    ? 0
                  : L <= 16 ? 16
                  : L <= 32 ? 32
                  : L <= 64 ? 64
                            : 0;  // u64 words of the class
    if (!W || le < 0 || le > W) return kErrSize;
    bool above_one = false;
    for (int j = 1; j < L; ++j) above_one = above_one || mod[j] != 0;
    if (!(mod[0] & 1) || !(above_one || mod[0] > 1)) return kErrSize;
    if (n <= 0) return 0;
    Device *dev;
    int e0 = open_device(device, &dev);
    if (e0) return e0;
    return on_device(*dev, [&](Device &d) -> int {
        // pinned and arena: bases (wb), exponents (we), modulus (W), then the results (wb)
        const size_t wb = size_t(n) * W, we = size_t(e_shared ? 1 : n) * W, in = wb + we + W;
        cudaError_t e = d.reserve(in + wb, in + wb);
        if (e) return (int)e;
        u64 *h = d.pinned;
        std::memset(h, 0, in * 8);
        for (long long i = 0; i < n; ++i) std::memcpy(h + i * W, base + i * L, size_t(L) * 8);
        for (long long i = 0; i < (e_shared ? 1 : n); ++i)
            std::memcpy(h + wb + i * W, exps + i * le, size_t(le) * 8);
        std::memcpy(h + wb + we, mod, size_t(L) * 8);
        if ((e = cudaMemcpyAsync(d.arena, h, in * 8, cudaMemcpyHostToDevice, d.stream)))
            return (int)e;
        d.uploads += 1;
        u64 *dout = d.arena + in;
        const u64 *dbase = d.arena, *dexps = d.arena + wb, *dmod = d.arena + wb + we;
        if (W == 16)
            e = unifl_cgbn::launch_powm<unifl_cgbn::Params<8, 1024>>(dout, dbase, dexps, e_shared,
                                                                     dmod, n, d.stream);
        else if (W == 32)
            e = unifl_cgbn::launch_powm<unifl_cgbn::Params<16, 2048>>(dout, dbase, dexps, e_shared,
                                                                      dmod, n, d.stream);
        else
            e = unifl_cgbn::launch_powm<unifl_cgbn::Params<32, 4096>>(dout, dbase, dexps, e_shared,
                                                                      dmod, n, d.stream);
        if (e) return (int)e;
        d.launches += 1;
        if ((e = cudaMemcpyAsync(h + in, dout, wb * 8, cudaMemcpyDeviceToHost, d.stream)))
            return (int)e;
        d.downloads += 1;
        int r = finish(d);
        if (!r)
            for (long long i = 0; i < n; ++i)
                std::memcpy(out + i * L, h + in + i * W, size_t(L) * 8);
        return r;
    });
}

}  // extern "C"

#endif  // !UNIFL_CGBN_HOST_CHECK

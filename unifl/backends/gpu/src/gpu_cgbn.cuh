// UniFL gpu backend, optional CGBN variant (compiled only with -DUNIFL_WITH_CGBN=1, i.e. when
// CGBN_INCLUDE_DIR is set at build time; see docs/gpu.md).  ModExp with plain values in and out, so
// CGBN's R = 2^BITS (ours is 2^(64·L)) never shows, on CGBN's cooperative layout: TPI threads of a
// warp share one instance (8, 16, 32 threads for 1024, 2048, 4096-bit classes), a better fit than
// one thread per instance for small batches.  Fixed 4-bit windows, table in local memory.
// Not compiled or run in the session that wrote it (no CGBN checkout, no GPU): treat as untested.
// cgbn_mem_t<BITS> is little-endian 32-bit limbs, byte-compatible with our 64-bit limb rows.
#pragma once

#include <cgbn/cgbn.h>

namespace unifl_cgbn {

template <uint32_t tpi, uint32_t bits>
struct Params {
    static const uint32_t TPB = 0;
    static const uint32_t MAX_ROTATION = 4;
    static const uint32_t SHM_LIMIT = 0;
    static const bool CONSTANT_TIME = false;
    static const uint32_t TPI = tpi;
    static const uint32_t BITS = bits;
};

template <class P>
__global__ void k_powm(cgbn_mem_t<P::BITS> *out, const cgbn_mem_t<P::BITS> *base,
                       const cgbn_mem_t<P::BITS> *exps, int e_shared, const cgbn_mem_t<P::BITS> *mod,
                       long long n) {
    typedef cgbn_context_t<P::TPI, P> context_t;
    typedef cgbn_env_t<context_t, P::BITS> env_t;
    const long long inst = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / P::TPI;
    if (inst >= n) return;  // all TPI lanes of an instance leave together
    context_t ctx(cgbn_no_checks);
    env_t env(ctx);
    typename env_t::cgbn_t x, e, m, r, t;
    typename env_t::cgbn_local_t table[16];
    cgbn_load(env, x, const_cast<cgbn_mem_t<P::BITS> *>(base + inst));
    cgbn_load(env, e, const_cast<cgbn_mem_t<P::BITS> *>(exps + (e_shared ? 0 : inst)));
    cgbn_load(env, m, const_cast<cgbn_mem_t<P::BITS> *>(mod));
    const uint32_t np0 = cgbn_bn2mont(env, x, x, m);
    cgbn_set_ui32(env, t, 1);
    cgbn_bn2mont(env, t, t, m);
    cgbn_store(env, table + 0, t);
    cgbn_set(env, t, x);
    cgbn_store(env, table + 1, t);
    for (int d = 2; d < 16; ++d) {
        cgbn_mont_mul(env, t, t, x, m, np0);
        cgbn_store(env, table + d, t);
    }
    const int nbits = (int)P::BITS - (int)cgbn_clz(env, e);
    int pos = ((nbits + 3) / 4) * 4 - 4;
    if (nbits == 0) {
        cgbn_load(env, r, table + 0);
        pos = 0;
    } else {
        cgbn_load(env, r, table + cgbn_extract_bits_ui32(env, e, pos, 4));
    }
    while (pos > 0) {
        for (int s = 0; s < 4; ++s) cgbn_mont_sqr(env, r, r, m, np0);
        pos -= 4;
        cgbn_load(env, t, table + cgbn_extract_bits_ui32(env, e, pos, 4));
        cgbn_mont_mul(env, r, r, t, m, np0);
    }
    cgbn_mont2bn(env, r, r, m, np0);
    cgbn_store(env, out + inst, r);
}

template <class P>
cudaError_t launch_powm(u64 *out, const u64 *base, const u64 *exps, int e_shared, const u64 *mod, long long n,
                        cudaStream_t stream) {
    typedef cgbn_mem_t<P::BITS> mem;
    const int tpb = 128;
    const long long ipb = tpb / P::TPI;
    k_powm<P><<<(unsigned)((n + ipb - 1) / ipb), tpb, 0, stream>>>(
        (mem *)out, (const mem *)base, (const mem *)exps, e_shared, (const mem *)mod, n);
    return cudaGetLastError();
}

}  // namespace unifl_cgbn

extern "C" {

// base^e mod m (plain in and out) for a modulus of L <= 64 limbs and exponents of le limbs (<= the
// class width); rows element-major.  kErrSize when the sizes fall outside the CGBN classes.
int unifl_gpu_cgbn_mod_exp(int device, const u64 *mod, int L, const u64 *base, const u64 *exps, int le,
                           int e_shared, u64 *out, long long n) {
    const int W = L <= 16 ? 16 : L <= 32 ? 32 : L <= 64 ? 64 : 0;  // words of the CGBN class
    if (!W || le > W) return kErrSize;
    Device *dev;
    int e0 = open_device(device, &dev);
    if (e0) return e0;
    return on_device(*dev, [&](Device &d) -> int {
        const long long lo = 0, cnt = n;
        const size_t wb = size_t(cnt) * W, we = size_t(e_shared ? 1 : cnt) * W;
        cudaError_t e = d.reserve(2 * wb + we + W, 2 * wb + we + W);
        if (e) return (int)e;
        u64 *h = d.pinned;
        std::memset(h, 0, (wb + we + W) * 8);
        for (long long i = 0; i < cnt; ++i) std::memcpy(h + i * W, base + (lo + i) * L, size_t(L) * 8);
        for (long long i = 0; i < (e_shared ? 1 : cnt); ++i)
            std::memcpy(h + wb + i * W, exps + (e_shared ? 0 : (lo + i) * le), size_t(le) * 8);
        std::memcpy(h + wb + we, mod, size_t(L) * 8);
        if ((e = cudaMemcpyAsync(d.arena, h, (wb + we + W) * 8, cudaMemcpyHostToDevice, d.stream))) return (int)e;
        d.uploads += 1;
        d.launches += 1;
        u64 *dout = d.arena + wb + we + W;
        if (W == 16)
            e = unifl_cgbn::launch_powm<unifl_cgbn::Params<8, 1024>>(dout, d.arena, d.arena + wb, e_shared,
                                                                     d.arena + wb + we, cnt, d.stream);
        else if (W == 32)
            e = unifl_cgbn::launch_powm<unifl_cgbn::Params<16, 2048>>(dout, d.arena, d.arena + wb, e_shared,
                                                                      d.arena + wb + we, cnt, d.stream);
        else
            e = unifl_cgbn::launch_powm<unifl_cgbn::Params<32, 4096>>(dout, d.arena, d.arena + wb, e_shared,
                                                                      d.arena + wb + we, cnt, d.stream);
        if (e) return (int)e;
        if ((e = cudaMemcpyAsync(h + wb + we + W, dout, wb * 8, cudaMemcpyDeviceToHost, d.stream))) return (int)e;
        d.downloads += 1;
        int r = finish(d);
        if (!r)
            for (long long i = 0; i < cnt; ++i)
                std::memcpy(out + (lo + i) * L, h + wb + we + W + i * W, size_t(L) * 8);
        return r;
    });
}

}  // extern "C"

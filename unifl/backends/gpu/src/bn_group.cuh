// UniFL gpu backend: cooperative big-number arithmetic.  One instance (one big number, one Paillier
// operation) is held by a *group* of TPI threads of a warp; lane t of the group keeps the 32-bit
// words [t·LPT, (t+1)·LPT) of every number in registers, so a number of the size class has
// C = TPI·LPT words and no thread holds more than LPT of them.  Carries cross lanes through warp
// shuffles and votes.
//
// Single source, two policies.  Every routine here is a template over a lane policy G:
//   WarpLanes<TPI>  (nvcc, device)  a per-lane value is a plain register (u32 / u64 / bool), the
//                                   group primitives are __shfl_sync / __ballot_sync on the group's
//                                   lanes (on the whole warp for WarpLanes<TPI, true>, whose kernels
//                                   keep every group of a warp on the same path);
//   HostLanes<TPI>  (g++, host)     a per-lane value is Lanes<T, TPI>, the values of all TPI lanes,
//                                   and every operation runs on all of them in lockstep; a shuffle
//                                   reads another lane's slot, a vote builds the mask.
// Lane-varying values have the policy's types (G::W, G::D, G::B); group-uniform values (a shuffled
// broadcast, a vote mask, loop counters) are plain scalars.  So on the host a lane-varying value
// used where a uniform one is needed (a branch, a loop bound) does not compile: control flow is
// uniform within a group by construction, which is what makes the warp code converge and the
// host emulation exact.  The policies' carry chains (G::Chain: PTX .cc instructions on the device,
// their carry flag emulated and checked per lane on the host) are the same duality for the adds.
//
// Math.  MontMult is word-serial CIOS (Koç, Acar, Kaliski 1996) distributed over the lanes: per
// word a_i of the multiplier, every lane adds a_i·b and q·m on its own words (q = t_0·(−m^-1) mod
// 2^32 from lane 0, one broadcast), and the whole accumulator shifts down one word (one shuffle).
// A lane keeps its part as 64-bit pairs at even and odd word offsets, so each 32×32→64 product is
// one multiply-add with carry in and out on a chain (mont_step); carries between lanes are not
// propagated per word: the words above a lane's top stay with it until they shift down, and one
// carry resolution (a vote-based carry-lookahead over the lanes) runs at the end.  So a MontMult of
// n words is n steps of 2·LPT products per lane -- 2n² products over the group, the 4n² IMAD slots
// of the model -- plus 3 shuffles per word.  R = 2^(32·n32) with n32 = 2·L the modulus' own word
// count (the same R = 2^(64·L) as unifl.core.montgomery), whatever the class.
//
// Carry lookahead over lanes.  After each lane has added what it owns, lane i either generates a
// carry (g_i), propagates one (all its words are ones: p_i), or kills it; the carries into the
// lanes are then c = ((G + (G|P)) ^ P) for the vote masks G, P (bit i of G + (G|P) sees the carry
// of an integer addition that generates at g and passes at p), and bit TPI is the carry out.
// Borrows resolve the same way with "all words zero" as the propagate condition.
//
// Not constant time, like the one-thread kernels (see bn_core.cuh): the secret-exponent bodies
// use a fixed digit schedule (no skipped zero digits) so both CRT halves of a group run the same
// instruction stream, but table reads are indexed by the digits.
#pragma once

#include "kernels.cuh"  // bn_core.cuh, ModCtx, Lay

// fully unrolled loops over a lane's words keep them in registers (static indices); device code
// only: nvcc's host pass would hand the pragma to g++, which warns (an error under -Werror)
#ifdef __CUDA_ARCH__
#define UNIFL_UNROLL _Pragma("unroll")
#else
#define UNIFL_UNROLL
#endif

namespace unifl_gpu {
namespace coop {

typedef uint32_t u32;

// =============================================================================== carry chains
// A carry chain is a run of additions that pass one carry flag from each to the next, as PTX's
// `.cc` / `c` instruction forms do: the chain's first operation sets the flag (mad_cc, add_cc),
// the ones in between read and set it (madc_cc, addc_cc), the last reads it (addc).  A product
// `mad_cc(a, b, c)` = c + a·b with a, b 32-bit and c, the result 64-bit: ptxas turns each
// mul.wide.u32 + add(c).cc.u64 pair into ONE IMAD.WIDE.U32 with a carry-out (and carry-in)
// predicate, so a chain of k products is k instructions.
//
// Device: each operation is one `asm volatile` statement; the flag lives in the hardware's carry
// bit between them.  That is only sound if nothing that writes the flag runs in between: a chain
// is written as consecutive calls with no other arithmetic interleaved, and no C++ code nvcc could
// lower to carry instructions (it never does for 32/64-bit integers) appears inside a chain.
// Host: DeviceChain's twin HostChain keeps the flag per lane and checks the protocol (a chain must
// start with a flag-setting operation, and a flag is read at most once per set), so the host
// harness runs, and verifies, every chain the device runs.
#ifdef __CUDACC__
struct DeviceChain {
    // c + a·b, sets the carry flag
    __device__ __forceinline__ u64 mad_cc(u32 a, u32 b, u64 c) {
        u64 d;
        asm volatile("{.reg .u64 p;\n\tmul.wide.u32 p, %1, %2;\n\tadd.cc.u64 %0, p, %3;}"
                     : "=l"(d)
                     : "r"(a), "r"(b), "l"(c));
        return d;
    }
    // c + a·b + carry, sets the carry flag
    __device__ __forceinline__ u64 madc_cc(u32 a, u32 b, u64 c) {
        u64 d;
        asm volatile("{.reg .u64 p;\n\tmul.wide.u32 p, %1, %2;\n\taddc.cc.u64 %0, p, %3;}"
                     : "=l"(d)
                     : "r"(a), "r"(b), "l"(c));
        return d;
    }
    __device__ __forceinline__ u64 add_cc(u64 a, u64 b) {
        u64 d;
        asm volatile("add.cc.u64 %0, %1, %2;" : "=l"(d) : "l"(a), "l"(b));
        return d;
    }
    __device__ __forceinline__ u64 addc_cc(u64 a, u64 b) {
        u64 d;
        asm volatile("addc.cc.u64 %0, %1, %2;" : "=l"(d) : "l"(a), "l"(b));
        return d;
    }
    // a + b + carry (ends the chain)
    __device__ __forceinline__ u64 addc(u64 a, u64 b) {
        u64 d;
        asm volatile("addc.u64 %0, %1, %2;" : "=l"(d) : "l"(a), "l"(b));
        return d;
    }
    __device__ __forceinline__ u32 add_cc(u32 a, u32 b) {
        u32 d;
        asm volatile("add.cc.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        return d;
    }
    __device__ __forceinline__ u32 addc_cc(u32 a, u32 b) {
        u32 d;
        asm volatile("addc.cc.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        return d;
    }
    __device__ __forceinline__ u32 addc(u32 a, u32 b) {
        u32 d;
        asm volatile("addc.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        return d;
    }
    // a − b, sets the flag to the borrow; subc: a − (b + borrow)
    __device__ __forceinline__ u32 sub_cc(u32 a, u32 b) {
        u32 d;
        asm volatile("sub.cc.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        return d;
    }
    __device__ __forceinline__ u32 subc_cc(u32 a, u32 b) {
        u32 d;
        asm volatile("subc.cc.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        return d;
    }
    __device__ __forceinline__ u32 subc(u32 a, u32 b) {
        u32 d;
        asm volatile("subc.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
        return d;
    }
};
#endif

// =============================================================================== lane policies
#ifdef __CUDACC__
// kWarp: every group of the warp runs the same control flow at every shuffle and vote (the kernel
// keeps them converged: no group leaves early, and no branch that differs between groups has a
// group primitive inside), so the primitives name the whole warp.  A constant full mask spares
// ptxas the divergence checks and the diverged-warp copies of the code that a mask computed from
// the lane index costs.  Without kWarp the mask is the group's lanes, and groups may diverge.
template <int TPI_, bool kWarp = false>
struct WarpLanes {
    static constexpr int TPI = TPI_;
    static constexpr bool kConverged = kWarp;
    typedef u32 W;   // a lane's 32-bit word
    typedef u64 D;   // a lane's 64-bit value
    typedef bool B;  // a lane's predicate
    typedef WarpLanes<TPI_ / 2, kWarp> Half;

    __device__ __forceinline__ static int base() { return (int)(threadIdx.x & 31u) & ~(TPI - 1); }
    __device__ __forceinline__ static u32 mask() {
        return TPI == 32 || kWarp ? 0xffffffffu : (((1u << (TPI & 31)) - 1u) << base());
    }
    // an invariant of the arithmetic that the host harness verifies (nothing on the device)
    __device__ __forceinline__ static void check(B) {}
    // the largest of a group-uniform value over the warp's groups (uniform over the warp)
    __device__ __forceinline__ static int warp_max(int v) {
        return kWarp ? __reduce_max_sync(0xffffffffu, v) : v;
    }
    __device__ __forceinline__ static W lane() { return threadIdx.x & (TPI - 1); }
    // value of lane `src` (uniform) to every lane, as a uniform scalar
    __device__ __forceinline__ static u32 bcast(W x, int src) {
        return __shfl_sync(mask(), x, src, TPI);
    }
    // lane i gets lane (i + 1) mod TPI's value (the top lane gets lane 0's)
    __device__ __forceinline__ static W next(W x) {
        return __shfl_sync(mask(), x, (int)lane() + 1, TPI);
    }
    // lane i gets lane i + d's value (0 past the top lane)
    __device__ __forceinline__ static W down(W x, int d) {
        const W y = __shfl_down_sync(mask(), x, d, TPI);
        return (int)lane() + d < TPI ? y : 0u;
    }
    __device__ __forceinline__ static D down(D x, int d) {
        const u32 lo = __shfl_down_sync(mask(), (u32)x, d, TPI);
        const u32 hi = __shfl_down_sync(mask(), (u32)(x >> 32), d, TPI);
        return (int)lane() + d < TPI ? ((D)hi << 32 | lo) : 0ull;
    }
    // lane i gets lane i − d's value (0 below lane 0)
    __device__ __forceinline__ static W up(W x, int d) {
        const W y = __shfl_up_sync(mask(), x, d, TPI);
        return (int)lane() >= d ? y : 0u;
    }
    __device__ __forceinline__ static D up(D x, int d) {
        const u32 lo = __shfl_up_sync(mask(), (u32)x, d, TPI);
        const u32 hi = __shfl_up_sync(mask(), (u32)(x >> 32), d, TPI);
        return (int)lane() >= d ? ((D)hi << 32 | lo) : 0ull;
    }
    // bit t = lane t's predicate
    __device__ __forceinline__ static u32 ballot(B p) {
        const u32 b = __ballot_sync(mask(), p) >> base();
        return TPI == 32 ? b : b & ((1u << (TPI & 31)) - 1u);
    }
    __device__ __forceinline__ static D gather(const u64 *p, D idx, B ok) {
        return ok ? p[idx] : 0ull;
    }
    // a read that bypasses L1: values another block wrote before a fence (see arrive)
    __device__ __forceinline__ static D gather_cg(const u64 *p, D idx, B ok) {
        return ok ? __ldcg(p + idx) : 0ull;
    }
    __device__ __forceinline__ static void scatter(u64 *p, D idx, D v, B ok) {
        if (ok) p[idx] = v;
    }
    // a group's slice of shared memory: word `lane` of a row of TPI words
    __device__ __forceinline__ static W ld(const u32 *row) { return row[lane()]; }
    __device__ __forceinline__ static void st(u32 *row, W x) { row[lane()] = x; }
    // Counts this group's arrival at `counter` after its global stores; returns the count before
    // (uniform).  Every lane fences its own stores first, so the group that arrives last sees the
    // others' values (read them with gather_cg).
    __device__ __forceinline__ static u32 arrive(unsigned int *counter) {
        __threadfence();
        __syncwarp(mask());
        u32 old = 0;
        if (lane() == 0) old = atomicAdd(counter, 1u);
        old = __shfl_sync(mask(), old, 0, TPI);
        __threadfence();
        return old;
    }
    __device__ __forceinline__ static void flag(unsigned int *counter) {
        if (lane() == 0) atomicAdd(counter, 1u);
    }
    // Runs f(H, s) on the two half-groups of TPI/2 lanes at once (s = 0 for the lower lanes, 1 for
    // the upper ones); each thread is in one of them, so a value of the half is the same register.
    template <class F>
    __device__ __forceinline__ static void halves(F f) {
        f(Half(), (int)(lane() >= (W)(TPI / 2)));
    }
    typedef DeviceChain Chain;
};
#endif

#ifndef __CUDA_ARCH__
}  // namespace coop
}  // namespace unifl_gpu
#include <cstdlib>
namespace unifl_gpu {
namespace coop {
// The values of all N lanes of a group, operated on in lockstep (host emulation only).
template <class T, int N>
struct Lanes {
    T v[N];
    Lanes() = default;
    Lanes(T x) {  // a uniform value seen by every lane
        for (int i = 0; i < N; ++i) v[i] = x;
    }
};

template <class T>
struct Id {
    typedef T type;
};

#define UNIFL_LANE_BINOP(op, R) \
    template <class T, int N> \
    inline Lanes<R, N> operator op(const Lanes<T, N> &a, const Lanes<T, N> &b) { \
        Lanes<R, N> r; \
        for (int i = 0; i < N; ++i) r.v[i] = (R)(a.v[i] op b.v[i]); \
        return r; \
    } \
    template <class T, int N> \
    inline Lanes<R, N> operator op(const Lanes<T, N> &a, typename Id<T>::type b) { \
        return a op Lanes<T, N>(b); \
    } \
    template <class T, int N> \
    inline Lanes<R, N> operator op(typename Id<T>::type a, const Lanes<T, N> &b) { \
        return Lanes<T, N>(a) op b; \
    }
UNIFL_LANE_BINOP(+, T)
UNIFL_LANE_BINOP(-, T)
UNIFL_LANE_BINOP(*, T)
UNIFL_LANE_BINOP(&, T)
UNIFL_LANE_BINOP(|, T)
UNIFL_LANE_BINOP(^, T)
UNIFL_LANE_BINOP(>>, T)
UNIFL_LANE_BINOP(<<, T)
UNIFL_LANE_BINOP(==, bool)
UNIFL_LANE_BINOP(!=, bool)
UNIFL_LANE_BINOP(<, bool)
UNIFL_LANE_BINOP(>=, bool)
#undef UNIFL_LANE_BINOP

template <int N>
inline Lanes<bool, N> operator!(const Lanes<bool, N> &a) {
    Lanes<bool, N> r;
    for (int i = 0; i < N; ++i) r.v[i] = !a.v[i];
    return r;
}

template <int N>
inline Lanes<u64, N> widen(const Lanes<u32, N> &a) {
    Lanes<u64, N> r;
    for (int i = 0; i < N; ++i) r.v[i] = a.v[i];
    return r;
}
template <int N>
inline Lanes<u32, N> narrow(const Lanes<u64, N> &a) {
    Lanes<u32, N> r;
    for (int i = 0; i < N; ++i) r.v[i] = (u32)a.v[i];
    return r;
}
template <class T, int N>
inline Lanes<T, N> sel(const Lanes<bool, N> &c, const Lanes<T, N> &a, const Lanes<T, N> &b) {
    Lanes<T, N> r;
    for (int i = 0; i < N; ++i) r.v[i] = c.v[i] ? a.v[i] : b.v[i];
    return r;
}

// The carry flag of DeviceChain, per lane, with the chain protocol checked: reading a flag that no
// operation of the chain set (a chain that starts with a `c` form, or reads the flag twice) aborts,
// since on the device that flag would be whatever some earlier instruction left.
template <int N>
struct HostChain {
    typedef Lanes<u32, N> W;
    typedef Lanes<u64, N> D;
    Lanes<u32, N> cf{0u};
    bool live = false;

    u32 take(int i) {
        if (!live) std::abort();  // a carry read with no carry set in this chain
        return cf.v[i];
    }
    D mad_cc(const W &a, const W &b, const D &c) { return mad(a, b, c, false); }
    D madc_cc(const W &a, const W &b, const D &c) { return mad(a, b, c, true); }
    D add_cc(const D &a, const D &b) { return add64(a, b, false, true); }
    D addc_cc(const D &a, const D &b) { return add64(a, b, true, true); }
    D addc(const D &a, const D &b) { return add64(a, b, true, false); }
    W add_cc(const W &a, const W &b) { return add32(a, b, false, true); }
    W addc_cc(const W &a, const W &b) { return add32(a, b, true, true); }
    W addc(const W &a, const W &b) { return add32(a, b, true, false); }
    W sub_cc(const W &a, const W &b) { return sub32(a, b, false, true); }
    W subc_cc(const W &a, const W &b) { return sub32(a, b, true, true); }
    W subc(const W &a, const W &b) { return sub32(a, b, true, false); }

  private:
    D mad(const W &a, const W &b, const D &c, bool cin) {
        D r;
        Lanes<u32, N> out;
        for (int i = 0; i < N; ++i) {
            const unsigned __int128 s =
                (unsigned __int128)((u64)a.v[i] * b.v[i]) + c.v[i] + (cin ? take(i) : 0u);
            r.v[i] = (u64)s;
            out.v[i] = (u32)(s >> 64);
        }
        cf = out;
        live = true;
        return r;
    }
    D add64(const D &a, const D &b, bool cin, bool cout) {
        D r;
        Lanes<u32, N> out;
        for (int i = 0; i < N; ++i) {
            const unsigned __int128 s = (unsigned __int128)a.v[i] + b.v[i] + (cin ? take(i) : 0u);
            r.v[i] = (u64)s;
            out.v[i] = (u32)(s >> 64);
        }
        cf = out;
        live = cout;
        return r;
    }
    W sub32(const W &a, const W &b, bool bin, bool bout) {  // the flag is the borrow
        W r;
        Lanes<u32, N> out;
        for (int i = 0; i < N; ++i) {
            const u64 sb = (u64)b.v[i] + (bin ? take(i) : 0u);
            r.v[i] = (u32)((u64)a.v[i] - sb);
            out.v[i] = (u32)((u64)a.v[i] < sb);
        }
        cf = out;
        live = bout;
        return r;
    }
    W add32(const W &a, const W &b, bool cin, bool cout) {
        W r;
        Lanes<u32, N> out;
        for (int i = 0; i < N; ++i) {
            const u64 s = (u64)a.v[i] + b.v[i] + (cin ? take(i) : 0u);
            r.v[i] = (u32)s;
            out.v[i] = (u32)(s >> 32);
        }
        cf = out;
        live = cout;
        return r;
    }
};

// The warp-wide digit count a converged host run stands in for (HostLanes<TPI, true>::warp_max): the
// harness sets it to the largest of the call before running it.
inline int &host_warp_digits() {
    static int v = 0;
    return v;
}

// kWarp: the converged-warp policy's semantics (WarpLanes<TPI, true>) for the bodies that branch on
// it: warp_max answers the call's largest value (host_warp_digits), as a warp of groups would.
template <int TPI_, bool kWarp = false>
struct HostLanes {
    static constexpr int TPI = TPI_;
    static constexpr bool kConverged = kWarp;
    typedef Lanes<u32, TPI> W;
    typedef Lanes<u64, TPI> D;
    typedef Lanes<bool, TPI> B;
    typedef HostLanes<TPI_ / 2, kWarp> Half;

    static W lane() {
        W r;
        for (int i = 0; i < TPI; ++i) r.v[i] = (u32)i;
        return r;
    }
    static u32 bcast(const W &x, int src) { return x.v[src]; }
    static int warp_max(int v) { return kWarp && host_warp_digits() > v ? host_warp_digits() : v; }
    // an invariant of the arithmetic: a lane that breaks it stops the harness
    static void check(const B &ok) {
        for (int i = 0; i < TPI; ++i)
            if (!ok.v[i]) std::abort();
    }
    static W next(const W &x) {
        W r;
        for (int i = 0; i < TPI; ++i) r.v[i] = x.v[(i + 1) % TPI];
        return r;
    }
    template <class V>
    static V down(const V &x, int d) {
        V r;
        for (int i = 0; i < TPI; ++i) r.v[i] = i + d < TPI ? x.v[i + d] : 0;
        return r;
    }
    template <class V>
    static V up(const V &x, int d) {
        V r;
        for (int i = 0; i < TPI; ++i) r.v[i] = i >= d ? x.v[i - d] : 0;
        return r;
    }
    static u32 ballot(const B &p) {
        u32 m = 0;
        for (int i = 0; i < TPI; ++i) m |= (u32)p.v[i] << i;
        return m;
    }
    static D gather(const u64 *p, const D &idx, const B &ok) {
        D r;
        for (int i = 0; i < TPI; ++i) r.v[i] = ok.v[i] ? p[idx.v[i]] : 0;
        return r;
    }
    static D gather_cg(const u64 *p, const D &idx, const B &ok) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return gather(p, idx, ok);
    }
    static void scatter(u64 *p, const D &idx, const D &v, const B &ok) {
        for (int i = 0; i < TPI; ++i)
            if (ok.v[i]) p[idx.v[i]] = v.v[i];
    }
    static W ld(const u32 *row) {
        W r;
        for (int i = 0; i < TPI; ++i) r.v[i] = row[i];
        return r;
    }
    static void st(u32 *row, const W &x) {
        for (int i = 0; i < TPI; ++i) row[i] = x.v[i];
    }
    static u32 arrive(unsigned int *counter) {
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        const u32 old = __atomic_fetch_add(counter, 1u, __ATOMIC_SEQ_CST);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        return old;
    }
    static void flag(unsigned int *counter) { __atomic_fetch_add(counter, 1u, __ATOMIC_SEQ_CST); }
    // the two halves one after the other (their work is independent until they exchange values
    // through the full group, which the bodies do outside this call)
    template <class F>
    static void halves(F f) {
        f(Half(), 0);
        f(Half(), 1);
    }
    typedef HostChain<TPI_> Chain;
};
#endif

#ifdef __CUDACC__
__device__ __forceinline__ u64 widen(u32 a) { return a; }
__device__ __forceinline__ u32 narrow(u64 a) { return (u32)a; }
template <class T>
__device__ __forceinline__ T sel(bool c, T a, T b) {
    return c ? a : b;
}
#endif

// ================================================================================ numbers
// A number of the group's size class: lane t holds words w[0..LPT) = words t·LPT .. t·LPT+LPT−1.
template <class G, int LPT>
struct Num {
    typename G::W w[LPT];
};

template <class G, int LPT>
UNIFL_HD void set_u32(Num<G, LPT> &x, u32 low) {  // x = low (a one-word value)
    const typename G::B l0 = G::lane() == 0u;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k)
        x.w[k] = sel(l0, typename G::W(k == 0 ? low : 0u), typename G::W(0u));
}

// Moves a full group's number to a half group: on the device the same registers (each thread is in
// one half); on the host the lanes of half s.
template <class G, int LPT>
UNIFL_HD Num<typename G::Half, LPT> to_half(const Num<G, LPT> &x, int s) {
    Num<typename G::Half, LPT> h;
#ifdef __CUDA_ARCH__
    (void)s;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) h.w[k] = x.w[k];
#else
    for (int k = 0; k < LPT; ++k)
        for (int i = 0; i < G::TPI / 2; ++i) h.w[k].v[i] = x.w[k].v[s * (G::TPI / 2) + i];
#endif
    return h;
}

template <class G, int LPT>
UNIFL_HD void from_half(Num<G, LPT> &x, const Num<typename G::Half, LPT> &h, int s) {
#ifdef __CUDA_ARCH__
    (void)s;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) x.w[k] = h.w[k];
#else
    for (int k = 0; k < LPT; ++k)
        for (int i = 0; i < G::TPI / 2; ++i) x.w[k].v[s * (G::TPI / 2) + i] = h.w[k].v[i];
#endif
}

// Keeps the words of lanes below `lanes` (uniform), zeroes the others.
template <class G, int LPT>
UNIFL_HD void keep_lanes_below(Num<G, LPT> &x, int lanes) {
    const typename G::B keep = G::lane() < (u32)lanes;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) x.w[k] = sel(keep, x.w[k], typename G::W(0u));
}

// Keeps words below `words` (uniform), zeroes the others.
template <class G, int LPT>
UNIFL_HD void keep_words_below(Num<G, LPT> &x, int words) {
    const typename G::W first = G::lane() * (u32)LPT;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k)
        x.w[k] = sel(first + (u32)k < (u32)words, x.w[k], typename G::W(0u));
}

// ---- global memory: element i of a batch of 64-bit limbs (limb j at src[i·se + j·sl]), L limbs,
// starting at limb `off` of the element; words past limb L read as 0 and are not written.  A lane's
// limbs are consecutive: one 64-bit index for its first, then steps of sl (32-bit limb numbers
// for the bounds).
template <class G, int LPT>
UNIFL_HD typename G::D first_limb_index(const Lay &y, long long i, int off) {
    return widen(G::lane() * (u32)(LPT / 2) + (u32)off) * (u64)y.sl + (u64)(i * y.se);
}

template <class G, int LPT>
UNIFL_HD void load(Num<G, LPT> &x, const u64 *src, const Lay &y, long long i, int L, int off = 0) {
    static_assert(LPT % 2 == 0, "a lane holds whole 64-bit limbs");
    typedef typename G::D D;
    D idx = first_limb_index<G, LPT>(y, i, off);
    UNIFL_UNROLL
    for (int k = 0; k < LPT / 2; ++k) {
        const D v = G::gather(src, idx, G::lane() * (u32)(LPT / 2) + (u32)k < (u32)L);
        x.w[2 * k] = narrow(v);
        x.w[2 * k + 1] = narrow(v >> 32);
        idx = idx + (u64)y.sl;
    }
}

// the same through gather_cg (values other groups wrote in this launch)
template <class G, int LPT>
UNIFL_HD void load_cg(Num<G, LPT> &x, const u64 *src, const Lay &y, long long i, int L) {
    typedef typename G::D D;
    D idx = first_limb_index<G, LPT>(y, i, 0);
    UNIFL_UNROLL
    for (int k = 0; k < LPT / 2; ++k) {
        const D v = G::gather_cg(src, idx, G::lane() * (u32)(LPT / 2) + (u32)k < (u32)L);
        x.w[2 * k] = narrow(v);
        x.w[2 * k + 1] = narrow(v >> 32);
        idx = idx + (u64)y.sl;
    }
}

// (dst null: nothing is written -- a group that only keeps its warp converged)
template <class G, int LPT>
UNIFL_HD void store(u64 *dst, const Lay &y, long long i, int L, const Num<G, LPT> &x) {
    typedef typename G::D D;
    const u32 limbs = dst ? (u32)L : 0u;
    D idx = first_limb_index<G, LPT>(y, i, 0);
    UNIFL_UNROLL
    for (int k = 0; k < LPT / 2; ++k) {
        G::scatter(dst, idx, widen(x.w[2 * k]) | (widen(x.w[2 * k + 1]) << 32),
                   G::lane() * (u32)(LPT / 2) + (u32)k < limbs);
        idx = idx + (u64)y.sl;
    }
}

// a constant of L limbs (a key blob field, shared by every instance)
template <class G, int LPT>
UNIFL_HD void load_const(Num<G, LPT> &x, const u64 *src, int L) {
    load<G, LPT>(x, src, Lay{0, 1}, 0, L);
}

// ---- shared memory: a number as LPT rows of TPI words (conflict-free: lane t reads bank t + k·TPI)
template <class G, int LPT>
UNIFL_HD void sload(Num<G, LPT> &x, const u32 *p) {
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) x.w[k] = G::ld(p + k * G::TPI);
}
template <class G, int LPT>
UNIFL_HD void sstore(u32 *p, const Num<G, LPT> &x) {
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) G::st(p + k * G::TPI, x.w[k]);
}

// ================================================================================ carries
// Resolves the carries between lanes once each lane has added its own parts: `c` is the lane's
// carry out (0 or 1).  Adds the carry into each lane and returns the carry out of the top lane.
template <class G, int LPT>
UNIFL_HD u32 resolve_carries(Num<G, LPT> &t, const typename G::W &c) {
    typedef typename G::W W;
    typename G::B ones = c == 0u;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) ones = ones & (t.w[k] == 0xffffffffu);
    const u64 g = G::ballot(c != 0u), p = G::ballot(ones);
    const u64 x = g + (g | p);
    const u32 cin = (u32)(x ^ p);
    typename G::Chain cc;
    t.w[0] = cc.add_cc(t.w[0], (W(cin) >> G::lane()) & 1u);
    UNIFL_UNROLL
    for (int k = 1; k < LPT - 1; ++k) t.w[k] = cc.addc_cc(t.w[k], W(0u));
    t.w[LPT - 1] = cc.addc(t.w[LPT - 1], W(0u));
    return (u32)(x >> G::TPI) & 1u;
}

// t += cin, cin a per-lane 64-bit value added at the lane's word 0; returns the carry out of the
// group (uniform).
template <class G, int LPT>
UNIFL_HD u32 add_in(Num<G, LPT> &t, const typename G::D &cin) {
    typedef typename G::W W;
    static_assert(LPT >= 2, "a 64-bit carry-in needs two words per lane");
    typename G::Chain cc;
    t.w[0] = cc.add_cc(t.w[0], narrow(cin));
    t.w[1] = cc.addc_cc(t.w[1], narrow(cin >> 32));
    UNIFL_UNROLL
    for (int k = 2; k < LPT; ++k) t.w[k] = cc.addc_cc(t.w[k], W(0u));
    const W c = cc.addc(W(0u), W(0u));
    return resolve_carries<G, LPT>(t, c);
}

// r = a + b; returns the carry out (uniform).  r may alias a or b.
template <class G, int LPT>
UNIFL_HD u32 add(Num<G, LPT> &r, const Num<G, LPT> &a, const Num<G, LPT> &b) {
    typedef typename G::W W;
    typename G::Chain cc;
    r.w[0] = cc.add_cc(a.w[0], b.w[0]);
    UNIFL_UNROLL
    for (int k = 1; k < LPT; ++k) r.w[k] = cc.addc_cc(a.w[k], b.w[k]);
    const W c = cc.addc(W(0u), W(0u));
    return resolve_carries<G, LPT>(r, c);
}

// r = a − b; returns the borrow out (uniform).  r may alias a or b.
template <class G, int LPT>
UNIFL_HD u32 sub(Num<G, LPT> &r, const Num<G, LPT> &a, const Num<G, LPT> &b) {
    typedef typename G::W W;
    typename G::Chain cc;
    r.w[0] = cc.sub_cc(a.w[0], b.w[0]);
    UNIFL_UNROLL
    for (int k = 1; k < LPT; ++k) r.w[k] = cc.subc_cc(a.w[k], b.w[k]);
    const W bw = cc.subc(W(0u), W(0u));  // 0, or all ones after a borrow
    // borrows between lanes: a lane whose words are all zero passes one on
    typename G::B zero = bw == 0u;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) zero = zero & (r.w[k] == 0u);
    const u64 g = G::ballot(bw != 0u), p = G::ballot(zero);
    const u64 x = g + (g | p);
    const u32 bin = (u32)(x ^ p);
    r.w[0] = cc.sub_cc(r.w[0], (W(bin) >> G::lane()) & 1u);
    UNIFL_UNROLL
    for (int k = 1; k < LPT - 1; ++k) r.w[k] = cc.subc_cc(r.w[k], W(0u));
    r.w[LPT - 1] = cc.subc(r.w[LPT - 1], W(0u));
    return (u32)(x >> G::TPI) & 1u;
}

// a == b (uniform)
template <class G, int LPT>
UNIFL_HD bool equal(const Num<G, LPT> &a, const Num<G, LPT> &b) {
    typename G::B eq = a.w[0] == b.w[0];
    UNIFL_UNROLL
    for (int k = 1; k < LPT; ++k) eq = eq & (a.w[k] == b.w[k]);
    return G::ballot(!eq) == 0u;
}

// a == v for a one-word v (uniform)
template <class G, int LPT>
UNIFL_HD bool equal_u32(const Num<G, LPT> &a, u32 v) {
    Num<G, LPT> b;
    set_u32<G, LPT>(b, v);
    return equal<G, LPT>(a, b);
}

// ================================================================================ modular
// A modulus as the group holds it: its words in registers, −m^-1 mod 2^32, its word count n32 and
// the blob context (R mod m, R² mod m are read from it when needed).
template <class G, int LPT>
struct Mod {
    Num<G, LPT> m;
    u32 m0inv;
    int n32;
    ModCtx ctx;
};

template <class G, int LPT>
UNIFL_HD Mod<G, LPT> make_mod(const ModCtx &k) {
    Mod<G, LPT> md;
    load_const<G, LPT>(md.m, k.m, k.L);
    md.m0inv = (u32)k.n0inv;  // −m^-1 mod 2^64, reduced mod 2^32
    md.n32 = 2 * k.L;
    md.ctx = k;
    return md;
}

// r = a − m if that does not borrow (or the value had a carry word `over`), else a
template <class G, int LPT>
UNIFL_HD void reduce_once(Num<G, LPT> &r, const Num<G, LPT> &a, u32 over, const Mod<G, LPT> &md) {
    Num<G, LPT> d;
    const u32 borrow = sub<G, LPT>(d, a, md.m);
    const bool take = over || !borrow;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) r.w[k] = take ? d.w[k] : a.w[k];
}

// One word step of mont_mul's accumulator (see there): x, y += ai·b, then q·m, then the whole
// value moves down one word.  x holds 64-bit pairs at even word offsets (x[k]: words 2k, 2k+1) and
// xt the word LPT above them; y pairs at odd offsets (y[k]: words 2k+1, 2k+2) and yt the word
// LPT + 1; w0 a word at offset 0 (up to 33 bits).  The lane's value is their sum; its words LPT and
// up are owed to the lane above, and between steps they total under 4 (CIOS keeps t < 2m), so one
// 32-bit word holds each top.  After the move down the parities swap: the caller passes (y, x).
template <class G, int LPT>
UNIFL_HD void mont_step(typename G::D (&x)[LPT / 2], typename G::W &xt, typename G::D (&y)[LPT / 2],
                        typename G::W &yt, typename G::D &w0, u32 ai, const Num<G, LPT> &b,
                        const Mod<G, LPT> &md) {
    typedef typename G::W W;
    typedef typename G::D D;
    constexpr int H = LPT / 2;
    typename G::Chain cc;
    // t += ai·b: even words of b into x, odd ones into y, each a chain of H products
    x[0] = cc.mad_cc(ai, b.w[0], x[0]);
    UNIFL_UNROLL
    for (int k = 1; k < H; ++k) x[k] = cc.madc_cc(ai, b.w[2 * k], x[k]);
    xt = cc.addc(xt, W(0u));
    y[0] = cc.mad_cc(ai, b.w[1], y[0]);
    UNIFL_UNROLL
    for (int k = 1; k < H; ++k) y[k] = cc.madc_cc(ai, b.w[2 * k + 1], y[k]);
    yt = cc.addc(yt, W(0u));
    // q = t_0·(−m^-1) mod 2^32 from lane 0, so that t + q·m ≡ 0 mod 2^32
    const u32 q = G::bcast(narrow(x[0]) + narrow(w0), 0) * md.m0inv;
    x[0] = cc.mad_cc(q, md.m.w[0], x[0]);
    UNIFL_UNROLL
    for (int k = 1; k < H; ++k) x[k] = cc.madc_cc(q, md.m.w[2 * k], x[k]);
    xt = cc.addc(xt, W(0u));
    y[0] = cc.mad_cc(q, md.m.w[1], y[0]);
    UNIFL_UNROLL
    for (int k = 1; k < H; ++k) y[k] = cc.madc_cc(q, md.m.w[2 * k + 1], y[k]);
    yt = cc.addc(yt, W(0u));
    // t /= 2^32: word 0 leaves the lane for the top of the lane below (lane 0's is 0 by the choice
    // of q, and reaches the top lane as the word above the class); what is left of x[0] stays
    const D s = widen(narrow(x[0])) + w0;
    const W in = G::next(narrow(s));
    w0 = (x[0] >> 32) + (s >> 32);
    // the x pairs move to odd offsets: x[k] -> (new y)[k − 1]; xt and the lane above's word land
    // at word LPT − 1, the low half of x[H − 1]'s new place
    UNIFL_UNROLL
    for (int k = 0; k < H - 1; ++k) x[k] = x[k + 1];
    x[H - 1] = widen(xt) + widen(in);
    xt = 0u;
}

// r = a·b·R^-1 mod m (R = 2^(32·n32)); a < R, b < m.  r may alias a or b.
//
// Word-serial CIOS over the lanes with the accumulator split into even- and odd-aligned 64-bit
// pairs (mont_step): a product a_i·b_j (32×32 → 64) lands on a whole pair, so each is ONE
// multiply-add with carry in and out (IMAD.WIDE.U32) in a chain over the lane's pairs, and the
// two sums are joined once at the end.  Per word of a, per lane: 2·LPT products in four chains of
// LPT/2, three shuffles (a_i, t_0 for q, the word moving down) and a handful of adds.
template <class G, int LPT>
UNIFL_HD void mont_mul(Num<G, LPT> &r, const Num<G, LPT> &a, const Num<G, LPT> &b,
                       const Mod<G, LPT> &md) {
    typedef typename G::W W;
    typedef typename G::D D;
    constexpr int H = LPT / 2;
    static_assert(LPT % 2 == 0 && LPT >= 2, "whole pairs of words per lane");
    D x[H], y[H], w0 = 0ull;
    W xt = 0u, yt = 0u;
    UNIFL_UNROLL
    for (int k = 0; k < H; ++k) x[k] = y[k] = 0ull;
    // the words of a by lanes: n32 / LPT whole lanes, then the first n32 % LPT words of the next
    // (n32 = 2·L and LPT are even, so steps go by pairs and x, y are back in place after each).
    // One lane's words per trip: two per trip measured the same instructions per word (the loop's
    // own moves and test vanish in the steps) for ten more registers in the exponentiations.
    const unsigned n32 = (unsigned)md.n32, full = n32 / LPT, rest = n32 % LPT;
    for (unsigned src = 0; src < full; ++src) {
        UNIFL_UNROLL
        for (int k = 0; k < LPT; k += 2) {
            mont_step<G, LPT>(x, xt, y, yt, w0, G::bcast(a.w[k], (int)src), b, md);
            mont_step<G, LPT>(y, yt, x, xt, w0, G::bcast(a.w[k + 1], (int)src), b, md);
        }
    }
    if (rest) {  // one pair at a time, the lane's words moving down two places per pair
        Num<G, LPT> as = a;
#ifdef __CUDA_ARCH__
#pragma unroll 1
#endif
        for (unsigned k = 0; k < rest; k += 2) {
            mont_step<G, LPT>(x, xt, y, yt, w0, G::bcast(as.w[0], (int)full), b, md);
            mont_step<G, LPT>(y, yt, x, xt, w0, G::bcast(as.w[1], (int)full), b, md);
            UNIFL_UNROLL
            for (int j = 0; j + 2 < LPT; ++j) as.w[j] = as.w[j + 2];
        }
    }
    // join: t = x + y·2^32 + w0, the lane's LPT words and what it owes the lane above (pend)
    typename G::Chain cc;
    D p[H];
    p[0] = cc.add_cc(x[0], w0);
    UNIFL_UNROLL
    for (int k = 1; k < H; ++k) p[k] = cc.addc_cc(x[k], D(0ull));
    const W pt = cc.addc(xt, W(0u));
    Num<G, LPT> t;
    t.w[0] = narrow(p[0]);
    t.w[1] = cc.add_cc(narrow(p[0] >> 32), narrow(y[0]));
    UNIFL_UNROLL
    for (int k = 1; k < H; ++k) {
        t.w[2 * k] = cc.addc_cc(narrow(p[k]), narrow(y[k - 1] >> 32));
        t.w[2 * k + 1] = cc.addc_cc(narrow(p[k] >> 32), narrow(y[k]));
    }
    const W lo = cc.addc_cc(pt, narrow(y[H - 1] >> 32));
    const W hi = cc.addc(yt, W(0u));
    G::check((hi == 0u) & (lo < 4u));  // the words above the lane's total under 4 (see mont_step)
    const D pend = widen(lo);  // the carries owed to the lane above (at the top lane: under 2)
    // the top lane's pending carry is the word above the class (at most 1: t < 2m)
    const u32 over_top = G::bcast(narrow(pend), G::TPI - 1);
    const u32 over = add_in<G, LPT>(t, G::up(pend, 1)) + over_top;
    reduce_once<G, LPT>(r, t, over, md);
}

// r = a²·R^-1 mod m
template <class G, int LPT>
UNIFL_HD void mont_sqr(Num<G, LPT> &r, const Num<G, LPT> &a, const Mod<G, LPT> &md) {
    mont_mul<G, LPT>(r, a, a, md);
}

template <class G, int LPT>
UNIFL_HD void to_mont(Num<G, LPT> &r, const Num<G, LPT> &a, const Mod<G, LPT> &md) {
    Num<G, LPT> r2;
    load_const<G, LPT>(r2, md.ctx.r2, md.ctx.L);
    mont_mul<G, LPT>(r, a, r2, md);
}

template <class G, int LPT>
UNIFL_HD void from_mont(Num<G, LPT> &r, const Num<G, LPT> &a, const Mod<G, LPT> &md) {
    Num<G, LPT> one;
    set_u32<G, LPT>(one, 1u);
    mont_mul<G, LPT>(r, a, one, md);
}

template <class G, int LPT>
UNIFL_HD void mont_one(Num<G, LPT> &r, const Mod<G, LPT> &md) {  // R mod m
    load_const<G, LPT>(r, md.ctx.r1, md.ctx.L);
}

// r = (a + b) mod m for a, b < m
template <class G, int LPT>
UNIFL_HD void mod_add(Num<G, LPT> &r, const Num<G, LPT> &a, const Num<G, LPT> &b,
                      const Mod<G, LPT> &md) {
    const u32 c = add<G, LPT>(r, a, b);
    reduce_once<G, LPT>(r, r, c, md);
}

// r = (a − b) mod m for a, b < m
// (no branch: m or 0 is added, so the groups of a warp stay converged)
template <class G, int LPT>
UNIFL_HD void mod_sub(Num<G, LPT> &r, const Num<G, LPT> &a, const Num<G, LPT> &b,
                      const Mod<G, LPT> &md) {
    const bool borrow = sub<G, LPT>(r, a, b) != 0;
    Num<G, LPT> m;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) m.w[k] = borrow ? md.m.w[k] : typename G::W(0u);
    add<G, LPT>(r, r, m);
}

// r = a·b mod 2^(32·words), the product's low `words` words (a full product when the class holds
// it); a has at most `a_words` nonzero words.  Schoolbook by words of a: b shifts up one word per
// step, every lane adds a_i·(its words of b), carries pending per lane as in mont_mul.
template <class G, int LPT>
UNIFL_HD void mul_low(Num<G, LPT> &r, const Num<G, LPT> &a, int a_words, const Num<G, LPT> &b,
                      int words) {
    typedef typename G::D D;
    Num<G, LPT> t, s = b;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) t.w[k] = 0u;
    D pend = 0ull;
    const int na = a_words < words ? a_words : words;
    for (int src = 0; src * LPT < na; ++src) {
        UNIFL_UNROLL
        for (int k = 0; k < LPT; ++k) {
            if (src * LPT + k >= na) break;
            const u32 ai = G::bcast(a.w[k], src);
            D c = 0ull;
            UNIFL_UNROLL
            for (int j = 0; j < LPT; ++j) {
                const D p = widen(s.w[j]) * (u64)ai + widen(t.w[j]) + c;
                t.w[j] = narrow(p);
                c = p >> 32;
            }
            pend = pend + c;
            // s ·= 2^32 (its top word leaves the class: only lower words are kept anyway)
            const typename G::W in = G::up(s.w[LPT - 1], 1);
            UNIFL_UNROLL
            for (int j = LPT - 1; j > 0; --j) s.w[j] = s.w[j - 1];
            s.w[0] = in;
        }
    }
    add_in<G, LPT>(t, G::up(pend, 1));
    keep_words_below<G, LPT>(t, words);
    r = t;
}

// ---- uniform word shifts (a number's words move by `sh` places; sh uniform)
template <class G, int LPT>
UNIFL_HD typename G::W pick(const Num<G, LPT> &x, int slot) {
    typename G::W v = x.w[0];
    UNIFL_UNROLL
    for (int k = 1; k < LPT; ++k)
        if (k == slot) v = x.w[k];
    return v;
}

// r = x / 2^(32·sh) (words move down)
template <class G, int LPT>
UNIFL_HD void shift_down_words(Num<G, LPT> &r, const Num<G, LPT> &x, int sh) {
    Num<G, LPT> o;
    UNIFL_UNROLL
    for (int k = 0; k < LPT; ++k) o.w[k] = G::down(pick<G, LPT>(x, (k + sh) % LPT), (k + sh) / LPT);
    r = o;
}

// ================================================================================ exponentiation
// Fixed windows of w bits (a kernel argument: 3, 4 or 5), 2^w table entries in the group's shared
// memory.  A smaller window halves the table (more groups per SM where shared memory caps them) for
// about one MontMult in 3w more per exponent bit; which wins is the device's to measure.
constexpr int kMinWindow = 3, kMaxWindow = 5;

// Words of shared memory one group's window table takes (plus TPI words of skew so that the
// tables of the groups of a warp start in different banks).
template <class G, int LPT>
UNIFL_HD constexpr int table_words(int w) {
    return (1 << w) * LPT * G::TPI + G::TPI;
}

// w bits of a (La limbs) from bit `pos`, 0 past them (uniform: every lane reads the same words)
UNIFL_HD unsigned bits_at(const u64 *a, int La, int pos, int w) {
    const int l = pos / 64, s = pos % 64;
    if (l >= La) return 0;
    u64 v = a[l] >> s;
    if (s + w > 64 && l + 1 < La) v |= a[l + 1] << (64 - s);
    return (unsigned)(v & ((1ull << w) - 1));
}

// w-bit digit d of an exponent of Le limbs
UNIFL_HD unsigned digit(const u64 *e, int Le, int d, int w) { return bits_at(e, Le, d * w, w); }

// digits to process for an exponent of Le limbs: through its top nonzero digit (0 for e = 0)
UNIFL_HD int exp_digits(const u64 *e, int Le, int w) {
    int top = Le - 1;
    while (top >= 0 && e[top] == 0) --top;
    if (top < 0) return 0;
    int bits = 64 * top;
    for (u64 v = e[top]; v; v >>= 1) ++bits;
    return (bits + w - 1) / w;
}

// r = x^e·R mod m for x̄ = x·R mod m (e of Le limbs), w-bit windows, the 2^w-entry table in the
// group's shared memory `tab`.
// `nd` digits are processed (>= exp_digits(e)); with `always_mul` a zero digit still multiplies
// (by entry 0 = R mod m), so the instruction stream depends only on nd -- the CRT halves of a
// group (different exponents, same nd) then run in step, and so do the groups of a converged warp.
template <class G, int LPT>
UNIFL_HD void mont_exp(Num<G, LPT> &r, const Num<G, LPT> &xbar, const u64 *e, int Le, int nd,
                       bool always_mul, const Mod<G, LPT> &md, u32 *tab, int w) {
    const int row = LPT * G::TPI;
    Num<G, LPT> acc, t;
    mont_one<G, LPT>(acc, md);
    if (nd <= 0) {
        r = acc;
        return;
    }
    sstore<G, LPT>(tab, acc);
    sstore<G, LPT>(tab + row, xbar);
    t = xbar;
    for (int d = 2; d < (1 << w); ++d) {
        mont_mul<G, LPT>(t, t, xbar, md);
        sstore<G, LPT>(tab + d * row, t);
    }
    sload<G, LPT>(acc, tab + digit(e, Le, nd - 1, w) * row);
    for (int d = nd - 2; d >= 0; --d) {
        for (int s = 0; s < w; ++s) mont_sqr<G, LPT>(acc, acc, md);
        const unsigned dig = digit(e, Le, d, w);
        if (dig || always_mul) {
            sload<G, LPT>(t, tab + dig * row);
            mont_mul<G, LPT>(acc, acc, t, md);
        }
    }
    r = acc;
}

}  // namespace coop
}  // namespace unifl_gpu

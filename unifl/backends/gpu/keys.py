"""Key blobs of the gpu kernels: every per-modulus / per-key constant in one uint64 array, built
once per key on the host and uploaded once per device (the layout is documented, and parsed, in
``src/kernels.cuh``; the host harness checks the two agree).

Constants (R = 2^(64·L) of the modulus in question):

* ModCtx  ``[n0', L, m, R mod m, R² mod m]``
* PubKey  ``[ModCtx(n²), Ln, n]``
* PrivKey the four contexts of p², q², p, q; ``Wp_j = Rp²^(j+2)·R_{n²}^-1 mod p²`` (so a wide
  reduction of c̄ = c·R_{n²} by Montgomery multiplications lands in p²'s domain), p − 1, q − 1,
  ``p^-1 mod 2^(64·Lp)`` (exact division (x − 1)/p as a multiplication), ``h_p·Rp² mod p``,
  ``h_q·Rq mod q``, ``Wpq_j = Rp^(j+2) mod p``, ``q^-1 mod p``, q, Ln.
* OwnerKey (key-owner encryption) ``[ModCtx(n²), ModCtx(p²), ModCtx(q²), Ln, n, Lp, p, Lq, q,
  (p²)^-1·R_{q²} mod q², R³ mod n²]``: a MontMult mod q² by the first constant multiplies by
  (p²)^-1 (Garner's step), a MontMult mod n² by the second turns g·x·R^-1 into g·x·R.
"""

from __future__ import annotations

import gmpy2
import numpy as np

from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.montgomery import MontContext, mont_context
from ...core.limbs import from_limbs, limb_count, to_limbs

MAX_LIMBS = 128  # largest instantiated size class: 8192-bit moduli


def _limbs(value: int, n: int) -> np.ndarray:
    return to_limbs([value], n)[0]


def _words(*vals: int) -> np.ndarray:
    return np.array(vals, dtype=np.uint64)


def ctx_blob(ctx: MontContext) -> np.ndarray:
    L = ctx.num_limbs
    return np.concatenate([_words(ctx.n0inv, L), ctx.m_limbs.astype(np.uint64),
                           _limbs(ctx.r_mod, L), _limbs(ctx.r2, L)])


def pub_blob(pk: PaillierPublicMaterial) -> np.ndarray:
    Ln = pk.n_ctx.num_limbs
    return np.concatenate([ctx_blob(pk.nsquare_ctx), _words(Ln), _limbs(pk.n, Ln)])


def _wide_reduction_constants(target: MontContext, chunks: int, factor: int) -> np.ndarray:
    """W_j = R^(j+2)·factor mod m for j < chunks (see reduce_wide in src/bn_core.cuh)."""
    m, R, L = target.m, target.R, target.num_limbs
    return np.concatenate([_limbs(pow(R, j + 2, m) * factor % m, L) for j in range(chunks)])


def priv_blob(sk: PaillierPrivateMaterial) -> np.ndarray:
    pk = sk.public_key
    n2 = pk.nsquare_ctx
    p2, q2 = sk.psquare_ctx, sk.qsquare_ctx
    pc, qc = mont_context(sk.p), mont_context(sk.q)
    L2, Ln = n2.num_limbs, pk.n_ctx.num_limbs
    parts = [ctx_blob(p2), ctx_blob(q2), ctx_blob(pc), ctx_blob(qc), _words(L2)]
    for sq in (p2, q2):
        k = -(-L2 // sq.num_limbs)
        parts += [_words(k), _wide_reduction_constants(sq, k, pow(n2.R, -1, sq.m))]
    for prime in (sk.p, sk.q):
        le = limb_count((prime - 1).bit_length())
        parts += [_words(le), _limbs(prime - 1, le)]
    parts += [_limbs(pow(sk.p, -1, pc.R), pc.num_limbs), _limbs(pow(sk.q, -1, qc.R), qc.num_limbs),
              _limbs(sk.hp * pc.R * pc.R % sk.p, pc.num_limbs),
              _limbs(sk.hq * qc.R % sk.q, qc.num_limbs)]
    kpq = -(-qc.num_limbs // pc.num_limbs)
    parts += [_words(kpq), _wide_reduction_constants(pc, kpq, 1),
              _limbs(sk.q_inverse, pc.num_limbs), _limbs(sk.q, qc.num_limbs), _words(Ln)]
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.uint64)


def owner_blob(sk: PaillierPrivateMaterial) -> np.ndarray:
    """The key-owner encryption blob of a private record (p < q, as the records keep them)."""
    pk = sk.public_key
    n2, p2, q2 = pk.nsquare_ctx, sk.psquare_ctx, sk.qsquare_ctx
    Ln, Lp, Lq = pk.n_ctx.num_limbs, sk.p_limbs, sk.q_limbs
    parts = [ctx_blob(n2), ctx_blob(p2), ctx_blob(q2),
             _words(Ln), _limbs(pk.n, Ln), _words(Lp), _limbs(sk.p, Lp),
             _words(Lq), _limbs(sk.q, Lq),
             _limbs(sk.psquare_inverse * q2.R % q2.m, q2.num_limbs),
             _limbs(pow(n2.R, 3, n2.m), n2.num_limbs)]
    return np.ascontiguousarray(np.concatenate(parts), dtype=np.uint64)


# ---- size classes (mirrors lmax_class in src/kernels.cuh and crt_lmax in src/kernels_group.cuh)
CLASSES = (16, 32, 48, 64, 96, 128)


def size_class(limbs: int) -> int:
    """The smallest instantiated capacity (in 64-bit limbs) that holds ``limbs`` limbs; 0: none."""
    return next((c for c in CLASSES if limbs <= c), 0)


def crt_fits_groups(sk: PaillierPrivateMaterial) -> bool:
    """Whether the cooperative CRT bodies take this key: their class holds 4·max(Lp, Lq) limbs
    (each half group the (x − 1)·p^-1 exactness product), so primes of up to 2048 bits."""
    return size_class(4 * max(sk.p_limbs, sk.q_limbs)) != 0


# ---- DJN fixed base: the comb tables the fixed-base kernels read from device memory
def fixed_base_value(pk: PaillierPublicMaterial) -> int:
    """hs itself (plain, mod n²) from the record's Montgomery form."""
    fb = pk.require_fixed_base()
    ctx = pk.nsquare_ctx
    hs_mont = from_limbs(np.asarray(fb.hs_mont, np.uint64)[None, :])[0]
    return hs_mont * pow(ctx.R, -1, ctx.m) % ctx.m


def comb_table(ctx: MontContext, base: int, exp_bits: int, window: int) -> np.ndarray:
    """(nwin, 2^w − 1, L): entry [j, d − 1] = base^(d·2^(w·j))·R mod m, nwin = ceil(exp_bits/w)
    (the layout of phe_sdk's composed comb, so both give the same products)."""
    m, R = gmpy2.mpz(ctx.m), gmpy2.mpz(ctx.R)
    nwin, per = -(-exp_bits // window), (1 << window) - 1
    vals: list[int] = []
    b = gmpy2.mpz(base) % m
    for _ in range(nwin):
        e = gmpy2.mpz(1)
        for _ in range(per):
            e = e * b % m
            vals.append(int(e * R % m))
        b = gmpy2.powmod(b, 1 << window, m)
    return to_limbs(vals, ctx.num_limbs).reshape(nwin, per, ctx.num_limbs)


"""Key blobs of the gpu kernels: every per-modulus / per-key constant in one uint64 array, built
once per key on the host and uploaded once per device.  Which constants, in which order, is defined
once, in ``src/key_layout.h`` (read by :mod:`.layout`; the kernels' parsers are expanded from the
same tables), together with what each constant is; here they are computed from the key records:

* a modulus context: n0' = −m^-1 mod 2^64, R mod m, R² mod m (R = 2^(64·L));
* the public key: the context of n², n;
* the private key: the contexts of p², q², p, q; the wide-reduction constants
  ``Wp_j = Rp²^(j+2)·R_{n²}^-1 mod p²`` (a reduction of c̄ = c·R_{n²} by Montgomery
  multiplications lands in p²'s domain), p − 1, q − 1, ``p^-1 mod 2^(64·Lp)`` (the exact division
  (x − 1)/p as a multiplication), ``h_p·Rp² mod p``, ``h_q·Rq mod q``, ``Wpq_j = Rp^(j+2) mod p``,
  ``q^-1 mod p``, q;
* the key owner's: the contexts of n², p², q², n, p, q, ``(p²)^-1·R_{q²} mod q²`` (a MontMult mod
  q² by it multiplies by (p²)^-1: Garner's step), ``R³ mod n²`` (turns g·x·R^-1 into g·x·R).
"""

from __future__ import annotations

import gmpy2
import numpy as np

from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.montgomery import MontContext, mont_context
from ...core.limbs import from_limbs, limb_count, to_limbs
from .layout import assemble

MAX_LIMBS = 128  # largest instantiated size class: 8192-bit moduli


def ctx_blob(ctx: MontContext) -> np.ndarray:
    L = ctx.num_limbs
    return assemble("MOD_CTX", {"n0inv": ctx.n0inv, "L": L, "m": ctx.m_limbs.astype(np.uint64),
                                "r1": ctx.r_mod, "r2": ctx.r2})


def pub_blob(pk: PaillierPublicMaterial) -> np.ndarray:
    return assemble("PUB_KEY", {"n2": ctx_blob(pk.nsquare_ctx), "Ln": pk.n_ctx.num_limbs,
                                "n": pk.n})


def _wide_reduction_constants(target: MontContext, chunks: int, factor: int) -> np.ndarray:
    """W_j = R^(j+2)·factor mod m for j < chunks (see reduce_wide in src/bn_core.cuh)."""
    m, R, L = target.m, target.R, target.num_limbs
    return to_limbs([pow(R, j + 2, m) * factor % m for j in range(chunks)], L).reshape(-1)


def priv_blob(sk: PaillierPrivateMaterial) -> np.ndarray:
    pk = sk.public_key
    n2 = pk.nsquare_ctx
    p2, q2 = sk.psquare_ctx, sk.qsquare_ctx
    pc, qc = mont_context(sk.p), mont_context(sk.q)
    L2 = n2.num_limbs
    kp, kq = -(-L2 // p2.num_limbs), -(-L2 // q2.num_limbs)
    kpq = -(-qc.num_limbs // pc.num_limbs)
    return assemble("PRIV_KEY", {
        "p2": ctx_blob(p2), "q2": ctx_blob(q2), "p": ctx_blob(pc), "q": ctx_blob(qc), "L2": L2,
        "Kp": kp, "Wp": _wide_reduction_constants(p2, kp, pow(n2.R, -1, p2.m)),
        "Kq": kq, "Wq": _wide_reduction_constants(q2, kq, pow(n2.R, -1, q2.m)),
        "Lep": limb_count((sk.p - 1).bit_length()), "pm1": sk.p - 1,
        "Leq": limb_count((sk.q - 1).bit_length()), "qm1": sk.q - 1,
        "pinv": pow(sk.p, -1, pc.R), "qinv_w": pow(sk.q, -1, qc.R),
        "hpR2": sk.hp * pc.R * pc.R % sk.p, "hqR": sk.hq * qc.R % sk.q,
        "Kpq": kpq, "Wpq": _wide_reduction_constants(pc, kpq, 1),
        "qinv_p": sk.q_inverse, "qv": sk.q, "Ln": pk.n_ctx.num_limbs})


def owner_blob(sk: PaillierPrivateMaterial) -> np.ndarray:
    """The key-owner encryption blob of a private record (p < q, as the records keep them)."""
    pk = sk.public_key
    n2, p2, q2 = pk.nsquare_ctx, sk.psquare_ctx, sk.qsquare_ctx
    return assemble("OWNER_KEY", {
        "n2": ctx_blob(n2), "p2": ctx_blob(p2), "q2": ctx_blob(q2),
        "Ln": pk.n_ctx.num_limbs, "n": pk.n, "Lp": sk.p_limbs, "p": sk.p,
        "Lq": sk.q_limbs, "q": sk.q,
        "psqinv": sk.psquare_inverse * q2.R % q2.m, "r3": pow(n2.R, 3, n2.m)})


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


// UniFL gpu backend: the layout of the key blobs, defined once.  A key blob carries every per-modulus
// and per-key constant of an op as one array of 64-bit words, built once per key on the host,
// uploaded once per device and staged in shared memory by each block (UniFL Alg. 4 lines 5-9).
//
// Each table below lists the fields of one blob kind in order.  Readers of this one definition:
//   kernels.cuh    expands the tables into the key structs and their parsers (parse_pub, ...);
//   gpu_host.cpp   expands them into the bounds-checked walk that vets a blob from Python;
//   keys.py        reads this file to build blobs and to read their sizes (runtime.py, kernel_backend);
// tests/test_gpu_key_layout.py checks that the C++ walk and the Python one agree on real blobs.
//
// A field is one of
//   CTX(name)            a modulus context, itself laid out as UNIFL_LAYOUT_MOD_CTX; `name.L` is its
//                        limb count
//   WORD(name)           one word: a count (1 .. MAX_BLOB_LIMBS)
//   VALUE(name)          one word: any value
//   LIMBS(name, count)   `count` words: `W` (a WORD before it), `c.L` (a CTX before it) or `W * c.L`
// Keep one field per line in the form `    KIND(name[, count])  \` (keys.py reads the lines with one
// regular expression; anything else between a table's #define and its last line is an error there).
//
// The constants (R_m = 2^(64·L) of the modulus m in question):
//   Wp_j   = Rp2^(j+2)·R_{n²}^-1 mod p²   a wide reduction of c̄ = c·R_{n²} by MontMults lands in p²'s
//                                         domain (reduce_wide in bn_core.cuh); Wq likewise
//   pinv   = p^-1 mod 2^(64·Lp)           the exact division (x − 1)/p as a multiplication
//   hpR2   = h_p·Rp² mod p,  hqR = h_q·Rq mod q
//   Wpq_j  = Rp^(j+2) mod p,  qinv_p = q^-1 mod p
//   psqinv = (p²)^-1·R_{q²} mod q²        a MontMult mod q² by it multiplies by (p²)^-1 (Garner)
//   r3     = R_{n²}³ mod n²               a MontMult mod n² by it turns g·x·R^-1 into g·x·R
//   r1, r2 = R mod m, R² mod m            the Montgomery form of 1; MontMult(x, r2) = x·R
#pragma once

// kind 0: a modulus context, alone (MontMult, ModMult, ModExp, multi-exponentiation, products,
// inversion) or inside the other kinds; R = 2^(64·L), n0inv = −m^-1 mod 2^64
#define UNIFL_LAYOUT_MOD_CTX(CTX, WORD, VALUE, LIMBS) \
    VALUE(n0inv) \
    WORD(L) \
    LIMBS(m, L) \
    LIMBS(r1, L) \
    LIMBS(r2, L)

// kind 1: Paillier public key (encryption, fixed base)
#define UNIFL_LAYOUT_PUB_KEY(CTX, WORD, VALUE, LIMBS) \
    CTX(n2) \
    WORD(Ln) \
    LIMBS(n, Ln)

// kind 2: Paillier private key (CRT decryption)
#define UNIFL_LAYOUT_PRIV_KEY(CTX, WORD, VALUE, LIMBS) \
    CTX(p2) \
    CTX(q2) \
    CTX(p) \
    CTX(q) \
    WORD(L2) \
    WORD(Kp) \
    LIMBS(Wp, Kp *p2.L) \
    WORD(Kq) \
    LIMBS(Wq, Kq *q2.L) \
    WORD(Lep) \
    LIMBS(pm1, Lep) \
    WORD(Leq) \
    LIMBS(qm1, Leq) \
    LIMBS(pinv, p.L) \
    LIMBS(qinv_w, q.L) \
    LIMBS(hpR2, p.L) \
    LIMBS(hqR, q.L) \
    WORD(Kpq) \
    LIMBS(Wpq, Kpq *p.L) \
    LIMBS(qinv_p, p.L) \
    LIMBS(qv, q.L) \
    WORD(Ln)

// kind 3: the key owner's encryption with the CRT (p < q)
#define UNIFL_LAYOUT_OWNER_KEY(CTX, WORD, VALUE, LIMBS) \
    CTX(n2) \
    CTX(p2) \
    CTX(q2) \
    WORD(Ln) \
    LIMBS(n, Ln) \
    WORD(Lp) \
    LIMBS(p, Lp) \
    WORD(Lq) \
    LIMBS(q, Lq) \
    LIMBS(psqinv, q2.L) \
    LIMBS(r3, n2.L)

"""Paillier's cryptosystem with g = n + 1, batched on any backend.

Math (Paillier 1999; the g = n + 1 simplification as in python-paillier):

* encryption      c = g^m · r^n = (1 + m·n) · r^n  mod n²,  r uniform in Z_n*
* decryption (CRT) m_p = L_p(c^(p-1) mod p²) · h_p mod p,  L_p(x) = (x − 1)/p,
                   h_p = L_p(g^(p-1) mod p²)^-1 mod p  (same for q),  m = CRT(m_p, m_q)
* homomorphisms   E(a)·E(b) = E(a + b),  E(a)^k = E(k·a)  (mod n²)

Inside the SDK ciphertexts are batches of Montgomery-form limbs mod n² (see ``unifl.base_op``), so
a chain of homomorphic operations enters and leaves the Montgomery domain once.  ``raw_encrypt`` /
``raw_decrypt`` speak plain Python ints and are bit-compatible with python-paillier's functions of the
same names for the same n, p, q (and the same r).

Obfuscation factors r^n can be computed ahead of use, in large calls and while a party waits on its
peer: a pool per key and backend (:meth:`PublicKey.obfuscators`, :class:`ObfuscatorPool`), after
which an encryption is one MontMult per element.  The
DJN-style fixed-base variant (:meth:`PublicKey.enable_fixed_base`) replaces r^n by hs^a with
hs = h^n mod n² fixed in the key, h = −y² mod n for random y, and a short random exponent a of
``exp_bits`` bits (n_bits/2 by default), computed from a precomputed comb table -- an order of
magnitude fewer multiplications.  Its security rests on the short-exponent assumption of Damgård,
Jurik and Nielsen (2010); it is a named option, never the default.

The key owner (``private_key=`` in :func:`encrypt_limbs`, ``PrivateKey.raw_encrypt``,
``EncryptedArray.encrypt``) computes every obfuscation factor with the CRT, mod p² and mod q²:

* fresh       y_p^p mod p², y_q^q mod q², y_p uniform in [1, p), y_q uniform in [1, q), which is
              distributed exactly as r^n mod n² for r uniform in Z_n* (see
              :func:`paillier_encrypt_owner`);
* explicit r  y_p = r^q mod p, y_q = r^p mod q, so the factor is r^n mod n² itself;
* fixed base  hs^a mod p², hs^a mod q² from comb tables of the half-size moduli;
* generators  gp^kp mod p², gq^kq mod q² from comb tables of the owner's generators of the n-th
              residues, kp, kq uniform in [0, p − 1), [0, q − 1): exactly r^n's distribution, with
              no short-exponent assumption, at the cost of the fixed base (keys from
              :func:`keygen`, whose p − 1 and q − 1 have known factors; see
              :func:`paillier_encrypt_owner_generator`);

joined by Garner's formula x = x_p + p²·((x_q − x_p)·(p²)^-1 mod q²), then c = (1 + m·n)·x mod n².
One fused op of the backend where it has one (``paillier_encrypt_owner``,
``paillier_encrypt_owner_fixed_base``, ``paillier_encrypt_owner_generator``; the generator path is
taken only where the backend fuses it), else composed on that backend from secret-exponent ModExps
and MontMults.  Same ciphertexts as the public-key path for the same r or a, on every backend.

Modules, one concept each (private; every public name is imported from here):
``_keys`` (keys, generation, checks, the raw API), ``_encryption`` (the router of every encryption
and decryption of limb batches), ``_pool`` (obfuscators computed ahead), ``_obfuscation`` (fresh
randomness and the paths that apply it), ``_fused`` (the fused ops of the contract, composed for
every backend from key records: :data:`COMPOSITIONS`) and ``_comb`` (the comb tables of fixed bases).
"""

from ._encryption import decrypt_limbs, encrypt_limbs
from ._fused import (COMPOSITIONS, paillier_decrypt, paillier_encrypt, paillier_encrypt_fixed_base,
                     paillier_encrypt_owner, paillier_encrypt_owner_fixed_base,
                     paillier_encrypt_owner_generator)
from ._keys import (DEFAULT_KEY_BITS, FIXED_BASE_TABLE_BYTES, GENERATOR_WINDOW, MAX_KEY_BITS,
                    MIN_KEY_BITS, PrivateKey, PublicKey, keygen, require_units)
from ._obfuscation import random_limbs
from ._pool import ObfuscatorPool

__all__ = ["PublicKey", "PrivateKey", "keygen", "DEFAULT_KEY_BITS", "MIN_KEY_BITS", "MAX_KEY_BITS",
           "FIXED_BASE_TABLE_BYTES", "GENERATOR_WINDOW", "encrypt_limbs", "decrypt_limbs",
           "require_units", "ObfuscatorPool", "random_limbs", "paillier_encrypt", "paillier_encrypt_fixed_base",
           "paillier_encrypt_owner", "paillier_encrypt_owner_fixed_base",
           "paillier_encrypt_owner_generator", "paillier_decrypt",
           "COMPOSITIONS"]

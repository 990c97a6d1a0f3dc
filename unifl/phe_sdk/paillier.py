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

Obfuscation factors r^n can be computed ahead of use (:meth:`PublicKey.precompute`), and the
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

joined by Garner's formula x = x_p + p²·((x_q − x_p)·(p²)^-1 mod q²), then c = (1 + m·n)·x mod n².
One fused op of the backend where it has one (``paillier_encrypt_owner``,
``paillier_encrypt_owner_fixed_base``), else composed on that backend from secret-exponent ModExps
and MontMults.  Same ciphertexts as the public-key path for the same r or a, on every backend.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import threading
from typing import Any, Iterable, Sequence, cast

import gmpy2
import numpy as np

from .. import base_op, mod_op
from ..base_op import MontContext, from_limbs, mont_context, to_limbs
from ..core.exponents import check_covered, window_digits
from ..core.backend import Backend
from ..core.contract import Limbs, OpContract
from ..core.keys import FixedBase, PaillierPrivateMaterial, PaillierPublicMaterial
from ..core.limbs import less_than, limb_count
from ..core.errors import (InvalidCiphertextError, InvalidKeyError, KeyMismatchError, OperandError,
                           WeakKeyError)
from . import exposure
from ._util import pad_limbs, resolve_backend
from .primes import check_prime_pair, random_below, random_prime

DEFAULT_KEY_BITS = 2048
MIN_KEY_BITS = 1024
#: largest modulus accepted from anywhere; checked before any primality test, so an oversize key
#: from a peer costs nothing (and n² stays within the Montgomery layer's 16384-bit limit)
MAX_KEY_BITS = 8192

__all__ = ["PublicKey", "PrivateKey", "keygen", "DEFAULT_KEY_BITS", "MIN_KEY_BITS", "MAX_KEY_BITS",
           "encrypt_limbs", "decrypt_limbs", "require_units", "paillier_encrypt",
           "paillier_encrypt_fixed_base", "paillier_encrypt_owner",
           "paillier_encrypt_owner_fixed_base", "paillier_decrypt"]


#: memory budget of the default DJN comb table (see :meth:`PublicKey.enable_fixed_base`)
FIXED_BASE_TABLE_BYTES = 32 << 20


class PublicKey:
    """A Paillier public key (n, g = n + 1)."""

    def __init__(self, n: int) -> None:
        n = int(n)
        if n <= 0 or n % 2 == 0:
            raise WeakKeyError("Paillier modulus n must be a positive odd integer (a product of two "
                               "odd primes)")
        if n.bit_length() < MIN_KEY_BITS:
            raise WeakKeyError(f"Paillier key of {n.bit_length()} bits is below the minimum of "
                               f"{MIN_KEY_BITS}; use {DEFAULT_KEY_BITS}")
        if n.bit_length() > MAX_KEY_BITS:
            raise WeakKeyError(f"Paillier key of {n.bit_length()} bits is above the maximum of "
                               f"{MAX_KEY_BITS}")
        if gmpy2.is_square(n) or gmpy2.is_prime(n, 25):
            raise WeakKeyError("Paillier modulus n must be a product of two distinct primes")
        self.n = n
        self.g = n + 1
        self.nsquare = n * n
        self.bits = n.bit_length()
        #: largest encoded magnitude; values in (max_int, n - max_int) signal overflow on decode
        self.max_int = n // 3 - 1
        self.n_ctx: MontContext = mont_context(n)
        self.nsquare_ctx: MontContext = mont_context(self.nsquare)
        self.fingerprint = hashlib.sha256(b"unifl-paillier-pk" + n.to_bytes(
            (n.bit_length() + 7) // 8, "big")).hexdigest()[:32]
        #: what the fused ops of a backend take (replaced when the fixed base is switched on)
        self.material = PaillierPublicMaterial(n=n, n_ctx=self.n_ctx, nsquare_ctx=self.nsquare_ctx)
        self._pool: list[np.ndarray] = []
        self._pool_lock = threading.Lock()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and other.n == self.n

    @property
    def fixed_base(self) -> FixedBase | None:
        """The DJN fixed base when :meth:`enable_fixed_base` switched it on, else None."""
        return self.material.fixed_base

    def __hash__(self) -> int:
        return hash(("paillier", self.n))

    def __repr__(self) -> str:
        return f"<paillier.PublicKey {self.bits} bits, fingerprint {self.fingerprint[:12]}>"

    # ---- plaintext checks
    def plaintext_limbs(self, plaintexts: Sequence[int]) -> np.ndarray:
        vals = [int(x) for x in plaintexts]
        for x in vals:
            if not 0 <= x < self.n:
                raise OperandError("raw Paillier plaintexts must lie in [0, n)")
        return to_limbs(vals, self.n_ctx.num_limbs)

    # ---- randomness
    def random_r(self, count: int) -> np.ndarray:
        """``count`` obfuscation bases r uniform in Z_n* (CSPRNG), as limbs mod n."""
        rs = random_below(self.n, count)
        for r in rs:  # gcd(r, n) != 1 has probability ~2^-(bits/2); it would factor n
            if math.gcd(r, self.n) != 1:
                raise InvalidKeyError("random r shares a factor with n: the key is broken")
        return to_limbs(rs, self.n_ctx.num_limbs)

    # ---- obfuscation-factor pool (r^n computed ahead of use, each used once)
    def precompute(self, count: int, backend: Backend | str | None = None) -> None:
        """Compute ``count`` obfuscation factors r^n mod n² now (e.g. while idle), for later encryptions.

        Each factor is consumed by exactly one encryption and then discarded.
        """
        be = resolve_backend(backend)
        zeros = np.zeros((count, self.n_ctx.num_limbs), np.uint64)
        obf = encrypt_limbs(be, self, zeros, use_pool=False)  # E(0) = r^n
        with self._pool_lock:
            self._pool.append(np.asarray(obf))   # consumed in slices on the host

    def pool_size(self) -> int:
        with self._pool_lock:
            return sum(len(x) for x in self._pool)

    def _take_pool(self, count: int) -> np.ndarray | None:
        with self._pool_lock:
            if sum(len(x) for x in self._pool) < count:
                return None
            out, need = [], count
            while need:
                head = self._pool[0]
                take = head[:need]
                out.append(take)
                need -= len(take)
                if len(take) == len(head):
                    self._pool.pop(0)
                else:
                    self._pool[0] = head[len(take):]
            return np.concatenate(out)

    # ---- DJN fixed base
    def enable_fixed_base(self, window: int | None = None, exp_bits: int | None = None,
                          backend: Backend | str | None = None) -> FixedBase:
        """Switch encryption to the DJN fixed-base variant (see the module docstring).

        Args:
            window: comb digit width; the table holds ceil(exp_bits/window)·(2^window − 1) entries of
                n²'s size.  Default: the widest of 10, 9 whose table fits in 32 MiB, else 8 --
                10 at 1024 bits (14 MB), 9 at 2048 bits (30 MB), 8 above.  Each encryption costs
                ceil(exp_bits/window) MontMults mod n² (window choice measured in docs/perf.md).
                The key owner's CRT variant uses the same window on two tables of half the entry
                size (mod p², mod q²): the same memory, a quarter of the cost per MontMult.
            exp_bits: length of the random exponent a (default n_bits/2, DJN's recommendation).
        """
        be = resolve_backend(backend)
        exp_bits = int(exp_bits or self.bits // 2)
        if exp_bits < 256:
            raise WeakKeyError("fixed-base exponents shorter than 256 bits are not safe")
        if not window:
            entry = self.nsquare_ctx.num_limbs * 8
            window = next((w for w in (10, 9)
                           if -(-exp_bits // w) * ((1 << w) - 1) * entry <= FIXED_BASE_TABLE_BYTES),
                          8)
        window = int(window)
        y = random_below(self.n, 1)[0]
        h = (-y * y) % self.n
        ctx = self.nsquare_ctx
        h_limbs = ctx.to_limbs([h])
        hs_mont = base_op.to_mont(be, ctx, mod_op.mod_exp(be, ctx, h_limbs, mod_op.exp_limbs(self.n)))
        fb = FixedBase(hs_mont=hs_mont[0].copy(), exp_bits=exp_bits, window=window)
        self.material = dataclasses.replace(self.material, fixed_base=fb)
        return fb

    # ---- raw API (python-paillier compatible)
    def raw_encrypt(self, plaintexts: Sequence[int], backend: Backend | str | None = None,
                    r_values: Sequence[int] | None = None) -> list[int]:
        """Ciphertexts (1 + m·n)·r^n mod n² of raw plaintexts m in [0, n), as Python ints.

        With ``r_values`` given, the result equals python-paillier's ``raw_encrypt(m, r_value=r)``.
        """
        be = resolve_backend(backend)
        m = self.plaintext_limbs(plaintexts)
        r = None
        if r_values is not None:
            r_list = [int(v) for v in r_values]
            if len(r_list) != len(m):
                raise OperandError(f"{len(m)} plaintexts but {len(r_list)} r values")
            r = self.n_ctx.to_limbs(r_list)
        c_mont = encrypt_limbs(be, self, m, r=r)
        return from_limbs(base_op.from_mont(be, self.nsquare_ctx, c_mont))

    def ciphertext_limbs(self, ciphertexts: Sequence[int], backend: Backend | str | None = None
                         ) -> Limbs:
        """Plain ciphertext ints (each a unit mod n² in [1, n²)) to Montgomery-form limbs.

        Raises:
            InvalidCiphertextError: a value is out of range or shares a factor with n.
        """
        be = resolve_backend(backend)
        vals = [int(v) for v in ciphertexts]
        self.check_ciphertexts(vals)
        c = self.nsquare_ctx.to_limbs(vals)
        return base_op.to_mont(be, self.nsquare_ctx, c)

    def check_ciphertexts(self, ciphertexts: "Sequence[int] | np.ndarray") -> None:
        """Refuse any ciphertext that is not a unit mod n² in [1, n²).

        A value sharing a factor with n (a multiple of p, q or n) decrypts, on the CRT path, to a
        value that reveals p + q, i.e. the factorisation; every ciphertext that comes from outside
        goes through this check (or :func:`require_units`) before it can reach a decryption.
        Accepts Python ints or plain (non-Montgomery) (N, L) limbs mod n².  Costs one modular
        multiplication per element and a single gcd (the offenders are only located on failure).

        Raises:
            InvalidCiphertextError: naming the index of the first offending ciphertext.
        """
        require_units(self, ciphertexts)


class PrivateKey:
    """A Paillier private key: the primes p, q of n (with the CRT constants)."""

    def __init__(self, p: int, q: int) -> None:
        p, q = int(p), int(q)
        check_prime_pair(p, q, "Paillier", MIN_KEY_BITS, MAX_KEY_BITS)
        if q < p:  # python-paillier's convention: p is the smaller prime
            p, q = q, p
        self.public_key = PublicKey(p * q)
        self.p, self.q = p, q
        self.psquare, self.qsquare = p * p, q * q
        n = self.public_key.n
        # The CRT constants live in the key record (what backends read), computed once here.
        self._material = PaillierPrivateMaterial(
            public_key=self.public_key.material, p=p, q=q,
            psquare_ctx=mont_context(self.psquare), qsquare_ctx=mont_context(self.qsquare),
            # h_p = L_p(g^(p-1) mod p²)^-1 mod p with g = n + 1
            hp=int(gmpy2.invert((pow(n + 1, p - 1, self.psquare) - 1) // p, p)),
            hq=int(gmpy2.invert((pow(n + 1, q - 1, self.qsquare) - 1) // q, q)),
            q_inverse=int(gmpy2.invert(q, p)),
            # Garner's constant of the key owner's CRT, x = x_p + p²·((x_q − x_p)·(p²)^-1 mod q²)
            psquare_inverse=int(gmpy2.invert(self.psquare, self.qsquare)),
            # gcd(q, p−1) = gcd(p, q−1) = 1 (always for primes of equal size) lets the key owner
            # draw obfuscation factors with half-length exponents (see paillier_encrypt_owner)
            half_exponent_obfuscation=math.gcd(q, p - 1) == 1 and math.gcd(p, q - 1) == 1)
        self._material_lock = threading.Lock()
        # while this key lives, no message the codec or the FATE plug-in sends may carry its
        # secrets, in any form the guard knows (unifl.phe_sdk.exposure)
        exposure.watch(self, n, p, q, extra=(self._material.hp, self._material.hq,
                                             self._material.psquare_inverse))

    @property
    def material(self) -> PaillierPrivateMaterial:
        """What the fused ops of a backend take (follows the public key's record).

        One record per public record, made under a lock: backends key their per-key state (CRT
        tables, uploaded constants) by the record object, so two threads must not make two."""
        with self._material_lock:
            if self._material.public_key is not self.public_key.material:
                self._material = dataclasses.replace(self._material,
                                                     public_key=self.public_key.material)
            return self._material

    # the CRT constants, read from the record (one copy of each)
    @property
    def psquare_ctx(self) -> MontContext:
        return self._material.psquare_ctx

    @property
    def qsquare_ctx(self) -> MontContext:
        return self._material.qsquare_ctx

    @property
    def hp(self) -> int:
        return self._material.hp

    @property
    def hq(self) -> int:
        return self._material.hq

    @property
    def q_inverse(self) -> int:
        return self._material.q_inverse

    @property
    def psquare_inverse(self) -> int:
        return self._material.psquare_inverse

    @property
    def half_exponent_obfuscation(self) -> bool:
        return self._material.half_exponent_obfuscation

    def __repr__(self) -> str:  # never shows the primes
        return f"<paillier.PrivateKey for {self.public_key!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrivateKey) and (other.p, other.q) == (self.p, self.q)

    def __hash__(self) -> int:
        return hash(("paillier-sk", self.p, self.q))

    def raw_encrypt(self, plaintexts: Sequence[int], backend: Backend | str | None = None,
                    r_values: Sequence[int] | None = None) -> list[int]:
        """Encryption by the key owner, with the CRT mod p² and q² (see :func:`encrypt_limbs`);
        identical to ``public_key.raw_encrypt`` for the same r."""
        be = resolve_backend(backend)
        pk = self.public_key
        m = pk.plaintext_limbs(plaintexts)
        r = None if r_values is None else pk.n_ctx.to_limbs([int(v) for v in r_values])
        if r is not None and len(r) != len(m):
            raise OperandError(f"{len(m)} plaintexts but {len(r)} r values")
        c_mont = encrypt_limbs(be, pk, m, r=r, private_key=self)
        return from_limbs(base_op.from_mont(be, pk.nsquare_ctx, c_mont))

    def raw_decrypt(self, ciphertexts: Sequence[int], backend: Backend | str | None = None
                    ) -> list[int]:
        """Plaintexts in [0, n) of plain ciphertext ints (python-paillier's ``raw_decrypt``)."""
        be = resolve_backend(backend)
        c_mont = self.public_key.ciphertext_limbs(ciphertexts, be)
        return from_limbs(decrypt_limbs(be, self, c_mont))


def require_units(pk: PublicKey, ciphertexts: "Sequence[int] | np.ndarray") -> None:
    """Check that every ciphertext lies in [1, n²) and is a unit mod n (gcd(c, n) = 1).

    ``ciphertexts``: Python ints, or plain (non-Montgomery) limbs of shape (N, L) mod n².  The unit
    test multiplies all c mod n together and takes one gcd with n (O(1) big-int operations per
    element); only when that gcd is not 1 are the offenders looked for one by one.

    Raises:
        InvalidCiphertextError: out of range or not a unit, naming the index of the first offender.
    """
    ctx = pk.nsquare_ctx
    if isinstance(ciphertexts, np.ndarray) or hasattr(ciphertexts, "__array__"):
        limbs = np.asarray(ciphertexts, dtype=np.uint64)
        if limbs.ndim != 2 or limbs.shape[1] != ctx.num_limbs:
            raise InvalidCiphertextError(f"ciphertext limbs of shape {limbs.shape}; this key needs "
                                         f"(N, {ctx.num_limbs})")
        bad = ~less_than(limbs, ctx.m_limbs) | ~limbs.any(axis=1)
        if bad.any():
            raise InvalidCiphertextError(f"ciphertext #{int(np.argmax(bad))} is outside [1, n²)")
        # gmpy2's portable binary form of a positive mpz is b"\x01\x01" + little-endian magnitude:
        # straight from the limb bytes, cheaper than going through Python ints (docs/perf.md §4)
        raw = np.ascontiguousarray(limbs, dtype="<u8").tobytes()
        width, from_binary = 8 * ctx.num_limbs, gmpy2.from_binary
        values: Iterable[Any] = (from_binary(b"\x01\x01" + raw[i:i + width])
                                 for i in range(0, len(raw), width))
    else:
        limbs = None
        values = [int(v) for v in ciphertexts]
        for i, v in enumerate(values):
            if not 0 < v < pk.nsquare:
                raise InvalidCiphertextError(f"ciphertext #{i} is outside [1, n²)")
    n = gmpy2.mpz(pk.n)
    acc = gmpy2.mpz(1)
    for v in values:
        acc = acc * (v % n) % n
    if gmpy2.gcd(acc, n) == 1:
        return
    # a product of units is a unit, so some element shares a factor with n: name the first
    vals = values if limbs is None else from_limbs(limbs)
    for i, v in enumerate(vals):
        if gmpy2.gcd(v, n) != 1:
            raise InvalidCiphertextError(
                f"ciphertext #{i} is not a unit mod n² (it shares a factor with n); decrypting it "
                f"could reveal the key, so it is refused")


def keygen(bits: int = DEFAULT_KEY_BITS) -> tuple[PublicKey, PrivateKey]:
    """A fresh key pair with n of exactly ``bits`` bits and primes of equal size (bits/2 each)."""
    if bits < MIN_KEY_BITS or bits % 2:
        raise WeakKeyError(f"Paillier key size must be even and at least the minimum of {MIN_KEY_BITS} "
                           f"bits, got {bits}")
    while True:
        p = random_prime(bits // 2)
        q = random_prime(bits // 2)
        if p != q and (p * q).bit_length() == bits:
            sk = PrivateKey(p, q)
            return sk.public_key, sk


# ------------------------------------------------------------------------ batched ops on limbs
def _ops(be: Any) -> OpContract:
    """``be`` as the op contract types it (a backend defines the ops it lists in ``native_ops``)."""
    return cast(OpContract, be)


def _finish(be: Backend, pk: "PublicKey | PaillierPublicMaterial", m: Limbs, obf_mont: Limbs
            ) -> Limbs:
    """c̄ = (1 + m·n)·obf in Montgomery form: MontMult(g^m, obf̄) = g^m·obf, then into the
    domain."""
    ctx = pk.nsquare_ctx
    gm = to_limbs([1 + x * pk.n for x in from_limbs(np.asarray(m))], ctx.num_limbs)
    return base_op.to_mont(be, ctx, base_op.mont_mul(be, ctx, gm, obf_mont, checked=False))


def encrypt_limbs(backend: Backend | str | None, pk: PublicKey, m: np.ndarray,
                  r: np.ndarray | None = None, use_pool: bool = True,
                  private_key: "PrivateKey | None" = None) -> Limbs:
    """Encrypt raw plaintext limbs (N, Ln), each in [0, n), to Montgomery-form ciphertexts (N, L2).

    Order of preference: explicit ``r``; the precomputed pool; the fixed-base variant when enabled;
    fresh obfuscation.  The key owner (``private_key`` given) computes every obfuscation factor
    with the CRT, mod p² and mod q² (:func:`paillier_encrypt_owner`,
    :func:`paillier_encrypt_owner_fixed_base`); its ciphertexts are those of the public-key path
    for the same r (or the same fixed-base exponents a).

    Raises:
        KeyMismatchError: ``private_key`` is not the key of ``pk``.
    """
    be = resolve_backend(backend)
    ctx = pk.nsquare_ctx
    count = m.shape[0]
    if private_key is not None and private_key.public_key.n != pk.n:
        raise KeyMismatchError("private_key does not belong to the public key")
    if count == 0:
        return np.empty((0, ctx.num_limbs), np.uint64)
    if r is None and use_pool:
        obf = pk._take_pool(count)
        if obf is not None:
            return _finish(be, pk, m, obf)
    if r is None and pk.fixed_base is not None:
        a = _random_limbs(count, pk.fixed_base.exp_bits)
        # the CRT tables derive from the fixed base of the private key's own public key object;
        # an equal key object with a fixed base of its own takes the public path
        if private_key is not None and private_key.public_key.material is pk.material:
            return paillier_encrypt_owner_fixed_base(be, private_key.material, m, a)
        return paillier_encrypt_fixed_base(be, pk.material, m, a)
    if private_key is not None:
        sk = private_key.material
        yp: Limbs
        yq: Limbs
        if r is None and sk.half_exponent_obfuscation:
            yp = _random_limbs(count, sk.p.bit_length(), sk.p)
            yq = _random_limbs(count, sk.q.bit_length(), sk.q)
        else:
            yp, yq = _owner_obfuscation_bases(be, sk, pk.random_r(count) if r is None else r)
        return paillier_encrypt_owner(be, sk, m, yp, yq)
    return paillier_encrypt(be, pk.material, m, pk.random_r(count) if r is None else r)


# ---- the fused Paillier ops of the contract, composed on any backend from key records
# (each runs the backend's native op when it has it; the scheduler's fallback re-runs a failed op
# through these with the op's own arguments)
def paillier_encrypt(backend: Backend | str | None, pk: PaillierPublicMaterial, m: Limbs, r: Limbs
                     ) -> Limbs:
    """(1 + m·n)·r^n·R mod n² for m, r (N, Ln): r^n by ModExp in the Montgomery domain."""
    be = resolve_backend(backend)
    if be.implements("paillier_encrypt"):
        return _ops(be).op_paillier_encrypt(pk, m, r)
    ctx = pk.nsquare_ctx
    r_mont = base_op.to_mont(be, ctx, pad_limbs(np.asarray(r, np.uint64), ctx.num_limbs))
    return _finish(be, pk, m, mod_op.mont_exp(be, ctx, r_mont, mod_op.exp_limbs(pk.n)))


def paillier_encrypt_fixed_base(backend: Backend | str | None, pk: PaillierPublicMaterial,
                                m: Limbs, a: np.ndarray) -> Limbs:
    """(1 + m·n)·hs^a·R mod n² (DJN), hs^a from the full-size comb table of the record's base."""
    be = resolve_backend(backend)
    if be.implements("paillier_encrypt_fixed_base"):
        return _ops(be).op_paillier_encrypt_fixed_base(pk, m, a)
    fb = pk.require_fixed_base()
    table = _fixed_base_table(be, pk)
    return _finish(be, pk, m, _comb_power(be, pk.nsquare_ctx, table, fb.window, a))


def paillier_encrypt_owner(backend: Backend | str | None, sk: PaillierPrivateMaterial, m: Limbs,
                           yp: Limbs, yq: Limbs) -> Limbs:
    """Key-owner encryption with the CRT: c̄ = (1 + m·n)·CRT(yp^p mod p², yq^q mod q²)·R mod n².

    Why this is an encryption under a uniform r: x^p mod p² depends only on x mod p, so
    r^n mod p² = (r^q mod p)^p mod p², and as gcd(q, p−1) = 1 (always for primes of equal size),
    r ↦ r^q mod p is a bijection of Z_p*: for r uniform in Z_n*, y_p = r^q mod p is uniform in
    [1, p), and independent of y_q = r^p mod q by the CRT.  Drawing y_p, y_q uniformly is drawing
    r uniformly, with exponents p and q of n/2 bits on moduli of n bits: an eighth of the work of
    r^n mod n² (exponent n, modulus n²), a quarter of r^(n mod p(p−1)) mod p² and mod q².

    One native call / one kernel launch where the backend fuses it; otherwise composed here on the
    same backend: two secret-exponent ModExps (constant time where the backend has them) and the
    combine of :func:`_owner_combine`.
    """
    be = resolve_backend(backend)
    if be.implements("paillier_encrypt_owner"):
        return _ops(be).op_paillier_encrypt_owner(sk, m, yp, yq)
    p2, q2 = sk.psquare_ctx, sk.qsquare_ctx
    xp = mod_op.mod_exp_secret(be, p2, pad_limbs(np.asarray(yp, np.uint64), p2.num_limbs),
                               mod_op.exp_limbs(sk.p))
    xq = mod_op.mod_exp_secret(be, q2, pad_limbs(np.asarray(yq, np.uint64), q2.num_limbs),
                               mod_op.exp_limbs(sk.q))
    return _owner_combine(be, sk, m, xp, xq)


def paillier_encrypt_owner_fixed_base(backend: Backend | str | None, sk: PaillierPrivateMaterial,
                                      m: Limbs, a: np.ndarray) -> Limbs:
    """(1 + m·n)·hs^a·R mod n² by the key owner: hs^a mod p² and hs^a mod q² from comb tables of
    hs mod p² and hs mod q², joined by the CRT.  The half-size tables make each MontMult about a
    quarter of the full-size comb's, two of them per window: about half its work for the same
    exponents, and the same ciphertexts.  Composed (no fused op): the grouped table products on the
    backend, then :func:`_owner_combine`."""
    be = resolve_backend(backend)
    if be.implements("paillier_encrypt_owner_fixed_base"):
        return _ops(be).op_paillier_encrypt_owner_fixed_base(sk, m, a)
    fb = sk.public_key.require_fixed_base()
    halves = []
    for ctx, table in zip((sk.psquare_ctx, sk.qsquare_ctx), _owner_fixed_base_tables(be, sk)):
        halves.append(base_op.from_mont(be, ctx, _comb_power(be, ctx, table, fb.window, a)))
    return _owner_combine(be, sk, m, halves[0], halves[1])


def paillier_decrypt(backend: Backend | str | None, sk: PaillierPrivateMaterial, c_mont: Limbs
                     ) -> Limbs:
    """m (N, Ln) from Montgomery-form ciphertexts (N, L2) with the CRT (see the module docstring).

    Raises:
        InvalidCiphertextError: a ciphertext is not a unit mod n² (its CRT half degenerates).
    """
    be = resolve_backend(backend)
    if be.implements("paillier_decrypt"):
        return _ops(be).op_paillier_decrypt(sk, c_mont)
    pk = sk.public_key
    c = from_limbs(base_op.from_mont(be, pk.nsquare_ctx, c_mont))
    halves = []
    for prime, sq_ctx, h in ((sk.p, sk.psquare_ctx, sk.hp), (sk.q, sk.qsquare_ctx, sk.hq)):
        x = from_limbs(mod_op.mod_exp_secret(be, sq_ctx, sq_ctx.to_limbs([v % sq_ctx.m for v in c]),
                                             mod_op.exp_limbs(prime - 1)))
        # Second line of defence (the first is require_units at ingress): for a unit c, Fermat
        # gives c^(p−1) ≡ 1 (mod p).  Anything else (0 included) means c shares the factor, and
        # L_p of it would hand back a value that factors n: refuse instead of answering.
        for i, v in enumerate(x):
            if v % prime != 1:
                raise InvalidCiphertextError(
                    f"ciphertext #{i} is not a unit mod n² (a CRT half of its decryption "
                    f"degenerates); refused, since decrypting it could reveal the key")
        halves.append([(v - 1) // prime * h % prime for v in x])
    p, q, qinv = sk.p, sk.q, sk.q_inverse
    m = [mq + q * ((mp - mq) * qinv % p) for mp, mq in zip(*halves)]
    return to_limbs(m, pk.n_ctx.num_limbs)


# ---- key-owner encryption (CRT): the composed parts
def _owner_obfuscation_bases(be: Backend, sk: PaillierPrivateMaterial, r: np.ndarray
                             ) -> tuple[Limbs, Limbs]:
    """(y_p, y_q) = (r^q mod p, r^p mod q) for given r (N, Ln): then y_p^p ≡ r^(q·p) = r^n (mod p²)
    and y_q^q ≡ r^n (mod q²), so :func:`paillier_encrypt_owner` of them is (1 + m·n)·r^n mod n²,
    the public-key ciphertext for the same r.  The exponents are reduced by Fermat (q mod (p−1),
    never 0 for primes p < q, so an r ≡ 0 (mod p) still gives 0 = r^q mod p), on moduli of n/2
    bits, as secret exponents."""
    rs = from_limbs(r)
    out = []
    for prime, other in ((sk.p, sk.q), (sk.q, sk.p)):
        ctx = mont_context(prime)
        base = to_limbs([v % prime for v in rs], ctx.num_limbs)
        out.append(mod_op.mod_exp_secret(be, ctx, base, mod_op.exp_limbs(other % (prime - 1))))
    return out[0], out[1]


def _owner_constants(be: Backend, sk: PaillierPrivateMaterial) -> dict[str, np.ndarray]:
    """The one-row constants of :func:`_owner_combine`, once per record and backend instance:
    ``j`` = (p²)^-1·R_q mod q² (a MontMult mod q² by it multiplies by (p²)^-1), ``psq`` = p²·R mod
    n² (a MontMult by it multiplies by p², exactly when the product is < n²), ``n`` = n·R² mod n²
    (a MontMult of m by it is m·n·R, the Montgomery form of m·n), ``one`` = R mod n²."""
    def build() -> dict[str, np.ndarray]:
        q2, n2 = sk.qsquare_ctx, sk.public_key.nsquare_ctx
        return {"j": to_limbs([sk.psquare_inverse * q2.r_mod % q2.m], q2.num_limbs),
                "psq": to_limbs([sk.psquare * n2.r_mod % n2.m], n2.num_limbs),
                "n": to_limbs([sk.public_key.n * n2.r2 % n2.m], n2.num_limbs),
                "one": to_limbs([n2.r_mod], n2.num_limbs)}
    return be.state.get(sk, "owner_constants", build)


def _owner_combine(be: Backend, sk: PaillierPrivateMaterial, m: Limbs, xp: Limbs, xq: Limbs
                   ) -> Limbs:
    """c̄ = (1 + m·n)·x·R mod n² for the x < n² with x ≡ xp (mod p²), x ≡ xq (mod q²).

    Garner, oriented so that nothing needs reducing (p < q, so xp < p² < q²):
    x = xp + p²·t with t = (xq − xp)·(p²)^-1 mod q² < q², hence p²·t + xp < n² exactly.  On
    batches: the subtraction mod q² and the additions on the host (NumPy, vectorised over rows),
    t and p²·t as MontMults by one-row constants (:func:`_owner_constants`), and
    ḡ = (1 + m·n)·R = MontMult(m, n·R²) ⊕ R, c̄ = MontMult(ḡ, x̄) -- no Python loop per element.
    """
    n2, q2 = sk.public_key.nsquare_ctx, sk.qsquare_ctx
    k = _owner_constants(be, sk)
    xp_h = np.asarray(xp, dtype=np.uint64)
    d = _mod_sub_limbs(np.asarray(xq, dtype=np.uint64), pad_limbs(xp_h, q2.num_limbs), q2.m_limbs)
    t = base_op.mont_mul(be, q2, d, k["j"], checked=False)                 # (xq − xp)·(p²)^-1
    psq_t = base_op.mont_mul(be, n2, pad_limbs(np.asarray(t, np.uint64), n2.num_limbs), k["psq"],
                             checked=False)                               # p²·t, exact
    x, carry = _add_limbs(np.asarray(psq_t, np.uint64), pad_limbs(xp_h, n2.num_limbs))
    if carry.any() or not less_than(x, n2.m_limbs).all():
        # impossible for halves reduced mod p², q²: only a backend returning unreduced values
        raise OperandError("key-owner CRT combine: a CRT half is not reduced modulo p² or q²")
    x_mont = base_op.to_mont(be, n2, x)
    mn_mont = base_op.mont_mul(be, n2, pad_limbs(np.asarray(m, np.uint64), n2.num_limbs), k["n"],
                               checked=False)                             # m·n·R
    g_mont = _mod_add_limbs(np.asarray(mn_mont, np.uint64), k["one"], n2.m_limbs)  # (1 + m·n)·R
    return base_op.mont_mul(be, n2, g_mont, x_mont, checked=False)


def _owner_fixed_base_tables(be: Backend, sk: PaillierPrivateMaterial
                             ) -> tuple[np.ndarray, np.ndarray]:
    """The comb tables of hs mod p² and hs mod q² (Montgomery form of each half-size modulus), held
    by the backend instance and keyed by the private record (a new fixed base is a new record)."""
    def build() -> tuple[np.ndarray, np.ndarray]:
        pk = sk.public_key
        fb = pk.require_fixed_base()
        hs = from_limbs(base_op.from_mont(be, pk.nsquare_ctx, fb.hs_mont[None, :]))[0]
        out = []
        for ctx in (sk.psquare_ctx, sk.qsquare_ctx):
            base = base_op.to_mont(be, ctx, ctx.to_limbs([hs % ctx.m]))
            out.append(_comb_table(be, ctx, np.asarray(base, np.uint64), fb.exp_bits, fb.window))
        return out[0], out[1]
    return be.state.get(sk, "owner_fixed_base_tables", build)


# ---- DJN fixed base (comb tables)
def _fixed_base_table(be: Backend, pk: PaillierPublicMaterial) -> np.ndarray:
    """The comb table (nwin, 2^w − 1, L2) for the generic fixed-base composition, cached per key.

    Held by the backend instance, keyed by the key's record: a new fixed base (a new record) never
    meets an old table, and the build runs once however many threads ask at the same time."""
    fb = pk.require_fixed_base()
    return be.state.get(pk, "fixed_base_table", lambda: _comb_table(
        be, pk.nsquare_ctx, fb.hs_mont[None, :].copy(), fb.exp_bits, fb.window))


def _comb_table(be: Backend, ctx: MontContext, base_mont: np.ndarray, exp_bits: int, window: int
                ) -> np.ndarray:
    """table[j, d−1] = base^(d·2^(window·j)) (Montgomery form), j < ceil(exp_bits/window)."""
    nwin = -(-exp_bits // window)
    per = (1 << window) - 1
    table = np.empty((nwin, per, ctx.num_limbs), np.uint64)
    base: Limbs = base_mont
    for j in range(nwin):
        table[j, 0] = np.asarray(base)[0]
        for d in range(1, per):
            table[j, d] = np.asarray(base_op.mont_mul(be, ctx, table[j, d - 1:d], base,
                                                      checked=False))[0]
        for _ in range(window):
            base = base_op.mont_mul(be, ctx, base, base, checked=False)
    return table


def _comb_power(be: Backend, ctx: MontContext, table: np.ndarray, window: int, a: np.ndarray
                ) -> Limbs:
    """base^a for each row of ``a``, as a grouped product of comb-table entries (Montgomery form).

    Raises:
        OperandError: an exponent is longer than the table covers."""
    nwin = table.shape[0]
    a = np.ascontiguousarray(a, dtype=np.uint64)
    check_covered(a, nwin * window)
    digits = window_digits(a, window, nwin)[::-1]          # (nwin, N), least significant first
    j_idx, rows = np.nonzero(digits)
    entries = table[j_idx, digits[j_idx, rows] - 1]
    return mod_op.mont_prod_groups(be, ctx, entries, rows, a.shape[0])


def _fixed_base_obfuscators(be: Backend, pk: "PublicKey | PaillierPublicMaterial", a: np.ndarray
                            ) -> Limbs:
    """hs^a mod n² for each row of ``a`` (Montgomery form), from the full-size comb table."""
    rec = pk if isinstance(pk, PaillierPublicMaterial) else pk.material
    fb = rec.require_fixed_base()
    return _comb_power(be, rec.nsquare_ctx, _fixed_base_table(be, rec), fb.window, a)


# ---- host limb arithmetic (vectorised over rows, for the composed CRT combine)
def _add_limbs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a + b mod 2^(64·L), carry out of the top limb), row-wise.  Limb sums wrap; the carries then
    ripple one limb per pass, and a carry only travels on through all-ones limbs, so the passes
    are few whatever L."""
    s = a + b
    carry = s < a
    out = np.zeros(s.shape[0], bool)
    while carry.any():
        out |= carry[:, -1]
        step = np.zeros_like(s)
        step[:, 1:] = carry[:, :-1]
        s2 = s + step
        carry = s2 < s
        s = s2
    return s, out


def _sub_limbs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a − b mod 2^(64·L), borrow out of the top limb), row-wise (borrows ripple as carries do)."""
    d = a - b
    borrow = a < b
    out = np.zeros(d.shape[0], bool)
    while borrow.any():
        out |= borrow[:, -1]
        step = np.zeros_like(d)
        step[:, 1:] = borrow[:, :-1]
        d2 = d - step
        borrow = d < step
        d = d2
    return d, out


def _mod_add_limbs(a: np.ndarray, b: np.ndarray, m_limbs: np.ndarray) -> np.ndarray:
    """(a + b) mod m for a, b < m (b may be one row)."""
    s, carry = _add_limbs(a, np.broadcast_to(b, a.shape))
    over = carry | ~less_than(s, m_limbs)
    if over.any():
        s[over] = _sub_limbs(s[over], np.broadcast_to(m_limbs, s[over].shape))[0]
    return s


def _mod_sub_limbs(a: np.ndarray, b: np.ndarray, m_limbs: np.ndarray) -> np.ndarray:
    """(a − b) mod m for a, b < m."""
    d, borrow = _sub_limbs(a, b)
    if borrow.any():
        d[borrow] = _add_limbs(d[borrow], np.broadcast_to(m_limbs, d[borrow].shape))[0]
    return d


def _random_limbs(count: int, bits: int, below: int | None = None) -> np.ndarray:
    """``count`` integers uniform in [1, 2^bits) -- or in [1, ``below``) when given, ``below`` of
    exactly ``bits`` bits -- as (count, ceil(bits/64)) limbs, from the OS CSPRNG (``os.urandom``).
    Rejection sampling, vectorised: each draw of ``bits`` random bits is kept when it lies in the
    range, which happens with probability at least 1/2."""
    L = limb_count(bits)
    top = np.uint64((1 << (bits - 64 * (L - 1))) - 1)
    bound = None if below is None else to_limbs([below], L)[0]
    out = np.empty((count, L), np.uint64)
    filled = 0
    while filled < count:
        need = count - filled
        draw = need + need // 2 + 8
        x = np.frombuffer(os.urandom(8 * L * draw), dtype="<u8").reshape(draw, L).astype(np.uint64)
        x[:, -1] &= top
        keep = x.any(axis=1)
        if bound is not None:
            keep &= less_than(x, bound)
        got = x[keep][:need]
        out[filled:filled + len(got)] = got
        filled += len(got)
    return out


def decrypt_limbs(backend: Backend | str | None, sk: PrivateKey, c_mont: Limbs) -> Limbs:
    """Decrypt Montgomery-form ciphertexts (N, L2) to plaintext limbs (N, Ln) with the CRT
    (:func:`paillier_decrypt`)."""
    be = resolve_backend(backend)
    if c_mont.shape[0] == 0:
        return np.empty((0, sk.public_key.n_ctx.num_limbs), np.uint64)
    return paillier_decrypt(be, sk.material, c_mont)

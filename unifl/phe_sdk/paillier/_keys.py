"""Paillier keys: the public key (n, g = n + 1) and the private key (p, q and the CRT constants),
their generation and checks, and the raw python-paillier-compatible API on plain integers.

A key object holds one plain record (:mod:`unifl.core.keys`) that the backends' fused ops take; the
backend argument of every public method is resolved here, at the edge, once.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import threading
from typing import Any, Iterable, Iterator, Sequence

import gmpy2
import numpy as np

from ... import base_op, mod_op
from ...base_op import MontContext, from_limbs, mont_context, to_limbs
from ...core.backend import Backend
from ...core.contract import Limbs
from ...core.keys import (FixedBase, PaillierPrivateMaterial, PaillierPublicMaterial,
                          ResidueGenerators)
from ...core.limbs import less_than
from ...core.errors import InvalidCiphertextError, KeyMismatchError, OperandError, WeakKeyError
from .. import exposure
from .._util import resolve_backend
from ..primes import (check_prime_pair, p_minus_1_factors, random_below,
                      random_prime_with_known_order, unit_group_generator)
from ._encryption import decrypt_limbs, encrypt_limbs
from ._obfuscation import random_units
from ._pool import ObfuscatorPool, existing_pool, obfuscator_pool

__all__ = ["PublicKey", "PrivateKey", "keygen", "require_units", "DEFAULT_KEY_BITS",
           "MIN_KEY_BITS", "MAX_KEY_BITS", "FIXED_BASE_TABLE_BYTES", "GENERATOR_WINDOW"]

DEFAULT_KEY_BITS = 2048
MIN_KEY_BITS = 1024
#: largest modulus accepted from anywhere; checked before any primality test, so an oversize key
#: from a peer costs nothing (and n² stays within the Montgomery layer's 16384-bit limit)
MAX_KEY_BITS = 8192


#: memory budget of the default DJN comb table (see :meth:`PublicKey.enable_fixed_base`)
FIXED_BASE_TABLE_BYTES = 32 << 20

#: comb digit width of the key owner's generator tables.  The fused op reads every entry of a
#: window to select one (no table address depends on the secret exponent), so a read costs 2^w − 1
#: entries: 5 bits balances that against one MontMult per window (tables of 31 entries a window:
#: 0.4 MB a prime at 1024 bits, 1.6 MB at 2048, 6.5 MB at 4096)
GENERATOR_WINDOW = 5


def owner_generators(p: int, q: int) -> ResidueGenerators | None:
    """Generators of the n-th residues mod p² and mod q² (see :class:`ResidueGenerators`), or None
    when they cannot be proven: p − 1 or q − 1 without a known factorisation (keys made elsewhere,
    mostly), or gcd(q, p − 1) ≠ 1 (then r^n mod p² ranges over a smaller subgroup).

    gp = a^p mod p² for a primitive root a mod p: a p-th power, so in the subgroup of order p − 1,
    and of order p − 1 itself since gp ≡ a (mod p) (Fermat)."""
    if math.gcd(q, p - 1) != 1 or math.gcd(p, q - 1) != 1:
        return None
    gens = []
    for prime in (p, q):
        factors = p_minus_1_factors(prime)
        if factors is None:
            return None
        gens.append(int(gmpy2.powmod(unit_group_generator(prime, factors), prime, prime * prime)))
    return ResidueGenerators(gp=gens[0], gq=gens[1], window=GENERATOR_WINDOW)


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
        return random_units(self.material, count)

    # ---- obfuscators computed ahead of use (one pool per key and backend instance)
    def obfuscators(self, backend: Backend | str | None = None,
                    private_key: "PrivateKey | None" = None) -> ObfuscatorPool:
        """The pool of obfuscation factors r^n of this key on ``backend`` (made on first use and
        held in the backend's state): fill it ahead (``reserve``, ``refill_while``) and every
        encryption under this key on that backend takes its factors from it, one MontMult per
        element.  ``private_key`` (the key owner) fills it through the CRT.

        Raises:
            KeyMismatchError: ``private_key`` belongs to another key.
        """
        if private_key is not None and private_key.public_key != self:
            raise KeyMismatchError("private_key does not belong to this public key")
        return obfuscator_pool(resolve_backend(backend), self, private_key)

    def precompute(self, count: int, backend: Backend | str | None = None) -> int:
        """Compute ``count`` obfuscation factors now (e.g. while idle) into this key's pool on
        ``backend`` (:meth:`obfuscators`), within its capacity; returns how many were added.
        Each factor is consumed by exactly one encryption."""
        return self.obfuscators(backend).fill(count)

    def pool_size(self, backend: Backend | str | None = None) -> int:
        """Factors ready in this key's pool on ``backend`` (0 without a pool)."""
        pool = existing_pool(resolve_backend(backend), self)
        return 0 if pool is None else pool.ready()

    # ---- DJN fixed base
    def enable_fixed_base(self, window: int | None = None, exp_bits: int | None = None,
                          backend: Backend | str | None = None) -> FixedBase:
        """Switch encryption to the DJN fixed-base variant (see :mod:`unifl.phe_sdk.paillier`).

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

    def check_ciphertexts(self, ciphertexts: "Sequence[int] | np.ndarray",
                          backend: Backend | str | None = None) -> None:
        """Refuse any ciphertext that is not a unit mod n² in [1, n²).

        A value sharing a factor with n (a multiple of p, q or n) decrypts, on the CRT path, to a
        value that reveals p + q, i.e. the factorisation; every ciphertext that comes from outside
        goes through this check (or :func:`require_units`) before it can reach a decryption.
        Accepts Python ints or plain (non-Montgomery) (N, L) limbs mod n².  Costs one modular
        multiplication per element (on ``backend`` when given) and a single gcd (the offenders are
        only located on failure).

        Raises:
            InvalidCiphertextError: naming the index of the first offending ciphertext.
        """
        require_units(self, ciphertexts, backend)


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
        psquare_ctx, qsquare_ctx = mont_context(self.psquare), mont_context(self.qsquare)
        generators = owner_generators(p, q)
        # The CRT constants live in the key record (what backends read), computed once here.
        self._material = PaillierPrivateMaterial(
            public_key=self.public_key.material, p=p, q=q,
            psquare_ctx=psquare_ctx, qsquare_ctx=qsquare_ctx,
            # h_p = L_p(g^(p-1) mod p²)^-1 mod p with g = n + 1
            # (GMP's powmod: Python's pow took 11.7 ms a prime at 2048 bits, GMP 1.3 ms)
            hp=int(gmpy2.invert((gmpy2.powmod(n + 1, p - 1, self.psquare) - 1) // p, p)),
            hq=int(gmpy2.invert((gmpy2.powmod(n + 1, q - 1, self.qsquare) - 1) // q, q)),
            q_inverse=int(gmpy2.invert(q, p)),
            # Garner's constant of the key owner's CRT, x = x_p + p²·((x_q − x_p)·(p²)^-1 mod q²)
            psquare_inverse=int(gmpy2.invert(self.psquare, self.qsquare)),
            # gcd(q, p−1) = gcd(p, q−1) = 1 (always for primes of equal size) lets the key owner
            # draw obfuscation factors with half-length exponents (see paillier_encrypt_owner)
            half_exponent_obfuscation=math.gcd(q, p - 1) == 1 and math.gcd(p, q - 1) == 1,
            generators=generators)
        self._material_lock = threading.Lock()
        # while this key lives, no message the codec or the FATE plug-in sends may carry its
        # secrets, in any form the guard knows (unifl.phe_sdk.exposure)
        exposure.watch(self, n, p, q, extra=(self._material.hp, self._material.hq,
                                             self._material.psquare_inverse)
                       + (() if generators is None else (generators.gp, generators.gq)))

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

    @property
    def generators(self) -> ResidueGenerators | None:
        """The proven generators of the n-th residues mod p² and q² (None: not provable for this
        key), which make the key owner's obfuscation a fixed-base product (``encrypt_fresh``)."""
        return self._material.generators

    def __repr__(self) -> str:  # never shows the primes
        return f"<paillier.PrivateKey for {self.public_key!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrivateKey) and (other.p, other.q) == (self.p, self.q)

    def __hash__(self) -> int:
        return hash(("paillier-sk", self.p, self.q))

    def raw_encrypt(self, plaintexts: Sequence[int], backend: Backend | str | None = None,
                    r_values: Sequence[int] | None = None) -> list[int]:
        """Encryption by the key owner, with the CRT mod p² and q² (see ``encrypt_limbs``);
        identical to ``public_key.raw_encrypt`` for the same r."""
        be = resolve_backend(backend)
        pk = self.public_key
        m = pk.plaintext_limbs(plaintexts)
        r = None if r_values is None else pk.n_ctx.to_limbs([int(v) for v in r_values])
        if r is not None and len(r) != len(m):
            raise OperandError(f"{len(m)} plaintexts but {len(r)} r values")
        c_mont = encrypt_limbs(be, pk, m, r=r, private_key=self)
        return from_limbs(base_op.from_mont(be, pk.nsquare_ctx, c_mont))

    def obfuscators(self, backend: Backend | str | None = None) -> ObfuscatorPool:
        """The pool of obfuscation factors of this key on ``backend``, filled through the CRT
        (:meth:`PublicKey.obfuscators` with this key as its owner)."""
        return self.public_key.obfuscators(backend, private_key=self)

    def raw_decrypt(self, ciphertexts: Sequence[int], backend: Backend | str | None = None
                    ) -> list[int]:
        """Plaintexts in [0, n) of plain ciphertext ints (python-paillier's ``raw_decrypt``)."""
        be = resolve_backend(backend)
        c_mont = self.public_key.ciphertext_limbs(ciphertexts, be)
        return from_limbs(decrypt_limbs(be, self, c_mont))


def require_units(pk: PublicKey, ciphertexts: "Sequence[int] | np.ndarray",
                  backend: Backend | str | None = None) -> None:
    """Check that every ciphertext lies in [1, n²) and is a unit mod n (gcd(c, n) = 1).

    ``ciphertexts``: Python ints, or plain (non-Montgomery) limbs of shape (N, L) mod n².  The unit
    test multiplies all c together and takes one gcd with n; only when that gcd is not 1 are the
    offenders looked for one by one.  With a ``backend``, limbs are multiplied there: one grouped
    Montgomery product mod n², ∏c·R^j for an integer j, whose gcd with n is that of ∏c (R is a
    power of two, a unit mod the odd n, and n divides n²); a 2048-bit key's 24,000 ciphertexts
    took 0.080 s through gmpy2 here and 0.054 s on ``native``.  Without, all c mod n are
    multiplied with gmpy2.

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
        values: Iterable[Any] = _mpz_rows(limbs)     # read only where gmpy2 multiplies
    else:
        limbs = None
        values = [int(v) for v in ciphertexts]
        for i, v in enumerate(values):
            if not 0 < v < pk.nsquare:
                raise InvalidCiphertextError(f"ciphertext #{i} is outside [1, n²)")
    n = gmpy2.mpz(pk.n)
    if limbs is not None and backend is not None:
        if len(limbs) == 0:
            return
        prod = mod_op.mont_prod_groups(resolve_backend(backend), ctx, limbs,
                                       np.zeros(len(limbs), np.int64), 1)
        if gmpy2.gcd(from_limbs(np.asarray(prod))[0], n) == 1:
            return
    else:
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


def _mpz_rows(limbs: np.ndarray) -> Iterator[Any]:
    """Each row of plain limbs as an mpz, made when first asked for.  gmpy2's portable binary
    form of a positive mpz is b"\\x01\\x01" + the little-endian magnitude: straight from the limb
    bytes, cheaper than going through Python ints (docs/perf.md §4)."""
    raw = np.ascontiguousarray(limbs, dtype="<u8").tobytes()
    width, from_binary = 8 * limbs.shape[1], gmpy2.from_binary
    for i in range(0, len(raw), width):
        yield from_binary(b"\x01\x01" + raw[i:i + width])


def keygen(bits: int = DEFAULT_KEY_BITS) -> tuple[PublicKey, PrivateKey]:
    """A fresh key pair with n of exactly ``bits`` bits and primes of equal size (bits/2 each).

    Each prime has p − 1 = 2·t·s with t < 2^16 and s prime
    (:func:`~unifl.phe_sdk.primes.random_prime_with_known_order`), so the key owner can prove
    generators of the n-th residues and obfuscate from comb tables (:class:`ResidueGenerators`)."""
    if bits < MIN_KEY_BITS or bits % 2:
        raise WeakKeyError(f"Paillier key size must be even and at least the minimum of {MIN_KEY_BITS} "
                           f"bits, got {bits}")
    while True:
        p = random_prime_with_known_order(bits // 2)
        q = random_prime_with_known_order(bits // 2)
        if p != q and (p * q).bit_length() == bits:
            sk = PrivateKey(p, q)
            return sk.public_key, sk



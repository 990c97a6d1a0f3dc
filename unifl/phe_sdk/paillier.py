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
"""

from __future__ import annotations

import hashlib
import math
import dataclasses
import threading
from typing import Sequence

import gmpy2
import numpy as np

from .. import base_op, mod_op
from ..base_op import MontContext, from_limbs, mont_context, to_limbs
from ..core.exponents import window_digits
from ..core.keys import FixedBase, PaillierPrivateMaterial, PaillierPublicMaterial
from ..core.limbs import less_than
from ..core.errors import InvalidCiphertextError, InvalidKeyError, OperandError, WeakKeyError
from ._util import pad_limbs, resolve_backend
from .primes import check_prime_pair, random_below, random_prime

DEFAULT_KEY_BITS = 2048
MIN_KEY_BITS = 1024
#: largest modulus accepted from anywhere; checked before any primality test, so an oversize key
#: from a peer costs nothing (and n² stays within the Montgomery layer's 16384-bit limit)
MAX_KEY_BITS = 8192

__all__ = ["PublicKey", "PrivateKey", "keygen", "DEFAULT_KEY_BITS", "MIN_KEY_BITS", "MAX_KEY_BITS",
           "encrypt_limbs", "decrypt_limbs", "require_units"]


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
    def precompute(self, count: int, backend=None) -> None:
        """Compute ``count`` obfuscation factors r^n mod n² now (e.g. while idle), for later encryptions.

        Each factor is consumed by exactly one encryption and then discarded.
        """
        be = resolve_backend(backend)
        zeros = np.zeros((count, self.n_ctx.num_limbs), np.uint64)
        obf = encrypt_limbs(be, self, zeros, use_pool=False)  # E(0) = r^n
        with self._pool_lock:
            self._pool.append(obf)

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
                          backend=None) -> FixedBase:
        """Switch encryption to the DJN fixed-base variant (see the module docstring).

        Args:
            window: comb digit width; the table holds ceil(exp_bits/window)·(2^window − 1) entries of
                n²'s size.  Default: the widest of 10, 9 whose table fits in 32 MiB, else 8 --
                10 at 1024 bits (14 MB), 9 at 2048 bits (30 MB), 8 above.  Each encryption costs
                ceil(exp_bits/window) MontMults; measured (native, 2048-bit key, per CPU-second)
                1802/s at w=8, 1984/s at w=9, 2111/s at w=10 (54 MB, judged too large).
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
    def raw_encrypt(self, plaintexts: Sequence[int], backend=None,
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

    def ciphertext_limbs(self, ciphertexts: Sequence[int], backend=None) -> np.ndarray:
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
        self.psquare_ctx = mont_context(self.psquare)
        self.qsquare_ctx = mont_context(self.qsquare)
        n = self.public_key.n
        # h_p = L_p(g^(p-1) mod p²)^-1 mod p with g = n + 1
        self.hp = int(gmpy2.invert((pow(n + 1, p - 1, self.psquare) - 1) // p, p))
        self.hq = int(gmpy2.invert((pow(n + 1, q - 1, self.qsquare) - 1) // q, q))
        self.q_inverse = int(gmpy2.invert(q, p))
        self.qsquare_inverse = int(gmpy2.invert(self.qsquare, self.psquare))
        # gcd(q, p−1) = gcd(p, q−1) = 1 (always for primes of equal size) lets the key owner draw
        # obfuscation factors with half-length exponents (see _obfuscators_crt_fresh)
        self.half_exponent_obfuscation = math.gcd(q, p - 1) == 1 and math.gcd(p, q - 1) == 1
        self._material: PaillierPrivateMaterial | None = None

    @property
    def material(self) -> PaillierPrivateMaterial:
        """What the fused ops of a backend take (follows the public key's record)."""
        mat = self._material
        if mat is None or mat.public_key is not self.public_key.material:
            mat = self._material = PaillierPrivateMaterial(
                public_key=self.public_key.material, p=self.p, q=self.q,
                psquare_ctx=self.psquare_ctx, qsquare_ctx=self.qsquare_ctx, hp=self.hp, hq=self.hq,
                q_inverse=self.q_inverse, qsquare_inverse=self.qsquare_inverse,
                half_exponent_obfuscation=self.half_exponent_obfuscation)
        return mat

    def __repr__(self) -> str:  # never shows the primes
        return f"<paillier.PrivateKey for {self.public_key!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PrivateKey) and (other.p, other.q) == (self.p, self.q)

    def __hash__(self) -> int:
        return hash(("paillier-sk", self.p, self.q))

    def raw_encrypt(self, plaintexts: Sequence[int], backend=None,
                    r_values: Sequence[int] | None = None) -> list[int]:
        """Encryption by the key owner, r^n computed with the CRT mod p² and q² (exponents reduced
        mod p(p−1) and q(q−1)); identical to ``public_key.raw_encrypt`` for the same r."""
        be = resolve_backend(backend)
        pk = self.public_key
        m = pk.plaintext_limbs(plaintexts)
        r = None if r_values is None else pk.n_ctx.to_limbs([int(v) for v in r_values])
        if r is not None and len(r) != len(m):
            raise OperandError(f"{len(m)} plaintexts but {len(r)} r values")
        c_mont = encrypt_limbs(be, pk, m, r=r, private_key=self)
        return from_limbs(base_op.from_mont(be, pk.nsquare_ctx, c_mont))

    def raw_decrypt(self, ciphertexts: Sequence[int], backend=None) -> list[int]:
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
        # straight from the limb bytes, ~20% less CPU than going through Python ints
        raw = np.ascontiguousarray(limbs, dtype="<u8").tobytes()
        width, from_binary = 8 * ctx.num_limbs, gmpy2.from_binary
        values = (from_binary(b"\x01\x01" + raw[i:i + width]) for i in range(0, len(raw), width))
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
def _finish(be, pk: PublicKey, m: np.ndarray, obf_mont: np.ndarray) -> np.ndarray:
    """c̄ = (1 + m·n)·obf in Montgomery form: MontMult(g^m, obf̄) = g^m·obf, then into the domain."""
    ctx = pk.nsquare_ctx
    gm = to_limbs([1 + x * pk.n for x in from_limbs(m)], ctx.num_limbs)
    return base_op.to_mont(be, ctx, base_op.mont_mul(be, ctx, gm, obf_mont, checked=False))


def encrypt_limbs(backend, pk: PublicKey, m: np.ndarray, r: np.ndarray | None = None,
                  use_pool: bool = True, private_key: "PrivateKey | None" = None) -> np.ndarray:
    """Encrypt raw plaintext limbs (N, Ln), each in [0, n), to Montgomery-form ciphertexts (N, L2).

    Order of preference: explicit ``r``; the precomputed pool; the fixed-base variant when enabled;
    fresh r^n (with the CRT when the key owner passes ``private_key``).  Native fused ops are used
    when the backend has them.
    """
    be = resolve_backend(backend)
    ctx = pk.nsquare_ctx
    count = m.shape[0]
    if count == 0:
        return np.empty((0, ctx.num_limbs), np.uint64)
    if r is None and use_pool:
        obf = pk._take_pool(count)
        if obf is not None:
            return _finish(be, pk, m, obf)
    if r is None and pk.fixed_base is not None:
        fb = pk.fixed_base
        a = to_limbs(random_below(1 << fb.exp_bits, count), -(-fb.exp_bits // 64))
        if be.implements("paillier_encrypt_fixed_base"):
            return be.op_paillier_encrypt_fixed_base(pk.material, m, a)
        return _finish(be, pk, m, _fixed_base_obfuscators(be, pk, a))
    if private_key is not None:
        if r is None and private_key.half_exponent_obfuscation:
            return _finish(be, pk, m, _obfuscators_crt_fresh(be, private_key, count))
        return _finish(be, pk, m, _obfuscators_crt(be, private_key,
                                                   pk.random_r(count) if r is None else r))
    if r is None:
        r = pk.random_r(count)
    if be.implements("paillier_encrypt"):
        return be.op_paillier_encrypt(pk.material, m, r)
    r_mont = base_op.to_mont(be, ctx, pad_limbs(r, ctx.num_limbs))
    return _finish(be, pk, m, mod_op.mont_exp(be, ctx, r_mont, mod_op.exp_limbs(pk.n)))


def _obfuscators_crt(be, sk: "PrivateKey", r: np.ndarray) -> np.ndarray:
    """r^n mod n² (Montgomery form) for given r, from r^(n mod p(p−1)) mod p² and r^(n mod q(q−1))
    mod q²: two exponentiations with half-size moduli instead of one full-size one."""
    pk = sk.public_key
    rs = from_limbs(r)
    return _crt_combine(be, sk, [
        (sq_ctx, [v % sq_ctx.m for v in rs], pk.n % order)
        for sq_ctx, order in ((sk.psquare_ctx, sk.p * (sk.p - 1)), (sk.qsquare_ctx, sk.q * (sk.q - 1)))])


def _obfuscators_crt_fresh(be, sk: "PrivateKey", count: int) -> np.ndarray:
    """``count`` fresh obfuscation factors for the key owner, distributed exactly as r^n mod n² for r
    uniform in Z_n*, with half-length exponents: y_p^p mod p² and y_q^q mod q², y_p uniform in
    [1, p), y_q uniform in [1, q), joined by the CRT.

    Why it is the same distribution: gcd(q, p−1) = 1 for primes of equal size, so r ↦ r^q is a
    bijection of Z_p*, and x^p mod p² depends only on x mod p.  Hence r^n mod p² = (r^q mod p)^p mod p²
    is y^p mod p² with y = r^q mod p uniform in Z_p* (and independent of the q side, by the CRT).  The
    exponents are p and q (n/2 bits) instead of n mod p(p−1) (n bits): half the multiplications of
    :func:`_obfuscators_crt`.  With the same y this is bit-identical on every backend.
    """
    return _crt_combine(be, sk, [(sk.psquare_ctx, random_below(sk.p, count), sk.p),
                                 (sk.qsquare_ctx, random_below(sk.q, count), sk.q)])


def _crt_combine(be, sk: "PrivateKey", halves_spec) -> np.ndarray:
    """x mod n² (Montgomery form) from x_p = base_p^e_p mod p² and x_q = base_q^e_q mod q² (Garner)."""
    pk = sk.public_key
    halves = []
    for sq_ctx, bases, exponent in halves_spec:
        x = sq_ctx.to_limbs(bases)
        # base and exponent derive from p, q: the constant-time op of the backend
        halves.append(from_limbs(mod_op.mod_exp_secret(be, sq_ctx, x, mod_op.exp_limbs(exponent))))
    psq, qsq, inv = sk.psquare, sk.qsquare, sk.qsquare_inverse
    obf = [b + qsq * ((a - b) * inv % psq) for a, b in zip(*halves)]
    return base_op.to_mont(be, pk.nsquare_ctx, to_limbs(obf, pk.nsquare_ctx.num_limbs))


def _fixed_base_table(be, pk: PublicKey) -> np.ndarray:
    """The comb table (nwin, 2^w − 1, L2) for the generic fixed-base composition, cached per key.

    Held by the backend instance, keyed by the key's record: a new fixed base (a new record) never
    meets an old table, and the build runs once however many threads ask at the same time."""
    return be.state.get(pk.material, "fixed_base_table", lambda: _build_fixed_base_table(be, pk))


def _build_fixed_base_table(be, pk: PublicKey) -> np.ndarray:
    fb = pk.fixed_base
    ctx = pk.nsquare_ctx
    nwin = -(-fb.exp_bits // fb.window)
    per = (1 << fb.window) - 1
    table = np.empty((nwin, per, ctx.num_limbs), np.uint64)
    base = fb.hs_mont[None, :].copy()
    for j in range(nwin):
        table[j, 0] = base[0]
        for d in range(1, per):
            table[j, d] = base_op.mont_mul(be, ctx, table[j, d - 1:d], base, checked=False)[0]
        for _ in range(fb.window):
            base = base_op.mont_mul(be, ctx, base, base, checked=False)
    return table


def _fixed_base_obfuscators(be, pk: PublicKey, a: np.ndarray) -> np.ndarray:
    """hs^a for each row of ``a``, as a grouped product of comb-table entries (Montgomery form)."""
    fb = pk.fixed_base
    table = _fixed_base_table(be, pk)
    nwin = table.shape[0]
    digits = window_digits(a, fb.window, nwin)[::-1]          # (nwin, N), least significant first
    j_idx, rows = np.nonzero(digits)
    entries = table[j_idx, digits[j_idx, rows] - 1]
    return mod_op.mont_prod_groups(be, pk.nsquare_ctx, entries, rows, a.shape[0])


def decrypt_limbs(backend, sk: PrivateKey, c_mont: np.ndarray) -> np.ndarray:
    """Decrypt Montgomery-form ciphertexts (N, L2) to plaintext limbs (N, Ln) with the CRT."""
    be = resolve_backend(backend)
    pk = sk.public_key
    if c_mont.shape[0] == 0:
        return np.empty((0, pk.n_ctx.num_limbs), np.uint64)
    if be.implements("paillier_decrypt"):
        return be.op_paillier_decrypt(sk.material, c_mont)
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

"""RSA with e = 65537 for RSA-blind-signature PSI (FLASH appendix C; O7–O9), batched on any backend.

* public op        y = x^e mod n
* private op (CRT) x = CRT(y^dp mod p, y^dq mod q),  dp = d mod (p−1), dq = d mod (q−1)
* blind            b = H(x)·r^e mod n         (r uniform in Z_n*, kept by the blinding party)
* sign (server)    s = b^d = H(x)^d·r mod n   (the private op)
* unblind          s·r^-1 = H(x)^d mod n

``full_domain_hash`` maps identifiers to Z_n with SHA-256 in counter mode (an MGF1-style
expansion to the bit length of n), so that blinded values are uniform and unlinkable.
"""

from __future__ import annotations

import hashlib
import math
from typing import Sequence

import gmpy2
import numpy as np

from .. import mod_op
from ..core.backend import Backend
from ..base_op import from_limbs, mont_context
from ..core.errors import OperandError, SignatureError, WeakKeyError
from . import exposure
from ._util import resolve_backend
from .primes import check_prime_pair, random_below, random_prime

DEFAULT_KEY_BITS = 2048
MIN_KEY_BITS = 1024
#: largest modulus accepted from anywhere (checked before any other work on the key)
MAX_KEY_BITS = 8192
E = 65537

__all__ = ["PublicKey", "PrivateKey", "keygen", "full_domain_hash", "DEFAULT_KEY_BITS", "MIN_KEY_BITS",
           "MAX_KEY_BITS", "E"]


def _check_exponent(e: int) -> None:
    # Only e = 65537: a small e (3) invites low-exponent attacks on unpadded values, and a huge e
    # from a peer would make every public operation arbitrarily expensive.
    if e != E:
        raise WeakKeyError(f"RSA public exponent must be {E} (got {e})")


class PublicKey:
    """RSA public key (n, e)."""

    def __init__(self, n: int, e: int = E) -> None:
        n, e = int(n), int(e)
        if n <= 0 or n % 2 == 0 or n.bit_length() < MIN_KEY_BITS:
            raise WeakKeyError(f"RSA modulus must be odd and >= {MIN_KEY_BITS} bits "
                               f"(got {n.bit_length()} bits)")
        if n.bit_length() > MAX_KEY_BITS:
            raise WeakKeyError(f"RSA modulus of {n.bit_length()} bits is above the maximum of "
                               f"{MAX_KEY_BITS}")
        _check_exponent(e)
        self.n, self.e = n, e
        self.bits = n.bit_length()
        self.n_ctx = mont_context(n)
        self.fingerprint = hashlib.sha256(b"unifl-rsa-pk" + n.to_bytes((self.bits + 7) // 8, "big")
                                          + e.to_bytes(8, "big")).hexdigest()[:32]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and (other.n, other.e) == (self.n, self.e)

    def __hash__(self) -> int:
        return hash(("rsa", self.n, self.e))

    def __repr__(self) -> str:
        return f"<rsa.PublicKey {self.bits} bits, e={self.e}>"

    def _limbs(self, values: Sequence[int]) -> np.ndarray:
        return self.n_ctx.to_limbs([int(v) for v in values])

    def raw_encrypt(self, values: Sequence[int], backend: Backend | str | None = None
                    ) -> list[int]:
        """x^e mod n for every x in [0, n) (O7, public direction)."""
        be = resolve_backend(backend)
        return from_limbs(mod_op.mod_exp(be, self.n_ctx, self._limbs(values),
                                         mod_op.exp_limbs(self.e)))

    def blind(self, values: Sequence[int], backend: Backend | str | None = None,
              r_values: Sequence[int] | None = None) -> tuple[list[int], list[int]]:
        """Blind hashed values (O8): returns ``(blinded, r)`` with blinded = x·r^e mod n.

        Keep ``r`` private; pass it to :meth:`unblind`.
        """
        be = resolve_backend(backend)
        vals = [int(v) for v in values]
        rs = [int(r) for r in r_values] if r_values is not None else random_below(self.n, len(vals))
        if len(rs) != len(vals):
            raise OperandError(f"{len(vals)} values but {len(rs)} blinding factors")
        for r in rs:
            if math.gcd(r, self.n) != 1:
                raise OperandError("blinding factor not invertible mod n")
        re = mod_op.mod_exp(be, self.n_ctx, self._limbs(rs), mod_op.exp_limbs(self.e))
        blinded = mod_op.mod_mul(be, self.n_ctx, self._limbs(vals), re)
        return from_limbs(blinded), rs

    def unblind(self, signed: Sequence[int], r_values: Sequence[int],
                backend: Backend | str | None = None) -> list[int]:
        """Remove the blinding (O9): s·r^-1 mod n."""
        be = resolve_backend(backend)
        if len(signed) != len(r_values):
            raise OperandError(f"{len(signed)} signatures but {len(r_values)} blinding factors")
        s_limbs = self._limbs(signed)          # the signer's values: range-checked to [0, n)
        inv = []
        for r in r_values:
            r = int(r)
            if not 0 < r < self.n or math.gcd(r, self.n) != 1:
                raise OperandError("blinding factor outside [1, n) or not invertible mod n")
            inv.append(int(gmpy2.invert(r, self.n)))
        return from_limbs(mod_op.mod_mul(be, self.n_ctx, s_limbs, self._limbs(inv)))

    def verify(self, values: Sequence[int], signatures: Sequence[int],
               backend: Backend | str | None = None) -> None:
        """Check s^e == x mod n for every pair (batched); a signer's wrong answer raises.

        Raises:
            SignatureError: naming the index of the first signature that does not verify.
            OperandError: a value or signature outside [0, n), or counts that differ.
        """
        be = resolve_backend(backend)
        if len(values) != len(signatures):
            raise OperandError(f"{len(values)} values but {len(signatures)} signatures")
        x = self._limbs(values)
        _verify_limbs(be, self, x, self._limbs(signatures))


class PrivateKey:
    """RSA private key from its primes p, q and public exponent e."""

    def __init__(self, p: int, q: int, e: int = E) -> None:
        p, q, e = int(p), int(q), int(e)
        _check_exponent(e)
        check_prime_pair(p, q, "RSA", MIN_KEY_BITS, MAX_KEY_BITS)
        phi = (p - 1) * (q - 1)
        if math.gcd(e, phi) != 1:
            raise WeakKeyError("e is not invertible mod (p−1)(q−1)")
        self.public_key = PublicKey(p * q, e)
        self.p, self.q, self.e = p, q, e
        self.d = int(gmpy2.invert(e, phi))
        self.dp, self.dq = self.d % (p - 1), self.d % (q - 1)
        self.q_inverse = int(gmpy2.invert(q, p))
        self.p_ctx, self.q_ctx = mont_context(p), mont_context(q)
        exposure.watch(self, p * q, p, q, e)     # see unifl.phe_sdk.exposure

    def __repr__(self) -> str:  # never shows the primes
        return f"<rsa.PrivateKey for {self.public_key!r}>"

    def raw_decrypt(self, values: Sequence[int], backend: Backend | str | None = None
                    ) -> list[int]:
        """y^d mod n with the CRT (O7 private direction; signing blinded values in PSI)."""
        be = resolve_backend(backend)
        ys = [int(v) for v in values]
        for y in ys:
            if not 0 <= y < self.public_key.n:
                raise OperandError("RSA input outside [0, n)")
        # dp, dq are the private key: the backend's constant-time exponentiation
        mp = from_limbs(mod_op.mod_exp_secret(be, self.p_ctx,
                                              self.p_ctx.to_limbs([y % self.p for y in ys]),
                                              mod_op.exp_limbs(self.dp)))
        mq = from_limbs(mod_op.mod_exp_secret(be, self.q_ctx,
                                              self.q_ctx.to_limbs([y % self.q for y in ys]),
                                              mod_op.exp_limbs(self.dq)))
        p, q, qinv = self.p, self.q, self.q_inverse
        out = [b + q * ((a - b) * qinv % p) for a, b in zip(mp, mq)]
        # A fault in one CRT half (hardware, driver, cosmic ray) gives s with s^e ≡ y mod one prime
        # only; whoever receives it factors n with gcd(s^e − y, n) (Bellcore/Lenstra).  Verify every
        # result before it leaves: a mismatch raises and nothing is returned.
        if ys:
            ctx = self.public_key.n_ctx
            _verify_limbs(be, self.public_key, ctx.to_limbs(ys), ctx.to_limbs(out))
        return out

    sign = raw_decrypt


def _verify_limbs(be: Backend, pk: PublicKey, x: np.ndarray, s: np.ndarray) -> None:
    """Raise SignatureError unless s^e == x mod n row by row (one batched ModExp)."""
    if len(x) == 0:
        return
    se = np.asarray(mod_op.mod_exp(be, pk.n_ctx, s, mod_op.exp_limbs(pk.e)), dtype=np.uint64)
    bad = (se != np.asarray(x, dtype=np.uint64)).any(axis=1)
    if bad.any():
        raise SignatureError(f"RSA signature #{int(np.argmax(bad))} does not verify (s^e != x mod n)")


def keygen(bits: int = DEFAULT_KEY_BITS, e: int = E) -> tuple[PublicKey, PrivateKey]:
    """A fresh RSA key pair with n of exactly ``bits`` bits."""
    _check_exponent(int(e))
    if bits < MIN_KEY_BITS or bits % 2:
        raise WeakKeyError(f"RSA key size must be even and >= {MIN_KEY_BITS}, got {bits}")
    if bits > MAX_KEY_BITS:
        raise WeakKeyError(f"RSA key size must be <= {MAX_KEY_BITS}, got {bits}")
    while True:
        p, q = random_prime(bits // 2), random_prime(bits // 2)
        if p != q and (p * q).bit_length() == bits and math.gcd(e, (p - 1) * (q - 1)) == 1:
            sk = PrivateKey(p, q, e)
            return sk.public_key, sk


def full_domain_hash(items: Sequence[str | bytes], n: int) -> list[int]:
    """H(x) in [0, n): SHA-256 in counter mode expanded to bits(n) + 128 bits, reduced mod n
    (the extra 128 bits make the reduction bias negligible)."""
    nbytes = (n.bit_length() + 128 + 7) // 8
    out = []
    for item in items:
        data = item.encode("utf-8") if isinstance(item, str) else bytes(item)
        stream = b"".join(hashlib.sha256(b"unifl-fdh" + i.to_bytes(4, "big") + data).digest()
                          for i in range(-(-nbytes // 32)))
        out.append(int.from_bytes(stream[:nbytes], "big") % n)
    return out

"""Plain key-material records: what the fused Paillier ops of a backend need from a key, and nothing
of the key objects of :mod:`unifl.phe_sdk.paillier` (which build them).

Records are immutable; a key that changes (the DJN fixed base switched on) gets a new record, so
state a backend derived from the old one (:class:`unifl.core.state.DeviceState`) is never reused.
Identity is the record object: records compare and hash by identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .errors import OperandError
from .limbs import limb_count
from .montgomery import MontContext


@dataclass(frozen=True, eq=False)
class FixedBase:
    """DJN fixed base of a public key: hs = h^n mod n² (Montgomery form), random exponents of
    ``exp_bits`` bits, comb digits of ``window`` bits (table[j, d−1] = hs^(d·2^(window·j)))."""

    hs_mont: np.ndarray = field(repr=False)
    exp_bits: int
    window: int


@dataclass(frozen=True, eq=False)
class ResidueGenerators:
    """The key owner's generators of the n-th residues, one per CRT half: ``gp`` of order p − 1
    mod p² (the subgroup of p-th powers, which holds r^n mod p² for every unit r when
    gcd(q, p − 1) = 1), ``gq`` of order q − 1 mod q²; comb digits of ``window`` bits.

    For kp uniform in [0, p − 1) and kq in [0, q − 1), CRT(gp^kp mod p², gq^kq mod q²) is uniform
    over the n-th residues mod n², exactly the distribution of r^n mod n² for r uniform in Z_n*:
    no assumption beyond Paillier's own (unlike the DJN fixed base, whose short exponents are
    one).  Plain ints; secret like p and q."""

    gp: int = field(repr=False)
    gq: int = field(repr=False)
    window: int


@dataclass(frozen=True, eq=False)
class PaillierPublicMaterial:
    """n, with the Montgomery contexts of n and n², and the DJN fixed base when it is on."""

    n: int
    n_ctx: MontContext = field(repr=False)
    nsquare_ctx: MontContext = field(repr=False)
    fixed_base: FixedBase | None = None

    def require_fixed_base(self) -> FixedBase:
        """The DJN fixed base; OperandError when the key has none."""
        if self.fixed_base is None:
            raise OperandError("fixed-base encryption: the key has no DJN fixed base "
                               "(PublicKey.enable_fixed_base)")
        return self.fixed_base


@dataclass(frozen=True, eq=False)
class PaillierPrivateMaterial:
    """p < q with the CRT constants of decryption and of key-owner encryption.

    * ``hp`` = L_p(g^(p−1) mod p²)^−1 mod p (``hq`` likewise), ``q_inverse`` = q^−1 mod p;
    * ``psquare_inverse`` = (p²)^−1 mod q²: Garner's constant for x mod n² from x_p = x mod p² and
      x_q = x mod q², x = x_p + p²·((x_q − x_p)·(p²)^−1 mod q²).  This orientation needs no
      reduction of x_p, since x_p < p² < q² (p < q), whatever the limb counts of p² and q²;
    * ``half_exponent_obfuscation``: gcd(q, p−1) = gcd(p, q−1) = 1, so the key owner may draw
      obfuscators as y_p^p mod p², y_q^q mod q² (see ``paillier_encrypt_owner`` in the op contract);
    * ``generators``: generators of the n-th residues mod p² and q² when the key owner could prove
      them (the factors of p − 1 and q − 1 known), for fixed-base obfuscation with full-length
      exponents (``paillier_encrypt_owner_generator`` in the op contract); else None.
    """

    public_key: PaillierPublicMaterial = field(repr=False)
    p: int = field(repr=False)
    q: int = field(repr=False)
    psquare_ctx: MontContext = field(repr=False)
    qsquare_ctx: MontContext = field(repr=False)
    hp: int = field(repr=False)
    hq: int = field(repr=False)
    q_inverse: int = field(repr=False)
    psquare_inverse: int = field(repr=False)
    half_exponent_obfuscation: bool = True
    generators: ResidueGenerators | None = None

    def require_generators(self) -> ResidueGenerators:
        """The owner's generators; OperandError when the key has none."""
        if self.generators is None:
            raise OperandError("generator obfuscation: this private key has no proven generators "
                               "of the n-th residues (its p − 1 or q − 1 could not be factored)")
        return self.generators

    @property
    def psquare(self) -> int:
        return self.psquare_ctx.m

    @property
    def qsquare(self) -> int:
        return self.qsquare_ctx.m

    @property
    def p_limbs(self) -> int:
        """Limbs of p: the width of the y_p batch of ``paillier_encrypt_owner``."""
        return limb_count(self.p.bit_length())

    @property
    def q_limbs(self) -> int:
        """Limbs of q: the width of the y_q batch of ``paillier_encrypt_owner``."""
        return limb_count(self.q.bit_length())

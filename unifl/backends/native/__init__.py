"""``native``: our C++ backend (pybind11), every batch in one call with the GIL released.

MontMult is OpenSSL's mulx/adcx/adox ``bn_mul_mont`` reached through ``BN_mod_mul_montgomery`` (see
the header of ``src/native.cpp`` for the measurement behind that choice); batching, threading,
windowed / fixed-base / multi-exponentiation and the fused Paillier ops are ours.

Secret exponents (``mod_exp_secret``, the exponentiations inside the fused CRT decryption and the
exponents p, q of the key owner's fused CRT encryption) go through OpenSSL's
``BN_mod_exp_mont_consttime``: constant time in the values of the exponent and the base.  Public
exponents keep the faster sliding-window code.

Every array argument is checked by the extension itself (dtype, contiguity, dimensions, rows, limbs);
the wrappers here only make views contiguous, so a layout the SDK produces never fails those checks.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ...core.contract import Limbs
from ...core.errors import OperandError
from ...core.keys import FixedBase, PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.limbs import to_limbs
from ...core.montgomery import MontContext
from ...core.backend import Backend, ProbeResult
from .options import NativeOptions

try:
    from . import _native  # the compiled extension (src/native.cpp), typed by _native.pyi
except ImportError as exc:  # extension not built
    # None marks "not built": probe() reports it, and the registry then refuses the backend, so
    # the name is the stub's module (as mypy types it) wherever an op uses it
    _native = None  # type: ignore[assignment]
    _IMPORT_ERROR = str(exc)


_c = np.ascontiguousarray


class NativeBackend(Backend):
    name = "native"
    native_ops = frozenset({"mont_mul", "mod_mul", "mod_exp", "mont_exp", "mont_multi_exp",
                            "mont_prod_groups", "mont_inverse", "paillier_encrypt", "paillier_encrypt_fixed_base",
                            "paillier_decrypt", "mod_exp_secret", "paillier_encrypt_owner",
                            "paillier_encrypt_owner_fixed_base", "paillier_encrypt_owner_generator"})

    options_model = NativeOptions
    options: NativeOptions

    def __init__(self, **options: Any) -> None:
        """``options``: see :class:`~unifl.backends.native.options.NativeOptions` (``threads``)."""
        super().__init__(**options)
        env = os.environ.get("UNIFL_THREADS")
        self.threads = int(self.options.threads or env or _native.hardware_threads())

    @classmethod
    def select_device(cls, value: Any) -> dict[str, Any]:
        """A scalar entry of ``devices:`` is that instance's worker-thread count."""
        return {"threads": value}

    @classmethod
    def probe(cls) -> ProbeResult:
        if _native is None:
            return ProbeResult(False, f"C++ extension not built ({_IMPORT_ERROR}); "
                                      "run `pip install -e .` with a C++ compiler")
        n = _native.hardware_threads()
        return ProbeResult(True, "C++ (OpenSSL bn_mul_mont), GIL released",
                           [f"host CPU ({n} threads)"])

    @property
    def devices(self) -> list[str]:
        return [f"host CPU ({self.threads} threads)"]

    def modulus(self, ctx: MontContext) -> _native.Modulus:
        """The C++ Montgomery context of ``ctx`` (OpenSSL BN_MONT_CTX), built once per instance."""
        return self.state.get(ctx, "modulus", lambda: _native.Modulus(ctx.m_limbs))

    # ---- base_op / mod_op
    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return _native.mont_mul(self.modulus(ctx), _c(a), _c(b), self.threads)

    def op_mod_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return _native.mod_mul(self.modulus(ctx), _c(a), _c(b), self.threads)

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        return _native.mod_exp(self.modulus(ctx), _c(base), _c(exps), self.threads)

    def op_mod_exp_secret(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        """base^e mod m in constant time (OpenSSL BN_mod_exp_mont_consttime per element)."""
        return _native.mod_exp_secret(self.modulus(ctx), _c(base), _c(exps), self.threads)

    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        return _native.mont_exp(self.modulus(ctx), _c(base_mont), _c(exps), self.threads)

    def op_mont_multi_exp(self, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray) -> Limbs:
        return _native.mont_multi_exp(self.modulus(ctx), _c(bases_mont), _c(exps), self.threads)

    def op_mont_prod_groups(self, ctx: MontContext, a_mont: Limbs, groups: np.ndarray,
                            num_groups: int) -> Limbs:
        return _native.mont_prod_groups(self.modulus(ctx), _c(a_mont), _c(groups), num_groups,
                                        self.threads)

    def op_mont_inverse(self, ctx: MontContext, a_mont: Limbs) -> Limbs:
        return _native.mont_inverse(self.modulus(ctx), _c(a_mont), self.threads)

    # ---- fused Paillier (per-key C++ objects in self.state, keyed by the key records)
    def _pub(self, pk: PaillierPublicMaterial) -> _native.PaillierPublic:
        return self.state.get(pk, "public", lambda: _native.PaillierPublic(
            self.modulus(pk.nsquare_ctx), pk.n_ctx.m_limbs))

    def op_paillier_encrypt(self, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
        return self._pub(pk).encrypt(_c(m), _c(r), self.threads)

    def _build_fixed_base(self, pub: _native.PaillierPublic, fb: FixedBase) -> None:
        """Compute the DJN comb table of ``fb`` into the key's C++ object (the costly step)."""
        pub.set_fixed_base(_c(fb.hs_mont), fb.exp_bits, fb.window, self.threads)

    def op_paillier_encrypt_fixed_base(self, pk: PaillierPublicMaterial, m: Limbs,
                                       a: np.ndarray) -> Limbs:
        fb = pk.fixed_base
        if fb is None:
            raise OperandError("paillier_encrypt_fixed_base: the key has no DJN fixed base "
                               "(PublicKey.enable_fixed_base)")
        pub = self._pub(pk)
        # a record's fixed base never changes (a new base makes a new record): built once, under
        # the state's lock, however many threads encrypt with a fresh key at the same time
        def build() -> bool:
            self._build_fixed_base(pub, fb)
            return True
        self.state.get(pk, "fixed_base", build)
        return pub.encrypt_fixed_base(_c(m), _c(a), self.threads)

    def _priv(self, sk: PaillierPrivateMaterial) -> _native.PaillierPrivate:
        """The key's C++ private object (CRT constants, the owner's comb tables), once per record."""
        def build() -> _native.PaillierPrivate:
            L = sk.public_key.n_ctx.num_limbs

            def one(v: int) -> np.ndarray:
                return to_limbs([v], L)[0]
            return _native.PaillierPrivate(
                self._pub(sk.public_key), self.modulus(sk.psquare_ctx),
                self.modulus(sk.qsquare_ctx), one(sk.p), one(sk.q), one(sk.hp),
                one(sk.hq), one(sk.q_inverse))
        return self.state.get(sk, "private", build)

    def op_paillier_decrypt(self, sk: PaillierPrivateMaterial, c_mont: Limbs) -> Limbs:
        """CRT decryption, constant-time exponentiations.  Raises InvalidCiphertextError (from the
        extension) naming the first element that is not a unit mod n²."""
        return self._priv(sk).decrypt(_c(c_mont), self.threads)

    def op_paillier_encrypt_owner(self, sk: PaillierPrivateMaterial, m: Limbs, yp: Limbs,
                                  yq: Limbs) -> Limbs:
        """Key-owner CRT encryption in one call: yp^p mod p² and yq^q mod q² by OpenSSL's
        BN_mod_exp_mont_consttime, Garner's combine and (1 + m·n)·x·R mod n² in C++."""
        return self._priv(sk).encrypt_owner(_c(m), _c(yp), _c(yq), self.threads)

    def op_paillier_encrypt_owner_fixed_base(self, sk: PaillierPrivateMaterial, m: Limbs,
                                             a: np.ndarray) -> Limbs:
        """Key-owner DJN encryption: combs of hs mod p² and hs mod q² (built once per record, in
        the key's C++ object), Garner's combine and the finish, one call per batch."""
        fb = sk.public_key.fixed_base
        if fb is None:
            raise OperandError("paillier_encrypt_owner_fixed_base: the key has no DJN fixed base "
                               "(PublicKey.enable_fixed_base)")
        priv = self._priv(sk)
        # a record's fixed base never changes (a new base makes a new record): built once, under
        # the state's lock, however many threads encrypt with a fresh key at the same time
        def build() -> bool:
            self._build_owner_fixed_base(priv, fb)
            return True
        self.state.get(sk, "owner_fixed_base", build)
        return priv.encrypt_owner_fixed_base(_c(m), _c(a), self.threads)

    def op_paillier_encrypt_owner_generator(self, sk: PaillierPrivateMaterial, m: Limbs,
                                            kp: np.ndarray, kq: np.ndarray) -> Limbs:
        """Key-owner encryption from the owner's generators: combs of gp mod p² and gq mod q²
        (built once per record, in the key's C++ object), Garner's combine and the finish, one
        call per batch."""
        gens = sk.require_generators()
        priv = self._priv(sk)

        def build() -> bool:
            ps, qs = sk.psquare_ctx, sk.qsquare_ctx
            priv.set_generators(to_limbs([gens.gp * ps.r_mod % ps.m], ps.num_limbs)[0],
                                to_limbs([gens.gq * qs.r_mod % qs.m], qs.num_limbs)[0],
                                gens.window, self.threads)
            return True
        self.state.get(sk, "owner_generators", build)
        return priv.encrypt_owner_generator(_c(m), _c(kp), _c(kq), self.threads)

    def _build_owner_fixed_base(self, priv: _native.PaillierPrivate, fb: FixedBase) -> None:
        """Compute the combs of hs mod p² and hs mod q² into the key's C++ object (the costly
        step)."""
        priv.set_fixed_base(_c(fb.hs_mont), fb.exp_bits, fb.window, self.threads)

"""``native``: our C++ backend (pybind11), every batch in one call with the GIL released.

MontMult is OpenSSL's mulx/adcx/adox ``bn_mul_mont`` reached through ``BN_mod_mul_montgomery`` (see
the header of ``src/native.cpp`` for the measurement behind that choice); batching, threading,
windowed / fixed-base / multi-exponentiation and the fused Paillier ops are ours.
"""

from __future__ import annotations

import os

import numpy as np

from ...base_op import MontContext
from ..base import Backend, ProbeResult

try:
    from . import _native
except ImportError as exc:  # extension not built
    _native = None
    _IMPORT_ERROR = str(exc)


class NativeBackend(Backend):
    name = "native"
    native_ops = frozenset({"mont_mul", "mod_mul", "mod_exp", "mont_exp", "mont_multi_exp",
                            "mont_prod_groups", "mont_inverse", "paillier_encrypt", "paillier_encrypt_fixed_base",
                            "paillier_decrypt"})

    def __init__(self, threads: int | None = None, **options) -> None:
        super().__init__(**options)
        env = os.environ.get("UNIFL_THREADS")
        self.threads = int(threads or env or _native.hardware_threads())

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

    @staticmethod
    def modulus(ctx: MontContext):
        mod = ctx.device_state.get("native")
        if mod is None:
            mod = ctx.device_state["native"] = _native.Modulus(ctx.m_limbs)
        return mod

    # ---- base_op / mod_op
    def op_mont_mul(self, ctx, a, b):
        return _native.mont_mul(self.modulus(ctx), a, b, self.threads)

    def op_mod_mul(self, ctx, a, b):
        return _native.mod_mul(self.modulus(ctx), a, b, self.threads)

    def op_mod_exp(self, ctx, base, exps):
        return _native.mod_exp(self.modulus(ctx), base, exps, self.threads)

    def op_mont_exp(self, ctx, base_mont, exps):
        return _native.mont_exp(self.modulus(ctx), base_mont, exps, self.threads)

    def op_mont_multi_exp(self, ctx, bases_mont, exps):
        return _native.mont_multi_exp(self.modulus(ctx), bases_mont, exps, self.threads)

    def op_mont_prod_groups(self, ctx, a_mont, groups, num_groups):
        return _native.mont_prod_groups(self.modulus(ctx), a_mont, groups, num_groups, self.threads)

    def op_mont_inverse(self, ctx, a_mont):
        return _native.mont_inverse(self.modulus(ctx), a_mont, self.threads)

    # ---- fused Paillier (keys carry their per-backend state in key.device_state)
    def _pub(self, pk):
        st = pk.device_state.get("native")
        if st is None:
            st = pk.device_state["native"] = _native.PaillierPublic(
                self.modulus(pk.nsquare_ctx), pk.n_ctx.m_limbs)
        return st

    def op_paillier_encrypt(self, pk, m, r):
        return self._pub(pk).encrypt(m, r, self.threads)

    def op_paillier_encrypt_fixed_base(self, pk, m, a):
        pub = self._pub(pk)
        fb = pk.fixed_base
        if pk.device_state.get("native_fb") is not fb:
            pub.set_fixed_base(fb.hs_mont, fb.exp_bits, fb.window, self.threads)
            pk.device_state["native_fb"] = fb
        return pub.encrypt_fixed_base(m, a, self.threads)

    def op_paillier_decrypt(self, sk, c_mont):
        st = sk.device_state.get("native")
        if st is None:
            L = sk.public_key.n_ctx.num_limbs
            from ...base_op.limbs import to_limbs

            def one(v):
                return to_limbs([v], L)[0]
            st = sk.device_state["native"] = _native.PaillierPrivate(
                self._pub(sk.public_key), self.modulus(sk.psquare_ctx),
                self.modulus(sk.qsquare_ctx), one(sk.p), one(sk.q), one(sk.hp), one(sk.hq),
                one(sk.q_inverse))
        return st.decrypt(np.ascontiguousarray(c_mont), self.threads)

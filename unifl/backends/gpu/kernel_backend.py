"""The native-op face shared by everything that runs the gpu kernel bodies: the ``gpu`` backend
(bodies on CUDA devices, through ``runtime.CudaEngine``) and the test-only ``gpu_host`` stand-in
(the same bodies compiled by g++ and run on the host CPU, ``host.HostEngine``).

An engine takes key blobs (``keys.py``) prepared once per modulus / key and canonical limb batches
``(N, L)`` (see ``unifl.core.limbs``), and returns canonical batches.  Ops mapped onto the
native-op contract of ``unifl.core.backend.OPS``:

=================  ==========================================================================
mont_mul           MontMult kernel; also the homomorphic ciphertext addition (c̄1·c̄2·R^-1)
mod_mul            MontMult then MontMult by R² (a·b mod m, plain in and out)
mont_exp           fixed-window (w = 4) ModExp in the Montgomery domain; also ciphertext×scalar
mod_exp            enter the domain, mont_exp, leave it: one kernel
mod_exp_secret     the same kernel: NOT constant time (it skips zero windows, trims leading zero
                   digits and its MontMult ends in a data-dependent subtraction); declared so the
                   secret exponentiations stay one kernel launch rather than a host-driven ladder
mont_multi_exp     UniFL Alg. 5: K·N powers, then log2(N) halving rounds of MontMults on the device
paillier_encrypt   UniFL Alg. 4: (1 + m·n)·r^n mod n², one domain entry per operand, one kernel
paillier_encrypt_  key-owner encryption with the CRT: y_p^p mod p², y_q^q mod q², Garner's
owner              combine and (1 + m·n)·x·R mod n² in one kernel (no host round trip); the
                   exponentiations by p and q are NOT constant time (as mod_exp_secret)
paillier_decrypt   CRT decryption, one kernel (wide reductions by Montgomery multiplication); an
                   element whose CRT half degenerates (not a unit mod n²) comes back as the
                   all-ones sentinel row and is refused here with InvalidCiphertextError
=================  ==========================================================================

``mont_prod_groups`` and the fixed-base (DJN) encryptions are not native here: the generic layers
compose them from the MontMult kernel.

An engine counts its traffic (:meth:`Engine.counters`): kernel launches, host-to-device copies and
device-to-host copies, so a test or bench can check what an op costs beyond its arithmetic.
"""

from __future__ import annotations


from typing import Any, Callable, Protocol, TypeVar

import numpy as np

from ...core.contract import Limbs
from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.montgomery import MontContext
from ...core.errors import InvalidCiphertextError, OperandError
from ...core.backend import Backend
from . import keys


class Engine(Protocol):
    """What a kernel engine offers: operands are its own batches or uint64 host arrays, results
    its own batches (the CUDA engine's stay in device memory) or host arrays.  A key is what the
    engine's ``prepare`` made of a blob, opaque to the backend (a host array for the host harness,
    an uploaded ``runtime.DeviceKey`` for CUDA): typed Any here, each engine names its own."""

    def prepare(self, blob: np.ndarray, kind: int) -> Any: ...
    def holds(self, x: Any) -> bool: ...
    def counters(self) -> dict[str, int]: ...
    def mul(self, key: Any, a: Limbs, b: Limbs, mode: int) -> Limbs: ...
    def exp(self, key: Any, base: Limbs, exps: np.ndarray, mode: int) -> Limbs: ...
    def multi_exp(self, key: Any, bases: Limbs, exps: np.ndarray) -> Limbs: ...
    def paillier_encrypt(self, pub: Any, m: Limbs, r: Limbs) -> Limbs: ...
    def paillier_encrypt_owner(self, owner: Any, m: Limbs, yp: Limbs, yq: Limbs) -> Limbs: ...
    def paillier_decrypt(self, priv: Any, c: Limbs) -> Limbs: ...


MONT_MUL, MOD_MUL = 0, 1   # MulMode in kernels.cuh
MONT_EXP, MOD_EXP = 0, 1   # ExpMode in kernels.cuh
KIND_CTX, KIND_PUB, KIND_PRIV, KIND_OWNER = 0, 1, 2, 3   # key blob kinds (keys.py)

#: what a key blob is built from: a MontContext or a key-material record
_Holder = TypeVar("_Holder", MontContext, PaillierPublicMaterial, PaillierPrivateMaterial)


def _c(a: Limbs) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint64)


class KernelBackend(Backend):
    """A backend whose native ops are the gpu kernel bodies run by ``self.engine``."""

    name = "kernel-abstract"
    native_ops = frozenset({"mont_mul", "mod_mul", "mod_exp", "mod_exp_secret", "mont_exp",
                            "mont_multi_exp", "paillier_encrypt", "paillier_encrypt_owner",
                            "paillier_decrypt"})
    engine: Engine

    def own_batch(self, x: Any) -> Limbs:
        """The engine's own (device-resident) batches pass through; anything else becomes a
        contiguous host array."""
        if self.engine.holds(x):
            return x
        return np.ascontiguousarray(x, dtype=np.uint64)

    # ---- per-key constants, prepared (uploaded) once per instance, weakly keyed by the key record
    def _key(self, holder: _Holder, build: Callable[[_Holder], np.ndarray], kind: int) -> Any:
        return self.state.get(holder, kind, lambda: self.engine.prepare(build(holder), kind))

    def _ctx(self, ctx: MontContext) -> Any:
        if ctx.num_limbs > keys.MAX_LIMBS:
            raise OperandError(f"the {self.name} backend supports moduli up to "
                               f"{64 * keys.MAX_LIMBS} bits, got {ctx.bits}")
        return self._key(ctx, keys.ctx_blob, KIND_CTX)

    # ---- base_op / mod_op: operands through own_batch (device batches and shared-row views pass
    # through on the gpu; contiguous host arrays otherwise); exponents always as host arrays (_c)
    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return self.engine.mul(self._ctx(ctx), self.own_batch(a), self.own_batch(b), MONT_MUL)

    def op_mod_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return self.engine.mul(self._ctx(ctx), self.own_batch(a), self.own_batch(b), MOD_MUL)

    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        return self.engine.exp(self._ctx(ctx), self.own_batch(base_mont), _c(exps), MONT_EXP)

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        return self.engine.exp(self._ctx(ctx), self.own_batch(base), _c(exps), MOD_EXP)

    def op_mod_exp_secret(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        # the ModExp kernel: one launch, but not constant time (see the table in the module doc)
        return self.op_mod_exp(ctx, base, exps)

    def op_mont_multi_exp(self, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray) -> Limbs:
        return self.engine.multi_exp(self._ctx(ctx), self.own_batch(bases_mont), _c(exps))

    # ---- fused Paillier
    def op_paillier_encrypt(self, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
        if pk.nsquare_ctx.num_limbs > keys.MAX_LIMBS:
            raise OperandError(f"the {self.name} backend supports Paillier keys up to "
                               f"{32 * keys.MAX_LIMBS} bits")
        return self.engine.paillier_encrypt(self._key(pk, keys.pub_blob, KIND_PUB), self.own_batch(m),
                                            self.own_batch(r))

    def op_paillier_encrypt_owner(self, sk: PaillierPrivateMaterial, m: Limbs, yp: Limbs,
                                  yq: Limbs) -> Limbs:
        """Key-owner CRT encryption in one kernel launch (both halves, the combine, the finish)."""
        if sk.public_key.nsquare_ctx.num_limbs > keys.MAX_LIMBS:
            raise OperandError(f"the {self.name} backend supports Paillier keys up to "
                               f"{32 * keys.MAX_LIMBS} bits")
        return self.engine.paillier_encrypt_owner(self._key(sk, keys.owner_blob, KIND_OWNER),
                                                  self.own_batch(m), self.own_batch(yp),
                                                  self.own_batch(yq))

    def op_paillier_decrypt(self, sk: PaillierPrivateMaterial, c_mont: Limbs) -> Limbs:
        if sk.public_key.nsquare_ctx.num_limbs > keys.MAX_LIMBS:
            raise OperandError(f"the {self.name} backend supports Paillier keys up to "
                               f"{32 * keys.MAX_LIMBS} bits")
        out = self.engine.paillier_decrypt(self._key(sk, keys.priv_blob, KIND_PRIV),
                                           self.own_batch(c_mont))
        # The kernel cannot raise: an element whose c^(p−1) mod p² (or the q half) is not ≡ 1 mod p
        # -- c shares a factor with n, and its decryption would reveal the key -- is written as the
        # all-ones row, which no plaintext (< n < 2^(64·Ln)) can equal.  Plaintexts are needed on
        # the host anyway; the fetch is cached in the batch.
        rows = np.asarray(out)
        bad = np.flatnonzero((rows == np.uint64(0xFFFFFFFFFFFFFFFF)).all(axis=1)) if rows.size \
            else np.empty(0, np.intp)
        if len(bad):
            raise InvalidCiphertextError(
                f"ciphertext #{int(bad[0])} is not a unit mod n² (a CRT half of its decryption "
                "degenerates); refused, since decrypting it could reveal the key")
        return out

"""The native-op face shared by everything that runs the gpu kernel bodies: the ``gpu`` backend
(bodies on CUDA devices, through ``runtime.CudaEngine``) and the test-only ``gpu_host`` stand-in
(the same bodies compiled by g++ and run on the host CPU, ``host.HostEngine``).

An engine takes key blobs (``keys.py``) prepared once per modulus / key and canonical limb batches
``(N, L)`` (see ``unifl.core.limbs``), and returns canonical batches.  Ops mapped onto the
native-op contract of ``unifl.core.backend.OPS``:

=================  ==========================================================================
mont_mul           MontMult kernel; also the homomorphic ciphertext addition (c̄1·c̄2·R^-1)
mod_mul            MontMult then MontMult by R² (a·b mod m, plain in and out)
mont_exp           fixed-window ModExp in the Montgomery domain (one-thread bodies: w = 4; the
                   cooperative ones: w = 3, 4 or 5, :attr:`Engine.window`); also ciphertext×scalar
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

Two families of kernel bodies, selected per call (``group``): the one-thread-per-instance bodies
(``src/kernels.cuh``, 64-bit limbs in thread-local arrays) and the cooperative ones
(``src/kernels_group.cuh``, one instance per group of TPI threads with its words in registers).
The ops below exist only as cooperative bodies, one launch each:

=================  ==========================================================================
mont_prod_groups   grouped products (histogram bins): rows ordered by group on the host (an
                   index permutation, no arithmetic), chunks of rows per group of threads, the last
                   chunk of a bin to finish multiplies the bin's partials in the same launch; a
                   bin's chunks are balanced against that serial join (``group_plan``)
mont_inverse       Montgomery's batch trick per chunk of rows: prefix products, one binary
                   extended Euclid per chunk, back-substitution; a non-invertible row fails the
                   batch (OperandError upstream) without naming which
paillier_encrypt_  DJN (1 + m·n)·hs^a mod n² from the comb table of hs, uploaded once per key and
fixed_base         resident on the device
paillier_encrypt_  the key owner's: comb tables of hs mod p² and mod q², the two half groups in
owner_fixed_base   step, Garner's combine, all in one launch
paillier_encrypt_  the same kernel over comb tables of the owner's generators gp mod p² and gq mod
owner_generator    q², each half with its own exponent (kp, kq); it skips zero digits, so its
                   time follows the exponents (NOT constant time, as paillier_encrypt_owner)
=================  ==========================================================================

An engine counts its traffic (:meth:`Engine.counters`): kernel launches, host-to-device copies and
device-to-host copies, so a test or bench can check what an op costs beyond its arithmetic.
"""

from __future__ import annotations


from typing import Any, Callable, Protocol, TypeVar

import numpy as np

from ...core.contract import Limbs
from ...core.exponents import check_covered, exp_bits
from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.montgomery import MontContext
from ...core.errors import InvalidCiphertextError, OperandError
from ...core.backend import Backend
from . import keys


class Engine(Protocol):
    """What a kernel engine offers: operands are its own batches or uint64 host arrays, results
    its own batches (the CUDA engine's stay in device memory) or host arrays.  A key is what the
    engine's ``prepare`` made of a blob, a table what ``prepare_table`` made of a comb table:
    opaque to the backend (host arrays for the host harness, uploads for CUDA), typed Any here.
    ``group`` selects the cooperative bodies (kernels_group.cuh) over the one-thread ones; the
    ops without a one-thread body always run cooperatively."""

    #: instances in flight that fill the engine (chunk sizes of the one-launch reductions)
    parallel_groups: int
    #: the cooperative exponentiation bodies' window in bits (0: the engine's choice) and shape
    #: (0: by batch size, 1: the size class's, 2: wide; runtime.SHAPE_*)
    window: int
    shape: int

    def prepare(self, blob: np.ndarray, kind: int) -> Any: ...
    def prepare_table(self, table: np.ndarray) -> Any: ...
    def holds(self, x: Any) -> bool: ...
    def counters(self) -> dict[str, int]: ...
    def mul(self, key: Any, a: Limbs, b: Limbs, mode: int, group: bool) -> Limbs: ...
    def exp(self, key: Any, base: Limbs, exps: np.ndarray, mode: int, group: bool) -> Limbs: ...
    def multi_exp(self, key: Any, bases: Limbs, exps: np.ndarray, group: bool, chunk: int
                  ) -> Limbs: ...
    def paillier_encrypt(self, pub: Any, m: Limbs, r: Limbs, group: bool) -> Limbs: ...
    def paillier_encrypt_owner(self, owner: Any, m: Limbs, yp: Limbs, yq: Limbs, group: bool
                               ) -> Limbs: ...
    def paillier_decrypt(self, priv: Any, c: Limbs, group: bool) -> Limbs: ...
    def prod_groups(self, key: Any, a: Limbs, order: np.ndarray, plan: np.ndarray,
                    num_groups: int) -> Limbs: ...
    def inverse(self, key: Any, a: Limbs, chunk: int) -> tuple[Limbs, int]: ...
    def fixed_base(self, pub: Any, table: Any, window: int, m: Limbs, a: np.ndarray) -> Limbs: ...
    def owner_fixed_base(self, owner: Any, tp: Any, tq: Any, window: int, m: Limbs,
                         ap: np.ndarray, aq: np.ndarray) -> Limbs: ...


MONT_MUL, MOD_MUL = 0, 1   # MulMode in kernels.cuh
MONT_EXP, MOD_EXP = 0, 1   # ExpMode in kernels.cuh
KIND_CTX, KIND_PUB, KIND_PRIV, KIND_OWNER = 0, 1, 2, 3   # key blob kinds (keys.py)

#: what a key blob is built from: a MontContext or a key-material record
_Holder = TypeVar("_Holder", MontContext, PaillierPublicMaterial, PaillierPrivateMaterial)


def _c(a: Limbs) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.uint64)


class KernelBackend(Backend):
    """A backend whose native ops are the gpu kernel bodies run by ``self.engine``.

    ``kernels`` picks the bodies of the ops that have both: ``thread`` (one thread per instance),
    ``group`` (cooperative) or ``auto`` (per size class, :meth:`_auto_group`)."""

    name = "kernel-abstract"
    native_ops = frozenset({"mont_mul", "mod_mul", "mod_exp", "mod_exp_secret", "mont_exp",
                            "mont_multi_exp", "mont_prod_groups", "mont_inverse",
                            "paillier_encrypt", "paillier_encrypt_fixed_base",
                            "paillier_encrypt_owner", "paillier_encrypt_owner_fixed_base",
                            "paillier_encrypt_owner_generator", "paillier_decrypt"})
    engine: Engine
    kernels: str = "group"
    #: the largest size class the kernels are compiled for (64 * keys.MAX_LIMBS bits): a request
    #: for more is refused at selection (``supports``), not discovered mid-run
    max_modulus_bits = 64 * keys.MAX_LIMBS

    def own_batch(self, x: Any) -> Limbs:
        """The engine's own (device-resident) batches pass through; anything else becomes a
        contiguous host array."""
        if self.engine.holds(x):
            return x
        return np.ascontiguousarray(x, dtype=np.uint64)

    # ---- which bodies
    def _group(self, limbs: int) -> bool:
        """Cooperative bodies for a modulus of ``limbs`` limbs (its size class)?"""
        if self.kernels == "auto":
            return self._auto_group(keys.size_class(limbs))
        return self.kernels == "group"

    def _auto_group(self, size_class: int) -> bool:
        """``auto``'s choice for a size class; engines that can time themselves override it."""
        return True

    def _crt_group(self, sk: PaillierPrivateMaterial) -> bool:
        """Cooperative CRT bodies for this key (its class chosen, and its primes fit them)?"""
        return self._group(sk.public_key.nsquare_ctx.num_limbs) and keys.crt_fits_groups(sk)

    # ---- per-key constants, prepared (uploaded) once per instance, weakly keyed by the key record
    def _key(self, holder: _Holder, build: Callable[[_Holder], np.ndarray], kind: int) -> Any:
        return self.state.get(holder, kind, lambda: self.engine.prepare(build(holder), kind))

    def _ctx(self, ctx: MontContext) -> Any:
        if ctx.num_limbs > keys.MAX_LIMBS:
            raise OperandError(f"the {self.name} backend supports moduli up to "
                               f"{64 * keys.MAX_LIMBS} bits, got {ctx.bits}")
        return self._key(ctx, keys.ctx_blob, KIND_CTX)

    def _check_key(self, pk: PaillierPublicMaterial) -> None:
        if pk.nsquare_ctx.num_limbs > keys.MAX_LIMBS:
            raise OperandError(f"the {self.name} backend supports Paillier keys up to "
                               f"{32 * keys.MAX_LIMBS} bits")

    def _chunk(self, work: int) -> int:
        """Rows per group of a one-launch reduction over ``work`` rows: as few as fill the engine."""
        return max(1, -(-work // max(1, self.engine.parallel_groups)))

    def _joined_chunk(self, work: int, rows: int, row_cost: float) -> int:
        """Rows per part of a one-launch reduction whose parts are joined by the last to finish
        (``join_parts`` in src/kernels_group.cuh): at least the fill chunk of ``work``, and at
        least :func:`balanced_chunk` of the longest reduction (``rows`` rows of ``row_cost``
        MontMults each)."""
        return max(self._chunk(work), balanced_chunk(rows, row_cost))

    # ---- base_op / mod_op: operands through own_batch (device batches and shared-row views pass
    # through on the gpu; contiguous host arrays otherwise); exponents always as host arrays (_c)
    def op_mont_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return self.engine.mul(self._ctx(ctx), self.own_batch(a), self.own_batch(b), MONT_MUL,
                               self._group(ctx.num_limbs))

    def op_mod_mul(self, ctx: MontContext, a: Limbs, b: Limbs) -> Limbs:
        return self.engine.mul(self._ctx(ctx), self.own_batch(a), self.own_batch(b), MOD_MUL,
                               self._group(ctx.num_limbs))

    def op_mont_exp(self, ctx: MontContext, base_mont: Limbs, exps: np.ndarray) -> Limbs:
        return self.engine.exp(self._ctx(ctx), self.own_batch(base_mont), _c(exps), MONT_EXP,
                               self._group(ctx.num_limbs))

    def op_mod_exp(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        return self.engine.exp(self._ctx(ctx), self.own_batch(base), _c(exps), MOD_EXP,
                               self._group(ctx.num_limbs))

    def op_mod_exp_secret(self, ctx: MontContext, base: Limbs, exps: np.ndarray) -> Limbs:
        # the ModExp kernel: one launch, but not constant time (see the table in the module doc)
        return self.op_mod_exp(ctx, base, exps)

    def op_mont_multi_exp(self, ctx: MontContext, bases_mont: Limbs, exps: np.ndarray) -> Limbs:
        exps = _c(exps)
        chunk = self._joined_chunk(exps.shape[0] * exps.shape[1], exps.shape[1],
                                   exp_cost(exps, self.engine.window or 4))
        return self.engine.multi_exp(self._ctx(ctx), self.own_batch(bases_mont), exps,
                                     self._group(ctx.num_limbs), chunk)

    def op_mont_prod_groups(self, ctx: MontContext, a_mont: Limbs, groups: np.ndarray,
                            num_groups: int) -> Limbs:
        order, plan = group_plan(np.asarray(groups, np.int64), num_groups,
                                 self._chunk(len(groups)))   # each group balances its own chunk
        return self.engine.prod_groups(self._ctx(ctx), self.own_batch(a_mont), order, plan,
                                       num_groups)

    def op_mont_inverse(self, ctx: MontContext, a_mont: Limbs) -> Limbs:
        out, bad = self.engine.inverse(self._ctx(ctx), self.own_batch(a_mont),
                                       self._chunk(a_mont.shape[0]))
        if bad:
            raise ValueError("an element shares a factor with the modulus (batch inversion "
                             f"failed in {bad} chunk(s))")
        return out

    # ---- fused Paillier
    def op_paillier_encrypt(self, pk: PaillierPublicMaterial, m: Limbs, r: Limbs) -> Limbs:
        self._check_key(pk)
        return self.engine.paillier_encrypt(self._key(pk, keys.pub_blob, KIND_PUB), self.own_batch(m),
                                            self.own_batch(r), self._group(pk.nsquare_ctx.num_limbs))

    def op_paillier_encrypt_owner(self, sk: PaillierPrivateMaterial, m: Limbs, yp: Limbs,
                                  yq: Limbs) -> Limbs:
        """Key-owner CRT encryption in one kernel launch (both halves, the combine, the finish)."""
        self._check_key(sk.public_key)
        return self.engine.paillier_encrypt_owner(self._key(sk, keys.owner_blob, KIND_OWNER),
                                                  self.own_batch(m), self.own_batch(yp),
                                                  self.own_batch(yq), self._crt_group(sk))

    def op_paillier_encrypt_fixed_base(self, pk: PaillierPublicMaterial, m: Limbs,
                                       a: np.ndarray) -> Limbs:
        """DJN encryption from the device-resident comb table of the key's fixed base."""
        self._check_key(pk)
        fb = pk.require_fixed_base()
        a = _c(a)
        check_covered(a, -(-fb.exp_bits // fb.window) * fb.window)
        table = self.state.get(pk, "comb_table", lambda: self.engine.prepare_table(
            keys.comb_table(pk.nsquare_ctx, keys.fixed_base_value(pk), fb.exp_bits, fb.window)))
        return self.engine.fixed_base(self._key(pk, keys.pub_blob, KIND_PUB), table, fb.window,
                                      self.own_batch(m), a)

    def op_paillier_encrypt_owner_fixed_base(self, sk: PaillierPrivateMaterial, m: Limbs,
                                             a: np.ndarray) -> Limbs:
        """The key owner's DJN encryption: half-size comb tables mod p², q², one launch."""
        pk = sk.public_key
        owner = self._owner_comb_key(sk, "fixed-base")
        fb = pk.require_fixed_base()
        a = _c(a)
        check_covered(a, -(-fb.exp_bits // fb.window) * fb.window)

        def build() -> tuple[Any, Any]:
            hs = keys.fixed_base_value(pk)
            tp, tq = (self.engine.prepare_table(keys.comb_table(c, hs % c.m, fb.exp_bits, fb.window))
                      for c in (sk.psquare_ctx, sk.qsquare_ctx))
            return tp, tq
        tp, tq = self.state.get(sk, "owner_comb_tables", build)
        return self.engine.owner_fixed_base(owner, tp, tq, fb.window, self.own_batch(m), a, a)

    def op_paillier_encrypt_owner_generator(self, sk: PaillierPrivateMaterial, m: Limbs,
                                            kp: np.ndarray, kq: np.ndarray) -> Limbs:
        """The key owner's encryption from its generators: the owner fixed-base kernel over comb
        tables of gp mod p² and gq mod q² (built once per key record, resident), kp and kq in the
        two half groups, one launch.  Like the y^p kernel, it skips zero digits: its time follows
        the exponents (not constant time; docs/backends/gpu.md)."""
        owner = self._owner_comb_key(sk, "generator")
        gens = sk.require_generators()
        kp, kq = _c(kp), _c(kq)
        check_covered(kp, sk.p.bit_length())      # the contract's bound, whatever the tables cover
        check_covered(kq, sk.q.bit_length())
        bits = max(sk.p.bit_length(), sk.q.bit_length())     # one nwin for both tables
        la = max(kp.shape[1], kq.shape[1])
        kp, kq = (np.pad(k, ((0, 0), (0, la - k.shape[1]))) for k in (kp, kq))

        def build() -> tuple[Any, Any]:
            return tuple(self.engine.prepare_table(keys.comb_table(c, g, bits, gens.window))
                         for c, g in ((sk.psquare_ctx, gens.gp), (sk.qsquare_ctx, gens.gq)))
        tp, tq = self.state.get(sk, "owner_generator_tables", build)
        return self.engine.owner_fixed_base(owner, tp, tq, gens.window, self.own_batch(m), kp, kq)

    def _owner_comb_key(self, sk: PaillierPrivateMaterial, what: str) -> Any:
        """The owner key blob for the owner fixed-base kernel, once the key is checked against
        this backend and its primes fit the cooperative CRT bodies (at most 16·MAX_LIMBS bits)."""
        self._check_key(sk.public_key)
        if not keys.crt_fits_groups(sk):
            raise OperandError(f"the {self.name} backend's key-owner {what} kernel needs "
                               f"primes of at most {16 * keys.MAX_LIMBS} bits")
        return self._key(sk, keys.owner_blob, KIND_OWNER)

    def op_paillier_decrypt(self, sk: PaillierPrivateMaterial, c_mont: Limbs) -> Limbs:
        self._check_key(sk.public_key)
        out = self.engine.paillier_decrypt(self._key(sk, keys.priv_blob, KIND_PRIV),
                                           self.own_batch(c_mont), self._crt_group(sk))
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


def balanced_chunk(rows: int, row_cost: float = 1.0) -> int:
    """The part size c that makes a joined reduction of ``rows`` rows shortest.

    A part multiplies its c rows (``row_cost`` MontMults each: 1 for a grouped product, a short
    exponentiation for a multi-exponentiation's column), then the last part to finish multiplies
    the ceil(rows/c) partials one after another.  Its chain is c·row_cost + rows/c MontMults,
    least at c = sqrt(rows/row_cost): 2·sqrt(rows·row_cost).  With one part per row (c = 1, what
    filling the device alone gives a batch smaller than the device's groups) the chain is the
    whole batch, one MontMult after another: a 24,000-row unit check of a 2048-bit key's
    ciphertexts joined 8,000 partials, where balanced parts join 155."""
    return int(balanced_chunks(np.array([rows]), row_cost)[0])


def balanced_chunks(rows: np.ndarray, row_cost: float = 1.0) -> np.ndarray:
    """:func:`balanced_chunk` of each count in ``rows`` (at least 1 each), as int64."""
    best = np.ceil(np.sqrt(np.asarray(rows, np.float64) / max(row_cost, 1.0)))
    return np.maximum(best, 1).astype(np.int64)


def exp_cost(exps: np.ndarray, window: int) -> float:
    """MontMults of one fixed-window exponentiation by the longest of ``exps`` (uint64 limbs,
    last axis): its table (2^w − 2 products), one squaring per bit and one product per window."""
    bits = exp_bits(exps)
    return float((1 << window) - 2 + bits + -(-bits // window))


def group_plan(groups: np.ndarray, num_groups: int, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, plan) of a one-launch grouped product: ``order`` lists the rows group by group,
    ``plan`` has one row [group, begin, end, first chunk of the group, chunks of the group] per
    chunk (begin/end index ``order``); an empty group gets one empty chunk, so every group's
    product is written.  A group of n rows is cut into chunks of max(``chunk``,
    :func:`balanced_chunk` (n)) rows: ``chunk`` fills the device, the balanced size keeps the
    group's join short (its last chunk multiplies the group's partials one by one)."""
    order = np.argsort(groups, kind="stable").astype(np.int64)
    counts = np.bincount(groups, minlength=num_groups).astype(np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)])
    sizes = np.maximum(int(chunk), balanced_chunks(counts))
    parts = np.maximum(1, -(-counts // sizes))
    first = np.concatenate([[0], np.cumsum(parts)])[:-1]
    seg = np.repeat(np.arange(num_groups, dtype=np.int64), parts)
    within = np.arange(int(parts.sum()), dtype=np.int64) - np.repeat(first, parts)
    begin = starts[seg] + within * sizes[seg]
    end = np.minimum(begin + sizes[seg], starts[seg + 1])
    plan = np.stack([seg, begin, end, first[seg], parts[seg]], axis=1)
    return order, np.ascontiguousarray(plan, dtype=np.int64)

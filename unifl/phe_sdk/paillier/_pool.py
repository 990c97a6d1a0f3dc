"""Obfuscators computed ahead of use: a pool of r^n mod n² per (key, backend).

An obfuscation factor does not depend on the plaintext, so a party computes the factors its
schedule will need in large calls -- at job start (:meth:`ObfuscatorPool.reserve`) and in the time
it waits on its peer (:meth:`ObfuscatorPool.refill_while`) -- and an encryption then costs one
MontMult per element: with g = n + 1, c = (1 + m·n)·r^n mod n², and the pool keeps x̂ = r^n·R²
mod n² (the Montgomery form of the Montgomery form), so that MontMult(1 + m·n, x̂) =
(1 + m·n)·r^n·R = c̄, the Montgomery-form ciphertext, in one multiplication by a cheap 1 + m·n.

Every factor is used exactly once: the pool is a :class:`unifl.core.state.RowPool` (rows removed
under its lock as they are handed out; never pickled; forgotten by a forked child), held in the
state of the backend instance that computed it, bounded by that instance's ``state.pool_limits``
(the party YAML's ``obfuscators`` section).  It is never persisted: a job resumed from a checkpoint
starts with an empty pool and computes fresh factors.

The key owner's pool is filled through the CRT (``private_key``): the same distribution of
factors, an eighth of the work each.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import weakref
from typing import Callable, Iterator, Protocol, Sequence, TypeVar

import numpy as np

from ... import base_op
from ...core.backend import Backend
from ...core.contract import Limbs
from ...core.errors import OperandError
from ...core.keys import PaillierPrivateMaterial, PaillierPublicMaterial
from ...core.state import RowPool
from ._fused import g_pow_limbs
from ._obfuscation import encrypt_fresh

log = logging.getLogger("unifl.phe_sdk")

T = TypeVar("T")

__all__ = ["ObfuscatorPool", "existing_pool", "obfuscator_pool", "encrypt_pooled"]

#: the tag of a key's pool in a backend's state
_TAG = "paillier_obfuscators"


class PublicKeyLike(Protocol):
    """What the pool reads of a public key: its record (the current one: the DJN fixed base may be
    switched on after the pool was made) and its fingerprint, for reports."""

    @property
    def material(self) -> PaillierPublicMaterial: ...

    @property
    def fingerprint(self) -> str: ...


class PrivateKeyLike(Protocol):
    @property
    def material(self) -> PaillierPrivateMaterial: ...


class ObfuscatorPool(RowPool):
    """The obfuscators r^n of one key, computed ahead on one backend (see the module docstring).

    Made by :meth:`unifl.phe_sdk.paillier.PublicKey.obfuscators` (one per key and backend
    instance); every encryption under the key on that backend takes its factors from here while
    there are any (hits) and computes the rest on the spot (misses).

    Args:
        backend: the backend instance whose state holds the pool and that computes its factors.
        public_key: the key (held weakly: the pool never keeps a key alive).
        label: what reports call the pool.
    """

    def __init__(self, backend: Backend, public_key: PublicKeyLike, label: str) -> None:
        rec = public_key.material
        super().__init__(label, rec.nsquare_ctx.num_limbs, backend.state.pool_limits)
        self.backend = backend
        self._key = weakref.ref(public_key)
        self._owner: weakref.ReferenceType[PrivateKeyLike] | None = None
        self._refill_lock = threading.Lock()
        self._refilling: threading.Event | None = None
        #: the error that stopped the last background refill (None: none did)
        self.fill_error: BaseException | None = None

    def attach_owner(self, private_key: PrivateKeyLike | None) -> None:
        """Fill through the CRT from now on (the key owner; held weakly)."""
        if private_key is not None:
            self._owner = weakref.ref(private_key)

    # ---- filling
    def _records(self) -> tuple[PaillierPublicMaterial, PaillierPrivateMaterial | None]:
        key = self._key()
        if key is None:
            raise OperandError(f"{self.label}: its key no longer exists")
        owner = self._owner() if self._owner is not None else None
        return key.material, owner.material if owner is not None else None

    def _compute(self, count: int, r: Limbs | None = None) -> Limbs:
        """``count`` factors x̂ = r^n·R² mod n²: E(0) = r^n·R (Montgomery form) by the key's
        obfuscation path, then once more into the domain."""
        pk, owner = self._records()
        zeros = np.zeros((count, pk.n_ctx.num_limbs), np.uint64)
        e0 = encrypt_fresh(self.backend, pk, zeros, r=r, owner=owner)
        return base_op.to_mont(self.backend, pk.nsquare_ctx, e0)

    def fill(self, count: int | None = None, *, r_values: Sequence[int] | None = None) -> int:
        """Compute up to ``count`` more factors now (default: ``fill_batch``), in calls of at most
        ``fill_batch``, fewer when the pool would exceed its capacity; returns how many were added.

        ``r_values``: the r of each factor instead of fresh randomness (reproducible tests and the
        equivalence harness: factor i is r_i^n); all of them must fit, or OperandError.  Never use
        an r twice: two ciphertexts with one r reveal the difference of their plaintexts.
        """
        if r_values is not None:
            pk, _ = self._records()
            rs = [int(v) for v in r_values]
            res = self.claim(len(rs))
            if res.count < len(rs):
                self.cancel(res)
                raise OperandError(f"{self.label}: room for {res.count} more factors, "
                                   f"{len(rs)} r values given")
            try:
                rows = self._compute(len(rs), pk.n_ctx.to_limbs(rs))
            except BaseException:
                self.cancel(res)
                raise
            return self.deposit(res, rows)
        want = self.limits.fill_batch if count is None else int(count)
        added = 0
        while want > 0:
            got = self.fill_with(min(want, self.limits.fill_batch), self._compute)
            if got == 0:
                break
            added += got
            want -= got
        return added

    def reserve(self, count: int) -> int:
        """Make sure ``count`` factors are ready (as many as the capacity allows), computing what
        is missing now in large calls (at job start: the epoch's encryptions); returns how many
        are ready."""
        missing = min(int(count), self.capacity) - self.ready()
        if missing > 0:
            self.fill(missing)
        return self.ready()

    # ---- filling in the background, while the caller waits
    def _slice(self) -> int:
        """Factors per background call: about ``slice_seconds`` of work at the measured rate."""
        s = self.stats()
        if s.filled == 0 or s.fill_seconds <= 0:
            return min(16, self.limits.fill_batch)
        per = s.fill_seconds / s.filled
        return max(1, min(self.limits.fill_batch, int(self.limits.slice_seconds / per)))

    def _refill_loop(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                if self.fill_with(self._slice(), self._compute) == 0:
                    return                              # full
        except Exception as exc:  # noqa: BLE001 - the wait must go on; encryptions compute fresh
            self.fill_error = exc
            log.warning("%s: background refill stopped: %s: %s", self.label,
                        type(exc).__name__, exc)

    @contextlib.contextmanager
    def refilling(self) -> Iterator["ObfuscatorPool"]:
        """Fill the pool in a background thread for the duration of the ``with`` block (the time a
        party waits on its peer), until it is full.  The refill stops at the end of the block
        within about one ``slice_seconds`` call (that last call completes in the background and
        its factors join the pool); a refill already running (another thread) is left alone."""
        with self._refill_lock:
            if self._refilling is not None:
                mine = None
            else:
                mine = self._refilling = threading.Event()
        if mine is None:
            yield self
            return
        thread = threading.Thread(target=self._refill_loop, args=(mine,), daemon=True,
                                  name="unifl-obfuscator-refill")
        thread.start()
        try:
            yield self
        finally:
            mine.set()
            with self._refill_lock:
                self._refilling = None

    def refill_while(self, wait: Callable[[], T]) -> T:
        """``wait()`` (e.g. a receive from the peer) with the pool refilled in the background
        meanwhile; returns what ``wait()`` returns (and raises what it raises)."""
        with self.refilling():
            return wait()


def obfuscator_pool(backend: Backend, public_key: PublicKeyLike,
                    private_key: PrivateKeyLike | None = None) -> ObfuscatorPool:
    """The pool of ``public_key`` on ``backend`` (made on first use, held in ``backend.state``)."""
    def build() -> ObfuscatorPool:
        bits = public_key.material.n.bit_length()
        return ObfuscatorPool(backend, public_key, f"obfuscators of the {bits}-bit key "
                                                   f"{public_key.fingerprint[:12]}")
    pool = backend.state.get(public_key, _TAG, build)
    pool.attach_owner(private_key)
    return pool


def existing_pool(backend: Backend, public_key: PublicKeyLike) -> ObfuscatorPool | None:
    """The pool of ``public_key`` on ``backend`` if one was made, else None (never makes one)."""
    pool = backend.state.peek(public_key, _TAG)
    return pool if isinstance(pool, ObfuscatorPool) else None


def encrypt_pooled(be: Backend, pk: PaillierPublicMaterial, m: Limbs, factors: Limbs) -> Limbs:
    """c̄ = MontMult(1 + m·n, x̂) = (1 + m·n)·r^n·R mod n² for pooled factors x̂ = r^n·R²: one
    MontMult per element."""
    ctx = pk.nsquare_ctx
    return base_op.mont_mul(be, ctx, g_pow_limbs(pk, m), factors, checked=False)

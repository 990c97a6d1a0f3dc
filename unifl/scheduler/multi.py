"""One Backend over several devices (FLASH's multi-accelerator layout): every batch is cut into
contiguous row ranges, the ranges go to the least-loaded devices first, and the results are put back
in input order.  Every operation is element-wise over rows (or, for the two reductions, a product
that can be finished by MontMults of the partial products), so the result is bit-identical to one
device running the whole batch.

Splitting rules per op:

* element-wise ops (mont_mul, mod_mul, mod_exp, mont_exp, the fused Paillier ops): rows; a shared
  exponent row ``(1, Le)`` goes to every piece;
* ``mont_multi_exp`` (K outputs over N bases): over K when K >= the pieces, else over N with the
  partial products (Montgomery form) multiplied together: prod = MontMult(p1, p2) stays in the
  domain because MontMult(a·R, b·R) = a·b·R;
* ``mont_prod_groups``: rows, then the per-group partial products multiplied the same way (an empty
  group's partial is R mod m, the Montgomery one, so it changes nothing).

A member is usually a :class:`~unifl.scheduler.counting.CountingBackend`, so the report says which
device ran what.  The multi backend declares natively the ops *every* member implements natively;
anything else is composed by the layers above from its split MontMults.

A device failing mid-batch (see :mod:`unifl.scheduler.fallback` for what counts as one): the pieces
that completed keep their results; each failed piece is re-run once, on the next backend of the
party's fallback chain (``chain``, attached by the scheduler), and its device is retired -- later
batches are split over the devices left.  When none is left, the whole backend is retired and its
calls run on the fallback.  Without a chain (a bare MultiDeviceBackend) the failure is raised.
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ..core.backend import OPS, Backend
from ..core.errors import BackendUnavailable
from .executor import Executor, SerialExecutor
from .fallback import ChainMember, is_device_failure, own_batch_of


class _PieceFailed:
    """What a piece whose device failed returns to the executor instead of a result."""

    def __init__(self, member: int, args: tuple, exc: BaseException) -> None:
        self.member, self.args, self.exc = member, args, exc


class MultiDeviceBackend(ChainMember, Backend):
    """Batches split across ``members``; ``weights`` (relative speeds) size the pieces."""

    def __init__(self, members: Sequence[Backend], executor: Executor | None = None,
                 weights: Sequence[float] | None = None, min_rows: int = 8) -> None:
        super().__init__()
        if not members:
            raise ValueError("MultiDeviceBackend needs at least one member")
        self.members = list(members)
        self.executor = executor or SerialExecutor()
        w = list(weights) if weights is not None else [1.0] * len(self.members)
        if len(w) != len(self.members) or any(x <= 0 for x in w):
            raise ValueError("one positive weight per member")
        self.weights = w
        self.min_rows = max(1, int(min_rows))
        self.name = "+".join(dict.fromkeys(m.name for m in self.members))
        self.native_ops = frozenset(op for op in OPS
                                    if all(m.implements(op) for m in self.members))
        self.probe_result = self.members[0].probe_result
        self._load = [0] * len(self.members)     # rows in flight per member
        self._lock = threading.Lock()
        self._dead: set[int] = set()             # members retired after a failure
        self.selection: dict = {}

    # ---- description
    @property
    def devices(self) -> list[str]:
        return [d for m in self.members for d in m.devices]

    def describe(self) -> str:
        return " + ".join(m.describe() for m in self.members)

    def implements(self, op: str) -> bool:
        rep = self._replacement()
        return rep.implements(op) if rep is not None else op in self.native_ops

    def own_batch(self, x):
        rep = self._replacement()
        if rep is not None:
            return own_batch_of(rep, x, self.name)
        return super().own_batch(x)

    def live_members(self) -> list[int]:
        """Indices of the members not retired after a failure."""
        with self._lock:
            return [i for i in range(len(self.members)) if i not in self._dead]

    # ---- planning
    def plan(self, n: int, min_rows: int | None = None) -> list[tuple[int, int, int]]:
        """Pieces ``(member, start, stop)`` covering rows [0, n): as many pieces as members (fewer
        when a piece would get under ``min_rows`` rows), sized by weight, handed to the
        least-loaded members first.  Loads are taken here and released by :meth:`_release`."""
        with self._lock:
            order = sorted((i for i in range(len(self.members)) if i not in self._dead),
                           key=lambda i: (self._load[i], i))
            if not order:
                raise BackendUnavailable(f"every device of {self.name!r} failed")
            k = max(1, min(len(order), n // (min_rows or self.min_rows)))
            chosen = order[:k]
            total = sum(self.weights[i] for i in chosen)
            pieces, start, acc = [], 0, 0.0
            for j, i in enumerate(chosen):
                acc += self.weights[i]
                stop = n if j == k - 1 else int(round(n * acc / total))
                if stop > start:
                    pieces.append((i, start, stop))
                    self._load[i] += stop - start
                start = stop
            if not pieces:              # an empty batch still gets one (empty) piece
                pieces.append((chosen[0], 0, 0))
            return pieces

    def _release(self, member: int, rows: int) -> None:
        with self._lock:
            self._load[member] -= rows

    def _call_member(self, i: int, op: str, args: tuple):
        """``op`` on member ``i``; a device failure comes back as a :class:`_PieceFailed` (when a
        chain can take the piece over), anything else is raised."""
        try:
            return getattr(self.members[i], f"op_{op}")(*args)
        except Exception as exc:
            if self.chain is None or not is_device_failure(exc, self.members[i]):
                raise
            return _PieceFailed(i, args, exc)

    def _settle(self, op: str, results: list) -> list:
        """Failed pieces re-run once each on the fallback (in the calling thread, after every piece
        came back, so a completed piece is never recomputed); their devices are retired, and the
        whole backend when none is left."""
        out = list(results)
        for k, res in enumerate(results):
            if not isinstance(res, _PieceFailed):
                continue
            with self._lock:
                self._dead.add(res.member)
                whole = len(self._dead) == len(self.members)
            out[k] = self.chain.rerun(self.chain_pos, op, res.args, res.exc,
                                      self.members[res.member], scope="piece")
            if whole:
                self.chain.retire(self.chain_pos)
        return out

    def _run_op(self, op: str, pieces, piece_args):
        """``op`` per piece with ``piece_args(start, stop)`` through the executor, loads released,
        failed pieces re-run on the fallback chain."""
        def one(piece):
            i, a, b = piece
            try:
                return self._call_member(i, op, piece_args(a, b))
            finally:
                self._release(i, b - a)
        return self._settle(op, self.executor.map(one, pieces))

    def _delegated(self, op: str, args: tuple):
        """The call's result on the replacement once every member failed, else None."""
        chain = self.chain
        if chain is None or not chain.retired(self.chain_pos):
            return None
        return (chain.run_on_current(self.chain_pos, op, args),)

    def _rowwise(self, op: str, lead, n: int, row_args: tuple, shared_args: tuple = (),
                 exps=None):
        """Element-wise op: ``row_args`` are cut by rows; ``exps`` by rows unless it is one row."""
        whole = [lead, *row_args] + ([exps] if exps is not None else []) + list(shared_args)
        done = self._delegated(op, tuple(whole))
        if done is not None:
            return done[0]
        pieces = self.plan(n)

        def piece_args(a, b):
            args = [lead] + [np.ascontiguousarray(x[a:b]) for x in row_args]
            if exps is not None:
                args.append(exps if exps.shape[0] == 1 else np.ascontiguousarray(exps[a:b]))
            args.extend(shared_args)
            return tuple(args)
        parts = self._run_op(op, pieces, piece_args)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def _multiply_partials(self, ctx, parts: list[np.ndarray]) -> np.ndarray:
        acc = parts[0]
        for p in parts[1:]:
            args = (ctx, np.ascontiguousarray(acc), np.ascontiguousarray(p))
            live = self.live_members()
            if not live:
                acc = self.chain.run_on_current(self.chain_pos, "mont_mul", args) \
                    if self.chain is not None else self.members[0].op_mont_mul(*args)
                continue
            acc = self._settle("mont_mul", [self._call_member(live[0], "mont_mul", args)])[0]
        return acc

    # ---- the ops
    def op_mont_mul(self, ctx, a, b):
        return self._rowwise("mont_mul", ctx, a.shape[0], (a, b))

    def op_mod_mul(self, ctx, a, b):
        return self._rowwise("mod_mul", ctx, a.shape[0], (a, b))

    def op_mod_exp(self, ctx, base, exps):
        return self._rowwise("mod_exp", ctx, base.shape[0], (base,), exps=exps)

    def op_mod_exp_secret(self, ctx, base, exps):
        return self._rowwise("mod_exp_secret", ctx, base.shape[0], (base,), exps=exps)

    def op_mont_exp(self, ctx, base_mont, exps):
        return self._rowwise("mont_exp", ctx, base_mont.shape[0], (base_mont,), exps=exps)

    def op_mont_inverse(self, ctx, a_mont):
        return self._rowwise("mont_inverse", ctx, a_mont.shape[0], (a_mont,))

    def op_paillier_encrypt(self, pk, m, r):
        return self._rowwise("paillier_encrypt", pk, m.shape[0], (m, r))

    def op_paillier_encrypt_fixed_base(self, pk, m, a):
        return self._rowwise("paillier_encrypt_fixed_base", pk, m.shape[0], (m, a))

    def op_paillier_decrypt(self, sk, c_mont):
        return self._rowwise("paillier_decrypt", sk, c_mont.shape[0], (c_mont,))

    def op_mont_multi_exp(self, ctx, bases_mont, exps):
        done = self._delegated("mont_multi_exp", (ctx, bases_mont, exps))
        if done is not None:
            return done[0]
        k, n = exps.shape[0], exps.shape[1]
        if k >= len(self.live_members()) or n < 2 * self.min_rows:
            pieces = self.plan(k, min_rows=1)   # each of the K outputs is a whole multi-exp
            parts = self._run_op("mont_multi_exp", pieces, lambda a, b: (
                ctx, bases_mont, np.ascontiguousarray(exps[a:b])))
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        pieces = self.plan(n)
        parts = self._run_op("mont_multi_exp", pieces, lambda a, b: (
            ctx, np.ascontiguousarray(bases_mont[a:b]), np.ascontiguousarray(exps[:, a:b])))
        return self._multiply_partials(ctx, parts)

    def op_mont_prod_groups(self, ctx, a_mont, groups, num_groups):
        done = self._delegated("mont_prod_groups", (ctx, a_mont, groups, num_groups))
        if done is not None:
            return done[0]
        pieces = self.plan(a_mont.shape[0])
        parts = self._run_op("mont_prod_groups", pieces, lambda a, b: (
            ctx, np.ascontiguousarray(a_mont[a:b]), np.ascontiguousarray(groups[a:b]), num_groups))
        return self._multiply_partials(ctx, parts)

    # ---- reporting
    def own_report(self) -> list[dict]:
        """The members' counter rows (no fallback links, no failure annotations)."""
        return [row for m in self.members if hasattr(m, "report") for row in m.report()]

    def reset_counters(self) -> None:
        for m in self.members:
            if hasattr(m, "reset_counters"):
                m.reset_counters()
        self._reset_chain_counters()

    def close(self) -> None:
        self.executor.close()
        for m in self.members:
            close = getattr(m, "close", None)
            if callable(close):
                close()
        self._close_chain()


def _rowwise_forwarder(op: str):
    """An element-wise op added to the contract without a method here: every array argument with
    the batch's rows is cut by rows, a one-row array (a shared exponent) goes whole to every piece,
    anything else (ctx, keys) is passed as is."""
    def method(self: MultiDeviceBackend, lead, first, *rest):
        n = first.shape[0]
        done = self._delegated(op, (lead, first, *rest))
        if done is not None:
            return done[0]
        pieces = self.plan(n)

        def piece_args(a, b):
            cut = [np.ascontiguousarray(x[a:b]) if getattr(x, "ndim", 0) >= 1 and x.shape[0] == n
                   else x for x in (first, *rest)]
            return (lead, *cut)
        parts = self._run_op(op, pieces, piece_args)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    method.__name__ = method.__qualname__ = f"op_{op}"
    method.__doc__ = f"``op_{op}`` split by rows across the members (generic element-wise split)."
    return method


# an element-wise op added to OPS is split without editing this file; ops with their own splitting
# rule (the reductions) define their method above
for _op in OPS:
    if not hasattr(MultiDeviceBackend, f"op_{_op}"):
        setattr(MultiDeviceBackend, f"op_{_op}", _rowwise_forwarder(_op))

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
"""

from __future__ import annotations

import threading
from typing import Sequence

import numpy as np

from ..backends.base import OPS, Backend
from .executor import Executor, SerialExecutor


class MultiDeviceBackend(Backend):
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
        self.selection: dict = {}

    # ---- description
    @property
    def devices(self) -> list[str]:
        return [d for m in self.members for d in m.devices]

    def describe(self) -> str:
        return " + ".join(m.describe() for m in self.members)

    def implements(self, op: str) -> bool:
        return op in self.native_ops

    # ---- planning
    def plan(self, n: int, min_rows: int | None = None) -> list[tuple[int, int, int]]:
        """Pieces ``(member, start, stop)`` covering rows [0, n): as many pieces as members (fewer
        when a piece would get under ``min_rows`` rows), sized by weight, handed to the
        least-loaded members first.  Loads are taken here and released by :meth:`_release`."""
        with self._lock:
            order = sorted(range(len(self.members)), key=lambda i: (self._load[i], i))
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

    def _run(self, pieces, call):
        """``call(member_backend, start, stop)`` per piece through the executor, loads released."""
        def one(piece):
            i, a, b = piece
            try:
                return call(self.members[i], a, b)
            finally:
                self._release(i, b - a)
        return self.executor.map(one, pieces)

    def _rowwise(self, op: str, lead, n: int, row_args: tuple, shared_args: tuple = (),
                 exps=None):
        """Element-wise op: ``row_args`` are cut by rows; ``exps`` by rows unless it is one row."""
        pieces = self.plan(n)

        def call(m, a, b):
            args = [lead] + [np.ascontiguousarray(x[a:b]) for x in row_args]
            if exps is not None:
                args.append(exps if exps.shape[0] == 1 else np.ascontiguousarray(exps[a:b]))
            args.extend(shared_args)
            return getattr(m, f"op_{op}")(*args)
        parts = self._run(pieces, call)
        return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)

    def _multiply_partials(self, ctx, parts: list[np.ndarray]) -> np.ndarray:
        acc = parts[0]
        for p in parts[1:]:
            acc = self.members[0].op_mont_mul(ctx, np.ascontiguousarray(acc),
                                              np.ascontiguousarray(p))
        return acc

    # ---- the ops
    def op_mont_mul(self, ctx, a, b):
        return self._rowwise("mont_mul", ctx, a.shape[0], (a, b))

    def op_mod_mul(self, ctx, a, b):
        return self._rowwise("mod_mul", ctx, a.shape[0], (a, b))

    def op_mod_exp(self, ctx, base, exps):
        return self._rowwise("mod_exp", ctx, base.shape[0], (base,), exps=exps)

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
        k, n = exps.shape[0], exps.shape[1]
        if k >= len(self.members) or n < 2 * self.min_rows:
            pieces = self.plan(k, min_rows=1)   # each of the K outputs is a whole multi-exp
            parts = self._run(pieces, lambda m, a, b: m.op_mont_multi_exp(
                ctx, bases_mont, np.ascontiguousarray(exps[a:b])))
            return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
        pieces = self.plan(n)
        parts = self._run(pieces, lambda m, a, b: m.op_mont_multi_exp(
            ctx, np.ascontiguousarray(bases_mont[a:b]), np.ascontiguousarray(exps[:, a:b])))
        return self._multiply_partials(ctx, parts)

    def op_mont_prod_groups(self, ctx, a_mont, groups, num_groups):
        pieces = self.plan(a_mont.shape[0])
        parts = self._run(pieces, lambda m, a, b: m.op_mont_prod_groups(
            ctx, np.ascontiguousarray(a_mont[a:b]), np.ascontiguousarray(groups[a:b]), num_groups))
        return self._multiply_partials(ctx, parts)

    # ---- reporting
    def report(self) -> list[dict]:
        return [row for m in self.members if hasattr(m, "report") for row in m.report()]

    def reset_counters(self) -> None:
        for m in self.members:
            if hasattr(m, "reset_counters"):
                m.reset_counters()

    def close(self) -> None:
        self.executor.close()
        for m in self.members:
            close = getattr(m, "close", None)
            if callable(close):
                close()

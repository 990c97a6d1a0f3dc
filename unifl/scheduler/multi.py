"""One Backend over several devices (FLASH's multi-accelerator layout), and the one place where a
batch is split across devices.

Splitting policy
----------------
Backends never split a batch across devices themselves: a backend instance is one device (one GPU,
one FPGA card, one QAT endpoint set, one native thread pool), and whatever parallelism it has inside
that device -- CUDA blocks, the FPGA's processing elements and buffer ring, the requests a QAT
session spreads over its instances as they free up, native threads -- is its own business.  Several
devices are several member backends of a :class:`MultiDeviceBackend`, and only it cuts a batch:

* **Pieces.**  A batch of N rows is cut into contiguous row ranges, at most one per live member and
  none under ``min_rows`` rows (so a small batch goes whole to one member), sized in proportion to
  the members' ``weights`` (relative speeds; equal by default).
* **Placement.**  Pieces go to the least-loaded members first (rows in flight from other threads),
  ties to the lower index; the pieces run through the pluggable executor (serial, threads, Ray).
* **Per op.**  How each op of the contract is cut is one declarative table, :data:`SPLITS`, keyed
  by op name and checked against :data:`unifl.core.contract.OPS` at import -- an op added to the
  contract without a rule fails the import of this module by name, it never silently falls back to
  composition:

  - :class:`Rows` -- element-wise ops (mont_mul, mod_mul, the exponentiations, mont_inverse, the
    fused Paillier ops): the batch arguments are cut by rows, an exponent batch too unless it is one
    shared row ``(1, Le)``, which goes whole to every piece, like the context or key record (the
    fused ops get the record of :mod:`unifl.core.keys` whole);
  - :class:`MultiExp` -- ``mont_multi_exp`` (K outputs over N bases): over K when K is at least the
    number of live members (each output a whole multi-exponentiation), else over N, the K partial
    products multiplied together afterwards;
  - :class:`ProdGroups` -- ``mont_prod_groups``: rows, then each group's partial products multiplied
    together (an empty group's partial is R mod m, the Montgomery one, so it changes nothing).

  Partial products stay in the Montgomery domain: MontMult(a·R, b·R) = a·b·R.
* **Reassembly.**  Results are put back in input order (rows concatenated, partial products
  multiplied), so the result is bit-identical to one device running the whole batch.

A member is usually a :class:`~unifl.scheduler.counting.CountingBackend`, so the report says which
device ran what.  The multi backend declares natively the ops *every* member implements natively;
anything else is composed by the layers above from its split MontMults.

A device failing mid-batch (see :mod:`unifl.scheduler.fallback` for what counts as one, above all
:class:`~unifl.core.errors.DeviceError`): the pieces that completed keep their results; each failed
piece is re-run once, on the next backend of the party's fallback chain (``chain``, attached by the
scheduler), and its device is retired -- later batches are split over the devices left.  When none
is left, the whole backend is retired and its calls run on the fallback.  Without a chain (a bare
MultiDeviceBackend) the failure is raised.  Any other error (a caller's OperandError, a bug) is raised
unchanged and retires nothing.
"""

from __future__ import annotations

import functools
import logging
import threading
from dataclasses import dataclass
from typing import Any, Callable, Sequence, Union

import numpy as np

from ..core.backend import OPS, Backend
from ..core.contract import SIGNATURES, define_ops, describe as describe_op
from ..core.errors import BackendUnavailable, OperandError
from .executor import Executor, SerialExecutor
from .fallback import ChainMember, is_device_failure, label, own_batch_of

log = logging.getLogger("unifl.scheduler")

__all__ = ["MultiDeviceBackend", "SPLITS", "Rows", "MultiExp", "ProdGroups", "Split"]

#: (member, start, stop): rows [start, stop) of a batch on member ``member``
Piece = tuple[int, int, int]


def _params(op: str) -> list[str]:
    """The op's parameter names, ``self`` excluded."""
    return list(SIGNATURES[op].parameters)[1:]


@functools.lru_cache(maxsize=None)
def _positions(op: str, names: tuple[str, ...]) -> tuple[int, ...]:
    """Indices of the parameters ``names`` among the op's arguments (``self`` excluded)."""
    params = _params(op)
    missing = [n for n in names if n not in params]
    if missing:
        raise TypeError(f"splitting rule of op_{op} names {missing}, which are not parameters of "
                        f"op_{op}{SIGNATURES[op]}")
    return tuple(params.index(n) for n in names)


def _exact(op: str, names: tuple[str, ...]) -> None:
    """A rule that unpacks the arguments by position: the op's parameters must be exactly these."""
    if tuple(_params(op)) != names:
        raise TypeError(f"splitting rule of op_{op} expects the parameters {names}, the contract "
                        f"has op_{op}{SIGNATURES[op]}")


def _cut(x: Any, a: int, b: int) -> np.ndarray:
    return np.ascontiguousarray(x[a:b])


def _concat(parts: list) -> Any:
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


@dataclass(frozen=True)
class Rows:
    """Element-wise over the rows of the batch.  ``batch``: the parameters cut by rows (the first
    gives N; the others must have N rows too); ``exps``: an exponent parameter cut by rows unless it
    is one row ``(1, Le)`` shared by every element.  Every other parameter (context, key record)
    goes whole to each piece."""

    batch: tuple[str, ...]
    exps: str | None = None

    def validate(self, op: str) -> None:
        _positions(op, self.batch + ((self.exps,) if self.exps else ()))

    def run(self, multi: MultiDeviceBackend, op: str, args: tuple) -> Any:
        cut = _positions(op, self.batch)
        n = int(np.shape(args[cut[0]])[0])
        for i in cut[1:]:
            if int(np.shape(args[i])[0]) != n:
                names = _params(op)
                raise OperandError(f"op_{op}: {names[i]} has {np.shape(args[i])[0]} rows, "
                                   f"{names[cut[0]]} has {n}")
        e = _positions(op, (self.exps,))[0] if self.exps else None
        shared = e is not None and int(np.shape(args[e])[0]) == 1
        if e is not None and not shared and int(np.shape(args[e])[0]) != n:
            raise OperandError(f"op_{op}: {self.exps} must have {n} rows or one, "
                               f"got {np.shape(args[e])[0]}")
        rowwise = cut + ((e,) if e is not None and not shared else ())

        def piece_args(a: int, b: int) -> tuple:
            out = list(args)
            for i in rowwise:
                out[i] = _cut(args[i], a, b)
            return tuple(out)
        return _concat(multi._run_pieces(op, multi.plan(n), piece_args))


@dataclass(frozen=True)
class MultiExp:
    """``mont_multi_exp(ctx, bases_mont (N, L), exps (K, N, Le))``: over K when K >= the live
    members (or N is too small to be worth cutting), else over N with the K partial products
    multiplied together."""

    def validate(self, op: str) -> None:
        _exact(op, ("ctx", "bases_mont", "exps"))

    def run(self, multi: MultiDeviceBackend, op: str, args: tuple) -> Any:
        ctx, bases_mont, exps = args
        k, n = int(exps.shape[0]), int(exps.shape[1])
        if k >= len(multi.live_members()) or n < 2 * multi.min_rows:
            # each of the K outputs is a whole multi-exponentiation
            return _concat(multi._run_pieces(op, multi.plan(k, min_rows=1), lambda a, b: (
                ctx, bases_mont, _cut(exps, a, b))))
        parts = multi._run_pieces(op, multi.plan(n), lambda a, b: (
            ctx, _cut(bases_mont, a, b), np.ascontiguousarray(exps[:, a:b])))
        return multi._multiply_partials(ctx, parts)


@dataclass(frozen=True)
class ProdGroups:
    """``mont_prod_groups(ctx, a_mont (N, L), groups (N,), num_groups)``: rows, with the per-group
    partial products multiplied together."""

    def validate(self, op: str) -> None:
        _exact(op, ("ctx", "a_mont", "groups", "num_groups"))

    def run(self, multi: MultiDeviceBackend, op: str, args: tuple) -> Any:
        ctx, a_mont, groups, num_groups = args
        parts = multi._run_pieces(op, multi.plan(int(a_mont.shape[0])), lambda a, b: (
            ctx, _cut(a_mont, a, b), _cut(groups, a, b), num_groups))
        return multi._multiply_partials(ctx, parts)


Split = Union[Rows, MultiExp, ProdGroups]

#: how each op of the contract is split across devices (see the module doc); every op of
#: ``unifl.core.contract.OPS`` must have a rule, checked at import by :func:`_check_splits`
SPLITS: dict[str, Split] = {
    "mont_mul": Rows(("a", "b")),
    "mod_mul": Rows(("a", "b")),
    "mod_exp": Rows(("base",), exps="exps"),
    "mod_exp_secret": Rows(("base",), exps="exps"),
    "mont_exp": Rows(("base_mont",), exps="exps"),
    "mont_multi_exp": MultiExp(),
    "mont_prod_groups": ProdGroups(),
    "mont_inverse": Rows(("a_mont",)),
    "paillier_encrypt": Rows(("m", "r")),
    "paillier_encrypt_fixed_base": Rows(("m", "a")),
    "paillier_encrypt_owner": Rows(("m", "yp", "yq")),
    "paillier_encrypt_owner_fixed_base": Rows(("m", "a")),
    "paillier_encrypt_owner_generator": Rows(("m", "kp", "kq")),
    "paillier_decrypt": Rows(("c_mont",)),
}


def _check_splits() -> None:
    """Every op of the contract has a splitting rule naming its real parameters, and no rule is
    left for an op the contract no longer has."""
    missing = [op for op in OPS if op not in SPLITS]
    if missing:
        raise TypeError(
            "unifl.scheduler.multi.SPLITS has no splitting rule for op(s) "
            + "; ".join(describe_op(op) for op in missing)
            + " -- add one (Rows / MultiExp / ProdGroups) saying how a batch of it is cut across "
              "devices")
    stale = sorted(set(SPLITS) - set(OPS))
    if stale:
        raise TypeError(f"unifl.scheduler.multi.SPLITS has rules for {stale}, which are not ops of "
                        "unifl.core.contract.OPS")
    for op, rule in SPLITS.items():
        rule.validate(op)


_check_splits()


class _PieceFailed:
    """What a piece whose device failed returns to the executor instead of a result."""

    def __init__(self, member: int, args: tuple, exc: BaseException) -> None:
        self.member, self.args, self.exc = member, args, exc


class MultiDeviceBackend(ChainMember):
    """Batches split across ``members``; ``weights`` (relative speeds) size the pieces.

    A wrapper, not a device: each member keeps its own per-key and per-modulus state (its
    ``state``), built on its own device.  The wrapper's ``state`` only holds what the layers above
    cache on the backend they were handed -- host data computed through the split ops, such as the
    SDK's generic fixed-base comb table -- valid for every member, since their results are
    bit-identical."""

    def __init__(self, members: Sequence[Backend], executor: Executor | None = None,
                 weights: Sequence[float] | None = None, min_rows: int = 8,
                 failover: str = "chain") -> None:
        super().__init__()
        if not members:
            raise ValueError("MultiDeviceBackend needs at least one member")
        if failover not in ("chain", "members"):
            raise ValueError(f"failover must be 'chain' or 'members', got {failover!r}")
        #: where the piece of a failed member is re-run: "chain", the next backend of the party's
        #: fallback chain (devices of different kinds: the others are busy with their own pieces);
        #: "members", a surviving member first (interchangeable workers of one cluster), the chain
        #: only once none is left
        self.failover = failover
        self.members = list(members)
        self.executor = executor or SerialExecutor()
        w = list(weights) if weights is not None else [1.0] * len(self.members)
        if len(w) != len(self.members) or any(x <= 0 for x in w):
            raise ValueError("one positive weight per member")
        self.weights = w
        self.min_rows = max(1, int(min_rows))
        # a wrapper's name and native ops are its members', known per instance only
        self.name = "+".join(dict.fromkeys(m.name for m in self.members))  # type: ignore[misc]
        self.native_ops = frozenset(  # type: ignore[misc]
            op for op in OPS if all(m.implements(op) for m in self.members))
        self.probe_result = self.members[0].probe_result
        self._load = [0] * len(self.members)     # rows in flight per member
        self._lock = threading.Lock()
        self._dead: set[int] = set()             # members retired after a failure

    # ---- description
    @property
    def devices(self) -> list[str]:
        return [d for m in self.members for d in m.devices]

    def describe(self) -> str:
        return " + ".join(m.describe() for m in self.members)

    def implements(self, op: str) -> bool:
        rep = self._replacement()
        return rep.implements(op) if rep is not None else op in self.native_ops

    def own_batch(self, x: Any) -> Any:
        rep = self._replacement()
        if rep is not None:
            return own_batch_of(rep, x, self.name)
        return super().own_batch(x)

    def live_members(self) -> list[int]:
        """Indices of the members not retired after a failure."""
        with self._lock:
            return [i for i in range(len(self.members)) if i not in self._dead]

    # ---- planning
    def plan(self, n: int, min_rows: int | None = None) -> list[Piece]:
        """Pieces ``(member, start, stop)`` covering rows [0, n): as many pieces as live members
        (fewer when a piece would get under ``min_rows`` rows), sized by weight, handed to the
        least-loaded members first.  Loads are taken here and released by :meth:`_release`."""
        with self._lock:
            order = sorted((i for i in range(len(self.members)) if i not in self._dead),
                           key=lambda i: (self._load[i], i))
            if not order:
                raise BackendUnavailable(f"every device of {self.name!r} failed")
            k = max(1, min(len(order), n // (min_rows or self.min_rows)))
            chosen = order[:k]
            total = sum(self.weights[i] for i in chosen)
            pieces: list[Piece] = []
            start, acc = 0, 0.0
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

    # ---- running the pieces
    def _call_member(self, i: int, op: str, args: tuple) -> Any:
        """``op`` on member ``i``; a device failure comes back as a :class:`_PieceFailed` (when a
        chain can take the piece over), anything else is raised."""
        try:
            return getattr(self.members[i], f"op_{op}")(*args)
        except Exception as exc:
            if self.chain is None or not is_device_failure(exc, self.members[i]):
                raise
            return _PieceFailed(i, args, exc)

    def _settle(self, op: str, results: list) -> list:
        """Failed pieces re-run once each (in the calling thread, after every piece came back, so a
        completed piece is never recomputed) on a surviving member (``failover="members"``) or the
        fallback chain; their devices are retired, and the whole backend when none is left."""
        out = list(results)
        for k, res in enumerate(results):
            if isinstance(res, _PieceFailed):
                out[k] = self._recover(op, res)
        return out

    def _recover(self, op: str, failed: _PieceFailed) -> Any:
        """The result of a failed piece: re-run on the least-loaded surviving member while
        ``failover`` is "members" and one is left (a member failing the re-run is retired in
        turn), else on the next backend of the fallback chain."""
        chain = self.chain
        assert chain is not None    # a _PieceFailed exists only when a chain is attached
        while True:
            with self._lock:
                self._dead.add(failed.member)
                live = [i for i in range(len(self.members)) if i not in self._dead]
                whole = not live
                target = min(live, key=lambda i: (self._load[i], i)) if live else None
            if self.failover == "members":
                self._say_retired(failed, len(live))
            if self.failover != "members" or target is None:
                out = chain.rerun(self.chain_pos, op, failed.args, failed.exc,
                                  self.members[failed.member], scope="piece")
                if whole:
                    chain.retire(self.chain_pos)
                return out
            chain.note(op, failed.args, failed.exc, self.members[failed.member],
                       self.members[target], scope="piece")
            res = self._call_member(target, op, failed.args)
            if not isinstance(res, _PieceFailed):
                return res
            failed = res

    def _say_retired(self, failed: _PieceFailed, left: int) -> None:
        """Log that member ``failed.member`` is out for the rest of the job, and what is left."""
        name, dev = label(self.members[failed.member])
        log.warning("%s (%s) failed (%s: %s) and is not used again in this job; %d of %d "
                    "devices left", name, dev, type(failed.exc).__name__, failed.exc, left,
                    len(self.members))

    def _run_pieces(self, op: str, pieces: list[Piece],
                    piece_args: Callable[[int, int], tuple]) -> list:
        """``op`` per piece with ``piece_args(start, stop)`` through the executor, loads released,
        failed pieces re-run on the fallback chain; results in piece order."""
        def one(piece: Piece) -> Any:
            i, a, b = piece
            try:
                return self._call_member(i, op, piece_args(a, b))
            finally:
                self._release(i, b - a)
        return self._settle(op, self.executor.map(one, pieces))

    def _multiply_partials(self, ctx: Any, parts: list) -> Any:
        """The product of partial results (Montgomery form), row by row, on the first live member
        (the fallback when none is left)."""
        acc = parts[0]
        for p in parts[1:]:
            args = (ctx, np.ascontiguousarray(acc), np.ascontiguousarray(p))
            live = self.live_members()
            if not live:      # every member failed: the backend's replacement multiplies
                assert self.chain is not None   # members are retired only when a chain is attached
                acc = self.chain.run_on_current(self.chain_pos, "mont_mul", args)
                continue
            acc = self._settle("mont_mul", [self._call_member(live[0], "mont_mul", args)])[0]
        return acc

    def _split(self, op: str, args: tuple) -> Any:
        """``op`` split by its rule of :data:`SPLITS`, or on the replacement once every member
        failed and the backend was retired."""
        chain = self.chain
        if chain is not None and chain.retired(self.chain_pos):
            return chain.run_on_current(self.chain_pos, op, args)
        return SPLITS[op].run(self, op, args)

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


# one method per op of the contract, split by its rule of SPLITS: nothing here is written per op
define_ops(MultiDeviceBackend, "_split", "Split across the members by its rule of :data:`SPLITS`.")

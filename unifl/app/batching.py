"""The mini-batch schedule every party of a job computes from the shared seed, and the rule that
keeps a vertical batch too large for a party to solve its gradient for the other party's values.

Shared by the federated trainers (:mod:`unifl.app.vertical`, :mod:`unifl.app.horizontal`) and the
plaintext references (:mod:`unifl.app.reference`), so both walk the same rows in the same order.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import ConfigError


def batches(n: int, batch_size: int, seed: int, epoch: int,
            min_rows: int = 0) -> list[np.ndarray]:
    """The mini-batches (row indices) of ``epoch``: a permutation seeded by (seed, epoch), cut into
    ``batch_size`` pieces (``batch_size`` <= 0: one full batch).  Every party computes the same
    schedule from the shared seed, and a resumed run the same as an uninterrupted one.

    Every batch has more than ``min_rows`` rows: a short remainder is folded into the batch before
    it.  Vertical training passes the larger feature count, because a party that receives the
    gradient Xᵀ·d of a batch with no more rows than its features can solve that system for d
    (the peer's labels or partial predictions).

    Raises:
        ConfigError: ``batch_size`` (or ``n`` for a full batch) cannot give batches of more than
            ``min_rows`` rows.
    """
    check_schedule(n, batch_size, min_rows)
    perm = np.random.default_rng([int(seed), int(epoch)]).permutation(n)
    if batch_size <= 0 or batch_size >= n:
        return [np.sort(perm)]
    out = [perm[i:i + batch_size] for i in range(0, n, batch_size)]
    if len(out) > 1 and len(out[-1]) <= min_rows:
        out[-2:] = [np.concatenate(out[-2:])]
    return out


def check_schedule(n: int, batch_size: int, min_rows: int, what: str = "") -> None:
    """Refuse a schedule that would produce a batch of ``min_rows`` rows or fewer (see
    :func:`batches`); ``what`` names the feature counts behind ``min_rows`` in the message.

    Raises:
        ConfigError: naming the batch size, the feature count and the rows available.
    """
    if min_rows <= 0:
        return
    rows = n if batch_size <= 0 or batch_size >= n else batch_size
    if rows <= min_rows:
        size = "full batch" if batch_size <= 0 or batch_size >= n else f"batch_size {batch_size}"
        raise ConfigError(
            f"job params: {size} gives batches of {rows} rows, but every batch needs more rows "
            f"than the largest feature count {min_rows}{' (' + what + ')' if what else ''}: a "
            f"party could otherwise solve its gradient for the other party's residuals; use "
            f"batch_size > {min_rows}" + (f" (the data has {n} training rows)"
                                           if n <= min_rows else ""))


def vertical_min_rows(d_guest: int, d_host: int) -> int:
    """Rows a vertical batch must exceed: the larger of the two parties' feature counts."""
    return max(int(d_guest), int(d_host))


def batch_count(n: int, batch_size: int, min_rows: int = 0) -> int:
    """``len(batches(n, batch_size, seed, epoch, min_rows))`` without drawing the permutation (the
    count depends on neither seed nor epoch)."""
    check_schedule(n, batch_size, min_rows)
    if batch_size <= 0 or batch_size >= n:
        return 1
    count = -(-n // batch_size)
    if count > 1 and n - (count - 1) * batch_size <= min_rows:
        count -= 1
    return count


def batch_rows(n: int, batch_size: int, seed: int, epoch: int,
               min_rows: int = 0) -> list[np.ndarray | range]:
    """The batches of :func:`batches`, where a full batch is ``range(n)``: the same rows in the
    same order (a sorted permutation is 0 .. n−1), without materialising n indices, so a
    streamed full-batch epoch holds no per-row state.  Mini-batches are :func:`batches` itself
    (the seeded permutation, 8 bytes per row while the epoch runs)."""
    check_schedule(n, batch_size, min_rows)
    if batch_size <= 0 or batch_size >= n:
        return [range(n)]
    return list(batches(n, batch_size, seed, epoch, min_rows))


def chunk_bounds(rows: int, chunk_rows: int) -> list[tuple[int, int]]:
    """The chunks of a batch of ``rows`` rows: consecutive half-open position ranges
    [start, stop) of ``chunk_rows`` rows each, the last one shorter when ``chunk_rows`` does not
    divide ``rows``.  Positions index the batch's own row list, so both parties of a job, which
    share the schedule, cut every batch at the same places.

    Raises:
        ConfigError: ``chunk_rows`` < 1.
    """
    if chunk_rows < 1:
        raise ConfigError(f"chunk_rows must be >= 1, got {chunk_rows}")
    return [(a, min(a + chunk_rows, rows)) for a in range(0, rows, chunk_rows)]


def take_rows(batch: np.ndarray | range, start: int, stop: int) -> np.ndarray:
    """Rows ``start`` .. ``stop`` − 1 (positions) of a batch, as an int64 index array."""
    if isinstance(batch, range):
        return np.arange(batch.start + start, batch.start + stop, dtype=np.int64)
    return np.asarray(batch[start:stop], dtype=np.int64)

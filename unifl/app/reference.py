"""Plaintext reference implementations of the federated algorithms: the *same* algorithms (same seed,
same batches, same Taylor approximation, same update and stopping rules) computed in one process in
float64 with no cryptography.  Tests train the federated version and compare with these.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import ConfigError
from .metrics import sigmoid


# ---------------------------------------------------------------- vertical LR / LinR
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
    :func:`batches`); ``what`` names the feature counts behind ``min_rows`` in the message."""
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


def residual(task: str, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d with gradient X^T d / B:  LR (Taylor, y in {0,1} mapped to ±1): d = 0.25·z − 0.5·y±;
    LinR (squared loss / 2): d = z − y."""
    if task == "lr":
        return 0.25 * z - 0.5 * (2.0 * y - 1.0)
    return z - y


def vertical_reference(Xg: np.ndarray, Xh: np.ndarray, y: np.ndarray, *, task: str, epochs: int,
                       batch_size: int, learning_rate: float, l2: float, tol: float | None,
                       seed: int, l2_mask_g: np.ndarray | None = None,
                       start_epoch: int = 0, wg: np.ndarray | None = None,
                       wh: np.ndarray | None = None) -> dict:
    """Mini-batch gradient descent on the joined features [Xg | Xh] with the federated residual.

    Batches are those of :func:`batches` with more rows than either party's feature count.
    Update per batch B:  w ← w − lr · (X_B^T d_B / |B| + l2 · w)  (guest's intercept column, where
    ``l2_mask_g`` is 0, is not penalised).  Early stop after an epoch when
    ||w_end − w_start||_2 (both parties' weights) < tol.
    """
    wg = np.zeros(Xg.shape[1]) if wg is None else np.array(wg, dtype=np.float64)
    wh = np.zeros(Xh.shape[1]) if wh is None else np.array(wh, dtype=np.float64)
    mg = np.ones(Xg.shape[1]) if l2_mask_g is None else l2_mask_g
    epoch_done = start_epoch
    stopped = False
    min_rows = vertical_min_rows(Xg.shape[1], Xh.shape[1])
    for epoch in range(start_epoch, epochs):
        wg0, wh0 = wg.copy(), wh.copy()
        for b in batches(len(y), batch_size, seed, epoch, min_rows):
            d = residual(task, Xg[b] @ wg + Xh[b] @ wh, y[b])
            gg = Xg[b].T @ d / len(b) + l2 * mg * wg
            gh = Xh[b].T @ d / len(b) + l2 * wh
            wg = wg - learning_rate * gg
            wh = wh - learning_rate * gh
        epoch_done = epoch + 1
        change = float(np.sqrt(((wg - wg0) ** 2).sum() + ((wh - wh0) ** 2).sum()))
        if tol is not None and change < tol:
            stopped = True
            break
    return {"wg": wg, "wh": wh, "epochs": epoch_done, "stopped": stopped}


# ---------------------------------------------------------------- horizontal LR
def local_sgd(X: np.ndarray, y: np.ndarray, w: np.ndarray, *, local_epochs: int, batch_size: int,
              learning_rate: float, l2: float, seed: int, round_: int, client: int) -> np.ndarray:
    """One client's local training of a round: mini-batch SGD on the exact logistic loss."""
    w = w.copy()
    for e in range(local_epochs):
        for b in batches(len(y), batch_size, seed * 1000 + client, round_ * 100 + e):
            p = sigmoid(X[b] @ w)
            w = w - learning_rate * (X[b].T @ (p - y[b]) / len(b) + l2 * w)
    return w


def horizontal_reference(clients: list[tuple[np.ndarray, np.ndarray]], *, rounds: int,
                         local_epochs: int, batch_size: int, learning_rate: float, l2: float,
                         seed: int) -> np.ndarray:
    """FedAvg: each round every client trains locally from the global w, the new global w is the
    sample-weighted mean of the clients' weights."""
    dim = clients[0][0].shape[1]
    w = np.zeros(dim)
    total = sum(len(y) for _, y in clients)
    for r in range(rounds):
        local = [local_sgd(X, y, w, local_epochs=local_epochs, batch_size=batch_size,
                           learning_rate=learning_rate, l2=l2, seed=seed, round_=r, client=k)
                 for k, (X, y) in enumerate(clients)]
        w = sum(len(y) * wk for (_, y), wk in zip(clients, local)) / total
    return w


# ---------------------------------------------------------------- hetero SecureBoost
def secureboost_reference(y: np.ndarray, guest_bins: np.ndarray, host_bins: np.ndarray, p,
                          guest_bins_test: np.ndarray | None = None,
                          host_bins_test: np.ndarray | None = None) -> dict:
    """The same boosting (same quantised g/h, bins, gains and tie-breaking) with the host's
    histograms summed in clear; returns trees, base score and, given test bins, test scores."""
    from .secureboost import PlainHost, boost, predict_tree

    host = PlainHost(host_bins, p)

    def feed(_k, gi, hi):
        host.gi, host.hi = gi, hi

    trees, f0, _ = boost(y, guest_bins, host, p, encrypt_gh=feed)
    out = {"trees": trees, "base_score": f0, "records": list(host.records)}
    if guest_bins_test is not None:
        left = {r: host_bins_test[:, f] <= b for r, (f, b) in enumerate(host.records)}
        out["test_score"] = f0 + sum(p.learning_rate * predict_tree(nodes, guest_bins_test, left)
                                     for nodes in trees)
    return out

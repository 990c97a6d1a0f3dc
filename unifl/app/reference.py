"""Plaintext reference implementations of the federated algorithms, computed in one process with no
cryptography, for the tests to compare the federated runs with.

This module imports nothing from the federated modules (``vertical``, ``horizontal``,
``secureboost``): what both sides must compute identically -- the batch schedule
(:mod:`unifl.app.batching`), a client's local SGD and the LR residual (:mod:`unifl.app.model`), the
feature bins (:mod:`unifl.app.binning`) -- lives in modules both import.

- :func:`vertical_reference`: mini-batch gradient descent on the joined features with the
  federated residual (same seed, batches, Taylor approximation, update and stopping rules).
- :func:`horizontal_reference`: FedAvg over the clients' local SGD.
- :func:`secureboost_reference`: gradient boosting with second-order (XGBoost) gains on the binned
  features of both parties, written from the algorithm's description, independently of
  :mod:`unifl.app.secureboost`, and in exact rational arithmetic, so a federated tree that differs
  from it points at the federated code, not at rounding in the reference.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

from .batching import batches, check_schedule, vertical_min_rows
from .model import local_sgd, residual
from .params import BoostParams

__all__ = ["vertical_reference", "horizontal_reference", "secureboost_reference",
           "predict_reference_tree", "batches", "check_schedule", "vertical_min_rows", "residual",
           "local_sgd"]


# ---------------------------------------------------------------- vertical LR / LinR
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
        w = np.sum([len(y) * wk for (_, y), wk in zip(clients, local)], axis=0) / total
    return w


# ---------------------------------------------------------------- hetero SecureBoost
# Written from the algorithm (Chen & Guestrin's second-order boosting with histogram splits, as
# SecureBoost runs it on binary labels), not from unifl.app.secureboost: a federated run equal to
# this one is evidence that the protocol computes the algorithm, not that the code equals itself.
#
# Per tree, with scores F (initially the log-odds of the label mean):
#   p = σ(F),  g = p − y,  h = p(1 − p),  quantised ĝ = round(g·2^s), ĥ = round(h·2^s)
#   (halves to even; s = scale_bits: the integers the federated guest encrypts);
#   a node with rows I, G = Σ_I ĝ / 2^s, H = Σ_I ĥ / 2^s, splits at (party, feature f, bin b)
#   into L = {i : bin_f(i) <= b} and R = I \ L, for b in 0 .. num_bins − 2, with
#       gain = G_L²/(H_L + λ) + G_R²/(H_R + λ) − G²/(H + λ),
#   allowed when H_L >= min_child_weight and H_R >= min_child_weight; the node splits at the
#   largest gain when it has >= 2 rows, lies above max_depth and the gain exceeds gamma.  Among
#   equal gains the first wins in the order: guest features before host features, then feature
#   index, then bin.  A leaf holds w = −G/(H + λ), and F += learning_rate · w of each row's leaf.
# Gains are compared exactly (rationals): equal gains are equal, not equal up to rounding.


def _sigmoid(z: np.ndarray) -> np.ndarray:
    """σ(z) = 1/(1 + e^−z), evaluated without overflow on either side."""
    e = np.exp(-np.abs(z))
    return np.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _quantised(v: np.ndarray, scale_bits: int) -> np.ndarray:
    """round(v·2^s) to int64, halves to even (v·2^s is exact in float64)."""
    return np.rint(v * float(2 ** scale_bits)).astype(np.int64)


class _ExactGain:
    """The split arithmetic of one job in units of the quantised sums: with G = Ĝ/2^s and
    H = Ĥ/2^s, G²/(H + λ) = Ĝ² / (2^s·(Ĥ + λ·2^s)) and −G/(H + λ) = −Ĝ/(Ĥ + λ·2^s)."""

    def __init__(self, p: BoostParams) -> None:
        self.one = 1 << p.scale_bits
        self.lam = Fraction(p.reg_lambda) * self.one        # λ·2^s, exact (λ is a float)
        self.min_h = Fraction(p.min_child_weight) * self.one
        self.gamma = Fraction(p.gamma)

    def score(self, g: int, h: int) -> Fraction | None:
        """G²/(H + λ), or None where H + λ = 0 (no finite score)."""
        den = h + self.lam
        if den == 0:
            return None
        return Fraction(g * g) / (self.one * den)

    def weight(self, g: int, h: int) -> float:
        """The leaf weight −G/(H + λ), rounded once to float64 (nan where H + λ = 0)."""
        den = h + self.lam
        return float(Fraction(-g) / den) if den != 0 else float("nan")


def _node_histograms(bins: np.ndarray, rows: np.ndarray, gq: np.ndarray, hq: np.ndarray,
                     num_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Integer sums of ĝ and ĥ per (feature, bin) over ``rows``: two arrays (F, num_bins)."""
    f_count = bins.shape[1]
    cell = (np.arange(f_count) * num_bins)[None, :] + bins[rows].astype(np.int64)
    g = np.zeros(f_count * num_bins, np.int64)
    h = np.zeros(f_count * num_bins, np.int64)
    np.add.at(g, cell.ravel(), np.repeat(gq[rows], f_count))
    np.add.at(h, cell.ravel(), np.repeat(hq[rows], f_count))
    return g.reshape(f_count, num_bins), h.reshape(f_count, num_bins)


def _best_split(parties: list[tuple[str, np.ndarray]], rows: np.ndarray, gq: np.ndarray,
                hq: np.ndarray, p: BoostParams, ex: _ExactGain
                ) -> tuple[Fraction, str, int, int] | None:
    """The first largest-gain split of a node over both parties' features, or None."""
    g_tot, h_tot = int(gq[rows].sum()), int(hq[rows].sum())
    parent = ex.score(g_tot, h_tot)
    if parent is None:
        return None
    best: tuple[Fraction, str, int, int] | None = None
    for party, bins in parties:
        g_hist, h_hist = _node_histograms(bins, rows, gq, hq, p.num_bins)
        for f in range(bins.shape[1]):
            gl = hl = 0
            previous: tuple[int, int] | None = None
            for b in range(p.num_bins - 1):
                gl += int(g_hist[f, b])
                hl += int(h_hist[f, b])
                if (gl, hl) == previous:     # an empty bin: the same split as bin b − 1
                    continue
                previous = (gl, hl)
                gr, hr = g_tot - gl, h_tot - hl
                if hl < ex.min_h or hr < ex.min_h:
                    continue
                left, right = ex.score(gl, hl), ex.score(gr, hr)
                if left is None or right is None:
                    continue
                gain = left + right - parent
                if best is None or gain > best[0]:
                    best = (gain, party, f, b)
    return best


def _grow_reference_tree(parties: list[tuple[str, np.ndarray]], rows: np.ndarray, depth: int,
                         gq: np.ndarray, hq: np.ndarray, p: BoostParams,
                         ex: _ExactGain) -> dict[str, Any]:
    """The (sub)tree of the node holding ``rows`` at ``depth``, grown depth first."""
    if depth < p.max_depth and len(rows) >= 2:
        best = _best_split(parties, rows, gq, hq, p, ex)
        if best is not None and best[0] > ex.gamma:
            _, party, f, b = best
            bins = dict(parties)[party]
            goes_left = bins[rows, f] <= b
            return {"leaf": False, "owner": party, "feature": f, "bin": b,
                    "left": _grow_reference_tree(parties, rows[goes_left], depth + 1, gq, hq, p,
                                                 ex),
                    "right": _grow_reference_tree(parties, rows[~goes_left], depth + 1, gq, hq,
                                                  p, ex)}
    return {"leaf": True, "weight": ex.weight(int(gq[rows].sum()), int(hq[rows].sum()))}


def predict_reference_tree(tree: dict[str, Any], bins: dict[str, np.ndarray]) -> np.ndarray:
    """Leaf weight of every row of ``bins`` ({"guest": (N, F_g), "host": (N, F_h)} bin indices)."""
    n = len(bins["guest"])
    out = np.empty(n)

    def walk(node: dict[str, Any], rows: np.ndarray) -> None:
        if node["leaf"]:
            out[rows] = node["weight"]
            return
        goes_left = bins[node["owner"]][rows, node["feature"]] <= node["bin"]
        walk(node["left"], rows[goes_left])
        walk(node["right"], rows[~goes_left])

    walk(tree, np.arange(n))
    return out


def secureboost_reference(y: np.ndarray, guest_bins: np.ndarray, host_bins: np.ndarray,
                          p: BoostParams, guest_bins_test: np.ndarray | None = None,
                          host_bins_test: np.ndarray | None = None) -> dict[str, Any]:
    """Gradient boosting of ``p.n_trees`` trees on the parties' binned features (see the comment
    above for the algorithm), in clear.

    Args:
        y: the 0/1 labels of the training rows.
        guest_bins, host_bins: bin indices (rows × features) of the two parties' training rows.
        guest_bins_test, host_bins_test: the held-out rows, to score (optional, both or neither).

    Returns:
        ``trees`` (nested dicts: ``{"leaf": True, "weight"}`` or ``{"leaf": False, "owner",
        "feature", "bin", "left", "right"}``), ``base_score``, ``train_score`` (F of the training
        rows) and, given test bins, ``test_score``.
    """
    y = np.asarray(y, dtype=np.float64)
    parties = [("guest", np.asarray(guest_bins)), ("host", np.asarray(host_bins))]
    mean = min(max(float(y.mean()), 1e-6), 1.0 - 1e-6)
    base = float(np.log(mean / (1.0 - mean)))
    ex = _ExactGain(p)
    score = np.full(len(y), base)
    trees = []
    for _ in range(p.n_trees):
        prob = _sigmoid(score)
        gq, hq = _quantised(prob - y, p.scale_bits), _quantised(prob * (1.0 - prob), p.scale_bits)
        tree = _grow_reference_tree(parties, np.arange(len(y)), 0, gq, hq, p, ex)
        score = score + p.learning_rate * predict_reference_tree(tree, dict(parties))
        trees.append(tree)
    out: dict[str, Any] = {"trees": trees, "base_score": base, "train_score": score}
    if guest_bins_test is not None and host_bins_test is not None:
        test = {"guest": np.asarray(guest_bins_test), "host": np.asarray(host_bins_test)}
        out["test_score"] = base + sum(p.learning_rate * predict_reference_tree(t, test)
                                       for t in trees)
    return out

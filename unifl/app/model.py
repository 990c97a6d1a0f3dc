"""Plaintext model arithmetic that a federated trainer and its plaintext reference both run as the
same step: a horizontal client's local training, and the residual of vertical LR / LinR.

Keeping one copy here is what lets :mod:`unifl.app.reference` compare a federated run with the
plaintext algorithm without importing any federated module.
"""

from __future__ import annotations

import numpy as np

from .batching import batches
from .metrics import sigmoid


def residual(task: str, z: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d with gradient Xᵀd / |B| of the batch loss.

    LR ("lr"): the Taylor expansion of the log loss at 0, with y ∈ {0, 1} mapped to y± = 2y − 1:
    d = 0.25·z − 0.5·y±.  LinR ("linr", squared loss / 2): d = z − y.
    """
    if task == "lr":
        return 0.25 * z - 0.5 * (2.0 * y - 1.0)
    return z - y


def local_sgd(X: np.ndarray, y: np.ndarray, w: np.ndarray, *, local_epochs: int, batch_size: int,
              learning_rate: float, l2: float, seed: int, round_: int, client: int) -> np.ndarray:
    """One horizontal client's local training of a FedAvg round: mini-batch SGD on the exact
    logistic loss, w ← w − lr·(X_Bᵀ(σ(X_B w) − y_B)/|B| + l2·w), from the global ``w``.

    Batches are seeded by (seed·1000 + client, round·100 + local epoch): different per client and
    round, the same in the federated run and the reference.
    """
    w = w.copy()
    for e in range(local_epochs):
        for b in batches(len(y), batch_size, seed * 1000 + client, round_ * 100 + e):
            p = sigmoid(X[b] @ w)
            w = w - learning_rate * (X[b].T @ (p - y[b]) / len(b) + l2 * w)
    return w

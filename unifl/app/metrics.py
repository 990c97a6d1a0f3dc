"""Evaluation metrics (plain NumPy): ROC AUC with ties, R²."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def roc_auc(y_true: npt.ArrayLike, score: npt.ArrayLike) -> float:
    """Area under the ROC curve = P(score of a positive > score of a negative), ties counting 1/2
    (the Mann-Whitney U statistic with average ranks)."""
    y = np.asarray(y_true).astype(bool)
    s = np.asarray(score, dtype=np.float64)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        return float("nan")
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), np.float64)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average ranks over runs of equal scores
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def r2_score(y_true: npt.ArrayLike, y_pred: npt.ArrayLike) -> float:
    """1 − SS_res/SS_tot."""
    y = np.asarray(y_true, dtype=np.float64)
    p = np.asarray(y_pred, dtype=np.float64)
    ss_tot = float(((y - y.mean()) ** 2).sum())
    return float(1.0 - ((y - p) ** 2).sum() / ss_tot) if ss_tot > 0 else float("nan")


def sigmoid(z: npt.ArrayLike) -> np.ndarray:
    z = np.asarray(z, dtype=np.float64)
    return np.where(z >= 0, 1.0 / (1.0 + np.exp(-np.abs(z))), np.exp(-np.abs(z)) / (1.0 + np.exp(-np.abs(z))))

"""Feature binning for the histogram-based trees (SecureBoost and its plaintext reference): each
party cuts its own features at train-split quantiles, and both implementations read the same bins.

bin(x) = #{edges e : e < x}, so "bin <= b" means "x <= edges[b]": a split at bin b sends left
exactly the rows whose value is at most the b-th edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .data import PartyData, load_party, subsample_ids, train_test_split


def quantile_edges(X: np.ndarray, num_bins: int) -> list[np.ndarray]:
    """Per feature: the distinct train quantiles at 1/B, ..., (B−1)/B (B = ``num_bins``), so at
    most B − 1 edges and B bins."""
    qs = np.linspace(0.0, 1.0, num_bins + 1)[1:-1]
    return [np.unique(np.quantile(X[:, f], qs)) for f in range(X.shape[1])]


def apply_bins(X: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """bin(x) = number of edges strictly below x, per feature (int32, in [0, len(edges)])."""
    out = np.empty(X.shape, np.int32)
    for f, e in enumerate(edges):
        out[:, f] = np.searchsorted(e, X[:, f], side="left")
    return out


@dataclass
class BinnedParty:
    """One party's rows of a tree job: bins of the train and test split (edges fitted on train),
    and the labels where the party has them."""

    train: np.ndarray
    test: np.ndarray
    edges: list[np.ndarray]
    y_train: np.ndarray | None
    y_test: np.ndarray | None
    source: str


def binned_party(dataset: str, role: str, ids: list[str], *, seed: int, num_bins: int,
                 test_fraction: float, max_rows: int | None,
                 data_dir: str | None = None, data: PartyData | None = None) -> BinnedParty:
    """Rows ``ids`` of this party's file (canonical order), subsampled to ``max_rows`` by ``seed``,
    split train/test by ``seed``, binned by train quantiles: what both parties of a tree job and
    the plaintext reference compute from the same job.  ``data``: the file, when the caller has
    read it already."""
    if data is None:
        data = load_party(dataset, role, data_dir)
    data = data.select(subsample_ids(ids, max_rows, seed))
    tr, te = train_test_split(len(data.ids), seed, test_fraction)
    edges = quantile_edges(data.X[tr], num_bins)
    return BinnedParty(apply_bins(data.X[tr], edges), apply_bins(data.X[te], edges), edges,
                       None if data.y is None else data.y[tr],
                       None if data.y is None else data.y[te], data.source)

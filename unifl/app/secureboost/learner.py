"""The guest's gradient-boosting learner, independent of where the host's histograms come from.

For each tree: p = σ(F), g = p − y, h = p(1 − p), quantised (:mod:`.packing`); level by level the
histograms of both parties' binned features (the host's through a :class:`HostSide`, the smaller
child of each split only: the sibling is parent − child), the XGBoost gain
G_L²/(H_L+λ) + G_R²/(H_R+λ) − G²/(H+λ) with H_L, H_R >= min_child_weight and gain > gamma (first
maximum in the order guest features, host features, bins: deterministic); leaves get
w = −G/(H + λ) and F += learning_rate · w.  A host split is known to the guest only as (host,
feature id, bin id) and a record id; the host answers which rows of the node go left.
"""

from __future__ import annotations

from typing import Callable, Protocol

import numpy as np

from ...core.errors import ProtocolViolation
from ..metrics import sigmoid
from ..params import BoostParams
from ..timing import Timings
from .packing import quantise

__all__ = ["plain_histograms", "best_split", "HostSide", "grow_tree", "predict_tree",
           "base_score", "boost"]


def plain_histograms(bins: np.ndarray, node_local: np.ndarray, gi: np.ndarray, hi: np.ndarray,
                     n_active: int, num_bins: int) -> np.ndarray:
    """Exact integer sums, shape (F, 2, A, B): [:, 0] gradients, [:, 1] hessians, for rows with
    node_local >= 0."""
    rows = np.nonzero(node_local >= 0)[0]
    f_count = bins.shape[1]
    out = np.zeros((f_count, 2, n_active, num_bins), np.int64)
    if len(rows):
        # flat index of cell (feature, 0 or 1, node, bin) in the C-ordered ``out``
        cell = (np.arange(f_count)[None, :] * 2 * n_active + node_local[rows, None]) * num_bins \
            + bins[rows]
        flat = out.reshape(-1)                    # a view: ``out`` is contiguous
        np.add.at(flat, cell.ravel(), np.repeat(gi[rows], f_count))
        np.add.at(flat, (cell + n_active * num_bins).ravel(), np.repeat(hi[rows], f_count))
    return out


# ------------------------------------------------------------------ split finding (guest)
def best_split(hist: np.ndarray, g_tot: int, h_tot: int, p: BoostParams) -> tuple[float, int, int]:
    """(gain, feature, bin) maximising the gain over hist (F, 2, B) of one node; gain −inf if none."""
    scale = float(1 << p.scale_bits)
    gl = np.cumsum(hist[:, 0, :-1], axis=1) / scale
    hl = np.cumsum(hist[:, 1, :-1], axis=1) / scale
    gt, ht = g_tot / scale, h_tot / scale
    gr, hr = gt - gl, ht - hl
    lam = p.reg_lambda
    with np.errstate(divide="ignore", invalid="ignore"):
        gain = gl ** 2 / (hl + lam) + gr ** 2 / (hr + lam) - gt ** 2 / (ht + lam)
    ok = (hl >= p.min_child_weight) & (hr >= p.min_child_weight) & np.isfinite(gain)
    gain = np.where(ok, gain, -np.inf)
    if gain.size == 0:
        return -np.inf, -1, -1
    k = int(np.argmax(gain))
    f, b = divmod(k, gain.shape[1])
    return float(gain[f, b]), f, b


class HostSide(Protocol):
    """What the guest's tree builder asks of the host (:class:`_RemoteHost`: over the network,
    histograms encrypted under the guest's key)."""

    def histograms(self, tree: int, depth: int, node_local: np.ndarray, n_active: int,
                   want: list[int]) -> np.ndarray:
        """Integer sums (F, 2, len(want), B) of g and h for the active nodes ``want``."""
    def split(self, tree: int, depth: int, node_local: np.ndarray,
              splits: list[tuple[int, int, int]]) -> tuple[list[int], list[np.ndarray]]:
        """splits: (active-node index, feature, bin); returns record ids and, per split, which rows
        of that node (in row order) go left."""

    def end_tree(self, tree: int) -> None: ...


def grow_tree(tree_no: int, gi: np.ndarray, hi: np.ndarray, guest_bins: np.ndarray,
              host: HostSide, p: BoostParams, t: Timings | None = None) -> tuple[list[dict], np.ndarray]:
    """Grow one tree; returns (nodes, leaf node of every training row).

    Node dicts: {"id", "depth", "leaf": bool, "weight"} for leaves, {"id", "depth", "leaf": False,
    "owner": "guest"|"host", "feature", "bin", "left", "right"} (+ "record" for host splits)."""
    t = t or Timings()
    n = len(gi)
    node_of_row = np.zeros(n, np.int64)
    nodes: dict[int, dict] = {0: {"id": 0, "depth": 0}}
    active = [0]
    next_id = 1
    pairs: list[tuple[int, int, int]] = []        # (parent, left, right) of the last level
    counts: dict[int, int] = {0: n}
    parent_hist: dict[int, np.ndarray] = {}
    for depth in range(p.max_depth + 1):
        if not active:
            break
        if depth == p.max_depth:
            for nid in active:
                nodes[nid]["leaf"] = True
            break
        local = np.full(n, -1, np.int64)
        for i, nid in enumerate(active):
            local[node_of_row == nid] = i
        # histogram subtraction: the host builds the smaller child of each split only; the
        # sibling is parent − child (exact integers)
        index = {nid: i for i, nid in enumerate(active)}
        if depth == 0:
            want = [0]
        else:
            want = [index[left] if counts[left] <= counts[right] else index[right]
                    for _, left, right in pairs]
        built = host.histograms(tree_no, depth, local, len(active), want)
        host_hist = np.zeros((built.shape[0], 2, len(active), p.num_bins), np.int64)
        host_hist[:, :, want, :] = built
        for (parent, left, right), w in zip(pairs, want):
            other = index[right] if w == index[left] else index[left]
            host_hist[:, :, other, :] = parent_hist[parent] - host_hist[:, :, w, :]
        parent_hist = {nid: host_hist[:, :, i, :] for i, nid in enumerate(active)}
        with t.subtask("SBT: split finding (guest)", "plaintext"):
            own_hist = plain_histograms(guest_bins, local, gi, hi, len(active), p.num_bins)
            decisions = []
            for i, nid in enumerate(active):
                rows = local == i
                g_tot, h_tot = int(gi[rows].sum()), int(hi[rows].sum())
                cands = [best_split(own_hist[:, :, i, :], g_tot, h_tot, p),
                         best_split(host_hist[:, :, i, :], g_tot, h_tot, p)]
                side = 0 if cands[0][0] >= cands[1][0] else 1   # guest first on ties
                gain, f, b = cands[side]
                if int(rows.sum()) < 2 or not gain > p.gamma:
                    nodes[nid]["leaf"] = True
                    continue
                decisions.append((nid, "guest" if side == 0 else "host", f, b))
        index = {nid: i for i, nid in enumerate(active)}
        host_splits = [(index[nid], f, b) for nid, o, f, b in decisions if o == "host"]
        records, masks = host.split(tree_no, depth, local, host_splits)
        host_left = {active[i]: (rec, m) for (i, _, _), rec, m in zip(host_splits, records, masks)}
        new_active, new_pairs = [], []
        for nid, owner, f, b in decisions:
            rows = np.nonzero(node_of_row == nid)[0]
            if owner == "guest":
                go_left = guest_bins[rows, f] <= b
            else:
                rec, go_left = host_left[nid]
                go_left = np.asarray(go_left, dtype=bool)
                if go_left.shape != rows.shape:
                    raise ProtocolViolation("host returned a partition of the wrong size")
            left, right = next_id, next_id + 1
            next_id += 2
            node = nodes[nid]
            node.update({"leaf": False, "owner": owner, "feature": int(f), "bin": int(b),
                         "left": left, "right": right})
            if owner == "host":
                node["record"] = int(rec)
            nodes[left] = {"id": left, "depth": depth + 1}
            nodes[right] = {"id": right, "depth": depth + 1}
            node_of_row[rows[go_left]] = left
            node_of_row[rows[~go_left]] = right
            new_active += [left, right]
            new_pairs.append((nid, left, right))
            counts[left], counts[right] = int(go_left.sum()), int((~go_left).sum())
        active, pairs = new_active, new_pairs
    scale = float(1 << p.scale_bits)
    for nid, node in nodes.items():
        if node.get("leaf"):
            rows = node_of_row == nid
            node["weight"] = float(-(gi[rows].sum() / scale) / (hi[rows].sum() / scale
                                                                  + p.reg_lambda))
    return [nodes[k] for k in sorted(nodes)], node_of_row


def predict_tree(nodes: list[dict], guest_bins: np.ndarray, host_left: dict[int, np.ndarray]
                 ) -> np.ndarray:
    """Leaf weight of every row (host splits answered by ``host_left[record]``)."""
    by_id = {nd["id"]: nd for nd in nodes}
    n = guest_bins.shape[0]
    at = np.zeros(n, np.int64)
    out = np.zeros(n)
    pending = np.arange(n)
    while len(pending):
        nxt = []
        for nid in np.unique(at[pending]):
            rows = pending[at[pending] == nid]
            nd = by_id[int(nid)]
            if nd["leaf"]:
                out[rows] = nd["weight"]
                continue
            if nd["owner"] == "guest":
                left = guest_bins[rows, nd["feature"]] <= nd["bin"]
            else:
                left = host_left[nd["record"]][rows]
            at[rows[left]] = nd["left"]
            at[rows[~left]] = nd["right"]
            nxt.append(rows)
        pending = np.concatenate(nxt) if nxt else np.zeros(0, np.int64)
    return out


def base_score(y: np.ndarray) -> float:
    """log-odds of the train label mean (the initial F)."""
    mean = float(np.clip(y.mean(), 1e-6, 1 - 1e-6))
    return float(np.log(mean / (1 - mean)))


def boost(y: np.ndarray, guest_bins: np.ndarray, host: HostSide, p: BoostParams,
          t: Timings | None = None, on_tree: Callable[[], None] | None = None,
          on_gradients: Callable[[int, np.ndarray, np.ndarray], None] | None = None
          ) -> tuple[list[list[dict]], float, np.ndarray]:
    """The guest's boosting loop over a :class:`HostSide`; returns the trees, the base score and
    the final scores F of the training rows.  ``on_gradients(tree, ĝ, ĥ)`` is told each tree's
    quantised gradients before the tree is grown (the remote host encrypts them per level)."""
    t = t or Timings()
    f0 = base_score(y)
    F = np.full(len(y), f0)
    trees = []
    for k in range(p.n_trees):
        prob = sigmoid(F)
        gi, hi = quantise(prob - y, p.scale_bits), quantise(prob * (1 - prob), p.scale_bits)
        if on_gradients is not None:
            on_gradients(k, gi, hi)
        nodes, leaf_of_row = grow_tree(k, gi, hi, guest_bins, host, p, t)
        host.end_tree(k)
        weights = {nd["id"]: nd["weight"] for nd in nodes if nd["leaf"]}
        F = F + p.learning_rate * np.array([weights[int(i)] for i in leaf_of_row])
        trees.append(nodes)
        if on_tree:
            on_tree()
    return trees, f0, F

"""Two-party hetero SecureBoost (Cheng et al. 2019; FLASH O6 histograms) for binary labels.

The guest holds labels y and features X_g, the host features X_h of the same aligned rows.  Both
bin their own features by train-split quantiles (``num_bins`` bins; bin(x) = #{edges < x}, so
"bin <= b" means "x <= edges[b]").  For each tree:

1. guest: p = σ(F), g = p − y, h = p(1 − p), quantised to integers ĝ = round(g·2^s),
   ĥ = round(h·2^s) with s = ``scale_bits`` (default 24; the host announces its own at job start
   and the guest refuses another), so every histogram sum is an exact integer.
2. level by level, guest -> host: the node of every training row (−1 when settled) and which
   nodes' histograms it wants (the smaller child of each split; the guest gets the sibling as
   parent − child).  Then the guest streams [[ĝ + 2^64·ĥ]] under its key (O1), freshly encrypted,
   for exactly the rows of the wanted nodes in row order, in chunks of ``chunk_rows``
   (:mod:`unifl.app.chunks`: chunk k, its row range, the ciphertexts; then an end marker).  The
   host folds each chunk into the level's encrypted per-(node, feature, bin) sums at once -- one
   grouped product (O6) per chunk, combined with the running sums by homomorphic addition (O3),
   the same integers as one call over all the rows -- so neither party ever holds the
   ciphertexts of more than one chunk.  It then packs K cells into one ciphertext by Horner's
   rule (:func:`compress_cells`; K = 10 at 1024 bits, 20 at 2048), re-randomises the packed
   ciphertexts (the guest knows each [[ĝ]]'s randomness, so a raw product would reveal which rows
   share a bin) and returns them.  Re-encrypting per level costs the guest at most
   n·(1 + (max_depth − 1)/2) encryptions per tree (the wanted children hold at most half of the
   active rows), against n for keeping a tree's n ciphertexts, whose memory grows with the rows.
3. guest: decrypts (O2), takes cumulative sums over bins (in clear, equivalent information) and
   finds each node's best split over its own and the host's features by the XGBoost gain
   GL²/(HL+λ) + GR²/(HR+λ) − G²/(H+λ) with HL, HR >= min_child_weight and gain > gamma (first
   maximum in the order guest features, host features, bins: deterministic).  A host split is
   known to the guest only as (host, feature id, bin id); the host keeps the threshold in its
   lookup table (record id -> feature, threshold) and answers which rows of the node go left.
4. leaves get w = −G/(H + λ); F += learning_rate · w.

The plaintext reference (:func:`unifl.app.reference.secureboost_reference`) is the same algorithm
written separately from this description; the tests require identical trees.

As in SecureBoost, the host learns the instance space of each node (which rows share a node), never
a gradient or label.  The host answers only the queries this protocol makes (:class:`HostGuard`):
the levels of trees it expects, histograms of one child per split, one split query per node.  Prediction: the host sends, for each of its records, the rows of the held-out
split that go left; the guest walks the trees and reports the AUC.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import numpy as np

from ..core.backend import Backend
from ..core.errors import ConfigError, KeyMismatchError, ProtocolViolation, WeakKeyError
from ..phe_sdk import EncryptedArray, histogram, paillier
from . import synthetic
from .alignment import check_alignment
from .batching import chunk_bounds
from .binning import apply_bins, binned_party, quantile_edges
from .channel import Channel
from .chunks import recv_chunk, recv_end, send_chunk, send_end
from .data import load_party, sorted_ids
from .metrics import roc_auc, sigmoid
from .params import BoostParams, check_peer_scale, params_of
from .timing import Timings, progress_bar

__all__ = ["BoostParams", "quantise", "pack_gh", "unpack_gh", "cell_bits", "cells_per_ciphertext",
           "compress_cells", "split_cells", "grow_tree", "predict_tree", "boost", "HostGuard",
           "quantile_edges", "apply_bins", "wanted_rows", "run"]

#: the width of ĝ's slot in a packed plaintext ĝ + 2^64·ĥ
PACK_BITS = 64
#: BoostParams' default scale, for the helpers below when called without one
_SCALE = BoostParams.model_fields["scale_bits"].default


# ------------------------------------------------------------------ binning and quantisation
def quantise(v: np.ndarray, scale_bits: int = _SCALE) -> np.ndarray:
    """round(v·2^scale_bits) as int64, halves to even (|v| <= 1 here: gradients and hessians)."""
    return np.rint(np.ldexp(v, scale_bits)).astype(np.int64)


def check_pack_capacity(n_rows: int, scale_bits: int) -> None:
    """Refuse a (rows, scale) pair whose gradient sums could leave ĝ's 64-bit slot: |ĝ| <= 2^s per
    row, so |Σĝ| < 2^(s + bits(n)) must stay below 2^63 for :func:`unpack_gh` to separate Σĝ from
    Σĥ exactly.

    Raises:
        ConfigError: naming the scale, the row count and the largest scale that fits.
    """
    if scale_bits + int(n_rows).bit_length() > PACK_BITS - 1:
        raise ConfigError(f"secureboost: scale_bits = {scale_bits} with {n_rows} training rows "
                          f"lets a gradient sum reach 2^{scale_bits + int(n_rows).bit_length()}, "
                          f"beyond the 2^{PACK_BITS - 1} of its packed slot; use scale_bits <= "
                          f"{PACK_BITS - 1 - int(n_rows).bit_length()}")


def pack_gh(gi: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """One plaintext per row: ĝ + 2^64·ĥ (object array of Python ints).  While
    :func:`check_pack_capacity` holds, |Σĝ| < 2^63, so the two sums separate exactly
    (:func:`unpack_gh`)."""
    out = np.empty(len(gi), dtype=object)
    out[:] = [int(g) + (int(h) << PACK_BITS) for g, h in zip(gi.tolist(), hi.tolist())]
    return out


def unpack_gh(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of the packing for sums: (Σĝ, Σĥ) as int64."""
    half, full = 1 << (PACK_BITS - 1), 1 << PACK_BITS
    g = [((v + half) % full) - half for v in values]
    h = [(v - gv) >> PACK_BITS for v, gv in zip(values, g)]
    return np.array(g, dtype=np.int64), np.array(h, dtype=np.int64)


def cell_bits(n_rows: int, scale_bits: int = _SCALE) -> int:
    """Width of one histogram cell Σ(ĝ + 2^64 ĥ) over at most ``n_rows`` rows, sign included:
    |Σĝ| < n·2^s < 2^63 and Σĥ <= n·2^(s−2)."""
    return PACK_BITS + scale_bits + n_rows.bit_length() + 2


def cells_per_ciphertext(pk: paillier.PublicKey, width: int) -> int:
    """How many ``width``-bit signed cells one plaintext holds (staying below max_int = n/3)."""
    return max(1, (pk.max_int.bit_length() - 2) // width)


def compress_cells(cells: EncryptedArray, width: int, pk: paillier.PublicKey) -> EncryptedArray:
    """Pack K = cells_per_ciphertext cells per ciphertext by Horner's rule on ciphertexts:
    [[c_0 + 2^w c_1 + ... + 2^{(K−1)w} c_{K−1}]] -- K−1 shifts by a w-bit exponent and adds,
    far cheaper than re-randomising and decrypting every cell (FATE's cipher compression)."""
    per = cells_per_ciphertext(pk, width)
    count = cells.size
    groups = -(-count // per)
    pad = groups * per - count
    if pad:  # E(0) fillers: any ciphertext to the power 0
        cells = EncryptedArray.concatenate([cells, cells[:1] * np.zeros(pad, np.int64)])
    grid = cells.reshape(groups, per)
    acc = grid[:, per - 1]
    shift = np.array(1 << width, dtype=object)
    for k in range(per - 2, -1, -1):
        acc = acc * shift + grid[:, k]
    return acc


def split_cells(values: list[int], width: int, per: int) -> list[int]:
    """Inverse of :func:`compress_cells` after decryption: the signed cells, in order."""
    half, full = 1 << (width - 1), 1 << width
    out = []
    for v in values:
        for _ in range(per):
            c = ((v + half) % full) - half
            out.append(c)
            v = (v - c) >> width
    return out


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
            want = [index[l] if counts[l] <= counts[r] else index[r] for _, l, r in pairs]
        built = host.histograms(tree_no, depth, local, len(active), want)
        host_hist = np.zeros((built.shape[0], 2, len(active), p.num_bins), np.int64)
        host_hist[:, :, want, :] = built
        for (parent, l, r), w in zip(pairs, want):
            other = index[r] if w == index[l] else index[l]
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


# ------------------------------------------------------------------ the host's protocol guard
#: The most host features a guest accepts in the host's ``sbt/info`` (it sizes the guest's
#: histogram buffers, F × 2 × nodes × bins); far above any vertical-FL table we run.
MAX_HOST_FEATURES = 1 << 16


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


class HostGuard:
    """The host's own view of the tree the guest is growing, so that it answers only the queries
    the protocol needs and refuses anything else with :class:`~unifl.core.errors.ProtocolViolation`
    (naming the field and the limit) before doing any work for it.

    The host cannot see the guest's own splits, but it knows the structure they must have: per
    tree, levels come at depth 0, 1, ... < ``max_depth`` (its own params); the root holds every
    training row; at each later level the active nodes come in (left, right) pairs, each pair
    being *all* the rows of one node of the previous level (parents in order, each with >= 2
    rows), settled rows stay settled, and a node the host split itself must be partitioned
    exactly as the host answered.  Per level the guest gets one histogram per pair (of the smaller
    child, as :func:`grow_tree` picks it; the root's at depth 0) and at most one split query per
    active node (>= 2 rows), with a feature < the host's feature count and a bin < num_bins − 1
    (a split at the last bin sends every row left), each node at most once.  Without these
    bounds a guest could put every row in a node of its own, or ask every (feature, bin) at the
    root, and read the host's whole binned matrix.
    """

    LEVEL_FIELDS = frozenset({"tree", "depth", "active", "nodes", "want"})

    def __init__(self, n_rows: int, n_features: int, p: BoostParams) -> None:
        self.n, self.fh, self.p = n_rows, n_features, p
        self.tree = -1

    def start_tree(self, tree: int) -> None:
        self.tree = tree
        self.depth = 0                      # the depth of the next level the guest may ask
        self.local: np.ndarray | None = None   # this level's node of every row (−1: settled)
        self.n_active = 0
        self.asked_splits = False
        self.host_left: dict[int, np.ndarray] = {}   # last level: node -> rows going left

    def check_level(self, level: object) -> tuple[int, np.ndarray, int, np.ndarray]:
        """(depth, node of every row, number of active nodes, wanted nodes) of a level request,
        after checking it against the host's own state."""
        if not isinstance(level, dict) or set(level) != self.LEVEL_FIELDS:
            got = sorted(level) if isinstance(level, dict) else type(level).__name__
            raise ProtocolViolation(f"SBT host: a level request must have the fields "
                                    f"{sorted(self.LEVEL_FIELDS)}, got {got}")
        tree, depth, n_active = level["tree"], level["depth"], level["active"]
        if not _is_int(tree) or int(tree) != self.tree:
            raise ProtocolViolation(f"SBT host: level request for tree {tree!r}; the host is on "
                                    f"tree {self.tree} of n_trees = {self.p.n_trees}")
        if not _is_int(depth) or int(depth) != self.depth:
            raise ProtocolViolation(f"SBT host: level request at depth {depth!r}; the next level "
                                    f"of tree {self.tree} is depth {self.depth}")
        if self.depth >= self.p.max_depth:
            raise ProtocolViolation(f"SBT host: depth {self.depth} is not below max_depth = "
                                    f"{self.p.max_depth}")
        if self.depth and not self.asked_splits:
            raise ProtocolViolation("SBT host: a new level before the split request of the last")
        limit = 1 if self.depth == 0 else 2 * self.n_active
        if not _is_int(n_active) or not 1 <= int(n_active) <= limit:
            raise ProtocolViolation(f"SBT host: 'active' = {n_active!r} at depth {self.depth}; "
                                    f"it must lie in [1, {limit}]")
        n_active = int(n_active)
        nodes, want = level["nodes"], level["want"]
        for name, arr in (("nodes", nodes), ("want", want)):
            if not isinstance(arr, np.ndarray) or arr.dtype.kind not in "iu" or arr.ndim != 1:
                raise ProtocolViolation(f"SBT host: '{name}' must be a 1-d integer array")
        if nodes.shape != (self.n,):
            raise ProtocolViolation(f"SBT host: 'nodes' has shape {nodes.shape}; the host has "
                                    f"{self.n} training rows")
        local = nodes.astype(np.int64)
        if local.size and (local.min() < -1 or local.max() >= n_active):
            raise ProtocolViolation(f"SBT host: 'nodes' holds a node outside [-1, {n_active})")
        want = want.astype(np.int64)
        counts = np.bincount(local[local >= 0], minlength=n_active)
        if self.depth == 0:
            if not (local == 0).all():
                raise ProtocolViolation("SBT host: at depth 0 every training row is in the root")
            expect = np.zeros(1, np.int64)
        else:
            expect = self._check_children(local, n_active, counts)
        if want.shape != expect.shape or (want != expect).any():
            raise ProtocolViolation(f"SBT host: 'want' must name one node per pair of children "
                                    f"(the smaller, {len(expect)} in all), got {want.size} "
                                    "entries that differ")
        self.local, self.n_active, self.counts = local, n_active, counts
        self.host_left = {}
        self.asked_splits = False
        self.depth += 1
        return self.depth - 1, local, n_active, want

    def _check_children(self, local: np.ndarray, n_active: int, counts: np.ndarray
                        ) -> np.ndarray:
        """Check the pairs of this level against the previous level; the wanted nodes."""
        prev = self.local
        if prev is None:      # check_level asks for children only after a level was seen
            raise ProtocolViolation("SBT host: children before any level")
        if n_active % 2:
            raise ProtocolViolation(f"SBT host: {n_active} active nodes at depth {self.depth}; "
                                    "children come in pairs")
        if ((prev < 0) & (local >= 0)).any():
            raise ProtocolViolation("SBT host: 'nodes' puts a settled row back into a node")
        pair = np.where(local >= 0, local // 2, -1)
        prev_counts = np.bincount(prev[prev >= 0], minlength=self.n_active)
        parents: list[int] = []
        for j in range(n_active // 2):
            in_pair = pair == j
            found = np.unique(prev[in_pair])
            if found.size != 1 or found[0] < 0 or \
                    int(in_pair.sum()) != int(prev_counts[found[0]]) or prev_counts[found[0]] < 2:
                raise ProtocolViolation(f"SBT host: the children {2 * j}, {2 * j + 1} at depth "
                                        f"{self.depth} are not all the rows of one node (of >= 2 "
                                        "rows) of the last level")
            parent = int(found[0])
            if parents and parent <= parents[-1]:
                raise ProtocolViolation(f"SBT host: the children of node {parent} come out of "
                                        "order or twice")
            parents.append(parent)
            left = self.host_left.get(parent)
            if left is not None and not np.array_equal(local == 2 * j, in_pair & left):
                raise ProtocolViolation(f"SBT host: node {parent} was split by the host, but its "
                                        "children are not the host's partition")
        missing = set(self.host_left) - set(parents)
        if missing:
            raise ProtocolViolation(f"SBT host: node(s) {sorted(missing)} were split by the host "
                                    "but have no children")
        left_c, right_c = counts[0::2], counts[1::2]
        return np.where(left_c <= right_c, np.arange(0, n_active, 2), np.arange(1, n_active, 2))

    def check_splits(self, splits: object) -> list[tuple[int, int, int]]:
        """The split request of the current level as (node, feature, bin), all checked first."""
        if self.local is None or self.asked_splits:
            raise ProtocolViolation("SBT host: a split request without a level request before it")
        if not isinstance(splits, (list, tuple)):
            raise ProtocolViolation(f"SBT host: 'splits' must be a list, got "
                                    f"{type(splits).__name__}")
        if len(splits) > self.n_active:
            raise ProtocolViolation(f"SBT host: {len(splits)} split queries at depth "
                                    f"{self.depth - 1}; at most one per active node "
                                    f"({self.n_active})")
        out, seen = [], set()
        last_bin = self.p.num_bins - 1
        for s in splits:
            if not isinstance(s, (list, tuple)) or len(s) != 3 or not all(map(_is_int, s)):
                raise ProtocolViolation("SBT host: a split query must be [node, feature, bin] "
                                        "(integers)")
            i, f, b = (int(v) for v in s)
            if not 0 <= i < self.n_active:
                raise ProtocolViolation(f"SBT host: split node {i} is not an active node "
                                        f"(0 <= node < {self.n_active})")
            if i in seen:
                raise ProtocolViolation(f"SBT host: node {i} asked twice at depth {self.depth - 1}")
            if self.counts[i] < 2:
                raise ProtocolViolation(f"SBT host: node {i} has {self.counts[i]} row(s); only a "
                                        "node of >= 2 rows is split")
            if not 0 <= f < self.fh:
                raise ProtocolViolation(f"SBT host: split feature {f} outside [0, {self.fh})")
            if not 0 <= b < last_bin:
                raise ProtocolViolation(f"SBT host: split bin {b} outside [0, {last_bin}) "
                                        f"(num_bins = {self.p.num_bins})")
            seen.add(i)
            out.append((i, f, b))
        self.asked_splits = True
        return out

    def answered(self, node: int, left: np.ndarray) -> None:
        """Remember the host's answer (rows of ``node`` going left, as a mask over all rows)."""
        self.host_left[node] = left


# ------------------------------------------------------------------ the two parties
class _RemoteHost:
    """HostSide over the channel, with the guest's private key for the histograms."""

    def __init__(self, channel: Channel, sk: paillier.PrivateKey, t: Timings, p: BoostParams,
                 n_host_features: int, n_rows: int, backend: Backend | None = None) -> None:
        self.channel, self.sk, self.t, self.p, self.fh = channel, sk, t, p, n_host_features
        self.n = n_rows
        self.backend = backend
        self.records: set[int] = set()   # the host's record ids this guest was given
        #: this tree's quantised (ĝ, ĥ) of every row, set before the tree is grown: what the
        #: decrypted histograms must add up to, node by node
        self.gh: tuple[np.ndarray, np.ndarray] | None = None
        #: this tree's [[ĝ + 2^64 ĥ]] of every row, kept for its later levels when they fit in
        #: ``gh_cache_mb`` (see BoostParams); None before the tree's first level or when they do not
        self.gh_enc: EncryptedArray | None = None
        ct_bytes = sk.public_key.nsquare_ctx.num_limbs * 8
        self.keep_gh = n_rows * ct_bytes <= p.gh_cache_mb * 2**20
        self.encrypted_rows = 0          # rows encrypted so far (all trees): what keeping saves

    def set_gradients(self, gi: np.ndarray, hi: np.ndarray) -> None:
        """A new tree's (ĝ, ĥ): its ciphertexts are made at its first level."""
        self.gh = (gi, hi)
        self.gh_enc = None

    def histograms(self, tree: int, depth: int, node_local: np.ndarray, n_active: int,
                   want: list[int]) -> np.ndarray:
        tag = f"sbt/t{tree}/d{depth}"
        self.channel.send("host", f"sbt/t{tree}/level", {
            "tree": tree, "depth": depth, "active": n_active, "nodes": node_local.astype(np.int32),
            "want": np.asarray(want, np.int32)})
        self._stream_gh(f"{tag}/gh", wanted_rows(node_local, n_active, want))
        enc = self.channel.recv("host", f"{tag}/hist")
        pk = self.sk.public_key
        cells = self.fh * len(want) * self.p.num_bins
        width = cell_bits(self.n, self.p.scale_bits)
        per = cells_per_ciphertext(pk, width)
        if not isinstance(enc, EncryptedArray) or enc.public_key != pk or \
                enc.shape != (-(-cells // per),) or enc.scale_bits != 0:
            raise ProtocolViolation("host histograms have the wrong key, shape or scale")
        with self.t.subtask("SBT: decrypt histograms", "O2 dec"):
            with self.t.crypto():
                vals = enc.decrypt(self.sk)
        shape = (self.fh, len(want), self.p.num_bins)
        g, h = self._checked_cells(vals.tolist(), width, per, cells, node_local, want, shape)
        return np.stack([g.reshape(shape), h.reshape(shape)], axis=1)   # (F, 2, W, B)

    def _stream_gh(self, tag: str, rows: np.ndarray) -> None:
        """[[ĝ + 2^64 ĥ]] of ``rows`` (the wanted nodes' rows, in row order) to the host, chunk by
        chunk: taken from the tree's kept ciphertexts when they fit in ``gh_cache_mb``, else
        freshly encrypted, so that only one chunk's ciphertexts exist at a time."""
        if self.gh is None:
            raise RuntimeError("secureboost guest: a level before the tree's gradients are set "
                               "(boost() sets them through on_gradients)")
        if self.keep_gh and self.gh_enc is None:
            everything = np.arange(self.n)
            self.gh_enc = EncryptedArray.concatenate(
                [self._encrypt(everything[lo:up])
                 for lo, up in chunk_bounds(self.n, self.p.chunk_rows)])
        bounds = chunk_bounds(len(rows), self.p.chunk_rows)
        for k, (lo, up) in enumerate(bounds):
            part = rows[lo:up]
            enc = self.gh_enc[part] if self.gh_enc is not None else self._encrypt(part)
            send_chunk(self.channel, "host", tag, k, (lo, up), enc)
        send_end(self.channel, "host", tag, len(bounds))

    def _encrypt(self, rows: np.ndarray) -> EncryptedArray:
        """[[ĝ + 2^64 ĥ]] of ``rows``, by the key owner (CRT)."""
        gi, hi = self.gh if self.gh is not None else (np.empty(0), np.empty(0))
        with self.t.subtask("SBT: encrypt g, h", "O1 enc"):
            with self.t.crypto():
                enc = EncryptedArray.encrypt(self.sk.public_key, pack_gh(gi[rows], hi[rows]),
                                             backend=self.backend, private_key=self.sk)
        self.encrypted_rows += len(rows)
        return enc

    def _checked_cells(self, vals: list[int], width: int, per: int, cells: int,
                       node_local: np.ndarray, want: list[int], shape: tuple[int, int, int]
                       ) -> tuple[np.ndarray, np.ndarray]:
        """(Σĝ, Σĥ) of every histogram cell, after checking that the decryption is what honest
        histograms of this guest's own [[ĝ + 2^64 ĥ]] decrypt to: each plaintext exactly ``per``
        packed cells, the padding zero, every Σĥ >= 0, and for every host feature the bins of a
        node adding up to that node's own (Σĝ, Σĥ).  Otherwise a host could return the guest's
        ciphertexts themselves (or any combination of them) in place of histograms, and read the
        gradients, i.e. the labels, back from the guest's split decisions."""
        flat = split_cells(vals, width, per)
        for k, v in enumerate(vals):
            packed = 0
            for c in reversed(flat[k * per:(k + 1) * per]):
                packed = (packed << width) + c
            if packed != v:
                raise ProtocolViolation("host histograms: a plaintext holds more than the packed "
                                        "cells (not a histogram of this guest's gradients)")
        if any(flat[cells:]):
            raise ProtocolViolation("host histograms: padding cells are not zero")
        g, h = unpack_gh(flat[:cells])
        g, h = g.reshape(shape), h.reshape(shape)
        if (h < 0).any():
            raise ProtocolViolation("host histograms: a hessian sum is negative")
        if self.gh is not None:
            gi, hi = self.gh
            for j, node in enumerate(want):
                rows = node_local == node
                g_tot, h_tot = int(gi[rows].sum()), int(hi[rows].sum())
                if (g[:, j, :].sum(axis=1) != g_tot).any() or \
                        (h[:, j, :].sum(axis=1) != h_tot).any():
                    raise ProtocolViolation(f"host histograms: the bins of node {int(node)} do "
                                            "not add up to that node's gradient and hessian sums "
                                            "for every feature")
        return g, h

    def end_tree(self, tree: int) -> None:
        self.channel.send("host", f"sbt/t{tree}/level", None)

    def split(self, tree: int, depth: int, node_local: np.ndarray,
              splits: list[tuple[int, int, int]]) -> tuple[list[int], list[np.ndarray]]:
        tag = f"sbt/t{tree}/d{depth}"
        self.channel.send("host", f"{tag}/splits", [list(map(int, s)) for s in splits])
        reply = self.channel.recv("host", f"{tag}/left")
        if not isinstance(reply, dict) or set(reply) != {"records", "left"} or \
                not isinstance(reply["records"], list) or not isinstance(reply["left"], list) or \
                len(reply["records"]) != len(splits) or len(reply["left"]) != len(splits):
            raise ProtocolViolation("host answered a different number of splits")
        records = reply["records"]
        if not all(_is_int(r) for r in records) or \
                any(int(r) < 0 or int(r) in self.records for r in records) or \
                len(set(map(int, records))) != len(records):
            raise ProtocolViolation("host split answer: record ids must be new, distinct, >= 0")
        for (i, _f, _b), m in zip(splits, reply["left"]):
            if not isinstance(m, np.ndarray) or m.dtype != np.bool_ or \
                    m.shape != (int((node_local == i).sum()),):
                raise ProtocolViolation("host returned a partition of the wrong size or type")
        self.records.update(int(r) for r in records)
        return [int(r) for r in records], list(reply["left"])


def _prepare(role: str, job: dict[str, Any], p: BoostParams, ids: list[str], data_dir: str | None
             ) -> tuple[np.ndarray, np.ndarray, list[np.ndarray], np.ndarray | None,
                        np.ndarray | None]:
    """(train bins, test bins, edges, train labels, test labels) of this party.  The synthetic
    dataset is materialised here: the bins need each column's train quantiles (the streamed part
    of SecureBoost is its ciphertexts, not its plaintext per-row state)."""
    if job["dataset"] == synthetic.SYNTHETIC:
        src = synthetic.SyntheticParty(synthetic.spec_of(job), role, job["seed"], p.test_fraction)
        X_tr, X_te, y_tr, y_te = src.materialise()
        edges = quantile_edges(X_tr, p.num_bins)
        return apply_bins(X_tr, edges), apply_bins(X_te, edges), edges, y_tr, y_te
    b = binned_party(job["dataset"], role, ids, seed=job["seed"], num_bins=p.num_bins,
                     test_fraction=p.test_fraction, max_rows=p.max_rows, data_dir=data_dir)
    return b.train, b.test, b.edges, b.y_train, b.y_test


def _guest(job: dict[str, Any], p: BoostParams, channel: Channel, be: Backend | None, t: Timings,
           ids: list[str], data_dir: str | None, progress: bool) -> dict:
    bins_tr, bins_te, _, y_tr, y_te = _prepare("guest", job, p, ids, data_dir)
    if y_tr is None or y_te is None or not set(np.unique(y_tr)) <= {0.0, 1.0}:
        raise ConfigError("secureboost needs binary 0/1 labels")
    check_pack_capacity(len(y_tr), p.scale_bits)
    with t.subtask("SBT: Paillier key generation", "keygen"):
        with t.crypto():
            pk, sk = paillier.keygen(job["key_bits"])
    channel.send("host", "sbt/pk", pk)
    info = channel.recv("host", "sbt/info")
    if not isinstance(info, dict) or not _is_int(info.get("rows")) or \
            not _is_int(info.get("features")):
        raise ProtocolViolation("SBT guest: host info must hold integer 'rows' and 'features'")
    if int(info["rows"]) != len(y_tr):
        raise ConfigError("guest and host have different numbers of training rows")
    if not 1 <= int(info["features"]) <= MAX_HOST_FEATURES:
        raise ProtocolViolation(f"SBT guest: host claims {info['features']} features; accepted: "
                                f"1 to {MAX_HOST_FEATURES}")
    # the host sizes its packed histogram cells by its scale: the guest must quantise at the same
    check_peer_scale("guest", "host", p.scale_bits, info.get("scale_bits"))
    # both parties cut every level's rows at the same places
    if info.get("chunk_rows") != p.chunk_rows:
        raise ConfigError(f"guest: host streams chunk_rows {info.get('chunk_rows')!r}, guest "
                          f"{p.chunk_rows}; both parties must run the same")
    remote = _RemoteHost(channel, sk, t, p, int(info["features"]), len(y_tr), be)

    def on_gradients(k: int, gi: np.ndarray, hi: np.ndarray) -> None:
        remote.set_gradients(gi, hi)

    with progress_bar(p.n_trees, "guest secureboost", progress) as advance:
        trees, f0, f_train = boost(y_tr, bins_tr, remote, p, t, on_tree=lambda: advance(1),
                                   on_gradients=on_gradients)
    host_left = channel.recv("host", "sbt/test_left")
    want_keys = {str(r) for r in remote.records}
    if not isinstance(host_left, dict) or set(host_left) != want_keys or \
            any(not isinstance(v, np.ndarray) or v.dtype != np.bool_ or v.shape != (len(y_te),)
                for v in host_left.values()):
        raise ProtocolViolation(f"SBT guest: host test partitions must be one boolean array of "
                                f"{len(y_te)} rows per host record ({len(want_keys)})")
    host_left = {int(k): v for k, v in host_left.items()}
    with t.subtask("SBT: evaluate (guest)", "plaintext"):
        F = f0 + sum(p.learning_rate * predict_tree(nodes, bins_te, host_left) for nodes in trees)
        auc = roc_auc(y_te, sigmoid(F))
    return {"metrics": {"auc": auc, "train_auc": roc_auc(y_tr, sigmoid(f_train)),
                        "trees": len(trees), "train_rows": int(len(y_tr)),
                        "encrypted_rows": remote.encrypted_rows,
                        "test_rows": int(len(y_te))},
            "model": {"base_score": f0, "learning_rate": p.learning_rate, "trees": trees}}


def _host(job: dict[str, Any], p: BoostParams, channel: Channel, be: Backend | None, t: Timings,
          ids: list[str], data_dir: str | None) -> dict:
    bins_tr, bins_te, edges, _, _ = _prepare("host", job, p, ids, data_dir)
    pk = channel.recv("guest", "sbt/pk")
    if not isinstance(pk, paillier.PublicKey):
        raise ProtocolViolation(f"SBT host: guest sent a {type(pk).__name__} where its Paillier "
                                "public key belongs")
    if pk.n.bit_length() < job["key_bits"]:
        raise WeakKeyError(f"SBT host: the guest's Paillier key has {pk.n.bit_length()} bits, "
                           f"below this party's key_bits = {job['key_bits']}")
    n = len(bins_tr)
    check_pack_capacity(n, p.scale_bits)
    channel.send("guest", "sbt/info", {"rows": int(n), "features": bins_tr.shape[1],
                                       "scale_bits": int(p.scale_bits),
                                       "chunk_rows": int(p.chunk_rows)})
    nb = p.num_bins
    guard = HostGuard(n, bins_tr.shape[1], p)
    records: list[tuple[int, float, int]] = []   # lookup table: record id -> (feature, threshold, bin)
    for k in range(p.n_trees):
        guard.start_tree(k)
        while True:
            level = channel.recv("guest", f"sbt/t{k}/level")
            if level is None:   # the tree is complete
                break
            depth, local, n_active, want = guard.check_level(level)
            tag = f"sbt/t{k}/d{depth}"
            hist = _streamed_histograms(channel, pk, f"{tag}/gh", local, n_active, want,
                                        bins_tr, p, t, be)
            with t.subtask("SBT: compress & re-randomise histograms (host)",
                           "O4 mul (shift), O3 add, O1 obfuscate"):
                with t.crypto():
                    hist = compress_cells(hist.reshape(-1), cell_bits(n, p.scale_bits),
                                          pk).obfuscate()
            channel.send("guest", f"{tag}/hist", hist)
            splits = guard.check_splits(channel.recv("guest", f"{tag}/splits"))
            recs, left = [], []
            for i, f, bb in splits:
                in_node = local == i
                goes_left = bins_tr[in_node, f] <= bb
                mask = np.zeros(n, bool)
                mask[in_node] = goes_left
                guard.answered(i, mask)
                recs.append(len(records))
                records.append((f, float(edges[f][bb]) if bb < len(edges[f]) else float("inf"), bb))
                left.append(goes_left)
            channel.send("guest", f"{tag}/left", {"records": recs, "left": left})
    # prediction: for each record, which held-out rows go left (x <= threshold, i.e. bin <= b);
    # records exist only for the split queries the guard let through
    test_left = {str(r): bins_te[:, f] <= bb for r, (f, _thr, bb) in enumerate(records)}
    channel.send("guest", "sbt/test_left", test_left)
    return {"metrics": {"records": len(records)},
            "model": {"records": [{"feature": f, "threshold": thr} for f, thr, _ in records]}}


def wanted_rows(node_local: np.ndarray, n_active: int, want: np.ndarray | list[int]
                ) -> np.ndarray:
    """The rows of the wanted nodes, in row order: the rows whose [[ĝ + 2^64 ĥ]] a level's
    histograms are built from (both parties compute them from the same level request)."""
    pos = np.full(n_active + 1, -1, np.int64)        # local index -> position in want; −1 -> −1
    pos[np.asarray(want, np.int64)] = np.arange(len(want))
    return np.nonzero(pos[node_local] >= 0)[0]


def _streamed_histograms(channel: Channel, pk: paillier.PublicKey, tag: str,
                         local: np.ndarray, n_active: int, want: np.ndarray,
                         bins: np.ndarray, p: BoostParams, t: Timings, be: Backend | None
                         ) -> EncryptedArray:
    """The host's encrypted histograms (F, len(want)·num_bins) of one level, from the guest's
    [[ĝ + 2^64 ĥ]] streamed in chunks: each chunk's grouped product (O6) over its rows, grouped by
    (wanted node, bin), added (O3) to the sums so far.  Σ over chunks of a cell's products is the
    cell's product over all its rows, so the plaintext sums are the integers one call over every
    row would give.

    Every chunk is checked against the host's own schedule (:func:`~unifl.app.chunks.recv_chunk`:
    index, row range) and must be exactly that many ciphertexts under the guest's key at scale 0.

    Raises:
        ProtocolViolation: a chunk out of order, repeated, missing, extra, of another size or
            scale.
        KeyMismatchError: a chunk under another key.
    """
    nb = p.num_bins
    pos = np.full(n_active + 1, -1, np.int64)
    pos[want] = np.arange(len(want))
    slot = pos[local]
    rows = np.nonzero(slot >= 0)[0]
    bounds = chunk_bounds(len(rows), p.chunk_rows)
    hist: EncryptedArray | None = None
    for c, (lo, up) in enumerate(bounds):
        enc = recv_chunk(channel, "guest", tag, c, (lo, up), len(bounds), "SBT host: [[g, h]]")
        if not isinstance(enc, EncryptedArray):
            raise ProtocolViolation(f"SBT host: [[g, h]] chunk {c} is a {type(enc).__name__}, "
                                    "not an encrypted array")
        if enc.public_key != pk:
            raise KeyMismatchError(f"SBT host: [[g, h]] chunk {c} is not under the guest's key")
        if enc.shape != (up - lo,) or enc.scale_bits != 0:
            raise ProtocolViolation(f"SBT host: [[g, h]] chunk {c} has shape {enc.shape} at "
                                    f"scale 2^-{enc.scale_bits}; rows [{lo}, {up}) of the "
                                    f"level are {up - lo} ciphertexts at scale 0")
        part_rows = rows[lo:up]
        with t.subtask("SBT: encrypted histograms (host)", "O6 histogram, O3 add"):
            # the chunk's rows grouped by (wanted node, bin)
            grouped = (slot[part_rows] * nb)[:, None] + bins[part_rows]
            with t.crypto():
                part = histogram(enc, grouped, len(want) * nb)
                hist = part if hist is None else hist + part
    recv_end(channel, "guest", tag, len(bounds), "SBT host: [[g, h]]")
    if hist is None:     # no row in the wanted nodes: every cell is 0
        with t.subtask("SBT: encrypted histograms (host)", "O6 histogram, O3 add"):
            with t.crypto():
                hist = EncryptedArray.encrypt(pk, np.zeros((bins.shape[1], len(want) * nb),
                                                           np.int64), backend=be)
    return hist


def run(role: str, job: dict, channel: Channel, backend: Backend | None, *,
        data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point "secureboost" (guest and host; the ids must already be aligned)."""
    if role == "arbiter":
        raise ConfigError("secureboost runs between guest and host only")
    p = params_of(job)
    if not isinstance(p, BoostParams):
        raise ConfigError(f"algorithm {job['algorithm']!r} is not secureboost")
    t = Timings()
    peer = "host" if role == "guest" else "guest"
    if job["dataset"] == synthetic.SYNTHETIC:
        rows = synthetic.spec_of(job).rows
        synthetic.check_alignment(role, peer, channel, rows)
        ids: list[str] = []          # the synthetic rows are generated, not selected by id
        source = f"synthetic(rows={rows}, seed={job['seed']})"
    else:
        own = load_party(job["dataset"], role, data_dir)
        ids = sorted_ids(own.ids)
        check_alignment(role, peer, channel, ids)
        source = own.source.rsplit("/", 1)[-1]
    if role == "guest":
        out = _guest(job, p, channel, backend, t, ids, data_dir, progress)
    else:
        out = _host(job, p, channel, backend, t, ids, data_dir)
    out["metrics"]["data_file"] = source
    return {"role": role, **out, "timings": t.rows()}

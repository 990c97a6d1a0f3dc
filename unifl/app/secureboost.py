"""Two-party hetero SecureBoost (Cheng et al. 2019; FLASH O6 histograms) for binary labels.

The guest holds labels y and features X_g, the host features X_h of the same aligned rows.  Both
bin their own features by train-split quantiles (``num_bins`` bins; bin(x) = #{edges < x}, so
"bin <= b" means "x <= edges[b]").  For each tree:

1. guest: p = σ(F), g = p − y, h = p(1 − p), quantised to integers ĝ = round(g·2^24),
   ĥ = round(h·2^24) (the same quantisation in the reference, so sums are exact integers and the
   federated trees are *identical* to the reference's); sends [[ĝ]], [[ĥ]] under its key (O1).
2. level by level, guest -> host: the node of every training row (−1 when settled).  The host
   builds, in ONE histogram call (O6) over the concatenation [[ĝ]] ‖ [[ĥ]] of the active rows,
   the encrypted per-(node, feature, bin) sums, re-randomises them (the guest knows each
   ciphertext's randomness, so a raw product would reveal which rows share a bin) and returns them.
3. guest: decrypts (O2), takes cumulative sums over bins (in clear, equivalent information) and
   finds each node's best split over its own and the host's features by the XGBoost gain
   GL²/(HL+λ) + GR²/(HR+λ) − G²/(H+λ) with HL, HR >= min_child_weight and gain > gamma (first
   maximum in the order guest features, host features, bins: deterministic).  A host split is
   known to the guest only as (host, feature id, bin id); the host keeps the threshold in its
   lookup table (record id -> feature, threshold) and answers which rows of the node go left.
4. leaves get w = −G/(H + λ); F += learning_rate · w.

As in SecureBoost, the host learns the instance space of each node (which rows share a node), never
a gradient or label.  Prediction: the host sends, for each of its records, the rows of the held-out
split that go left; the guest walks the trees and reports the AUC.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..errors import ConfigError, TransportError
from ..phe_sdk import EncryptedArray, histogram, paillier
from .channel import Channel
from .data import load_party, sorted_ids, subsample_ids, train_test_split
from .metrics import roc_auc, sigmoid
from .timing import Timings, progress_bar

GH_BITS = 24
PACK_BITS = 64


@dataclass
class BoostParams:
    n_trees: int = 5
    max_depth: int = 3
    learning_rate: float = 0.5
    reg_lambda: float = 1.0
    min_child_weight: float = 1.0
    gamma: float = 0.0
    num_bins: int = 16
    test_fraction: float = 0.2
    max_rows: int | None = None

    @classmethod
    def from_job(cls, params: dict) -> "BoostParams":
        bad = set(params) - set(cls.__dataclass_fields__)
        if bad:
            raise ConfigError(f"job params: unknown field(s) {sorted(bad)} for secureboost "
                              f"(allowed: {sorted(cls.__dataclass_fields__)})")
        p = cls(**params)
        if p.n_trees < 1 or p.max_depth < 1 or p.num_bins < 2 or p.reg_lambda < 0:
            raise ConfigError("job params: n_trees >= 1, max_depth >= 1, num_bins >= 2, "
                              "reg_lambda >= 0 are required")
        return p


# ------------------------------------------------------------------ binning and quantisation
def quantile_edges(X: np.ndarray, num_bins: int) -> list[np.ndarray]:
    """Per feature: the distinct train quantiles at 1/B, ..., (B−1)/B."""
    qs = np.linspace(0.0, 1.0, num_bins + 1)[1:-1]
    return [np.unique(np.quantile(X[:, f], qs)) for f in range(X.shape[1])]


def apply_bins(X: np.ndarray, edges: list[np.ndarray]) -> np.ndarray:
    """bin(x) = number of edges strictly below x, per feature (int32, in [0, len(edges)])."""
    out = np.empty(X.shape, np.int32)
    for f, e in enumerate(edges):
        out[:, f] = np.searchsorted(e, X[:, f], side="left")
    return out


def quantise(v: np.ndarray) -> np.ndarray:
    return np.rint(np.ldexp(v, GH_BITS)).astype(np.int64)


def pack_gh(gi: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """One plaintext per row: ĝ + 2^64·ĥ (object array of Python ints).  Sums of up to 2^38
    rows keep |Σĝ| < 2^63, so the two sums separate exactly (:func:`unpack_gh`)."""
    out = np.empty(len(gi), dtype=object)
    out[:] = [int(g) + (int(h) << PACK_BITS) for g, h in zip(gi.tolist(), hi.tolist())]
    return out


def unpack_gh(values: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of the packing for sums: (Σĝ, Σĥ) as int64."""
    half, full = 1 << (PACK_BITS - 1), 1 << PACK_BITS
    g = [((v + half) % full) - half for v in values]
    h = [(v - gv) >> PACK_BITS for v, gv in zip(values, g)]
    return np.array(g, dtype=np.int64), np.array(h, dtype=np.int64)


def plain_histograms(bins: np.ndarray, node_local: np.ndarray, gi: np.ndarray, hi: np.ndarray,
                     n_active: int, num_bins: int) -> np.ndarray:
    """Exact integer sums, shape (F, 2, A, B): [:, 0] gradients, [:, 1] hessians, for rows with
    node_local >= 0."""
    rows = np.nonzero(node_local >= 0)[0]
    f_count = bins.shape[1]
    out = np.zeros((f_count, 2, n_active, num_bins), np.int64)
    if len(rows):
        fi = np.broadcast_to(np.arange(f_count), (len(rows), f_count))
        nl = np.broadcast_to(node_local[rows, None], (len(rows), f_count))
        b = bins[rows]
        np.add.at(out, (fi, 0, nl, b), np.broadcast_to(gi[rows, None], (len(rows), f_count)))
        np.add.at(out, (fi, 1, nl, b), np.broadcast_to(hi[rows, None], (len(rows), f_count)))
    return out


# ------------------------------------------------------------------ split finding (guest)
def best_split(hist: np.ndarray, g_tot: int, h_tot: int, p: BoostParams) -> tuple[float, int, int]:
    """(gain, feature, bin) maximising the gain over hist (F, 2, B) of one node; gain −inf if none."""
    scale = float(1 << GH_BITS)
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
    """What the guest's tree builder asks of the host (over the network, or in clear in the
    reference)."""

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
                owner = 0 if cands[0][0] >= cands[1][0] else 1   # guest first on ties
                gain, f, b = cands[owner]
                if int(rows.sum()) < 2 or not gain > p.gamma:
                    nodes[nid]["leaf"] = True
                    continue
                decisions.append((nid, "guest" if owner == 0 else "host", f, b))
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
                    raise TransportError("host returned a partition of the wrong size")
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
    scale = float(1 << GH_BITS)
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
          t: Timings | None = None, on_tree=None, encrypt_gh=None) -> tuple[list[list[dict]], float]:
    """The guest's boosting loop (shared by the federated guest and the reference)."""
    t = t or Timings()
    f0 = base_score(y)
    F = np.full(len(y), f0)
    trees = []
    for k in range(p.n_trees):
        prob = sigmoid(F)
        gi, hi = quantise(prob - y), quantise(prob * (1 - prob))
        if encrypt_gh is not None:
            encrypt_gh(k, gi, hi)
        nodes, leaf_of_row = grow_tree(k, gi, hi, guest_bins, host, p, t)
        host.end_tree(k)
        weights = {nd["id"]: nd["weight"] for nd in nodes if nd["leaf"]}
        F = F + p.learning_rate * np.array([weights[int(i)] for i in leaf_of_row])
        trees.append(nodes)
        if on_tree:
            on_tree()
    return trees, f0


# ------------------------------------------------------------------ the two parties
class _RemoteHost:
    """HostSide over the channel, with the guest's private key for the histograms."""

    def __init__(self, channel: Channel, sk: paillier.PrivateKey, t: Timings, p: BoostParams,
                 n_host_features: int) -> None:
        self.channel, self.sk, self.t, self.p, self.fh = channel, sk, t, p, n_host_features

    def histograms(self, tree, depth, node_local, n_active, want):
        tag = f"sbt/t{tree}/d{depth}"
        self.channel.send("host", f"sbt/t{tree}/level", {
            "depth": depth, "active": n_active, "nodes": node_local.astype(np.int32),
            "want": np.asarray(want, np.int32)})
        enc = self.channel.recv("host", f"{tag}/hist")
        if not isinstance(enc, EncryptedArray) or enc.public_key != self.sk.public_key or \
                enc.shape != (self.fh, len(want) * self.p.num_bins):
            raise TransportError("host histograms have the wrong key or shape")
        with self.t.subtask("SBT: decrypt histograms", "O2 dec"):
            with self.t.crypto():
                vals = enc.decrypt(self.sk)
        g, h = unpack_gh(vals.reshape(-1).tolist())
        shape = (self.fh, len(want), self.p.num_bins)
        return np.stack([g.reshape(shape), h.reshape(shape)], axis=1)   # (F, 2, W, B)

    def end_tree(self, tree):
        self.channel.send("host", f"sbt/t{tree}/level", None)

    def split(self, tree, depth, node_local, splits):
        tag = f"sbt/t{tree}/d{depth}"
        self.channel.send("host", f"{tag}/splits", [list(map(int, s)) for s in splits])
        reply = self.channel.recv("host", f"{tag}/left")
        if len(reply["records"]) != len(splits) or len(reply["left"]) != len(splits):
            raise TransportError("host answered a different number of splits")
        return list(reply["records"]), list(reply["left"])


class PlainHost:
    """HostSide computed in clear from the host's bins (the reference)."""

    def __init__(self, host_bins: np.ndarray, p: BoostParams) -> None:
        self.bins, self.p = host_bins, p
        self.gi = self.hi = None
        self.records: list[tuple[int, int]] = []

    def histograms(self, tree, depth, node_local, n_active, want):
        pos = np.full(n_active + 1, -1, np.int64)
        pos[want] = np.arange(len(want))
        return plain_histograms(self.bins, pos[node_local], self.gi, self.hi, len(want),
                                self.p.num_bins)

    def end_tree(self, tree):
        pass

    def split(self, tree, depth, node_local, splits):
        recs, masks = [], []
        for i, f, b in splits:
            rows = np.nonzero(node_local == i)[0]
            recs.append(len(self.records))
            self.records.append((f, b))
            masks.append(self.bins[rows, f] <= b)
        return recs, masks


def _prepare(role, job, p: BoostParams, ids, data_dir):
    data = load_party(job["dataset"], role, data_dir).select(subsample_ids(ids, p.max_rows,
                                                                           job["seed"]))
    tr, te = train_test_split(len(data.ids), job["seed"], p.test_fraction)
    edges = quantile_edges(data.X[tr], p.num_bins)
    return (apply_bins(data.X[tr], edges), apply_bins(data.X[te], edges), edges,
            None if data.y is None else data.y[tr], None if data.y is None else data.y[te])


def _guest(job, p, channel: Channel, be, t: Timings, ids, data_dir, progress) -> dict:
    bins_tr, bins_te, _, y_tr, y_te = _prepare("guest", job, p, ids, data_dir)
    if not set(np.unique(y_tr)) <= {0.0, 1.0}:
        raise ConfigError("secureboost needs binary 0/1 labels")
    with t.subtask("SBT: Paillier key generation", "keygen"):
        with t.crypto():
            pk, sk = paillier.keygen(job["key_bits"])
    channel.send("host", "sbt/pk", pk)
    info = channel.recv("host", "sbt/info")
    if int(info["rows"]) != len(y_tr):
        raise ConfigError("guest and host have different numbers of training rows")
    remote = _RemoteHost(channel, sk, t, p, int(info["features"]))

    def encrypt_gh(k, gi, hi):
        with t.subtask("SBT: encrypt g, h", "O1 enc"):
            with t.crypto():
                enc = EncryptedArray.encrypt(pk, pack_gh(gi, hi), backend=be, private_key=sk)
        channel.send("host", f"sbt/t{k}/gh", enc)

    with progress_bar(p.n_trees, "guest secureboost", progress) as advance:
        trees, f0 = boost(y_tr, bins_tr, remote, p, t, on_tree=lambda: advance(1),
                          encrypt_gh=encrypt_gh)
    host_left = channel.recv("host", "sbt/test_left")
    host_left = {int(k): np.asarray(v, dtype=bool) for k, v in host_left.items()}
    with t.subtask("SBT: evaluate (guest)", "plaintext"):
        F = f0 + sum(p.learning_rate * predict_tree(nodes, bins_te, host_left) for nodes in trees)
        auc = roc_auc(y_te, sigmoid(F))
    return {"metrics": {"auc": auc, "trees": len(trees), "train_rows": int(len(y_tr)),
                        "test_rows": int(len(y_te))},
            "model": {"base_score": f0, "learning_rate": p.learning_rate, "trees": trees}}


def _host(job, p, channel: Channel, be, t: Timings, ids, data_dir) -> dict:
    bins_tr, bins_te, edges, _, _ = _prepare("host", job, p, ids, data_dir)
    pk = channel.recv("guest", "sbt/pk")
    n = len(bins_tr)
    channel.send("guest", "sbt/info", {"rows": int(n), "features": bins_tr.shape[1]})
    nb = p.num_bins
    records: list[tuple[int, float, int]] = []   # lookup table: record id -> (feature, threshold, bin)
    for k in range(p.n_trees):
        enc_gh = channel.recv("guest", f"sbt/t{k}/gh")
        if not isinstance(enc_gh, EncryptedArray) or enc_gh.public_key != pk or \
                enc_gh.shape != (n,):
            raise TransportError("host: g/h under an unexpected key or shape")
        while True:
            level = channel.recv("guest", f"sbt/t{k}/level")
            if level is None:   # the tree is complete
                break
            tag = f"sbt/t{k}/d{int(level['depth'])}"
            local = np.asarray(level["nodes"], dtype=np.int64)
            n_active = int(level["active"])
            want = np.asarray(level["want"], dtype=np.int64)
            if local.shape != (n,) or local.max(initial=-1) >= n_active or n_active > n or \
                    (want.size and (want.min() < 0 or want.max() >= n_active)):
                raise TransportError("host: node assignment of the wrong size")
            pos = np.full(n_active + 1, -1, np.int64)    # local index -> position in want
            pos[want] = np.arange(len(want))
            slot = pos[local]
            rows = np.nonzero(slot >= 0)[0]
            with t.subtask("SBT: encrypted histograms (host)", "O6 histogram, O1 obfuscate"):
                # one O6 call over the packed [[ĝ + 2^64 ĥ]] of the rows of the wanted nodes,
                # grouped by (node, bin)
                grouped = (slot[rows] * nb)[:, None] + bins_tr[rows]
                with t.crypto():
                    hist = histogram(enc_gh[rows], grouped, len(want) * nb).obfuscate()
            channel.send("guest", f"{tag}/hist", hist)
            splits = channel.recv("guest", f"{tag}/splits")
            recs, left = [], []
            for i, f, bb in ((int(a), int(b_), int(c)) for a, b_, c in splits):
                if not (0 <= i < n_active and 0 <= f < bins_tr.shape[1] and 0 <= bb < nb):
                    raise TransportError("host: split request out of range")
                recs.append(len(records))
                records.append((f, float(edges[f][bb]) if bb < len(edges[f]) else float("inf"), bb))
                left.append(bins_tr[local == i, f] <= bb)
            channel.send("guest", f"{tag}/left", {"records": recs, "left": left})
    # prediction: for each record, which held-out rows go left (x <= threshold, i.e. bin <= b)
    test_left = {str(r): bins_te[:, f] <= bb for r, (f, _thr, bb) in enumerate(records)}
    channel.send("guest", "sbt/test_left", test_left)
    return {"metrics": {"records": len(records)},
            "model": {"records": [{"feature": f, "threshold": thr} for f, thr, _ in records]}}


def run(role: str, job: dict, channel: Channel, backend, *, data_dir: str | None = None,
        progress: bool = True) -> dict:
    """Job entry point "secureboost" (guest and host; the ids must already be aligned)."""
    from .vertical import _check_alignment
    if role == "arbiter":
        raise ConfigError("secureboost runs between guest and host only")
    p = BoostParams.from_job(job["params"])
    t = Timings()
    ids = sorted_ids(load_party(job["dataset"], role, data_dir).ids)
    _check_alignment(role, "host" if role == "guest" else "guest", channel, ids)
    if role == "guest":
        out = _guest(job, p, channel, backend, t, ids, data_dir, progress)
    else:
        out = _host(job, p, channel, backend, t, ids, data_dir)
    return {"role": role, **out, "timings": t.rows()}

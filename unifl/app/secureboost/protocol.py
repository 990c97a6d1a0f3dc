"""Two-party hetero SecureBoost between the parties, over a channel (Cheng et al. 2019; FLASH O6
histograms), for binary labels.

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
written separately from this description; the tests require identical trees.  The learner of steps
1, 3 and 4 is :mod:`.learner`, the packing of steps 1–3 :mod:`.packing`.

As in SecureBoost, the host learns the instance space of each node (which rows share a node), never
a gradient or label.  The host answers only the queries this protocol makes (:class:`HostGuard`):
the levels of trees it expects, histograms of one child per split, one split query per node.
That bounds the queries, not their inputs: a malicious guest that encrypts chosen values in place
of its gradients reads the host's binned training matrix from the histograms (bins, never values
or edges), and a malicious host answers for features of its own making; docs/app.md states both
exactly.
Prediction: the host sends, for each of its records, the rows of the held-out split that go left;
the guest walks the trees and reports the AUC.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...core.backend import Backend
from ...core.errors import ConfigError, KeyMismatchError, ProtocolViolation, WeakKeyError
from ...phe_sdk import EncryptedArray, histogram, paillier
from .. import synthetic
from ..ahead import KeyAhead, key_pair, key_pair_ahead
from ..alignment import check_alignment
from ..batching import chunk_bounds
from ..binning import apply_bins, binned_party, quantile_edges
from ..channel import Channel
from ..chunks import recv_chunk, recv_end, send_chunk, send_end
from ..data import PartyData, load_party, sorted_ids
from ..metrics import roc_auc, sigmoid
from ..params import BoostParams, check_peer_scale, params_of
from ..timing import Timings, progress_bar
from .guard import HostGuard, is_int
from .learner import boost, predict_tree
from .packing import (cell_bits, cells_per_ciphertext, check_pack_capacity, compress_cells,
                      pack_gh, split_cells, unpack_gh)

__all__ = ["MAX_HOST_FEATURES", "wanted_rows", "run"]

#: The most host features a guest accepts in the host's ``sbt/info`` (it sizes the guest's
#: histogram buffers, F × 2 × nodes × bins); far above any vertical-FL table we run.
MAX_HOST_FEATURES = 1 << 16


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
        if not all(is_int(r) for r in records) or \
                any(int(r) < 0 or int(r) in self.records for r in records) or \
                len(set(map(int, records))) != len(records):
            raise ProtocolViolation("host split answer: record ids must be new, distinct, >= 0")
        for (i, _f, _b), m in zip(splits, reply["left"]):
            if not isinstance(m, np.ndarray) or m.dtype != np.bool_ or \
                    m.shape != (int((node_local == i).sum()),):
                raise ProtocolViolation("host returned a partition of the wrong size or type")
        self.records.update(int(r) for r in records)
        return [int(r) for r in records], list(reply["left"])


def _prepare(role: str, job: dict[str, Any], p: BoostParams, ids: list[str], data_dir: str | None,
             data: PartyData | None = None
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
                     test_fraction=p.test_fraction, max_rows=p.max_rows, data_dir=data_dir,
                     data=data)
    return b.train, b.test, b.edges, b.y_train, b.y_test


KEYGEN_ROW = "SBT: Paillier key generation"


def _guest(job: dict[str, Any], p: BoostParams, channel: Channel, be: Backend | None, t: Timings,
           ids: list[str], data_dir: str | None, progress: bool, data: PartyData | None = None,
           key: KeyAhead | None = None) -> dict:
    bins_tr, bins_te, _, y_tr, y_te = _prepare("guest", job, p, ids, data_dir, data)
    if y_tr is None or y_te is None or not set(np.unique(y_tr)) <= {0.0, 1.0}:
        raise ConfigError("secureboost needs binary 0/1 labels")
    check_pack_capacity(len(y_tr), p.scale_bits)
    pk, sk = key_pair(key, job["key_bits"], t, KEYGEN_ROW)
    channel.send("host", "sbt/pk", pk)
    info = channel.recv("host", "sbt/info")
    if not isinstance(info, dict) or not is_int(info.get("rows")) or \
            not is_int(info.get("features")):
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
          ids: list[str], data_dir: str | None, data: PartyData | None = None) -> dict:
    bins_tr, bins_te, edges, _, _ = _prepare("host", job, p, ids, data_dir, data)
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
    # the guest owns the job's key pair: made while it reads, aligns and bins its data
    key = key_pair_ahead(int(job["key_bits"]), role) if role == "guest" else None
    if job["dataset"] == synthetic.SYNTHETIC:
        rows = synthetic.spec_of(job).rows
        synthetic.check_alignment(role, peer, channel, rows)
        ids: list[str] = []          # the synthetic rows are generated, not selected by id
        source = f"synthetic(rows={rows}, seed={job['seed']})"
        own = None
    else:
        own = load_party(job["dataset"], role, data_dir)     # read once: ids, then rows
        ids = sorted_ids(own.ids)
        check_alignment(role, peer, channel, ids)
        source = own.source.rsplit("/", 1)[-1]
    if role == "guest":
        out = _guest(job, p, channel, backend, t, ids, data_dir, progress, own, key)
    else:
        out = _host(job, p, channel, backend, t, ids, data_dir, own)
    out["metrics"]["data_file"] = source
    return {"role": role, **out, "timings": t.rows()}

"""Vertical (hetero) logistic and linear regression over Paillier, two-party or with an arbiter.

The guest holds labels y and features X_g (plus the intercept column), the host features X_h of the
same aligned rows.  Per mini-batch B, with z_g = X_g w_g, z_h = X_h w_h and the residual

    LR   (Taylor expansion of the log loss at 0, y± = 2y − 1):  d = 0.25·(z_g + z_h) − 0.5·y±
    LinR (squared loss / 2):                                     d = z_g + z_h − y

each party needs its gradient X^T d / |B| + l2·w without learning the other's z, y or gradient.
For LR the parties work with d' = 4d = z_g + z_h − 2·y± and scale the gradient by 1/4 after
unmasking: the same value, without an encrypted multiplication by 0.25 per row.

**Two parties, no third party** (UniFL Fig. 2 / its ref. [9]); each party has its own key pair,
guest G and host H:

1. host -> guest  [[z_h]]_H                                   (O1)
   guest -> host  [[u]]_G,  u = z_g − 2·y±  (LinR: z_g − y)          (O1)
2. guest:  [[d']]_H = [[z_h]]_H + u                                   (O3)
   host:   [[d']]_G = [[u]]_G + z_h                                   (O3)
3. each:   [[X^T d']] (O5), viewed as raw integers at its own fixed-point scale s, plus a mask R
           uniform mod n from ``secrets`` (added mod n: the masked value is uniform whatever the
           gradient, and nothing the peer claims sizes the mask), re-randomised (obfuscate) and sent
           to the key owner -- the other party.
4. each:   decrypts the peer's masked gradient (O2) -- only a request of the peer's gradient shape,
           at scale 0, holding none of its own ciphertexts -- and returns each residue m with the
           randomness r its key recovers (verifiable decryption, :mod:`unifl.phe_sdk.opening`);
           the requester checks (1 + m·n)·r^n ≡ c for the ciphertext c it sent, then subtracts
           R mod n, decodes centred and scales by 2^-s.  A key owner that returns anything but
           the decryption is caught (:class:`~unifl.core.errors.DecryptionProofError`).

**Streaming.**  Steps 1–2 and the product of step 3 run per chunk of ``chunk_rows`` rows of the
batch (:mod:`unifl.app.chunks`: chunk k, its row range, the ciphertexts, then an end marker, each
checked against the receiver's own schedule): for each chunk c, [[z_h,c]] and [[u_c]] cross,
[[d'_c]] is formed and [[X_cᵀ d'_c]] is added to the batch's accumulator (O5, O3).  Since
Σ_c X_cᵀ d'_c = X_Bᵀ d'_B in exact integers, masking, the decryption request and unmasking (steps
3–4) then run once per batch on the accumulated gradient, unchanged; no party ever holds the
ciphertexts of more than one chunk.  The rows come from a :class:`~unifl.app.data.RowSource`
(matrices in memory, or the synthetic generator, which never builds the full matrix).

Job start (before any key exists): the parties exchange row counts (train and held-out), feature
counts, batch size, chunk size, fixed-point scale (``scale_bits``: z and u travel as
round(x·2^s)) and saved epochs.
Every batch has more rows than either party's feature count (a short remainder is folded into the
batch before it), since a party given Xᵀd for a batch with no more rows than its features could
solve for d; a ``batch_size`` that cannot meet this is a ConfigError at both parties.

Each party sees only the other's ciphertexts, a uniformly masked value and its own gradient,
never z, y or d in clear; docs/app.md says what each learns per step and what a deviating party
can still obtain: d re-randomised combinations of the peer's ciphertexts decrypted in place of its
own gradient, and -- the guest choosing its residual share u, held to ``residual_bound`` by
:class:`ShareBound` -- the host's test predictions for weights it steered.

**With an arbiter** (FLASH A.2, FATE's coordinated LR/LinR): the arbiter generates the key pair A
and sends the public key; host -> guest [[z_h]]_A and guest -> host [[u]]_A, each a fresh
encryption of the sender's own share, so neither waits for the other's chunk before encrypting
(the message flow of FATE's coordinated LR; n encryptions per party and epoch, as a guest that
re-randomised [[z_h]]_A + u for the host would need, but computed side by side); both form
[[d']]_A = [[peer's share]] + own share and compute masked [[X^T d' + R]]_A, and the arbiter
decrypts them and returns the masked residues with their randomness, which each party checks as
above; the arbiter decrypts a request only in the gradient shape both parties announced, each
ciphertext once.

**Evaluation** (guest): the host sends z_h of the held-out rows in plaintext, in chunks, as in
FATE's prediction (the guest then computes σ(z_g + z_h) for AUC, or z for R²); training rows are
never revealed this way.

**Overlap** (``params.overlap``, :mod:`unifl.app.overlap`): each party encrypts and sends its
share of chunk k + 1 before it waits for the peer's chunk k, sends through a background thread,
and computes the obfuscators of its next encryptions while it waits; the same messages, so the
same model.

Early stop: after each epoch the host sends ||Δw_h||² (its weight change over the epoch) and the
guest stops when sqrt(||Δw_g||² + ||Δw_h||²) < tol, deterministic so the plaintext reference
(:func:`unifl.app.reference.vertical_reference`) takes the same decision.  Each party writes a
per-epoch JSON checkpoint (:mod:`unifl.app.checkpoint`: weights, epoch, batch-schedule state;
fsynced, never written through a link) and can resume from it:
after each epoch the guest saves and says so, the host saves and acknowledges, and only then does
the next epoch start; a file keeps the state before too, and on resume the parties take the latest
epoch both have saved.
"""

from __future__ import annotations

import hashlib
import logging
import math
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..core.backend import Backend
from ..core.errors import ConfigError, KeyMismatchError, ProtocolViolation, WeakKeyError
from ..phe_sdk import EncryptedArray, opening, paillier
from . import checkpoint, psi, synthetic
from .ahead import KeyAhead, key_pair, key_pair_ahead
from .alignment import check_alignment as _check_alignment
from .batching import (batch_count, batch_rows, check_schedule, chunk_bounds, take_rows,
                       vertical_min_rows)
from .channel import Channel, Messenger
from .chunks import recv_chunk, recv_end, send_chunk, send_end
from .data import (TASKS, PartyData, RowSource, load_party, sorted_ids, standardize, subsample_ids,
                   train_test_split)
from .metrics import r2_score, roc_auc, sigmoid
from .overlap import PeerLink
from .params import VerticalParams, check_peer_scale, params_of
from .timing import Advance, Timings, progress_bar

__all__ = ["VerticalParams", "PartyMatrices", "prepare", "row_dot", "mask_gradient",
           "unmask_gradient",
           "SentCiphertexts", "ShareBound", "check_request", "decrypt_masked", "open_masked",
           "check_opened", "train", "run_lr", "run_linr", "run_psi_lr", "run_psi_linr", "Timings"]

log = logging.getLogger("unifl.app.vertical")

KEYGEN_ROW = "VFL: Paillier key generation"


@dataclass
class PartyMatrices:
    """One party's aligned, split and standardised data, in memory (the CSV datasets); a
    :class:`~unifl.app.data.RowSource` whose rows the trainer reads chunk by chunk."""

    X_train: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray | None
    y_test: np.ndarray | None
    feature_names: list[str]
    l2_mask: np.ndarray
    source: str

    @property
    def n_train(self) -> int:
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.X_test.shape[0])

    @property
    def dim(self) -> int:
        return int(self.X_train.shape[1])

    def train(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Features and labels (None for the host) of training rows ``rows``."""
        return self.X_train[rows], None if self.y_train is None else self.y_train[rows]

    def test(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """Features and labels (None for the host) of held-out rows ``rows``."""
        return self.X_test[rows], None if self.y_test is None else self.y_test[rows]


def row_dot(X: np.ndarray, w: np.ndarray) -> np.ndarray:
    """z = X·w, each row's sum taken over that row alone (NumPy's pairwise sum along the last
    axis), so a row's z is bit-identical whichever chunk it is computed in.  A BLAS
    matrix-vector product is not: its kernels block rows by the matrix's length, and the same
    row in a chunk of another length can differ in the last bit."""
    return (np.ascontiguousarray(X, dtype=np.float64) * w).sum(axis=1)


def prepare(role: str, dataset: str, ids: list[str], p: VerticalParams, seed: int,
            data_dir: str | None, data: PartyData | None = None) -> PartyMatrices:
    """Rows ``ids`` (canonical order) of this party's file, subsampled, split, standardised on the
    train split; the guest gets an intercept column (last, not penalised).  ``data``: the file,
    when the caller has read it already."""
    if data is None:
        data = load_party(dataset, role, data_dir)
    data = data.select(subsample_ids(ids, p.max_rows, seed))
    tr, te = train_test_split(len(data.ids), seed, p.test_fraction)
    X_train, X_test = standardize(data.X[tr], data.X[te])
    names = list(data.feature_names)
    mask = np.ones(X_train.shape[1])
    if role == "guest" and p.fit_intercept:
        X_train = np.hstack([X_train, np.ones((len(tr), 1))])
        X_test = np.hstack([X_test, np.ones((len(te), 1))])
        names.append("intercept")
        mask = np.append(mask, 0.0)
    y_tr = None if data.y is None else data.y[tr]
    y_te = None if data.y is None else data.y[te]
    return PartyMatrices(X_train, X_test, y_tr, y_te, names, mask, data.source)


# ------------------------------------------------------------------ masking (step 3/4)
def mask_gradient(enc: EncryptedArray) -> tuple[EncryptedArray, list[int], int]:
    """[[v + R mod n]] (raw residues, scale 0), re-randomised; returns (masked, R, scale of v).

    R_i is uniform in [0, n) from ``secrets``, so v + R mod n is uniform whatever v is: the mask
    hides v perfectly, and nothing the peer claims (the overflow bound its frames carry, a scale)
    enters its size.  ``scale`` is this party's own: the scale of the array it computed."""
    n = enc.public_key.n
    r = [secrets.randbelow(n) for _ in range(enc.size)]
    return enc.add_residues(r).obfuscate(), r, enc.scale_bits


def unmask_gradient(values: object, r: list[int], scale_bits: int, n: int) -> np.ndarray:
    """((v + R) − R mod n), decoded centred (residues above n/2 are negative), times 2^-scale, as
    float64.  ``values`` come from the key owner: each must be an int in [0, n), one per mask."""
    if not isinstance(values, (list, tuple)) or len(values) != len(r):
        got = len(values) if isinstance(values, (list, tuple)) else type(values).__name__
        raise ProtocolViolation(f"masked gradient: got {got} values, expected {len(r)}")
    out = np.empty(len(r), dtype=np.float64)
    half = n // 2
    for i, (v, m) in enumerate(zip(values, r)):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v < n:
            raise ProtocolViolation(f"masked gradient value #{i} is not a residue in [0, n)")
        x = (v - m) % n
        if x > half:
            x -= n
        out[i] = math.ldexp(x, -scale_bits) if abs(x) < (1 << 1000) else x / (1 << scale_bits)
    return out


class SentCiphertexts:
    """Digests of every ciphertext this party sent in the job: the peer must never get one of them
    decrypted by sending it back (the guest's [[u]] holds its labels in the first batch).

    Held compactly, since a streamed job sends one ciphertext per training row per epoch: 8 bytes
    per ciphertext (a 64-bit BLAKE2b digest) in sorted NumPy arrays, not a Python set (about
    90 bytes each).  A replayed ciphertext always has the digest recorded for it, so the check
    misses no replay; an honest request (fresh, re-randomised ciphertexts) collides with one of
    N recorded digests with probability about N·d / 2^64 per batch, d its length (1e-10 after
    10^8 ciphertexts sent, at d = 20)."""

    #: recorded digests that wait unsorted; merged into the sorted array past this many (or a
    #: quarter of it), so a lookup scans at most this many and merging stays O(N log N) in all
    PENDING = 1 << 16

    def __init__(self) -> None:
        self._sorted = np.empty(0, np.uint64)
        self._pending: list[np.ndarray] = []
        self._pending_n = 0

    @staticmethod
    def _of(arr: EncryptedArray) -> np.ndarray:
        # the Montgomery rows themselves: under one key (one n², one R) Montgomery form is a
        # bijection, so equal ciphertexts have equal rows, and no conversion out of it is needed
        rows = np.ascontiguousarray(np.asarray(arr.limbs, dtype=np.uint64))
        digests = b"".join(hashlib.blake2b(row.tobytes(), digest_size=8).digest() for row in rows)
        return np.frombuffer(digests, dtype="<u8").astype(np.uint64)

    def _record(self, digests: np.ndarray) -> None:
        self._pending.append(digests)
        self._pending_n += len(digests)
        if self._pending_n > max(self.PENDING, len(self._sorted) // 4):
            self._merge()

    def _merge(self) -> None:
        # sorted in place, duplicates kept (membership is all that is asked): the merge holds the
        # old and the new array at once, 16 bytes per digest, and nothing more
        merged = np.concatenate([self._sorted, *self._pending])
        merged.sort()
        self._sorted, self._pending, self._pending_n = merged, [], 0

    def add(self, arr: EncryptedArray) -> None:
        self._record(self._of(arr))

    def first_seen(self, arr: EncryptedArray, record: bool = False) -> int | None:
        """Index of the first ciphertext of ``arr`` already held here, or None; with ``record``,
        the ciphertexts of an ``arr`` that passes are added (one digest pass for both)."""
        digests = self._of(arr)
        hit = np.zeros(len(digests), dtype=bool)
        if len(self._sorted):
            at = np.minimum(np.searchsorted(self._sorted, digests), len(self._sorted) - 1)
            hit |= self._sorted[at] == digests
        for block in self._pending:
            hit |= np.isin(digests, block)
        if hit.any():
            return int(np.argmax(hit))
        if record:
            self._record(digests)
        return None

    def __len__(self) -> int:
        """Distinct digests held."""
        if self._pending:
            self._merge()
        if not len(self._sorted):
            return 0
        return int(1 + np.count_nonzero(self._sorted[1:] != self._sorted[:-1]))


def check_request(arr: object, sk: paillier.PrivateKey, shape: tuple[int, ...],
                  sent: SentCiphertexts | None = None, record: bool = False) -> EncryptedArray:
    """The key owner's checks on a decryption request (step 4), before any decryption.

    A request is decrypted only if it is an encrypted array under this party's key, of exactly
    ``shape`` (the requester's feature count, agreed at job start; every batch has more rows than
    that, so no batch-length vector such as [[u]] or [[z]] fits), at scale 0, and holds no
    ciphertext this party sent itself (``sent``; with ``record``, the request's ciphertexts join
    ``sent``, so each is decrypted at most once).  What still passes is written in docs/app.md.

    Raises:
        ProtocolViolation: wrong type, shape or scale, or a replay of this party's ciphertexts.
        KeyMismatchError: under another key.
    """
    if not isinstance(arr, EncryptedArray):
        raise ProtocolViolation(f"decryption request must be an encrypted array, got "
                                f"{type(arr).__name__}")
    if arr.public_key != sk.public_key:
        raise KeyMismatchError("decryption request is under another public key")
    if arr.shape != tuple(shape):
        raise ProtocolViolation(f"decryption request has shape {arr.shape}; only the agreed "
                                f"gradient shape {tuple(shape)} is decrypted")
    if arr.scale_bits != 0:
        raise ProtocolViolation(f"decryption request at scale 2^-{arr.scale_bits}; masked "
                                "gradients travel at scale 0")
    if sent is not None and (i := sent.first_seen(arr, record)) is not None:
        raise ProtocolViolation(f"decryption request element #{i} is a ciphertext this party sent "
                                "itself or already decrypted; refused (it would hand back this party's own data)")
    return arr


def decrypt_masked(arr: object, sk: paillier.PrivateKey, shape: tuple[int, ...],
                   sent: SentCiphertexts | None = None, record: bool = False) -> list[int]:
    """The masked residues of a request that passes :func:`check_request` (no proof attached;
    the protocol sends :func:`open_masked`)."""
    return check_request(arr, sk, shape, sent, record).decrypt_residues(sk)


# ------------------------------------------------------------------ verifiable decryption
def open_masked(arr: object, sk: paillier.PrivateKey, shape: tuple[int, ...],
                sent: SentCiphertexts | None = None, record: bool = False) -> dict[str, list[int]]:
    """The key owner's reply to a decryption request that passes :func:`check_request`: every
    masked residue m with the randomness r its key recovers, ``{"m": [...], "r": [...]}``, so the
    requester can check (1 + m·n)·r^n ≡ c before using m (:func:`check_opened`;
    :mod:`unifl.phe_sdk.opening` has the math and why r tells nothing beyond m)."""
    m, r = opening.open_array(check_request(arr, sk, shape, sent, record), sk)
    return {"m": m, "r": r}


def check_opened(masked: EncryptedArray, reply: object) -> list[int]:
    """The requester's check of the key owner's reply to ``masked`` (the request it sent): the
    masked residues, only once every one opens its ciphertext.

    Without it a key owner could return v + δ for any δ of its choosing, and the requester would
    take v − R + δ as its gradient: a guest could steer the host's weights to C·e_j and read the
    host's feature column j off the test predictions.

    Raises:
        ProtocolViolation: the reply is not ``{"m": list, "r": list}``.
        DecryptionProofError: a value does not open its ciphertext (or is out of range).
    """
    if not isinstance(reply, dict) or set(reply) != {"m", "r"} or \
            not isinstance(reply["m"], list) or not isinstance(reply["r"], list):
        got = sorted(reply) if isinstance(reply, dict) else type(reply).__name__
        raise ProtocolViolation(f"decryption reply must be {{'m': [...], 'r': [...]}} (the "
                                f"plaintexts and their randomness), got {got}")
    return opening.check_opening(masked, reply["m"], reply["r"])


# ------------------------------------------------------------------ residual bound
class ShareBound:
    """The plaintext side of the residual bound for one batch, from one party's view.

    d' = s_own + s_peer row by row (guest: s_own = u, s_peer = z_h; host the other way round), and
    the decrypted gradient is g = Xᵀd' = Xᵀs_own + Xᵀs_peer.  Verifiable decryption makes g the
    true product of this party's X with what the peer contributed, but the peer chooses its share:
    a malicious guest picks u to steer the host's weights (and reads the result off the test
    predictions).  With every |s_peer,i| <= bound, each coordinate obeys
    |(Xᵀs_peer)_j| <= bound·Σ_i|X_ij|: the party accumulates Xᵀs_own and Σ_i|X_ij| chunk by chunk
    (plaintext, d floats per chunk) and refuses a gradient that breaks it.  It is a necessary
    condition only: a share concentrated on few rows passes as long as every coordinate fits
    (docs/app.md says exactly what passes).  The party's own share is held to the same bound
    before it is encrypted, so an honest party is never refused by an honest peer.
    """

    def __init__(self, dim: int, bound: float | None, role: str, peer: str) -> None:
        self.bound, self.role, self.peer = bound, role, peer
        self.own = np.zeros(dim)
        self.abs_sum = np.zeros(dim)

    def add(self, Xc: np.ndarray, own_share: np.ndarray) -> None:
        """Account for one chunk: its features and this party's share of its rows.

        Raises:
            ConfigError: this party's own share exceeds the bound (raise params.residual_bound).
        """
        if self.bound is None:
            return
        peak = float(np.abs(own_share).max()) if len(own_share) else 0.0
        if not peak <= self.bound:
            raise ConfigError(f"{self.role}: its share of the residual reaches |{peak:.6g}|, "
                              f"beyond params.residual_bound = {self.bound:g} (the peer would "
                              "refuse the gradient); raise the bound or check the data")
        self.own += np.asarray(Xc, np.float64).T @ own_share
        self.abs_sum += np.abs(Xc).sum(axis=0)

    def check(self, g: np.ndarray) -> None:
        """Refuse a decrypted gradient ``g`` = Xᵀd' (unscaled) whose peer part breaks the bound.

        Raises:
            ProtocolViolation: naming the first coordinate out of bound.
        """
        if self.bound is None:
            return
        peer_part = g - self.own
        # slack for the fixed-point encoding of X (2^-24) and of the shares (2^-scale): far below
        # any deviation worth refusing
        limit = self.bound * self.abs_sum * (1 + 1e-6) + 1e-6 * (np.abs(self.own) + 1.0)
        over = np.abs(peer_part) > limit
        if over.any():
            j = int(np.argmax(over))
            raise ProtocolViolation(
                f"{self.role}: the {self.peer}'s part of gradient coordinate {j} is "
                f"{peer_part[j]:.6g}, beyond residual_bound·Σ|X| = {limit[j]:.6g}: no share with "
                f"every |value| <= {self.bound:g} gives it (the {self.peer} steers this party's "
                "model)")


# ------------------------------------------------------------------ the parties
@dataclass
class _Session:
    """What the two parties agreed at job start, from this party's side."""

    n: int
    dim: int
    peer_dim: int
    start: int
    w: np.ndarray
    stopped: bool
    previous: tuple[int, np.ndarray, bool] | None
    min_rows: int


def _handshake(role: str, peer: str, channel: Channel, p: VerticalParams, job: dict,
               src: RowSource, arbiter: bool) -> _Session:
    """Exchange row counts (train and held-out), feature count, batch size, chunk size,
    fixed-point scale and saved epochs; check the batch schedule (both parties refuse a batch
    size that would let either solve its gradient for the other's values) and agree the start
    epoch -- all before any key or ciphertext exists."""
    seed = job["seed"]
    n, dim = src.n_train, src.dim
    ck = checkpoint.path_for(p.checkpoint_dir, job["job_id"], job["algorithm"], role)
    states = checkpoint.load(ck, dim, seed) if p.resume else {}
    channel.send(peer, "vfl/start", {"n": int(n), "n_test": int(src.n_test), "dim": int(dim),
                                     "batch_size": int(p.batch_size),
                                     "chunk_rows": int(p.chunk_rows),
                                     "scale_bits": int(p.scale_bits),
                                     "residual_bound": p.residual_bound,
                                     "epochs": [[e, st] for e, (_, st) in sorted(states.items())]})
    theirs = channel.recv(peer, "vfl/start")
    try:
        peer_n, peer_n_test, peer_dim, peer_bs, peer_chunk = (
            int(theirs["n"]), int(theirs["n_test"]), int(theirs["dim"]),
            int(theirs["batch_size"]), int(theirs["chunk_rows"]))
        peer_states = {int(e): bool(st) for e, st in theirs["epochs"]}
    except (TypeError, KeyError, ValueError) as exc:
        raise ProtocolViolation(f"{role}: malformed job-start message from {peer}: {exc}") from exc
    if peer_n != n or peer_n_test != src.n_test:
        raise ConfigError(f"{role}: {peer} has {peer_n} training and {peer_n_test} held-out "
                          f"rows, {role} {n} and {src.n_test}: checkpoints or data differ")
    if peer_bs != p.batch_size:
        raise ConfigError(f"{role}: {peer} runs batch_size {peer_bs}, {role} {p.batch_size}")
    if peer_chunk != p.chunk_rows:
        raise ConfigError(f"{role}: {peer} streams chunk_rows {peer_chunk}, {role} "
                          f"{p.chunk_rows}; both parties cut every batch at the same rows")
    if peer_dim < 1:
        raise ProtocolViolation(f"{role}: {peer} claims {peer_dim} features")
    if p.features is not None:
        declared = p.features.guest if role == "guest" else p.features.host
        announced = declared + (1 if role == "guest" and p.fit_intercept else 0)
        if dim != announced:
            intercept = announced - declared
            raise ConfigError(f"{role}: the job declares {declared} features for {role}, "
                              f"its data has {dim - intercept}")
        if peer_dim != p.announced_dim(peer):
            raise ProtocolViolation(f"{role}: {peer} claims {peer_dim} features, the job declares "
                                    f"{p.announced_dim(peer)} (with the intercept)")
    else:
        log.warning("%s: the job declares no feature counts (params.features): %s's claim of %d "
                    "is bounded only by the batch size", role, peer, peer_dim)
    check_peer_scale(role, peer, p.scale_bits, theirs.get("scale_bits"))
    if theirs.get("residual_bound") != p.residual_bound:
        raise ConfigError(f"{role}: {peer} runs residual_bound {theirs.get('residual_bound')!r}, "
                          f"{role} {p.residual_bound!r}; both parties must run the same")
    d_g, d_h = (dim, peer_dim) if role == "guest" else (peer_dim, dim)
    min_rows = vertical_min_rows(d_g, d_h)
    check_schedule(n, p.batch_size, min_rows,
                   f"guest {d_g} features with the intercept, host {d_h}")
    start = checkpoint.agree_start({e: st for e, (_, st) in states.items()}, peer_states)
    previous: tuple[int, np.ndarray, bool] | None
    if start in states:
        w, stopped = states[start]
        previous = (start, w, stopped)
    else:
        w, stopped = np.zeros(dim), False
        checkpoint.save(ck, w, 0, seed, False)      # so a crash before the first ack can resume
        previous = (0, w, False) if ck is not None else None
    if arbiter:
        channel.send("arbiter", "vfl/dims", {"guest": d_g, "host": d_h})
    return _Session(n, dim, peer_dim, start, w, stopped, previous, min_rows)


def _end_epoch_checkpoint(role: str, peer: str, channel: Messenger, ck: Path | None, s: _Session,
                          w: np.ndarray, epoch: int, seed: int, stopped: bool) -> None:
    """Both parties checkpoint the same epoch before the next starts: the guest saves and says so,
    the host saves and acknowledges, and only then does either go on.  Each file keeps the state
    before too, so whichever party stops in between, both still share an epoch to resume from."""
    done = epoch + 1
    if role == "guest":
        checkpoint.save(ck, w, done, seed, stopped, s.previous)
        channel.send(peer, f"vfl/e{epoch}/saved", done)
        ack = channel.recv(peer, f"vfl/e{epoch}/saved_ack")
        if ack != done:
            raise ProtocolViolation(f"guest: host acknowledged epoch {ack!r}, expected {done}")
    else:
        said = channel.recv(peer, f"vfl/e{epoch}/saved")
        if said != done:
            raise ProtocolViolation(f"host: guest saved epoch {said!r}, expected {done}")
        checkpoint.save(ck, w, done, seed, stopped, s.previous)
        channel.send(peer, f"vfl/e{epoch}/saved_ack", done)
    if ck is not None:
        s.previous = (done, w.copy(), stopped)


def _accumulate(t: Timings, acc: EncryptedArray | None, Xc: np.ndarray, enc_d: EncryptedArray
                ) -> EncryptedArray:
    """acc + X_cᵀ·[[d_c]] (O5, then O3): the chunk's share of the batch's encrypted gradient.

    Σ_c X_cᵀ d_c = X_Bᵀ d_B over the chunks c of a batch B, and every term is an exact integer
    (features encoded at the SDK's 2^-24, d at the job's scale), so the accumulated plaintext is
    the very integer the whole batch's product would hold, whatever the chunking."""
    with t.subtask("VFL: encrypted gradient & mask", "O5 matmul, O3 add, O1 obfuscate"):
        with t.crypto():
            part = Xc.T @ enc_d
            return part if acc is None else acc + part


def _gradient_round(channel: Messenger, t: Timings, tag: str, acc: EncryptedArray,
                    sk_own: paillier.PrivateKey | None,
                    sent: SentCiphertexts | None, peer_shape: tuple[int, ...], *, own: str,
                    peer: str, arbiter: bool) -> np.ndarray:
    """One party's half of a gradient exchange (the same for guest and host, ``own`` = "g" | "h"),
    once per batch, on the batch's accumulated Xᵀ·[[d]] (``acc``).

    It is masked and sent to the holder of d's key (the peer, or the arbiter); in the two-party
    protocol this party meanwhile decrypts the peer's masked gradient for it (a request of the
    peer's agreed gradient shape only).  Returns the gradient, unmasked, at this party's scale.
    """
    other = "h" if own == "g" else "g"
    key_owner = "arbiter" if arbiter else peer
    with t.subtask("VFL: encrypted gradient & mask", "O5 matmul, O3 add, O1 obfuscate"):
        with t.crypto():
            masked, r, scale = mask_gradient(acc)
    if sent is not None:
        sent.add(masked)
    channel.send(key_owner, f"{tag}/masked_{own}", masked)
    if not arbiter:
        assert sk_own is not None           # two-party: this party's own key pair
        peer_masked = channel.recv(peer, f"{tag}/masked_{other}")
        with t.subtask("VFL: decrypt peer's masked gradient", "O2 dec, open r"):
            with t.crypto():
                reply = open_masked(peer_masked, sk_own, peer_shape, sent)
        channel.send(peer, f"{tag}/plain_{other}", reply)
    back = channel.recv(key_owner, f"{tag}/plain_{own}")
    with t.subtask("VFL: check decryption", "O1 re-encrypt (r^n)"):
        with t.crypto():
            values = check_opened(masked, back)
    return unmask_gradient(values, r, scale, masked.public_key.n)


def _expect(obj: object, key: paillier.PublicKey, shape: tuple, what: str, scale: int
            ) -> EncryptedArray:
    """``obj`` must be an encrypted array under ``key`` with ``shape``, at the scale agreed at job
    start (the peer's frame does not choose it), else a named error."""
    if not isinstance(obj, EncryptedArray):
        raise ProtocolViolation(f"expected encrypted {what}, got {type(obj).__name__}")
    if obj.public_key != key:
        raise KeyMismatchError(f"encrypted {what} is under an unexpected public key")
    if obj.shape != shape:
        raise ProtocolViolation(f"encrypted {what} has shape {obj.shape}, expected {shape}")
    if obj.scale_bits != scale:
        raise ProtocolViolation(f"encrypted {what} at scale 2^-{obj.scale_bits}, expected "
                                f"2^-{scale} (the job's scale_bits)")
    return obj


def _expect_key(obj: object, job: dict[str, Any], what: str) -> paillier.PublicKey:
    """A received public key: a Paillier key no smaller than the job's key size."""
    if not isinstance(obj, paillier.PublicKey):
        raise ProtocolViolation(f"expected {what}'s Paillier public key, got {type(obj).__name__}")
    if obj.n.bit_length() < int(job["key_bits"]):
        raise WeakKeyError(f"{what}'s key has {obj.n.bit_length()} bits; the job requires "
                           f"{job['key_bits']}")
    return obj


def _maybe_fixed_base(p: VerticalParams, pk: paillier.PublicKey, be: Backend | None,
                      t: Timings) -> None:
    if p.fixed_base and pk.fixed_base is None:
        with t.subtask("VFL: fixed-base table (DJN option)", "precompute"):
            with t.crypto():
                pk.enable_fixed_base(backend=be)


class _Progress:
    """The progress bar over the job's chunks, and a log line at most every ``every`` seconds (a
    party process without a terminal still shows where a long epoch is)."""

    def __init__(self, advance: Advance, role: str, total: int, every: float = 10.0) -> None:
        self.advance, self.role, self.total, self.every = advance, role, total, every
        self.done = 0
        self.last = time.monotonic()

    def stepper(self, epoch: int, batch: int, batches: int) -> Callable[[int, int], None]:
        """``step`` for the chunks of one batch: called with (chunk, chunks)."""
        return lambda chunk, chunks: self.step(epoch, batch, batches, chunk, chunks)

    def step(self, epoch: int, batch: int, batches: int, chunk: int, chunks: int) -> None:
        self.advance(1)
        self.done += 1
        now = time.monotonic()
        if now - self.last >= self.every or self.done == self.total:
            self.last = now
            log.info("%s: %d/%d chunks (epoch %d, batch %d/%d, chunk %d/%d)", self.role,
                     self.done, self.total, epoch, batch + 1, batches, chunk + 1, chunks)


def _total_chunks(n: int, p: VerticalParams, s: _Session) -> int:
    """Chunks of the epochs still to run (every epoch has the same batch lengths)."""
    count = batch_count(n, p.batch_size, s.min_rows)
    if count == 1:
        lengths = [n]
    else:
        lengths = [p.batch_size] * (count - 1) + [n - (count - 1) * p.batch_size]
    per_epoch = sum(-(-b // p.chunk_rows) for b in lengths)
    return per_epoch * max(0, p.epochs - s.start)


@dataclass
class _Streams:
    """This party's side of a batch's two chunk streams: its own share of d' out, the peer's in.

    Two-party: the guest sends [[u]] under its own key G, the host [[z_h]] under H, each the owner
    of the key it encrypts under (so through the CRT).  With an arbiter both send under the
    arbiter's key A.  Either way [[d']] = [[peer's share]] + own share, under the peer's key
    (two-party) or A.
    """

    peer: str
    own_tag: str                               # "u" (guest) | "zh" (host)
    peer_tag: str
    peer_what: str                             # the peer's share, as errors name it
    enc_key: paillier.PublicKey                # this party's share is encrypted under it
    owner: paillier.PrivateKey | None          # its private key when this party owns it (CRT)
    peer_key: paillier.PublicKey               # the peer's share arrives under it
    sent: SentCiphertexts | None               # two-party: every ciphertext this party sent
    #: this party's share of rows (X_c, y_c) under weights w: the guest's u, the host's z_h
    share_of: Callable[[np.ndarray, np.ndarray | None, np.ndarray], np.ndarray]
    #: this party's encryptions still to come in the job (what the waits refill the pool for)
    left: int = 0


def _guest_share(task: str) -> Callable[[np.ndarray, np.ndarray | None, np.ndarray], np.ndarray]:
    """u = z_g − 2·y± (LR) or z_g − y (LinR) of the guest's rows."""
    def share(Xc: np.ndarray, yc: np.ndarray | None, w: np.ndarray) -> np.ndarray:
        assert yc is not None                   # the guest's labels (checked at job start)
        zg = row_dot(Xc, w)
        return zg - 2.0 * (2.0 * yc - 1.0) if task == "lr" else zg - yc
    return share


def _host_share(Xc: np.ndarray, yc: np.ndarray | None, w: np.ndarray) -> np.ndarray:
    """z_h of the host's rows."""
    return row_dot(Xc, w)


def _stream_batch(link: PeerLink, t: Timings, st: _Streams, src: RowSource,
                  b: np.ndarray | range, w: np.ndarray, p: VerticalParams, be: Backend | None,
                  share: ShareBound, tag: str, on_chunk: Callable[[int, int], None]
                  ) -> EncryptedArray:
    """Steps 1-3 of one batch, chunk by chunk: this party's share of each chunk out (encrypted),
    the peer's in, [[d'_c]] = [[peer's share]] + own share, and acc = Σ_c X_cᵀ·[[d'_c]].

    With overlap on, chunk k + 1 is encrypted and handed to the sender before the peer's chunk k
    is awaited (and the wait refills the obfuscator pool); with it off, each chunk is encrypted,
    sent and answered in turn.  The peer receives the same values in the same order either way,
    and the accumulated gradient is the same exact integer."""
    bounds = chunk_bounds(len(b), p.chunk_rows)
    ready: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def produce(k: int) -> None:
        lo, hi = bounds[k]
        Xc, yc = src.train(take_rows(b, lo, hi))
        own = st.share_of(Xc, yc, w)
        share.add(Xc, own)
        with t.subtask("VFL: encrypt forward", "O1 enc"):
            with t.crypto():
                enc = EncryptedArray.encrypt(st.enc_key, own, scale_bits=p.scale_bits, backend=be,
                                             private_key=st.owner)
        if st.sent is not None:
            st.sent.add(enc)
        st.left = max(0, st.left - (hi - lo))
        link.expect(st.left)
        send_chunk(link, st.peer, f"{tag}/{st.own_tag}", k, (lo, hi), enc)
        ready[k] = (Xc, own)

    acc: EncryptedArray | None = None
    for k, (lo, hi) in enumerate(bounds):
        if k not in ready:
            produce(k)
        if link.overlap and k + 1 < len(bounds):
            produce(k + 1)
        Xc, own = ready.pop(k)
        enc_peer = _expect(recv_chunk(link, st.peer, f"{tag}/{st.peer_tag}", k, (lo, hi),
                                      len(bounds), st.peer_what),
                           st.peer_key, (hi - lo,), st.peer_what, p.scale_bits)
        with t.subtask("VFL: encrypted residual", "O3 add"):
            with t.crypto():
                enc_d = enc_peer + own
        acc = _accumulate(t, acc, Xc, enc_d)
        on_chunk(k, len(bounds))
    send_end(link, st.peer, f"{tag}/{st.own_tag}", len(bounds))
    recv_end(link, st.peer, f"{tag}/{st.peer_tag}", len(bounds), st.peer_what)
    assert acc is not None                      # every batch has rows
    return acc


def _open_link(channel: Channel, p: VerticalParams, st: _Streams, be: Backend | None
               ) -> PeerLink:
    """The party's link for training: overlap as the job says; its waits refill the pool of the
    key it encrypts its shares under (the key owner's pool fills through the CRT)."""
    link = PeerLink(channel, p.overlap)
    if p.overlap:
        link.refill(st.owner.obfuscators(be) if st.owner is not None
                    else st.enc_key.obfuscators(be))
        link.expect(st.left)
    return link


def _train_guest(job: dict[str, Any], p: VerticalParams, task: str, src: RowSource,
                 channel: Channel, be: Backend | None, t: Timings, progress: bool,
                 arbiter: bool, own_key: KeyAhead | None) -> dict:
    seed = job["seed"]
    factor = 0.25 if task == "lr" else 1.0      # d = factor · d'
    if src.train(np.zeros(0, np.int64))[1] is None:
        raise ConfigError("guest: its data has no label column (the guest holds the labels)")
    ck = checkpoint.path_for(p.checkpoint_dir, job["job_id"], job["algorithm"], "guest")
    s = _handshake("guest", "host", channel, p, job, src, arbiter)
    n, w, stopped = s.n, s.w, s.stopped
    left = n * max(0, p.epochs - s.start)
    if arbiter:
        pk_a = _expect_key(channel.recv("arbiter", "vfl/pk"), job, "the arbiter")
        _maybe_fixed_base(p, pk_a, be, t)           # the guest encrypts N values under A
        st = _Streams("host", "u", "zh", "z_h", pk_a, None, pk_a, None, _guest_share(task), left)
    else:
        pk_own, sk_own = key_pair(own_key, job["key_bits"], t, KEYGEN_ROW)
        _maybe_fixed_base(p, pk_own, be, t)
        channel.send("host", "vfl/pk", pk_own)
        pk_h = _expect_key(channel.recv("host", "vfl/pk"), job, "the host")
        st = _Streams("host", "u", "zh", "z_h", pk_own, sk_own, pk_h, SentCiphertexts(),
                      _guest_share(task), left)
    link = _open_link(channel, p, st, be)
    epoch = s.start
    try:
        total = _total_chunks(n, p, s)
        with progress_bar(total, f"guest {job['algorithm']}", progress) as advance:
            prog = _Progress(advance, "guest", total)
            for epoch in range(s.start, p.epochs):
                if stopped:
                    break
                w0 = w.copy()
                plan = batch_rows(n, p.batch_size, seed, epoch, s.min_rows)
                if arbiter:
                    link.send("arbiter", "vfl/plan", {"epoch": epoch, "batches": len(plan),
                                                      "stop": False})
                for bi, b in enumerate(plan):
                    tag = f"vfl/e{epoch}/b{bi}"
                    share = ShareBound(s.dim, p.residual_bound, "guest", "host")
                    acc = _stream_batch(link, t, st, src, b, w, p, be, share, tag,
                                        prog.stepper(epoch, bi, len(plan)))
                    g = _gradient_round(link, t, tag, acc, st.owner, st.sent, (s.peer_dim,),
                                        own="g", peer="host", arbiter=arbiter)
                    share.check(g)
                    with t.subtask("VFL: unmask & update", "plaintext"):
                        grad = g * factor / len(b) + p.l2 * src.l2_mask * w
                        w = w - p.learning_rate * grad
                dh2 = float(link.recv("host", f"vfl/e{epoch}/dw2"))
                change = math.sqrt(float(((w - w0) ** 2).sum()) + dh2)
                stopped = p.tol is not None and change < p.tol
                link.send("host", f"vfl/e{epoch}/stop", stopped)
                _end_epoch_checkpoint("guest", "host", link, ck, s, w, epoch, seed, stopped)
                epoch += 1
        link.expect(0)                              # nothing left to encrypt: no more refills
        if arbiter:
            link.send("arbiter", "vfl/plan", {"epoch": epoch, "batches": 0, "stop": True})
        with t.subtask("VFL: evaluate (guest)", "plaintext"):
            z, y_test = _guest_scores(link, src, w, p.chunk_rows)
            metrics = ({"auc": roc_auc(y_test, sigmoid(z))} if task == "lr"
                       else {"r2": r2_score(y_test, z)})
    except BaseException:
        link.close(flush=False)
        raise
    link.close()
    metrics.update({"epochs": int(epoch), "stopped_early": bool(stopped), "train_rows": int(n),
                    "test_rows": int(src.n_test)})
    return {"metrics": metrics, "model": {"weights": w.tolist(), "features": src.feature_names},
            "overlap": link.stats()}


def _guest_scores(channel: Messenger, src: RowSource, w: np.ndarray, chunk_rows: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """z = X_g·w_g + z_h of every held-out row, and the labels, with the host's z_h streamed in
    chunks (plain float64 arrays of exactly the chunk's rows, all finite).  The scores and labels
    are the only per-row arrays the guest keeps: AUC ranks all of them."""
    bounds = chunk_bounds(src.n_test, chunk_rows)
    z = np.empty(src.n_test)
    y = np.empty(src.n_test)
    for k, (lo, hi) in enumerate(bounds):
        zh = recv_chunk(channel, "host", "vfl/zh_test", k, (lo, hi), len(bounds),
                        "test predictions")
        if not isinstance(zh, np.ndarray) or zh.dtype != np.float64 or zh.shape != (hi - lo,) \
                or not np.isfinite(zh).all():
            got = (f"{zh.dtype} {zh.shape}" if isinstance(zh, np.ndarray)
                   else type(zh).__name__)
            raise ProtocolViolation(f"host's test predictions of rows [{lo}, {hi}) must be "
                                    f"{hi - lo} finite float64 values, got {got}")
        Xc, yc = src.test(np.arange(lo, hi))
        assert yc is not None
        z[lo:hi] = row_dot(Xc, w) + zh
        y[lo:hi] = yc
    recv_end(channel, "host", "vfl/zh_test", len(bounds), "test predictions")
    return z, y


def _train_host(job: dict[str, Any], p: VerticalParams, task: str, src: RowSource,
                channel: Channel, be: Backend | None, t: Timings, progress: bool,
                arbiter: bool, own_key: KeyAhead | None) -> dict:
    seed = job["seed"]
    factor = 0.25 if task == "lr" else 1.0
    ck = checkpoint.path_for(p.checkpoint_dir, job["job_id"], job["algorithm"], "host")
    s = _handshake("host", "guest", channel, p, job, src, arbiter)
    n, w, stopped = s.n, s.w, s.stopped
    left = n * max(0, p.epochs - s.start)
    if arbiter:
        pk_a = _expect_key(channel.recv("arbiter", "vfl/pk"), job, "the arbiter")
        _maybe_fixed_base(p, pk_a, be, t)
        st = _Streams("guest", "zh", "u", "u", pk_a, None, pk_a, None, _host_share, left)
    else:
        pk_own, sk_own = key_pair(own_key, job["key_bits"], t, KEYGEN_ROW)
        _maybe_fixed_base(p, pk_own, be, t)
        channel.send("guest", "vfl/pk", pk_own)
        pk_g = _expect_key(channel.recv("guest", "vfl/pk"), job, "the guest")
        st = _Streams("guest", "zh", "u", "u", pk_own, sk_own, pk_g, SentCiphertexts(),
                      _host_share, left)
    link = _open_link(channel, p, st, be)
    try:
        total = _total_chunks(n, p, s)
        with progress_bar(total, f"host {job['algorithm']}", progress) as advance:
            prog = _Progress(advance, "host", total)
            for epoch in range(s.start, p.epochs):
                if stopped:
                    break
                w0 = w.copy()
                plan = batch_rows(n, p.batch_size, seed, epoch, s.min_rows)
                for bi, b in enumerate(plan):
                    tag = f"vfl/e{epoch}/b{bi}"
                    share = ShareBound(s.dim, p.residual_bound, "host", "guest")
                    acc = _stream_batch(link, t, st, src, b, w, p, be, share, tag,
                                        prog.stepper(epoch, bi, len(plan)))
                    g = _gradient_round(link, t, tag, acc, st.owner, st.sent, (s.peer_dim,),
                                        own="h", peer="guest", arbiter=arbiter)
                    share.check(g)
                    with t.subtask("VFL: unmask & update", "plaintext"):
                        grad = g * factor / len(b) + p.l2 * w
                        w = w - p.learning_rate * grad
                link.send("guest", f"vfl/e{epoch}/dw2", float(((w - w0) ** 2).sum()))
                stopped = link.recv("guest", f"vfl/e{epoch}/stop")
                if not isinstance(stopped, bool):
                    raise ProtocolViolation(f"host: stop decision must be a bool, got "
                                            f"{type(stopped).__name__}")
                _end_epoch_checkpoint("host", "guest", link, ck, s, w, epoch, seed, stopped)
        link.expect(0)                              # nothing left to encrypt: no more refills
        bounds = chunk_bounds(src.n_test, p.chunk_rows)
        for k, (lo, hi) in enumerate(bounds):
            send_chunk(link, "guest", "vfl/zh_test", k, (lo, hi),
                       row_dot(src.test(np.arange(lo, hi))[0], w))
        send_end(link, "guest", "vfl/zh_test", len(bounds))
    except BaseException:
        link.close(flush=False)
        raise
    link.close()
    return {"metrics": {"train_rows": int(n)},
            "model": {"weights": w.tolist(), "features": src.feature_names},
            "overlap": link.stats()}


def _serve_arbiter(job: dict[str, Any], channel: Channel, be: Backend | None,
                   t: Timings, own_key: KeyAhead | None = None) -> dict:
    """Key owner of the coordinated variant: decrypts masked gradients, sees nothing else.

    Each party's request must have the gradient shape both parties announced at job start (they
    must announce the same dims), be under the arbiter's key at scale 0, and hold no ciphertext
    already decrypted in this job."""
    dims = [channel.recv(party, "vfl/dims") for party in ("guest", "host")]
    try:
        d = {party: int(dims[0][party]) for party in ("guest", "host")}
    except (TypeError, KeyError, ValueError) as exc:
        raise ProtocolViolation(f"arbiter: malformed dims message: {exc}") from exc
    if dims[0] != dims[1] or min(d.values()) < 1:
        raise ProtocolViolation(f"arbiter: the parties announce different or empty feature counts "
                                f"(guest says {dims[0]}, host says {dims[1]})")
    p = _params(job)
    for party in ("guest", "host"):
        if p.features is not None and d[party] != p.announced_dim(party):
            raise ProtocolViolation(f"arbiter: {party} announces {d[party]} features, the job "
                                    f"declares {p.announced_dim(party)} (with the intercept)")
    pk, sk = key_pair(own_key, job["key_bits"], t, KEYGEN_ROW)
    channel.send("guest", "vfl/pk", pk)
    channel.send("host", "vfl/pk", pk)
    decrypted = SentCiphertexts()       # a ciphertext is decrypted at most once
    while True:
        plan = channel.recv("guest", "vfl/plan")
        if (not isinstance(plan, dict) or not isinstance(plan.get("stop"), bool)
                or not isinstance(plan.get("epoch"), int) or not isinstance(plan.get("batches"), int)
                or plan["batches"] < 0):
            raise ProtocolViolation(f"arbiter: malformed plan message from guest: {plan!r:.200}")
        if plan["stop"]:
            break
        epoch = int(plan["epoch"])
        for bi in range(int(plan["batches"])):
            tag = f"vfl/e{epoch}/b{bi}"
            for party, src_tag, dst_tag in (("guest", "masked_g", "plain_g"),
                                            ("host", "masked_h", "plain_h")):
                arr = channel.recv(party, f"{tag}/{src_tag}")
                with t.subtask("VFL: decrypt masked gradients", "O2 dec, open r"):
                    with t.crypto():
                        reply = open_masked(arr, sk, (d[party],), decrypted, record=True)
                channel.send(party, f"{tag}/{dst_tag}", reply)
    return {"metrics": {}, "model": {}}


def own_key_ahead(role: str, job: dict[str, Any]) -> KeyAhead | None:
    """The Paillier key pair this party will own in ``job``, started now on a background thread
    (:mod:`unifl.app.ahead`): the arbiter's in the coordinated variant, each party's own in the
    two-party one; None for a party that encrypts under the arbiter's key."""
    if role != "arbiter" and "arbiter" in job["parties"]:
        return None
    return key_pair_ahead(int(job["key_bits"]), role)


def _params(job: dict) -> VerticalParams:
    p = params_of(job)
    if not isinstance(p, VerticalParams):
        raise ConfigError(f"algorithm {job['algorithm']!r} is not vertical LR / LinR")
    return p


def train(role: str, job: dict, channel: Channel, backend: Backend | None, task: str,
          ids: list[str] | None, data_dir: str | None, progress: bool, timings: Timings,
          data: PartyData | None = None, own_key: KeyAhead | None = None) -> dict:
    """This party's side of vertical LR ("lr") or LinR ("linr") on the rows ``ids``
    (None: the party's own ids, checked equal to the peer's); ``data``: the party's file, when
    the caller has read it already (for the PSI's ids); ``own_key``: its key pair, when the caller
    started it ahead (:func:`own_key_ahead`)."""
    p = _params(job)
    arbiter = "arbiter" in job["parties"]
    if role == "arbiter":
        if not arbiter:
            raise ConfigError("this job has no arbiter")
        return _serve_arbiter(job, channel, backend, timings, own_key)
    if isinstance(job["dataset"], str) and job["dataset"] in TASKS:
        want = "binary" if task == "lr" else "regression"
        if TASKS[job["dataset"]] != want:
            raise ConfigError(f"dataset {job['dataset']!r} is for {TASKS[job['dataset']]} tasks, "
                              f"not {task}")
    peer = "host" if role == "guest" else "guest"
    src: RowSource
    if job["dataset"] == synthetic.SYNTHETIC:
        if ids is not None:
            raise ConfigError("dataset 'synthetic' is aligned by construction: no PSI step")
        spec = synthetic.spec_of(job)
        synthetic.check_alignment(role, peer, channel, spec.rows)
        src = synthetic.SyntheticParty(spec, role, job["seed"], p.test_fraction, p.fit_intercept)
    else:
        if ids is None:
            if data is None:
                data = load_party(job["dataset"], role, data_dir)    # read once, for ids and rows
            ids = sorted_ids(data.ids)
            _check_alignment(role, peer, channel, ids)
        src = prepare(role, job["dataset"], ids, p, job["seed"], data_dir, data)
    fn = _train_guest if role == "guest" else _train_host
    out = fn(job, p, task, src, channel, backend, timings, progress, arbiter, own_key)
    out["metrics"]["data_file"] = Path(src.source).name   # says when the bundled sample was used
    return out


def _run(role: str, job: dict[str, Any], channel: Channel, backend: Backend | None,
         data_dir: str | None, progress: bool, task: str, with_psi: bool) -> dict:
    timings = Timings()
    # the key pair is made while this party reads its data and aligns its rows with its peer
    own_key = own_key_ahead(role, job)
    ids = None
    result: dict = {}
    data = None
    if with_psi:
        if role != "arbiter":
            if job["dataset"] != synthetic.SYNTHETIC:
                data = load_party(job["dataset"], role, data_dir)   # read once: ids, then rows
            own = psi.party_ids(role, job, data_dir, data)
            ids = psi.intersect(role, job, channel, backend, own, timings)
            result["intersection_size"] = len(ids)
        else:
            ids = []
    out = train(role, job, channel, backend, task, ids, data_dir, progress, timings, data,
                own_key)
    result.update({"role": role, "metrics": out["metrics"], "model": out["model"],
                   "timings": timings.rows()})
    if "overlap" in out:
        result["overlap"] = out["overlap"]
    return result


def run_lr(role: str, job: dict, channel: Channel, backend: Backend | None, *,
           data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point "vlr"."""
    return _run(role, job, channel, backend, data_dir, progress, "lr", False)


def run_linr(role: str, job: dict, channel: Channel, backend: Backend | None, *,
             data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point "vlinr"."""
    return _run(role, job, channel, backend, data_dir, progress, "linr", False)


def run_psi_lr(role: str, job: dict, channel: Channel, backend: Backend | None, *,
               data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point "psi+vlr": PSI on the ids, then vertical LR on the intersection."""
    return _run(role, job, channel, backend, data_dir, progress, "lr", True)


def run_psi_linr(role: str, job: dict, channel: Channel, backend: Backend | None, *,
                 data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point "psi+vlinr"."""
    return _run(role, job, channel, backend, data_dir, progress, "linr", True)

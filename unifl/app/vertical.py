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
           at scale 0, holding none of its own ciphertexts -- and returns the residues; the owner
           subtracts R mod n, decodes centred and scales by 2^-s.

Job start (before any key exists): the parties exchange row count, feature counts, batch size,
fixed-point scale (``scale_bits``: z and u travel as round(x·2^s)) and saved epochs.
Every batch has more rows than either party's feature count (a short remainder is folded into the
batch before it), since a party given Xᵀd for a batch with no more rows than its features could
solve for d; a ``batch_size`` that cannot meet this is a ConfigError at both parties.

Each party sees only the other's ciphertexts, a uniformly masked value and its own gradient,
never z, y or d in clear; docs/app.md says what each learns per step and what a deviating party
can still obtain without zero-knowledge proofs.

**With an arbiter** (FLASH A.2, FATE's coordinated LR/LinR): the arbiter generates the key pair A
and sends the public key; host -> guest [[z_h]]_A; guest -> host [[d']]_A (re-randomised); both
compute masked [[X^T d' + R]]_A and the arbiter decrypts them and returns the masked residues; the
arbiter decrypts a request only in the gradient shape both parties announced, each ciphertext once.

**Evaluation** (guest): the host sends z_h of the held-out rows in plaintext, as in FATE's
prediction (the guest then computes σ(z_g + z_h) for AUC, or z for R²); training rows are never
revealed this way.

Early stop: after each epoch the host sends ||Δw_h||² (its weight change over the epoch) and the
guest stops when sqrt(||Δw_g||² + ||Δw_h||²) < tol, deterministic so the plaintext reference
(:func:`unifl.app.reference.vertical_reference`) takes the same decision.  Each party writes a
per-epoch JSON checkpoint (weights, epoch, batch-schedule state; fsynced) and can resume from it:
after each epoch the guest saves and says so, the host saves and acknowledges, and only then does
the next epoch start; a file keeps the state before too, and on resume the parties take the latest
epoch both have saved.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.errors import (ConfigError, KeyMismatchError, ProtocolViolation, SerializationError,
                           WeakKeyError)
from ..phe_sdk import EncryptedArray, paillier
from . import psi
from .alignment import check_alignment as _check_alignment
from .alignment import ids_digest as _ids_digest
from .batching import batches, check_schedule, vertical_min_rows
from .channel import Channel
from .data import (TASKS, load_party, sorted_ids, standardize, subsample_ids, train_test_split)
from .metrics import r2_score, roc_auc, sigmoid
from .params import VerticalParams, check_peer_scale, params_of
from .timing import Timings, progress_bar

__all__ = ["VerticalParams", "PartyMatrices", "prepare", "mask_gradient", "unmask_gradient",
           "SentCiphertexts", "decrypt_masked", "save_checkpoint", "load_checkpoint",
           "agree_start", "train", "run_lr", "run_linr", "run_psi_lr", "run_psi_linr", "Timings"]

log = logging.getLogger("unifl.app.vertical")


@dataclass
class PartyMatrices:
    """One party's aligned, split and standardised data."""

    X_train: np.ndarray
    X_test: np.ndarray
    y_train: np.ndarray | None
    y_test: np.ndarray | None
    feature_names: list[str]
    l2_mask: np.ndarray
    source: str


def prepare(role: str, dataset: str, ids: list[str], p: VerticalParams, seed: int,
            data_dir: str | None) -> PartyMatrices:
    """Rows ``ids`` (canonical order) of this party's file, subsampled, split, standardised on the
    train split; the guest gets an intercept column (last, not penalised)."""
    data = load_party(dataset, role, data_dir).select(subsample_ids(ids, p.max_rows, seed))
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
    decrypted by sending it back (the guest's [[u]] holds its labels in the first batch)."""

    def __init__(self) -> None:
        self._digests: set[bytes] = set()

    @staticmethod
    def _of(arr: EncryptedArray) -> list[bytes]:
        # the Montgomery rows themselves: under one key (one n², one R) Montgomery form is a
        # bijection, so equal ciphertexts have equal rows, and no conversion out of it is needed
        rows = np.ascontiguousarray(np.asarray(arr.limbs, dtype=np.uint64))
        return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in rows]

    def add(self, arr: EncryptedArray) -> None:
        self._digests.update(self._of(arr))

    def first_seen(self, arr: EncryptedArray, record: bool = False) -> int | None:
        """Index of the first ciphertext of ``arr`` already held here, or None; with ``record``,
        the ciphertexts of an ``arr`` that passes are added (one digest pass for both)."""
        digests = self._of(arr)
        seen = next((i for i, d in enumerate(digests) if d in self._digests), None)
        if record and seen is None:
            self._digests.update(digests)
        return seen

    def __len__(self) -> int:
        return len(self._digests)


def decrypt_masked(arr: object, sk: paillier.PrivateKey, shape: tuple[int, ...],
                   sent: SentCiphertexts | None = None, record: bool = False) -> list[int]:
    """The key owner's step 4: the masked residues to return, after checking the request.

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
    return arr.decrypt_residues(sk)


# ------------------------------------------------------------------ checkpoints
CHECKPOINT_VERSION = 2


def _checkpoint_path(p: VerticalParams, job: dict, role: str) -> Path | None:
    if not p.checkpoint_dir:
        return None
    return Path(p.checkpoint_dir) / f"{job['job_id']}_{job['algorithm']}_{role}.json"


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:       # a platform without directory handles: the replace is still atomic
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_checkpoint(path: Path | None, w: np.ndarray, epoch: int, seed: int, stopped: bool,
                    previous: tuple[int, np.ndarray, bool] | None = None) -> None:
    """Weights after ``epoch`` completed epochs (and the state before it, ``previous``, so that a
    party one save ahead of its peer can still resume from their common epoch), durably: a temp
    file written, flushed and fsynced, atomically renamed, and the directory fsynced."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    states = [{"epoch": int(epoch), "weights": w.tolist(), "stopped": bool(stopped)}]
    if previous is not None and previous[0] < epoch:
        states.append({"epoch": int(previous[0]), "weights": np.asarray(previous[1]).tolist(),
                       "stopped": bool(previous[2])})
    text = json.dumps({"unifl_checkpoint": CHECKPOINT_VERSION, "rng": {"seed": seed},
                       "states": states})
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint
    _fsync_dir(path.parent)


def load_checkpoint(path: Path | None, dim: int, seed: int
                    ) -> dict[int, tuple[np.ndarray, bool]]:
    """The saved states {epoch: (weights, stopped)} (empty without a checkpoint)."""
    if path is None or not path.is_file():
        return {}
    try:
        obj = json.loads(path.read_text())
        ck_seed = int(obj["rng"]["seed"])
        if obj.get("unifl_checkpoint") == 1:      # one state, written before version 2
            raw = [{"epoch": obj["epoch"], "weights": obj["weights"], "stopped": obj["stopped"]}]
        else:
            raw = obj["states"]
        states = {int(s["epoch"]): (np.array(s["weights"], dtype=np.float64), bool(s["stopped"]))
                  for s in raw}
    except (ValueError, KeyError, TypeError) as exc:
        raise SerializationError(f"checkpoint {path} is malformed: {exc}") from exc
    for w, _ in states.values():
        if w.shape != (dim,) or ck_seed != seed:
            raise ConfigError(f"checkpoint {path} belongs to another model (shape {w.shape}, "
                              f"seed {ck_seed}); expected ({dim},), seed {seed}")
    return states


def agree_start(own: dict[int, bool], peer: dict[int, bool]) -> int:
    """The epoch both parties resume from: the latest one both have saved (0 when neither has a
    checkpoint).  Both compute it from the same two lists, so they agree."""
    if not own and not peer:
        return 0
    common = set(own) & set(peer)
    if not common:
        raise ConfigError(f"the parties' checkpoints have no common epoch (this party "
                          f"{sorted(own)}, the peer {sorted(peer)}): checkpoints or data differ")
    e = max(common)
    if own[e] != peer[e]:
        raise ConfigError(f"the parties' checkpoints disagree on stopping at epoch {e}: "
                          "checkpoints or data differ")
    return e


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
               m: PartyMatrices, arbiter: bool) -> _Session:
    """Exchange row count, feature count, batch size, fixed-point scale and saved epochs; check the
    batch schedule (both parties refuse a batch size that would let either solve its gradient for
    the other's values) and agree the start epoch -- all before any key or ciphertext exists."""
    seed = job["seed"]
    n, dim = m.X_train.shape
    ck = _checkpoint_path(p, job, role)
    states = load_checkpoint(ck, dim, seed) if p.resume else {}
    channel.send(peer, "vfl/start", {"n": int(n), "dim": int(dim), "batch_size": int(p.batch_size),
                                     "scale_bits": int(p.scale_bits),
                                     "epochs": [[e, st] for e, (_, st) in sorted(states.items())]})
    theirs = channel.recv(peer, "vfl/start")
    try:
        peer_n, peer_dim, peer_bs = (int(theirs["n"]), int(theirs["dim"]),
                                     int(theirs["batch_size"]))
        peer_states = {int(e): bool(st) for e, st in theirs["epochs"]}
    except (TypeError, KeyError, ValueError) as exc:
        raise ProtocolViolation(f"{role}: malformed job-start message from {peer}: {exc}") from exc
    if peer_n != n:
        raise ConfigError(f"{role}: {peer} has {peer_n} training rows, {role} {n}: checkpoints or "
                          "data differ")
    if peer_bs != p.batch_size:
        raise ConfigError(f"{role}: {peer} runs batch_size {peer_bs}, {role} {p.batch_size}")
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
    d_g, d_h = (dim, peer_dim) if role == "guest" else (peer_dim, dim)
    min_rows = vertical_min_rows(d_g, d_h)
    check_schedule(n, p.batch_size, min_rows,
                   f"guest {d_g} features with the intercept, host {d_h}")
    start = agree_start({e: st for e, (_, st) in states.items()}, peer_states)
    previous: tuple[int, np.ndarray, bool] | None
    if start in states:
        w, stopped = states[start]
        previous = (start, w, stopped)
    else:
        w, stopped = np.zeros(dim), False
        save_checkpoint(ck, w, 0, seed, False)      # so a crash before the first ack can resume
        previous = (0, w, False) if ck is not None else None
    if arbiter:
        channel.send("arbiter", "vfl/dims", {"guest": d_g, "host": d_h})
    return _Session(n, dim, peer_dim, start, w, stopped, previous, min_rows)


def _end_epoch_checkpoint(role: str, peer: str, channel: Channel, ck: Path | None, s: _Session,
                          w: np.ndarray, epoch: int, seed: int, stopped: bool) -> None:
    """Both parties checkpoint the same epoch before the next starts: the guest saves and says so,
    the host saves and acknowledges, and only then does either go on.  Each file keeps the state
    before too, so whichever party stops in between, both still share an epoch to resume from."""
    done = epoch + 1
    if role == "guest":
        save_checkpoint(ck, w, done, seed, stopped, s.previous)
        channel.send(peer, f"vfl/e{epoch}/saved", done)
        ack = channel.recv(peer, f"vfl/e{epoch}/saved_ack")
        if ack != done:
            raise ProtocolViolation(f"guest: host acknowledged epoch {ack!r}, expected {done}")
    else:
        said = channel.recv(peer, f"vfl/e{epoch}/saved")
        if said != done:
            raise ProtocolViolation(f"host: guest saved epoch {said!r}, expected {done}")
        save_checkpoint(ck, w, done, seed, stopped, s.previous)
        channel.send(peer, f"vfl/e{epoch}/saved_ack", done)
    if ck is not None:
        s.previous = (done, w.copy(), stopped)


def _gradient_round(channel: Channel, t: Timings, tag: str, Xb: np.ndarray,
                    enc_d: EncryptedArray, sk_own: paillier.PrivateKey | None,
                    sent: SentCiphertexts | None, peer_shape: tuple[int, ...], *, own: str,
                    peer: str, arbiter: bool) -> np.ndarray:
    """One party's half of a gradient exchange (the same for guest and host, ``own`` = "g" | "h").

    Xᵀ·[[d]] is masked and sent to the holder of d's key (the peer, or the arbiter); in the two-party
    protocol this party meanwhile decrypts the peer's masked gradient for it (a request of the
    peer's agreed gradient shape only).  Returns the gradient, unmasked, at this party's scale.
    """
    other = "h" if own == "g" else "g"
    key_owner = "arbiter" if arbiter else peer
    with t.subtask("VFL: encrypted gradient & mask", "O5 matmul, O3 add, O1 obfuscate"):
        with t.crypto():
            masked, r, scale = mask_gradient(Xb.T @ enc_d)
    if sent is not None:
        sent.add(masked)
    channel.send(key_owner, f"{tag}/masked_{own}", masked)
    if not arbiter:
        assert sk_own is not None           # two-party: this party's own key pair
        peer_masked = channel.recv(peer, f"{tag}/masked_{other}")
        with t.subtask("VFL: decrypt peer's masked gradient", "O2 dec"):
            with t.crypto():
                vals = decrypt_masked(peer_masked, sk_own, peer_shape, sent)
        channel.send(peer, f"{tag}/plain_{other}", vals)
    back = channel.recv(key_owner, f"{tag}/plain_{own}")
    return unmask_gradient(back, r, scale, masked.public_key.n)


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


def _train_guest(job: dict[str, Any], p: VerticalParams, task: str, m: PartyMatrices,
                 channel: Channel, be: Backend | None, t: Timings, progress: bool,
                 arbiter: bool) -> dict:
    seed = job["seed"]
    factor = 0.25 if task == "lr" else 1.0      # d = factor · d'
    y, y_test = m.y_train, m.y_test
    if y is None or y_test is None:      # both come from the label column
        raise ConfigError("guest: its data has no label column (the guest holds the labels)")
    ck = _checkpoint_path(p, job, "guest")
    s = _handshake("guest", "host", channel, p, job, m, arbiter)
    n, w, stopped = s.n, s.w, s.stopped
    sent = None if arbiter else SentCiphertexts()
    if arbiter:
        pk_a = _expect_key(channel.recv("arbiter", "vfl/pk"), job, "the arbiter")
        pk_own = sk_own = None
        pk_h = pk_a
        _maybe_fixed_base(p, pk_a, be, t)           # the guest re-randomises N values under A
    else:
        with t.subtask("VFL: Paillier key generation", "keygen"):
            with t.crypto():
                pk_own, sk_own = paillier.keygen(job["key_bits"])
        _maybe_fixed_base(p, pk_own, be, t)
        channel.send("host", "vfl/pk", pk_own)
        pk_h = _expect_key(channel.recv("host", "vfl/pk"), job, "the host")
    total = sum(len(batches(n, p.batch_size, seed, e, s.min_rows))
                for e in range(s.start, p.epochs))
    epoch = s.start
    with progress_bar(total, f"guest {job['algorithm']}", progress) as advance:
        for epoch in range(s.start, p.epochs):
            if stopped:
                break
            w0 = w.copy()
            plan = batches(n, p.batch_size, seed, epoch, s.min_rows)
            if arbiter:
                channel.send("arbiter", "vfl/plan", {"epoch": epoch, "batches": len(plan),
                                                     "stop": False})
            for bi, b in enumerate(plan):
                tag = f"vfl/e{epoch}/b{bi}"
                Xb = m.X_train[b]
                zg = Xb @ w
                u = zg - 2.0 * (2.0 * y[b] - 1.0) if task == "lr" else zg - y[b]
                if not arbiter:
                    assert pk_own is not None and sent is not None   # two-party: own key pair
                    with t.subtask("VFL: encrypt forward", "O1 enc"):
                        with t.crypto():
                            enc_u = EncryptedArray.encrypt(pk_own, u, scale_bits=p.scale_bits,
                                                           backend=be, private_key=sk_own)
                    sent.add(enc_u)
                    channel.send("host", f"{tag}/u", enc_u)
                enc_zh = _expect(channel.recv("host", f"{tag}/zh"), pk_h, (len(b),), "z_h",
                                 p.scale_bits)
                with t.subtask("VFL: encrypted residual", "O3 add"):
                    with t.crypto():
                        enc_d = enc_zh + u
                        if arbiter:
                            enc_d_out = enc_d.obfuscate()
                if arbiter:
                    channel.send("host", f"{tag}/d", enc_d_out)
                g = _gradient_round(channel, t, tag, Xb, enc_d, sk_own, sent, (s.peer_dim,),
                                    own="g", peer="host", arbiter=arbiter)
                with t.subtask("VFL: unmask & update", "plaintext"):
                    grad = g * factor / len(b) + p.l2 * m.l2_mask * w
                    w = w - p.learning_rate * grad
                advance(1)
            dh2 = float(channel.recv("host", f"vfl/e{epoch}/dw2"))
            change = math.sqrt(float(((w - w0) ** 2).sum()) + dh2)
            stopped = p.tol is not None and change < p.tol
            channel.send("host", f"vfl/e{epoch}/stop", stopped)
            _end_epoch_checkpoint("guest", "host", channel, ck, s, w, epoch, seed, stopped)
            epoch += 1
    if arbiter:
        channel.send("arbiter", "vfl/plan", {"epoch": epoch, "batches": 0, "stop": True})
    with t.subtask("VFL: evaluate (guest)", "plaintext"):
        zh_test = np.asarray(channel.recv("host", "vfl/zh_test"), dtype=np.float64)
        if zh_test.shape != (len(m.X_test),):
            raise ProtocolViolation(f"host's test predictions have shape {zh_test.shape}, "
                                    f"expected ({len(m.X_test)},)")
        z = m.X_test @ w + zh_test
        metrics = ({"auc": roc_auc(y_test, sigmoid(z))} if task == "lr"
                   else {"r2": r2_score(y_test, z)})
    metrics.update({"epochs": int(epoch), "stopped_early": bool(stopped), "train_rows": int(n),
                    "test_rows": int(len(m.X_test))})
    return {"metrics": metrics, "model": {"weights": w.tolist(), "features": m.feature_names}}


def _train_host(job: dict[str, Any], p: VerticalParams, task: str, m: PartyMatrices,
                channel: Channel, be: Backend | None, t: Timings, progress: bool,
                arbiter: bool) -> dict:
    seed = job["seed"]
    factor = 0.25 if task == "lr" else 1.0
    ck = _checkpoint_path(p, job, "host")
    s = _handshake("host", "guest", channel, p, job, m, arbiter)
    n, w, stopped = s.n, s.w, s.stopped
    sent = None if arbiter else SentCiphertexts()
    if arbiter:
        pk_own = _expect_key(channel.recv("arbiter", "vfl/pk"), job, "the arbiter")
        sk_own = pk_g = None
    else:
        with t.subtask("VFL: Paillier key generation", "keygen"):
            with t.crypto():
                pk_own, sk_own = paillier.keygen(job["key_bits"])
        channel.send("guest", "vfl/pk", pk_own)
        pk_g = _expect_key(channel.recv("guest", "vfl/pk"), job, "the guest")
    _maybe_fixed_base(p, pk_own, be, t)
    total = sum(len(batches(n, p.batch_size, seed, e, s.min_rows))
                for e in range(s.start, p.epochs))
    with progress_bar(total, f"host {job['algorithm']}", progress) as advance:
        for epoch in range(s.start, p.epochs):
            if stopped:
                break
            w0 = w.copy()
            for bi, b in enumerate(batches(n, p.batch_size, seed, epoch, s.min_rows)):
                tag = f"vfl/e{epoch}/b{bi}"
                Xb = m.X_train[b]
                zh = Xb @ w
                with t.subtask("VFL: encrypt forward", "O1 enc"):
                    with t.crypto():
                        enc_zh = EncryptedArray.encrypt(pk_own, zh, scale_bits=p.scale_bits,
                                                        backend=be, private_key=sk_own)
                if sent is not None:
                    sent.add(enc_zh)
                channel.send("guest", f"{tag}/zh", enc_zh)
                if arbiter:
                    enc_d = _expect(channel.recv("guest", f"{tag}/d"), pk_own, (len(b),),
                                    "residual", p.scale_bits)
                else:
                    assert pk_g is not None          # two-party: the guest's key was received
                    enc_u = _expect(channel.recv("guest", f"{tag}/u"), pk_g, (len(b),), "u",
                                    p.scale_bits)
                    with t.subtask("VFL: encrypted residual", "O3 add"):
                        with t.crypto():
                            enc_d = enc_u + zh
                g = _gradient_round(channel, t, tag, Xb, enc_d, sk_own, sent, (s.peer_dim,),
                                    own="h", peer="guest", arbiter=arbiter)
                with t.subtask("VFL: unmask & update", "plaintext"):
                    grad = g * factor / len(b) + p.l2 * w
                    w = w - p.learning_rate * grad
                advance(1)
            channel.send("guest", f"vfl/e{epoch}/dw2", float(((w - w0) ** 2).sum()))
            stopped = channel.recv("guest", f"vfl/e{epoch}/stop")
            if not isinstance(stopped, bool):
                raise ProtocolViolation(f"host: stop decision must be a bool, got "
                                        f"{type(stopped).__name__}")
            _end_epoch_checkpoint("host", "guest", channel, ck, s, w, epoch, seed, stopped)
    channel.send("guest", "vfl/zh_test", m.X_test @ w)
    return {"metrics": {"train_rows": int(n)}, "model": {"weights": w.tolist(),
                                                         "features": m.feature_names}}


def _serve_arbiter(job: dict[str, Any], channel: Channel, be: Backend | None,
                   t: Timings) -> dict:
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
    with t.subtask("VFL: Paillier key generation", "keygen"):
        with t.crypto():
            pk, sk = paillier.keygen(job["key_bits"])
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
                with t.subtask("VFL: decrypt masked gradients", "O2 dec"):
                    with t.crypto():
                        vals = decrypt_masked(arr, sk, (d[party],), decrypted, record=True)
                channel.send(party, f"{tag}/{dst_tag}", vals)
    return {"metrics": {}, "model": {}}


def _params(job: dict) -> VerticalParams:
    p = params_of(job)
    if not isinstance(p, VerticalParams):
        raise ConfigError(f"algorithm {job['algorithm']!r} is not vertical LR / LinR")
    return p


def train(role: str, job: dict, channel: Channel, backend: Backend | None, task: str,
          ids: list[str] | None, data_dir: str | None, progress: bool, timings: Timings) -> dict:
    """This party's side of vertical LR ("lr") or LinR ("linr") on the rows ``ids``
    (None: the party's own ids, checked equal to the peer's)."""
    p = _params(job)
    arbiter = "arbiter" in job["parties"]
    if role == "arbiter":
        if not arbiter:
            raise ConfigError("this job has no arbiter")
        return _serve_arbiter(job, channel, backend, timings)
    if isinstance(job["dataset"], str) and job["dataset"] in TASKS:
        want = "binary" if task == "lr" else "regression"
        if TASKS[job["dataset"]] != want:
            raise ConfigError(f"dataset {job['dataset']!r} is for {TASKS[job['dataset']]} tasks, "
                              f"not {task}")
    peer = "host" if role == "guest" else "guest"
    if ids is None:
        ids = sorted_ids(load_party(job["dataset"], role, data_dir).ids)
        _check_alignment(role, peer, channel, ids)
    m = prepare(role, job["dataset"], ids, p, job["seed"], data_dir)
    fn = _train_guest if role == "guest" else _train_host
    out = fn(job, p, task, m, channel, backend, timings, progress, arbiter)
    out["metrics"]["data_file"] = Path(m.source).name   # says when the bundled sample was used
    return out


def _run(role: str, job: dict[str, Any], channel: Channel, backend: Backend | None,
         data_dir: str | None, progress: bool, task: str, with_psi: bool) -> dict:
    timings = Timings()
    ids = None
    result: dict = {}
    if with_psi:
        if role != "arbiter":
            own = psi.party_ids(role, job, data_dir)
            ids = psi.intersect(role, job, channel, backend, own, timings)
            result["intersection_size"] = len(ids)
        else:
            ids = []
    out = train(role, job, channel, backend, task, ids, data_dir, progress, timings)
    result.update({"role": role, "metrics": out["metrics"], "model": out["model"],
                   "timings": timings.rows()})
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

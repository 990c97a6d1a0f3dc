"""Vertical (hetero) logistic and linear regression over Paillier, two-party or with an arbiter.

The guest holds labels y and features X_g (plus the intercept column), the host features X_h of the
same aligned rows.  Per mini-batch B, with z_g = X_g w_g, z_h = X_h w_h and the residual

    LR   (Taylor expansion of the log loss at 0, y± = 2y − 1):  d = 0.25·(z_g + z_h) − 0.5·y±
    LinR (squared loss / 2):                                     d = z_g + z_h − y

each party needs its gradient X^T d / |B| + l2·w without learning the other's z, y or gradient.

**Two parties, no third party** (UniFL Fig. 2 / its ref. [9]); each party has its own key pair,
guest G and host H:

1. host -> guest  [[z_h]]_H                                   (O1)
   guest -> host  [[u]]_G,  u = 0.25·z_g − 0.5·y±  (LinR: z_g − y)   (O1)
2. guest:  [[d]]_H = 0.25·[[z_h]]_H + u   (LinR: [[z_h]]_H + u)        (O4, O3)
   host:   [[d]]_G = [[u]]_G + 0.25·z_h   (LinR: + z_h)               (O3)
3. each:   [[X^T d]] (O5), viewed as raw integers at its fixed-point scale s, plus a mask R of
           bits(bound) + ``mask_bits`` uniform bits from ``secrets`` (statistically hiding the
           gradient; integer domain, so the owner removes it exactly), re-randomised (obfuscate)
           and sent to the key owner -- the other party.
4. each:   decrypts the peer's masked gradient (O2) and returns the integers; the owner subtracts R
           and scales by 2^-s.

Each party sees only the other's ciphertexts and a masked gradient, never z, y or d in clear.

**With an arbiter** (FLASH A.2, FATE's coordinated LR/LinR): the arbiter generates the key pair A
and sends the public key; host -> guest [[z_h]]_A; guest -> host [[d]]_A (re-randomised); both
compute masked [[X^T d + R]]_A and the arbiter decrypts them and returns the masked integers.

**Evaluation** (guest): the host sends z_h of the held-out rows in plaintext, as in FATE's
prediction (the guest then computes σ(z_g + z_h) for AUC, or z for R²); training rows are never
revealed this way.

Early stop: after each epoch the host sends ||Δw_h||² (its weight change over the epoch) and the
guest stops when sqrt(||Δw_g||² + ||Δw_h||²) < tol, deterministic so the plaintext reference
(:func:`unifl.app.reference.vertical_reference`) takes the same decision.  Each party writes a
per-epoch JSON checkpoint (weights, epoch, batch-schedule state) and can resume from it.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ConfigError, SerializationError, TransportError
from ..phe_sdk import EncryptedArray, paillier
from .channel import Channel
from .data import (TASKS, load_party, sorted_ids, standardize, subsample_ids, train_test_split)
from .metrics import r2_score, roc_auc, sigmoid
from .reference import batches
from .timing import Timings, progress_bar

DEFAULT_MASK_BITS = 80


@dataclass
class VerticalParams:
    """Hyper-parameters of vertical LR/LinR (job ``params``)."""

    epochs: int = 10
    batch_size: int = 64            # <= 0: full batch
    learning_rate: float = 0.15
    l2: float = 0.0
    tol: float | None = 1e-4        # early stop on the epoch's weight change; None: never
    fit_intercept: bool = True
    test_fraction: float = 0.2
    max_rows: int | None = None     # deterministic subsample of the aligned rows
    mask_bits: int = DEFAULT_MASK_BITS
    checkpoint_dir: str | None = None
    resume: bool = False

    @classmethod
    def from_job(cls, params: dict) -> "VerticalParams":
        known = set(cls.__dataclass_fields__)
        extra = {"drop_fraction", "rsa_bits"}
        bad = set(params) - known - extra
        if bad:
            raise ConfigError(f"job params: unknown field(s) {sorted(bad)} for vertical "
                              f"regression (allowed: {sorted(known | extra)})")
        p = cls(**{k: v for k, v in params.items() if k in known})
        if p.epochs < 0 or p.learning_rate <= 0 or p.l2 < 0 or p.mask_bits < 40:
            raise ConfigError("job params: epochs >= 0, learning_rate > 0, l2 >= 0 and "
                              "mask_bits >= 40 are required")
        return p


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
def mask_gradient(enc: EncryptedArray, mask_bits: int) -> tuple[EncryptedArray, list[int], int]:
    """[[v + R]] as raw integers (scale 0), re-randomised; returns (masked, R, scale of v).

    R_i is uniform in [0, 2^(bits(bound) + mask_bits)) from ``secrets``, so v + R reveals v only
    with statistical distance about 2^-mask_bits."""
    raw = EncryptedArray(enc.public_key, enc.limbs, enc.shape, 0, enc.bound, enc.backend)
    width = enc.bound.bit_length() + mask_bits
    r = [secrets.randbits(width) for _ in range(enc.size)]
    plain = np.empty(enc.shape, dtype=object)
    plain.reshape(-1)[:] = r
    return (raw + plain).obfuscate(), r, enc.scale_bits


def unmask_gradient(values, r: list[int], scale_bits: int) -> np.ndarray:
    """(v + R − R)·2^-scale as float64."""
    vals = [int(v) for v in values]
    if len(vals) != len(r):
        raise TransportError(f"masked gradient has {len(vals)} values, expected {len(r)}")
    return np.array([math.ldexp(v - m, -scale_bits) if abs(v - m) < (1 << 1000)
                     else (v - m) / (1 << scale_bits) for v, m in zip(vals, r)])


def decrypt_masked(arr: EncryptedArray, sk: paillier.PrivateKey) -> list[int]:
    """The key owner's step 4: the masked integers to return."""
    if arr.scale_bits != 0:
        raise SerializationError("masked gradients travel at scale 0")
    return [int(v) for v in arr.decrypt(sk).reshape(-1)]


# ------------------------------------------------------------------ checkpoints
def _checkpoint_path(p: VerticalParams, job: dict, role: str) -> Path | None:
    if not p.checkpoint_dir:
        return None
    return Path(p.checkpoint_dir) / f"{job['job_id']}_{job['algorithm']}_{role}.json"


def save_checkpoint(path: Path | None, w: np.ndarray, epoch: int, seed: int, stopped: bool) -> None:
    """Weights after ``epoch`` completed epochs, and the batch-schedule state (seed, next epoch)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"unifl_checkpoint": 1, "epoch": epoch, "weights": w.tolist(),
                               "rng": {"seed": seed, "next_epoch": epoch}, "stopped": stopped}))
    os.replace(tmp, path)  # atomic: a crash never leaves a half-written checkpoint


def load_checkpoint(path: Path | None, dim: int, seed: int) -> tuple[np.ndarray, int, bool] | None:
    if path is None or not path.is_file():
        return None
    try:
        obj = json.loads(path.read_text())
        w = np.array(obj["weights"], dtype=np.float64)
        epoch, stopped = int(obj["epoch"]), bool(obj["stopped"])
        ck_seed = int(obj["rng"]["seed"])
    except (ValueError, KeyError, TypeError) as exc:
        raise SerializationError(f"checkpoint {path} is malformed: {exc}") from exc
    if w.shape != (dim,) or ck_seed != seed:
        raise ConfigError(f"checkpoint {path} belongs to another model (shape {w.shape}, seed "
                          f"{ck_seed}); expected ({dim},), seed {seed}")
    return w, epoch, stopped


# ------------------------------------------------------------------ the parties
def _ids_digest(ids: list[str]) -> str:
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def _check_alignment(role: str, peer: str, channel: Channel, ids: list[str]) -> None:
    """Without a PSI step both parties must hold the same ids: compare digests of the sorted ids."""
    channel.send(peer, "vfl/ids_digest", _ids_digest(ids))
    theirs = channel.recv(peer, "vfl/ids_digest")
    if theirs != _ids_digest(ids):
        raise ConfigError(f"{role}: the parties' ids differ; run PSI first (algorithm psi+vlr)")


def _train_guest(job, p, task, m: PartyMatrices, channel: Channel, be, t: Timings, progress,
                 arbiter: bool) -> dict:
    seed = job["seed"]
    y = m.y_train
    n, dim = m.X_train.shape
    ck = _checkpoint_path(p, job, "guest")
    w, start, stopped = np.zeros(dim), 0, False
    if p.resume and (loaded := load_checkpoint(ck, dim, seed)) is not None:
        w, start, stopped = loaded
    channel.send("host", "vfl/start", {"epoch": start, "stopped": stopped, "n": n})
    if arbiter:
        pk_a = channel.recv("arbiter", "vfl/pk")
        pk_own = sk_own = pk_h = None
    else:
        with t.subtask("VFL: Paillier key generation", "keygen"):
            with t.crypto():
                pk_own, sk_own = paillier.keygen(job["key_bits"])
        channel.send("host", "vfl/pk", pk_own)
        pk_h = channel.recv("host", "vfl/pk")
    total = sum(len(batches(n, p.batch_size, seed, e)) for e in range(start, p.epochs))
    epoch = start
    with progress_bar(total, f"guest {job['algorithm']}", progress) as advance:
        for epoch in range(start, p.epochs):
            if stopped:
                break
            w0 = w.copy()
            plan = batches(n, p.batch_size, seed, epoch)
            if arbiter:
                channel.send("arbiter", "vfl/plan", {"epoch": epoch, "batches": len(plan),
                                                     "stop": False})
            for bi, b in enumerate(plan):
                tag = f"vfl/e{epoch}/b{bi}"
                Xb = m.X_train[b]
                zg = Xb @ w
                u = 0.25 * zg - 0.5 * (2.0 * y[b] - 1.0) if task == "lr" else zg - y[b]
                if not arbiter:
                    with t.subtask("VFL: encrypt forward", "O1 enc"):
                        with t.crypto():
                            enc_u = EncryptedArray.encrypt(pk_own, u, backend=be,
                                                           private_key=sk_own)
                    channel.send("host", f"{tag}/u", enc_u)
                enc_zh = channel.recv("host", f"{tag}/zh")
                with t.subtask("VFL: encrypted residual", "O4 mul, O3 add"):
                    with t.crypto():
                        enc_d = (enc_zh * 0.25 if task == "lr" else enc_zh) + u
                        if arbiter:
                            enc_d_out = enc_d.obfuscate()
                if arbiter:
                    channel.send("host", f"{tag}/d", enc_d_out)
                with t.subtask("VFL: encrypted gradient & mask", "O5 matmul, O3 add, O1 obfuscate"):
                    with t.crypto():
                        masked, r, scale = mask_gradient(Xb.T @ enc_d, p.mask_bits)
                channel.send("arbiter" if arbiter else "host", f"{tag}/masked_g", masked)
                if not arbiter:
                    peer_masked = channel.recv("host", f"{tag}/masked_h")
                    with t.subtask("VFL: decrypt peer's masked gradient", "O2 dec"):
                        with t.crypto():
                            vals = decrypt_masked(peer_masked, sk_own)
                    channel.send("host", f"{tag}/plain_h", vals)
                back = channel.recv("arbiter" if arbiter else "host", f"{tag}/plain_g")
                with t.subtask("VFL: unmask & update", "plaintext"):
                    grad = unmask_gradient(back, r, scale) / len(b) + p.l2 * m.l2_mask * w
                    w = w - p.learning_rate * grad
                advance(1)
            dh2 = float(channel.recv("host", f"vfl/e{epoch}/dw2"))
            change = math.sqrt(float(((w - w0) ** 2).sum()) + dh2)
            stopped = p.tol is not None and change < p.tol
            channel.send("host", f"vfl/e{epoch}/stop", stopped)
            save_checkpoint(ck, w, epoch + 1, seed, stopped)
            epoch += 1
    if arbiter:
        channel.send("arbiter", "vfl/plan", {"epoch": epoch, "batches": 0, "stop": True})
    with t.subtask("VFL: evaluate (guest)", "plaintext"):
        zh_test = np.asarray(channel.recv("host", "vfl/zh_test"), dtype=np.float64)
        z = m.X_test @ w + zh_test
        metrics = ({"auc": roc_auc(m.y_test, sigmoid(z))} if task == "lr"
                   else {"r2": r2_score(m.y_test, z)})
    metrics.update({"epochs": int(epoch), "stopped_early": bool(stopped), "train_rows": int(n),
                    "test_rows": int(len(m.X_test))})
    return {"metrics": metrics, "model": {"weights": w.tolist(), "features": m.feature_names}}


def _train_host(job, p, task, m: PartyMatrices, channel: Channel, be, t: Timings, progress,
                arbiter: bool) -> dict:
    seed = job["seed"]
    n, dim = m.X_train.shape
    ck = _checkpoint_path(p, job, "host")
    w, start, stopped = np.zeros(dim), 0, False
    if p.resume and (loaded := load_checkpoint(ck, dim, seed)) is not None:
        w, start, stopped = loaded
    g_start = channel.recv("guest", "vfl/start")
    if (g_start["epoch"], g_start["stopped"], g_start["n"]) != (start, stopped, n):
        raise ConfigError(f"host: guest starts at epoch {g_start['epoch']} with {g_start['n']} "
                          f"rows, host at epoch {start} with {n}: checkpoints or data differ")
    if arbiter:
        pk_own = channel.recv("arbiter", "vfl/pk")
        sk_own = pk_g = None
    else:
        with t.subtask("VFL: Paillier key generation", "keygen"):
            with t.crypto():
                pk_own, sk_own = paillier.keygen(job["key_bits"])
        channel.send("guest", "vfl/pk", pk_own)
        pk_g = channel.recv("guest", "vfl/pk")
    total = sum(len(batches(n, p.batch_size, seed, e)) for e in range(start, p.epochs))
    with progress_bar(total, f"host {job['algorithm']}", progress) as advance:
        for epoch in range(start, p.epochs):
            if stopped:
                break
            w0 = w.copy()
            for bi, b in enumerate(batches(n, p.batch_size, seed, epoch)):
                tag = f"vfl/e{epoch}/b{bi}"
                Xb = m.X_train[b]
                zh = Xb @ w
                with t.subtask("VFL: encrypt forward", "O1 enc"):
                    with t.crypto():
                        enc_zh = EncryptedArray.encrypt(pk_own, zh, backend=be, private_key=sk_own)
                channel.send("guest", f"{tag}/zh", enc_zh)
                if arbiter:
                    enc_d = channel.recv("guest", f"{tag}/d")
                else:
                    enc_u = channel.recv("guest", f"{tag}/u")
                    with t.subtask("VFL: encrypted residual", "O3 add"):
                        with t.crypto():
                            enc_d = enc_u + (0.25 * zh if task == "lr" else zh)
                if enc_d.public_key != (pk_own if arbiter else pk_g) or enc_d.shape != (len(b),):
                    raise TransportError("host: residual under an unexpected key or shape")
                with t.subtask("VFL: encrypted gradient & mask", "O5 matmul, O3 add, O1 obfuscate"):
                    with t.crypto():
                        masked, r, scale = mask_gradient(Xb.T @ enc_d, p.mask_bits)
                channel.send("arbiter" if arbiter else "guest", f"{tag}/masked_h", masked)
                if not arbiter:
                    peer_masked = channel.recv("guest", f"{tag}/masked_g")
                    with t.subtask("VFL: decrypt peer's masked gradient", "O2 dec"):
                        with t.crypto():
                            vals = decrypt_masked(peer_masked, sk_own)
                    channel.send("guest", f"{tag}/plain_g", vals)
                back = channel.recv("arbiter" if arbiter else "guest", f"{tag}/plain_h")
                with t.subtask("VFL: unmask & update", "plaintext"):
                    grad = unmask_gradient(back, r, scale) / len(b) + p.l2 * w
                    w = w - p.learning_rate * grad
                advance(1)
            channel.send("guest", f"vfl/e{epoch}/dw2", float(((w - w0) ** 2).sum()))
            stopped = bool(channel.recv("guest", f"vfl/e{epoch}/stop"))
            save_checkpoint(ck, w, epoch + 1, seed, stopped)
    channel.send("guest", "vfl/zh_test", m.X_test @ w)
    return {"metrics": {"train_rows": int(n)}, "model": {"weights": w.tolist(),
                                                         "features": m.feature_names}}


def _serve_arbiter(job, channel: Channel, be, t: Timings) -> dict:
    """Key owner of the coordinated variant: decrypts masked gradients, sees nothing else."""
    with t.subtask("VFL: Paillier key generation", "keygen"):
        with t.crypto():
            pk, sk = paillier.keygen(job["key_bits"])
    channel.send("guest", "vfl/pk", pk)
    channel.send("host", "vfl/pk", pk)
    while True:
        plan = channel.recv("guest", "vfl/plan")
        if plan["stop"]:
            break
        epoch = int(plan["epoch"])
        for bi in range(int(plan["batches"])):
            tag = f"vfl/e{epoch}/b{bi}"
            for party, src_tag, dst_tag in (("guest", "masked_g", "plain_g"),
                                            ("host", "masked_h", "plain_h")):
                arr = channel.recv(party, f"{tag}/{src_tag}")
                if arr.public_key != pk:
                    raise TransportError(f"arbiter: {party}'s gradient is under another key")
                with t.subtask("VFL: decrypt masked gradients", "O2 dec"):
                    with t.crypto():
                        vals = decrypt_masked(arr, sk)
                channel.send(party, f"{tag}/{dst_tag}", vals)
    return {"metrics": {}, "model": {}}


def train(role: str, job: dict, channel: Channel, backend, task: str, ids: list[str] | None,
          data_dir: str | None, progress: bool, timings: Timings) -> dict:
    """This party's side of vertical LR ("lr") or LinR ("linr") on the rows ``ids``
    (None: the party's own ids, checked equal to the peer's)."""
    p = VerticalParams.from_job(job["params"])
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
    return fn(job, p, task, m, channel, backend, timings, progress, arbiter)


def _run(role, job, channel, backend, data_dir, progress, task, with_psi) -> dict:
    timings = Timings()
    ids = None
    result: dict = {}
    if with_psi:
        from . import psi
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


def run_lr(role, job, channel, backend, *, data_dir=None, progress=True) -> dict:
    """Job entry point "vlr"."""
    return _run(role, job, channel, backend, data_dir, progress, "lr", False)


def run_linr(role, job, channel, backend, *, data_dir=None, progress=True) -> dict:
    """Job entry point "vlinr"."""
    return _run(role, job, channel, backend, data_dir, progress, "linr", False)


def run_psi_lr(role, job, channel, backend, *, data_dir=None, progress=True) -> dict:
    """Job entry point "psi+vlr": PSI on the ids, then vertical LR on the intersection."""
    return _run(role, job, channel, backend, data_dir, progress, "lr", True)


def run_psi_linr(role, job, channel, backend, *, data_dir=None, progress=True) -> dict:
    """Job entry point "psi+vlinr"."""
    return _run(role, job, channel, backend, data_dir, progress, "linr", True)

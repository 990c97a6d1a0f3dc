"""Horizontal (homo) logistic regression: FedAvg with an aggregator summing encrypted weights
(FLASH appendix A.1).

Clients guest and host hold rows of the same 30 features (breast_homo_{guest,host}); the arbiter
is the aggregator.  The guest generates a Paillier key pair and gives it to the other client: the
private key travels guest -> host only, through ``Channel.send_private_key``, which refuses
(:class:`~unifl.core.errors.InsecureTransportError`) unless the transport is mutually authenticated TLS;
both clients check that before anything else, so over an insecure link the job stops before a key
is even generated.  The aggregator receives the public key alone and never sees a model in clear.
Each round r:

1. client k trains locally from the global w (mini-batch SGD on the exact logistic loss, batches
   seeded by (seed, k, r)) and sends [[n_k · w_k]] (O1) and its row count n_k;
2. the aggregator sums the ciphertexts (O3) and returns [[Σ n_k w_k]] and Σ n_k;
3. each client decrypts (O2): w = Σ n_k w_k / Σ n_k.

The guest reports the AUC on breast_homo_test.  The result equals
:func:`unifl.app.reference.horizontal_reference` up to the fixed-point resolution: models travel
as round(n_k·w_k·2^s) with s = ``scale_bits`` (default 40).  After the key exchange the three
parties compare their scales (a ConfigError when they differ), and the aggregator adds only models
under the shared key, of one shape, at that scale.
The FATE files are already standardised, so the clients use the features as they are (a shared
standardisation would itself need a secure aggregation of means and variances).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.backend import Backend
from ..core.errors import (ConfigError, InsecureTransportError, KeyMismatchError, ProtocolViolation,
                           TransportError, WeakKeyError)
from ..phe_sdk import EncryptedArray, paillier
from .ahead import key_pair, key_pair_ahead
from .channel import Channel
from .data import PartyData, load_party
from .metrics import roc_auc, sigmoid
from .model import local_sgd
from .params import HorizontalParams, check_peer_scale, params_of
from .timing import Timings, progress_bar

__all__ = ["HorizontalParams", "client_matrix", "run"]

CLIENT_INDEX = {"guest": 0, "host": 1}
PARTIES = ("guest", "host", "arbiter")


def _agree_scale(role: str, channel: Channel, p: HorizontalParams) -> None:
    """Every party tells the two others its fixed-point scale and checks theirs (ConfigError when
    they differ): the clients encrypt and decode at it, the aggregator adds only models at it."""
    others = [r for r in PARTIES if r != role]
    for other in others:
        channel.send(other, "hfl/scale_bits", int(p.scale_bits))
    for other in others:
        check_peer_scale(role, other, p.scale_bits, channel.recv(other, "hfl/scale_bits"))


def client_matrix(data: PartyData) -> tuple[np.ndarray, np.ndarray]:
    """Features with an intercept column, and labels."""
    if data.y is None:
        raise ConfigError(f"hlr: {data.source} has no label column (every client holds labels)")
    return np.hstack([data.X, np.ones((len(data.ids), 1))]), data.y


def _check_aggregate(agg: object, pk: paillier.PublicKey, shape: tuple, scale: int) -> None:
    """What the clients decrypt must be the model-shaped sum under the shared key, at the scale
    the clients encrypt at; anything else is refused before decryption."""
    if not isinstance(agg, dict) or not isinstance(agg.get("w"), EncryptedArray) \
            or isinstance(agg.get("n"), bool) or not isinstance(agg.get("n"), int):
        raise ProtocolViolation("hlr: the aggregate must be {'n': int, 'w': encrypted array}")
    w = agg["w"]
    if w.public_key != pk:
        raise KeyMismatchError("hlr: the aggregate is not under the shared key")
    if w.shape != shape or w.scale_bits != scale or agg["n"] <= 0:
        raise ProtocolViolation(f"hlr: aggregate of shape {w.shape} at scale 2^-{w.scale_bits} "
                                f"with n={agg['n']}; expected shape {shape}, scale "
                                f"2^-{scale}, n > 0")


def _client(role: str, job: dict[str, Any], p: HorizontalParams, channel: Channel,
            be: Backend | None, t: Timings, data_dir: str | None, progress: bool) -> dict:
    other = "host" if role == "guest" else "guest"
    if not channel.mutually_authenticated:
        # the clients share the private key: refuse the job before a key exists
        raise InsecureTransportError(
            f"hlr {role}: the clients exchange the Paillier private key, which needs a mutually "
            f"authenticated TLS transport; {type(channel.transport).__name__} is not (configure "
            "network.tls for every party)")
    # the guest makes the clients' key pair while it reads its data
    key = key_pair_ahead(int(job["key_bits"]), role) if role == "guest" else None
    X, y = client_matrix(load_party(job["dataset"], role, data_dir, kind="homo"))
    if role == "guest":
        pk, sk = key_pair(key, job["key_bits"], t, "HFL: Paillier key generation")
        channel.send("arbiter", "hfl/pk", pk)
        channel.send(other, "hfl/pk", pk)
        channel.send_private_key(other, "hfl/sk", sk)  # client to client only, mutual TLS only
    else:
        pk = channel.recv("guest", "hfl/pk")
        if not isinstance(pk, paillier.PublicKey):
            raise TransportError(f"hlr: expected the shared public key, got {type(pk).__name__}")
        # the job's key size, not only the channel's floor (a party's key_bits may be lower)
        if pk.n.bit_length() < int(job["key_bits"]):
            raise WeakKeyError(f"hlr {role}: the guest's shared key has {pk.n.bit_length()} bits; "
                               f"the job requires key_bits = {job['key_bits']}")
        shared = channel.recv_private_key("guest", "hfl/sk")
        if not isinstance(shared, paillier.PrivateKey) or shared.public_key != pk:
            raise KeyMismatchError("hlr: the shared private key does not match the public key")
        sk = shared
    _agree_scale(role, channel, p)
    w = np.zeros(X.shape[1])
    k = CLIENT_INDEX[role]
    with progress_bar(p.rounds, f"{role} hlr", progress) as advance:
        for r in range(p.rounds):
            with t.subtask("HFL: local training", "plaintext"):
                wk = local_sgd(X, y, w, local_epochs=p.local_epochs, batch_size=p.batch_size,
                               learning_rate=p.learning_rate, l2=p.l2, seed=job["seed"], round_=r,
                               client=k)
            with t.subtask("HFL: encrypt model", "O1 enc"):
                with t.crypto():
                    enc = EncryptedArray.encrypt(pk, len(y) * wk, scale_bits=p.scale_bits,
                                                 backend=be, private_key=sk)
            channel.send("arbiter", f"hfl/r{r}/model", {"n": len(y), "w": enc})
            agg = channel.recv("arbiter", f"hfl/r{r}/aggregate")
            _check_aggregate(agg, pk, (X.shape[1],), p.scale_bits)
            with t.subtask("HFL: decrypt aggregate", "O2 dec"):
                with t.crypto():
                    total = agg["w"].decrypt(sk)
            w = total / int(agg["n"])
            advance(1)
    out: dict[str, dict[str, Any]] = {"model": {"weights": w.tolist()},
                                      "metrics": {"train_rows": int(len(y))}}
    if role == "guest":
        Xt, yt = client_matrix(load_party(job["dataset"], "test", data_dir, kind="homo"))
        with t.subtask("HFL: evaluate (guest)", "plaintext"):
            out["metrics"]["auc"] = roc_auc(yt, sigmoid(Xt @ w))
        out["metrics"]["test_rows"] = int(len(yt))
    return out


def _aggregator(job: dict[str, Any], p: HorizontalParams, channel: Channel, be: Backend | None,
                t: Timings) -> dict:
    pk = channel.recv("guest", "hfl/pk")
    if not isinstance(pk, paillier.PublicKey):
        raise ProtocolViolation(f"aggregator: expected the shared public key, got "
                                f"{type(pk).__name__}")
    _agree_scale("arbiter", channel, p)
    shape = None
    for r in range(p.rounds):
        parts = [channel.recv(c, f"hfl/r{r}/model") for c in ("guest", "host")]
        for c, part in zip(("guest", "host"), parts):
            if not isinstance(part, dict) or not isinstance(part.get("w"), EncryptedArray) or \
                    part["w"].public_key != pk:
                raise TransportError("aggregator: a client's model is not under the shared key")
            n = part.get("n")
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                raise ProtocolViolation(f"aggregator: {c}'s row count must be a positive int")
            # adding arrays of two scales would silently rescale one; of two shapes, broadcast
            if part["w"].scale_bits != p.scale_bits or part["w"].ndim != 1 or \
                    (shape is not None and part["w"].shape != shape):
                raise ProtocolViolation(f"aggregator: {c}'s model has shape {part['w'].shape} "
                                        f"at scale 2^-{part['w'].scale_bits}; expected one "
                                        f"vector of the clients' common shape at 2^-"
                                        f"{p.scale_bits}")
            shape = part["w"].shape
        with t.subtask("HFL: aggregate encrypted models", "O3 add"):
            with t.crypto():
                total = parts[0]["w"] + parts[1]["w"]
        msg = {"n": int(parts[0]["n"]) + int(parts[1]["n"]), "w": total}
        for c in ("guest", "host"):
            channel.send(c, f"hfl/r{r}/aggregate", msg)
    return {"model": {}, "metrics": {}}


def run(role: str, job: dict, channel: Channel, backend: Backend | None, *,
        data_dir: str | None = None, progress: bool = True) -> dict:
    """Job entry point "hlr" (parties guest, host, arbiter)."""
    if "arbiter" not in job["parties"]:
        raise ConfigError("hlr needs parties [guest, host, arbiter] (the arbiter aggregates)")
    if job["dataset"] != "breast" and "/" not in str(job["dataset"]):
        raise ConfigError("hlr has horizontal data for 'breast' only (breast_homo_*)")
    p = params_of(job)
    if not isinstance(p, HorizontalParams):
        raise ConfigError(f"algorithm {job['algorithm']!r} is not hlr")
    t = Timings()
    if role == "arbiter":
        out = _aggregator(job, p, channel, backend, t)
    else:
        out = _client(role, job, p, channel, backend, t, data_dir, progress)
    return {"role": role, **out, "timings": t.rows()}

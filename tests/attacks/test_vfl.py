"""The FL apps against a hostile peer: each test plays the deviating party (crafts its frames, its
claims, its decryption requests, its config) against the real protocol code of the honest party and
asserts the attempt is refused with a typed error, or that what it gets reveals nothing.

Attacks: a lying overflow bound to read the guest's features from the masked gradient (masks uniform
mod n); solving a short batch's gradient for the labels (batch schedule); sending the guest's own
[[u]] back for decryption (request checks); the private key over plaintext gRPC or smuggled through
the codec as text; an undersized key; a party stopped between checkpoint and acknowledgement.
"""

from __future__ import annotations

import json
import threading

import gmpy2
import numpy as np
import pytest

import unifl
from unifl.app import checkpoint, codec, reference, vertical
from unifl.app.alignment import ids_digest
from unifl.app.channel import Channel, LocalTransport, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import run_job, run_local, validate_job
from unifl.core.errors import (ConfigError, InsecureTransportError, PrivateKeyExposure,
                          ProtocolViolation, SerializationError, TransportError, WeakKeyError)
from unifl.phe_sdk import EncryptedArray, paillier, serialize

from tests.helpers.party import Party

BE = unifl.backend("native")
SEED = 7
D_GUEST, D_HOST = 11, 20         # breast: 10 guest features + intercept, 20 host features


def vjob(algorithm="vlr", parties=("guest", "host"), **params):
    base = {"epochs": 1, "batch_size": 64, "learning_rate": 0.15, "tol": None}
    base.update(params)
    return {"job_id": "atk", "algorithm": algorithm, "dataset": "breast", "parties": list(parties),
            "seed": SEED, "key_bits": 1024, "params": base}


@pytest.fixture(scope="module")
def host_keys():
    return paillier.keygen(1024)


# ------------------------------------------------------------------ a scripted hostile host
class HostileHost:
    """Plays the host of two-party vertical LR by hand against the real guest (run in a thread):
    the honest job-start steps, then whatever the test sends."""

    def __init__(self, job: dict, keys, claim_dim: int = D_HOST) -> None:
        self.job = validate_job(job)
        self.t = local_transports(("guest", "host"))
        self.ch = Channel(self.t["host"], 20, BE)
        self.guest_error: BaseException | None = None
        self.pk, self.sk = keys
        self.claim_dim = claim_dim
        self._th = threading.Thread(target=self._guest)
        self._th.start()

    def _guest(self) -> None:
        chan = Channel(self.t["guest"], 20, BE)
        try:
            run_job("guest", self.job, chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001 -- inspected by the test
            self.guest_error = exc
        finally:
            chan.close()

    def start(self) -> list[np.ndarray]:
        """Job start as an honest host would run it; returns epoch 0's batch plan."""
        ids = sorted_ids(load_party("breast", "host").ids)
        self.ch.send("guest", "vfl/ids_digest", ids_digest(ids))
        self.ch.recv("guest", "vfl/ids_digest")
        start = self.ch.recv("guest", "vfl/start")
        self.n, self.guest_dim = start["n"], start["dim"]
        self.ch.send("guest", "vfl/start", {"n": self.n, "n_test": start["n_test"],
                                            "dim": self.claim_dim,
                                            "batch_size": self.job["params"]["batch_size"],
                                            "chunk_rows": start["chunk_rows"],
                                            "scale_bits": 24,
                                            "residual_bound": start["residual_bound"],
                                            "epochs": []})
        self.pk_g = self.ch.recv("guest", "vfl/pk")
        self.ch.send("guest", "vfl/pk", self.pk)
        return reference.batches(self.n, self.job["params"]["batch_size"], SEED, 0,
                                 max(self.guest_dim, self.claim_dim))

    def recv_u(self, tag: str = "vfl/e0/b0") -> EncryptedArray:
        """The guest's [[u]] of a batch that is one chunk (its stream's end follows once the
        guest has the host's chunk: :meth:`send_zh` reads it)."""
        msg = self.ch.recv("guest", f"{tag}/u")
        assert msg["chunk"] == 0
        return msg["data"]

    def send_zh(self, arr: EncryptedArray, tag: str = "vfl/e0/b0") -> None:
        """``arr`` as the host's [[z_h]] of a one-chunk batch (the chunk, then the end), and the
        end of the guest's [[u]] stream."""
        self.ch.send("guest", f"{tag}/zh", {"chunk": 0, "rows": [0, arr.shape[0]], "data": arr})
        try:
            self.ch.send("guest", f"{tag}/zh", {"end": 1})
            assert self.ch.recv("guest", f"{tag}/u", timeout=5) == {"end": 1}
        except TransportError:       # the guest refused the chunk and stopped: the test reads why
            pass

    def finish(self) -> BaseException | None:
        self.ch.close()
        self._th.join(30)
        assert not self._th.is_alive()
        return self.guest_error


def guest_batch_features(b: np.ndarray) -> np.ndarray:
    """The guest's training features of batch ``b`` (what the attack tries to read)."""
    p = vertical.VerticalParams.from_job(vjob()["params"])
    ids = sorted_ids(load_party("breast", "guest").ids)
    return vertical.prepare("guest", "breast", ids, p, SEED, None).X_train[b]


def read_high_bits(residues: list[int], n: int, shift: int) -> np.ndarray:
    """The lying-bound attack's read-out: centred residue / 2^shift."""
    return np.array([float((v - n if v > n // 2 else v) / (1 << shift)) for v in residues])


# ------------------------------------------------------------------ masks uniform mod n
def test_lying_bound_does_not_shrink_the_mask(host_keys):
    """The host puts 2^200 at row j of its [[z_h]] and claims an overflow bound of 1.  With a mask
    sized from that bound, the guest's gradient Xᵀd carries X_g[j]·2^(200+48) far above the mask,
    and the host reads the guest's feature row from the high bits of what it decrypts.  The mask is
    uniform mod n: every decrypted value is a full-size residue and the read-out is noise."""
    atk = HostileHost(vjob(), host_keys)
    plan = atk.start()
    b0, j = plan[0], 3
    atk.recv_u()
    lure = np.zeros(len(b0))
    lure[j] = 2.0 ** 200
    honest = EncryptedArray.encrypt(atk.pk, lure, backend=BE)
    liar = EncryptedArray(atk.pk, honest.limbs, honest.shape, honest.scale_bits, 1, BE)
    atk.send_zh(liar)
    masked = atk.ch.recv("guest", "vfl/e0/b0/masked_g")
    assert masked.shape == (D_GUEST,) and masked.scale_bits == 0
    residues = masked.decrypt_residues(atk.sk)
    atk.finish()
    n = atk.pk.n
    # what the lie would have exposed: scale 24 (z) + 24 (X), times the 2^200 lure
    stolen = read_high_bits(residues, n, 200 + 48)
    truth = guest_batch_features(b0)[j]
    assert not np.allclose(stolen, truth, atol=1e-3)
    # uniform mod n: a residue within n / 2^64 of 0 (centred) has probability about 2^-63 each;
    # a gradient masked from the lied bound is a small centred value
    assert all(min(v, n - v).bit_length() > n.bit_length() - 64 for v in residues)


def test_mask_and_unmask_are_exact_and_uniform(host_keys):
    pk, sk = host_keys
    enc = EncryptedArray.encrypt(pk, np.array([1.5, -2.25, 0.0, -(2.0 ** 40)]), backend=BE)
    masked, r, scale = vertical.mask_gradient(enc)
    assert scale == enc.scale_bits and masked.scale_bits == 0
    got = vertical.unmask_gradient(masked.decrypt_residues(sk), r, scale, pk.n)
    np.testing.assert_array_equal(got, [1.5, -2.25, 0.0, -(2.0 ** 40)])
    with pytest.raises(ProtocolViolation):     # a key owner that answers with a non-residue
        vertical.unmask_gradient([pk.n, 0, 0, 0], r, scale, pk.n)
    with pytest.raises(ProtocolViolation):     # or with the wrong count
        vertical.unmask_gradient([0, 0, 0], r, scale, pk.n)


def test_peer_frame_scale_is_not_trusted(host_keys):
    """A [[z_h]] at a scale the peer picked would set the scale the guest decodes its gradient
    with: refused before any arithmetic."""
    atk = HostileHost(vjob(), host_keys)
    plan = atk.start()
    atk.recv_u()
    atk.send_zh(EncryptedArray.encrypt(atk.pk, np.zeros(len(plan[0])), scale_bits=0, backend=BE))
    err = atk.finish()
    assert isinstance(err, ProtocolViolation) and "scale" in str(err)


# ------------------------------------------------------------------ short batches
def solve_residual(X: np.ndarray, grad: np.ndarray) -> np.ndarray:
    """The honest-but-curious attack: the minimum-norm d with Xᵀd = grad.  When the batch has no
    more rows than X has columns (and full row rank), this *is* the peer's residual."""
    return np.linalg.lstsq(X.T, grad, rcond=None)[0]


def test_short_batch_attack_and_schedule():
    p = vertical.VerticalParams.from_job(vjob()["params"])
    ids = sorted_ids(load_party("breast", "guest").ids)
    g = vertical.prepare("guest", "breast", ids, p, SEED, None)
    h = vertical.prepare("host", "breast", ids, p, SEED, None)
    n = len(g.y_train)
    rng = np.random.default_rng(1)
    wg, wh = rng.normal(size=D_GUEST) * 0.1, rng.normal(size=D_HOST) * 0.1

    def host_view(b):
        """What the host holds after batch b: its features, its z_h, its unmasked gradient."""
        d = g.X_train[b] @ wg + h.X_train[b] @ wh - 2 * (2 * g.y_train[b] - 1)      # d' (LR)
        return h.X_train[b], h.X_train[b] @ wh, h.X_train[b].T @ d, d

    # the schedule as it was: breast's 455 training rows in batches of 64 leave 7 rows at the end
    old = reference.batches(n, 64, SEED, 0)
    short = old[-1]
    assert len(short) == 7 <= D_HOST
    Xh, zh, grad, d = host_view(short)
    d_hat = solve_residual(Xh, grad)
    np.testing.assert_allclose(d_hat, d, atol=1e-8)                    # the residual, exactly
    labels = (zh - d_hat > 0).astype(float)        # 2y± = z_g + z_h − d', |z_g| small
    assert (labels == g.y_train[short]).mean() >= 0.85

    # the schedule now: no batch of any epoch has <= max(d_g, d_h) rows, and the same attack fails
    for epoch in range(20):
        plan = reference.batches(n, 64, SEED, epoch, reference.vertical_min_rows(D_GUEST, D_HOST))
        assert min(len(b) for b in plan) > D_HOST
        assert sorted(np.concatenate(plan).tolist()) == list(range(n))
    last = plan[-1]
    Xh, zh, grad, d = host_view(last)
    assert not np.allclose(solve_residual(Xh, grad), d, atol=1e-3)


class _Recording(LocalTransport):
    def __init__(self, role, hub, log):
        super().__init__(role, hub)
        self.log = log

    def send(self, dst, tag, data):
        self.log.append(tag)
        super().send(dst, tag, data)


def _run_parties(job: dict, transports: dict) -> dict:
    """Both (all) parties in threads; returns {role: exception or result}."""
    out: dict = {}

    def party(role):
        chan = Channel(transports[role], 10, BE)
        try:
            out[role] = run_job(role, job, chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001
            out[role] = exc
        finally:
            chan.close()

    ths = [threading.Thread(target=party, args=(r,)) for r in transports]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    return out


@pytest.mark.parametrize("params", [{"batch_size": 20}, {"batch_size": 11},
                                    {"batch_size": -1, "max_rows": 25}])
def test_batch_size_that_allows_solving_is_refused_by_both(params):
    """batch_size <= the host's 20 features, or a full batch of 20 rows: both parties refuse with a
    ConfigError naming the batch size and the feature counts, and no key or ciphertext is sent."""
    hub = local_transports()["guest"].hub
    log: list[str] = []
    ts = {r: _Recording(r, hub, log) for r in ("guest", "host")}
    out = _run_parties(vjob(**params), ts)
    for role in ("guest", "host"):
        assert isinstance(out[role], ConfigError), out[role]
        msg = str(out[role])
        assert "guest 11" in msg and "host 20" in msg
        assert ("batch_size 20" in msg or "batch_size 11" in msg or "full batch" in msg)
    assert not any(tag.endswith("/pk") or "/e0/" in tag for tag in log)


def test_arbiter_variant_uses_the_same_rule():
    with pytest.raises(ConfigError, match="host 20"):
        run_local(vjob(parties=("guest", "host", "arbiter"), batch_size=16), BE)
    with pytest.raises(ConfigError, match="guest 5 features"):
        reference.check_schedule(5, -1, 5, "guest 5 features with the intercept, host 3")


# ------------------------------------------------------------------ decryption requests
def test_host_sends_back_the_guests_u(host_keys):
    """The host returns the guest's [[u]] (its labels: u = −2y± in the first batch) as its
    'masked gradient': the wrong shape, refused before decryption."""
    atk = HostileHost(vjob(), host_keys)
    atk.start()
    enc_u = atk.recv_u()
    atk.send_zh(EncryptedArray.encrypt(atk.pk, np.zeros(enc_u.shape[0]), backend=BE))
    atk.ch.recv("guest", "vfl/e0/b0/masked_g")
    raw_u = EncryptedArray(enc_u.public_key, enc_u.limbs, enc_u.shape, 0, 1, BE)
    atk.ch.send("guest", "vfl/e0/b0/masked_h", raw_u)
    err = atk.finish()
    assert isinstance(err, ProtocolViolation) and "shape" in str(err)


def test_host_replays_a_slice_of_u_in_gradient_shape(host_keys):
    """The same, cut to the agreed gradient shape (20) and relabelled scale 0: the ciphertexts are
    the guest's own, refused by digest."""
    atk = HostileHost(vjob(), host_keys)
    atk.start()
    enc_u = atk.recv_u()
    atk.send_zh(EncryptedArray.encrypt(atk.pk, np.zeros(enc_u.shape[0]), backend=BE))
    atk.ch.recv("guest", "vfl/e0/b0/masked_g")
    part = enc_u[:D_HOST]
    atk.ch.send("guest", "vfl/e0/b0/masked_h",
                EncryptedArray(part.public_key, part.limbs, part.shape, 0, 1, BE))
    err = atk.finish()
    assert isinstance(err, ProtocolViolation) and "sent itself" in str(err)


def test_request_at_a_scale_or_under_a_key_not_agreed(host_keys):
    pk, sk = host_keys
    sent = vertical.SentCiphertexts()
    arr = EncryptedArray.encrypt(pk, np.arange(D_HOST), backend=BE)
    assert vertical.decrypt_masked(arr, sk, (D_HOST,), sent) == list(range(D_HOST))
    with pytest.raises(ProtocolViolation, match="scale"):
        vertical.decrypt_masked(EncryptedArray.encrypt(pk, np.ones(D_HOST), backend=BE), sk,
                                (D_HOST,), sent)
    with pytest.raises(ProtocolViolation, match="shape"):
        vertical.decrypt_masked(arr.reshape(4, 5), sk, (D_HOST,), sent)
    with pytest.raises(ProtocolViolation):
        vertical.decrypt_masked([1, 2, 3], sk, (D_HOST,), sent)


def test_documented_limit_rerandomised_combination_passes(host_keys):
    """What docs/app.md says remains without zero-knowledge proofs: a host that re-randomises part
    of [[u]] (or any linear combination of it) in the agreed shape gets it decrypted, in place of
    its own gradient for that batch: in the first batch (w = 0) that is −2y± of 20 rows."""
    atk = HostileHost(vjob(), host_keys)
    plan = atk.start()
    enc_u = atk.recv_u()
    atk.send_zh(EncryptedArray.encrypt(atk.pk, np.zeros(enc_u.shape[0]), backend=BE))
    atk.ch.recv("guest", "vfl/e0/b0/masked_g")
    part = enc_u[:D_HOST].obfuscate()
    atk.ch.send("guest", "vfl/e0/b0/masked_h",
                EncryptedArray(part.public_key, part.limbs, part.shape, 0, 1, BE))
    reply = atk.ch.recv("guest", "vfl/e0/b0/plain_h")
    atk.finish()
    n = atk.pk_g.n
    y = guest_labels(plan[0][:D_HOST])
    vals = reply["m"]
    got = np.array([(v - n if v > n // 2 else v) / 2.0 ** 24 for v in vals])
    np.testing.assert_array_equal(got, -2.0 * (2.0 * y - 1.0))


def guest_labels(rows: np.ndarray) -> np.ndarray:
    p = vertical.VerticalParams.from_job(vjob()["params"])
    ids = sorted_ids(load_party("breast", "guest").ids)
    return vertical.prepare("guest", "breast", ids, p, SEED, None).y_train[rows]


def test_arbiter_refuses_requests_outside_the_agreed_shape():
    """A guest asks the coordinating arbiter to decrypt a batch-length vector (e.g. [[z_h]]_A it
    received): not the guest's gradient shape, refused; announcing different dims to the arbiter
    than to the host is refused too."""
    t = local_transports(("guest", "host", "arbiter"))
    out: dict = {}

    def arbiter():
        chan = Channel(t["arbiter"], 10, BE)
        try:
            vertical._serve_arbiter(validate_job(vjob()), chan, BE, vertical.Timings())
        except BaseException as exc:  # noqa: BLE001
            out["err"] = exc
        finally:
            chan.close()

    th = threading.Thread(target=arbiter)
    th.start()
    g, h = Channel(t["guest"], 10, BE), Channel(t["host"], 10, BE)
    g.send("arbiter", "vfl/dims", {"guest": D_GUEST, "host": D_HOST})
    h.send("arbiter", "vfl/dims", {"guest": D_GUEST, "host": D_HOST})
    pk = g.recv("arbiter", "vfl/pk")
    h.recv("arbiter", "vfl/pk")
    g.send("arbiter", "vfl/plan", {"epoch": 0, "batches": 1, "stop": False})
    g.send("arbiter", "vfl/e0/b0/masked_g", EncryptedArray.encrypt(pk, np.zeros(64, np.int64),
                                                                   backend=BE))
    th.join(30)
    g.close()
    h.close()
    assert isinstance(out.get("err"), ProtocolViolation) and "shape" in str(out["err"])

    t = local_transports(("guest", "host", "arbiter"))
    th = threading.Thread(target=arbiter)
    out.clear()
    th.start()
    Channel(t["guest"], 10, BE).send("arbiter", "vfl/dims", {"guest": 64, "host": D_HOST})
    Channel(t["host"], 10, BE).send("arbiter", "vfl/dims", {"guest": D_GUEST, "host": D_HOST})
    th.join(30)
    t["guest"].close()
    t["host"].close()
    assert isinstance(out.get("err"), ProtocolViolation) and "different" in str(out["err"])


# ------------------------------------------------------------------ the private key
HLR_JOB = {"job_id": "h", "algorithm": "hlr", "dataset": "breast",
           "parties": ["guest", "host", "arbiter"], "seed": 1, "key_bits": 1024,
           "params": {"rounds": 1}}


def test_hlr_over_plaintext_grpc_refused_before_the_key_leaves():
    from unifl.app.transport.grpc_transport import GrpcTransport
    tr = GrpcTransport("guest", "127.0.0.1:0", {"host": "127.0.0.1:9", "arbiter": "127.0.0.1:9"},
                       "h", tls=None, timeout_s=2)
    try:
        chan = Channel(tr, 2, BE)
        with pytest.raises(InsecureTransportError, match="mutually authenticated"):
            run_job("guest", HLR_JOB, chan, BE, progress=False)
        _, sk = paillier.keygen(1024)
        with pytest.raises(InsecureTransportError):
            chan.send_private_key("host", "hfl/sk", sk)
        with pytest.raises(InsecureTransportError):
            chan.recv_private_key("host", "hfl/sk", timeout=0.1)
        assert tr.stats["bytes_sent"] == 0 and tr.stats["messages_sent"] == 0
    finally:
        tr.close()


class _NoClaim:
    """A transport that does not say whether it is authenticated: counts as insecure."""

    def __init__(self, inner):
        self.inner, self.role, self.stats = inner, inner.role, inner.stats

    def send(self, dst, tag, data):
        self.inner.send(dst, tag, data)

    def recv(self, src, tag, timeout=None):
        return self.inner.recv(src, tag, timeout)

    def close(self):
        self.inner.close()


def test_private_key_only_over_mutually_authenticated_transport(host_keys):
    _, sk = host_keys
    t = local_transports()
    insecure = Channel(_NoClaim(t["guest"]), 1, BE)
    with pytest.raises(InsecureTransportError):
        insecure.send_private_key("host", "k", sk)
    assert t["guest"].stats["bytes_sent"] == 0
    Channel(t["guest"], 1, BE).send_private_key("host", "k", sk)     # in-process: allowed
    assert Channel(t["host"], 1, BE).recv_private_key("guest", "k") == sk


def test_private_key_in_an_ordinary_message_is_refused_on_receipt(host_keys):
    """A peer that pushes a private key into an ordinary message (tag K where recv expects data)."""
    _, sk = host_keys
    data = codec.encode_private_key(sk)
    with pytest.raises(SerializationError, match="private key"):
        codec.decode(data)
    nested = codec.encode(["x"])[:5] + b"L\x01\x00\x00\x00" + data[5:]
    with pytest.raises(SerializationError, match="private key"):
        codec.decode(nested, allow_private_key=True)


def _smuggled(sk):
    text = serialize.key_to_json(sk)
    escaped = text.replace("paillier.private", "paillier\\u002eprivate")
    bare = json.dumps({"p": format(sk.p, "x"), "q": format(sk.q, "x")})
    return {
        "str": text, "bytes": text.encode(), "bytearray": bytearray(text.encode()),
        "nested dict": {"a": [{"b": ("x", text)}]},
        "dict key": {text: 1},
        "json in json": json.dumps({"wrapped": text}),
        "json in json in json": json.dumps(json.dumps({"k": text})),
        "escaped kind": escaped,
        "escaped kind in bytes": b"junk " + escaped.encode() + b" junk",
        "private fields only": bare,
        "private fields as a mapping": {"p": format(sk.p, "x"), "q": format(sk.q, "x")},
        "inside text": "key=" + text + ";",
    }


@pytest.mark.parametrize("case", list(_smuggled(paillier.keygen(1024)[1])))
def test_codec_refuses_smuggled_private_key(host_keys, case):
    _, sk = host_keys
    with pytest.raises(PrivateKeyExposure):
        codec.encode(_smuggled(sk)[case])


def test_codec_still_carries_public_keys_and_ordinary_text(host_keys):
    pk, sk = host_keys
    msg = {"pk": pk, "s": serialize.key_to_json(pk), "t": '{"a": 1, "p": 2}', "b": b"{[\"x\"]}"}
    back = codec.decode(codec.encode(msg))
    assert back["pk"] == pk and back["s"] == msg["s"] and back["b"] == msg["b"]
    with pytest.raises(PrivateKeyExposure):
        codec.encode(sk)
    from unifl.phe_sdk import rsa
    _, rsk = rsa.keygen(1024)
    with pytest.raises(PrivateKeyExposure):
        codec.encode([serialize.key_to_json(rsk)])


# ------------------------------------------------------------------ received-key floor
def test_undersized_keys_refused_before_any_primality_test(monkeypatch):
    pk, sk = paillier.keygen(1024)
    calls = []
    real = gmpy2.is_prime

    def spy(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(gmpy2, "is_prime", spy)
    t = local_transports()
    g = Channel(t["guest"], 1, BE)
    strict = Channel(t["host"], 1, BE, min_key_bits=2048)
    g.send("host", "pk", pk)
    with pytest.raises(WeakKeyError, match="2048"):
        strict.recv("guest", "pk")
    g.send_private_key("host", "sk", sk)
    with pytest.raises(WeakKeyError, match="2048"):
        strict.recv_private_key("guest", "sk")
    assert calls == []
    # control: at a 1024-bit floor the same private key is accepted, after its primality test
    lax = Channel(t["host"], 1, BE, min_key_bits=1024)
    g.send_private_key("host", "sk", sk)
    assert lax.recv_private_key("guest", "sk") == sk and calls


def test_vertical_refuses_peer_key_below_the_job_size(host_keys):
    """A host that answers a 2048-bit job with a 1024-bit key."""
    job = vjob()
    job["key_bits"] = 2048
    atk = HostileHost(job, host_keys)
    atk.start()
    err = atk.finish()
    assert isinstance(err, WeakKeyError) and "1024" in str(err)


# ------------------------------------------------------------------ checkpoints
class _StopAt(LocalTransport):
    """A party that stops (its process dies) when it is about to send ``tag``."""

    def __init__(self, role, hub, tag):
        super().__init__(role, hub)
        self.tag = tag

    def send(self, dst, tag, data):
        if tag == self.tag:
            raise RuntimeError("party stopped")
        super().send(dst, tag, data)


def _states(path):
    return sorted(s["epoch"] for s in json.loads(path.read_text())["states"])


@pytest.mark.parametrize("who,tag", [("guest", "vfl/e1/saved"), ("host", "vfl/e1/saved_ack")])
def test_stop_between_save_and_ack_then_resume(tmp_path, who, tag):
    params = {"epochs": 3, "batch_size": 40, "max_rows": 120}
    full = run_local(vjob(**params, checkpoint_dir=str(tmp_path / "full")), BE)
    ck = tmp_path / "ck"
    j = vjob(**params, checkpoint_dir=str(ck))
    hub = local_transports()["guest"].hub
    ts = {r: (_StopAt(r, hub, tag) if r == who else LocalTransport(r, hub))
          for r in ("guest", "host")}
    out = _run_parties(j, ts)
    assert isinstance(out[who], RuntimeError)
    assert isinstance(out["host" if who == "guest" else "guest"], TransportError)
    g_states, h_states = _states(ck / "atk_vlr_guest.json"), _states(ck / "atk_vlr_host.json")
    assert g_states == [1, 2] and h_states == ([0, 1] if who == "guest" else [1, 2])
    assert not list(ck.glob("*.tmp")) and not list(ck.glob(".*.tmp"))
    resumed = run_local(vjob(**params, checkpoint_dir=str(ck), resume=True), BE)
    for role in ("guest", "host"):
        assert resumed[role]["model"]["weights"] == full[role]["model"]["weights"]
    assert resumed["guest"]["metrics"]["epochs"] == 3


def test_checkpoint_is_fsynced(tmp_path, monkeypatch):
    import os
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    path = tmp_path / "c" / "x.json"
    checkpoint.save(path, np.ones(3), 2, 5, False, (1, np.zeros(3), False))
    assert len(synced) >= 2          # the file, then its directory
    states = checkpoint.load(path, 3, 5)
    assert sorted(states) == [1, 2] and list(states[2][0]) == [1.0, 1.0, 1.0]
    assert checkpoint.agree_start({1: False, 2: False}, {0: False, 1: False}) == 1
    with pytest.raises(ConfigError, match="checkpoints or data differ"):
        checkpoint.agree_start({2: False, 3: False}, {0: False, 1: False})


# ------------------------------------------------------------------ declared feature counts
def test_host_inflating_its_feature_count_is_refused():
    """A host that claims 63 features (just under the batch size of 64) would have the guest decrypt
    63 values per batch for it -- nearly the whole first batch's labels through a re-randomised
    combination of [[u]].  With the feature counts declared in the job, the claim is checked
    against the job, not taken from the peer, before any key exists."""
    job = validate_job(vjob(features={"guest": 10, "host": D_HOST}))
    t = local_transports(("guest", "host"))
    gch = Channel(t["guest"], 20, BE)
    guest = Party(lambda: run_job("guest", job, gch, BE, progress=False), gch)
    ch = Channel(t["host"], 20, BE)
    ids = sorted_ids(load_party("breast", "host").ids)
    ch.send("guest", "vfl/ids_digest", ids_digest(ids))
    ch.recv("guest", "vfl/ids_digest")
    start = ch.recv("guest", "vfl/start")
    assert start["dim"] == D_GUEST
    ch.send("guest", "vfl/start", {"n": start["n"], "n_test": start["n_test"], "dim": 63,
                                   "batch_size": 64, "chunk_rows": start["chunk_rows"],
                                   "scale_bits": 24, "epochs": []})
    guest.join()
    ch.close()
    assert isinstance(guest.error, ProtocolViolation), guest.error
    assert "claims 63 features" in str(guest.error) and "declares 20" in str(guest.error)


def test_declared_feature_counts_must_match_own_data():
    """A job whose declared counts do not match a party's own data is refused there (ConfigError),
    and a malformed declaration at load."""
    with pytest.raises(ConfigError, match="declares 19 features for host"):
        run_local(vjob(features={"guest": 10, "host": 19}), BE)
    for bad in ({"guest": 10}, {"guest": 10, "host": 0}, {"guest": 10, "host": True}, [10, 20]):
        with pytest.raises(ConfigError, match="features"):
            vertical.VerticalParams.from_job(vjob(features=bad)["params"])
    res = run_local(vjob(features={"guest": 10, "host": D_HOST}), BE)
    assert res["guest"]["metrics"]["auc"] > 0.9


def test_arbiter_checks_declared_counts_and_plan_messages():
    """The arbiter refuses feature counts that differ from the job's declaration, and a plan
    message that is not the protocol's (its loop bound comes from it)."""
    job = validate_job(vjob("vlr", ("guest", "host", "arbiter"), features={"guest": 10, "host": 20}))
    for dims, plan, match in (({"guest": 11, "host": 63}, None, "host announces 63"),
                              ({"guest": D_GUEST, "host": D_HOST}, {"stop": "no"}, "malformed plan")):
        t = local_transports(("guest", "host", "arbiter"))
        chans = {r: Channel(t[r], 20, BE) for r in ("guest", "host")}
        ach = Channel(t["arbiter"], 20, BE)
        arbiter = Party(lambda: run_job("arbiter", job, ach, BE, progress=False), ach)
        for r in ("guest", "host"):
            chans[r].send("arbiter", "vfl/dims", dims)
        if plan is not None:
            chans["guest"].recv("arbiter", "vfl/pk")
            chans["host"].recv("arbiter", "vfl/pk")
            chans["guest"].send("arbiter", "vfl/plan", plan)
        arbiter.join()
        for c in chans.values():
            c.close()
        assert isinstance(arbiter.error, ProtocolViolation) and match in str(arbiter.error), \
            arbiter.error

"""What each party of horizontal LR (FedAvg, two clients, an aggregator) learns.

* The aggregator holds no key: every model it receives is a ciphertext under the clients' shared
  key; in clear it gets the clients' row counts (and the key, the scale).
* With two clients the round's aggregate Σ n_k·w_k and Σ n_k give each client the other's
  sample-weighted local model of that round and its row count (sum minus its own): inherent in
  FedAvg with two clients, honest or not.  The test plays the host with its real code and reads
  the guest's local models round by round, exactly.
* A client decrypts only an aggregate under the shared key, of the model's shape, at the agreed
  scale, with n > 0: an aggregator that returns anything else is refused before decryption.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import unifl
from unifl.app import codec, horizontal
from unifl.app.channel import Channel, LocalTransport, local_transports
from unifl.app.data import load_party
from unifl.app.jobs import run_job, validate_job
from unifl.app.model import local_sgd
from unifl.core.errors import KeyMismatchError, ProtocolViolation
from unifl.phe_sdk import EncryptedArray, paillier

BE = unifl.backend("native")
ROUNDS = 2
SCALE = 40


def hjob() -> dict:
    return validate_job({"job_id": "h", "algorithm": "hlr", "dataset": "breast",
                         "parties": ["guest", "host", "arbiter"], "seed": 3, "key_bits": 1024,
                         "params": {"rounds": ROUNDS}})


class Tap(LocalTransport):
    """Keeps every message this party receives, decoded (its own key registry: the shared
    public key, and the private key on its one path); ``rewrite`` may change what it sends."""

    def __init__(self, role, hub, rewrite=None) -> None:
        super().__init__(role, hub)
        self.keys: dict[bytes, paillier.PublicKey] = {}
        self.got: list[tuple[str, object]] = []
        self.sk: paillier.PrivateKey | None = None
        self.rewrite = rewrite

    def send(self, dst, tag, data):
        if tag == "hfl/pk":                       # the guest's own key: it decodes under it too
            key = codec.decode(data)
            self.keys[codec.fingerprint16(key)] = key
        if self.rewrite is not None:
            data = self.rewrite(self, tag, data)
        super().send(dst, tag, data)

    def recv(self, src, tag, timeout=None):
        data = super().recv(src, tag, timeout)
        if tag == "hfl/sk":
            self.sk = codec.decode(data, allow_private_key=True)
            self.got.append((tag, "<private key>"))
            return data
        obj = codec.decode(data, self.keys.get,
                           on_key=lambda k: self.keys.__setitem__(codec.fingerprint16(k), k))
        self.got.append((tag, obj))
        return data


def run(taps: dict) -> dict:
    job = hjob()
    out: dict = {}

    def party(role):
        chan = Channel(taps[role], 30, BE)
        try:
            out[role] = run_job(role, job, chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001 -- inspected by the test
            out[role] = exc
        finally:
            chan.close()

    ths = [threading.Thread(target=party, args=(r,)) for r in taps]
    for th in ths:
        th.start()
    for th in ths:
        th.join(120)
    return out


def taps_for(rewrite_arbiter=None) -> dict:
    hub = local_transports(("guest", "host", "arbiter"))["guest"].hub
    return {"guest": Tap("guest", hub), "host": Tap("host", hub),
            "arbiter": Tap("arbiter", hub, rewrite_arbiter)}


def test_the_aggregator_gets_ciphertexts_and_row_counts_only():
    taps = taps_for()
    out = run(taps)
    assert all(isinstance(out[r], dict) for r in out), out
    n_guest = len(load_party("breast", "guest", None, kind="homo").ids)
    n_host = len(load_party("breast", "host", None, kind="homo").ids)
    seen = taps["arbiter"].got
    assert [tag for tag, _ in seen[:3]] == ["hfl/pk", "hfl/scale_bits", "hfl/scale_bits"]
    assert isinstance(seen[0][1], paillier.PublicKey) and seen[1][1] == seen[2][1] == SCALE
    models = seen[3:]
    assert len(models) == 2 * ROUNDS
    for tag, msg in models:
        assert tag.endswith("/model") and set(msg) == {"n", "w"}
        assert isinstance(msg["w"], EncryptedArray) and msg["w"].public_key == seen[0][1]
    assert sorted({m["n"] for _, m in models}) == sorted({n_guest, n_host})


def test_a_client_reads_the_other_clients_local_model_from_the_sum():
    taps = taps_for()
    out = run(taps)
    assert isinstance(out["host"], dict), out["host"]
    host = taps["host"]
    p = horizontal.HorizontalParams.from_job(hjob()["params"])
    Xh, yh = horizontal.client_matrix(load_party("breast", "host", None, kind="homo"))
    Xg, yg = horizontal.client_matrix(load_party("breast", "guest", None, kind="homo"))
    kw = dict(local_epochs=p.local_epochs, batch_size=p.batch_size,
              learning_rate=p.learning_rate, l2=p.l2, seed=3)
    w = np.zeros(Xh.shape[1])
    aggregates = [msg for tag, msg in host.got if tag.endswith("/aggregate")]
    assert len(aggregates) == ROUNDS and host.sk is not None
    for r, agg in enumerate(aggregates):
        total = agg["w"].decrypt(host.sk)
        own = local_sgd(Xh, yh, w, round_=r, client=1, **kw)
        n_other = agg["n"] - len(yh)
        read = (total - len(yh) * own) / n_other             # the host's view of the guest
        truth = local_sgd(Xg, yg, w, round_=r, client=0, **kw)
        assert n_other == len(yg)
        np.testing.assert_allclose(read, truth, rtol=0, atol=2.0 ** -SCALE * 4)
        w = total / agg["n"]


def _aggregate_rewrite(change):
    def rewrite(tap, tag, data):
        if not tag.endswith("/aggregate"):
            return data
        return codec.encode(change(tap, codec.decode(data, tap.keys.get)))
    return rewrite


@pytest.mark.parametrize("change,error,fragment", [
    (lambda tap, m: {**m, "w": m["w"][:-1]}, ProtocolViolation, "shape"),
    (lambda tap, m: {**m, "n": 0}, ProtocolViolation, "n > 0"),
    (lambda tap, m: {**m, "w": EncryptedArray(m["w"].public_key, m["w"].limbs, m["w"].shape, 0,
                                              1, BE)}, ProtocolViolation, "scale"),
    (lambda tap, m: {"w": m["w"]}, ProtocolViolation, "aggregate must be"),
])
def test_a_client_refuses_an_aggregate_that_is_not_the_sum(change, error, fragment):
    out = run(taps_for(_aggregate_rewrite(change)))
    for client in ("guest", "host"):
        assert isinstance(out[client], error) and fragment in str(out[client]), out[client]


def test_a_client_refuses_an_aggregate_under_another_key():
    other, _ = paillier.keygen(1024)

    def change(tap, m):
        tap_keys = tap.keys
        tap_keys[codec.fingerprint16(other)] = other
        return {**m, "w": EncryptedArray.encrypt(other, np.zeros(m["w"].shape), scale_bits=SCALE,
                                                 backend=BE)}
    out = run(taps_for(_aggregate_rewrite(change)))
    for client in ("guest", "host"):
        assert isinstance(out[client], (KeyMismatchError, ProtocolViolation)), out[client]

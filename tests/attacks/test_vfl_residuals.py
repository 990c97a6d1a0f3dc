"""What a malicious guest still learns in vertical LR: it chooses its own residuals.

The host's gradient is X_hᵀ(u + z_h) for the u the guest sends (two-party), or X_hᵀd' for the d'
it sends (arbiter variant); verifiable decryption makes the host use exactly that, but nothing
proves u is the guest's true residual.  With w_h = 0 in the first batch (z_h = 0), a guest that
sends u = κ·e_i in a single full batch sets w_h = −lr·¼·κ·x_i/|B|, and the host's test predictions
it receives at the end are z_h,test = −lr·¼·κ/|B|·X_h,test·x_i: the inner products of host training
row i with every host test row -- exactly that, nothing else (docs/app.md).  The residual bound
(``residual_bound``) limits the size of what a share can do: a κ beyond what any share with
|u_i| <= bound could give on some coordinate is refused before the host updates.

Each test runs the real host (and arbiter) and the real guest, whose outgoing [[u]] (or [[d']])
chunk is replaced, under the same key, by an encryption of the chosen vector.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import unifl
from unifl.app import codec, reference, vertical
from unifl.app.channel import Channel, LocalTransport, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import run_job, validate_job
from unifl.core.errors import ProtocolViolation, TransportError
from unifl.phe_sdk import EncryptedArray, paillier
from unifl.phe_sdk.opening import check_opening

BE = unifl.backend("native")
SEED = 7
LR = 0.15
BOUND = 64.0
ROW = 3


def vjob(parties) -> dict:
    return validate_job({"job_id": "res", "algorithm": "vlr", "dataset": "breast",
                         "parties": list(parties), "seed": SEED, "key_bits": 1024,
                         "params": {"epochs": 1, "batch_size": -1, "learning_rate": LR,
                                    "tol": None, "features": {"guest": 10, "host": 20},
                                    "residual_bound": BOUND}})


def host_data():
    p = vertical.VerticalParams.from_job(vjob(("guest", "host"))["params"])
    ids = sorted_ids(load_party("breast", "host").ids)
    return vertical.prepare("host", "breast", ids, p, SEED, None)


class ChosenShare(LocalTransport):
    """The guest's transport: its [[u]] (or [[d']]) chunk is replaced by [[share]] under the same
    key; the test predictions it receives are kept."""

    def __init__(self, hub, tag: str, share: np.ndarray) -> None:
        super().__init__("guest", hub)
        self.tag, self.share = tag, share
        self.keys: dict[bytes, paillier.PublicKey] = {}
        self.zh_test: list[np.ndarray] = []

    def _learn_key(self, data):
        obj = codec.decode(data)
        self.keys[codec.fingerprint16(obj)] = obj

    def send(self, dst, tag, data):
        if tag == "vfl/pk":
            self._learn_key(data)
        if tag == self.tag:
            msg = codec.decode(data, self.keys.get)
            if "data" in msg:
                lo, hi = msg["rows"]
                enc = msg["data"]
                msg["data"] = EncryptedArray.encrypt(enc.public_key, self.share[lo:hi],
                                                     scale_bits=enc.scale_bits, backend=BE)
                data = codec.encode(msg)
        super().send(dst, tag, data)

    def recv(self, src, tag, timeout=None):
        data = super().recv(src, tag, timeout)
        if tag == "vfl/pk":
            self._learn_key(data)
        if tag == "vfl/zh_test":
            msg = codec.decode(data)
            if "data" in msg:
                self.zh_test.append(msg["data"])
        return data


def run(parties, share: np.ndarray) -> tuple[dict, ChosenShare]:
    job = vjob(parties)
    hub = local_transports(parties)["guest"].hub
    # the guest's own share travels as [[u]] in both variants (under the arbiter's key with one)
    guest = ChosenShare(hub, "vfl/e0/b0/u", share)
    ts = {r: guest if r == "guest" else LocalTransport(r, hub) for r in parties}
    out: dict = {}

    def party(role):
        chan = Channel(ts[role], 30, BE)
        try:
            out[role] = run_job(role, job, chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001 -- inspected by the test
            out[role] = exc
        finally:
            chan.close()

    threads = [threading.Thread(target=party, args=(r,)) for r in parties]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads)
    return out, guest


PARTIES = [("guest", "host"), ("guest", "host", "arbiter")]


@pytest.mark.parametrize("parties", PARTIES, ids=["two-party", "arbiter"])
def test_a_chosen_share_reads_inner_products_of_host_rows(parties):
    """u = bound·e_i passes the bound: the guest gets exactly −lr·¼·κ/|B|·X_h,test·x_i."""
    h = host_data()
    share = np.zeros(h.n_train)
    share[ROW] = BOUND
    out, guest = run(parties, share)
    assert isinstance(out["host"], dict), out["host"]
    zh = np.concatenate(guest.zh_test)
    expect = -LR * 0.25 * BOUND / h.n_train * (h.X_test @ h.X_train[ROW])
    np.testing.assert_allclose(zh, expect, rtol=1e-6, atol=1e-9)
    # the host's weights are that training row, scaled: not a feature column of its choosing
    w_h = np.array(out["host"]["model"]["weights"])
    np.testing.assert_allclose(w_h, -LR * 0.25 * BOUND / h.n_train * h.X_train[ROW], rtol=1e-6)
    for j in range(h.X_test.shape[1]):
        assert abs(np.corrcoef(zh, h.X_test[:, j])[0, 1]) < 0.99


@pytest.mark.parametrize("parties", PARTIES, ids=["two-party", "arbiter"])
def test_a_share_beyond_the_bound_is_refused(parties):
    """κ large enough that one coordinate exceeds bound·Σ_i|X_ij|: the host refuses the gradient
    before it updates, and no prediction is sent."""
    h = host_data()
    x = h.X_train[ROW]
    room = BOUND * np.abs(h.X_train).sum(axis=0) / np.maximum(np.abs(x), 1e-300)
    j = int(np.argmin(room))
    share = np.zeros(h.n_train)
    share[ROW] = 1.5 * room[j]
    out, guest = run(parties, share)
    err = out["host"]
    assert isinstance(err, ProtocolViolation) and "residual_bound" in str(err), err
    assert f"coordinate {j}" in str(err)
    assert guest.zh_test == []
    assert isinstance(out["guest"], TransportError)


def test_an_honest_share_beyond_the_bound_is_the_partys_own_error():
    """A party never sends a share beyond the agreed bound: its own check stops it first, with
    the parameter to change named (the peer would refuse it as a deviation)."""
    bound = vertical.ShareBound(3, 2.0, "guest", "host")
    with pytest.raises(vertical.ConfigError, match="residual_bound = 2"):
        bound.add(np.ones((2, 3)), np.array([1.0, -2.5]))
    bound.add(np.ones((2, 3)), np.array([1.0, -2.0]))      # Xᵀu = −1, Σ|X_ij| = 2 each
    bound.check(bound.own + np.array([-4.0, 0.0, 4.0]))      # peer shares ±2 on both rows: fits
    with pytest.raises(ProtocolViolation, match="coordinate 2"):
        bound.check(bound.own + np.array([0.0, 0.0, 4.1]))
    off = vertical.ShareBound(3, None, "guest", "host")
    off.add(np.ones((1, 3)), np.array([1e9]))
    off.check(np.full(3, 1e12))


def test_the_parties_must_agree_on_the_bound():
    job = vjob(("guest", "host"))
    other = validate_job({**job, "params": {**job["params"], "residual_bound": 8.0}})
    t = local_transports()
    out: dict = {}

    def party(role, j):
        chan = Channel(t[role], 10, BE)
        try:
            out[role] = run_job(role, j, chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001
            out[role] = exc
        finally:
            chan.close()

    ths = [threading.Thread(target=party, args=("guest", job)),
           threading.Thread(target=party, args=("host", other))]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    for role in ("guest", "host"):
        assert isinstance(out[role], vertical.ConfigError) and "residual_bound" in str(out[role])


# ------------------------------------------------------------------ decryption requests
class SwapRequest(LocalTransport):
    """A party whose decryption request of batch ``batch`` is, in place of its masked gradient,
    the first d of the peer's ciphertexts it received on stream ``stream`` of that batch,
    re-randomised and relabelled scale 0 (what the request checks cannot refuse); it keeps the
    key owner's reply."""

    def __init__(self, role, hub, batch: int, stream: str, d: int) -> None:
        super().__init__(role, hub)
        self.stream_tag = f"vfl/e0/b{batch}/{stream}"
        self.request_tag = f"vfl/e0/b{batch}/masked_{'g' if role == 'guest' else 'h'}"
        self.reply_tag = f"vfl/e0/b{batch}/plain_{'g' if role == 'guest' else 'h'}"
        self.d = d
        self.keys: dict[bytes, paillier.PublicKey] = {}
        self.received: EncryptedArray | None = None
        self.sent: EncryptedArray | None = None
        self.reply = None

    def _key(self, data):
        key = codec.decode(data)
        self.keys[codec.fingerprint16(key)] = key

    def send(self, dst, tag, data):
        if tag == "vfl/pk":
            self._key(data)
        if tag == self.request_tag and self.received is not None:
            part = self.received[:self.d].obfuscate()
            self.sent = EncryptedArray(part.public_key, part.limbs, part.shape, 0, 1, BE)
            data = codec.encode(self.sent)
        super().send(dst, tag, data)

    def recv(self, src, tag, timeout=None):
        data = super().recv(src, tag, timeout)
        if tag == "vfl/pk":
            self._key(data)
        if tag == self.stream_tag and self.received is None:
            msg = codec.decode(data, self.keys.get)
            if "data" in msg:
                self.received = msg["data"]
        if tag == self.reply_tag:
            self.reply = codec.decode(data)
        return data


def swap_job(parties) -> dict:
    return validate_job({"job_id": "swap", "algorithm": "vlr", "dataset": "breast",
                         "parties": list(parties), "seed": SEED, "key_bits": 1024,
                         "params": {"epochs": 1, "batch_size": 64, "learning_rate": LR,
                                    "tol": None, "features": {"guest": 10, "host": 20}}})


@pytest.mark.parametrize("parties,role,batch,stream", [
    (("guest", "host"), "guest", 1, "zh"),
    (("guest", "host", "arbiter"), "guest", 1, "zh"),
    (("guest", "host", "arbiter"), "host", 0, "u"),
], ids=["two-party guest", "arbiter guest", "arbiter host"])
def test_a_request_of_the_peers_ciphertexts_is_decrypted(parties, role, batch, stream):
    """What the request checks leave (docs/app.md): in place of its own gradient for a batch, a
    party has d re-randomised ciphertexts of the peer's decrypted -- the guest z_h of d_g rows
    (here batch 1, after one update of w_h), the host (arbiter variant) the guest's share u of d_h
    rows, which in the first batch (w = 0) is −2y±: labels.  The two-party host's case is
    tests/attacks/test_vfl.py::test_documented_limit_rerandomised_combination_passes."""
    job = swap_job(parties)
    d = 11 if role == "guest" else 20
    hub = local_transports(parties)["guest"].hub
    tap = SwapRequest(role, hub, batch, stream, d)
    ts = {r: tap if r == role else LocalTransport(r, hub) for r in parties}
    out: dict = {}

    def party(r):
        chan = Channel(ts[r], 30, BE)
        try:
            out[r] = run_job(r, job, chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001
            out[r] = exc
        finally:
            chan.close()

    threads = [threading.Thread(target=party, args=(r,)) for r in parties]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert tap.reply is not None and tap.sent is not None
    m = check_opening(tap.sent, tap.reply["m"], tap.reply["r"])   # the decryption of those
    n = tap.sent.public_key.n
    got = np.array([(v - n if v > n // 2 else v) / 2.0 ** 24 for v in m])
    p = vertical.VerticalParams.from_job(job["params"])
    ids = sorted_ids(load_party("breast", "guest").ids)
    g = vertical.prepare("guest", "breast", ids, p, SEED, None)
    h = vertical.prepare("host", "breast", ids, p, SEED, None)
    plan = reference.batches(g.n_train, 64, SEED, 0, reference.vertical_min_rows(11, 20))
    y_pm = 2.0 * g.y_train - 1.0
    if role == "guest":
        b0, b1 = plan[0], plan[1]
        w_h = -LR * 0.25 * (h.X_train[b0].T @ (-2.0 * y_pm[b0])) / len(b0)   # after batch 0
        np.testing.assert_allclose(got, h.X_train[b1[:d]] @ w_h, atol=2.0 ** -20)
    else:
        np.testing.assert_array_equal(got, -2.0 * y_pm[plan[0][:d]])

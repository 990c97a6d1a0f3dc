"""Vertical LR against a key owner that lies about a decryption.

In both variants a party's gradient comes back from the key owner of its request (the peer, or the
arbiter) as masked residues v = Xᵀd' + R mod n.  A key owner that returns v + δ has the requester
apply the gradient it chose: a malicious guest sets the host's weights to C·e_j in the last batch
and reads the host's feature column j off the test predictions z_h = X_h,test·w_h (correlation 1.0).
With verifiable decryption every value comes with its Paillier randomness r and the requester checks
(1 + m·n)·r^n ≡ c before using m: the forged value is refused (DecryptionProofError), in both
directions and from the arbiter.

Each test plays the deviating party with its real code, changing only the one message it lies in
(a transport under its channel rewrites it), and first runs a control with the requester's check
switched off, which shows what the lie buys on a code path that does not check.
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
from unifl.core.errors import DecryptionProofError, TransportError
from unifl.phe_sdk import paillier

BE = unifl.backend("native")
SEED = 7
D_GUEST, D_HOST = 11, 20           # breast: 10 guest features + intercept, 20 host features
LR, BATCH = 0.15, 64
C = 1.0e6                           # the weight the liar plants
J = 4                               # the feature column it reads


def vjob(parties=("guest", "host"), **params) -> dict:
    return validate_job({"job_id": "lie", "algorithm": "vlr", "dataset": "breast",
                         "parties": list(parties), "seed": SEED, "key_bits": 1024,
                         "params": {"epochs": 1, "batch_size": BATCH, "learning_rate": LR,
                                    "tol": None, "features": {"guest": 10, "host": D_HOST},
                                    **params}})


def last_batch_rows() -> tuple[int, int]:
    """(index, rows) of epoch 0's last batch, as both parties compute it."""
    p = vertical.VerticalParams.from_job(vjob()["params"])
    ids = sorted_ids(load_party("breast", "guest").ids)
    n_train = vertical.prepare("guest", "breast", ids, p, SEED, None).n_train
    plan = reference.batches(n_train, BATCH, SEED, 0,
                             reference.vertical_min_rows(D_GUEST, D_HOST))
    return len(plan) - 1, len(plan[-1])


def party_test_features(role: str) -> np.ndarray:
    p = vertical.VerticalParams.from_job(vjob()["params"])
    ids = sorted_ids(load_party("breast", role).ids)
    return vertical.prepare(role, "breast", ids, p, SEED, None).X_test


class Tap(LocalTransport):
    """A party's transport.  The liar's (``tag`` set) adds δ to element ``J`` of the decryption it
    returns on ``tag``, whatever the reply's form (a list of residues, or the opening's "m"); δ is
    C's worth of weight: the requester's update is w ← w − lr·factor·g/|B| with g decoded at
    2^-48 (features 2^-24, d' 2^-24).  The guest's keeps the test predictions it receives."""

    def __init__(self, role, hub, tag: str | None = None, rows: int = 0) -> None:
        super().__init__(role, hub)
        self.tag, self.rows = tag, rows
        self.n: int | None = None
        self.zh_test: list[np.ndarray] = []

    def send(self, dst, tag, data):
        if tag == "vfl/pk" and self.n is None:   # the arbiter's own key: δ is taken mod its n
            self.n = codec.decode(data).n
        if tag == self.tag:
            assert self.n is not None
            delta = round(-C * self.rows / (LR * 0.25) * 2.0 ** 48) % self.n
            msg = codec.decode(data)
            vals = msg["m"] if isinstance(msg, dict) else msg
            vals[J] = (vals[J] + delta) % self.n
            data = codec.encode(msg)
        super().send(dst, tag, data)

    def recv(self, src, tag, timeout=None):
        data = super().recv(src, tag, timeout)
        if tag == "vfl/pk" and self.n is None:   # the peer's key: this party decrypts under it
            self.n = codec.decode(data).n
        if tag == "vfl/zh_test":
            msg = codec.decode(data)
            if "data" in msg:
                self.zh_test.append(msg["data"])
        return data


def run(parties, liar_role: str, lie_on: str, **params) -> tuple[dict, dict]:
    """The job with ``liar_role`` lying on ``lie_on`` (``plain_g`` / ``plain_h``) in the last
    batch: ({role: result or exception}, {role: its Tap})."""
    job = vjob(parties, **params)
    last, rows = last_batch_rows()
    hub = local_transports(parties)["guest"].hub
    ts = {r: Tap(r, hub, f"vfl/e0/b{last}/{lie_on}", rows) if r == liar_role else Tap(r, hub)
          for r in parties}
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
    return out, ts


@pytest.fixture
def unchecked(monkeypatch):
    """The requester's check switched off: the control that shows what the lie buys (run with
    ``residual_bound: None``, the code path before either check existed)."""
    monkeypatch.setattr(vertical, "check_opened", lambda masked, reply: (
        reply["m"] if isinstance(reply, dict) else reply))


def column_correlation(z: np.ndarray, role: str) -> float:
    return float(np.corrcoef(z, party_test_features(role)[:, J])[0, 1])


@pytest.mark.parametrize("parties", [("guest", "host"), ("guest", "host", "arbiter")],
                         ids=["two-party", "arbiter"])
def test_lie_reads_a_host_feature_column_without_the_check(unchecked, parties):
    """The control: unchecked, the guest (two-party) or an arbiter colluding with it makes the
    host's weights C·e_j + O(1), and the host's test predictions are its feature column j."""
    liar_role = "guest" if len(parties) == 2 else "arbiter"
    out, taps = run(parties, liar_role, "plain_h", residual_bound=None)
    host = out["host"]
    assert isinstance(host, dict), host
    w_h = np.array(host["model"]["weights"])
    assert abs(w_h[J] - C) < 10 and np.abs(np.delete(w_h, J)).max() < 10
    zh = np.concatenate(taps["guest"].zh_test)      # what the guest receives in evaluation
    assert column_correlation(zh, "host") > 0.99999


@pytest.mark.parametrize("parties,liar_role,lie_on,victim", [
    (("guest", "host"), "guest", "plain_h", "host"),
    (("guest", "host"), "host", "plain_g", "guest"),
    (("guest", "host", "arbiter"), "arbiter", "plain_h", "host"),
    (("guest", "host", "arbiter"), "arbiter", "plain_g", "guest"),
], ids=["guest-lies-to-host", "host-lies-to-guest", "arbiter-to-host", "arbiter-to-guest"])
def test_a_forged_decryption_is_refused(parties, liar_role, lie_on, victim):
    """With the check, the forged value does not open its ciphertext: the victim refuses it
    before touching its weights, and no test prediction is ever sent."""
    out, taps = run(parties, liar_role, lie_on)
    err = out[victim]
    assert isinstance(err, DecryptionProofError), err
    assert f"#{J}" in str(err) and "does not open" in str(err)
    assert taps["guest"].zh_test == []
    for role in parties:
        if role != victim:
            assert isinstance(out[role], (TransportError, DecryptionProofError)), out[role]


def test_the_residual_bound_alone_stops_a_lie_this_large(unchecked):
    """Defence in depth: with the opening unchecked, a lie of C's size still leaves the range any
    guest share within residual_bound could give, and the host refuses it."""
    out, taps = run(("guest", "host"), "guest", "plain_h")
    err = out["host"]
    assert isinstance(err, vertical.ProtocolViolation), err
    assert f"coordinate {J}" in str(err) and "residual_bound" in str(err)
    assert taps["guest"].zh_test == []


def test_the_host_lie_steers_the_guest_without_the_check(unchecked):
    """The other direction's control: unchecked, the host's lie moves the guest's weight j by C."""
    out, _ = run(("guest", "host"), "host", "plain_g", residual_bound=None)
    guest = out["guest"]
    assert isinstance(guest, dict), guest
    assert abs(guest["model"]["weights"][J] - C) < 10


def test_honest_openings_pass_and_forgeries_fail():
    """The check itself: the key owner's opening passes; a changed plaintext, a changed r, a
    non-unit r, an out-of-range value, a wrong count or form are refused."""
    pk, sk = paillier.keygen(1024)
    shape = (D_HOST,)
    acc = vertical.EncryptedArray.encrypt(pk, np.arange(D_HOST) - 7.5, backend=BE)
    masked, _r, _s = vertical.mask_gradient(acc)
    reply = vertical.open_masked(masked, sk, shape)
    assert vertical.check_opened(masked, reply) == vertical.decrypt_masked(masked, sk, shape)
    n = pk.n
    m, r = reply["m"], reply["r"]
    cases = {
        "plaintext + 1": {"m": [(m[0] + 1) % n] + m[1:], "r": r},
        # a lie that cancels in the plain sum: the batched check's random weights still see it
        "+δ and −δ": {"m": [(m[0] + 5) % n, (m[1] - 5) % n] + m[2:], "r": r},
        "r · 2": {"m": m, "r": [r[0] * 2 % n] + r[1:]},
        "r = 0": {"m": m, "r": [0] + r[1:]},
        "r a multiple of p": {"m": m, "r": [sk.p] + r[1:]},
        "m = n": {"m": [n] + m[1:], "r": r},
        "short": {"m": m[:-1], "r": r[:-1]},
        "bool": {"m": [True] + m[1:], "r": r},
    }
    for why, bad in cases.items():
        with pytest.raises(DecryptionProofError):
            vertical.check_opened(masked, bad)
            pytest.fail(why)
    for bad in (m, {"m": m}, {"m": m, "r": r, "x": 1}, {"m": tuple(m), "r": r}):
        with pytest.raises(vertical.ProtocolViolation):
            vertical.check_opened(masked, bad)

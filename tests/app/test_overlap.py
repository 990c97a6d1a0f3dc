"""Overlap with the peer (unifl.app.overlap, params.overlap): the job's model is bit-identical with
overlap on and off, in both variants of vertical LR; the link sends in order in the background,
surfaces a failed send in the party's thread, and refills the obfuscator pool while it waits, up to
what the party will still encrypt and no further."""

import threading
import time

import numpy as np
import pytest

import unifl
from unifl.app.jobs import run_local
from unifl.app.overlap import PeerLink
from unifl.core import registry
from unifl.core.errors import TransportError
from unifl.core.state import PoolLimits
from unifl.phe_sdk import paillier

from tests.helpers.vertical_jobs import assert_same_model, job, reference_for

BE = unifl.backend("native")


@pytest.mark.parametrize("parties", [("guest", "host"), ("guest", "host", "arbiter")],
                         ids=["two-party", "arbiter"])
def test_overlap_on_and_off_give_bit_identical_models(parties):
    # chunks of 100 rows: several chunks per batch, so chunk k + 1 is encrypted before the peer's
    # chunk k arrives; fresh backends per role, so each party refills its own pools
    models = {}
    for overlap in (False, True):
        j = job("vlr", parties=parties, epochs=2, batch_size=200, chunk_rows=100, overlap=overlap)
        res = run_local(j, None, backends={r: registry.backend("native") for r in parties})
        models[overlap] = res
        assert_same_model(res, reference_for(j))
        for role in ("guest", "host"):
            assert res[role]["overlap"]["overlap"] is overlap
            assert ("pool" in res[role]["overlap"]) is overlap
    for role in ("guest", "host"):
        assert models[True][role]["model"]["weights"] == models[False][role]["model"]["weights"]
    assert models[True]["guest"]["metrics"]["auc"] == models[False]["guest"]["metrics"]["auc"]


class _Recorder:
    """A channel that records sends (optionally failing or slow) and answers receives."""

    def __init__(self, fail_on=None, delay=0.0, wait_for=None):
        self.sent, self.fail_on, self.delay, self.wait_for = [], fail_on, delay, wait_for
        self.threads = set()

    def send(self, dst, tag, obj):
        self.threads.add(threading.current_thread().name)
        time.sleep(self.delay)
        if tag == self.fail_on:
            raise TransportError(f"peer gone while sending {tag}")
        self.sent.append((dst, tag, obj))

    def recv(self, src, tag, timeout=None):
        if self.wait_for is not None:        # the peer answers once the condition holds
            deadline = time.monotonic() + 30
            while not self.wait_for() and time.monotonic() < deadline:
                time.sleep(0.01)
        return (src, tag)


def test_link_sends_in_order_from_a_background_thread():
    ch = _Recorder(delay=0.01)
    link = PeerLink(ch, overlap=True, depth=2)
    t0 = time.perf_counter()
    for i in range(20):
        link.send("host", "vfl/x", i)
    link.close()
    assert [o for _, _, o in ch.sent] == list(range(20))
    assert ch.threads == {"unifl-sender"}
    # 20 sends of 10 ms, at most 2 queued: the caller was blocked for less than all of them
    assert link.stats()["blocked_send_s"] <= time.perf_counter() - t0


def test_link_without_overlap_sends_in_the_callers_thread():
    ch = _Recorder()
    link = PeerLink(ch, overlap=False)
    link.send("host", "vfl/x", 1)
    assert ch.sent == [("host", "vfl/x", 1)] and ch.threads == {threading.current_thread().name}
    link.close()


def test_a_failed_background_send_is_raised_in_the_party():
    ch = _Recorder(fail_on="vfl/bad")
    link = PeerLink(ch, overlap=True)
    link.send("host", "vfl/bad", 0)
    link.send("host", "vfl/after", 1)     # dropped: the stream is broken
    with pytest.raises(TransportError, match="peer gone"):
        link.flush()
    with pytest.raises(TransportError):
        link.recv("host", "vfl/next")
    link.close(flush=False)
    assert ch.sent == []


@pytest.fixture()
def pool_backend():
    be = registry.backend("native")
    be.state.pool_limits = PoolLimits(max_bytes=1 << 20, fill_batch=64, slice_seconds=0.01)
    return be


def test_waits_refill_the_pool_up_to_what_the_party_will_encrypt(pool_backend):
    pk, sk = paillier.keygen(1024)
    pool = sk.obfuscators(pool_backend)
    ch = _Recorder(wait_for=lambda: pool.ready() >= 40)
    link = PeerLink(ch, overlap=True)
    link.refill(pool)
    link.expect(40)
    assert link.recv("host", "vfl/x") == ("host", "vfl/x")
    time.sleep(0.3)                          # a refill slice still running ends within its slice
    assert pool.ready() == 40               # the need, not the pool's capacity
    # the encryptions take them: one MontMult each, the values decrypt
    enc = unifl.EncryptedArray.encrypt(pk, np.arange(40), backend=pool_backend, private_key=sk)
    assert pool.ready() == 0 and pool.stats().hits == 40
    assert (enc.decrypt(sk) == np.arange(40)).all()
    link.expect(0)                           # nothing left to encrypt: a wait refills nothing
    ch.wait_for = None
    link.recv("host", "vfl/y")
    time.sleep(0.1)
    assert pool.ready() == 0
    link.close()


def test_without_overlap_waits_refill_nothing(pool_backend):
    pk, sk = paillier.keygen(1024)
    pool = sk.obfuscators(pool_backend)
    link = PeerLink(_Recorder(), overlap=False)
    link.refill(pool)
    link.expect(40)
    link.recv("host", "vfl/x")
    time.sleep(0.1)
    assert pool.ready() == 0
    link.close()

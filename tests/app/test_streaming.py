"""The streamed vertical LR / LinR and SecureBoost: a batch (a tree level) travels and enters the
encrypted gradient (histograms) chunk by chunk.

- the model is bit-identical whatever ``chunk_rows`` (one chunk, a divisor, a non-divisor) and
  equals the plaintext reference, on breast, motor (LinR), a full batch, the arbiter variant and
  the synthetic dataset; SecureBoost's trees are identical too;
- no party ever builds an encrypted array of more than ``chunk_rows`` rows (instrumented);
- a peer that deviates from the shared chunk schedule (reorders, repeats, drops or adds a chunk,
  sends one of another size, row range or key) is refused with a typed error.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import unifl
from unifl.app import reference, vertical
from unifl.app.secureboost import protocol as sbt_protocol
from unifl.app.alignment import ids_digest
from unifl.app.batching import batch_count, batch_rows, batches, chunk_bounds, take_rows
from unifl.app.channel import Channel, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import run_job, run_local, validate_job
from unifl.app.metrics import roc_auc
from unifl.app.params import params_of
from unifl.app.synthetic import SyntheticParty
from unifl.app.timing import Timings
from unifl.core.errors import ConfigError, KeyMismatchError, ProtocolViolation, TransportError
from unifl.phe_sdk import EncryptedArray, paillier

from tests.helpers.party import Party
from tests.helpers.vertical_jobs import assert_same_model, reference_for

BE = unifl.backend("native")
BITS = 1024


def vjob(dataset: str = "breast", algorithm: str = "vlr", parties=("guest", "host"), seed: int = 7,
         **params) -> dict:
    base = {"epochs": 2, "batch_size": 128, "learning_rate": 0.15, "tol": None}
    base.update(params)
    return {"job_id": "stream", "algorithm": algorithm, "dataset": dataset,
            "parties": list(parties), "seed": seed, "key_bits": BITS, "params": base}


def weights(res: dict) -> tuple[list[float], list[float]]:
    return res["guest"]["model"]["weights"], res["host"]["model"]["weights"]


# ------------------------------------------------------------------ the schedule helpers
def test_chunk_bounds_and_batch_rows():
    assert chunk_bounds(10, 4) == [(0, 4), (4, 8), (8, 10)]
    assert chunk_bounds(8, 4) == [(0, 4), (4, 8)]
    assert chunk_bounds(3, 100) == [(0, 3)]
    assert chunk_bounds(0, 5) == []
    with pytest.raises(ConfigError, match="chunk_rows"):
        chunk_bounds(10, 0)
    # a full batch is range(n): the rows of batches()' sorted permutation, none materialised
    full = batch_rows(455, -1, 7, 0, 20)
    assert isinstance(full[0], range)
    np.testing.assert_array_equal(np.asarray(full[0]), batches(455, -1, 7, 0, 20)[0])
    np.testing.assert_array_equal(take_rows(full[0], 10, 14), [10, 11, 12, 13])
    for n, bs, m in ((455, 64, 20), (455, 128, 20), (100, 33, 5), (100, 1000, 5), (97, 32, 2)):
        plan = batch_rows(n, bs, 3, 1, m)
        assert batch_count(n, bs, m) == len(plan) == len(batches(n, bs, 3, 1, m))
        for got, want in zip(plan, batches(n, bs, 3, 1, m)):
            np.testing.assert_array_equal(np.asarray(got), want)


def test_row_dot_is_chunk_independent():
    """z of a row must not depend on the chunk it is computed in (a BLAS product may)."""
    rng = np.random.default_rng(3)
    X, w = rng.normal(size=(999, 14)), rng.normal(size=14)
    whole = vertical.row_dot(X, w)
    for c in (1, 7, 37, 500):
        parts = np.concatenate([vertical.row_dot(X[a:a + c], w) for a in range(0, 999, c)])
        assert np.array_equal(parts, whole)
    np.testing.assert_allclose(whole, X @ w, rtol=0, atol=1e-13)


# ------------------------------------------------------------------ bit-identical models
@pytest.mark.parametrize("params", [{"batch_size": 128}, {"batch_size": -1}])
def test_vlr_is_bit_identical_across_chunk_sizes(params):
    """One chunk per batch, chunks that divide 128 (32), and chunks that divide nothing (37):
    the decrypted gradients are the same integers, so the weights are equal bit for bit; and they
    are the plaintext reference's."""
    runs = {c: run_local(vjob(chunk_rows=c, **params), BE) for c in (10_000, 32, 37)}
    assert weights(runs[32]) == weights(runs[10_000]) == weights(runs[37])
    assert runs[37]["guest"]["metrics"]["auc"] == runs[10_000]["guest"]["metrics"]["auc"]
    assert_same_model(runs[37], reference_for(vjob(chunk_rows=37, **params)))


def test_vlinr_and_arbiter_variant_are_bit_identical_across_chunk_sizes():
    lin = {c: run_local(vjob("motor", "vlinr", batch_size=64, epochs=1, learning_rate=0.05,
                             max_rows=400, chunk_rows=c), BE) for c in (10_000, 23)}
    assert weights(lin[23]) == weights(lin[10_000])
    assert_same_model(lin[23], reference_for(vjob("motor", "vlinr", batch_size=64, epochs=1,
                                                  learning_rate=0.05, max_rows=400)))
    arb = {c: run_local(vjob(parties=("guest", "host", "arbiter"), epochs=1, chunk_rows=c), BE)
           for c in (10_000, 45)}
    assert weights(arb[45]) == weights(arb[10_000])
    assert_same_model(arb[45], reference_for(vjob(epochs=1)))


def _synthetic_job(rows: int = 3000, **params) -> dict:
    job = vjob("synthetic", epochs=2, batch_size=-1, features={"guest": 13, "host": 10},
               **params)
    job["synthetic"] = {"rows": rows}
    return job


def test_synthetic_vlr_streams_and_equals_the_reference():
    """The synthetic dataset read chunk by chunk by each party equals, trained federated, the
    plaintext reference on the materialised matrices; AUC in default_credit's range."""
    a = run_local(_synthetic_job(chunk_rows=700), BE)
    b = run_local(_synthetic_job(chunk_rows=10_000), BE)
    assert weights(a) == weights(b)
    job = validate_job(_synthetic_job())
    p = params_of(job)
    g = SyntheticParty(job_spec := vertical.synthetic.spec_of(job), "guest", job["seed"],
                       p.test_fraction, True)
    h = SyntheticParty(job_spec, "host", job["seed"], p.test_fraction)
    gXtr, gXte, ytr, yte = g.materialise()
    hXtr, hXte, _, _ = h.materialise()
    ref = reference.vertical_reference(gXtr, hXtr, ytr, task="lr", epochs=p.epochs,
                                       batch_size=p.batch_size, learning_rate=p.learning_rate,
                                       l2=p.l2, tol=p.tol, seed=job["seed"], l2_mask_g=g.l2_mask)
    assert_same_model(a, ref)
    auc = roc_auc(yte, gXte @ ref["wg"] + hXte @ ref["wh"])
    assert a["guest"]["metrics"]["auc"] == pytest.approx(auc, abs=1e-9)
    assert 0.62 < auc < 0.8
    assert a["guest"]["metrics"]["train_rows"] == g.n_train


def test_secureboost_trees_are_identical_across_chunk_sizes_and_caching():
    """Chunks of 29 or one chunk, the tree's ciphertexts kept for its levels or encrypted afresh
    per level: the same trees.  Keeping them costs one encryption per row and tree."""
    job = {"job_id": "sb", "algorithm": "secureboost", "dataset": "breast", "seed": 5,
           "key_bits": BITS, "params": {"n_trees": 2, "max_depth": 3, "max_rows": 300}}
    one = run_local(job, BE)
    job["params"]["chunk_rows"] = 29
    many = run_local(job, BE)
    job["params"]["gh_cache_mb"] = 0
    fresh = run_local(job, BE)
    for other in (many, fresh):
        assert one["guest"]["model"] == other["guest"]["model"]
        assert one["guest"]["metrics"]["auc"] == other["guest"]["metrics"]["auc"]
    rows = one["guest"]["metrics"]["train_rows"]
    assert one["guest"]["metrics"]["encrypted_rows"] == 2 * rows
    assert many["guest"]["metrics"]["encrypted_rows"] == 2 * rows
    assert fresh["guest"]["metrics"]["encrypted_rows"] > 2 * rows


def test_secureboost_on_synthetic_data():
    job = {"job_id": "sb", "algorithm": "secureboost", "dataset": "synthetic", "seed": 5,
           "synthetic": {"rows": 600}, "key_bits": BITS,
           "params": {"n_trees": 2, "max_depth": 2, "num_bins": 8, "chunk_rows": 100}}
    res = run_local(job, BE)
    v = validate_job(job)
    p = params_of(v)
    g = sbt_protocol._prepare("guest", v, p, [], None)
    h = sbt_protocol._prepare("host", v, p, [], None)
    ref = reference.secureboost_reference(g[3], g[0], h[0], p, g[1], h[1])
    assert res["guest"]["metrics"]["auc"] == pytest.approx(roc_auc(g[4], ref["test_score"]),
                                                           abs=1e-9)
    assert res["guest"]["metrics"]["auc"] > 0.6
    assert res["guest"]["metrics"]["data_file"].startswith("synthetic(rows=600")


# ------------------------------------------------------------------ no whole-batch ciphertexts
class _Largest:
    """Records the largest EncryptedArray each party's thread builds: every array is made by
    ``EncryptedArray.__init__`` (frames decoded, arrays built from limbs) or ``_wrap`` (every
    result of an operation, encryption included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.size: dict[str, int] = {}
        self.lock = threading.Lock()
        real_init, real_wrap = EncryptedArray.__init__, EncryptedArray._wrap.__func__

        def init(arr, *args, **kwargs):
            real_init(arr, *args, **kwargs)
            self.note(arr)

        def wrap(cls, *args, **kwargs):
            out = real_wrap(cls, *args, **kwargs)
            self.note(out)
            return out
        monkeypatch.setattr(EncryptedArray, "__init__", init)
        monkeypatch.setattr(EncryptedArray, "_wrap", classmethod(wrap))

    def note(self, arr: EncryptedArray) -> None:
        name = threading.current_thread().name
        with self.lock:
            self.size[name] = max(self.size.get(name, 0), arr.size)


def test_vertical_never_builds_a_whole_batch_of_ciphertexts(monkeypatch):
    """Batches of 128 rows (455 training rows: 3 batches), chunks of 30: no party holds more than
    30 ciphertexts in one array (the gradients have 11 and 20); building a batch's [[u]], [[z_h]]
    or [[d']] whole would show 128."""
    largest = _Largest(monkeypatch)
    res = run_local(vjob(chunk_rows=30, epochs=1), BE)
    assert res["guest"]["metrics"]["auc"] > 0.9
    assert set(largest.size) >= {"unifl-guest", "unifl-host"}
    assert largest.size["unifl-guest"] == largest.size["unifl-host"] == 30
    largest.size.clear()
    run_local(vjob(chunk_rows=10_000, epochs=1), BE)     # the check itself sees a whole batch
    assert largest.size["unifl-guest"] >= 128


def test_secureboost_never_builds_a_whole_level_of_ciphertexts(monkeypatch):
    """160 training rows, chunks of 40, nothing kept (gh_cache_mb 0): the guest's [[ĝ + 2^64 ĥ]]
    and the host's per-chunk histograms stay within max(chunk_rows, histogram cells) = 40 (20
    host features × 2 bins × 1 wanted node); a whole level's [[ĝ + 2^64 ĥ]] would be 160."""
    job = {"job_id": "sb", "algorithm": "secureboost", "dataset": "breast", "seed": 5,
           "key_bits": BITS, "params": {"n_trees": 1, "max_depth": 2, "num_bins": 2,
                                        "max_rows": 200, "chunk_rows": 40, "gh_cache_mb": 0}}
    largest = _Largest(monkeypatch)
    res = run_local(job, BE)
    assert res["guest"]["metrics"]["train_rows"] == 160
    assert set(largest.size) >= {"unifl-guest", "unifl-host"}
    assert max(largest.size["unifl-guest"], largest.size["unifl-host"]) <= 40
    largest.size.clear()
    job["params"]["chunk_rows"] = 1000
    run_local(job, BE)
    assert largest.size["unifl-guest"] == 160


# ------------------------------------------------------------------ a hostile host (vertical)
D_GUEST, D_HOST = 11, 20
CHUNK = 30               # the first batch of 90 rows is three chunks of 30


class ChunkHost:
    """Plays the host of two-party vertical LR by hand against the real guest: the honest job
    start, then the [[z_h]] stream of batch 0 as the test writes it."""

    def __init__(self, keys) -> None:
        self.job = validate_job(vjob(epochs=1, batch_size=90, chunk_rows=CHUNK))
        t = local_transports(("guest", "host"))
        gch = Channel(t["guest"], 20, BE)
        self.guest = Party(lambda: run_job("guest", self.job, gch, BE, progress=False), gch)
        self.ch = Channel(t["host"], 20, BE)
        self.pk, self.sk = keys
        ids = sorted_ids(load_party("breast", "host").ids)
        self.ch.send("guest", "vfl/ids_digest", ids_digest(ids))
        self.ch.recv("guest", "vfl/ids_digest")
        start = self.ch.recv("guest", "vfl/start")
        self.ch.send("guest", "vfl/start", {**start, "dim": D_HOST, "epochs": []})
        self.pk_g = self.ch.recv("guest", "vfl/pk")
        self.ch.send("guest", "vfl/pk", self.pk)
        plan = reference.batches(start["n"], 90, 7, 0, D_HOST)
        self.bounds = chunk_bounds(len(plan[0]), CHUNK)
        assert len(self.bounds) == 3 and len(plan[0]) == 90

    def zh(self, k: int, rows=None, count=None, key=None) -> dict:
        lo, hi = self.bounds[k]
        enc = EncryptedArray.encrypt(key or self.pk, np.zeros(hi - lo if count is None else count),
                                     scale_bits=24, backend=BE)
        return {"chunk": k, "rows": list(rows or (lo, hi)), "data": enc}

    def send(self, *msgs) -> None:
        for m in msgs:
            self.ch.send("guest", "vfl/e0/b0/zh", m)

    def refused(self, kind: type, *fragments: str) -> BaseException:
        self.guest.join(60)
        self.ch.close()
        err = self.guest.error
        assert isinstance(err, kind), repr(err)
        for f in fragments:
            assert f in str(err), (f, str(err))
        return err


@pytest.fixture(scope="module")
def host_keys():
    return paillier.keygen(BITS)


@pytest.mark.parametrize("stream,kind,fragments", [
    # reordered: chunk 1 first (both of 30 rows: only the index tells them apart)
    (lambda h: [h.zh(1), h.zh(0), h.zh(2), {"end": 3}], ProtocolViolation,
     ["chunk 1 where chunk 0", "out of order or repeated"]),
    # chunk 0 twice
    (lambda h: [h.zh(0), h.zh(0), h.zh(1), h.zh(2), {"end": 3}], ProtocolViolation,
     ["chunk 0 where chunk 1"]),
    # too few: the stream ends after two chunks
    (lambda h: [h.zh(0), h.zh(1), {"end": 2}], ProtocolViolation,
     ["ended the stream after 2", "chunk 2 of 3"]),
    # too many: a fourth chunk where the end is due
    (lambda h: [h.zh(0), h.zh(1), h.zh(2), h.zh(2), {"end": 4}], ProtocolViolation,
     ["more than the 3 chunk(s)"]),
    # an end marker that claims another count
    (lambda h: [h.zh(0), h.zh(1), h.zh(2), {"end": 4}], ProtocolViolation,
     ["end of a stream of 3"]),
    # a chunk of another size under the right header: refused, not truncated or padded
    (lambda h: [h.zh(0), h.zh(1, count=29)], ProtocolViolation, ["shape (29,)", "(30,)"]),
    (lambda h: [h.zh(0, count=31)], ProtocolViolation, ["shape (31,)", "(30,)"]),
    # a header that claims other rows
    (lambda h: [h.zh(0), h.zh(1, rows=(30, 59), count=29)], ProtocolViolation,
     ["covers rows [30, 59]", "[30, 60)"]),
    # a chunk that is not a chunk message
    (lambda h: [h.zh(0)["data"]], ProtocolViolation, ["fields"]),
    # a later chunk re-encrypted under the guest's own key (its [[u]] would come back as z_h)
    (lambda h: [h.zh(0), h.zh(1, key=h.pk_g)], KeyMismatchError, ["z_h"]),
])
def test_guest_refuses_a_zh_stream_off_its_schedule(host_keys, stream, kind, fragments):
    host = ChunkHost(host_keys)
    try:
        host.send(*stream(host))
    except TransportError:                # the guest may stop before the last message
        pass
    host.refused(kind, *fragments)


def test_honest_zh_stream_is_accepted(host_keys):
    """The same script, honest: the guest accepts the stream and goes on to the gradient round
    (so the refusals above come from the deviations, not from the script)."""
    host = ChunkHost(host_keys)
    host.send(host.zh(0), host.zh(1), host.zh(2), {"end": 3})
    u = [host.ch.recv("guest", "vfl/e0/b0/u") for _ in range(4)]
    assert [m.get("chunk", "end") for m in u] == [0, 1, 2, "end"]
    assert [m["data"].shape for m in u[:3]] == [(30,)] * 3
    masked = host.ch.recv("guest", "vfl/e0/b0/masked_g")
    assert masked.shape == (D_GUEST,)
    host.ch.close()
    host.guest.join(60)


def test_host_refuses_a_u_stream_with_an_extra_chunk():
    """The other direction: the real host against a guest that sends one [[u]] chunk too many."""
    job = validate_job(vjob(epochs=1, batch_size=90, chunk_rows=CHUNK))
    t = local_transports(("guest", "host"))
    hch = Channel(t["host"], 20, BE)
    host = Party(lambda: run_job("host", job, hch, BE, progress=False), hch)
    g = Channel(t["guest"], 20, BE)
    ids = sorted_ids(load_party("breast", "guest").ids)
    g.send("host", "vfl/ids_digest", ids_digest(ids))
    g.recv("host", "vfl/ids_digest")
    start = g.recv("host", "vfl/start")
    g.send("host", "vfl/start", {**start, "dim": D_GUEST, "epochs": []})
    pk, _ = paillier.keygen(BITS)
    g.send("host", "vfl/pk", pk)
    g.recv("host", "vfl/pk")
    bounds = chunk_bounds(90, CHUNK)
    try:
        for k, (lo, hi) in enumerate(bounds + [bounds[-1]]):
            g.send("host", "vfl/e0/b0/u", {"chunk": k, "rows": [lo, hi], "data":
                                           EncryptedArray.encrypt(pk, np.zeros(hi - lo), 24,
                                                                  backend=BE)})
    except TransportError:
        pass
    host.join(60)
    g.close()
    assert isinstance(host.error, ProtocolViolation), repr(host.error)
    assert "more than the 3 chunk(s)" in str(host.error)


def test_chunk_rows_must_agree():
    """chunk_rows is part of the protocol: parties that cut batches differently refuse at job
    start (ConfigError naming both), before any key exists."""
    job = validate_job(vjob(chunk_rows=50))
    other = validate_job(vjob(chunk_rows=60))
    t = local_transports(("guest", "host"))
    out: dict = {}

    def party(role, j):
        ch = Channel(t[role], 20, BE)
        try:
            out[role] = run_job(role, j, ch, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001
            out[role] = exc
        finally:
            ch.close()
    ths = [threading.Thread(target=party, args=a) for a in (("guest", job), ("host", other))]
    for th in ths:
        th.start()
    for th in ths:
        th.join(60)
    assert isinstance(out["guest"], ConfigError) and "chunk_rows 60" in str(out["guest"])
    assert isinstance(out["host"], ConfigError) and "chunk_rows 50" in str(out["host"])


# ------------------------------------------------------------------ a hostile guest (SecureBoost)
@pytest.fixture(scope="module")
def sb_host():
    job = validate_job({"algorithm": "secureboost", "dataset": "breast", "seed": 5,
                        "key_bits": BITS, "params": {"n_trees": 1, "max_depth": 2,
                                                     "max_rows": 40, "num_bins": 8,
                                                     "chunk_rows": 10}})
    p = params_of(job)
    ids = sorted_ids(load_party("breast", "host").ids)
    return job, p, ids


def _sb_root_stream(sb_host, pk, stream) -> Party:
    """The real host against a guest that asks for the root level honestly and then streams
    [[ĝ + 2^64 ĥ]] as ``stream(chunk)`` writes it (32 rows: chunks of 10, 10, 10, 2)."""
    job, p, ids = sb_host
    t = local_transports()
    g, h = Channel(t["guest"], 20, BE), Channel(t["host"], 20, BE)
    host = Party(lambda: sbt_protocol._host(job, p, h, BE, Timings(), ids, None), h)
    g.send("host", "sbt/pk", pk)
    info = g.recv("host", "sbt/info")
    n = int(info["rows"])
    assert n == 32 and info["chunk_rows"] == 10
    g.send("host", "sbt/t0/level", {"tree": 0, "depth": 0, "active": 1,
                                    "nodes": np.zeros(n, np.int32), "want": np.zeros(1, np.int32)})

    def chunk(k, count=None, rows=None):
        lo, hi = chunk_bounds(n, 10)[k]
        enc = EncryptedArray.encrypt(pk, np.ones(hi - lo if count is None else count, np.int64),
                                     backend=BE)
        return {"chunk": k, "rows": list(rows or (lo, hi)), "data": enc}
    try:
        for msg in stream(chunk):
            g.send("host", "sbt/t0/d0/gh", msg)
        g.recv("host", "sbt/t0/d0/hist")
        g.send("host", "sbt/t0/d0/splits", [])
        g.send("host", "sbt/t0/level", None)
    except TransportError:
        pass
    host.join(60)
    g.close()
    return host


@pytest.mark.parametrize("stream,fragments", [
    (lambda c: [c(1), c(0), c(2), c(3), {"end": 4}], ["chunk 1 where chunk 0"]),
    (lambda c: [c(0), c(0), c(1), c(2), c(3), {"end": 4}], ["chunk 0 where chunk 1"]),
    (lambda c: [c(0), c(1), c(2), {"end": 3}], ["ended the stream after 3", "chunk 3 of 4"]),
    (lambda c: [c(0), c(1), c(2), c(3), c(3), {"end": 5}], ["more than the 4 chunk(s)"]),
    (lambda c: [c(0), c(1), c(2), c(3, count=10)], ["shape (10,)", "rows [30, 32)"]),
    (lambda c: [c(0), c(1, rows=(10, 25), count=15)], ["covers rows [10, 25]"]),
])
def test_sb_host_refuses_a_gh_stream_off_its_schedule(sb_host, stream, fragments):
    pk, _ = paillier.keygen(BITS)
    host = _sb_root_stream(sb_host, pk, stream)
    assert isinstance(host.error, ProtocolViolation), repr(host.error)
    for f in fragments:
        assert f in str(host.error), (f, str(host.error))


def test_sb_honest_gh_stream_is_answered(sb_host):
    pk, _ = paillier.keygen(BITS)
    host = _sb_root_stream(sb_host, pk, lambda c: [c(0), c(1), c(2), c(3), {"end": 4}])
    assert host.error is None, repr(host.error)

"""The QAT two-stage pipeline and driver under stress, on our simulator library: RETRY storms
(a one-slot ring), injected request failures, slow completions, the CPU share, and shutdown with
requests in flight.  Every case checks the results against Python's pow and that no request was
lost or duplicated.  No timings are asserted.
"""

from __future__ import annotations

import secrets
import threading
import time

import numpy as np
import pytest

from unifl.mod_op import ints
import unifl
from unifl.core import registry
from unifl.base_op import from_limbs, mont_context

pytestmark = pytest.mark.skipif(not registry.probe("qat").available,
                                reason=f"qat unavailable: {registry.probe('qat').reason}")

from unifl.backends.qat import runtime  # noqa: E402

from tests.helpers.qat_sim import simulator_backends  # noqa: E402
from unifl.backends.qat import pipeline  # noqa: E402

from tests.helpers.keys import paillier_keypair  # noqa: E402


@pytest.fixture
def sim(monkeypatch):
    """A factory of qat backends on a fresh simulator session configured by UNIFL_QAT_SIM_* env."""
    yield from simulator_backends(monkeypatch)


def _batch(bits: int, n: int):
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    base = [secrets.randbelow(m) for _ in range(n)]
    exps = [secrets.randbits(secrets.choice([17, 256, bits])) | 1 for _ in range(n)]
    return m, base, exps


def _delta(after: dict, before: dict, key: str) -> int:
    return after[key] - before[key]


def test_retry_storm_one_slot_ring(sim):
    be = sim({"UNIFL_QAT_SIM_RING": 1, "UNIFL_QAT_SIM_INSTANCES": 2}, max_in_flight=24)
    m, base, exps = _batch(1024, 60)
    assert ints.mod_exp(be, base, exps, m) == [pow(b, e, m) for b, e in zip(base, exps)]
    s = be.stats()
    assert s["retries"] > 0 and s["sim_retries"] == s["retries"]
    assert s["submitted"] == s["completed"] == 60                  # none lost, none duplicated
    assert s["device_failures"] == s["submit_failures"] == 0


def test_injected_failures_are_recomputed_on_the_cpu(sim):
    be = sim({"UNIFL_QAT_SIM_FAIL_RATE": 0.3, "UNIFL_QAT_SIM_SEED": 7})
    m, base, exps = _batch(1024, 80)
    ctx = mont_context(m)
    st = pipeline.PipelineStats()
    out = pipeline.hybrid_mod_exp(be, ctx, ctx.to_limbs(base),
                                  unifl.mod_op.exp_limbs(exps), stats=st)
    assert from_limbs(out) == [pow(b, e, m) for b, e in zip(base, exps)]
    s = be.stats()
    assert s["device_failures"] == s["sim_injected_failures"] > 0
    assert st.recomputed_on_cpu == s["device_failures"]              # each failure redone once
    assert s["submitted"] == 80 == s["completed"] + s["device_failures"]


def test_paillier_pipeline_with_slow_completions_streams_and_matches_cpu(sim):
    """Alg. 6 with 5 ms device latency: ModMults start while ModExps are still out."""
    be = sim({"UNIFL_QAT_SIM_LATENCY_US": 10000, "UNIFL_QAT_SIM_ENGINES": 2})
    pk, sk = paillier_keypair(1024)
    ms = [0, 1, pk.n - 1] + [secrets.randbelow(pk.n) for _ in range(21)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    m_l, r_l = pk.plaintext_limbs(ms), pk.n_ctx.to_limbs(rs)
    st = pipeline.PipelineStats()
    c_mont = pipeline.paillier_encrypt(be, pk, m_l, r_l, stats=st)
    cpu = unifl.backend("cpu")
    assert np.array_equal(c_mont, unifl.phe_sdk.paillier.encrypt_limbs(cpu, pk, m_l, r=r_l))
    assert st.chunks >= 2 and st.on_qat == len(ms)
    assert 0.0 < st.utilisation <= 1.0 + 1e-9
    seq = pipeline.paillier_encrypt_sequential(be, pk, m_l, r_l)
    assert np.array_equal(seq, c_mont)
    assert sk.raw_decrypt(pk.raw_encrypt(ms, backend=be, r_values=rs), backend=be) == ms


def test_cpu_share_splits_the_modexps(sim):
    be = sim(cpu_share=0.5)
    pk, _ = paillier_keypair(1024)
    ms = [secrets.randbelow(pk.n) for _ in range(30)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in ms]
    st = pipeline.PipelineStats()
    m_l, r_l = pk.plaintext_limbs(ms), pk.n_ctx.to_limbs(rs)
    got = pipeline.paillier_encrypt(be, pk, m_l, r_l, stats=st)
    assert (st.on_qat, st.on_cpu_share) == (15, 15)
    assert be.stats()["submitted"] == 15
    assert np.array_equal(got, unifl.phe_sdk.paillier.encrypt_limbs(unifl.backend("cpu"), pk,
                                                                     m_l, r=r_l))


@pytest.mark.parametrize("timeout", [0.0, 5.0])
def test_shutdown_with_requests_in_flight(sim, timeout):
    """close() while a batch is out: with no grace the outstanding requests are abandoned and
    recomputed on the CPU; with grace they land; either way every result is right, and the next
    call opens a fresh session."""
    be = sim({"UNIFL_QAT_SIM_LATENCY_US": 20000, "UNIFL_QAT_SIM_ENGINES": 1}, max_in_flight=8)
    m, base, exps = _batch(2048, 24)
    ref = [pow(b, e, m) for b, e in zip(base, exps)]
    result: dict = {}

    def work():
        try:
            result["out"] = ints.mod_exp(be, base, exps, m)
        except BaseException as exc:  # pragma: no cover - reported below
            result["err"] = exc

    t = threading.Thread(target=work)
    t.start()
    sess = be.session()
    deadline = time.monotonic() + 20
    while sess.stats()["submitted"] < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    old = sess
    be.close(timeout=timeout)
    t.join(60)
    assert not t.is_alive()
    assert "err" not in result, result.get("err")
    assert result["out"] == ref
    s = old.stats()
    assert old.closed
    if timeout == 0.0:
        assert s["abandoned"] > 0
    else:
        assert s["abandoned"] == 0
    assert ints.mod_exp(be, base[:3], exps[:3], m) == ref[:3]          # reopened transparently
    assert be.session() is not old


def test_alg7_matmul_pipeline_matches_cpu(sim):
    """Alg. 7: out[k] = prod_j y_j^(x_kj), K·N ModExps on the device, folded on the CPU; zero rows
    and zero exponents included; also through the backend with matmul_on_qat=True."""
    from unifl import base_op, mod_op
    be = sim({"UNIFL_QAT_SIM_FAIL_RATE": 0.1}, matmul_on_qat=True)
    ctx = mont_context(secrets.randbits(2048) | (1 << 2047) | 1)
    cpu = unifl.backend("cpu")
    n, k = 12, 4
    y = base_op.to_mont(cpu, ctx, ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(n)]))
    x = mod_op.exp_limbs([secrets.randbits(secrets.choice([0, 8, 40, 64])) for _ in range(k * n)])
    x = x.reshape(k, n, -1)
    x[2] = 0
    ref = mod_op.mont_multi_exp(cpu, ctx, y, x)
    st = pipeline.PipelineStats()
    assert np.array_equal(pipeline.mont_multi_exp(be, ctx, y, x, stats=st), ref)
    assert st.tasks == k * n
    assert np.array_equal(mod_op.mont_multi_exp(be, ctx, y, x), ref)


# ------------------------------------------------------------------ typed driver failures
def test_a_session_closed_under_a_batch_is_reopened_once(sim, monkeypatch):
    """close() between the pipeline taking the session and submitting to it: the submission is
    refused with QatSessionClosed, the pipeline takes a fresh session once, results are right."""
    be = sim()
    stale = be.session()
    stale.close(0.0)
    real = be.session
    handed: list = []

    def session_once_stale():
        handed.append(len(handed))
        return stale if len(handed) == 1 else real()
    monkeypatch.setattr(be, "session", session_once_stale)
    m, base, exps = _batch(1024, 12)
    assert ints.mod_exp(be, base, exps, m) == [pow(b, e, m) for b, e in zip(base, exps)]
    assert len(handed) == 2 and real().stats()["submitted"] == 12


def test_a_refused_submission_is_a_named_device_error(sim):
    from unifl.core.errors import DeviceError
    from unifl.core.exponents import exp_limbs
    from unifl.scheduler.fallback import is_device_failure
    be = sim()
    sess = be.session()
    sess.close(0.0)
    m, base, exps = _batch(512, 3)
    ctx = mont_context(m)
    with pytest.raises(runtime.QatSessionClosed) as info:
        sess.start(ctx.to_limbs(base), exp_limbs(exps), ctx.m_limbs)
    err = info.value
    assert isinstance(err, runtime.QatError) and isinstance(err, DeviceError)
    assert "QAT simulator" in str(err) and "section [SSL]" in str(err)
    assert "cpaCyLnModExp" in str(err) and "closed" in str(err)
    assert isinstance(err.__cause__, RuntimeError)          # the driver's own message, chained
    assert is_device_failure(err, be)


def test_qat_failing_mid_run_falls_back_bit_identically(sim, monkeypatch):
    """Every submission refused (a session that stays closed): the batch is re-run on the next
    backend of the party's chain, bit-identical, and the report names the QAT error."""
    if not registry.probe("native").available:
        pytest.skip("the fallback here is the native backend")
    from unifl.configs import PartyConfig
    from unifl.scheduler import backend_from_config
    sim()                                                   # a fresh simulator session
    monkeypatch.setenv("UNIFL_QAT_LIBRARY", "simulator")
    be = backend_from_config(PartyConfig(party="guest", backend="qat", fallback=["native"]))
    assert be.selection.chosen == "qat"
    dead = be.inner.session()
    dead.close(0.0)
    monkeypatch.setattr(be.inner, "session", lambda: dead)
    m, base, exps = _batch(1024, 9)
    assert ints.mod_exp(be, base, exps, m) == [pow(b, e, m) for b, e in zip(base, exps)]
    ev, = be.fallback_events()
    assert (ev["op"], ev["from"], ev["to"], ev["elements"]) == ("mod_exp", "qat", "native", 9)
    assert ev["reason"].startswith("QatSessionClosed") and "cpaCyLnModExp" in ev["reason"]
    be.close()

"""Scheduler: fallback with the reason, auto ranking (cached), multi-device split bit-identical to
cpu, least-loaded placement, per-op/device counters."""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass

import numpy as np
import pytest

import unifl
from unifl import base_op, mod_op
from unifl.core import registry
from unifl.core.backend import Backend, ProbeResult
from unifl.core.options import BackendOptions
from unifl.configs import PartyConfig
from unifl.core.errors import BackendUnavailable, ConfigError, OperandError
from unifl.scheduler import (CountingBackend, MultiDeviceBackend, SerialExecutor, ThreadExecutor,
                             backend_from_config, calibrate)

from tests.helpers.keys import paillier_keypair, random_odd_modulus


class _BrokenAtStart(Backend):
    name = "broken_start"
    native_ops = frozenset({"mont_mul"})

    def __init__(self, **options):
        raise RuntimeError("driver said no")

    def op_mont_mul(self, ctx, a, b):  # pragma: no cover - never constructed
        raise AssertionError


class _WrongAnswers(Backend):
    name = "wrong_answers"
    native_ops = frozenset({"mont_mul"})

    def op_mont_mul(self, ctx, a, b):
        return np.zeros_like(a)


@pytest.fixture
def fake_backends():
    registry.register("broken_start", _BrokenAtStart)
    registry.register("wrong_answers", _WrongAnswers)
    yield
    for name in ("broken_start", "wrong_answers"):
        registry._classes.pop(name, None)
        registry._probes.pop(name, None)
        registry._instances.pop(name, None)


def test_unavailable_backend_falls_back_with_reason(caplog):
    cfg = PartyConfig(party="guest", backend="gpu" if "gpu" not in registry.available() else "qat",
                      fallback=["native", "cpu"])
    if cfg.backend in registry.available():
        pytest.skip("both gpu and qat are available here")
    with caplog.at_level(logging.WARNING, logger="unifl.scheduler"):
        be = backend_from_config(cfg)
    sel = be.selection
    assert sel.requested == cfg.backend and sel.chosen == "native"
    assert sel.fallback_events[0]["backend"] == cfg.backend and sel.fallback_events[0]["reason"]
    assert any("not used" in r.message and cfg.backend in r.message for r in caplog.records)
    assert isinstance(be, CountingBackend) and be.inner.name == "native"


def test_failure_at_start_and_wrong_self_test_fall_back(fake_backends):
    be = backend_from_config(PartyConfig(party="host", backend="broken_start",
                                         fallback=["wrong_answers", "cpu"]))
    events = be.selection.fallback_events
    assert be.selection.chosen == "cpu"
    assert "driver said no" in events[0]["reason"]
    assert events[1]["backend"] == "wrong_answers" and "self-test" in events[1]["reason"]


def test_nothing_starts_is_a_named_error(fake_backends):
    with pytest.raises(BackendUnavailable, match="broken_start.*driver said no.*wrong_answers"):
        backend_from_config(PartyConfig(party="host", backend="broken_start",
                                        fallback=["wrong_answers"]))


def test_auto_ranks_by_calibration_and_caches(tmp_path, monkeypatch):
    monkeypatch.setenv("UNIFL_CALIBRATION_CACHE", str(tmp_path / "cal.json"))
    calibrate.clear_memory_cache()
    be = backend_from_config(PartyConfig(party="guest", backend="auto", fallback=["cpu"]))
    ranking = be.selection.ranking
    assert [n for n, _ in ranking] and set(n for n, _ in ranking) <= set(registry.available())
    assert [s for _, s in ranking] == sorted(s for _, s in ranking)
    assert be.selection.chosen == ranking[0][0]
    assert (tmp_path / "cal.json").is_file()
    # cached: a second run (fresh process memory, same disk cache) measures nothing
    calibrate.clear_memory_cache()
    monkeypatch.setattr(calibrate, "measure", lambda *a, **k: pytest.fail("measured again"))
    again = backend_from_config(PartyConfig(party="guest", backend="auto", fallback=["cpu"]))
    assert again.selection.ranking == ranking


def _multi(kind: str):
    if kind == "native+native":
        cfg = PartyConfig(party="guest", backend="native", devices=[{"threads": 1}, {"threads": 1}])
    else:
        cfg = PartyConfig(party="guest", backend="native", devices=[{"backend": "cpu"}, {"threads": 1}])
    be = backend_from_config(cfg)
    assert isinstance(be, MultiDeviceBackend) and len(be.members) == 2
    return be


@pytest.mark.parametrize("kind", ["native+native", "cpu+native"])
def test_multi_device_bit_identical_to_cpu(kind):
    be, cpu = _multi(kind), registry.backend("cpu")
    m = random_odd_modulus(2048)
    ctx = base_op.mont_context(m)
    n = 37
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(n)])
    b = ctx.to_limbs([secrets.randbelow(m) for _ in range(n)])
    e = mod_op.exp_limbs([secrets.randbits(300) for _ in range(n)])
    for fn in (lambda x: base_op.mont_mul(x, ctx, a, b), lambda x: mod_op.mod_mul(x, ctx, a, b),
               lambda x: mod_op.mod_exp(x, ctx, a, e),
               lambda x: mod_op.mod_exp(x, ctx, a, mod_op.exp_limbs(65537)),
               lambda x: mod_op.mont_exp(x, ctx, a, e)):
        assert np.array_equal(fn(be), fn(cpu))
    for k in (1, 5):   # K < devices: split over N with partial products; K >= devices: over K
        exps = np.stack([mod_op.exp_limbs([secrets.randbits(64) for _ in range(n)]) for _ in range(k)])
        assert np.array_equal(mod_op.mont_multi_exp(be, ctx, a, exps),
                              mod_op.mont_multi_exp(cpu, ctx, a, exps))
    groups = np.array([secrets.randbelow(6) for _ in range(n)], np.int64)
    groups[groups == 3] = 2     # group 3 stays empty
    assert np.array_equal(mod_op.mont_prod_groups(be, ctx, a, groups, 6),
                          mod_op.mont_prod_groups(cpu, ctx, a, groups, 6))
    empty = np.zeros(0, np.int64)                       # no rows: every group is the empty product
    assert np.array_equal(mod_op.mont_prod_groups(be, ctx, a[:0], empty, 3),
                          mod_op.mont_prod_groups(cpu, ctx, a[:0], empty, 3))
    # Paillier end to end with fixed randomness: identical ciphertexts, right plaintexts
    pk, sk = paillier_keypair(1024)
    vals = [secrets.randbelow(pk.n) for _ in range(n)]
    r = [secrets.randbelow(pk.n - 1) + 1 for _ in range(n)]
    assert pk.raw_encrypt(vals, backend=be, r_values=r) == pk.raw_encrypt(vals, backend=cpu, r_values=r)
    x = np.linspace(-3, 3, n)
    ex = unifl.EncryptedArray.encrypt(pk, x, backend=be)
    w = np.arange(n * 3, dtype=float).reshape(n, 3) / 10
    assert np.allclose((ex @ w).decrypt(sk), x @ w, atol=1e-5)
    assert np.allclose(ex.decrypt(sk), x, atol=1e-6)
    # both devices did work, and the counters add up
    rows = be.report()
    assert {r["device"] for r in rows} == set(be.devices)
    mm = [r for r in rows if r["op"] == "mont_mul"]
    assert len(mm) == 2 and all(r["calls"] > 0 and r["elements"] > 0 for r in mm)
    be.close()


def test_least_loaded_member_gets_work_first():
    cpu = registry.backend("cpu")
    be = MultiDeviceBackend([CountingBackend(cpu, "d0"), CountingBackend(cpu, "d1"),
                             CountingBackend(cpu, "d2")], SerialExecutor(), min_rows=4)
    be._load = [10, 0, 5]
    assert [p[0] for p in be.plan(4)] == [1]             # one piece: the idle member
    be._load = [10, 0, 5]
    pieces = be.plan(8)                                  # two pieces: the two least loaded
    assert [p[0] for p in pieces] == [1, 2] and pieces[0][1:] == (0, 4) and pieces[1][1:] == (4, 8)
    be._load = [0, 0, 0]
    w = MultiDeviceBackend([CountingBackend(cpu, "a"), CountingBackend(cpu, "b")], SerialExecutor(),
                           weights=[3, 1], min_rows=1)
    assert [(p[1], p[2]) for p in w.plan(8)] == [(0, 6), (6, 8)]
    assert w._load == [6, 2]


def test_counters_count_each_call_and_element():
    be = CountingBackend(registry.backend("native"))
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(10)])
    base_op.mont_mul(be, ctx, a, a)
    base_op.mont_mul(be, ctx, a[:3], a[:3])
    mod_op.mod_exp(be, ctx, a, mod_op.exp_limbs(3))
    rows = {r["op"]: r for r in be.report()}
    assert rows["mont_mul"]["calls"] == 2 and rows["mont_mul"]["elements"] == 13
    assert rows["mod_exp"]["calls"] == 1 and rows["mod_exp"]["elements"] == 10
    assert rows["mont_mul"]["backend"] == "native" and rows["mont_mul"]["seconds"] >= 0
    # an op the backend lacks is composed from counted MontMults
    cpu_only_mm = CountingBackend(_MontMulOnly())
    mod_op.mod_exp(cpu_only_mm, ctx, a, mod_op.exp_limbs(5))
    assert {r["op"] for r in cpu_only_mm.report()} == {"mont_mul"}


def test_scalar_device_entries_go_through_the_backends_own_selector():
    # native's selector reads a scalar entry as that instance's thread count
    if not registry.probe("native").available:
        pytest.skip("native extension not built")
    be = backend_from_config(PartyConfig(party="guest", backend="native", fallback=["cpu"],
                                         devices=[1, 2]))
    assert isinstance(be, MultiDeviceBackend)
    assert [m.inner.threads for m in be.members] == [1, 2]
    be.close()


def test_a_backend_without_a_selector_refuses_scalar_entries_at_load():
    from unifl.configs import validate
    with pytest.raises(ConfigError, match=r"field 'devices\.0': backend 'cpu' has no device selector"):
        validate(PartyConfig, {"party": "guest", "backend": "cpu", "devices": [0]}, "cfg")


class _MontMulOnly(Backend):
    name = "mm_only"
    native_ops = frozenset({"mont_mul"})

    def op_mont_mul(self, ctx, a, b):
        return registry.backend("cpu").op_mont_mul(ctx, a, b)


def test_thread_executor_keeps_order_and_raises():
    ex = ThreadExecutor(3)
    assert ex.map(lambda x: x * x, list(range(7))) == [x * x for x in range(7)]
    with pytest.raises(ZeroDivisionError):
        ex.map(lambda x: 1 // x, [1, 0, 2])
    ex.close()


def test_thread_executor_raises_only_after_every_piece_ended():
    # a piece failing fast must not leave a slower one running behind the caller's back, and the
    # first failure in piece order is the one raised
    import threading
    import time
    ended: list[int] = []
    lock = threading.Lock()

    def piece(i: int) -> int:
        if i == 0:
            raise OperandError("piece 0")
        if i == 2:
            raise KeyError("piece 2")
        time.sleep(0.2)
        with lock:
            ended.append(i)
        return i

    ex = ThreadExecutor(3)
    with pytest.raises(OperandError, match="piece 0"):
        ex.map(piece, [0, 1, 2])
    assert ended == [1]
    ex.close()


@pytest.mark.skipif(not registry.probe("fpga").available, reason="no OpenCL device (PoCL) here")
def test_two_fpga_devices_split_a_batch_bit_identically():
    # FLASH's multi-accelerator layout on two OpenCL device instances (PoCL here stands in)
    be = backend_from_config(PartyConfig(party="guest", backend="fpga", devices=[{}, {}]))
    assert isinstance(be, MultiDeviceBackend) and be.selection.chosen == "fpga"
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    a = ctx.to_limbs([secrets.randbelow(m) for _ in range(40)])
    e = mod_op.exp_limbs([secrets.randbits(64) for _ in range(40)])
    assert np.array_equal(mod_op.mod_exp(be, ctx, a, e),
                          mod_op.mod_exp(registry.backend("cpu"), ctx, a, e))
    rows = be.report()
    assert len({r["device"] for r in rows}) == 2 and all(r["stand_in"] for r in rows)
    be.close()


def test_plan_covers_every_row_once_in_order():
    cpu = registry.backend("cpu")
    for members in (1, 2, 3):
        be = MultiDeviceBackend([CountingBackend(cpu, f"d{i}") for i in range(members)],
                                weights=[1 + i for i in range(members)], min_rows=3)
        for n in range(0, 40):
            pieces = be.plan(n)
            assert pieces and pieces[0][1] == 0 and pieces[-1][2] == n
            assert all(a[2] == b[1] for a, b in zip(pieces, pieces[1:]))
            assert len({p[0] for p in pieces}) == len(pieces)     # one piece per member at most
            for i, a, b in pieces:
                be._release(i, b - a)
            assert be._load == [0] * members


@dataclass(frozen=True)
class _CardOptions(BackendOptions):
    card: int = 0


class _OneCardEach(Backend):
    """Drives one of three cards per instance (as the gpu backend drives one CUDA device)."""

    name = "one_card_each"
    native_ops = frozenset({"mont_mul"})
    one_device_per_instance = True
    options_model = _CardOptions

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, "three cards", ["card 0", "card 1", "card 2"])

    @classmethod
    def select_device(cls, value: object) -> dict:
        return {"card": value}

    def op_mont_mul(self, ctx, a, b):
        return registry.backend("cpu").op_mont_mul(ctx, a, b)


def test_devices_all_means_one_instance_per_device_for_one_device_backends():
    """The scheduler is the only place a batch is split: ``devices: all`` on a backend whose
    instances drive one device each becomes one member per device its probe lists."""
    registry.register("one_card_each", _OneCardEach)
    try:
        be = backend_from_config(PartyConfig(party="guest", backend="one_card_each",
                                             fallback=["cpu"]))
        assert isinstance(be, MultiDeviceBackend)
        assert [m.inner.options.card for m in be.members] == [0, 1, 2]
        m = random_odd_modulus(1024)
        ctx = base_op.mont_context(m)
        a = ctx.to_limbs([secrets.randbelow(m) for _ in range(40)])
        assert np.array_equal(base_op.mont_mul(be, ctx, a, a),
                              base_op.mont_mul(registry.backend("cpu"), ctx, a, a))
        be.close()
    finally:
        for store in (registry._classes, registry._probes, registry._instances):
            store.pop("one_card_each", None)
        registry._explicit.discard("one_card_each")


class _NarrowCard(Backend):
    """A card whose kernels take moduli of at most 2048 bits: enough for 1024-bit keys (n² of 2048
    bits), not for 2048-bit ones."""

    name = "narrow_card"
    native_ops = frozenset({"mont_mul"})
    max_modulus_bits = 2048

    def op_mont_mul(self, ctx, a, b):
        if ctx.bits > 2048:
            raise AssertionError("a modulus the card refused at selection reached it")
        return unifl.backend("cpu").op_mont_mul(ctx, a, b)


@pytest.fixture
def narrow_card():
    registry.register("narrow_card", _NarrowCard)
    yield
    for table in (registry._classes, registry._probes, registry._instances):
        table.pop("narrow_card", None)
    registry._explicit.discard("narrow_card")


def test_selection_asks_each_backend_whether_it_serves_the_party(narrow_card):
    from unifl.core.backend import Request, Support
    req = Request.paillier(2048)
    assert req.modulus_bits == {1024, 2048, 4096} and req.limb_counts() == [16, 32, 64]
    no = _NarrowCard().supports(req)
    assert not no and no == Support(False, ("moduli of 4096 bits exceed its limit of 2048 bits",))
    assert _NarrowCard().supports(Request.paillier(1024))
    assert not _NarrowCard().supports(Request(ops=frozenset({"mont_frobnicate"})))
    be = backend_from_config(PartyConfig(party="guest", backend="narrow_card", fallback=["cpu"],
                                         key_bits=2048))
    sel = be.selection
    assert sel.chosen == "cpu" and "does not serve this party's requests" in \
        sel.fallback_events[0]["reason"] and "4096 bits" in sel.fallback_events[0]["reason"]
    small = backend_from_config(PartyConfig(party="guest", backend="narrow_card",
                                            fallback=["cpu"], key_bits=1024))
    assert small.selection.chosen == "narrow_card" and not small.selection.fallback_events
    import json
    row = small.selection.as_dict()
    assert json.loads(json.dumps(row))["chosen"] == "narrow_card" and row["executor"] == "threads"

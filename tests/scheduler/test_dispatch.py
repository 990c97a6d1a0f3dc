"""Size-aware dispatch (unifl.scheduler.dispatch): calls placed by size between an accelerator with a
large fixed latency and the party's CPU backend, split when both together are faster, pinned by
the YAML, and the calibration cache read and written safely."""

from __future__ import annotations

import json
import os
import stat
import time

import numpy as np
import pytest

import unifl
from unifl.configs import PartyConfig
from unifl.core import registry
from unifl.core.backend import Backend, ProbeResult
from unifl.mod_op import ints
from unifl.scheduler import CountingBackend, backend_from_config, cache, dispatch
from unifl.scheduler.dispatch import (CostLine, CostModel, DispatchBackend, DispatchPolicy,
                                      crossover, split_fraction)

from tests.helpers.keys import random_odd_modulus

LATENCY = 0.05          # the accelerator's fixed cost per call
ACC_PER_ROW = 0.0005    # ... and per row
CPU_PER_ROW = 0.001     # the CPU's cost per row (no latency): crossover at 100 rows


class _SlowToStart(Backend):
    """An accelerator stand-in: every call costs LATENCY + ACC_PER_ROW·rows (slept), then the
    exact cpu result."""

    name = "slow_to_start"
    native_ops = frozenset({"mont_mul"})
    latency = LATENCY

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, "test card with a large fixed latency", ["test card"])

    def op_mont_mul(self, ctx, a, b):
        time.sleep(self.latency + ACC_PER_ROW * len(a))
        return unifl.backend("cpu").op_mont_mul(ctx, a, b)


class _SteadyCpu(Backend):
    """The party's CPU stand-in: CPU_PER_ROW per row, no latency."""

    name = "steady_cpu"
    native_ops = frozenset({"mont_mul"})

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, "test cpu", ["test cpu"])

    def op_mont_mul(self, ctx, a, b):
        time.sleep(CPU_PER_ROW * len(a))
        return unifl.backend("cpu").op_mont_mul(ctx, a, b)


@pytest.fixture
def fakes():
    registry.register("slow_to_start", _SlowToStart)
    registry.register("steady_cpu", _SteadyCpu)
    yield
    for name in ("slow_to_start", "steady_cpu"):
        for table in (registry._classes, registry._probes, registry._instances):
            table.pop(name, None)
        registry._explicit.discard(name)


def _dispatcher(split: bool = True, mode: str = "auto", pin=None, acc: Backend | None = None
                ) -> DispatchBackend:
    acc_be = CountingBackend(acc or _SlowToStart(), device="test card")
    cpu_be = CountingBackend(_SteadyCpu(), device="test cpu")
    policy = DispatchPolicy(mode=mode, split=split, pin=pin or {}, cache=False, budget_s=0.6,
                            max_rows=256)
    return DispatchBackend(acc_be, cpu_be, policy)


def _calls(be: DispatchBackend) -> dict[str, int]:
    """Rows each side ran, from their counters."""
    return {side: sum(r["elements"] for r in m.own_report()) for side, m in
            zip(("accelerator", "cpu"), be.members)}


def _mont_mul(be, rows: int, m: int) -> None:
    a = [(7 * i + 3) % m for i in range(rows)]
    b = [(11 * i + 5) % m for i in range(rows)]
    assert ints.mont_mul(be, a, b, m) == ints.mont_mul(unifl.backend("cpu"), a, b, m)


def test_small_calls_run_on_the_cpu_large_ones_on_the_accelerator():
    be = _dispatcher(split=False)
    m = random_odd_modulus(1024)
    _mont_mul(be, 4, m)                        # measures both lines first
    a, c = (mod.lines[("mont_mul", 16, 0)] for mod in be.models)
    assert a.latency == pytest.approx(LATENCY, rel=0.5) and c.latency < 0.01
    assert crossover(a, c) == pytest.approx(LATENCY / (CPU_PER_ROW - ACC_PER_ROW), rel=0.5)
    for mod in be.members:
        mod.reset_counters()
    _mont_mul(be, 8, m)
    assert _calls(be) == {"accelerator": 0, "cpu": 8}
    _mont_mul(be, 600, m)
    assert _calls(be) == {"accelerator": 600, "cpu": 8}
    rows = {(r["op"], r["route"]): r for r in be.dispatch_report()}
    assert rows[("mont_mul", "cpu")]["reason"].startswith("below the crossover")
    assert rows[("mont_mul", "accelerator")]["reason"].startswith("above the crossover")
    assert all(r["slower_than_cpu"] == 0 for r in rows.values())


def test_a_call_both_serve_faster_together_is_split_bit_identically():
    be = _dispatcher(split=True)
    m = random_odd_modulus(1024)
    _mont_mul(be, 4, m)
    for mod in be.members:
        mod.reset_counters()
    _mont_mul(be, 400, m)                       # acc 0.25 s, cpu 0.4 s, both ~0.17 s
    done = _calls(be)
    assert done["accelerator"] + done["cpu"] == 400 and 0 < done["cpu"] < done["accelerator"]
    (row,) = [r for r in be.dispatch_report() if r["route"] == "split"]
    assert row["reason"].startswith("both together") and row["calls"] == 1
    a, c = CostLine(0.05, 0.0005, 256), CostLine(0.0, 0.001, 16)
    f = split_fraction(a, c, 400)
    assert f == pytest.approx(0.35 / 0.6) and a.predict(f * 400) == pytest.approx(
        c.predict((1 - f) * 400))
    assert split_fraction(a, c, 20) is None      # the CPU alone is faster: no share helps


def test_no_accelerator_call_slower_than_the_cpu_and_a_wrong_model_corrects_itself():
    card = _SlowToStart()
    be = _dispatcher(split=False, acc=card)
    m = random_odd_modulus(1024)
    for rows in (1, 3, 10, 30, 60, 90, 150, 300):
        _mont_mul(be, rows, m)
    assert sum(r["slower_than_cpu"] for r in be.dispatch_report()) == 0
    # the card becomes much slower than its calibration said: the first large calls are
    # counted against it, then the corrected model sends them to the CPU
    card.latency = 0.6
    routes = []
    for _ in range(6):
        before = _calls(be)["cpu"]
        _mont_mul(be, 300, m)
        routes.append("cpu" if _calls(be)["cpu"] > before else "accelerator")
    assert routes[0] == "accelerator" and routes[-1] == "cpu"
    slow = sum(r["slower_than_cpu"] for r in be.dispatch_report() if r["route"] == "accelerator")
    assert slow >= 1


def test_pinned_ops_run_where_the_yaml_says_without_measuring(fakes, monkeypatch):
    monkeypatch.setattr(dispatch, "measure_line", lambda *a, **k: pytest.fail("measured"))
    cfg = PartyConfig.model_validate({
        "party": "guest", "backend": "slow_to_start", "fallback": ["cpu"], "key_bits": 1024,
        "dispatch": {"mode": "pinned", "cpu": "steady_cpu",
                     "pin": {"mont_mul": "cpu", "default": "accelerator"}}})
    be = backend_from_config(cfg)
    assert isinstance(be, DispatchBackend) and be.selection.dispatch["active"]
    m = random_odd_modulus(1024)
    _mont_mul(be, 300, m)
    assert _calls(be) == {"accelerator": 0, "cpu": 300}
    (row,) = be.dispatch_report()
    assert (row["route"], row["reason"]) == ("cpu", "pinned by dispatch.pin")
    pk, sk = unifl.keygen(1024)
    assert sk.raw_decrypt(pk.raw_encrypt([5, 6], backend=be)) == [5, 6]
    # neither side has a fused op: the SDK composes them from MontMults, all pinned to the cpu
    assert {(r["op"], r["route"]) for r in be.dispatch_report()} == {("mont_mul", "cpu")}


def test_dispatch_config_is_validated():
    ok = {"party": "guest"}
    for bad, what in (({"mode": "sometimes"}, "mode"), ({"pin": {"mont_mul": "cpu"}}, "pinned"),
                      ({"mode": "pinned"}, "needs dispatch.pin"),
                      ({"mode": "pinned", "pin": {"mont_frob": "cpu"}}, "not ops"),
                      ({"mode": "pinned", "pin": {"mont_mul": "gpu"}}, "pin"),
                      ({"mode": "auto", "cpu": "no_such"}, "unknown backend"),
                      ({"mode": "auto", "margin": -1}, "margin"),
                      ({"mode": "auto", "speed": "max"}, "speed")):
        with pytest.raises(Exception, match=what):
            PartyConfig.model_validate({**ok, "dispatch": bad})
    with pytest.raises(Exception, match="executor: ray"):
        PartyConfig.model_validate({**ok, "executor": "ray", "dispatch": {"mode": "auto"}})
    cfg = PartyConfig.model_validate({**ok, "backend": "cpu", "fallback": [],
                                      "dispatch": {"mode": "auto", "cpu": "cpu"}})
    be = backend_from_config(cfg)
    assert not isinstance(be, DispatchBackend)
    assert be.selection.dispatch["active"] is False and "CPU backend" in be.selection.dispatch["why"]


def test_calibration_cache_round_trip_and_calibrated_mode(fakes, private_cache, monkeypatch):
    cfg = PartyConfig.model_validate({
        "party": "guest", "backend": "slow_to_start", "fallback": ["cpu"], "key_bits": 1024,
        "dispatch": {"mode": "calibrated", "cpu": "steady_cpu", "calibration_budget_s": 0.3}})
    # the start lines (mont_exp, grouped products) are composed from the card's slow MontMults:
    # skipped here, so the test measures MontMult only, at its first call
    from unifl.scheduler import select
    monkeypatch.setattr(select, "calibrate_at_start", lambda disp, bits: None)
    be = backend_from_config(cfg)
    m = random_odd_modulus(2048)
    _mont_mul(be, 4, m)
    assert be.calibration["measured"] == ["mont_mul|32|0"]
    path = private_cache / dispatch.CACHE_FILE
    assert stat.S_IMODE(os.stat(private_cache).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    data = json.loads(path.read_text())
    assert len(data["models"]) == 2 and all("mont_mul|32|0" in e["lines"]
                                             for e in data["models"].values())
    # a second start reads the cache and measures nothing
    monkeypatch.setattr(dispatch, "measure_line", lambda *a, **k: pytest.fail("measured again"))
    again = backend_from_config(cfg)
    assert again.selection.dispatch["calibration"]["cached"] == 1
    _mont_mul(again, 4, m)
    # another code version is another key: nothing read
    monkeypatch.setattr(unifl, "__version__", "99.0")
    assert dispatch.load_cached(*again.members)[0][0].lines == {}


def test_cache_never_follows_links_nor_trusts_a_shared_folder(private_cache, tmp_path):
    assert cache.write_json("x.json", {"a": 1})
    assert cache.read_json("x.json") == {"a": 1}
    # a link planted where the file goes: not read, and replaced without touching its target
    target = tmp_path / "victim.json"
    target.write_text(json.dumps({"planted": True}))
    os.unlink(private_cache / "x.json")
    os.symlink(target, private_cache / "x.json")
    assert cache.read_json("x.json") == {}
    assert cache.write_json("x.json", {"a": 2})
    assert json.loads(target.read_text()) == {"planted": True}
    assert not os.path.islink(private_cache / "x.json") and cache.read_json("x.json") == {"a": 2}
    # malformed content: ignored
    (private_cache / "bad.json").write_text("{not json")
    assert cache.read_json("bad.json") == {}
    # a folder others may write to: neither read nor written
    os.chmod(private_cache, 0o777)
    try:
        assert cache.read_json("x.json") == {} and not cache.write_json("y.json", {})
    finally:
        os.chmod(private_cache, 0o700)
    # the folder itself a link: refused
    os.rename(private_cache, tmp_path / "elsewhere")
    os.symlink(tmp_path / "elsewhere", private_cache)
    assert cache.read_json("x.json") == {} and not cache.write_json("x.json", {"a": 3})


def test_a_gain_under_the_floor_stays_on_the_cpu():
    """Twice as fast by the model but by 0.2 ms: the CPU (a launch's jitter or a shared card eats
    that much); the same ratio at 10 ms, or a floor of zero: the accelerator.  A split that would
    win by less than the floor is not made either."""
    from unifl import base_op
    m = random_odd_modulus(1024)
    ctx = base_op.mont_context(m)
    key = ("mont_mul", ctx.num_limbs, 0)

    def decide(rows: int, floor: float, split: bool = False):
        models = (CostModel("acc", {key: CostLine(0.0, 1e-6, 1e6)}),      # 1 µs a row
                  CostModel("cpu", {key: CostLine(0.0, 2e-6, 1e6)}))      # 2 µs a row
        policy = DispatchPolicy(mode="calibrated", split=split, cache=False, min_gain_s=floor)
        be = DispatchBackend(CountingBackend(_SlowToStart(), device="test card"),
                             CountingBackend(_SteadyCpu(), device="test cpu"), policy, models)
        x = ctx.to_limbs([i % m for i in range(rows)])
        return be.decide("mont_mul", (ctx, x, x))

    assert decide(200, 0.001).route == "cpu"
    assert decide(10_000, 0.001).route == "accelerator"
    assert decide(200, 0.0).route == "accelerator"
    # together 2/3 µs a row: at 3,300 rows a split wins 1.1 ms over the accelerator alone, at
    # 1,500 half a millisecond
    assert decide(3_300, 0.001, split=True).route == "split"
    assert decide(1_500, 0.001, split=True).route == "accelerator"


def test_splits_that_cost_more_than_predicted_stop_being_made(monkeypatch):
    """The pieces of a split run as their members' models say, but joining them costs 80 ms more:
    the split's own correction grows until the accelerator alone is predicted faster, and calls
    go there, each still exact."""
    be = _dispatcher(split=True)
    m = random_odd_modulus(1024)
    _mont_mul(be, 4, m)
    _costly_join(monkeypatch)
    for _ in range(8):
        _mont_mul(be, 400, m)                   # acc 0.25 s, cpu 0.4 s, together ~0.17 s + 0.08 s
    rows = {r["route"]: r for r in be.dispatch_report() if r["op"] == "mont_mul"}
    assert rows["split"]["calls"] >= 1 and rows["accelerator"]["calls"] >= 1
    assert rows["split"]["calls"] + rows["accelerator"]["calls"] == 8


def _costly_join(monkeypatch) -> None:
    """Splits of mont_mul that cost 80 ms more than their pieces (joining them, say)."""
    from unifl.scheduler import multi
    real = multi.SPLITS["mont_mul"]

    class CostlyJoin:
        def run(self, disp, op, args):
            out = real.run(disp, op, args)
            time.sleep(0.08)
            return out
    monkeypatch.setitem(multi.SPLITS, "mont_mul", CostlyJoin())


def test_what_a_job_learnt_of_its_splits_starts_the_next_job(fakes, private_cache, monkeypatch):
    """A job's corrections go to the cache when its backend closes: the next job's first call of
    that size goes where the last job's calls ended up, not to a split predicted from the chord
    alone (which ran 2-3x its prediction on an H200).  Malformed or extreme factors in the cache
    are dropped or clamped, never trusted."""
    from unifl.scheduler import select
    monkeypatch.setattr(select, "calibrate_at_start", lambda disp, bits: None)
    cfg = PartyConfig.model_validate({
        "party": "guest", "backend": "slow_to_start", "fallback": ["cpu"], "key_bits": 1024,
        "dispatch": {"mode": "calibrated", "cpu": "steady_cpu", "calibration_budget_s": 0.3}})
    _costly_join(monkeypatch)
    m = random_odd_modulus(1024)
    x = [(7 * i + 3) % m for i in range(400)]
    args = (unifl.base_op.mont_context(m),) + (unifl.base_op.mont_context(m).to_limbs(x),) * 2
    first = backend_from_config(cfg)
    assert first.decide("mont_mul", args).route == "split"       # the chord's prediction
    for _ in range(8):
        _mont_mul(first, 400, m)
    assert first.decide("mont_mul", args).route == "accelerator"
    first.close()
    data = json.loads((private_cache / dispatch.CACHE_FILE).read_text())
    (pair, entry), = data["splits"].items()
    assert entry["corrections"]["mont_mul|16|0"] > 1.2
    # the next job on this machine: the cached correction decides its first call
    again = backend_from_config(cfg)
    assert again.selection.dispatch["calibration"]["cached_corrections"]["splits"] == 1
    assert again.decide("mont_mul", args).route == "accelerator"
    # a hostile or damaged cache: a factor that is not a number, not finite, or for no op is
    # dropped; an extreme one is clamped to [1/8, 8] as the online correction is
    entry["corrections"] = {"mont_mul|16|0": 1e300, "mont_exp|16|7": "x", "bogus|1|0": 2.0,
                            "mont_prod_groups|16|0": float("nan"), "mont_mul|16|x": 3.0,
                            "mont_inverse|16|0": True}
    model_entry = next(iter(data["models"].values()))
    model_entry["corrections"] = {"mont_mul|16|0": -5.0, "mont_exp|16|7": 2.0}
    (private_cache / dispatch.CACHE_FILE).write_text(json.dumps(data))
    acc, cpu = again.members
    models, splits = dispatch.load_cached(acc, cpu)
    assert splits == {("mont_mul", 16, 0): 8.0}
    loaded = [m.correction for m in models]
    # a correction of a line the cache has no line for is dropped
    assert {("mont_mul", 16, 0): 0.125} in loaded and all(
        ("mont_exp", 16, 7) not in c for c in loaded)
    # pinned jobs learn nothing and write nothing
    pinned = PartyConfig.model_validate({**cfg.model_dump(), "dispatch": {
        "mode": "pinned", "cpu": "steady_cpu", "pin": {"default": "cpu"}}})
    before = (private_cache / dispatch.CACHE_FILE).read_text()
    backend_from_config(pinned).close()
    assert (private_cache / dispatch.CACHE_FILE).read_text() == before


def test_cost_model_lines_and_corrections():
    line = CostLine.through([(1.0, 0.05), (256.0, 0.178)])
    assert line.latency == pytest.approx(0.0495, rel=1e-3) and line.measured_units == 256
    mod = CostModel("x", {("mont_mul", 16, 0): line})
    assert mod.predict(("mont_mul", 16, 0), 100) == pytest.approx(line.predict(100))
    for _ in range(20):
        mod.observe(("mont_mul", 16, 0), 100, 2 * line.predict(100))
    assert mod.predict(("mont_mul", 16, 0), 100) == pytest.approx(2 * line.predict(100), rel=0.05)
    assert mod.predict(("mont_exp", 16, 7), 1) is None
    assert CostModel.lines_from_json({"mont_mul|16|0": [1, 2, 3], "bogus|1|0": [1, 2, 3],
                                      "mont_mul|x|0": [1, 2, 3],
                                      "mont_exp|16|7": [1, -2, 3]}) == \
        {("mont_mul", 16, 0): CostLine(1.0, 2.0, 3.0)}
    assert crossover(CostLine(0.1, 1e-3, 1), CostLine(0.0, 1e-4, 1)) is None
    assert np.isclose(crossover(CostLine(0.1, 1e-4, 1), CostLine(0.0, 1e-3, 1)), 111.11, rtol=1e-3)


def test_an_accelerator_failing_mid_run_hands_its_calls_to_the_cpu():
    card = _SlowToStart()
    be = _dispatcher(mode="pinned", pin={"default": "accelerator"}, acc=card)
    from unifl.scheduler.fallback import FallbackChain
    FallbackChain(be, [], lambda name: pytest.fail("nothing else to start"))
    m = random_odd_modulus(1024)

    def broken(ctx, a, b):
        from unifl.core.errors import DeviceError
        raise DeviceError("test card: lost its context")
    card.op_mont_mul = broken                                 # breaks after it was chosen
    _mont_mul(be, 5, m)                                       # re-run on the cpu member
    _mont_mul(be, 5, m)
    assert _calls(be) == {"accelerator": 0, "cpu": 10}
    assert be.decide("mont_mul", (unifl.base_op.mont_context(m), np.zeros((2, 16), np.uint64),
                                  np.zeros((2, 16), np.uint64))).reason == \
        "the accelerator failed earlier in this job"
    assert be.fallback_events()[0]["from"] == "slow_to_start"

"""A backend's run-time measurements, kept for the next instance on the same device
(unifl.scheduler.tuning): taken over when the key matches, and never when the record is stale,
foreign, tampered with or planted as a link."""

from __future__ import annotations

import json
import os
import time

import pytest

import unifl
from unifl.backends.gpu import recorded_choices
from unifl.configs import PartyConfig
from unifl.core import registry
from unifl.core.backend import Backend, ProbeResult
from unifl.scheduler import backend_from_config, tuning


class _SelfTimed(Backend):
    """A backend that times itself once per modulus width, like the GPU backend's
    ``kernels: auto``: ``measured`` counts the timings, ``choice`` holds their outcome."""

    name = "self_timed"
    native_ops = frozenset({"mont_mul"})
    measured = 0

    @classmethod
    def probe(cls) -> ProbeResult:
        return ProbeResult(True, "test device", ["test device"])

    def __init__(self, **options):
        super().__init__(**options)
        self.choice: dict[int, str] = {}

    def op_mont_mul(self, ctx, a, b):
        if ctx.num_limbs not in self.choice:
            type(self).measured += 1
            self.choice[ctx.num_limbs] = "fast"
        return unifl.backend("cpu").op_mont_mul(ctx, a, b)

    def tuning_key(self):
        return "test device|build 1"

    def tuning(self):
        return {"choice": {str(k): v for k, v in self.choice.items()}}

    def adopt_tuning(self, state):
        got = state.get("choice") if isinstance(state, dict) else None
        took = 0
        for k, v in (got or {}).items():
            if isinstance(k, str) and k.isdigit() and v == "fast":
                self.choice[int(k)] = v
                took += 1
        return took


@pytest.fixture
def self_timed():
    registry.register("self_timed", _SelfTimed)
    _SelfTimed.measured = 0
    yield _SelfTimed
    for table in (registry._classes, registry._probes, registry._instances):
        table.pop("self_timed", None)
    registry._explicit.discard("self_timed")


def _party() -> PartyConfig:
    """A party on the test backend, started as in a new process (no shared instance yet)."""
    registry._instances.pop("self_timed", None)
    return PartyConfig.model_validate({"party": "guest", "backend": "self_timed", "fallback": [],
                                       "key_bits": 1024})


def test_the_next_party_takes_over_what_the_first_measured(self_timed, private_cache):
    first = backend_from_config(_party())          # the self-test meets n²'s width: one timing
    assert self_timed.measured == 1
    first.close()
    record = json.loads((private_cache / tuning.CACHE_FILE).read_text())
    assert record["self_timed"]["test device|build 1"]["state"] == {"choice": {"32": "fast"}}
    backend_from_config(_party())                  # a new process would start the same way
    assert self_timed.measured == 1                # nothing timed again


def test_without_a_matching_fresh_record_it_measures(self_timed, private_cache, monkeypatch):
    backend_from_config(_party()).close()
    assert self_timed.measured == 1
    # another build (or device, or options): another key, nothing taken
    monkeypatch.setattr(_SelfTimed, "tuning_key", lambda self: "test device|build 2")
    backend_from_config(_party())
    assert self_timed.measured == 2
    # a record older than the TTL: measured again
    monkeypatch.setattr(_SelfTimed, "tuning_key", lambda self: "test device|build 1")
    path = private_cache / tuning.CACHE_FILE
    data = json.loads(path.read_text())
    data["self_timed"]["test device|build 1"]["at"] = time.time() - tuning.TTL_S - 1
    path.write_text(json.dumps(data))
    backend_from_config(_party())
    assert self_timed.measured == 3
    # the cache switched off: nothing read, nothing written
    monkeypatch.setenv("UNIFL_CALIBRATION_CACHE", "off")
    os.unlink(path)
    backend_from_config(_party()).close()
    assert self_timed.measured == 4 and not path.exists()


def test_a_planted_link_is_not_read(self_timed, private_cache, tmp_path):
    backend_from_config(_party()).close()
    path = private_cache / tuning.CACHE_FILE
    planted = tmp_path / "planted.json"
    planted.write_text(path.read_text())
    os.unlink(path)
    os.symlink(planted, path)
    backend_from_config(_party())
    assert self_timed.measured == 2


def test_the_record_keeps_the_most_recent_keys(self_timed, private_cache, monkeypatch):
    for i in range(tuning.MAX_KEYS + 3):
        monkeypatch.setattr(_SelfTimed, "tuning_key", lambda self, i=i: f"device {i}")
        backend_from_config(_party()).close()
    kept = json.loads((private_cache / tuning.CACHE_FILE).read_text())["self_timed"]
    assert sorted(kept) == sorted(f"device {i}" for i in range(3, tuning.MAX_KEYS + 3))


def test_a_backend_without_tuning_writes_nothing(private_cache):
    backend_from_config(PartyConfig.model_validate(
        {"party": "guest", "backend": "cpu", "fallback": [], "key_bits": 1024})).close()
    assert not (private_cache / tuning.CACHE_FILE).exists()


def test_the_gpu_backend_adopts_only_what_checks_out():
    """A tampered record can at most pick the slower of two exact kernel families: anything but
    a size class of the kernels mapped to a family name is dropped, rates only when finite and
    positive."""
    state = {"kernel_choice": {"32": "group", "64": "thread", "33": "group", "abc": "group",
                               "-16": "group", "16": "fastest", "128": ["group"]},
             "kernel_timing": {"32": {"thread": 4.8e4, "group": 2.6e5, "cheat": 1e99},
                               "64": {"thread": float("nan"), "group": -1, "x": True}}}
    assert recorded_choices(state) == {32: ("group", {"thread": 4.8e4, "group": 2.6e5}),
                                       64: ("thread", {})}
    for junk in (None, [], "x", {"kernel_choice": []}, {"kernel_choice": {32: "group"}}):
        assert recorded_choices(junk) == {}

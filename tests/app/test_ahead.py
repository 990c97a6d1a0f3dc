"""A party's work started ahead on a background thread (unifl.app.ahead), and the key pairs a
party owns made that way: on a thread of its own, from the job's start, and used by the protocol
as the key it would have made in place (the models equal the plaintext reference's)."""

from __future__ import annotations

import threading

import pytest

from unifl.app import vertical
from unifl.app.ahead import Ahead, key_pair
from unifl.app.jobs import run_local
from unifl.app.timing import Timings
from unifl.core.errors import WeakKeyError
from unifl.phe_sdk import paillier

from tests.helpers.vertical_jobs import BE, assert_same_model, job, reference_for


def test_the_work_runs_on_its_own_thread_and_its_value_is_handed_over():
    started, go = threading.Event(), threading.Event()

    def work() -> tuple[str, int]:
        started.set()
        go.wait(10)
        return threading.current_thread().name, 42

    ahead = Ahead(work, "unifl-test-ahead")
    assert started.wait(10)          # running before anyone asks for it
    assert ahead.seconds is None
    go.set()
    assert ahead.result() == ("unifl-test-ahead", 42)
    assert ahead.seconds is not None and ahead.seconds >= 0


def test_an_error_of_the_work_is_raised_to_the_caller_of_result():
    def work() -> int:
        raise WeakKeyError("too small")

    ahead = Ahead(work, "unifl-test-ahead")
    with pytest.raises(WeakKeyError, match="too small"):
        ahead.result()


def test_a_key_pair_not_started_ahead_is_made_in_place_and_not_reported_as_ahead(monkeypatch):
    names = _keygen_threads(monkeypatch)
    t = Timings()
    pk, sk = key_pair(None, 1024, t, "row")
    assert sk.public_key == pk and names == [threading.current_thread().name]
    (row,) = t.rows()
    assert row["subtask"] == "row" and "background_seconds" not in row


def _keygen_threads(monkeypatch) -> list[str]:
    names: list[str] = []
    real = paillier.keygen

    def spy(bits: int = 2048):
        names.append(threading.current_thread().name)
        return real(bits)

    monkeypatch.setattr(paillier, "keygen", spy)
    return names


def test_each_party_of_the_two_party_job_makes_its_key_ahead(monkeypatch):
    names = _keygen_threads(monkeypatch)
    j = job("vlr", epochs=1)
    res = run_local(j, BE)
    assert sorted(names) == ["unifl-keygen-guest", "unifl-keygen-host"]
    for role in ("guest", "host"):
        row = next(r for r in res[role]["timings"] if r["subtask"] == vertical.KEYGEN_ROW)
        assert row["background_seconds"] > 0
    assert_same_model(res, reference_for(j))


def test_only_the_arbiter_makes_a_key_in_the_coordinated_variant(monkeypatch):
    names = _keygen_threads(monkeypatch)
    j = job("vlr", parties=("guest", "host", "arbiter"), epochs=1)
    res = run_local(j, BE)
    assert names == ["unifl-keygen-arbiter"]
    assert_same_model(res, reference_for(j))


def test_the_secureboost_guest_makes_the_key_pair_ahead(monkeypatch):
    names = _keygen_threads(monkeypatch)
    j = {"job_id": "sb", "algorithm": "secureboost", "dataset": "breast",
         "parties": ["guest", "host"], "seed": 3, "key_bits": 1024,
         "params": {"n_trees": 1, "max_depth": 2}}
    res = run_local(j, BE)
    assert names == ["unifl-keygen-guest"]
    row = next(r for r in res["guest"]["timings"] if r["subtask"] == "SBT: Paillier key generation")
    assert row["background_seconds"] > 0


def test_the_horizontal_guest_makes_the_clients_key_pair_ahead(monkeypatch):
    names = _keygen_threads(monkeypatch)
    j = {"job_id": "h", "algorithm": "hlr", "dataset": "breast",
         "parties": ["guest", "host", "arbiter"], "seed": 11, "key_bits": 1024,
         "params": {"rounds": 1, "local_epochs": 1}}
    res = run_local(j, BE)
    assert names == ["unifl-keygen-guest"]
    assert res["guest"]["metrics"]["auc"] >= 0.9

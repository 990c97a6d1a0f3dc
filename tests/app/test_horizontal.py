"""Horizontal LR (FedAvg with an aggregator summing encrypted weights) equals its plaintext reference."""

import json

import numpy as np
import pytest

import unifl
from unifl.app import horizontal, reference
from unifl.app.data import load_party
from unifl.app.jobs import run_local
from unifl.core.errors import ConfigError

BE = unifl.backend("native")


def test_hlr_breast_equals_reference():
    params = {"rounds": 4, "local_epochs": 1, "batch_size": 32, "learning_rate": 0.1, "l2": 0.001}
    job = {"job_id": "h", "algorithm": "hlr", "dataset": "breast",
           "parties": ["guest", "host", "arbiter"], "seed": 11, "key_bits": 1024, "params": params}
    res = run_local(job, BE)
    json.dumps(res)  # results are JSON-serialisable
    clients = [horizontal.client_matrix(load_party("breast", r, kind="homo")) for r in ("guest", "host")]
    ref = reference.horizontal_reference(clients, rounds=4, local_epochs=1, batch_size=32,
                                         learning_rate=0.1, l2=0.001, seed=11)
    for role in ("guest", "host"):
        w = np.array(res[role]["model"]["weights"])
        assert np.linalg.norm(w - ref) / np.linalg.norm(ref) < 1e-6
    assert res["guest"]["metrics"]["auc"] >= 0.98
    assert res["arbiter"]["model"] == {}
    assert any(r["subtask"] == "HFL: aggregate encrypted models" for r in res["arbiter"]["timings"])


def test_hlr_needs_an_aggregator():
    job = {"job_id": "h", "algorithm": "hlr", "dataset": "breast", "parties": ["guest", "host"],
           "seed": 1, "key_bits": 1024, "params": {"rounds": 1}}
    with pytest.raises(ConfigError, match="arbiter"):
        run_local(job, BE)

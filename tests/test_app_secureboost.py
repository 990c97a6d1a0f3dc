"""Hetero SecureBoost: the federated trees (encrypted host histograms, O6) are identical to the
plaintext reference's; AUC on breast >= 0.99."""

import json

import numpy as np
import pytest

import unifl
from unifl.app import reference, secureboost
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import run_local, validate_job
from unifl.app.metrics import roc_auc, sigmoid
from unifl.core.errors import ConfigError

BE = unifl.backend("native")


def sb_job(dataset="breast", **params):
    base = {"n_trees": 2, "max_depth": 3}
    base.update(params)
    return {"job_id": "sb", "algorithm": "secureboost", "dataset": dataset,
            "parties": ["guest", "host"], "seed": 5, "key_bits": 1024, "params": base}


def reference_for(job):
    job = validate_job(job)
    p = secureboost.BoostParams.from_job(job["params"])
    ids = sorted_ids(load_party(job["dataset"], "guest").ids)
    g = secureboost._prepare("guest", job, p, ids, None)
    h = secureboost._prepare("host", job, p, ids, None)
    ref = reference.secureboost_reference(g[3], g[0], h[0], p, g[1], h[1])
    ref["auc"] = roc_auc(g[4], sigmoid(ref["test_score"]))
    return ref


def strip(trees):
    return [[{k: v for k, v in nd.items() if k != "record"} for nd in t] for t in trees]


@pytest.mark.parametrize("dataset,params", [("breast", {}),
                                            ("default_credit", {"max_rows": 300, "n_trees": 2,
                                                                "max_depth": 2})])
def test_secureboost_equals_reference(dataset, params):
    job = sb_job(dataset, **params)
    res = run_local(job, BE)
    json.dumps(res)  # results are JSON-serialisable
    ref = reference_for(job)
    model = res["guest"]["model"]
    assert strip(model["trees"]) == strip(ref["trees"])
    assert model["base_score"] == ref["base_score"]
    assert res["guest"]["metrics"]["auc"] == pytest.approx(ref["auc"], abs=1e-12)
    hosts = [nd for t in model["trees"] for nd in t if not nd["leaf"] and nd["owner"] == "host"]
    assert hosts, "expected some host splits"
    assert all("threshold" not in nd for t in model["trees"] for nd in t)
    assert len(res["host"]["model"]["records"]) == len(hosts)
    ops = {r["subtask"]: r["crypto_ops"] for r in res["host"]["timings"]}
    assert "O6" in ops["SBT: encrypted histograms (host)"]


def test_default_parameters_reach_auc_on_breast():
    """The federated trees equal the reference's (above), so the reference's AUC with the default
    hyper-parameters is the federated one; the slow test below runs them federated."""
    job = sb_job()
    job["params"] = {}
    assert reference_for(job)["auc"] >= 0.99


@pytest.mark.slow
def test_secureboost_default_parameters_federated():
    job = sb_job()
    job["params"] = {}
    res = run_local(job, BE)
    assert res["guest"]["metrics"]["auc"] >= 0.99
    assert strip(res["guest"]["model"]["trees"]) == strip(reference_for(job)["trees"])


def test_pack_unpack_gh_exact():
    rng = np.random.default_rng(0)
    gi = secureboost.quantise(rng.uniform(-1, 1, 1000))
    hi = secureboost.quantise(rng.uniform(0, 0.25, 1000))
    packed = secureboost.pack_gh(gi, hi)
    sums = [sum(packed[:k]) for k in (1, 10, 1000)]
    g, h = secureboost.unpack_gh(sums)
    assert g.tolist() == [int(gi[:k].sum()) for k in (1, 10, 1000)]
    assert h.tolist() == [int(hi[:k].sum()) for k in (1, 10, 1000)]


def test_secureboost_rejects_regression_labels():
    with pytest.raises(ConfigError):
        run_local(sb_job("motor", n_trees=1, max_depth=1), BE)

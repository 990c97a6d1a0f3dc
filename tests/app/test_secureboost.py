"""Hetero SecureBoost: the federated trees (encrypted host histograms, O6) are the trees of the
independently written plaintext reference (:func:`unifl.app.reference.secureboost_reference`):
same structure, split owners, features and bins, leaf weights to 1e-12 relative, the same held-out
predictions; AUC on breast >= 0.99."""

import json

import numpy as np
import pytest

import unifl
from unifl.app import binning, reference
from unifl.app.secureboost import packing, protocol as sbt_protocol
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import run_local, validate_job
from unifl.app.metrics import roc_auc, sigmoid
from unifl.app.params import params_of
from unifl.core.errors import ConfigError

from tests.helpers.data_reads import count_reads

BE = unifl.backend("native")


def sb_job(dataset="breast", **params):
    base = {"n_trees": 2, "max_depth": 3}
    base.update(params)
    return {"job_id": "sb", "algorithm": "secureboost", "dataset": dataset,
            "parties": ["guest", "host"], "seed": 5, "key_bits": 1024, "params": base}


def reference_for(job):
    """The plaintext reference on the bins both parties compute from ``job``."""
    job = validate_job(job)
    p = params_of(job)
    ids = sorted_ids(load_party(job["dataset"], "guest").ids)
    g = sbt_protocol._prepare("guest", job, p, ids, None)
    h = sbt_protocol._prepare("host", job, p, ids, None)
    ref = reference.secureboost_reference(g[3], g[0], h[0], p, g[1], h[1])
    ref["auc"] = roc_auc(g[4], sigmoid(ref["test_score"]))
    ref["test_bins"] = {"guest": g[1], "host": h[1]}
    return ref


def nested(nodes):
    """A federated tree (flat node list with ids, as the guest's model holds it) in the
    reference's nested form; the host's record ids are left out (the reference has none)."""
    by_id = {nd["id"]: nd for nd in nodes}

    def walk(i):
        nd = by_id[i]
        if nd["leaf"]:
            return {"leaf": True, "weight": nd["weight"]}
        return {"leaf": False, "owner": nd["owner"], "feature": nd["feature"], "bin": nd["bin"],
                "left": walk(nd["left"]), "right": walk(nd["right"])}
    assert len(by_id) == len(nodes)
    return walk(0)


def assert_same_tree(fed, ref, path="root"):
    """Same structure, owners, features and bins; leaf weights equal to 1e-12 relative (the
    federated code rounds −G/(H + λ) in two float steps, the reference once, from exact sums)."""
    assert fed["leaf"] == ref["leaf"], f"{path}: leaf in one tree only"
    if ref["leaf"]:
        assert fed["weight"] == pytest.approx(ref["weight"], rel=1e-12, abs=1e-15), path
        return
    for key in ("owner", "feature", "bin"):
        assert fed[key] == ref[key], f"{path}: {key} {fed[key]!r} != {ref[key]!r}"
    assert_same_tree(fed["left"], ref["left"], path + ".L")
    assert_same_tree(fed["right"], ref["right"], path + ".R")


@pytest.mark.parametrize("dataset,params", [("breast", {}),
                                            ("default_credit", {"max_rows": 300, "n_trees": 2,
                                                                "max_depth": 2})])
def test_secureboost_equals_reference(dataset, params, monkeypatch):
    job = sb_job(dataset, **params)
    reads = count_reads(monkeypatch, sbt_protocol, binning)
    res = run_local(job, BE)
    assert reads == {"guest": 1, "host": 1}     # each party reads its file once: ids, then rows
    monkeypatch.undo()
    json.dumps(res)  # results are JSON-serialisable
    ref = reference_for(job)
    model = res["guest"]["model"]
    assert len(model["trees"]) == len(ref["trees"]) == job["params"]["n_trees"]
    for k, (fed, want) in enumerate(zip(model["trees"], ref["trees"])):
        assert_same_tree(nested(fed), want, f"tree {k}")
    assert model["base_score"] == pytest.approx(ref["base_score"], rel=1e-15)
    # predictions: the federated model on the held-out bins equals the reference's scores
    fed_score = model["base_score"] + sum(
        model["learning_rate"] * reference.predict_reference_tree(nested(t), ref["test_bins"])
        for t in model["trees"])
    np.testing.assert_allclose(fed_score, ref["test_score"], rtol=1e-12, atol=1e-12)
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
    for fed, want in zip(res["guest"]["model"]["trees"], reference_for(job)["trees"]):
        assert_same_tree(nested(fed), want)


def test_pack_unpack_gh_exact():
    rng = np.random.default_rng(0)
    gi = packing.quantise(rng.uniform(-1, 1, 1000))
    hi = packing.quantise(rng.uniform(0, 0.25, 1000))
    packed = packing.pack_gh(gi, hi)
    sums = [sum(packed[:k]) for k in (1, 10, 1000)]
    g, h = packing.unpack_gh(sums)
    assert g.tolist() == [int(gi[:k].sum()) for k in (1, 10, 1000)]
    assert h.tolist() == [int(hi[:k].sum()) for k in (1, 10, 1000)]


def test_secureboost_rejects_regression_labels():
    with pytest.raises(ConfigError):
        run_local(sb_job("motor", n_trees=1, max_depth=1), BE)

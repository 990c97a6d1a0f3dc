"""Smoke tests of every ``unifl bench`` suite at tiny sizes (--quick): the JSON has the documented
schema and each suite's plot is written.  No timing is asserted."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from unifl.cli import app

ROW_KEYS = {"suite", "op", "bits", "impl", "ops_per_s", "seconds", "spread", "iqr", "repeats",
            "stand_in", "baseline", "ratio", "source", "extra"}


def run_suite(tmp_path, suite, backends=("native",)):
    args = ["bench", "--quick", "--suite", suite, "--min-time", "0.005", "--repeats", "2",
            "--out", str(tmp_path)]
    for b in backends:
        args += ["--backend", b]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    (js,) = list(tmp_path.glob("*.json"))
    assert list(tmp_path.glob(f"*-{suite}.png")), "plot not written"
    data = json.loads(js.read_text())
    assert data["schema"] == "unifl-bench/2"
    m = data["machine"]
    for k in ("cpu_count", "python", "numpy", "gmpy2", "openssl", "phe"):
        assert k in m
    rows = [r for r in data["rows"] if r["suite"] == suite]
    assert rows
    for r in rows:
        assert ROW_KEYS <= set(r)
        assert (r["ops_per_s"] or 0) > 0 or (r["seconds"] or 0) > 0
        lo, hi = r["spread"]
        assert lo <= hi
        assert r["source"] == "measured" or r["source"].startswith(("quoted", "measured ("))
    return rows


def test_ops_suite_has_o1_to_o9_with_cpu_reference(tmp_path):
    rows = run_suite(tmp_path, "ops", ("cpu", "native"))
    ops = {r["op"].split()[0] for r in rows}
    assert ops == {f"O{i}" for i in range(1, 10)}
    assert {r["bits"] for r in rows} == {1024, 2048}
    native = [r for r in rows if r["impl"] == "native"]
    assert all(r["baseline"].startswith("cpu") and r["ratio"] > 0 for r in native)


def test_peers_suite_measures_phe_and_labels_quoted(tmp_path):
    rows = run_suite(tmp_path, "peers")
    impls = {r["impl"] for r in rows}
    assert "phe (python-paillier)" in impls and "unifl native" in impls
    for r in rows:
        if "HEU" in r["impl"] and r["source"] != "measured":
            assert r["source"] == "quoted, not measured in this run" and r["ratio"] is None


def test_e2e_suite_runs_our_jobs_and_never_mixes_runs(tmp_path):
    rows = run_suite(tmp_path, "e2e")
    ours = [r for r in rows if r["impl"].startswith("unifl")]
    assert {r["op"].split()[0] for r in ours} == {"LR", "SecureBoost"}
    assert all(r["extra"]["auc"] > 0.5 for r in ours)
    for r in rows:   # a ratio only against a figure measured in this run
        if r["source"].startswith("quoted"):
            assert r["ratio"] is None


def test_table2_suite(tmp_path):
    rows = run_suite(tmp_path, "table2")
    assert {"MontMult", "ModMult", "ModExp"} <= {r["op"] for r in rows}


def test_unknown_suite_is_refused(tmp_path):
    res = CliRunner().invoke(app, ["bench", "--suite", "nope", "--out", str(tmp_path)])
    assert res.exit_code != 0

"""Smoke tests of every ``unifl bench`` suite at tiny sizes (--quick): the JSON has the documented
schema and each suite's plot is written.  No timing is asserted."""

from __future__ import annotations

import json

import pytest

from tests.helpers.paths import ROOT as REPO_ROOT
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
    (data,) = [json.loads(p.read_text()) for p in tmp_path.glob("*.json")]
    try:
        import fate.arch  # noqa: F401
    except ImportError:   # FATE's kit is measured only in FATE's venv, never in --quick: said so
        assert any(w.startswith("FATE kit") for w in data["skipped"])
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


# ---- the harness and the worker protocol (no timing asserted) ---------------------------------
def test_summarize_gives_median_spread_and_quartiles():
    from unifl.bench.harness import summarize
    st = summarize([5.0, 1.0, 3.0, 2.0, 4.0])
    assert st.median == 3.0 and st.spread == (1.0, 5.0) and st.iqr == (2.0, 4.0)
    with pytest.raises(ValueError):
        summarize([])


def test_measure_warms_up_once_and_counts_reported_ops():
    from unifl.bench import measure_full
    calls = []

    def work():
        calls.append(1)
        return 7
    st = measure_full(work, min_time=0.001, repeats=3)
    assert len(calls) >= 4      # the untimed warm-up plus at least one call per repetition
    assert st.spread[0] <= st.iqr[0] <= st.median <= st.iqr[1] <= st.spread[1]


def test_row_round_trips_and_refuses_foreign_fields():
    from unifl.bench import Row
    row = Row("peers", "encrypt", 1024, "x", 10.0, (9.0, 11.0), iqr=(9.5, 10.5), repeats=3)
    assert Row.from_dict(json.loads(json.dumps(row.to_dict()))) == row
    with pytest.raises(ValueError, match="unknown field"):
        Row.from_dict({**row.to_dict(), "speedup": 3})
    with pytest.raises(ValueError, match="lacks field"):
        Row.from_dict({k: v for k, v in row.to_dict().items() if k != "impl"})


def test_worker_output_must_be_one_rows_document():
    from unifl.bench.peers import parse_worker_output
    from unifl.core.errors import BenchmarkWorkerError
    for junk in ("", "log line\n{}", json.dumps({"schema": "other/1", "rows": []}),
                 json.dumps({"schema": "unifl-bench-rows/1", "rows": [{"op": "x"}]})):
        with pytest.raises(BenchmarkWorkerError):
            parse_worker_output(junk)


def test_worker_keeps_noise_off_the_document(monkeypatch, capfd):
    import os

    from unifl.bench import Row, peers, worker

    def noisy_rows(bits, min_time, repeats, quick, backends):
        os.write(1, b"a C library writing to fd 1\n")
        return [Row("peers", "encrypt", bits, f"kit {backends}", 5.0, (4.0, 6.0))]
    monkeypatch.setattr(peers, "fate_kit_rows", noisy_rows)
    assert worker.main(["fate-kit", "--bits", "1024", "--backend", "native"]) == 0
    out, err = capfd.readouterr()
    (row,) = peers.parse_worker_output(out)
    assert row.impl == "kit ['native']" and row.bits == 1024
    assert "a C library writing to fd 1" in err


def test_worker_failure_is_a_typed_error_with_its_stderr():
    import sys

    from unifl.bench.peers import run_worker
    from unifl.core.errors import BenchmarkWorkerError
    try:
        import fate.arch  # noqa: F401
        pytest.skip("FATE is importable here: the worker would succeed")
    except ImportError:
        pass
    with pytest.raises(BenchmarkWorkerError, match="(?s)exited 1.*No module named"):
        run_worker(sys.executable, ["fate-kit", "--bits", "1024", "--repeats", "1"], timeout=120)


def test_gpu_targets_table_sets_runs_side_by_side(tmp_path) -> None:
    """bench/gpu_targets.py --table: old and new rows aligned by (op, variant), the ratio new/old
    (old/new for the latency row, where less is better) and the targets on the default rows."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location(
        "gpu_targets", REPO_ROOT / "bench" / "gpu_targets.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    old = {"label": "baseline", "rows": [
        {"op": "ModExp 2048", "variant": "default", "batch": 65536, "value": 131_000.0},
        {"op": "32 x enc public 2048 (ms)", "variant": "default", "batch": 32, "value": 55.0}]}
    new = {"label": "new", "rows": [
        {"op": "ModExp 2048", "variant": "default", "batch": 65536, "value": 262_000.0},
        {"op": "ModExp 2048", "variant": "window 3", "batch": 65536, "value": 270_000.0},
        {"op": "32 x enc public 2048 (ms)", "variant": "default", "batch": 32, "value": 11.0}]}
    paths = []
    for run in (old, new):
        p = tmp_path / f"{run['label']}.json"
        p.write_text(json.dumps(run))
        paths.append(str(p))
    lines = mod.table(paths).splitlines()
    assert lines[0].split()[:4] == ["op", "variant", "baseline", "new"]
    modexp = next(ln for ln in lines if ln.startswith("ModExp 2048") and "default" in ln)
    assert "131.0 k/s" in modexp and "262.0 k/s" in modexp and "2.00x" in modexp
    assert ">= 250 k/s" in modexp
    window = next(ln for ln in lines if "window 3" in ln)
    assert " - " in window and "270.0 k/s" in window      # no baseline row: no ratio, no target
    lat = next(ln for ln in lines if ln.startswith("32 x enc"))
    assert "55.00 ms" in lat and "11.00 ms" in lat and "5.00x" in lat and "< 10 ms" in lat

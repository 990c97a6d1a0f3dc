"""FATE's own coordinated LR (guest, host, arbiter) and hetero SecureBoost (guest, host) on the
breast data through FATE's multiprocess launcher: kind ``unifl`` (UniFL on two different backends
across the parties) reaches the AUC of kind ``paillier`` (FATE's Rust kit).  FATE venv only
(``make test-fate``); a few minutes on 2 cores."""

import json
import os
import subprocess
import sys

import pytest
from tests.helpers.paths import ROOT as REPO_ROOT

pytestmark = pytest.mark.fate

pytest.importorskip("fate", reason="pyfate 2.2 is not installed here (run `make test-fate`)")

ROOT = str(REPO_ROOT)
PARTIES = {"lr": ["guest:9999", "host:10000", "arbiter:10001"], "sbt": ["guest:9999", "host:10000"]}


def run_job(tmp_path, algo, kind, backends="", **extra):
    out = tmp_path / f"{algo}-{kind}.json"
    cmd = [sys.executable, "-m", "unifl.fate.jobs", "--algo", algo, "--kind", kind, "--out", str(out),
           "--backends", backends, "--parties", *PARTIES[algo], "--log_level", "WARNING",
           "--data_dir", str(tmp_path / "standalone")]
    for k, v in extra.items():
        cmd += [f"--{k}", str(v)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())


@pytest.mark.parametrize("algo,backends,extra", [
    ("lr", "guest=native,host=cpu,arbiter=native", {"epochs": 3}),
    ("sbt", "guest=native,host=cpu", {"trees": 2, "depth": 3}),
])
def test_unifl_kind_reaches_paillier_auc(tmp_path, algo, backends, extra):
    ref = run_job(tmp_path, algo, "paillier", **extra)
    ours = run_job(tmp_path, algo, "unifl", backends, **extra)
    assert ours["kind"] == "unifl" and ours["phe_backend_guest"] == "native"
    assert ref["auc"] > 0.9
    assert abs(ours["auc"] - ref["auc"]) <= 1e-3, (ours, ref)

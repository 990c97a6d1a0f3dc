"""A FATE party's UniFL backend comes from its config through the same validated config ->
scheduler path as ``unifl run``: a misspelt key is refused naming it, ``devices`` splits batches,
every op is counted (FATE venv: ``make test-fate``; the launcher test runs FATE's own workers)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("fate", reason="pyfate 2.2 is not installed here (run `make test-fate`)")

from unifl.core.errors import ConfigError  # noqa: E402
from unifl.fate import kit, party  # noqa: E402
from tests.helpers.paths import ROOT as REPO_ROOT

pytestmark = pytest.mark.fate

ROOT = str(REPO_ROOT)


@pytest.fixture
def config(tmp_path, monkeypatch):
    """Write a party YAML and point this process's kit at it."""
    monkeypatch.delenv("UNIFL_BACKEND", raising=False)

    def use(text):
        path = tmp_path / "party.yaml"
        path.write_text(text)
        monkeypatch.setenv("UNIFL_CONFIG", str(path))
        party.set_backend(None)
        return path
    yield use
    party.set_backend(None)


@pytest.mark.parametrize("text,field", [
    ("party: guest\nbacknd: native\n", "backnd"),
    ("party: guest\nbackend: native\nnative: {thread: 2}\n", "native.thread"),
    ("party: guest\nbackend: native\ndevices: [0]\n", "devices.0.threads"),
    ("party: guest\nbackend: quantum\n", "backend"),
    ("party: guest\nkey_bits: 512\n", "key_bits"),
])
def test_a_misspelt_or_wrong_key_is_refused_naming_it(config, text, field):
    path = config(text)
    with pytest.raises(ConfigError) as err:
        party.current_backend()
    assert str(path) in str(err.value) and f"field '{field}'" in str(err.value), str(err.value)


def test_devices_split_the_kits_batches_and_every_op_is_counted(config):
    config("party: guest\nbackend: native\nfallback: [cpu]\ndevices: [1, 1]\n")
    sel = party.selection()
    assert sel["chosen"] == "native" and len(sel["devices"]) == 2, sel
    sk, pk, coder = kit.keygen(1024)
    x = np.arange(64, dtype=np.float64) / 7
    ev = pk.encrypt_encoded(coder.encode_f64_vec(x), obfuscate=True)
    np.testing.assert_allclose(coder.decode_f64_vec(sk.decrypt_to_encoded(ev)).numpy(), x)
    rows = [r for r in party.report() if r["calls"]]
    assert {r["device"].split(" ")[0] for r in rows} >= {"#0", "#1"}, rows


def test_auto_ranks_like_unifl_run(config):
    config("party: guest\nbackend: auto\nfallback: [cpu]\n")
    sel = party.selection()
    assert sel["requested"] == "auto" and sel["ranking"], sel


def test_a_named_backend_goes_through_the_scheduler_too(monkeypatch):
    monkeypatch.delenv("UNIFL_CONFIG", raising=False)
    monkeypatch.setenv("UNIFL_BACKEND", "cpu")
    party.set_backend(None)
    try:
        assert party.selection()["chosen"] == "cpu"
        monkeypatch.setenv("UNIFL_BACKEND", "cpuu")
        party.set_backend(None)
        with pytest.raises(ConfigError, match="UNIFL_BACKEND.*unknown backend 'cpuu'"):
            party.current_backend()
    finally:
        party.set_backend(None)


def _launch(tmp_path, env):
    """Hetero SecureBoost (1 tree of depth 2): its guest encrypts the packed gradients of every
    row in one batch, big enough to be split over two devices."""
    out = tmp_path / "sbt.json"
    cmd = [sys.executable, "-m", "unifl.fate.jobs", "--algo", "sbt", "--kind", "unifl", "--out",
           str(out), "--trees", "1", "--depth", "2", "--parties", "guest:9999", "host:10000",
           "--log_level", "WARNING", "--data_dir", str(tmp_path / "standalone")]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    env.pop("UNIFL_BACKEND", None)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def test_fates_own_workers_refuse_a_misspelt_key_and_honour_devices(tmp_path):
    """FATE's launcher: every party a process of FATE's, its kit reading UNIFL_CONFIG."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("party: guest\nbacknd: native\n")
    proc, result = _launch(tmp_path, {"UNIFL_CONFIG": str(bad)})
    assert proc.returncode != 0 and result is None
    assert "field 'backnd'" in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    good = tmp_path / "good.yaml"
    good.write_text("party: guest\nbackend: native\nfallback: [cpu]\ndevices: [1, 1]\n")
    reports = tmp_path / "reports"
    reports.mkdir()
    proc, result = _launch(tmp_path, {"UNIFL_CONFIG": str(good), "UNIFL_REPORT_DIR": str(reports)})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert len(result["phe_devices_guest"]) == 2 and result["auc"] > 0.9, result
    # every process that computed (the parties' and their computing workers') counted its ops:
    # summed, both devices ran some
    records = [json.loads(p.read_text()) for p in reports.glob("unifl-report-*.json")]
    assert records and all(len(r["selection"]["devices"]) == 2 for r in records)
    used = {row["device"].split(" ")[0] for r in records for row in r["report"] if row["calls"]}
    assert used >= {"#0", "#1"}, records

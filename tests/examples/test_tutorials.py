"""The tutorials in examples/ run as a newcomer would run them, and say what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from tests.helpers.paths import ROOT as REPO_ROOT

ROOT = REPO_ROOT
EXAMPLES = ROOT / "examples"


def _run(*args: str, timeout: float = 600) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def test_encrypt_and_compute_tutorial():
    out = _run(str(EXAMPLES / "01_encrypt_and_compute.py"), "--key-bits", "1024")
    assert "(x + x) * [2, -1, 4] + 1 = [ 7.  5. 27.]" in out, out
    assert "sum(x)                   = 2.75" in out
    assert "round trip exact: True" in out
    # x @ W printed twice, computed and expected, and they agree to the printed digits
    lines = {ln.split("=")[0].strip(): ln.split("=", 1)[1].strip() for ln in out.splitlines()
             if "=" in ln}
    assert lines["x @ W"] == lines["expected"], out


def test_two_parties_tutorial():
    out = _run(str(EXAMPLES / "02_two_parties" / "run_two_parties.py"))
    guest, host = out.split("--- host")
    assert "--- guest (exit 0)" in guest and "(exit 0)" in host, out
    assert "asked for native, ran on native" in guest or "not used: native" in guest, out
    assert "asked for cpu, ran on cpu" in host, out
    auc = float(next(ln for ln in guest.splitlines() if ln.strip().startswith("auc:")).split(":")[1])
    assert auc > 0.95, out

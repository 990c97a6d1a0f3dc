"""examples/03_fate_job: FATE's coordinated LR on UniFL's kit, run as the tutorial says, reaches the
AUC FATE's own paillier kit reaches on breast (tests/fate/test_jobs.py: 0.98720 with 3 epochs), and
each party's UniFL config is the one its YAML names.  FATE venv only (``make test-fate``)."""

import os
import subprocess
import sys

import pytest
from tests.helpers.paths import ROOT

pytestmark = pytest.mark.fate

pytest.importorskip("fate", reason="pyfate 2.2 is not installed here (run `make test-fate`)")


def test_fate_tutorial_trains_on_the_party_configs():
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("UNIFL_BACKEND", None)        # the YAML must decide, not an inherited override
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "03_fate_job" / "coordinated_lr.py")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    auc = float(out.split("guest AUC on breast: ")[1].split()[0])
    assert abs(auc - 0.98720) <= 1e-3, out[-2000:]
    assert "guest's UniFL backend: native (asked for native)" in out, out[-2000:]
    assert "on native" in out              # the guest's own ops were counted on its backend

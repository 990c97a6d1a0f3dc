"""The main job end to end: guest and host as two processes over gRPC on localhost (1024-bit keys,
one epoch, breast), the report of what ran where, and a party killed mid-run."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from typer.testing import CliRunner

from unifl.cli import app
from unifl.demo import DemoFailed, DemoOptions, run_demo

runner = CliRunner()


def test_demo_two_processes_psi_then_vertical_lr(tmp_path):
    res = runner.invoke(app, ["demo", "--key-bits", "1024", "--epochs", "1", "--timeout", "60",
                              "--workdir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "PSI intersection" in out and "AUC" in out
    assert "which hardware ran what" in out
    # the guest ran on its YAML's fpga backend, or said loudly why not
    assert "fpga" in out and ("PoCL" in out or "was not used" in out)
    # the host asked for qat: it ran there (stand-in named) or the fallback is shown
    assert "qat" in out
    import json
    guest = json.loads((tmp_path / "guest.json").read_text())
    host = json.loads((tmp_path / "host.json").read_text())
    assert guest["metrics"]["auc"] > 0.95
    assert guest["intersection_size"] == host["intersection_size"] < 569   # ids were dropped
    assert guest["backend"]["report"] and host["backend"]["report"]
    assert guest["network"]["bytes_sent"] == host["network"]["bytes_received"]


def test_killed_party_stops_the_other_with_a_named_error_within_the_timeout(tmp_path):
    timeout = 4.0
    opts = DemoOptions(guest_config="guest_native.yaml", host_config="host_native.yaml",
                       key_bits=1024, epochs=200, timeout=timeout, workdir=str(tmp_path),
                       progress=False, extra_params={"tol": None})
    killed = {}

    def kill_host(pids, run_dir):
        def later():
            time.sleep(4.0)          # both are up and training (PSI takes well under a second)
            os.kill(pids["host"], signal.SIGKILL)
            killed["at"] = time.monotonic()
        threading.Thread(target=later, daemon=True).start()
    with pytest.raises(DemoFailed) as err:
        run_demo(opts, on_start=kill_host)
    took = time.monotonic() - killed["at"]
    errors = err.value.errors
    assert "signal 9" in errors["host"]
    assert any(name in errors["guest"] for name in ("PeerTimeout", "PeerClosed", "PeerUnavailable"))
    assert "host" in errors["guest"]
    assert took < timeout + 10          # the guest's error came within its receive timeout


def test_run_refuses_a_bad_config_naming_file_and_field(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("party: guest\nbackend: tpu\n")
    res = runner.invoke(app, ["run", "--config", str(bad), "--job", "demo_psi_breast.yaml"])
    assert res.exit_code == 2
    assert "bad.yaml" in res.output and "backend" in res.output


def test_demo_with_an_arbiter_runs_three_processes(tmp_path):
    res = runner.invoke(app, ["demo", "--algorithm", "hlr", "--key-bits", "1024", "--epochs", "1",
                              "--guest-config", "guest_native.yaml", "--host-config",
                              "host_native.yaml", "--timeout", "60", "--workdir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert {p.name for p in tmp_path.glob("*.json")} == {"guest.json", "host.json", "arbiter.json"}
    assert "arbiter" in res.output and "AUC on the held-out split" in res.output

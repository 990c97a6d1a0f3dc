"""Smoke tests of the command line (devices, check, bench) so they cannot rot; the demo and run
commands are tested in tests/cli/test_demo.py."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from unifl.cli import app

runner = CliRunner()


def test_devices_lists_every_backend():
    res = runner.invoke(app, ["devices"])
    assert res.exit_code == 0, res.output
    assert "cpu" in res.output and "native" in res.output


def test_check_runs_every_backend():
    res = runner.invoke(app, ["check", "--key-bits", "1024", "--size", "8"])
    assert res.exit_code == 0, res.output
    assert "all backends agree" in res.output


def test_bench_writes_json_and_plot(tmp_path):
    res = runner.invoke(app, ["bench", "--quick", "--suite", "table2", "--backend", "native",
                              "--min-time", "0.01", "--repeats", "1", "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    js = list(tmp_path.glob("*.json"))
    assert len(js) == 1 and list(tmp_path.glob("*.png"))
    data = json.loads(js[0].read_text())
    ops = {(r["op"], r["impl"]) for r in data["rows"]}
    assert ("MontMult", "native") in ops and ("ModExp", "gmpy2 (1 core)") in ops
    assert data["machine"]["cpu_count"] >= 1


def test_an_error_naming_a_path_with_brackets_prints_it_whole(tmp_path):
    """Errors are printed as text: a path with brackets (rich markup) or longer than the console
    comes out as written, on one line."""
    folder = tmp_path / ("[bold]x" + "y" * 150)
    folder.mkdir()
    bad = folder / "bad.yaml"
    bad.write_text("party: guest\nbackend: tpu\n")
    res = runner.invoke(app, ["run", "--config", str(bad), "--job", "demo_psi_breast.yaml"])
    assert res.exit_code == 2
    assert f"{bad}: ConfigError" in res.output, res.output


def test_a_key_made_ahead_shows_its_making_beside_the_wait(monkeypatch):
    """The key generation row times the party's wait for a key made ahead; the table says so and
    how long the making took, so that a wait of 0.00 s does not read as free key generation."""
    import io

    from rich.console import Console

    from unifl import cli

    buf = io.StringIO()
    monkeypatch.setattr(cli, "console", Console(file=buf, width=400))
    rows = [{"subtask": "VFL: Paillier key generation", "crypto_ops": "keygen", "seconds": 0.01,
             "crypto_seconds": 0.01, "background_seconds": 0.42},
            {"subtask": "VFL: encrypt forward", "crypto_ops": "O1 enc", "seconds": 1.0,
             "crypto_seconds": 0.9}]
    cli.print_results({"guest": {"role": "guest", "timings": rows, "metrics": {}}}, "t")
    out = buf.getvalue()
    assert "VFL: Paillier key generation (made ahead on a thread in 0.42 s)" in out
    assert "VFL: encrypt forward (" not in out

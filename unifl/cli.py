"""The ``unifl`` command line: ``devices``, ``run`` (one party), ``demo`` (the main job: two parties
on two processes), ``check`` (every backend against plaintext), ``bench``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, List, Mapping, Optional

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="UniFL: homomorphic cryptography for federated learning on any hardware.")
# wide enough for the result tables when the output is a file or a pipe (CI logs, tests)
console = Console(width=None if os.environ.get("COLUMNS") else 132) \
    if not Console().is_terminal else Console()


def _alert(text: str, style: str = "bold red") -> None:
    """One line of warning or error: printed as text, not markup (a path, a reason or an extra
    such as ``unifl[cuda]`` may hold brackets), and never hard-wrapped (a path cut across lines is
    one nobody can copy)."""
    console.print(text, style=style, markup=False, soft_wrap=True)


@app.command()
def devices(remedy: bool = typer.Option(
        False, "--remedy",
        help="for a backend that a missing system package keeps unavailable: run the command that "
             "installs it when running as root, else print it")) -> None:
    """List every registered backend: available or why not, the devices it sees, stand-ins."""
    from .core import registry
    table = Table(title="UniFL backends")
    for col in ("backend", "available", "devices", "stand-in", "reason"):
        table.add_column(col)
    remedies: dict[str, tuple[tuple[str, ...], ...]] = {}
    for name in registry.names():
        pr = registry.probe(name)
        # names and reasons are text, not markup: "unifl[cuda]" must print as written
        table.add_row(name, "yes" if pr.available else "[red]no[/red]",
                      escape(", ".join(pr.devices)), escape(pr.stand_in or "-"),
                      escape(pr.reason))
        if not pr.available and pr.remedy:
            remedies[name] = pr.remedy
    console.print(table)
    for name, commands in remedies.items():
        _remedy(name, commands, run=remedy)


def _remedy(name: str, commands: tuple[tuple[str, ...], ...], run: bool) -> None:
    """Print the commands that make backend ``name`` available or, with ``run`` and as root, run
    them and probe again in a new process (an OpenCL loader, say, lists its platforms once)."""
    import shlex
    import shutil
    import subprocess
    import sys
    text = " && ".join("sudo " + shlex.join(c) for c in commands)
    if not run:
        console.print(f"{name}: to make it available run: {text}", markup=False)
        return
    if os.geteuid() != 0 or not all(shutil.which(c[0]) for c in commands):
        console.print(f"{name}: not root (or {commands[0][0]} missing), so not installing; "
                      f"run: {text}", markup=False)
        return
    console.print(f"{name}: installing what it needs: {' && '.join(map(shlex.join, commands))}",
                  markup=False)
    for c in commands:
        done = subprocess.run(c, check=False)
        if done.returncode != 0:
            console.print(f"{name}: {shlex.join(c)} failed with exit status {done.returncode}",
                          markup=False)
            return
    subprocess.run([sys.executable, "-m", "unifl", "devices"], check=False)


@app.command()
def check(key_bits: int = typer.Option(2048, help="Paillier key size"),
          size: int = typer.Option(64, help="vector length")) -> None:
    """Encrypt, compute and decrypt with every available backend; print what ran and check it."""
    from .core import registry
    from .phe_sdk import paillier
    from .phe_sdk.array import EncryptedArray
    console.print(f"[bold]UniFL check[/bold]: Paillier {key_bits}-bit key, vectors of {size}")
    t0 = time.perf_counter()
    pk, sk = paillier.keygen(key_bits)
    console.print(f"key generated in {time.perf_counter() - t0:.2f}s ({pk!r})")
    rng = np.random.default_rng(7)  # demo data only; key material comes from the OS CSPRNG
    x = rng.normal(size=size)
    w = rng.normal(size=(size, 3))
    expected = {"x + x": 2 * x, "x * 3.5": x * 3.5, "x @ W": x @ w, "sum(x)": x.sum()}
    table = Table(title="what ran where")
    for col in ("backend", "devices", "stand-in", "encrypt", "x+x, x*3.5, x@W, sum", "decrypt",
                "max |error|"):
        table.add_column(col)
    ok = True
    for name in registry.available():
        be = registry.backend(name)
        pr = registry.probe(name)
        t = time.perf_counter()
        ex = EncryptedArray.encrypt(pk, x, backend=be)
        t_enc = time.perf_counter() - t
        t = time.perf_counter()
        results = {"x + x": ex + ex, "x * 3.5": ex * 3.5, "x @ W": ex @ w, "sum(x)": ex.sum()}
        t_ops = time.perf_counter() - t
        t = time.perf_counter()
        err = max(float(np.max(np.abs(r.decrypt(sk) - expected[k]))) for k, r in results.items())
        t_dec = time.perf_counter() - t
        ok &= err < 1e-5
        table.add_row(name, ", ".join(be.devices), pr.stand_in or "-", f"{t_enc * 1e3:.0f} ms",
                      f"{t_ops * 1e3:.0f} ms", f"{t_dec * 1e3:.0f} ms", f"{err:.1e}")
    console.print(table)
    if not ok:
        console.print("[red]a backend returned a wrong result[/red]")
        raise typer.Exit(1)
    console.print("[green]all backends agree with the plaintext computation[/green]")


@app.command()
def bench(suite: List[str] = typer.Option(["table2", "ops"],
                                          help="table2 | ops | peers | e2e (repeatable)"),
          backend: Optional[List[str]] = typer.Option(None, help="backends (default: available)"),
          quick: bool = typer.Option(False, help="tiny batches, for a smoke run"),
          min_time: float = typer.Option(0.3, help="seconds per timed repetition"),
          repeats: int = typer.Option(3, help="timed repetitions (median and spread)"),
          out: Path = typer.Option(Path("bench/results"), help="folder for JSON and PNG")) -> None:
    """Benchmark the backends against baselines measured in the same run (see unifl/bench/)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from .bench import SUITES, Row, Session, report
    from .core import registry
    bad = [s for s in suite if s not in SUITES]
    if bad:
        raise typer.BadParameter(f"unknown suite(s) {bad}; choose from {', '.join(SUITES)}")
    chosen = [s for s in SUITES if s in suite]   # always in the documented order
    names = backend or registry.available()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as prog:
        task = prog.add_task("benchmarking", total=None)

        def progress(row: Row) -> None:
            prog.update(task, description=f"[{row.suite}] {len(session.rows)} rows; last: "
                                          f"{row.op} {row.bits} on {row.impl}")
        session = Session(names, min_time=min_time, repeats=repeats, quick=quick,
                          progress=progress)
        for s in chosen:
            prog.update(task, description=f"[{s}] starting")
            SUITES[s](session)
    console.print(report.table(session.rows))
    for what in session.skipped:
        console.print(f"[yellow]not measured: {what}[/yellow]")
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data = report.to_json(session)
    (out / f"bench-{stamp}.json").write_text(json.dumps(data, indent=1))
    written = [f"bench-{stamp}.json"]
    for s in chosen:
        report.plot(data["rows"], out / f"bench-{stamp}-{s}.png", suite=s)
        written.append(f"bench-{stamp}-{s}.png")
    console.print(f"wrote {', '.join(str(out / w) for w in written)}")


# ---- parties ---------------------------------------------------------------------------------
def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def print_results(results: Mapping[str, Mapping[str, Any]], title: str) -> None:
    """FLASH Table 1 style: sub-task, crypto ops, time, and the backend/device that ran it; then
    the per-op hardware report, the fallbacks (loudly) and the model's metrics."""
    from .party import hardware_label
    table = Table(title=title)
    for col in ("party", "sub-task", "crypto ops", "time (s)", "crypto (s)", "ran on"):
        table.add_column(col, overflow="fold", no_wrap=col.endswith("(s)"))
    for role, res in results.items():
        label = hardware_label(res.get("backend", {}), short=True)
        for row in res.get("timings", []):
            crypto = row["crypto_ops"] != "plaintext"
            name = row["subtask"]
            if row.get("background_seconds") is not None:   # the times are the wait for it
                name += f" (made ahead on a thread in {row['background_seconds']:.2f} s)"
            table.add_row(role, name, row["crypto_ops"], f"{row['seconds']:.2f}",
                          f"{row['crypto_seconds']:.2f}", label if crypto else "CPU (plaintext)")
    console.print(table)
    hw = Table(title="which hardware ran what (scheduler counters)")
    for col in ("party", "op", "backend", "device", "calls", "elements", "seconds"):
        hw.add_column(col, overflow="fold")
    for role, res in results.items():
        for r in res.get("backend", {}).get("report", []):
            be = r["backend"] + (f" [{r['stand_in']}]" if r.get("stand_in") else "")
            hw.add_row(role, r["op"], be, r["device"], str(r["calls"]), f"{r['elements']:,}",
                       f"{r['seconds']:.3f}")
    console.print(hw)
    for role, res in results.items():
        bits = []
        if "intersection_size" in res:
            bits.append(f"PSI intersection {res['intersection_size']}")
        for k, v in (res.get("metrics") or {}).items():
            if isinstance(v, float):
                bits.append(f"{k.upper() if k in ('auc', 'r2') else k} {v:.4f}")
            elif k in ("epochs", "train_rows", "test_rows"):
                bits.append(f"{k} {v}")
        net = res.get("network") or {}
        if net:
            bits.append(f"sent {_fmt_bytes(net.get('bytes_sent', 0))}, received "
                        f"{_fmt_bytes(net.get('bytes_received', 0))}, waited "
                        f"{net.get('seconds_waiting', 0.0):.1f} s for the peer")
        if "wall_seconds" in res:
            bits.append(f"wall {res['wall_seconds']:.1f} s")
        console.print(f"[bold]{role}[/bold]: " + ", ".join(bits))
    for role, res in results.items():   # last, so they cannot scroll away
        for ev in res.get("backend", {}).get("fallback_events", []):
            _alert(f"! {role}: backend {ev['backend']} was not used: {ev['reason']}",
                   "bold yellow")
        for ev in res.get("backend", {}).get("runtime_fallbacks", []):
            _alert(f"! {role}: {ev['op']} failed on {ev['from']} ({ev['from_device']}): "
                   f"{ev['reason']}; its {ev['elements']} elements re-ran on {ev['to']} "
                   f"({ev['to_device']})")
        sel = res.get("backend", {})
        ray_sel = sel.get("ray") or {}
        for lost in ray_sel.get("lost", []):
            _alert(f"! {role}: {lost['worker']} was lost ({lost['reason']}); went on with "
                   f"{ray_sel.get('live', 0)} of {ray_sel.get('workers')} Ray workers")
        if ray_sel and ray_sel.get("started", 0) < ray_sel.get("workers", 0):
            _alert(f"! {role}: {ray_sel['started']} of {ray_sel['workers']} Ray workers started",
                   "bold yellow")
        if sel.get("requested") not in (None, "auto", sel.get("chosen")):
            _alert(f"! {role} asked for {sel['requested']!r} but ran on {sel['chosen']!r} "
                   "(fallback)")
    for role, res in results.items():
        m = res.get("metrics") or {}
        rows = f" ({m['test_rows']} rows)" if "test_rows" in m else ""
        if isinstance(m.get("auc"), float):
            console.print(f"[bold green]AUC on the held-out split{rows}: {m['auc']:.4f}[/bold green]")
        if isinstance(m.get("r2"), float):
            console.print(f"[bold green]R² on the held-out split{rows}: {m['r2']:.4f}[/bold green]")


def _exit_code(exc: Exception) -> int:
    from .core.errors import ConfigError, TransportError
    return 2 if isinstance(exc, ConfigError) else 3 if isinstance(exc, TransportError) else 1


@app.command()
def run(config: Path = typer.Option(..., help="this party's YAML (or a shipped one: host_qat.yaml)"),
        job: Path = typer.Option(..., help="the job YAML (or a shipped one: demo_vlr_breast.yaml)"),
        listen: Optional[str] = typer.Option(None, help="override network.listen (HOST:PORT)"),
        peer: Optional[List[str]] = typer.Option(None, help="override a peer: ROLE=HOST:PORT"),
        key_bits: Optional[int] = typer.Option(None, help="override the key size (party and job)"),
        timeout: Optional[float] = typer.Option(None, help="override network.timeout_s"),
        resume: bool = typer.Option(False, "--resume", help="the job resumes after a party "
                                    "restarted: accept its new session (job field resume)"),
        data_dir: Optional[str] = typer.Option(None, help="folder with the datasets"),
        json_out: Optional[Path] = typer.Option(None, help="write the result (or error) as JSON"),
        progress: bool = typer.Option(True, help="progress bars"),
        table: bool = typer.Option(True, help="print the result tables")) -> None:
    """Run ONE party of a job (this process), e.g. on two machines:
    `unifl run --config guest_fpga.yaml --job demo_vlr_breast.yaml`."""
    import logging

    from .app.params import load_job
    from .configs import PartyConfig, load_party, validate
    from .core.errors import ConfigError, UniflError
    from .party import run_party
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_party(config)
        jobc = load_job(job, **({"key_bits": key_bits} if key_bits else {}),
                        **({"resume": True} if resume else {}))
        peers = {}
        for item in peer or []:
            role, sep, addr = item.partition("=")
            if not sep:
                raise ConfigError(f"--peer {item!r}: expected ROLE=HOST:PORT")
            peers[role] = addr
        # command-line overrides are validated by the same schema as the file
        data = cfg.model_dump()
        data["network"]["peers"].update(peers)
        if listen:
            data["network"]["listen"] = listen
        if timeout is not None:
            data["network"]["timeout_s"] = timeout
        if key_bits:
            data["key_bits"] = key_bits
        cfg = validate(PartyConfig, data, f"{config} (with command-line overrides)")
        result = run_party(cfg, jobc, data_dir=data_dir, progress=progress)
    except UniflError as exc:
        _alert(f"{config}: {type(exc).__name__}: {exc}")
        if json_out:
            json_out.write_text(json.dumps({"error": {"type": type(exc).__name__,
                                                      "message": str(exc)}}))
        raise typer.Exit(_exit_code(exc))
    except Exception as exc:   # a bug: keep the traceback, but tell the demo's parent what broke
        if json_out:
            json_out.write_text(json.dumps({"error": {"type": type(exc).__name__,
                                                      "message": str(exc)}}))
        raise
    if json_out:
        json_out.write_text(json.dumps(result, default=_json_default))
    if table:
        print_results({result["role"]: result}, f"UniFL {jobc.algorithm} on {jobc.dataset}: "
                      f"{result['role']}")


def _json_default(obj: Any) -> Any:
    """JSON for what ``json`` cannot encode itself: NumPy scalars and arrays as numbers and lists,
    anything else by its text."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


@app.command()
def demo(dataset: str = typer.Option("breast", help="breast | motor (LinR) | default_credit"),
         algorithm: Optional[str] = typer.Option(None, help="psi | psi+vlr | psi+vlinr | vlr | ..."),
         guest_config: str = typer.Option("guest_fpga.yaml", help="the guest's party YAML"),
         host_config: str = typer.Option("host_qat.yaml", help="the host's party YAML"),
         arbiter_config: str = typer.Option("arbiter_cpu.yaml",
                                            help="the arbiter's YAML (jobs with an arbiter: hlr)"),
         key_bits: Optional[int] = typer.Option(None, help="key size (default: the job's, 2048)"),
         epochs: Optional[int] = typer.Option(None, help="training epochs (rounds for hlr, trees "
                                              "for secureboost; default: the job's)"),
         timeout: Optional[float] = typer.Option(None, help="receive timeout of each party (s)"),
         job: Optional[str] = typer.Option(None, help="a job YAML instead of the shipped demo job"),
         data_dir: Optional[str] = typer.Option(None, help="folder with the datasets"),
         workdir: Optional[str] = typer.Option(None, help="folder for the job file, logs, results"),
         progress: bool = typer.Option(True, help="progress bars")) -> None:
    """The main job: guest and host as two processes on this machine, on different hardware.

    Each party runs on the hardware its YAML names (guest on fpga, host on qat by default, falling
    back to native/cpu and saying so); PSI-RSA on the ids, vertical LR (LinR for motor) on the
    intersection, then a table of what ran where and the held-out AUC."""
    from .demo import DemoFailed, DemoOptions, run_demo
    from .core.errors import UniflError
    opts = DemoOptions(dataset=dataset, algorithm=algorithm, guest_config=guest_config,
                       host_config=host_config, arbiter_config=arbiter_config,
                       key_bits=key_bits, epochs=epochs, timeout=timeout, data_dir=data_dir,
                       job=job, workdir=workdir, progress=progress)
    console.print(f"[bold]UniFL demo[/bold]: {job or dataset}, guest on [cyan]{guest_config}"
                  f"[/cyan], host on [cyan]{host_config}[/cyan], one process per party on "
                  "127.0.0.1 (gRPC over mutual TLS, throwaway demo certificates)")

    def started(pids: Mapping[str, int], run_dir: Path) -> None:
        console.print(f"started guest (pid {pids['guest']}) and host (pid {pids['host']}); "
                      f"logs and results in {run_dir}")
    t0 = time.perf_counter()
    try:
        results = run_demo(opts, console, on_start=started)
    except DemoFailed as exc:
        for role, msg in exc.errors.items():
            _alert(f"{role} failed: {msg}")
        raise typer.Exit(1)
    except UniflError as exc:
        _alert(f"{type(exc).__name__}: {exc}")
        raise typer.Exit(_exit_code(exc))
    ordered: dict[str, dict[str, Any]] = {r: results[r] for r in ("guest", "host", "arbiter")
                                          if r in results}
    algo = ordered["guest"].get("algorithm", "")
    data = ordered["guest"].get("dataset", dataset)
    print_results(ordered, f"UniFL demo: {algo} on {data}, {len(ordered)} processes over gRPC "
                           f"({time.perf_counter() - t0:.1f} s end to end)")


def main() -> None:
    app()


if __name__ == "__main__":
    main()

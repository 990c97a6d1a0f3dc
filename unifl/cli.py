"""The ``unifl`` command line: ``devices``, ``demo``, ``bench``."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import List, Optional

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="UniFL: homomorphic cryptography for federated learning on any hardware.")
console = Console()


@app.command()
def devices() -> None:
    """List every registered backend: available or why not, the devices it sees, stand-ins."""
    from .backends import registry
    table = Table(title="UniFL backends")
    for col in ("backend", "available", "devices", "stand-in", "reason"):
        table.add_column(col)
    for name in registry.names():
        pr = registry.probe(name)
        table.add_row(name, "yes" if pr.available else "[red]no[/red]", ", ".join(pr.devices),
                      pr.stand_in or "-", pr.reason)
    console.print(table)


@app.command()
def demo(key_bits: int = typer.Option(2048, help="Paillier key size"),
         size: int = typer.Option(64, help="vector length")) -> None:
    """Encrypt, compute and decrypt with every available backend; print what ran and check it."""
    from .backends import registry
    from .phe_sdk import paillier
    from .phe_sdk.array import EncryptedArray
    console.print(f"[bold]UniFL demo[/bold]: Paillier {key_bits}-bit key, vectors of {size}")
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
    """Benchmark the backends against baselines measured in the same run (see unifl/bench.py)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from . import bench as B
    from .backends import registry
    known = ("table2", "ops", "peers", "e2e")
    bad = [s for s in suite if s not in known]
    if bad:
        raise typer.BadParameter(f"unknown suite(s) {bad}; choose from {', '.join(known)}")
    names = backend or [n for n in registry.available()]
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=console, transient=True) as prog:
        task = prog.add_task("benchmarking", total=None)
        count = [0]

        def progress(row):
            count[0] += 1
            prog.update(task, description=f"[{row.suite}] {count[0]} rows; last: {row.op} "
                                          f"{row.bits} on {row.impl}")
        bench_ = B.Bench(names, min_time=min_time, repeats=repeats, quick=quick, progress=progress)
        for s in known:
            if s in suite:
                prog.update(task, description=f"[{s}] starting")
                getattr(bench_, s)()
    table = Table(title="UniFL benchmark (median of repetitions; ratios within this run)")
    for col in ("suite", "op", "bits", "impl", "ops/s or s", "spread (min-max)", "vs baseline",
                "source"):
        table.add_column(col)
    for r in bench_.rows:
        impl = r.impl + (f" [stand-in: {r.stand_in}]" if r.stand_in else "")
        ratio = f"{r.ratio:.2f}x {r.baseline}" if r.ratio else "-"
        if r.seconds is not None:
            val, spread = f"{r.seconds:.2f} s", f"{r.spread[0]:.2f}-{r.spread[1]:.2f} s"
        else:
            val, spread = f"{r.ops_per_s:,.0f}/s", f"{r.spread[0]:,.0f}-{r.spread[1]:,.0f}"
        table.add_row(r.suite, r.op, str(r.bits), impl, val, spread, ratio, r.source)
    console.print(table)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    data = bench_.to_json()
    (out / f"bench-{stamp}.json").write_text(json.dumps(data, indent=1))
    written = [f"bench-{stamp}.json"]
    try:
        for s in known:
            if s in suite:
                B.plot(data["rows"], str(out / f"bench-{stamp}-{s}.png"), suite=s)
                written.append(f"bench-{stamp}-{s}.png")
    except ImportError:
        console.print("install matplotlib for the plots")
    console.print(f"wrote {', '.join(str(out / w) for w in written)}")


def main() -> None:
    app()


if __name__ == "__main__":
    main()

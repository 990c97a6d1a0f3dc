"""Peak memory of a streamed two-party vertical LR as the rows grow: one epoch on the synthetic
dataset at each size, guest and host each in its own process, and the ratio largest / smallest.

    python bench/bench_scale_memory.py                       # 100k and 1M rows (the full run)
    python bench/bench_scale_memory.py --rows 20000 200000   # a quick run
        [--chunk-rows 8192] [--batch-size -1] [--epochs 1] [--key-bits 1024] [--backend native]
        [--out bench_scale_memory.json] [--workdir DIR] [--timeout 900]

Each party runs exactly as ``unifl demo`` runs it: ``unifl run --config <party yaml> --job <job
yaml>`` as its own process, over gRPC on the loopback with mutual TLS from a throwaway PKI, on the
backend of ``guest_<backend>.yaml`` / ``host_<backend>.yaml`` (the shipped configs, with the
key size overridden).  The only addition is a log level: the party process is this script's
``_party`` mode, which turns on ``unifl.app.vertical``'s progress log and then hands the same
arguments to the CLI.  A party's peak RSS is the kernel's own figure for that child
(``os.wait4`` → ``ru_maxrss``, the high-water mark of its resident set over its whole life),
not a sample; its current RSS (``/proc/<pid>/status``) is printed while it runs, with the last
progress line of each party.

The job: ``vlr`` on ``dataset: synthetic`` (default_credit's shape, 13 guest + 10 host features,
``unifl.app.synthetic``), full batch by default (one batch of every training row: the case in
which a non-streamed party would hold the whole epoch's ciphertexts), ``chunk_rows`` 8192, no
early stop.  The JSON result (``--out``) has, per size, each party's peak RSS (MiB), wall time
(the party's own ``wall_seconds`` and the bench's elapsed time) and the guest's AUC, and the
ratios largest / smallest size: the target is a peak-RSS ratio <= 1.5 for both parties.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parents[1]

TARGET_RATIO = 1.5
ROLES = ("host", "guest")             # servers first; the guest drives the job


def _party_main(argv: list[str]) -> None:
    """``_party`` mode: one party, ``unifl run <argv>``, with the vertical trainer's progress log
    (chunks done, at most every 10 s) on stderr."""
    import logging
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("unifl.app.vertical").setLevel(logging.INFO)
    from unifl.cli import app
    app(["run", *argv], prog_name="unifl")


def _status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (KiB) of a running process, {} once it is gone."""
    out: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    out[key] = int(rest.split()[0])
    except (FileNotFoundError, ProcessLookupError, ValueError):
        pass
    return out


def _last_progress(log: Path) -> str:
    """The party's last progress line (its "k/N chunks" log), or ''."""
    try:
        with open(log, "rb") as fh:
            fh.seek(max(0, fh.seek(0, os.SEEK_END) - 4096))
            lines = fh.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    hits = [ln for ln in lines if "chunks (epoch" in ln]
    return hits[-1].split(": ", 2)[-1] if hits else ""


def _job(rows: int, args: argparse.Namespace) -> dict[str, Any]:
    return {"job_id": f"scale-{rows}", "algorithm": "vlr", "dataset": "synthetic",
            "synthetic": {"rows": rows}, "parties": ["guest", "host"], "seed": 42,
            "key_bits": args.key_bits,
            "params": {"epochs": args.epochs, "batch_size": args.batch_size,
                       "chunk_rows": args.chunk_rows, "learning_rate": 0.15, "tol": None,
                       "features": {"guest": 13, "host": 10}}}


def run_size(rows: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One job at ``rows`` rows; the parties' peak RSS, wall times and the guest's metrics."""
    from unifl.app.params import load_job
    from unifl.demo import free_port, tls_party_configs

    run_dir = workdir / f"rows-{rows}"
    run_dir.mkdir(parents=True, exist_ok=True)
    job_path = run_dir / "job.yaml"
    job_path.write_text(yaml.safe_dump(_job(rows, args), sort_keys=False))
    load_job(job_path)                       # what the parties read, validated first
    configs = tls_party_configs({r: f"{r}_{args.backend}.yaml" for r in ROLES}, run_dir)
    ports = {r: free_port() for r in ROLES}
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                     else "")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {r: run_dir / f"{r}.log" for r in ROLES}
    t0 = time.perf_counter()
    for role in ROLES:
        cmd = [sys.executable, str(Path(__file__).resolve()), "_party",
               "--config", str(configs[role]), "--job", str(job_path),
               "--listen", f"127.0.0.1:{ports[role]}", "--key-bits", str(args.key_bits),
               "--timeout", str(args.timeout), "--json-out", str(run_dir / f"{role}.json"),
               "--no-table", "--no-progress"]
        for peer, port in ports.items():
            if peer != role:
                cmd += ["--peer", f"{peer}=127.0.0.1:{port}"]
        with open(logs[role], "wb") as out:
            procs[role] = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env,
                                           start_new_session=True)
    peak: dict[str, int] = {}
    code: dict[str, int] = {}
    ended: dict[str, float] = {}
    last_print = 0.0
    try:
        while len(code) < len(procs):
            for role, p in procs.items():
                if role in code:
                    continue
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    code[role] = os.waitstatus_to_exitcode(status)
                    p.returncode = code[role]
                    peak[role] = int(usage.ru_maxrss)          # KiB on Linux
                    ended[role] = time.perf_counter() - t0
            now = time.perf_counter() - t0
            if any(c != 0 for c in code.values()) and now - max(ended.values()) > 30:
                break                                          # one failed; the other had 30 s
            if now - last_print >= args.every or len(code) == len(procs):
                last_print = now
                parts = []
                for role in ROLES:
                    if role in code:
                        parts.append(f"{role} done (exit {code[role]}, peak "
                                     f"{peak[role] / 1024:.0f} MiB)")
                    else:
                        st = _status(procs[role].pid)
                        parts.append(f"{role} RSS {st.get('VmRSS', 0) / 1024:.0f} MiB "
                                     f"[{_last_progress(logs[role]) or 'starting'}]")
                print(f"  {rows:>9} rows  {now:7.1f} s  " + "; ".join(parts), flush=True)
            time.sleep(0.2)
    finally:
        for role, p in procs.items():
            if role not in code:
                try:
                    os.killpg(p.pid, signal.SIGKILL)     # its own session: that party only
                except (ProcessLookupError, PermissionError):
                    pass
                os.waitpid(p.pid, 0)
    elapsed = time.perf_counter() - t0
    results: dict[str, Any] = {}
    for role in ROLES:
        path = run_dir / f"{role}.json"
        data = json.loads(path.read_text()) if path.is_file() else {}
        if code.get(role) != 0 or "error" in data:
            err = data.get("error", {})
            tail = logs[role].read_text(errors="replace").strip().splitlines()[-5:]
            raise SystemExit(f"{role} at {rows} rows failed (exit {code.get(role)}): "
                             f"{err.get('type', '')} {err.get('message', '')}\n  "
                             + "\n  ".join(tail))
        results[role] = data
    g = results["guest"]["metrics"]
    return {
        "rows": rows, "train_rows": g["train_rows"], "test_rows": g["test_rows"],
        "auc": g.get("auc"), "elapsed_seconds": elapsed,
        "parties": {role: {"peak_rss_mib": peak[role] / 1024,
                           "wall_seconds": results[role]["wall_seconds"],
                           "ended_after_seconds": ended[role],
                           "backend": results[role]["backend"].get("chosen"),
                           "network": results[role].get("network", {})}
                    for role in ROLES},
    }


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_party"]:
        _party_main(argv[1:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[100_000, 1_000_000],
                    help="dataset sizes (rows, train and test together), in order")
    ap.add_argument("--chunk-rows", type=int, default=8192)
    ap.add_argument("--batch-size", type=int, default=-1, help="<= 0: full batch")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--key-bits", type=int, default=1024)
    ap.add_argument("--backend", default="native", help="guest_<backend>.yaml, host_<backend>.yaml")
    ap.add_argument("--timeout", type=float, default=900.0, help="each receive's timeout (s)")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between progress lines")
    ap.add_argument("--out", type=Path, default=Path("bench_scale_memory.json"))
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    if len(args.rows) < 2 or any(r < 100 for r in args.rows):
        ap.error("--rows needs at least two sizes of >= 100 rows")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="unifl-scale-mem-"))
    print(f"vertical LR, synthetic data, {args.key_bits}-bit keys, backend {args.backend}, "
          f"chunk_rows {args.chunk_rows}, batch_size {args.batch_size}, {args.epochs} epoch(s); "
          f"work files in {workdir}", flush=True)
    sizes = []
    for rows in args.rows:
        print(f"{rows} rows: starting host and guest", flush=True)
        res = run_size(rows, args, workdir)
        sizes.append(res)
        print(f"{rows} rows: " + ", ".join(
            f"{r} peak RSS {res['parties'][r]['peak_rss_mib']:.1f} MiB, "
            f"wall {res['parties'][r]['wall_seconds']:.1f} s" for r in ROLES)
            + f"; AUC {res['auc']:.4f}", flush=True)
    small, large = sizes[0], sizes[-1]
    ratios = {role: {"peak_rss": large["parties"][role]["peak_rss_mib"]
                     / small["parties"][role]["peak_rss_mib"],
                     "wall": large["parties"][role]["wall_seconds"]
                     / small["parties"][role]["wall_seconds"]} for role in ROLES}
    ok = all(r["peak_rss"] <= TARGET_RATIO for r in ratios.values())
    report = {"bench": "scale_memory", "version": 1,
              "machine": {"cpu_count": os.cpu_count(), "python": platform.python_version(),
                          "platform": platform.platform()},
              "settings": {k: (str(v) if isinstance(v, Path) else v)
                           for k, v in vars(args).items()},
              "job": _job(large["rows"], args), "sizes": sizes,
              "ratio_rows": large["rows"] / small["rows"], "ratios": ratios,
              "target_peak_rss_ratio": TARGET_RATIO, "meets_target": ok}
    args.out.write_text(json.dumps(report, indent=2))
    print(f"ratio {large['rows']}/{small['rows']} rows: " + "; ".join(
        f"{r} peak RSS x{ratios[r]['peak_rss']:.3f}, wall x{ratios[r]['wall']:.2f}"
        for r in ROLES) + f" (target peak RSS <= x{TARGET_RATIO}: "
        f"{'met' if ok else 'NOT met'}); written {args.out}", flush=True)


if __name__ == "__main__":
    main()

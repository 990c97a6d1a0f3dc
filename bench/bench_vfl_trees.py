"""The two-party vertical LR job, timed on this source tree and on another checkout, alternating in one run.

    python bench/bench_vfl_trees.py --other /path/to/other/checkout [--rounds 3] [--dataset breast]
        [--key-bits 1024] [--epochs 3] [--batch-size 128] [--backend native]

Each round runs the job once per tree, each in a fresh subprocess with that tree first on
``PYTHONPATH`` (its compiled extensions built in place), so both see the same machine load; the
report gives per-tree medians and the ratio this/other.  Used to show what a protocol change costs
(e.g. the validity checks and uniform masks of the hostile-peer hardening) on the whole job.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

_CHILD = r"""
import json, sys, time
import unifl
from unifl.app.jobs import run_local
cfg = json.loads(sys.argv[1])
job = {"job_id": "bench", "algorithm": "vlr", "dataset": cfg["dataset"], "parties": ["guest", "host"],
       "seed": 7, "key_bits": cfg["key_bits"],
       "params": {"epochs": cfg["epochs"], "batch_size": cfg["batch_size"], "learning_rate": 0.15,
                  "tol": None}}
t0 = time.perf_counter()
res = run_local(job, unifl.backend(cfg["backend"]))
dt = time.perf_counter() - t0
print(json.dumps({"seconds": dt, "auc": res["guest"]["metrics"]["auc"], "file": unifl.__file__}))
"""


def run_once(tree: Path, cfg: dict) -> dict:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cfg)], env=env, cwd=tree,
                         capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise SystemExit(f"job failed in {tree}:\n{out.stderr[-3000:]}")
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if not res["file"].startswith(str(tree)):
        raise SystemExit(f"{tree}: imported unifl from {res['file']}, not from the tree")
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--other", required=True, type=Path, help="the other checkout (built in place)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--dataset", default="breast")
    ap.add_argument("--key-bits", type=int, default=1024)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=128)
    ap.add_argument("--backend", default="native")
    a = ap.parse_args()
    cfg = {"dataset": a.dataset, "key_bits": a.key_bits, "epochs": a.epochs,
           "batch_size": a.batch_size, "backend": a.backend}
    trees = {"this": HERE, "other": a.other.resolve()}
    times: dict[str, list[float]] = {k: [] for k in trees}
    aucs: dict[str, float] = {}
    for r in range(a.rounds):
        for name, tree in (trees.items() if r % 2 == 0 else reversed(trees.items())):
            res = run_once(tree, cfg)
            times[name].append(res["seconds"])
            aucs[name] = res["auc"]
            print(f"round {r + 1}/{a.rounds} {name:5s} {res['seconds']:7.2f} s  AUC {res['auc']:.4f}",
                  flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(json.dumps({"config": cfg, "this": str(HERE), "other": str(trees["other"]),
                      "seconds": times, "median": med, "auc": aucs,
                      "ratio_this_over_other": med["this"] / med["other"]}, indent=1))


if __name__ == "__main__":
    main()

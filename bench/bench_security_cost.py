"""The cost of the malicious-peer checks on the default job, before/after in one process.

    python bench/bench_security_cost.py [--job demo_vlr_default_credit.yaml] [--reps 3]
        [--key-bits N] [--data-dir DIR] [--backend native] [--json F]

The default job (``unifl demo``: PSI-RSA on default_credit's ids, then two-party vertical LR) runs
with every party in this process (``run_local``), alternately in two configurations, ``reps``
times each (repetition k of both before repetition k+1 of either), so the ratio compares them
under the same machine load:

* ``checked``: the code as shipped -- the PSI host proves x ↦ x^e a permutation (8 e-th roots of
  nonce-derived values, trial division to 2^20, a unit check of every hashed id) before any id
  is blinded; every masked gradient is returned with its Paillier randomness and checked
  ((1 + m·n)·r^n ≡ c) before it is used; each party's residual share is bounded (plaintext).
* ``unchecked``: the same code with those three switched off (the key proof and the unit check
  skipped, decryptions returned without r and used unchecked, ``residual_bound: null``): the
  protocol's crypto before the fixes.

SecureBoost is unchanged (no range proof: bench/bench_sbt_range_proof.py measures why), so item 3
adds nothing to any job.  Printed and written (``--json``): wall seconds per repetition and
configuration, their medians, the ratio checked / unchecked, and the seconds of the sub-tasks
the checks add (``PSI: check host key``, ``PSI: prove key``, ``VFL: check decryption``) and of the
decryption that now also recovers r.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from pathlib import Path
from typing import Any, Iterator

import unifl
from unifl.app import psi, vertical
from unifl.app.jobs import run_local
from unifl.app.params import load_job
from unifl.phe_sdk import rsa_proof

ROOT = Path(__file__).resolve().parents[1]

SUBTASKS = ("PSI: check host key (permutation proof)", "PSI: prove key (permutation proof)",
            "VFL: check decryption", "VFL: decrypt peer's masked gradient")


@contextlib.contextmanager
def unchecked() -> Iterator[None]:
    """The three checks switched off, both parties alike (same messages on both sides)."""
    saved = (psi.verify_host_key, psi.prove_key, rsa_proof.check_units, vertical.open_masked,
             vertical.check_opened)
    psi.verify_host_key = lambda *a, **k: None          # type: ignore[assignment]
    psi.prove_key = lambda *a, **k: None                # type: ignore[assignment]
    rsa_proof.check_units = lambda *a, **k: None        # type: ignore[assignment]
    vertical.open_masked = lambda arr, sk, shape, sent=None, record=False: {  # type: ignore
        "m": vertical.decrypt_masked(arr, sk, shape, sent, record), "r": []}
    vertical.check_opened = lambda masked, reply: reply["m"]   # type: ignore[assignment]
    try:
        yield
    finally:
        (psi.verify_host_key, psi.prove_key, rsa_proof.check_units, vertical.open_masked,
         vertical.check_opened) = saved


def run_once(job: dict, be: Any, data_dir: str | None) -> dict[str, Any]:
    t0 = time.perf_counter()
    res = run_local(job, be, data_dir=data_dir, timeout=3600)
    wall = time.perf_counter() - t0
    sub: dict[str, float] = {}
    for role in ("guest", "host"):
        for row in res[role]["timings"]:
            if row["subtask"] in SUBTASKS:
                key = f"{role}: {row['subtask']}"
                sub[key] = sub.get(key, 0.0) + float(row["seconds"])
    return {"wall": wall, "subtasks": sub, "auc": res["guest"]["metrics"].get("auc"),
            "intersection": res["guest"].get("intersection_size")}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", default="demo_vlr_default_credit.yaml")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--key-bits", type=int, default=None)
    ap.add_argument("--data-dir", default=None)
    ap.add_argument("--backend", default="native")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    job = load_job(args.job).to_job()
    if args.key_bits:
        job["key_bits"] = args.key_bits
    checked_job = job
    unchecked_job = {**job, "params": {**job["params"], "residual_bound": None}}
    be = unifl.backend(args.backend)
    runs: dict[str, list[dict[str, Any]]] = {"checked": [], "unchecked": []}
    for k in range(args.reps):
        for name in ("unchecked", "checked") if k % 2 else ("checked", "unchecked"):
            if name == "checked":
                out = run_once(checked_job, be, args.data_dir)
            else:
                with unchecked():
                    out = run_once(unchecked_job, be, args.data_dir)
            runs[name].append(out)
            print(f"rep {k} {name:9s} {out['wall']:8.2f} s  intersection {out['intersection']}  "
                  f"auc {out['auc']}", flush=True)
    med = {name: statistics.median(r["wall"] for r in rs) for name, rs in runs.items()}
    subs = {name: {key: statistics.median(r["subtasks"].get(key, 0.0) for r in rs)
                   for key in sorted({k for r in rs for k in r["subtasks"]})}
            for name, rs in runs.items()}
    result = {"job": args.job, "key_bits": job["key_bits"], "backend": args.backend,
              "reps": args.reps, "median_wall": med, "ratio_checked_over_unchecked":
              med["checked"] / med["unchecked"], "median_subtask_seconds": subs, "runs": runs}
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

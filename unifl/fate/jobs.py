"""FATE's own coordinated LR and hetero SecureBoost on one machine, through FATE's multiprocess
launcher, with any PHE kind (``paillier``, ``unifl``, ...) and a UniFL backend per party.

Run (in the FATE venv)::

    python -m unifl.fate.jobs --algo lr --kind unifl --backends guest=native,host=cpu,arbiter=cpu \\
        --out result.json --parties guest:9999 host:10000 arbiter:10001 --log_level WARNING \\
        --data_dir /tmp/fate-standalone

The guest writes ``{"algo", "kind", "backends", "auc", "fit_seconds", ...}`` to ``--out``.  Used by
tests/fate/test_jobs.py and by ``unifl bench --suite e2e``.  Initial weights are zeros and the
trees deterministic, so two runs differing only in the PHE kind must reach the same AUC.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Optional

import unifl.fate  # noqa: F401  (registers kind "unifl" in every spawned party process)

#: FATE's example CSVs: $UNIFL_DATA, else the copies shipped with unifl.app
DATA = os.environ.get("UNIFL_DATA", os.path.join(os.path.dirname(os.path.dirname(__file__)), "app",
                                                 "data"))


def _job_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--algo", choices=["lr", "sbt"], required=True)
    p.add_argument("--kind", default="unifl")
    p.add_argument("--key_length", type=int, default=1024)
    p.add_argument("--backends", default="", help="role=backend,... (kind unifl only)")
    p.add_argument("--dataset", default="breast_hetero")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--trees", type=int, default=3)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--out", default=None)
    return p.parse_known_args()[0]


def _frame(ctx: Any, role: str, dataset: str) -> tuple[Any, Any]:  # (FATE DataFrame, pandas)
    import pandas as pd
    from fate.arch.dataframe import PandasReader
    df = pd.read_csv(os.path.join(DATA, f"{dataset}_{role}.csv"))
    df["sample_id"] = list(range(len(df)))
    kw = {"label_name": "y"} if role == "guest" else {}
    reader = PandasReader(sample_id_name="sample_id", match_id_name="id", dtype="float32", **kw)
    return reader.to_frame(ctx, df), df


def _phe_options(args: argparse.Namespace, role: str) -> dict[str, Any]:
    opts: dict[str, Any] = {"kind": args.kind, "key_length": args.key_length}
    backends = dict(kv.split("=", 1) for kv in args.backends.split(",") if kv)
    if args.kind == "unifl" and role in backends:
        opts["backend"] = backends[role]
        unifl.fate.set_backend(backends[role])     # the parties that receive the key compute too
    return opts


def _auc(pred_df: Any) -> float:  # a pandas DataFrame
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(pred_df["label"].astype(float), pred_df["predict_score"].astype(float)))


def _run_lr(ctx: Any, args: argparse.Namespace, role: str) -> Optional[dict[str, Any]]:
    from fate.ml.glm import (CoordinatedLRModuleArbiter, CoordinatedLRModuleGuest,
                             CoordinatedLRModuleHost)
    optimizer = {"method": "sgd", "penalty": "l2", "alpha": 1.0,
                 "optimizer_params": {"lr": 0.15, "weight_decay": 0}}
    lr_sched = {"method": "constant", "scheduler_params": {"factor": 1.0, "total_iters": 10000}}
    init = {"method": "zeros", "fit_intercept": True, "random_state": None}
    if role == "arbiter":
        m = CoordinatedLRModuleArbiter(epochs=args.epochs, early_stop="diff", tol=1e-4,
                                       batch_size=None, optimizer_param=optimizer,
                                       learning_rate_param=lr_sched)
        m.fit(ctx.sub_ctx("train"))
        return None
    data, _ = _frame(ctx, role, args.dataset)
    cls = CoordinatedLRModuleGuest if role == "guest" else CoordinatedLRModuleHost
    m = cls(epochs=args.epochs, batch_size=None, optimizer_param=optimizer,
            learning_rate_param=lr_sched, init_param=init,
            **({"threshold": 0.5} if role == "guest" else {}))
    t0 = time.perf_counter()
    m.fit(ctx.sub_ctx("train"), data)
    fit_s = time.perf_counter() - t0
    pred = m.predict(ctx.sub_ctx("predict"), data)
    if role == "guest":
        return {"auc": _auc(pred.as_pd_df()), "fit_seconds": fit_s}
    return None


def _run_sbt(ctx: Any, args: argparse.Namespace, role: str) -> Optional[dict[str, Any]]:
    from fate.ml.ensemble.algo.secureboost.hetero.guest import HeteroSecureBoostGuest
    from fate.ml.ensemble.algo.secureboost.hetero.host import HeteroSecureBoostHost
    data, _ = _frame(ctx, role, args.dataset)
    t0 = time.perf_counter()
    if role == "guest":
        trees = HeteroSecureBoostGuest(args.trees, max_depth=args.depth)
        trees.fit(ctx, data)
        fit_s = time.perf_counter() - t0
        return {"auc": _auc(trees.get_train_predict().as_pd_df()), "fit_seconds": fit_s}
    HeteroSecureBoostHost(args.trees, max_depth=args.depth).fit(ctx, data)
    return None


def party_main(ctx: Any) -> None:
    """One party's process (spawned by FATE's launcher)."""
    args = _job_args()
    role = ctx.local.role
    opts = _phe_options(args, role)
    key_owner = {"lr": "arbiter", "sbt": "guest"}[args.algo]
    if role == key_owner:   # FATE's modules build their kit from the context's PHE mapping
        ctx.cipher.set_phe(ctx.device, opts)
    result = (_run_lr if args.algo == "lr" else _run_sbt)(ctx, args, role)
    if result is not None and args.out:
        result.update(algo=args.algo, kind=args.kind, key_length=args.key_length,
                      backends=args.backends, dataset=args.dataset,
                      phe_backend_guest=unifl.fate.current_backend().name
                      if args.kind == "unifl" else None)
        if args.kind == "unifl":     # what the scheduler chose for the guest, and what it ran
            sel = unifl.fate.selection()
            result.update(phe_devices_guest=list(sel.get("devices", [])),
                          phe_report_guest=unifl.fate.report())
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    from fate.arch.launchers.multiprocess_launcher import launch
    launch(party_main)

"""FATE 2.2's coordinated LR on the rows and features of UniFL's own vertical LR job: one party of
it per process of FATE's multiprocess launcher.  Runs in FATE's venv; ``bench/bench_e2e.py`` starts
it (``.venv-fate/bin/python bench/e2e_fate.py --parties guest:9999 host:10000 arbiter:10001 ...``).

The data are the CSVs bench_e2e.py writes from ``unifl.app.vertical.prepare``: the same training
rows (seeded 80 % split), standardised the same way, and the held-out rows for the AUC, so FATE's
model and ours solve the same problem.  The hyper-parameters are ours: full batch, plain gradient
steps (sgd, no penalty), learning rate 0.15, zero initial weights, an intercept, and no early stop
(FATE's tolerance 0).  FATE's update is w ← w − lr·Xᵀ(0.25·Xw − 0.5·y±)/|B|, the same Taylor
gradient as ours, so the two models differ only by FATE's float32 tensors and fixed point.

With ``--count-dir`` every process (each party's main process and the workers of FATE's
partition pool, where most PHE calls run) counts kind unifl's backend ops and the kit's encryptions
with and without obfuscation (``bench/e2e_fate_hooks/sitecustomize.py``), and each party's main
process writes ``role-<pid>.json`` so the counts can be given to a role.

``--honour-obfuscation`` runs FATE with one fix: its tensor encryptor drops ``obfuscate=True`` for
the distributed tensors every coordinated-LR job uses (``PHETensorEncryptor.encrypt_encoded``
passes a DTensor on without the flag, ``fate/arch/tensor/phe/_keypair.py``; the shards are then
encrypted with the default ``obfuscate=False``), so the residuals it sends are 1 + m·n, readable by
anyone.  With the fix each shard is encrypted with obfuscation, as the calling code asks.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any, Optional


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--data-prefix", required=True,
                   help="PREFIX: PREFIX_{role}_{train,test}.csv written by bench_e2e.py")
    p.add_argument("--kind", default="unifl")
    p.add_argument("--key-length", type=int, default=1024)
    p.add_argument("--backend", default="native", help="UniFL backend of every party (kind unifl)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--learning-rate", type=float, default=0.15)
    p.add_argument("--out", required=True)
    p.add_argument("--count-dir", default=None)
    p.add_argument("--honour-obfuscation", action="store_true")
    return p.parse_known_args()[0]


def _frame(ctx: Any, path: str, role: str) -> Any:  # a FATE DataFrame
    import pandas as pd
    from fate.arch.dataframe import PandasReader
    df = pd.read_csv(path)
    df["sample_id"] = list(range(len(df)))
    kw = {"label_name": "y"} if role == "guest" else {}
    reader = PandasReader(sample_id_name="sample_id", match_id_name="id", dtype="float32", **kw)
    return reader.to_frame(ctx, df)


def honour_obfuscation() -> None:
    """Make FATE's tensor encryptor obfuscate a distributed tensor's shards when asked to."""
    from fate.arch.tensor.distributed import DTensor
    from fate.arch.tensor.phe._keypair import PHETensorEncryptor
    plain = PHETensorEncryptor.encrypt_encoded

    def encrypt_encoded(self: Any, tensor: Any, obfuscate: bool = False) -> Any:
        if obfuscate and isinstance(tensor, DTensor):
            return DTensor(tensor.shardings.map_shard(lambda x: plain(self, x, True),
                                                      type="encrypted"))
        return plain(self, tensor, obfuscate)
    PHETensorEncryptor.encrypt_encoded = encrypt_encoded


def _auc(pred_df: Any) -> float:
    from sklearn.metrics import roc_auc_score
    return float(roc_auc_score(pred_df["label"].astype(float),
                               pred_df["predict_score"].astype(float)))


def party_main(ctx: Any) -> None:
    args = _args()
    role = ctx.local.role
    if args.count_dir:
        with open(os.path.join(args.count_dir, f"role-{os.getpid()}.json"), "w") as f:
            json.dump({"role": role, "pid": os.getpid()}, f)
    if args.kind == "unifl":
        import unifl.fate
        unifl.fate.set_backend(args.backend)
    if args.honour_obfuscation:
        honour_obfuscation()
    from fate.ml.glm import (CoordinatedLRModuleArbiter, CoordinatedLRModuleGuest,
                             CoordinatedLRModuleHost)
    optimizer = {"method": "sgd", "penalty": "l2", "alpha": 0.0,
                 "optimizer_params": {"lr": args.learning_rate, "weight_decay": 0}}
    lr_sched = {"method": "constant", "scheduler_params": {"factor": 1.0, "total_iters": 10000}}
    init = {"method": "zeros", "fit_intercept": True, "random_state": None}
    result: Optional[dict[str, Any]] = None
    if role == "arbiter":
        ctx.cipher.set_phe(ctx.device, {"kind": args.kind, "key_length": args.key_length})
        m = CoordinatedLRModuleArbiter(epochs=args.epochs, early_stop="diff", tol=0.0,
                                       batch_size=None, optimizer_param=optimizer,
                                       learning_rate_param=lr_sched)
        m.fit(ctx.sub_ctx("train"))
    else:
        train = _frame(ctx, f"{args.data_prefix}_{role}_train.csv", role)
        test = _frame(ctx, f"{args.data_prefix}_{role}_test.csv", role)
        cls = CoordinatedLRModuleGuest if role == "guest" else CoordinatedLRModuleHost
        m = cls(epochs=args.epochs, batch_size=None, optimizer_param=optimizer,
                learning_rate_param=lr_sched, init_param=init,
                **({"threshold": 0.5} if role == "guest" else {}))
        t0 = time.perf_counter()
        m.fit(ctx.sub_ctx("train"), train)
        fit_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        pred = m.predict(ctx.sub_ctx("predict"), test)
        predict_s = time.perf_counter() - t1
        if role == "guest":
            result = {"auc": _auc(pred.as_pd_df()), "fit_seconds": fit_s,
                      "predict_seconds": predict_s, "train_rows": int(train.shape[0]),
                      "test_rows": int(test.shape[0])}
    if result is not None:
        result.update(kind=args.kind, key_length=args.key_length, epochs=args.epochs,
                      backend=args.backend if args.kind == "unifl" else None,
                      honour_obfuscation=bool(args.honour_obfuscation))
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    from fate.arch.launchers.multiprocess_launcher import launch
    launch(party_main)

"""FATE 2.2's own coordinated LR (guest, host, arbiter) computing its Paillier on UniFL.

What a FATE user changes is two things: the PHE kind (``kind: unifl`` where FATE says
``paillier``) and, per party, which UniFL config its processes read (``UNIFL_CONFIG``, here the
YAML beside this file).  Everything else is FATE's: its launcher starts the three parties as
processes on this machine, its modules train, and the model is the one FATE's own kit gives.

Run in the FATE venv (docs/fate.md, *Install*; ``make test-fate`` builds one as ``.venv-fate``)::

    .venv-fate/bin/python examples/03_fate_job/coordinated_lr.py

It prints the guest's AUC on the breast data and which UniFL backend ran each Paillier operation.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
#: FATE's example CSVs: $UNIFL_DATA, else the copies shipped with unifl (see read_party_frame)
DATA = os.environ.get("UNIFL_DATA")
PARTIES = ["guest:9999", "host:10000", "arbiter:10001"]
EPOCHS = 3


def read_party_frame(ctx: Any, role: str) -> Any:
    """This party's half of the breast data as a FATE DataFrame (the guest's has the label)."""
    import pandas as pd
    from fate.arch.dataframe import PandasReader

    import unifl.app
    folder = Path(DATA) if DATA else Path(unifl.app.__file__).parent / "data"
    df = pd.read_csv(folder / f"breast_hetero_{role}.csv")
    df["sample_id"] = range(len(df))
    reader = PandasReader(sample_id_name="sample_id", match_id_name="id", dtype="float32",
                          **({"label_name": "y"} if role == "guest" else {}))
    return reader.to_frame(ctx, df)


def party_main(ctx: Any) -> None:
    """One party's process; FATE's launcher calls it once per role."""
    role = ctx.local.role
    # 1. this party's hardware: its own YAML, read by every process the party starts from here on
    os.environ["UNIFL_CONFIG"] = str(HERE / f"{role}.yaml")
    import unifl.fate  # registers kind "unifl" with FATE
    from fate.ml.glm import (CoordinatedLRModuleArbiter, CoordinatedLRModuleGuest,
                             CoordinatedLRModuleHost)

    optimizer = {"method": "sgd", "penalty": "l2", "alpha": 1.0,
                 "optimizer_params": {"lr": 0.15, "weight_decay": 0}}
    schedule = {"method": "constant", "scheduler_params": {"factor": 1.0, "total_iters": 10000}}
    if role == "arbiter":
        # 2. the key owner picks the PHE kind: UniFL's kit in place of FATE's paillier
        ctx.cipher.set_phe(ctx.device, {"kind": "unifl", "key_length": 1024})
        CoordinatedLRModuleArbiter(epochs=EPOCHS, early_stop="diff", tol=1e-4, batch_size=None,
                                   optimizer_param=optimizer,
                                   learning_rate_param=schedule).fit(ctx.sub_ctx("train"))
        return
    module = (CoordinatedLRModuleGuest if role == "guest" else CoordinatedLRModuleHost)(
        epochs=EPOCHS, batch_size=None, optimizer_param=optimizer, learning_rate_param=schedule,
        init_param={"method": "zeros", "fit_intercept": True, "random_state": None},
        **({"threshold": 0.5} if role == "guest" else {}))
    data = read_party_frame(ctx, role)
    module.fit(ctx.sub_ctx("train"), data)
    predicted = module.predict(ctx.sub_ctx("predict"), data)
    if role == "guest":
        from sklearn.metrics import roc_auc_score
        df = predicted.as_pd_df()
        print(f"guest AUC on breast: {roc_auc_score(df['label'], df['predict_score']):.5f}")
        chosen = unifl.fate.selection()
        print(f"guest's UniFL backend: {chosen.get('chosen')} (asked for {chosen.get('requested')})")
        for row in unifl.fate.report():
            print(f"  {row['op']:<24} {row['elements']:>7} elements in {row['calls']:>4} calls "
                  f"on {row['backend']}")


def main() -> int:
    """Start FATE's multiprocess launcher on this file's :func:`party_main`."""
    with tempfile.TemporaryDirectory() as scratch:
        cmd = [sys.executable, __file__, "--launched", "--parties", *PARTIES,
               "--log_level", "WARNING", "--data_dir", scratch]
        return subprocess.run(cmd, timeout=1800).returncode


if __name__ == "__main__":
    if "--launched" in sys.argv:
        sys.argv.remove("--launched")
        from fate.arch.launchers.multiprocess_launcher import launch
        launch(party_main)
    else:
        sys.exit(main())

"""The vertical LR / LinR jobs and their plaintext references, as the app tests build them."""


import numpy as np

import unifl
from unifl.app import reference, vertical
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import validate_job
from unifl.app.metrics import r2_score, roc_auc
from unifl.app.params import params_of

BE = unifl.backend("native")


def job(algorithm="vlr", dataset="breast", parties=("guest", "host"), seed=7, **params):
    # a PSI-only job has no training parameters (an unknown parameter is an error)
    base = {} if algorithm == "psi" else {"epochs": 3, "batch_size": 128, "learning_rate": 0.15,
                                          "tol": None}
    base.update(params)
    return {"job_id": "t", "algorithm": algorithm, "dataset": dataset, "parties": list(parties),
            "seed": seed, "key_bits": 1024, "params": base}


def reference_for(j, ids=None, **over):
    j = validate_job(j)
    task = "lr" if j["algorithm"].endswith("vlr") else "linr"
    p = params_of(j)
    if ids is None:
        ids = sorted_ids(load_party(j["dataset"], "guest").ids)
    mg = vertical.prepare("guest", j["dataset"], ids, p, j["seed"], None)
    mh = vertical.prepare("host", j["dataset"], ids, p, j["seed"], None)
    ref = reference.vertical_reference(
        mg.X_train, mh.X_train, mg.y_train, task=task, epochs=p.epochs, batch_size=p.batch_size,
        learning_rate=p.learning_rate, l2=p.l2, tol=p.tol, seed=j["seed"], l2_mask_g=mg.l2_mask,
        **over)
    z = mg.X_test @ ref["wg"] + mh.X_test @ ref["wh"]
    ref["metric"] = roc_auc(mg.y_test, z) if task == "lr" else r2_score(mg.y_test, z)
    return ref


def rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def assert_same_model(res, ref):
    assert rel(res["guest"]["model"]["weights"], ref["wg"]) < 1e-6
    assert rel(res["host"]["model"]["weights"], ref["wh"]) < 1e-6


# ------------------------------------------------------------------ PSI

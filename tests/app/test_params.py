"""Job parameters: one model per algorithm with one set of defaults (YAML, dicts and the algorithms
read the same), errors that name the field, and the fixed-point scale honoured end to end (the
party's encoding.scale_bits or the job's, agreed at job start, within the encoder's bounds)."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import unifl
from unifl.app import horizontal, reference, vertical
from unifl.app.secureboost import packing, protocol as sbt_protocol
from unifl.app.channel import Channel, local_transports
from unifl.app.data import load_party, sorted_ids
from unifl.app.jobs import run_job, run_local
from unifl.app.params import (PARAMS, BoostParams, HorizontalParams, JobConfig, PsiParams,
                              PsiVerticalParams, VerticalParams, load_job, params_of,
                              validate_job, with_party_scale)
from unifl.configs import PartyConfig
from unifl.core.errors import ConfigError, EncodingOverflowError, OperandError, TransportError
from unifl.party import effective_job
from unifl.phe_sdk import encoding

BE = unifl.backend("native")


# ------------------------------------------------------------------ one model, one set of defaults
def test_yaml_and_dict_jobs_get_the_same_defaults(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text("job_id: job\nalgorithm: vlr\n")
    from_yaml = load_job(path).to_job()
    from_dict = validate_job({"algorithm": "vlr"})
    assert from_yaml == from_dict
    assert from_dict["seed"] == 42 and from_dict["key_bits"] == 2048
    assert from_dict["parties"] == ["guest", "host"] and from_dict["params"] == {}
    # the algorithms read the model's defaults, not defaults of their own
    p = params_of(from_dict)
    assert isinstance(p, VerticalParams) and p == VerticalParams()
    assert (p.epochs, p.batch_size, p.learning_rate, p.scale_bits) == (10, 64, 0.15, 24)
    assert HorizontalParams().scale_bits == 40 and BoostParams().scale_bits == 24


def test_every_algorithm_has_its_model_and_composed_ones_take_both():
    assert set(PARAMS) == {"psi", "vlr", "vlinr", "psi+vlr", "psi+vlinr", "hlr", "secureboost"}
    both = PsiVerticalParams.from_job({"drop_fraction": 0.1, "epochs": 2})
    assert isinstance(both, PsiParams) and isinstance(both, VerticalParams)
    assert (both.drop_fraction, both.epochs, both.batch_size) == (0.1, 2, 64)
    with pytest.raises(ConfigError, match="field 'drop_fraction': unknown field"):
        VerticalParams.from_job({"drop_fraction": 0.1})      # vlr has no PSI step to apply it to


@pytest.mark.parametrize("algorithm,params,field", [
    ("vlr", {"epoch": 3}, "epoch"),
    ("vlr", {"epochs": "3"}, "epochs"),               # strict: no coercion of strings
    ("vlr", {"fit_intercept": 1}, "fit_intercept"),
    ("vlr", {"features": {"guest": 10}}, "features.host"),
    ("vlr", {"scale_bits": 0}, "scale_bits"),
    ("hlr", {"rounds": 2, "epochs": 3}, "(top level)"),
    ("secureboost", {"scale_bits": 61}, "scale_bits"),
    ("secureboost", {"max_depth": 0}, "max_depth"),
    ("psi", {"rsa_bits": 512}, "rsa_bits"),
])
def test_bad_params_name_the_field(algorithm, params, field):
    with pytest.raises(ConfigError, match=re.escape(f"field '{field}'")):
        PARAMS[algorithm].from_job(params)
    with pytest.raises(ConfigError, match=f"field 'params.{field}'" if field != "(top level)"
                       else "field 'params'"):
        validate_job({"algorithm": algorithm, "params": params})


def test_aliases_and_retired_fields():
    assert HorizontalParams.from_job({"epochs": 3}).rounds == 3
    assert validate_job({"algorithm": "hlr", "parties": ["guest", "host", "arbiter"],
                         "params": {"epochs": 3}})["params"] == {"rounds": 3}
    with pytest.raises(ConfigError, match="mask_bits is not a parameter"):
        VerticalParams.from_job({"mask_bits": 80})


def test_parties_are_kept_in_canonical_order():
    job = validate_job({"algorithm": "hlr", "parties": ["arbiter", "host", "guest"]})
    assert job["parties"] == ["guest", "host", "arbiter"]
    with pytest.raises(ConfigError, match="parties"):
        validate_job({"algorithm": "vlr", "parties": ["guest", "arbiter"]})


# ------------------------------------------------------------------ the party's scale
def test_party_scale_replaces_the_algorithm_default_and_conflicts_are_refused():
    job = JobConfig(algorithm="hlr", parties=["guest", "host", "arbiter"])
    assert with_party_scale(job, None, "guest") is job
    assert params_of(with_party_scale(job, 30, "guest").to_job()).scale_bits == 30
    psi = JobConfig(algorithm="psi")
    assert with_party_scale(psi, 30, "guest") is psi                 # nothing to encode
    pinned = JobConfig(algorithm="vlr", params={"scale_bits": 28})
    assert with_party_scale(pinned, 28, "host").params.scale_bits == 28
    with pytest.raises(ConfigError, match="params.scale_bits = 28.*encoding.scale_bits = 30"):
        with_party_scale(pinned, 30, "host")


def test_effective_job_applies_the_party_config():
    cfg = PartyConfig(party="guest", key_bits=1024, encoding={"scale_bits": 32})
    job = effective_job(cfg, JobConfig(algorithm="vlr", key_bits=1024))
    assert job["params"]["scale_bits"] == 32
    plain = effective_job(PartyConfig(party="guest", key_bits=1024),
                          JobConfig(algorithm="hlr", key_bits=1024,
                                    parties=["guest", "host", "arbiter"]))
    assert "scale_bits" not in plain["params"] and params_of(plain).scale_bits == 40


# ------------------------------------------------------------------ the encoder's bounds
def test_encoder_scale_bounds_and_exactness():
    max_int = (1 << 2046) // 3
    assert encoding.check_scale(40) == 40 and encoding.check_scale(encoding.MAX_SCALE_BITS)
    for bad in (-1, encoding.MAX_SCALE_BITS + 1):
        with pytest.raises(OperandError, match="scale_bits must lie in"):
            encoding.encode([1.5], bad, max_int)
    with pytest.raises(OperandError, match="integer"):
        encoding.encode([1.5], True, max_int)
    x = np.array([0.1, -2.5, 1e-12, 3.0])
    enc = encoding.encode(x, 40, max_int)
    assert enc.values == [round(v * 2 ** 40) for v in (0.1, -2.5, 1e-12, 3.0)]
    np.testing.assert_array_equal(encoding.decode(enc.values, 40), np.rint(x * 2 ** 40) / 2 ** 40)
    # 1e300·2^100 is beyond float64: encoded exactly as an integer, not as inf
    big = encoding.encode(np.array([1e300, -0.5]), 100, max_int)
    assert big.values == [int(1e300) << 100, -(1 << 99)]
    assert encoding.decode(big.values, 100)[0] == 1e300
    # a decoded value beyond float64 is a named error, not an untyped OverflowError
    with pytest.raises(EncodingOverflowError, match="exact=True"):
        encoding.decode([1 << 1500], 10)
    # overflow against the key's bound still holds at every scale
    with pytest.raises(EncodingOverflowError):
        encoding.encode([2.0 ** 30], 40, (1 << 64) // 3)


# ------------------------------------------------------------------ the scale end to end
def vjob(**params):
    base = {"epochs": 2, "batch_size": 64, "learning_rate": 0.15, "tol": None, "max_rows": 200}
    base.update(params)
    return {"job_id": "s", "algorithm": "vlr", "dataset": "breast", "seed": 3, "key_bits": 1024,
            "params": base}


def vertical_reference_for(j):
    j = validate_job(j)
    p = params_of(j)
    ids = sorted_ids(load_party("breast", "guest").ids)
    mg = vertical.prepare("guest", "breast", ids, p, j["seed"], None)
    mh = vertical.prepare("host", "breast", ids, p, j["seed"], None)
    return reference.vertical_reference(
        mg.X_train, mh.X_train, mg.y_train, task="lr", epochs=p.epochs, batch_size=p.batch_size,
        learning_rate=p.learning_rate, l2=p.l2, tol=p.tol, seed=j["seed"], l2_mask_g=mg.l2_mask)


def rel(a, b):
    return float(np.linalg.norm(np.asarray(a) - b) / np.linalg.norm(b))


def test_vertical_trains_at_the_scale_it_is_given():
    """The residuals travel as round(x·2^s): the federated model's distance from the float64
    reference follows s -- coarse at 2^-8, below the tests' 1e-6 at 2^-40 (where the features'
    own 2^-24 encoding as plaintext multipliers is what is left)."""
    errors = {}
    for s in (8, 40):
        j = vjob(scale_bits=s)
        res = run_local(j, BE)
        ref = vertical_reference_for(j)
        errors[s] = max(rel(res["guest"]["model"]["weights"], ref["wg"]),
                        rel(res["host"]["model"]["weights"], ref["wh"]))
    assert 1e-5 < errors[8] < 1e-1, errors
    assert errors[40] < 1e-7 and errors[40] * 1000 < errors[8], errors


def run_roles(jobs: dict[str, dict]) -> dict[str, BaseException]:
    """Each role runs its own job dict (as parties with different configs would); the errors."""
    transports = local_transports(tuple(jobs))
    errors: dict[str, BaseException] = {}

    def party(role):
        chan = Channel(transports[role], 20, BE)
        try:
            run_job(role, jobs[role], chan, BE, progress=False)
        except BaseException as exc:  # noqa: BLE001 -- inspected by the test
            errors[role] = exc
        finally:
            chan.close()
    threads = [threading.Thread(target=party, args=(r,)) for r in jobs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(60)
    assert not any(th.is_alive() for th in threads)
    return errors


def test_parties_with_different_scales_stop_at_job_start():
    errs = run_roles({"guest": vjob(), "host": vjob(scale_bits=30)})
    assert all(isinstance(errs[r], ConfigError) for r in ("guest", "host")), errs
    assert "scale_bits = 30" in str(errs["guest"]) and "scale_bits = 24" in str(errs["host"])

    sb = {"job_id": "s", "algorithm": "secureboost", "dataset": "breast", "seed": 3,
          "key_bits": 1024, "params": {"n_trees": 1, "max_depth": 1, "max_rows": 60}}
    errs = run_roles({"guest": sb, "host": {**sb, "params": {**sb["params"], "scale_bits": 20}}})
    assert isinstance(errs["guest"], ConfigError) and "scale_bits = 20" in str(errs["guest"])

    hlr = {"job_id": "s", "algorithm": "hlr", "dataset": "breast", "seed": 3, "key_bits": 1024,
           "parties": ["guest", "host", "arbiter"], "params": {"rounds": 1}}
    errs = run_roles({"guest": hlr, "host": hlr,
                      "arbiter": {**hlr, "params": {"rounds": 1, "scale_bits": 30}}})
    # the arbiter refuses both clients; a client may see its refusal first or its closed link
    assert isinstance(errs["arbiter"], ConfigError) and "scale_bits = 40" in str(errs["arbiter"])
    assert all(isinstance(errs[r], (ConfigError, TransportError)) for r in ("guest", "host"))


def test_secureboost_and_hlr_honour_the_scale():
    sb = {"job_id": "s", "algorithm": "secureboost", "dataset": "breast", "seed": 3,
          "key_bits": 1024, "params": {"n_trees": 1, "max_depth": 2, "max_rows": 120,
                                       "scale_bits": 40}}
    res = run_local(sb, BE)
    job = validate_job(sb)
    p = params_of(job)
    ids = sorted_ids(load_party("breast", "guest").ids)
    g = sbt_protocol._prepare("guest", job, p, ids, None)
    h = sbt_protocol._prepare("host", job, p, ids, None)
    ref = reference.secureboost_reference(g[3], g[0], h[0], p)
    leaves = [nd["weight"] for nd in res["guest"]["model"]["trees"][0] if nd["leaf"]]

    def ref_leaves(node):
        return [node["weight"]] if node["leaf"] else ref_leaves(node["left"]) + ref_leaves(
            node["right"])
    assert sorted(leaves) == pytest.approx(sorted(ref_leaves(ref["trees"][0])), rel=1e-12)
    packing.check_pack_capacity(120, 56)          # 2^56 · 120 rows < 2^63
    with pytest.raises(ConfigError, match="use scale_bits <= 56"):
        packing.check_pack_capacity(120, 57)

    hl = {"job_id": "s", "algorithm": "hlr", "dataset": "breast", "seed": 3, "key_bits": 1024,
          "parties": ["guest", "host", "arbiter"], "params": {"rounds": 2, "scale_bits": 12}}
    res = run_local(hl, BE)
    clients = [horizontal.client_matrix(load_party("breast", r, kind="homo"))
               for r in ("guest", "host")]
    want = reference.horizontal_reference(clients, rounds=2, local_epochs=1, batch_size=32,
                                          learning_rate=0.1, l2=0.0, seed=3)
    err = rel(res["guest"]["model"]["weights"], want)
    assert 1e-7 < err < 1e-2          # 2^-12 resolution shows; at the default 2^-40 it would not

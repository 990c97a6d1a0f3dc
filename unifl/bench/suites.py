"""The suites of ``unifl bench``: UniFL's backends beside a baseline measured in the same run.

* ``table2`` -- UniFL Table 2, the core ops: MontMult, ModMult and ModExp at a 2048-bit modulus (with
  2048-bit exponents) and Paillier encryption with a 1024-bit key, per backend, against gmpy2 on one
  core and python-paillier.
* ``ops`` -- FLASH's nine FL operations O1-O9 (§3.1): Paillier encrypt, decrypt, ct+ct, ct*int64,
  matmul, histogram, and RSA sign / blind / unblind, at 1024- and 2048-bit keys, per backend, against
  the ``cpu`` backend (the gmpy2 reference) of the same run.
* ``peers`` -- the Paillier operations through python-paillier (the baseline), UniFL's backends, FATE's
  own kit, UniFL's FATE kit and SecretFlow HEU (see :mod:`unifl.bench.peers`).
* ``e2e`` -- the apps: our vertical LR and SecureBoost (all parties as threads of this process)
  against FATE's coordinated LR and hetero SecureBoost.

Every device-resident result (gpu) is fetched inside the timed call, so every row is host to host.
"""

from __future__ import annotations

import secrets
import time
from typing import Any, Callable, Sequence

import numpy as np

from .. import base_op, mod_op
from ..core import registry
from ..phe_sdk import ops as flops
from ..phe_sdk import paillier, rsa
from ..phe_sdk.array import EncryptedArray
from ..phe_sdk.paillier import decrypt_limbs, encrypt_limbs
from . import peers
from .harness import Row, Session, Workload, summarize

__all__ = ["SUITES", "table2", "ops", "paillier_peers", "e2e"]


def _rand_below(m: int, n: int) -> list[int]:
    return [secrets.randbelow(m) for _ in range(n)]


def _host(x: Any) -> np.ndarray:
    """A result as a host array: fetches a device-resident batch (gpu), so timing covers the copy."""
    return np.asarray(x.limbs if isinstance(x, EncryptedArray) else x)


def _ordered(backends: Sequence[str]) -> list[str]:
    """``backends`` with ``cpu`` first: it is the reference every later row is divided by."""
    names = list(backends)
    return ["cpu"] + [n for n in names if n != "cpu"] if "cpu" in names else names


# ---- core ops and Paillier encryption (UniFL Table 2) ------------------------------------------
def table2(s: Session) -> None:
    """MontMult, ModMult and ModExp of 2048-bit operands (2048-bit exponents) and Paillier encryption
    with a 1024-bit key (UniFL Table 2), per backend; ratios against gmpy2 (ModMult, ModExp) and
    python-paillier (encryption) measured just before."""
    bits = 2048
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = base_op.mont_context(m)
    n_mul = 2000 if s.quick else 20000
    n_exp = 20 if s.quick else 100
    a_i, b_i = _rand_below(m, n_mul), _rand_below(m, n_mul)
    e_full = [secrets.randbits(bits) | (1 << (bits - 1)) for _ in range(n_exp)]
    g_mul = s.add(peers.gmpy2_modmul(s, a_i, b_i, m))
    g_exp = s.add(peers.gmpy2_modexp(s, a_i[:n_exp], e_full, m))

    a, b = ctx.to_limbs(a_i), ctx.to_limbs(b_i)
    exps = mod_op.exp_limbs(e_full)
    pk, _ = paillier.keygen(1024)
    enc_op = "Paillier enc (1024-bit key)"
    phe_row = peers.phe_encrypt(s, pk.n, 1024)
    if phe_row is not None:
        s.add(phe_row)
    for name in s.backends:
        be = registry.backend(name)
        si = s.stand_in(name)
        nb = n_exp if name != "cpu" else 20    # the gmpy2 reference composes slowly: fewer per call
        m_l = pk.plaintext_limbs(_rand_below(pk.n, 200 if name != "cpu" else 20))
        cases: list[tuple[str, int, Workload, Row | None]] = [
            ("MontMult", bits, lambda: len(_host(base_op.mont_mul(be, ctx, a, b, checked=False))),
             g_mul),
            ("ModMult", bits, lambda: len(_host(mod_op.mod_mul(be, ctx, a, b))), g_mul),
            ("ModExp", bits, lambda: len(_host(mod_op.mod_exp(be, ctx, a[:nb], exps[:nb]))), g_exp),
            (enc_op, 1024, lambda: len(_host(encrypt_limbs(be, pk, m_l))), phe_row),
        ]
        for op, op_bits, fn, base in cases:
            row = s.timed("table2", op, op_bits, name, fn, si)
            if base is not None and base.ops_per_s and row.ops_per_s is not None:
                row.baseline = "phe" if base is phe_row else f"gmpy2 {base.op}"
                row.ratio = row.ops_per_s / base.ops_per_s
            s.add(row)


# ---- FLASH O1-O9 ---------------------------------------------------------------------------------
def ops(s: Session, key_bits: Sequence[int] = (1024, 2048)) -> None:
    """FLASH's nine FL operations O1-O9 per backend, with the speedup over the ``cpu`` backend of
    this run.  O5 counts multiply-accumulates, O6 histogram elements (samples × features), O7-O9
    RSA operations with a key of the same size; O1/O2 time the limb-level encrypt/decrypt (the
    fixed-point encoding of :func:`unifl.phe_sdk.ops.encrypt` is host-only NumPy work)."""
    for bits in key_bits:
        pk, sk = paillier.keygen(bits)
        rpk, rsk = rsa.keygen(bits)
        ref: dict[str, float] = {}
        for name in _ordered(s.backends):
            be = registry.backend(name)
            si = s.stand_in(name)
            slow = name == "cpu"
            n = (40 if bits == 1024 else 12) if slow else (400 if bits == 1024 else 100)
            if s.quick:
                n = 6 if slow else 16
            # benchmark data from a seeded generator; every key comes from the OS CSPRNG
            x = np.random.default_rng(1).integers(-(1 << 40), 1 << 40, n)
            m_l = pk.plaintext_limbs([int(v) % pk.n for v in x])
            c = encrypt_limbs(be, pk, m_l)
            arr = EncryptedArray(pk, c, (n,), 0, 1 << 40, be)
            k64 = np.random.default_rng(2).integers(-(1 << 62), 1 << 62, n)
            cols = n
            X = np.random.default_rng(3).integers(-(1 << 31), 1 << 31, (2 if s.quick else 4, cols))
            feats, nbins = (2, 4) if s.quick else (4, 16)
            bins = np.random.default_rng(4).integers(0, nbins, (n, feats))
            rv = _rand_below(rpk.n, n)
            blinded, r_vals = flops.rsa_blind(rpk, rv, be)
            signed = flops.rsa_decrypt(rsk, blinded, be)
            cases: list[tuple[str, Workload]] = [
                ("O1 Paillier encrypt", lambda: len(_host(encrypt_limbs(be, pk, m_l)))),
                ("O2 Paillier decrypt", lambda: len(_host(decrypt_limbs(be, sk, c)))),
                ("O3 ct+ct", lambda: len(_host(flops.add(arr, arr)))),
                ("O4 ct*int64", lambda: len(_host(flops.mul(arr, k64)))),
                ("O5 matmul (MAC/s)", lambda: len(_host(flops.matmul(X, arr))) * cols),
                ("O6 histogram (elem/s)",
                 lambda: (_host(flops.histogram(arr, bins, nbins)), n * feats)[1]),
                ("O7 RSA sign (private, CRT)", lambda: len(flops.rsa_decrypt(rsk, rv, be))),
                ("O8 RSA blind", lambda: len(flops.rsa_blind(rpk, rv, be)[0])),
                ("O9 RSA unblind", lambda: len(flops.rsa_unblind(rpk, signed, r_vals, be))),
            ]
            for op, fn in cases:
                row = s.timed("ops", op, bits, name, fn, si, batch=n)
                rate = row.ops_per_s or 0.0
                if name == "cpu":
                    ref[op] = rate
                if ref.get(op):
                    row.baseline, row.ratio = "cpu backend (gmpy2)", rate / ref[op]
                s.add(row)


# ---- Paillier against the peers --------------------------------------------------------------------
def _unifl_paillier(s: Session, bits: int, name: str) -> list[Row]:
    be = registry.backend(name)
    pk, sk = paillier.keygen(bits)
    n = (16 if s.quick else 400) if name != "cpu" else (4 if s.quick else 20)
    x = np.random.default_rng(1).integers(-(1 << 40), 1 << 40, n)
    m_l = pk.plaintext_limbs([int(v) % pk.n for v in x])
    c = encrypt_limbs(be, pk, m_l)
    arr = EncryptedArray(pk, c, (n,), 0, 1 << 40, be)
    k64 = np.random.default_rng(2).integers(0, 1 << 62, n)
    return peers.paillier_rows(s, bits, f"unifl {name}", {
        "encrypt": lambda: len(_host(encrypt_limbs(be, pk, m_l))),
        "decrypt": lambda: len(_host(decrypt_limbs(be, sk, c))),
        "ct+ct": lambda: flops.add(arr, arr).size,
        "ct*int64": lambda: flops.mul(arr, k64).size}, s.stand_in(name))


def paillier_peers(s: Session, key_bits: Sequence[int] = (1024, 2048)) -> None:
    """Paillier encrypt, decrypt, ct+ct and ct*int64 through python-paillier (the baseline), UniFL's
    backends, FATE's kit and UniFL's FATE kit, and SecretFlow HEU; ratios over ``phe`` only for
    rows measured in this run."""
    for bits in key_bits:
        pk, sk = paillier.keygen(bits)
        base_rows = [s.add(r) for r in peers.phe_ops(s, bits, pk.n, sk.p, sk.q)]
        base = {r.op: r.ops_per_s for r in base_rows}
        rows: list[Row] = []
        for name in s.backends:
            rows += _unifl_paillier(s, bits, name)
        rows += peers.fate_kit(s, bits)
        rows += peers.heu(s, bits)
        for row in rows:
            b = base.get(row.op)
            if b and row.measured and row.ops_per_s is not None:   # never against a quoted figure
                row.baseline, row.ratio = "phe", row.ops_per_s / b
            s.add(row)


# ---- the apps ---------------------------------------------------------------------------------------
def e2e(s: Session) -> None:
    """Our vertical LR and SecureBoost (unifl.app, every party a thread of this process) on the
    breast data with 1024-bit keys, per backend, against FATE's jobs
    (:func:`unifl.bench.peers.fate_jobs`); a ratio only against FATE measured in this run."""
    from ..app.jobs import run_local
    q = s.quick
    lr_p: dict[str, Any] = {"epochs": 1 if q else 3, "batch_size": 0, "learning_rate": 0.15,
                            "tol": None, **({"max_rows": 80} if q else {})}
    sb_p: dict[str, Any] = {"n_trees": 1 if q else 3, "max_depth": 2 if q else 3,
                            **({"max_rows": 80} if q else {})}
    rows_note = ", 80 rows" if q else ""
    jobs = {
        f"LR ({lr_p['epochs']} epochs, full batch){rows_note}": {"algorithm": "vlr", "params": lr_p},
        f"SecureBoost ({sb_p['n_trees']} trees, depth {sb_p['max_depth']}){rows_note}":
            {"algorithm": "secureboost", "params": sb_p},
    }
    fate_ref = peers.fate_jobs(s)
    for op, spec in jobs.items():
        job = {"job_id": "bench", "dataset": "breast", "parties": ["guest", "host"], "seed": 7,
               "key_bits": 1024, **spec}
        base = fate_ref.get((op, "paillier"))
        for name in s.backends:
            be = registry.backend(name)
            times, auc = [], None
            for _ in range(1 if q else max(1, min(s.repeats, 3))):
                t0 = time.perf_counter()
                res = run_local(job, be, progress=False, timeout=600)
                times.append(time.perf_counter() - t0)
                auc = res["guest"]["metrics"].get("auc")
            st = summarize(times)
            row = Row("e2e", op, 1024, f"unifl {name}", None, st.spread, s.stand_in(name),
                      iqr=st.iqr, repeats=len(times), seconds=st.median,
                      extra={"auc": auc, "note": "wall time of the whole job (keygen, both "
                             "parties); trains on the app's 80% split, AUC on the 20% test rows"})
            if base is not None and base.measured and base.seconds:   # ratios within this run only
                row.baseline, row.ratio = "FATE paillier", base.seconds / st.median
            s.add(row)
        for kind in ("paillier", "unifl"):
            ref = fate_ref.get((op, kind))
            if ref is None:
                continue
            if base is not None and ref.measured and base.seconds and ref.seconds:
                ref.baseline, ref.ratio = "FATE paillier", base.seconds / ref.seconds
            s.add(ref)


#: The suites by name, in the order ``unifl bench`` runs them.
SUITES: dict[str, Callable[[Session], None]] = {
    "table2": table2, "ops": ops, "peers": paillier_peers, "e2e": e2e}

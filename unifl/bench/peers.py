"""The implementations UniFL is measured against, each in the same run as UniFL's own rows.

* gmpy2 (GMP) on one core: ModMult and ModExp (UniFL Table 2's CPU column);
* python-paillier (``phe``): Paillier encrypt, decrypt, ct+ct, ct*int64 -- the baseline of the
  ``peers`` suite;
* FATE's own Paillier kit (``fate_utils``, Rust) and UniFL's FATE kit through FATE's kit API: in this
  process when FATE imports here, else in FATE's own virtual environment through
  ``python -m unifl.bench.worker`` (pyfate pins pydantic 1, UniFL uses 2);
* FATE's coordinated LR and hetero SecureBoost jobs through FATE's launcher
  (``python -m unifl.fate.jobs``), the baseline of the ``e2e`` suite;
* SecretFlow HEU (DJN / zpaillier) when importable.

Where HEU or FATE cannot run here, their published figures are used instead, on rows whose
``source`` says "quoted, not measured in this run"; no ratio is ever taken against a quoted row.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np

from ..core.errors import BenchmarkWorkerError
from .harness import ROWS_SCHEMA, Row, Session, Workload, measure_full

__all__ = ["PAILLIER_OPS", "HEU_QUOTED", "FATE_JOBS_QUOTED", "gmpy2_modmul", "gmpy2_modexp",
           "phe_encrypt", "phe_ops", "paillier_rows", "fate_kit", "fate_kit_rows", "fate_jobs",
           "heu", "fate_python", "run_worker", "parse_worker_output"]

#: The Paillier operations of the ``peers`` suite, in table order.
PAILLIER_OPS = ("encrypt", "decrypt", "ct+ct", "ct*int64")

#: SecretFlow HEU (DJN) figures as published for a 2-core x86-64 with 2 threads, in ops/s; shown
#: only when HEU is not installed, on rows marked "quoted, not measured in this run".
HEU_QUOTED: dict[tuple[str, int], float] = {
    ("encrypt", 1024): 12759, ("encrypt", 2048): 2199,
    ("decrypt", 1024): 4313, ("decrypt", 2048): 527,
    ("ct+ct", 1024): 722_000, ("ct+ct", 2048): 264_000,
    ("ct*int64", 1024): 18146, ("ct*int64", 2048): 4454,
}

#: FATE 2.2 job figures (op, PHE kind, fit seconds, AUC) from references/fate-plugin.md §8 (2 vCPU),
#: shown only when FATE cannot run here, on rows marked "quoted, not measured in this run".
FATE_JOBS_QUOTED: list[tuple[str, str, float, float]] = [
    ("LR (3 epochs, full batch)", "paillier", 24.2, 0.9872),
    ("SecureBoost (3 trees, depth 3)", "paillier", 75.6, 0.9959)]

QUOTED = "quoted, not measured in this run"

#: the checkout holding this package: a FATE-venv interpreter imports unifl from here
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: seconds a peer measured in another interpreter may take before it counts as failed
WORKER_TIMEOUT_S = 1800.0


# ---- gmpy2 -------------------------------------------------------------------------------------
def gmpy2_modmul(s: Session, a: Sequence[int], b: Sequence[int], m: int) -> Row:
    """a[i]·b[i] mod m with gmpy2 on one core (a Python loop over ``mpz``; GMP does the work)."""
    import gmpy2
    ga, gb, gm = [gmpy2.mpz(x) for x in a], [gmpy2.mpz(x) for x in b], gmpy2.mpz(m)

    def run() -> int:
        for x, y in zip(ga, gb):
            x * y % gm
        return len(ga)
    return s.timed("table2", "ModMult", m.bit_length(), "gmpy2 (1 core)", run)


def gmpy2_modexp(s: Session, bases: Sequence[int], exps: Sequence[int], m: int) -> Row:
    """bases[i]^exps[i] mod m with ``gmpy2.powmod`` on one core."""
    import gmpy2
    gb, ge, gm = [gmpy2.mpz(x) for x in bases], [gmpy2.mpz(e) for e in exps], gmpy2.mpz(m)

    def run() -> int:
        for x, e in zip(gb, ge):
            gmpy2.powmod(x, e, gm)
        return len(gb)
    return s.timed("table2", "ModExp", m.bit_length(), "gmpy2 (1 core)", run)


# ---- python-paillier ---------------------------------------------------------------------------
def phe_encrypt(s: Session, n: int, key_bits: int, count: int = 10) -> Row | None:
    """python-paillier's encryption of ``count`` 40-bit integers under the ``key_bits``-bit public
    key ``n`` (with its own obfuscation r^n), or None when ``phe`` is not installed."""
    try:
        import phe
    except ImportError:
        s.skip("python-paillier (phe) is not installed: no phe baseline for Paillier encryption")
        return None
    ppk = phe.PaillierPublicKey(n)
    vals = [secrets.randbits(40) for _ in range(count)]
    return s.timed("table2", f"Paillier enc ({key_bits}-bit key)", key_bits,
                   "phe (python-paillier)", lambda: len([ppk.encrypt(v) for v in vals]))


def phe_ops(s: Session, bits: int, n: int, p: int, q: int) -> list[Row]:
    """python-paillier's encrypt, decrypt, ct+ct and ct*int64 under the key (n, p, q): the
    ``peers`` suite's baseline, so each row carries ratio 1.  Empty when ``phe`` is missing."""
    try:
        import phe
    except ImportError:
        s.skip("python-paillier (phe) is not installed: the peers suite has no baseline")
        return []
    ppk = phe.PaillierPublicKey(n)
    psk = phe.PaillierPrivateKey(ppk, p, q)
    count = 4 if s.quick else 20
    vals = [secrets.randbelow(1 << 40) for _ in range(count)]
    enc = [ppk.encrypt(v) for v in vals]
    ks = [secrets.randbits(62) for _ in enc]
    rows = paillier_rows(s, bits, "phe (python-paillier)", {
        "encrypt": lambda: len([ppk.encrypt(v) for v in vals]),
        "decrypt": lambda: len([psk.decrypt(c) for c in enc]),
        "ct+ct": lambda: len([x + y for x, y in zip(enc, enc[::-1])]),
        "ct*int64": lambda: len([c * k for c, k in zip(enc, ks)])})
    for r in rows:
        r.baseline, r.ratio = "phe", 1.0
    return rows


def paillier_rows(s: Session, bits: int, impl: str, workloads: Mapping[str, Workload],
                  stand_in: str | None = None) -> list[Row]:
    """One ``peers`` row per op of :data:`PAILLIER_OPS`, measured from ``workloads[op]``."""
    return [s.timed("peers", op, bits, impl, workloads[op], stand_in) for op in PAILLIER_OPS]


# ---- FATE's kit ----------------------------------------------------------------------------------
def fate_python() -> str | None:
    """An interpreter with pyfate: this one, ``$UNIFL_FATE_PYTHON``, or the checkout's
    ``.venv-fate`` (``make test-fate`` builds it); None when there is none."""
    try:
        import fate  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    cand = os.environ.get("UNIFL_FATE_PYTHON") or os.path.join(_ROOT, ".venv-fate", "bin", "python")
    return cand if os.path.exists(cand) else None


def fate_kit_rows(bits: int, min_time: float, repeats: int, quick: bool,
                  backends: Sequence[str]) -> list[Row]:
    """FATE's own Paillier kit (fate_utils) and UniFL's FATE kit on each of ``backends``, through
    FATE's kit API: ``encrypt_encoded`` with obfuscation, ``decrypt_to_encoded``, ``evaluator.add``
    and ``evaluator.mul_plain`` by int64.  Needs pyfate importable in this process."""
    import torch
    from fate.arch.protocol.phe import paillier as fate_paillier

    from ..fate import kit as unifl_kit
    from ..fate import party
    out = []
    n = 16 if quick else 200
    x = torch.tensor(np.random.default_rng(1).integers(0, 1 << 40, n))
    k = torch.tensor(np.random.default_rng(2).integers(0, 1 << 40, n))
    impls: list[tuple[str, Any, str | None]] = [("FATE kit (fate_utils paillier)", fate_paillier,
                                                 None)]
    impls += [(f"unifl FATE kit ({b})", unifl_kit, b) for b in backends]
    try:
        for impl, mod, be in impls:
            if be is not None:
                party.set_backend(be)
            sk, pk, coder = mod.keygen(bits)
            enc = coder.encode_tensor(x)
            c = pk.encrypt_encoded(enc, obfuscate=True)
            ev = mod.evaluator
            cases: dict[str, Workload] = {
                "encrypt": lambda: (pk.encrypt_encoded(enc, obfuscate=True), n)[1],
                "decrypt": lambda: (sk.decrypt_to_encoded(c), n)[1],
                "ct+ct": lambda: (ev.add(c, c, pk), n)[1],
                "ct*int64": lambda: (ev.mul_plain(c, k, pk, coder), n)[1]}
            for op in PAILLIER_OPS:
                st = measure_full(cases[op], min_time, repeats)
                out.append(Row("peers", op, bits, impl, st.median, st.spread, iqr=st.iqr,
                               repeats=repeats))
    finally:
        party.set_backend(None)
    return out


def run_worker(python: str, args: Sequence[str], timeout: float = WORKER_TIMEOUT_S) -> list[Row]:
    """Run ``python -m unifl.bench.worker ARGS`` (with this checkout first on its path) and return
    the rows of the one JSON document it writes on stdout.

    Raises:
        BenchmarkWorkerError: the worker could not start, timed out, exited non-zero, or wrote
            anything but a ``unifl-bench-rows/1`` document; the message has the end of its stderr.
    """
    cmd = [python, "-m", "unifl.bench.worker", *args]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=_ROOT,
                              timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkWorkerError(f"{' '.join(cmd)}: no answer within {timeout:.0f} s") from exc
    except OSError as exc:
        raise BenchmarkWorkerError(f"{' '.join(cmd)}: cannot start: {exc}") from exc
    tail = proc.stderr.strip()[-2000:]
    if proc.returncode != 0:
        raise BenchmarkWorkerError(f"{' '.join(cmd)} exited {proc.returncode}: {tail}")
    return parse_worker_output(proc.stdout, what=" ".join(cmd))


def parse_worker_output(stdout: str, what: str = "benchmark worker") -> list[Row]:
    """The rows of a worker's stdout: exactly one ``{"schema": "unifl-bench-rows/1", "rows": [...]}``
    JSON document.  Raises :class:`BenchmarkWorkerError` on anything else."""
    try:
        doc = json.loads(stdout)
    except json.JSONDecodeError as exc:
        raise BenchmarkWorkerError(f"{what}: stdout is not one JSON document ({exc}): "
                                   f"{stdout[:200]!r}") from exc
    if not isinstance(doc, dict) or doc.get("schema") != ROWS_SCHEMA or \
            not isinstance(doc.get("rows"), list):
        raise BenchmarkWorkerError(f"{what}: expected a {ROWS_SCHEMA!r} document, got "
                                   f"{str(doc)[:200]!r}")
    try:
        return [Row.from_dict(d) for d in doc["rows"]]
    except (TypeError, ValueError) as exc:
        raise BenchmarkWorkerError(f"{what}: malformed row: {exc}") from exc


def fate_kit(s: Session, bits: int) -> list[Row]:
    """FATE's kit and UniFL's FATE kit: in this process when pyfate imports, else in FATE's venv
    through the worker (not in ``--quick``).  Empty, with the reason in ``s.skipped``, otherwise."""
    try:
        import fate.arch.protocol.phe.paillier  # noqa: F401
    except ImportError:
        pass
    else:
        return fate_kit_rows(bits, s.min_time, s.repeats, s.quick, s.backends)
    py = fate_python()
    if py is None:
        s.skip(f"FATE kit ({bits}-bit): pyfate is not importable and there is no FATE venv "
               "(make test-fate builds .venv-fate, or set UNIFL_FATE_PYTHON)")
        return []
    if s.quick:
        s.skip(f"FATE kit ({bits}-bit): FATE's venv is not started in --quick")
        return []
    args = ["fate-kit", "--bits", str(bits), "--min-time", str(s.min_time),
            "--repeats", str(s.repeats)]
    for b in s.backends:
        args += ["--backend", b]
    try:
        rows = run_worker(py, args)
    except BenchmarkWorkerError as exc:
        s.skip(f"FATE kit ({bits}-bit): {exc}")
        return []
    for r in rows:
        r.source = "measured (subprocess: FATE venv)"
    return rows


# ---- FATE's jobs ---------------------------------------------------------------------------------
#: our e2e op name -> (FATE job, parties with ports, the job's size options)
_FATE_JOBS: dict[str, tuple[str, list[str], list[str]]] = {
    "LR (3 epochs, full batch)": ("lr", ["guest:9999", "host:10000", "arbiter:10001"],
                                  ["--epochs", "3"]),
    "SecureBoost (3 trees, depth 3)": ("sbt", ["guest:9999", "host:10000"],
                                       ["--trees", "3", "--depth", "3"]),
}


def fate_jobs(s: Session) -> dict[tuple[str, str], Row]:
    """FATE's coordinated LR and hetero SecureBoost on the breast data with 1024-bit keys, with
    FATE's Paillier (``paillier``) and with UniFL's kit on the first backend (``unifl``), keyed by
    (op, kind).  Run through FATE's launcher in FATE's interpreter; in ``--quick`` or without FATE,
    the quoted figures of :data:`FATE_JOBS_QUOTED` instead."""
    py = None if s.quick else fate_python()
    out: dict[tuple[str, str], Row] = {}
    if py is None:
        for op, kind, secs, auc in FATE_JOBS_QUOTED:
            out[(op, kind)] = Row("e2e", op, 1024, f"FATE 2.2 {kind}", None, (secs, secs),
                                  seconds=secs, extra={"auc": auc}, source=QUOTED)
        return out
    env = dict(os.environ, PYTHONPATH=_ROOT)
    for op, (algo, parties, size) in _FATE_JOBS.items():
        for kind in ("paillier", "unifl"):
            with tempfile.TemporaryDirectory() as tmp:
                res_path = os.path.join(tmp, "r.json")
                backends = ",".join(f"{p.split(':')[0]}={s.backends[0]}" for p in parties)
                cmd = [py, "-m", "unifl.fate.jobs", "--algo", algo, "--kind", kind,
                       "--backends", backends, "--out", res_path, *size, "--parties", *parties,
                       "--log_level", "WARNING", "--data_dir", tmp]
                try:
                    proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                          cwd=_ROOT, timeout=WORKER_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    s.skip(f"FATE {algo} ({kind}): no result within {WORKER_TIMEOUT_S:.0f} s")
                    continue
                if proc.returncode != 0 or not os.path.exists(res_path):
                    s.skip(f"FATE {algo} ({kind}) exited {proc.returncode}: "
                           f"{proc.stderr.strip()[-500:]}")
                    continue
                with open(res_path) as f:
                    r = json.load(f)
            impl = f"FATE 2.2 {kind}" + (f" (unifl {s.backends[0]})" if kind == "unifl" else "")
            out[(op, kind)] = Row("e2e", op, 1024, impl, None,
                                  (r["fit_seconds"], r["fit_seconds"]), repeats=1,
                                  seconds=r["fit_seconds"],
                                  extra={"auc": r["auc"], "note": "FATE's fit() time on the "
                                         "guest (all rows); AUC on the training rows"},
                                  source="measured (subprocess: FATE venv, fit time)")
    return out


# ---- SecretFlow HEU -----------------------------------------------------------------------------
def heu(s: Session, bits: int) -> list[Row]:
    """SecretFlow HEU's zpaillier (DJN) through its NumPy API, or -- when HEU is not installed --
    its published figures (:data:`HEU_QUOTED`) on rows marked quoted."""
    try:
        from heu import numpy as hnp
        from heu import phe as hphe
    except ImportError:
        return [Row("peers", op, bits, "SecretFlow HEU (DJN)", v, (v, v), source=QUOTED)
                for (op, b), v in HEU_QUOTED.items() if b == bits]
    kit = hnp.setup(hphe.SchemaType.ZPaillier, bits)
    n = 16 if s.quick else 400
    enc_, dec_, ev = kit.encryptor(), kit.decryptor(), kit.evaluator()
    x = kit.array(np.random.default_rng(1).integers(0, 1 << 40, n).tolist(),
                  hnp.IntegerEncoderParams())
    c = enc_.encrypt(x)
    k = kit.array(np.random.default_rng(2).integers(0, 1 << 40, n).tolist(),
                  hnp.IntegerEncoderParams())
    return paillier_rows(s, bits, "SecretFlow HEU", {
        "encrypt": lambda: (enc_.encrypt(x), n)[1],
        "decrypt": lambda: (dec_.decrypt(c), n)[1],
        "ct+ct": lambda: (ev.add(c, c), n)[1],
        "ct*int64": lambda: (ev.mul(c, k), n)[1]})

"""Benchmarks, measured against baselines in the same run so the ratios mean something anywhere.

Suites (``unifl bench --suite NAME``):

* ``table2`` -- UniFL Table 2: MontMult/ModMult and ModExp at a 2048-bit modulus and Paillier
  encryption, per backend, beside gmpy2 (one core) and python-paillier.
* ``ops`` -- FLASH's nine FL operations O1-O9 at 1024- and 2048-bit keys, per backend, with the
  speedup over the ``cpu`` backend (the gmpy2 reference).
* ``peers`` -- the same Paillier operations through python-paillier (the baseline), FATE's own kit,
  SecretFlow HEU (when installed; otherwise its published figures, marked quoted), UniFL's backends
  and UniFL's FATE kit.
* ``e2e`` -- our vertical LR and SecureBoost (unifl.app, parties as threads) against FATE's
  coordinated LR and hetero SecureBoost (FATE's launcher in the FATE venv, or quoted figures).

Every figure is the median of ``repeats`` timed runs, each at least ``min_time`` seconds, after one
warm-up call; the JSON keeps (min, max) and the inter-quartile range.  Rows computed on a stand-in
(PoCL, a simulator) carry its name on every row and plot; quoted rows say "quoted".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import platform
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from . import base_op, mod_op
from .core import registry
from .base_op import mont_context
from .phe_sdk import paillier
from .phe_sdk.array import EncryptedArray
from .phe_sdk.paillier import decrypt_limbs, encrypt_limbs

#: SecretFlow HEU (DJN) figures quoted by the issue (2-core x86-64, 2 threads, ops/s); used only
#: when HEU is not installed, on rows marked "quoted, not measured in this run".
PEER_QUOTED = {
    ("encrypt", 1024): 12759, ("encrypt", 2048): 2199,
    ("decrypt", 1024): 4313, ("decrypt", 2048): 527,
    ("ct+ct", 1024): 722_000, ("ct+ct", 2048): 264_000,
    ("ct*int64", 1024): 18146, ("ct*int64", 2048): 4454,
    ("ct*float", 1024): 14784, ("ct*float", 2048): 8918,
    ("matmul 10x500 (MAC/s)", 1024): 47492, ("matmul 10x500 (MAC/s)", 2048): 13481,
}


@dataclass
class Row:
    """One measured figure.  ``ops_per_s`` (throughput suites) or ``seconds`` (e2e) is the median of
    the timed repetitions; ``spread`` its (min, max) and ``iqr`` its (25th, 75th percentile)."""

    suite: str
    op: str
    bits: int
    impl: str
    ops_per_s: float | None
    spread: tuple[float, float]
    stand_in: str | None = None
    baseline: str | None = None
    ratio: float | None = None
    extra: dict = field(default_factory=dict)
    iqr: tuple[float, float] | None = None
    repeats: int | None = None
    seconds: float | None = None
    source: str = "measured"      # "measured" | "measured (subprocess: FATE venv)" | "quoted ..."


def _stats(xs: list[float]) -> tuple[float, tuple, tuple]:
    q = np.percentile(xs, [25, 75]) if len(xs) > 1 else (xs[0], xs[0])
    return statistics.median(xs), (min(xs), max(xs)), (float(q[0]), float(q[1]))


def measure(fn: Callable[[], int], min_time: float = 0.3, repeats: int = 3) -> tuple[float, tuple]:
    """ops/s of ``fn`` (which returns how many ops it did): median and (min, max) over repeats."""
    med, spread, _ = measure_full(fn, min_time, repeats)
    return med, spread


def measure_full(fn: Callable[[], int], min_time: float = 0.3, repeats: int = 3
                 ) -> tuple[float, tuple, tuple]:
    """Like :func:`measure`, also returning the inter-quartile range.  One untimed warm-up call
    first (tables, contexts, device state); each repetition runs ``fn`` until ``min_time`` passed."""
    fn()
    rates = []
    for _ in range(max(1, repeats)):
        done, t0 = 0, time.perf_counter()
        while True:
            done += fn()
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        rates.append(done / dt)
    return _stats(rates)


def _rand_below(m: int, n: int) -> list[int]:
    return [secrets.randbelow(m) for _ in range(n)]


def _version(mod: str) -> str | None:
    try:
        from importlib.metadata import version
        return version(mod)
    except Exception:  # noqa: BLE001 -- not installed
        return None


def machine_info() -> dict:
    """CPU model, cores and the versions that decide the numbers (python, numpy, gmpy2/GMP,
    OpenSSL, phe, and FATE/HEU where installed)."""
    import ssl

    import gmpy2
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "gmpy2": gmpy2.version(), "gmp": gmpy2.mp_version(),
            "numpy": np.__version__, "openssl": ssl.OPENSSL_VERSION,
            "unifl_threads": os.environ.get("UNIFL_THREADS")}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info["phe"] = _version("phe")
    info["pyfate"] = _version("pyfate")
    info["fate_utils"] = _version("fate_utils")
    info["sf-heu"] = _version("sf-heu")
    info["torch"] = _version("torch")
    return info


class Bench:
    def __init__(self, backends: list[str], min_time: float = 0.3, repeats: int = 3,
                 quick: bool = False, progress=None) -> None:
        self.backends = backends
        self.min_time, self.repeats, self.quick = min_time, repeats, quick
        self.rows: list[Row] = []
        self.progress = progress

    def _add(self, row: Row) -> Row:
        self.rows.append(row)
        if self.progress:
            self.progress(row)
        return row

    def _stand_in(self, name: str) -> str | None:
        return registry.probe(name).stand_in

    # ------------------------------------------------------------------ Table 2
    def table2(self) -> None:
        """MontMult/ModMult and ModExp at a 2048-bit modulus (2048-bit exponent), Paillier encryption
        with a 1024-bit key (UniFL Table 2), per backend and for gmpy2 on one core."""
        import gmpy2
        bits = 2048
        m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
        ctx = mont_context(m)
        n_mul = 2000 if self.quick else 20000
        a_i, b_i = _rand_below(m, n_mul), _rand_below(m, n_mul)
        ga, gb, gm = [gmpy2.mpz(x) for x in a_i], [gmpy2.mpz(x) for x in b_i], gmpy2.mpz(m)

        def g_mul():
            for x, y in zip(ga, gb):
                x * y % gm
            return n_mul
        r_g, s_g = measure(g_mul, self.min_time, self.repeats)
        self._add(Row("table2", "ModMult", bits, "gmpy2 (1 core)", r_g, s_g))
        n_exp = 20 if self.quick else 100
        e_full = [secrets.randbits(bits) | (1 << (bits - 1)) for _ in range(n_exp)]

        def g_exp():
            for x, e in zip(ga[:n_exp], e_full):
                gmpy2.powmod(x, e, gm)
            return n_exp
        r_ge, s_ge = measure(g_exp, self.min_time, self.repeats)
        self._add(Row("table2", "ModExp", bits, "gmpy2 (1 core)", r_ge, s_ge))

        a, b = ctx.to_limbs(a_i), ctx.to_limbs(b_i)
        exps = mod_op.exp_limbs(e_full)
        pk, _ = paillier.keygen(1024)
        r_phe = None
        try:
            import phe
            ppk = phe.PaillierPublicKey(pk.n)
            few = [secrets.randbits(40) for _ in range(10)]
            r_phe, s_phe = measure(lambda: len([ppk.encrypt(v) for v in few]), self.min_time,
                                   self.repeats)
            self._add(Row("table2", "Paillier enc (1024-bit key)", 1024, "phe (python-paillier)",
                          r_phe, s_phe))
        except ImportError:
            pass
        for name in self.backends:
            be = registry.backend(name)
            si = self._stand_in(name)
            # np.asarray: a device-resident result (gpu) is fetched, so every row is host to host
            r, s = measure(lambda: len(np.asarray(base_op.mont_mul(be, ctx, a, b, checked=False))),
                           self.min_time, self.repeats)
            self._add(Row("table2", "MontMult", bits, name, r, s, si, "gmpy2 ModMult", r / r_g))
            r, s = measure(lambda: len(np.asarray(mod_op.mod_mul(be, ctx, a, b))), self.min_time,
                           self.repeats)
            self._add(Row("table2", "ModMult", bits, name, r, s, si, "gmpy2 ModMult", r / r_g))
            nb = n_exp if name != "cpu" else 20
            r, s = measure(lambda: len(np.asarray(mod_op.mod_exp(be, ctx, a[:nb], exps[:nb]))),
                           self.min_time, self.repeats)
            self._add(Row("table2", "ModExp", bits, name, r, s, si, "gmpy2 ModExp", r / r_ge))
            m_l = pk.plaintext_limbs(_rand_below(pk.n, 200 if name != "cpu" else 20))
            r, s = measure(lambda: len(np.asarray(encrypt_limbs(be, pk, m_l))), self.min_time,
                           self.repeats)
            self._add(Row("table2", "Paillier enc (1024-bit key)", 1024, name, r, s, si,
                          "phe" if r_phe else None, r / r_phe if r_phe else None))

    # ------------------------------------------------------------------ FLASH O1-O9
    def _row(self, suite, op, bits, impl, fn, stand_in=None, **extra) -> Row:
        med, spread, iqr = measure_full(fn, self.min_time, self.repeats)
        return self._add(Row(suite, op, bits, impl, med, spread, stand_in, iqr=iqr,
                             repeats=self.repeats, extra=extra))

    def ops(self, key_bits=(1024, 2048)) -> None:
        """FLASH's nine FL operations O1-O9 (§3.1) per backend, with the speedup over the ``cpu``
        backend (the gmpy2 reference) measured in this run.  O5 counts multiply-accumulates, O6
        histogram elements (samples × features), O7-O9 RSA operations with a key of the same size."""
        from .phe_sdk import rsa
        from .phe_sdk.array import histogram
        names = list(self.backends)
        if "cpu" in names:  # the reference first, so every other row gets its ratio
            names = ["cpu"] + [n for n in names if n != "cpu"]
        for bits in key_bits:
            pk, sk = paillier.keygen(bits)
            rpk, rsk = rsa.keygen(bits)
            ref: dict[str, float] = {}
            for name in names:
                be = registry.backend(name)
                si = self._stand_in(name)
                slow = name == "cpu"
                n = (40 if bits == 1024 else 12) if slow else (400 if bits == 1024 else 100)
                if self.quick:
                    n = 6 if slow else 16
                x = np.random.default_rng(1).integers(-(1 << 40), 1 << 40, n)  # data, not keys
                m_l = pk.plaintext_limbs([int(v) % pk.n for v in x])
                c = encrypt_limbs(be, pk, m_l)
                arr = EncryptedArray(pk, c, (n,), 0, 1 << 40, be)
                k64 = np.random.default_rng(2).integers(-(1 << 62), 1 << 62, n)
                rows, cols = (2, n) if self.quick else (4, n)
                X = np.random.default_rng(3).integers(-(1 << 31), 1 << 31, (rows, cols))
                feats, nbins = (2, 4) if self.quick else (4, 16)
                bins = np.random.default_rng(4).integers(0, nbins, (n, feats))
                rv = _rand_below(rpk.n, n)
                blinded, r_vals = rpk.blind(rv, be)
                signed = rsk.raw_decrypt(blinded, be)

                def host(x):
                    """Fetch a device-resident result (gpu): every row is host to host."""
                    return np.asarray(x.limbs if isinstance(x, EncryptedArray) else x)

                cases = [
                    ("O1 Paillier encrypt", lambda: len(host(encrypt_limbs(be, pk, m_l)))),
                    ("O2 Paillier decrypt", lambda: len(host(decrypt_limbs(be, sk, c)))),
                    ("O3 ct+ct", lambda: len(host(arr + arr))),
                    ("O4 ct*int64", lambda: len(host(arr * k64))),
                    ("O5 matmul (MAC/s)", lambda: len(host(X @ arr)) * cols),
                    ("O6 histogram (elem/s)",
                     lambda: len(host(histogram(arr, bins, nbins))) and n * feats),
                    ("O7 RSA sign (private, CRT)", lambda: len(rsk.raw_decrypt(rv, be))),
                    ("O8 RSA blind", lambda: len(rpk.blind(rv, be)[0])),
                    ("O9 RSA unblind", lambda: len(rpk.unblind(signed, r_vals, be))),
                ]
                for op, fn in cases:
                    row = self._row("ops", op, bits, name, fn, si, batch=n)
                    if name == "cpu":
                        ref[op] = row.ops_per_s
                    if op in ref:
                        row.baseline, row.ratio = "cpu backend (gmpy2)", row.ops_per_s / ref[op]

    # ------------------------------------------------------------------ peers
    def peers(self, key_bits=(1024, 2048)) -> None:
        """The same Paillier operations through python-paillier (``phe``, the baseline), FATE's own
        kit (fate_utils, when importable here, else from the FATE venv in a subprocess) and
        SecretFlow HEU (when importable), beside UniFL's backends and UniFL's FATE kit."""
        for bits in key_bits:
            phe_rates = self._peer_phe(bits)
            rows = []
            for name in self.backends:
                rows += self._peer_unifl(bits, name)
            rows += self._peer_fate(bits)
            rows += self._peer_heu(bits)
            for row in rows:
                base = phe_rates.get(row.op)
                if base and row.source.startswith("measured"):  # never against a quoted figure
                    row.baseline, row.ratio = "phe", row.ops_per_s / base
                self._add(row)

    def _peer_n(self, fast: bool) -> int:
        return (16 if fast else 4) if self.quick else (400 if fast else 20)

    def _peer_rows(self, bits, impl, enc, dec, add, mul, stand_in=None, source="measured"):
        out = []
        for op, fn in (("encrypt", enc), ("decrypt", dec), ("ct+ct", add), ("ct*int64", mul)):
            med, spread, iqr = measure_full(fn, self.min_time, self.repeats)
            out.append(Row("peers", op, bits, impl, med, spread, stand_in, iqr=iqr,
                           repeats=self.repeats, source=source))
        return out

    def _peer_phe(self, bits) -> dict:
        try:
            import phe
        except ImportError:
            return {}
        pk, sk = paillier.keygen(bits)
        ppk = phe.PaillierPublicKey(pk.n)
        psk = phe.PaillierPrivateKey(ppk, sk.p, sk.q)
        n = self._peer_n(False)
        vals = [secrets.randbelow(1 << 40) for _ in range(n)]
        enc = [ppk.encrypt(v) for v in vals]
        ks = [secrets.randbits(62) for _ in enc]
        rows = self._peer_rows(bits, "phe (python-paillier)",
                               lambda: len([ppk.encrypt(v) for v in vals]),
                               lambda: len([psk.decrypt(c) for c in enc]),
                               lambda: len([x + y for x, y in zip(enc, enc[::-1])]),
                               lambda: len([c * k for c, k in zip(enc, ks)]))
        for r in rows:
            r.baseline, r.ratio = "phe", 1.0
            self._add(r)
        return {r.op: r.ops_per_s for r in rows}

    def _peer_unifl(self, bits, name) -> list[Row]:
        be = registry.backend(name)
        pk, sk = paillier.keygen(bits)
        n = self._peer_n(name != "cpu")
        x = np.random.default_rng(1).integers(-(1 << 40), 1 << 40, n)
        m_l = pk.plaintext_limbs([int(v) % pk.n for v in x])
        c = encrypt_limbs(be, pk, m_l)
        arr = EncryptedArray(pk, c, (n,), 0, 1 << 40, be)
        k64 = np.random.default_rng(2).integers(0, 1 << 62, n)
        return self._peer_rows(bits, f"unifl {name}", lambda: len(encrypt_limbs(be, pk, m_l)),
                               lambda: len(decrypt_limbs(be, sk, c)), lambda: (arr + arr).size,
                               lambda: (arr * k64).size, self._stand_in(name))

    def _peer_fate(self, bits) -> list[Row]:
        try:
            import fate.arch.protocol.phe.paillier  # noqa: F401
        except ImportError:
            return self._peer_fate_subprocess(bits)
        return fate_kit_rows(bits, self.min_time, self.repeats, self.quick, self.backends)

    def _peer_fate_subprocess(self, bits) -> list[Row]:
        py = fate_python()
        if py is None or self.quick:
            return []
        code = ("import json,sys; from unifl.bench import fate_kit_rows; from dataclasses import asdict;"
                f"print('UNIFL-ROWS'+json.dumps([asdict(r) for r in fate_kit_rows({bits}, "
                f"{self.min_time}, {self.repeats}, False, {list(self.backends)!r})]))")
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root)
        try:
            out = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env,
                                 timeout=1800, cwd=root)
        except subprocess.TimeoutExpired:
            return []
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("UNIFL-ROWS")]
        if out.returncode != 0 or not line:
            return []
        rows = []
        for d in json.loads(line[0][len("UNIFL-ROWS"):]):
            d["spread"], d["iqr"] = tuple(d["spread"]), tuple(d["iqr"]) if d["iqr"] else None
            d["source"] = "measured (subprocess: FATE venv)"
            rows.append(Row(**d))
        return rows

    def _peer_heu(self, bits) -> list[Row]:
        try:
            from heu import numpy as hnp
            from heu import phe as hphe
        except ImportError:
            return [Row("peers", op, bits, "SecretFlow HEU (DJN)", v, (v, v),
                        source="quoted, not measured in this run")
                    for (op, b), v in PEER_QUOTED.items() if b == bits and op in
                    ("encrypt", "decrypt", "ct+ct", "ct*int64")]
        kit = hnp.setup(hphe.SchemaType.ZPaillier, bits)
        n = self._peer_n(True)
        enc_, dec_, ev = kit.encryptor(), kit.decryptor(), kit.evaluator()
        x = kit.array(np.random.default_rng(1).integers(0, 1 << 40, n).tolist(),
                      hnp.IntegerEncoderParams())
        c = enc_.encrypt(x)
        k = kit.array(np.random.default_rng(2).integers(0, 1 << 40, n).tolist(),
                      hnp.IntegerEncoderParams())
        return self._peer_rows(bits, "SecretFlow HEU", lambda: (enc_.encrypt(x), n)[1],
                               lambda: (dec_.decrypt(c), n)[1], lambda: (ev.add(c, c), n)[1],
                               lambda: (ev.mul(c, k), n)[1])

    # ------------------------------------------------------------------ e2e
    def e2e(self) -> None:
        """Our vertical LR and SecureBoost (unifl.app, both parties as threads of this process)
        against FATE's coordinated LR and hetero SecureBoost (FATE's launcher, FATE venv) on the
        breast data with 1024-bit keys; FATE figures are quoted from the reference note when FATE
        cannot run here (always in --quick)."""
        from .app.jobs import run_local
        q = self.quick
        lr_p = {"epochs": 1 if q else 3, "batch_size": 0, "learning_rate": 0.15, "tol": None,
                **({"max_rows": 80} if q else {})}
        sb_p = {"n_trees": 1 if q else 3, "max_depth": 2 if q else 3,
                **({"max_rows": 80} if q else {})}
        jobs = {
            f"LR ({lr_p['epochs']} epochs, full batch)" + (", 80 rows" if q else ""):
                {"algorithm": "vlr", "params": lr_p},
            f"SecureBoost ({sb_p['n_trees']} trees, depth {sb_p['max_depth']})"
            + (", 80 rows" if q else ""): {"algorithm": "secureboost", "params": sb_p},
        }
        fate_ref = self._fate_e2e(quick=q)
        for op, spec in jobs.items():
            job = {"job_id": "bench", "dataset": "breast", "parties": ["guest", "host"],
                   "seed": 7, "key_bits": 1024, **spec}
            for name in self.backends:
                be = registry.backend(name)
                times, auc = [], None
                for _ in range(1 if q else max(1, min(self.repeats, 3))):
                    t0 = time.perf_counter()
                    res = run_local(job, be, progress=False, timeout=600)
                    times.append(time.perf_counter() - t0)
                    auc = res["guest"]["metrics"].get("auc")
                med, spread, iqr = _stats(times)
                row = Row("e2e", op, 1024, f"unifl {name}", None, spread, self._stand_in(name),
                          iqr=iqr, repeats=len(times), seconds=med,
                          extra={"auc": auc, "note": "wall time of the whole job (keygen, both "
                                 "parties); trains on the app's 80% split, AUC on the 20% test rows"})
                ref = fate_ref.get((op, "paillier"))
                if ref and ref.source.startswith("measured"):  # ratios only within this run
                    row.baseline, row.ratio = "FATE paillier", ref.seconds / med
                self._add(row)
            for kind in ("paillier", "unifl"):
                ref = fate_ref.get((op, kind))
                if ref:
                    base = fate_ref.get((op, "paillier"))
                    if base and ref.source.startswith("measured"):
                        ref.baseline, ref.ratio = "FATE paillier", base.seconds / ref.seconds
                    self._add(ref)

    def _fate_e2e(self, quick: bool) -> dict:
        py = None if quick else fate_python()
        out = {}
        algos = {"LR (3 epochs, full batch)": ("lr", ["guest:9999", "host:10000", "arbiter:10001"],
                                               ["--epochs", "3"]),
                 "SecureBoost (3 trees, depth 3)": ("sbt", ["guest:9999", "host:10000"],
                                                    ["--trees", "3", "--depth", "3"])}
        if py is None:
            for op, kind, secs, auc in E2E_QUOTED:
                out[(op, kind)] = Row("e2e", op, 1024, f"FATE 2.2 {kind}", None, (secs, secs),
                                      seconds=secs, repeats=None, extra={"auc": auc},
                                      source="quoted, not measured in this run")
            return out
        import tempfile
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ, PYTHONPATH=root)
        for op, (algo, parties, extra) in algos.items():
            for kind in ("paillier", "unifl"):
                with tempfile.TemporaryDirectory() as tmp:
                    res_path = os.path.join(tmp, "r.json")
                    backends = ",".join(f"{p.split(':')[0]}={self.backends[0]}" for p in parties)
                    cmd = [py, "-m", "unifl.fate.jobs", "--algo", algo, "--kind", kind,
                           "--backends", backends, "--out", res_path, *extra, "--parties",
                           *parties, "--log_level", "WARNING", "--data_dir", tmp]
                    try:
                        proc = subprocess.run(cmd, capture_output=True, text=True, env=env,
                                              cwd=root, timeout=1800)
                    except subprocess.TimeoutExpired:
                        continue
                    if proc.returncode != 0 or not os.path.exists(res_path):
                        continue
                    with open(res_path) as f:
                        r = json.load(f)
                impl = f"FATE 2.2 {kind}" + (f" (unifl {self.backends[0]})" if kind == "unifl"
                                             else "")
                out[(op, kind)] = Row("e2e", op, 1024, impl, None,
                                      (r["fit_seconds"], r["fit_seconds"]), repeats=1,
                                      seconds=r["fit_seconds"],
                                      extra={"auc": r["auc"], "note": "FATE's fit() time on the "
                                             "guest (all rows); AUC on the training rows"},
                                      source="measured (subprocess: FATE venv, fit time)")
        return out

    def to_json(self) -> dict:
        return {"schema": "unifl-bench/2", "machine": machine_info(),
                "threads": os.environ.get("UNIFL_THREADS"),
                "min_time_s": self.min_time, "repeats": self.repeats, "quick": self.quick,
                "notes": ["ops_per_s / seconds are medians of the repetitions after one warm-up; "
                          "spread is (min, max), iqr the 25th-75th percentiles",
                          "ratios are computed within this run against the row named in baseline",
                          "rows with a stand_in ran on a stand-in (PoCL, a simulator), not on the "
                          "named hardware; rows whose source is 'quoted' were not measured here"],
                "rows": [asdict(r) for r in self.rows]}


#: FATE 2.2 job times quoted from shared/references/fate-plugin.md §8 (2 vCPU, fit seconds, AUC),
#: used only when FATE cannot run here; every such row says "quoted, not measured in this run".
E2E_QUOTED = [("LR (3 epochs, full batch)", "paillier", 24.2, 0.9872),
              ("SecureBoost (3 trees, depth 3)", "paillier", 75.6, 0.9959)]


def fate_python() -> str | None:
    """A Python with pyfate: this one, ``UNIFL_FATE_PYTHON``, or the repo's ``.venv-fate``."""
    try:
        import fate  # noqa: F401
        return sys.executable
    except ImportError:
        pass
    cand = os.environ.get("UNIFL_FATE_PYTHON") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".venv-fate", "bin", "python")
    return cand if os.path.exists(cand) else None


def fate_kit_rows(bits: int, min_time: float, repeats: int, quick: bool, backends) -> list[Row]:
    """FATE's own Paillier kit (fate_utils, Rust) and UniFL's FATE kit, through FATE's kit API
    (encrypt_encoded with obfuscation, decrypt_to_encoded, evaluator.add, mul_plain on int64)."""
    import torch
    from fate.arch.protocol.phe import paillier as fate_paillier

    from .fate import kit as unifl_kit
    from .fate import party
    out = []
    n = 16 if quick else 200
    x = torch.tensor(np.random.default_rng(1).integers(0, 1 << 40, n))
    k = torch.tensor(np.random.default_rng(2).integers(0, 1 << 40, n))
    impls = [("FATE kit (fate_utils paillier)", fate_paillier, None)]
    impls += [(f"unifl FATE kit ({b})", unifl_kit, b) for b in backends]
    for impl, mod, be in impls:
        if be is not None:
            party.set_backend(be)
        sk, pk, coder = mod.keygen(bits)
        enc = coder.encode_tensor(x)
        c = pk.encrypt_encoded(enc, obfuscate=True)
        ev = mod.evaluator
        for op, fn in (("encrypt", lambda: len(pk.encrypt_encoded(enc, obfuscate=True)) and n),
                       ("decrypt", lambda: (sk.decrypt_to_encoded(c), n)[1]),
                       ("ct+ct", lambda: (ev.add(c, c, pk), n)[1]),
                       ("ct*int64", lambda: (ev.mul_plain(c, k, pk, coder), n)[1])):
            med, spread, iqr = measure_full(fn, min_time, repeats)
            out.append(Row("peers", op, bits, impl, med, spread, iqr=iqr, repeats=repeats))
    party.set_backend(None)
    return out


def plot(rows: list[dict], path: str, suite: str | None = None) -> None:
    """Bar chart of the speedup over each row's same-run baseline, per op and implementation
    (UniFL Fig. 8 / FLASH Fig. 8 style).  Stand-ins are named in the legend ("[PoCL ...]") and the
    title; quoted figures are marked "(quoted)"."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = [r for r in rows if r.get("ratio") and (suite is None or r["suite"] == suite)]
    fig, ax = plt.subplots(figsize=(max(8, len({(r["op"], r["bits"]) for r in data}) * 1.0), 5))

    def label(r):
        out = r["impl"]
        if r.get("stand_in"):
            out += f" [stand-in: {r['stand_in']}]"
        if str(r.get("source", "")).startswith("quoted"):
            out += " (quoted)"
        return out
    labels = sorted({f"{r['op']} ({r['bits']})" for r in data})
    impls = sorted({label(r) for r in data})
    width = 0.8 / max(1, len(impls))
    for i, impl in enumerate(impls):
        ys = []
        for lab in labels:
            match = [r["ratio"] for r in data if f"{r['op']} ({r['bits']})" == lab and
                     label(r) == impl]
            ys.append(match[0] if match else 0)
        bars = ax.bar(np.arange(len(labels)) + i * width, ys, width, label=impl)
        ax.bar_label(bars, labels=[f"{y:.2g}x" if y else "" for y in ys], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    if data:
        ax.set_yscale("log")
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, rotation=35, ha="right")
    bases = sorted({r["baseline"] for r in data if r.get("baseline")})
    ax.set_ylabel(f"speedup over {', '.join(bases) or 'baseline'} (same run), log")
    stand_ins = sorted({r["stand_in"] for r in data if r.get("stand_in")})
    title = f"UniFL {suite or ''} speedup per op and implementation"
    title += f"\nstand-ins (not real hardware): {', '.join(stand_ins)}" if stand_ins else \
        "\nno stand-in rows"
    if not data:
        title += " -- no ratios in this run"
    ax.set_title(title, fontsize=10)
    if impls:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

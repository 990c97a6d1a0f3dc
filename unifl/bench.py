"""Benchmarks: UniFL Table 2 and the Paillier operations, per backend, beside gmpy2 and python-paillier
(``phe``) measured in the same process, so the ratios are meaningful on any machine.

Every figure is the median of ``repeats`` timed runs, each at least ``min_time`` seconds, after a
warm-up; the spread (min–max) is kept in the JSON.  Backends that ran on a stand-in (PoCL, a
simulator, host-run CUDA bodies) are labelled so on every row.
"""

from __future__ import annotations

import json
import os
import platform
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

import numpy as np

from . import base_op, mod_op
from .backends import registry
from .base_op import mont_context
from .phe_sdk import paillier
from .phe_sdk.array import EncryptedArray
from .phe_sdk.paillier import decrypt_limbs, encrypt_limbs

#: Best peer figures quoted by the issue (SecretFlow HEU with DJN, 2-core x86-64, 2 threads, ops/s).
#: They are *quoted*, not measured here; the report says so.
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
    suite: str
    op: str
    bits: int
    impl: str
    ops_per_s: float
    spread: tuple[float, float]
    stand_in: str | None = None
    baseline: str | None = None
    ratio: float | None = None
    extra: dict = field(default_factory=dict)


def measure(fn: Callable[[], int], min_time: float = 0.3, repeats: int = 3) -> tuple[float, tuple]:
    """ops/s of ``fn`` (which returns how many ops it did): median and (min, max) over repeats."""
    fn()  # warm-up (tables, contexts, device state)
    rates = []
    for _ in range(repeats):
        done, t0 = 0, time.perf_counter()
        while True:
            done += fn()
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        rates.append(done / dt)
    return statistics.median(rates), (min(rates), max(rates))


def _rand_below(m: int, n: int) -> list[int]:
    return [secrets.randbelow(m) for _ in range(n)]


def machine_info() -> dict:
    import gmpy2
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu_count": os.cpu_count(), "gmpy2": gmpy2.version(), "numpy": np.__version__}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        import phe
        info["phe"] = getattr(phe, "__version__", "installed")
    except ImportError:
        info["phe"] = None
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
            r, s = measure(lambda: len(base_op.mont_mul(be, ctx, a, b, checked=False)),
                           self.min_time, self.repeats)
            self._add(Row("table2", "MontMult", bits, name, r, s, si, "gmpy2 ModMult", r / r_g))
            r, s = measure(lambda: len(mod_op.mod_mul(be, ctx, a, b)), self.min_time, self.repeats)
            self._add(Row("table2", "ModMult", bits, name, r, s, si, "gmpy2 ModMult", r / r_g))
            nb = n_exp if name != "cpu" else 20
            r, s = measure(lambda: len(mod_op.mod_exp(be, ctx, a[:nb], exps[:nb])),
                           self.min_time, self.repeats)
            self._add(Row("table2", "ModExp", bits, name, r, s, si, "gmpy2 ModExp", r / r_ge))
            m_l = pk.plaintext_limbs(_rand_below(pk.n, 200 if name != "cpu" else 20))
            r, s = measure(lambda: len(encrypt_limbs(be, pk, m_l)), self.min_time, self.repeats)
            self._add(Row("table2", "Paillier enc (1024-bit key)", 1024, name, r, s, si,
                          "phe" if r_phe else None, r / r_phe if r_phe else None))

    # ------------------------------------------------------------------ Paillier ops
    def paillier_ops(self, key_bits=(1024, 2048)) -> None:
        """FL's Paillier operations per backend beside python-paillier (phe) in the same process,
        with the best-peer (HEU) figures quoted by the issue."""
        try:
            import phe
        except ImportError:
            phe = None
        for bits in key_bits:
            pk, sk = paillier.keygen(bits)
            ppk = psk = None
            if phe is not None:
                ppk = phe.PaillierPublicKey(pk.n)
                psk = phe.PaillierPrivateKey(ppk, sk.p, sk.q)
            base_n = 4 if self.quick else (40 if bits == 1024 else 10)
            phe_rates = {}
            if ppk is not None:
                vals = [secrets.randbelow(1 << 40) for _ in range(base_n)]
                enc = [ppk.encrypt(v) for v in vals]
                phe_rates["encrypt"] = measure(lambda: len([ppk.encrypt(v) for v in vals]),
                                               self.min_time, self.repeats)
                phe_rates["decrypt"] = measure(lambda: len([psk.decrypt(c) for c in enc]),
                                               self.min_time, self.repeats)
                phe_rates["ct+ct"] = measure(lambda: len([x + y for x, y in zip(enc, enc[::-1])]),
                                             self.min_time, self.repeats)
                ks = [secrets.randbits(63) for _ in enc]
                phe_rates["ct*int64"] = measure(lambda: len([c * k for c, k in zip(enc, ks)]),
                                                self.min_time, self.repeats)
                fs = [secrets.randbits(30) / (1 << 20) * (1 if i % 2 else -1) for i in range(len(enc))]
                phe_rates["ct*float"] = measure(lambda: len([c * f for c, f in zip(enc, fs)]),
                                                self.min_time, self.repeats)
                for op, (r, s) in phe_rates.items():
                    self._add(Row("ops", op, bits, "phe (python-paillier)", r, s))
            for name in self.backends:
                be = registry.backend(name)
                si = self._stand_in(name)
                n = base_n if name == "cpu" else (2000 if bits == 1024 else 400)
                if self.quick:
                    n = max(n // 10, 8)
                x = np.random.default_rng(1).integers(-(1 << 40), 1 << 40, n)  # data, not keys
                m_l = pk.plaintext_limbs([int(v) % pk.n for v in x])
                variants = [("encrypt", None)]
                if name != "cpu":
                    variants.append(("encrypt (DJN fixed base)", "fb"))
                for op, mode in variants:
                    if mode == "fb":
                        pk.enable_fixed_base(backend=be)
                    r, s = measure(lambda: len(encrypt_limbs(be, pk, m_l)), self.min_time,
                                   self.repeats)
                    pk.disable_fixed_base()
                    self._row_vs(op, bits, name, r, s, si, phe_rates.get("encrypt"))
                c = encrypt_limbs(be, pk, m_l)
                r, s = measure(lambda: len(decrypt_limbs(be, sk, c)), self.min_time, self.repeats)
                self._row_vs("decrypt", bits, name, r, s, si, phe_rates.get("decrypt"))
                arr = EncryptedArray(pk, c, (n,), 0, 1 << 40, be)
                r, s = measure(lambda: (arr + arr).size, self.min_time, self.repeats)
                self._row_vs("ct+ct", bits, name, r, s, si, phe_rates.get("ct+ct"))
                k64 = np.array([secrets.randbits(63) for _ in range(n)], dtype=np.int64)
                r, s = measure(lambda: (arr * k64).size, self.min_time, self.repeats)
                self._row_vs("ct*int64", bits, name, r, s, si, phe_rates.get("ct*int64"))
                kf = np.array([secrets.randbits(30) / (1 << 20) * (1 if i % 2 else -1)
                               for i in range(n)])
                r, s = measure(lambda: (arr * kf).size, self.min_time, self.repeats)
                self._row_vs("ct*float", bits, name, r, s, si, phe_rates.get("ct*float"))
                if name != "cpu":
                    rows, cols = (10, 500) if not self.quick else (4, 100)
                    y = EncryptedArray(pk, encrypt_limbs(be, pk, pk.plaintext_limbs(
                        [secrets.randbelow(1 << 20) for _ in range(cols)])), (cols,), 0, 1 << 20, be)
                    X = np.random.default_rng(2).integers(-(1 << 31), 1 << 31, (rows, cols))
                    r, s = measure(lambda: (X @ y).size * cols, self.min_time, self.repeats)
                    phe_mac = None
                    if phe_rates.get("ct*int64") and phe_rates.get("ct+ct"):
                        # phe has no matmul: one MAC = one ct*int + one ct+ct
                        mul_r, add_r = phe_rates["ct*int64"][0], phe_rates["ct+ct"][0]
                        phe_mac = (1 / (1 / mul_r + 1 / add_r), (0, 0))
                    self._row_vs("matmul 10x500 (MAC/s)", bits, name, r, s, si, phe_mac)

    def _row_vs(self, op, bits, name, r, s, si, phe_rate) -> None:
        row = Row("ops", op, bits, name, r, s, si)
        if phe_rate:
            row.baseline, row.ratio = "phe", r / phe_rate[0]
        peer_key = ("encrypt", bits) if op.startswith("encrypt") else (op, bits)
        if peer_key in PEER_QUOTED:
            row.extra["vs_best_peer_quoted"] = r / PEER_QUOTED[peer_key]
        self._add(row)

    def to_json(self) -> dict:
        return {"machine": machine_info(), "threads": os.environ.get("UNIFL_THREADS"),
                "min_time_s": self.min_time, "repeats": self.repeats,
                "peer_quoted_note": "best-peer figures (SecretFlow HEU) are quoted from the issue, "
                                    "not measured in this run",
                "rows": [asdict(r) for r in self.rows]}


def plot(rows: list[dict], path: str) -> None:
    """Bar chart of speedup over the CPU reference (phe / gmpy2) per op and backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    data = [r for r in rows if r.get("ratio")]
    if not data:
        return
    labels = sorted({f"{r['op']} ({r['bits']})" for r in data})
    impls = sorted({r["impl"] + (f" [{r['stand_in']}]" if r.get("stand_in") else "") for r in data})
    fig, ax = plt.subplots(figsize=(max(8, len(labels) * 0.9), 5))
    width = 0.8 / max(1, len(impls))
    for i, impl in enumerate(impls):
        ys = []
        for lab in labels:
            match = [r["ratio"] for r in data if f"{r['op']} ({r['bits']})" == lab and
                     r["impl"] + (f" [{r['stand_in']}]" if r.get("stand_in") else "") == impl]
            ys.append(match[0] if match else 0)
        bars = ax.bar(np.arange(len(labels)) + i * width, ys, width, label=impl)
        ax.bar_label(bars, labels=[f"{y:.2g}x" if y else "" for y in ys], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, rotation=35, ha="right")
    ax.set_ylabel("speedup over the same-run baseline (gmpy2 / phe), log")
    ax.set_title("UniFL speedup per op and backend (stand-ins labelled)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

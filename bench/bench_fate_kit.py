"""UniFL's FATE kit against EncryptedArray: the same op, on the same data, key and backend, in one
process.

Both sit on one ciphertext batch (:class:`unifl.phe_sdk.ciphertexts.CiphertextBatch`), so the kit's
throughput should be within 10 % of the array's for every op; the table shows the ratio
kit / array of throughputs per op (>= 0.9 is the target).  With ``--baseline-rev REV`` the kit as
it was at git revision REV (e.g. the one before the shared batch) runs beside them, on the same
data and backend, and the last column is the speed-up of today's kit over it.

FATE's kit needs FATE's torch-based environment::

    cd /work/main && PYTHONPATH=$PWD .venv-fate/bin/python bench/bench_fate_kit.py \\
        [--backend native --backend cpu] [--bits 2048] [--baseline-rev 4117a50] [--quick]

What is timed (encodings matched, so both sides do the same modular arithmetic):

* encrypt   ``pk.encrypt_encoded(coder.encode_tensor(x), obfuscate=True)`` vs
            ``EncryptedArray.encrypt(pk, x, scale_bits=<the kit's scale>)``
* decrypt   ``coder.decode_tensor(sk.decrypt_to_encoded(c))`` vs ``arr.decrypt(sk)``
* add       ``evaluator.add(a, b)`` vs ``a + b``; sub likewise
* neg       ``evaluator.rsub_plain_scalar(a, 0)`` vs ``0 - a`` (FATE has no bare negation; both are
            E(a)^-1·g^0)
* mul       ``evaluator.mul_plain(a, k)`` by an int64 tensor vs ``a * k``; ``mul_scalar`` by one int
* matmul    ``evaluator.matmul`` (E(A) @ B) and ``rmatmul`` (X @ E(d), coordinated LR's gradient)
            by int64 matrices vs ``@``

Each op is sampled ``--repeats`` times, the kit and the array alternately (each sample repeats the
call for ``--min-time`` seconds); the table has the medians of the per-call times, and the ratios
are medians over adjacent pairs of samples, which ran under the same machine load.  The
decrypted results of the two are compared before anything is timed.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch

import unifl.fate  # noqa: F401  (registers kind "unifl"; FATE's venv only)
from unifl.fate import kit, party
from unifl.phe_sdk import paillier
from unifl.phe_sdk.array import EncryptedArray

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_kit_at(rev: str) -> Any:
    """``unifl/fate/kit.py`` as it was at git revision ``rev``, imported as a sibling module of
    today's (so its relative imports resolve to today's lower layers)."""
    src = subprocess.run(["git", "show", f"{rev}:unifl/fate/kit.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    path = os.path.join(tempfile.mkdtemp(prefix="unifl-kit-"), "kit_at_rev.py")
    with open(path, "w") as f:
        f.write(src)
    name = "unifl.fate._kit_at_rev"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def timed(fn: Callable[[], Any], min_time: float) -> float:
    """Seconds per call of ``fn``, over as many calls as fill ``min_time`` (at least one)."""
    calls, t0 = 0, time.perf_counter()
    while True:
        fn()
        calls += 1
        elapsed = time.perf_counter() - t0
        if elapsed >= min_time:
            return elapsed / calls


class Kit:
    """One kit module's objects for one key: encrypt/decrypt helpers and its evaluator."""

    def __init__(self, mod: Any, p: int, q: int) -> None:
        self.mod, self.sk, self.pk, self.coder = mod, mod.SK(p, q), mod.PK(p * q), mod.Coder()
        self.ev = mod.evaluator

    def enc(self, x: torch.Tensor) -> Any:
        return self.pk.encrypt_encoded(self.coder.encode_tensor(x), obfuscate=True)

    def dec(self, c: Any) -> np.ndarray:
        return self.coder.decode_tensor(self.sk.decrypt_to_encoded(c), torch.float64).numpy()


def cases(k: Kit, data: dict[str, Any], key: paillier.PrivateKey, be: Any
          ) -> dict[str, tuple[int, Callable[[], Any], Callable[[], Any]]]:
    """op -> (elements, the kit's call, the array's call), on shared data."""
    x, y, ks, b, xt, d = (data[n] for n in ("x", "y", "k", "b", "xt", "d"))
    pk, coder, ev = k.pk, k.coder, k.ev
    sx = int(coder.encode_tensor(x).exps[0])
    sy = int(coder.encode_tensor(y).exps[0])
    sd = int(coder.encode_tensor(d).exps[0])
    pub = key.public_key

    def pair(v: torch.Tensor, s: int) -> tuple[Any, EncryptedArray]:
        """The same ciphertexts (fully randomised, made with the key owner's CRT, which is
        quicker) as the kit's vector and as an array.  Deterministic encryptions would not do:
        1 + m·n is half the size of a ciphertext, which flatters gmpy2's plain arithmetic."""
        arr = EncryptedArray.encrypt(pub, v.numpy(), scale_bits=s, backend=be, private_key=key)
        return k.mod.EV(arr.batch.ciphertexts(), np.full(len(v), s, np.int64)), arr

    (ex, ax), (ey, ay), (ed, ad) = pair(x, sx), pair(y, sy), pair(d, sd)
    m, kk = data["a_shape"]
    xa = x[:m * kk]
    ea, aa = pair(xa, int(coder.encode_tensor(xa).exps[0]))
    n_enc = data["n_enc"]
    xe = x[:n_enc]
    se = int(coder.encode_tensor(xe).exps[0])
    exe, axe = pair(xe, se)
    return {
        "encrypt": (n_enc, lambda: k.enc(xe),
                    lambda: EncryptedArray.encrypt(pub, xe.numpy(), scale_bits=se, backend=be)),
        "decrypt": (n_enc, lambda: k.dec(exe), lambda: axe.decrypt(key)),
        "add": (len(x), lambda: ev.add(ex, ey, pk), lambda: ax + ay),
        "sub": (len(x), lambda: ev.sub(ex, ey, pk), lambda: ax - ay),
        "neg": (len(x), lambda: ev.rsub_plain_scalar(ex, 0, pk, coder, torch.int64),
                lambda: 0 - ax),
        "mul": (len(x), lambda: ev.mul_plain(ex, ks, pk, coder), lambda: ax * ks.numpy()),
        "mul_scalar": (len(x), lambda: ev.mul_plain_scalar(ex, 3, pk, coder, torch.int64),
                       lambda: ax * 3),
        "matmul": (m * b.shape[1], lambda: ev.matmul(ea, b, (m, kk), tuple(b.shape), pk, coder),
                   lambda: aa.reshape(m, kk) @ b.numpy()),
        "rmatmul": (xt.shape[0], lambda: ev.rmatmul(ed, xt, (len(d),), tuple(xt.shape), pk, coder),
                    lambda: xt.numpy() @ ad),
    }


def check(k: Kit, op: str, kit_out: Any, arr_out: Any, key: paillier.PrivateKey) -> None:
    """The two results decrypt to the same values (encrypt: the inputs)."""
    if op == "decrypt":
        ours, theirs = kit_out, arr_out
    else:
        ours = k.dec(kit_out)
        theirs = np.asarray(arr_out.decrypt(key), dtype=np.float64).reshape(-1)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-9, err_msg=op)


def run(backend: str, bits: int, repeats: int, min_time: float, quick: bool, baseline: Any,
        ops: list[str] | None = None) -> list[dict]:
    party.set_backend(backend)
    be = party.current_backend()
    pub, key = paillier.keygen(bits)
    rng = np.random.default_rng(7)
    n = 256 if quick else 2048
    m, kk, p = (4, 32, 2) if quick else (16, 128, 4)
    data = {"x": torch.tensor(rng.normal(size=max(n, m * kk))),
            "y": torch.tensor(rng.normal(size=max(n, m * kk))),
            "k": torch.tensor(rng.integers(-(1 << 24), 1 << 24, max(n, m * kk))),
            "b": torch.tensor(rng.integers(-(1 << 24), 1 << 24, (kk, p))),
            "d": torch.tensor(rng.normal(size=kk * 4)),
            "xt": torch.tensor(rng.integers(-(1 << 24), 1 << 24, (8, kk * 4))),
            "a_shape": (m, kk), "n_enc": 16 if quick else 128}
    new = Kit(kit, key.p, key.q)
    ours = cases(new, data, key, be)
    old = cases(Kit(baseline, key.p, key.q), data, key, be) if baseline is not None else None
    rows = []
    for op, (count, fk, fa) in ours.items():
        if ops and op not in ops:
            continue
        check(new, op, fk(), fa(), key)
        tk: list[float] = []
        ta: list[float] = []
        to: list[float] = []
        for r in range(repeats):
            order = [(tk, fk), (ta, fa)] if r % 2 == 0 else [(ta, fa), (tk, fk)]
            if old is not None:
                order.append((to, old[op][1]))
            for sink, fn in order:
                sink.append(timed(fn, min_time))
        # the ratio of each adjacent pair of samples (taken under the same load), then the median
        row = {"backend": backend, "op": op, "n": count, "array_s": statistics.median(ta),
               "kit_s": statistics.median(tk),
               "ratio": statistics.median(a / k for a, k in zip(ta, tk)),
               "old_s": statistics.median(to) if to else None,
               "speedup": statistics.median(o / k for o, k in zip(to, tk)) if to else None}
        rows.append(row)
        print(fmt(row), flush=True)
    party.set_backend(None)
    return rows


HEADER = (f"{'backend':8} {'op':11} {'N':>6} {'array ms':>10} {'kit ms':>10} {'kit/array':>10}"
          f" {'old kit ms':>11} {'kit speed-up':>13}")


def fmt(row: dict) -> str:
    line = (f"{row['backend']:8} {row['op']:11} {row['n']:>6} {row['array_s'] * 1e3:>10.2f} "
            f"{row['kit_s'] * 1e3:>10.2f} {row['ratio']:>10.3f}")
    if row["old_s"] is not None:
        line += f" {row['old_s'] * 1e3:>11.2f} {row['speedup']:>12.2f}x"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", action="append", help="UniFL backend (repeatable; default "
                    "native and cpu)")
    ap.add_argument("--bits", type=int, default=2048, help="Paillier key size")
    ap.add_argument("--repeats", type=int, default=7, help="samples per op and side")
    ap.add_argument("--min-time", type=float, default=0.3,
                    help="seconds each sample runs its op for (as many calls as fit)")
    ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    ap.add_argument("--op", action="append", help="only this op (repeatable; default all)")
    ap.add_argument("--baseline-rev", default=None,
                    help="also time the kit of this git revision (e.g. the one before the batch)")
    args = ap.parse_args()
    baseline = load_kit_at(args.baseline_rev) if args.baseline_rev else None
    print(f"{args.bits}-bit key; times per call, medians of {args.repeats} samples; kit/array "
          f"is the kit's throughput over the array's (target >= 0.9)"
          + (f"; old kit = unifl/fate/kit.py at {args.baseline_rev}" if baseline else ""))
    print(HEADER)
    rows = []
    for name in args.backend or ["native", "cpu"]:
        rows += run(name, args.bits, args.repeats, args.min_time, args.quick, baseline, args.op)
    worst = min(rows, key=lambda r: r["ratio"])
    print(f"lowest kit/array: {worst['ratio']:.3f} ({worst['backend']} {worst['op']})")


if __name__ == "__main__":
    main()

"""The GPU targets of the cooperative kernels, measured for one source tree, and the table that
sets two trees side by side (what ``bench/gpu_checks.sh`` runs on a GPU machine).

    PYTHONPATH=<tree> python bench/gpu_targets.py --label new --json new.json [--quick]
    python bench/gpu_targets.py --table old.json new.json

The first form imports ``unifl`` from whatever tree PYTHONPATH names -- this tree, or a baseline
checkout such as the one gpu_checks.sh builds from commit 72c8f0e -- and uses only what both have
(``registry.backend("gpu", kernels="group")`` and the backend's op methods), so the same script
times the old and the new kernels.  Rows (the cooperative family, host operands drawn once, each
call staged and its result left on the device, decryption fetching its plaintexts as the op does):

* ModExp, 2048-bit modulus and full 2048-bit exponents, 65,536 per call;
* Paillier with a 1024-bit key: public-key encryption r^n (65,536 per call), key-owner encryption
  with the CRT and CRT decryption (131,072 per call);
* latency: one call of 32 public-key encryptions with a 2048-bit key (the median of 21 calls);
* where the tree has them (the ``window`` and ``lanes`` options): the ModExp and public-encryption
  rows again with 3-, 4- and 5-bit windows, and the latency row with the normal and the wide
  shape, so one run measures what the occupancy rule and the batch-size rule choose against the
  alternatives.

Each rate is the best of ``--repeats`` timed calls after one untimed call.  The table prints the
old and new figures, their ratio, and the targets of the cooperative kernels (ModExp >= 250k/s, public encryption
>= 500k/s, key owner and decryption >= 2 M/s, 32 encryptions < 10 ms).  Without a CUDA device the
script stops with exit status 2 and the backend's reason.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

#: the targets of the cooperative kernels (ops/s; the latency row in ms), printed beside the rows
TARGETS: dict[str, tuple[str, float]] = {
    "ModExp 2048": (">=", 250_000), "enc public 1024": (">=", 500_000),
    "enc owner 1024": (">=", 2_000_000), "dec 1024": (">=", 2_000_000),
    "32 x enc public 2048 (ms)": ("<", 10.0)}


def _rate(fn: Callable[[], Any], n: int, repeats: int) -> float:
    fn()                                   # untimed: uploads, calibration, first launch
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def _latency_ms(fn: Callable[[], Any], calls: int = 21) -> float:
    fn()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        out = fn()
        np.asarray(out)                    # the caller's view: the values on the host
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def measure(label: str, quick: bool, repeats: int) -> dict[str, Any]:
    """Every row for the tree on PYTHONPATH (see the module doc)."""
    from unifl.base_op import mont_context
    from unifl.core import registry
    from unifl.core.errors import ConfigError
    from unifl.phe_sdk import paillier
    # public as random_limbs since the package split; the baseline tree has it private
    _random_limbs = getattr(paillier, "random_limbs", None) or getattr(paillier, "_random_limbs")

    base_be = registry.backend("gpu", kernels="group")    # BackendUnavailable: the probe's reason

    def backend(**tuning: Any) -> Any | None:
        try:
            return registry.backend("gpu", kernels="group", **tuning)
        except ConfigError:
            return None                    # an option this tree does not have
    scale = 8 if quick else 1
    rows: list[dict[str, Any]] = []
    info: dict[str, Any] = {"label": label, "unifl": sys.modules["unifl"].__file__,
                            "devices": getattr(base_be, "devices", None), "rows": rows}
    tunable = backend(window=4) is not None
    windows = [None, 3, 4, 5] if tunable else [None]

    def row(op: str, variant: str, n: int, value: float, unit: str = "ops/s") -> None:
        rows.append({"op": op, "variant": variant, "batch": n, "value": value, "unit": unit})
        print(f"{label:>10}  {op:<26} {variant:<12} {n:>7}  {value:,.1f} {unit}", flush=True)

    # ModExp 2048
    n = 65536 // scale
    ctx = mont_context(int.from_bytes(os.urandom(256), "little") | (1 << 2047) | 1)
    base = _random_limbs(n, 2047, ctx.m)
    exps = _random_limbs(n, 2048)
    exps[:, -1] |= np.uint64(1 << 63)
    for w in windows:
        be = base_be if w is None else backend(window=w)
        row("ModExp 2048", "default" if w is None else f"window {w}", n,
            _rate(lambda: be.op_mod_exp(ctx, base, exps), n, repeats))
    # Paillier, 1024-bit key
    pk, sk = paillier.keygen(1024)
    nn = pk.n
    n_enc, n_crt = 65536 // scale, 131072 // scale
    msg = _random_limbs(n_crt, nn.bit_length(), nn)
    r = _random_limbs(n_crt, nn.bit_length(), nn)
    yp = _random_limbs(n_crt, sk.p.bit_length(), sk.p)
    yq = _random_limbs(n_crt, sk.q.bit_length(), sk.q)
    for w in windows:
        be = base_be if w is None else backend(window=w)
        row("enc public 1024", "default" if w is None else f"window {w}", n_enc,
            _rate(lambda: be.op_paillier_encrypt(pk.material, msg[:n_enc], r[:n_enc]), n_enc,
                  repeats))
    row("enc owner 1024", "default", n_crt,
        _rate(lambda: base_be.op_paillier_encrypt_owner(sk.material, msg, yp, yq), n_crt, repeats))
    k = min(n_crt, 1024)
    c = np.asarray(paillier.encrypt_limbs(registry.backend("cpu"), pk, msg[:k], r=r[:k]))
    c = np.ascontiguousarray(np.resize(c, (n_crt, c.shape[1])))
    row("dec 1024", "default", n_crt,
        _rate(lambda: np.asarray(base_be.op_paillier_decrypt(sk.material, c)), n_crt, repeats))
    # latency: 32 public-key encryptions with a 2048-bit key
    pk2, _ = paillier.keygen(2048)
    m2 = _random_limbs(32, pk2.n.bit_length(), pk2.n)
    r2 = _random_limbs(32, pk2.n.bit_length(), pk2.n)
    shapes = [None, "normal", "wide"] if tunable else [None]
    for lanes in shapes:
        be = base_be if lanes is None else backend(lanes=lanes)
        row("32 x enc public 2048 (ms)", "default" if lanes is None else f"lanes {lanes}", 32,
            _latency_ms(lambda: be.op_paillier_encrypt(pk2.material, m2, r2)), "ms")
    if hasattr(base_be.engine, "last_tuning"):
        info["last_tuning"] = base_be.engine.last_tuning()
    return info


def table(paths: list[str]) -> str:
    """The rows of the JSON files side by side (the first is the reference of the ratios)."""
    runs = [json.load(open(p, encoding="utf-8")) for p in paths]
    keys: list[tuple[str, str]] = []
    for run in runs:
        for r in run["rows"]:
            if (r["op"], r["variant"]) not in keys:
                keys.append((r["op"], r["variant"]))
    head = ["op", "variant", *[run["label"] for run in runs], f"{runs[-1]['label']} / "
            f"{runs[0]['label']}", "target"]
    lines = [head]
    for op, var in keys:
        vals = [next((r["value"] for r in run["rows"] if (r["op"], r["variant"]) == (op, var)),
                     None) for run in runs]
        unit_ms = op.endswith("(ms)")
        cells = [op, var, *["-" if v is None else (f"{v:.2f} ms" if unit_ms else
                                                   f"{v / 1e3:,.1f} k/s") for v in vals]]
        a, b = vals[0], vals[-1]
        ratio = "-" if a is None or b is None else (f"{a / b:.2f}x" if unit_ms else f"{b / a:.2f}x")
        t = TARGETS.get(op)
        cells += [ratio, "" if t is None or var not in ("default",) else
                  f"{t[0]} {t[1]:g} ms" if unit_ms else f"{t[0]} {t[1] / 1e3:,.0f} k/s"]
        lines.append(cells)
    widths = [max(len(str(row[i])) for row in lines) for i in range(len(head))]
    return "\n".join("  ".join(str(c).ljust(w) if i < 2 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))) for row in lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--label", default="tree")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--quick", action="store_true", help="batches 8x smaller")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--table", nargs="+", metavar="JSON", help="print these runs side by side")
    args = ap.parse_args(argv)
    if args.table:
        print(table(args.table))
        return 0
    from unifl.core.errors import BackendUnavailable
    try:
        info = measure(args.label, args.quick, args.repeats)
    except BackendUnavailable as exc:
        print(f"gpu_targets: no CUDA device to measure: {exc}", file=sys.stderr)
        return 2
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(info, fh, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

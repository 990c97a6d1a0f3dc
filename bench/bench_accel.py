"""Acceleration that reaches the job: obfuscators computed ahead (a warm pool against none) and
size-aware dispatch (where each call size runs, and what that costs), every row measured in ONE
process with the repetitions interleaved, so the ratios printed compare paths under the same load.

    python bench/bench_accel.py pool     [--bits 1024 2048] [--n 512] [--reps 5] [--backend native]
    python bench/bench_accel.py dispatch [--bits 2048] [--sizes 1 4 16 64 256 1024] [--reps 3]
                                         [--accelerator gpu|fpga|qat]
    ... [--json FILE]

``pool``, per key size, a batch of ``--n`` encryptions on ``--backend``:

* ``direct public``      encryption computing each factor r^n mod n² on the spot (the fused op);
* ``direct owner``       the key owner's, each factor through the CRT (the fused owner op);
* ``warm pool``          the same batch with the factors taken from a pool filled beforehand (the
                         fill not timed): one MontMult per element on the critical path;
* ``fill public/owner``  the cost of filling the pool, per factor (moved off the critical path: at
                         job start and while the party waits on its peer).

``dispatch``: per batch size, where the dispatcher runs a public-key encryption and a ct+ct sum
(the route of each op it calls), and the time of the dispatched call against the accelerator alone
and the CPU backend alone, in the same run.  The accelerator is ``--accelerator`` (default: gpu,
else fpga, else qat); without the hardware that is its stand-in (PoCL on the CPU, the QAT
simulator), named in the output: then the figures show the dispatcher's decisions and that it is
never slower than the better of the two alone, not a device's speed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

import unifl
from unifl.core import registry
from unifl.core.backend import Backend
from unifl.phe_sdk import paillier as P


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _interleaved(rows: dict[str, tuple[Callable[[], Any], Callable[[], float]]], reps: int
                 ) -> dict[str, list[float]]:
    """``rows``: name -> (prepare, run) where run returns its own seconds; repetition k of every
    row runs before repetition k+1 of any."""
    out: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(reps):
        for name, (prepare, run) in rows.items():
            prepare()
            out[name].append(run())
    return out


def _fresh(name: str) -> Backend:
    """A new instance of backend ``name`` (its own state, so its own pools)."""
    be = registry.backend_class(name)()
    be.probe_result = registry.probe(name)
    return be


def bench_pool(args: argparse.Namespace) -> dict[str, Any]:
    be = unifl.backend(args.backend)
    report: dict[str, Any] = {"backend": be.describe(), "n": args.n, "reps": args.reps, "keys": {}}
    for bits in args.bits:
        pk, sk = unifl.keygen(bits)
        m = pk.plaintext_limbs([i % 1000 for i in range(args.n)])
        pool = pk.obfuscators(be)
        owner_pool = sk.obfuscators(_fresh(args.backend))  # another instance: a pool of its own
        fills: dict[str, list[float]] = {"fill public": [], "fill owner": []}

        def fill_public() -> None:
            pool.clear()
            fills["fill public"].append(_timed(lambda: pool.reserve(args.n)) / args.n)

        def fill_owner() -> None:
            owner_pool.clear()
            fills["fill owner"].append(_timed(lambda: owner_pool.reserve(args.n)) / args.n)

        def nothing() -> None:
            pass

        def direct_public() -> float:
            return _timed(lambda: P.encrypt_limbs(be, pk, m, use_pool=False))

        def direct_owner() -> float:
            return _timed(lambda: P.encrypt_limbs(be, pk, m, use_pool=False, private_key=sk))

        def warm() -> float:
            t = _timed(lambda: P.encrypt_limbs(be, pk, m))
            assert pool.ready() == 0, "the warm pool did not serve the whole batch"
            return t

        P.encrypt_limbs(be, pk, m[:2], use_pool=False)               # warm-up: contexts, tables
        P.encrypt_limbs(be, pk, m[:2], use_pool=False, private_key=sk)
        times = _interleaved({"direct public": (nothing, direct_public),
                              "direct owner": (nothing, direct_owner),
                              "warm pool": (fill_public, warm),
                              "owner fill": (fill_owner, lambda: 0.0)}, args.reps)
        med = {k: statistics.median(v) for k, v in times.items() if k != "owner fill"}
        per_fill = {k: statistics.median(v) for k, v in fills.items()}
        rates = {k: args.n / v for k, v in med.items()}
        rates.update({k: 1 / v for k, v in per_fill.items()})
        report["keys"][bits] = {
            "encryptions_per_s": rates,
            "ratios": {"warm pool / direct public": med["direct public"] / med["warm pool"],
                       "warm pool / direct owner": med["direct owner"] / med["warm pool"]},
            "spread_s": {k: (min(v), max(v)) for k, v in times.items()}}
        print(f"\n{bits}-bit key, batch of {args.n}, {be.describe()} "
              f"(medians of {args.reps}; one process, rows interleaved)")
        for k, r in rates.items():
            print(f"  {k:<16} {r:>12,.0f} /s")
        for k, r in report["keys"][bits]["ratios"].items():
            print(f"  {k:<28} {r:6.1f}x")
    return report


def _accelerator_name(requested: str | None) -> str:
    if requested:
        return requested
    for name in ("gpu", "fpga", "qat"):
        if registry.probe(name).available:
            return name
    raise SystemExit("no accelerator backend (gpu, fpga, qat) probes available here")


def bench_dispatch(args: argparse.Namespace) -> dict[str, Any]:
    from unifl import base_op
    from unifl.scheduler import CountingBackend
    from unifl.scheduler.dispatch import DispatchBackend, DispatchPolicy
    from unifl.scheduler.select import start
    acc_name = _accelerator_name(args.accelerator)
    cpu_name = "native" if registry.probe("native").available else "cpu"
    acc = CountingBackend(start(acc_name, {}, fresh=True))
    cpu = CountingBackend(start(cpu_name, {}, fresh=True))
    disp = DispatchBackend(acc, cpu, DispatchPolicy(mode="auto", cache=False,
                                                    budget_s=args.budget))
    stand_in = acc.stand_in or "real hardware"
    report: dict[str, Any] = {"accelerator": acc.describe(), "stand_in": stand_in,
                              "cpu": cpu.describe(), "reps": args.reps, "keys": {}}
    for bits in args.bits:
        pk, _ = unifl.keygen(bits)
        ctx = pk.nsquare_ctx
        big = max(args.sizes)
        m_all = pk.plaintext_limbs([i % 1000 for i in range(big)])
        c_all = np.asarray(P.encrypt_limbs(cpu, pk, m_all[:1], use_pool=False))
        c_all = np.repeat(c_all, big, axis=0)
        ops: dict[str, Callable[[Backend, int], Any]] = {
            "encrypt (public key)": lambda be, n: P.encrypt_limbs(be, pk, m_all[:n],
                                                                   use_pool=False),
            "ct+ct (MontMult mod n²)": lambda be, n: base_op.mont_mul(be, ctx, c_all[:n],
                                                                       c_all[:n], checked=False)}
        rows: dict[str, Any] = {}
        for op_name, fn in ops.items():
            fn(disp, min(args.sizes))               # measures the op's lines (not timed)
            fn(disp, big)
            for n in args.sizes:
                routes = {"accelerator alone": acc, "cpu alone": cpu, "dispatched": disp}
                times = _interleaved({k: (lambda: None, (lambda b=b: _timed(lambda: fn(b, n))))
                                      for k, b in routes.items()}, args.reps)
                med = {k: statistics.median(v) for k, v in times.items()}
                route = [r for r in disp.dispatch_report()]
                rows[f"{op_name} | {n}"] = {"seconds": med, "dispatch": route[-1:] if route
                                            else []}
                disp.reset_counters()
                best = min(med["accelerator alone"], med["cpu alone"])
                print(f"{bits}-bit key  {op_name:<26} n={n:<6} acc {med['accelerator alone']*1e3:9.2f} ms"
                      f"  cpu {med['cpu alone']*1e3:9.2f} ms  dispatched "
                      f"{med['dispatched']*1e3:9.2f} ms  ({med['dispatched'] / best:4.2f}x the "
                      f"better alone)  -> {_route_of(disp, op_name, fn, n)}")
        report["keys"][bits] = {"rows": rows, "lines": disp.lines()}
    print(f"\naccelerator: {acc.describe()} ({stand_in}); cpu: {cpu.describe()}; medians of "
          f"{args.reps}, one process, rows interleaved; a loaded machine's figures are ratios only")
    return report


def _route_of(disp: Any, op_name: str, fn: Callable[[Any, int], Any], n: int) -> str:
    """The route the dispatcher takes for this call size now (a dry decision)."""
    disp.reset_counters()
    fn(disp, n)
    rows = disp.dispatch_report()
    disp.reset_counters()
    return ", ".join(f"{r['op']}: {r['route']}" for r in rows) or "?"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("pool", help="encryption with a warm pool of obfuscators vs without")
    p.add_argument("--bits", type=int, nargs="+", default=[1024, 2048])
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--backend", default="native" if registry.probe("native").available else "cpu")
    p.add_argument("--json", default=None)
    d = sub.add_parser("dispatch", help="where each call size runs, and what that costs")
    d.add_argument("--bits", type=int, nargs="+", default=[2048])
    d.add_argument("--sizes", type=int, nargs="+", default=[1, 4, 16, 64, 256, 1024])
    d.add_argument("--reps", type=int, default=3)
    d.add_argument("--accelerator", default=None,
                   help="backend to dispatch with the CPU (default: gpu, else fpga, else qat)")
    d.add_argument("--budget", type=float, default=1.0,
                   help="seconds one line's calibration may take on one backend")
    d.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    out = bench_pool(args) if args.mode == "pool" else bench_dispatch(args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())

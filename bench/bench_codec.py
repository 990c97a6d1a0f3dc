"""One ciphertext batch through the message codec, phase by phase, on each backend.

    python bench/bench_codec.py [--backends native,gpu,PARTY.yaml] [--key-bits 2048]
                                [--rows 24000] [--repeats 5] [--json F] [--host-bodies]

What a party spends on the batches it sends and receives, beside the crypto (the ``codec_s`` of
``bench_e2e.py``): one batch of ``--rows`` ciphertexts of a ``--key-bits`` key (24,000 is
default_credit's training set), every backend in one process, the same bytes for each.  A name
ending in .yaml is a party config: the backend that party computes on (its fallback chain and
size-aware dispatch, as the job has it):

* encode: the plain ciphertexts out of Montgomery form (``ciphertexts()``: the conversion and,
  on a device, the fetch), the private-key guard's scan of the message (the process holds the
  key, as the key owner does), and ``codec.encode`` whole;
* decode: the frame's range check, the unit check (one grouped product mod n² and a gcd), the
  conversion into Montgomery form, and ``codec.decode`` whole;
* on the kernel backends (``gpu``, and ``gpu_host`` with ``--host-bodies``): the unit check's
  grouped product alone, cut as the backend cuts it (balanced parts,
  ``kernel_backend.group_plan``) and cut by the device fill alone (one part per
  ``parallel_groups``-th of the rows, whose last part then joins every partial in turn), so the
  two plans are compared in the same process.

Each phase: one untimed call, then ``--repeats`` timed calls; the median and the range are
printed, and each backend's median as a ratio to the first backend's.  ``gpu_host`` runs the
gpu kernel bodies on this CPU (the verification harness): its rows are labelled as that
stand-in and are no GPU figure.
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

from unifl import base_op
from unifl.app import codec
from unifl.bench import machine_info
from unifl.core import registry
from unifl.core.limbs import less_than
from unifl.phe_sdk import exposure, paillier
from unifl.phe_sdk.array import EncryptedArray
from unifl.phe_sdk.paillier import require_units


def _timed(fn: Callable[[], Any], repeats: int) -> list[float]:
    fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _fill_only_plan(rows: int, parallel_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """One group of ``rows`` rows cut by the device fill alone: parts of ceil(rows/groups) rows,
    all joined by the last to finish (the plan before balanced parts)."""
    chunk = max(1, -(-rows // max(1, parallel_groups)))
    parts = max(1, -(-rows // chunk))
    begin = np.arange(parts, dtype=np.int64) * chunk
    end = np.minimum(begin + chunk, rows)
    plan = np.stack([np.zeros(parts, np.int64), begin, end, np.zeros(parts, np.int64),
                     np.full(parts, parts, np.int64)], axis=1)
    return np.arange(rows, dtype=np.int64), np.ascontiguousarray(plan)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="native,gpu",
                    help="comma list; the first is the ratios' baseline (default native,gpu)")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--rows", type=int, default=24_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--host-bodies", action="store_true",
                    help="register gpu_host (the gpu kernel bodies on this CPU) to name it")
    args = ap.parse_args()
    if args.rows < 1 or args.repeats < 1:
        ap.error("--rows and --repeats must be at least 1")
    if args.host_bodies:
        from unifl.backends.gpu.host import GpuHostBackend
        registry.register("gpu_host", GpuHostBackend)
    names = [b for b in args.backends.split(",") if b]
    backends: dict[str, Any] = {}
    labels: dict[str, str] = {}
    for name in names:
        if name.endswith((".yaml", ".yml")):
            # a party's config: the backend that party computes on (fallback chain, dispatch)
            from unifl.configs.load import load_party
            from unifl.scheduler import backend_from_config
            be = backend_from_config(load_party(name))
            backends[name] = be
            labels[name] = f"{name} ({be.describe()})"
            print(f"bench_codec: {labels[name]}")
            continue
        pr = registry.probe(name)
        if not pr.available:
            print(f"bench_codec: backend {name!r} is unavailable here: {pr.reason}",
                  file=sys.stderr)
            return 2
        backends[name] = registry.backend(name)
        labels[name] = f"{name} [{pr.stand_in}]" if pr.stand_in else name
        if pr.stand_in:
            print(f"bench_codec: {name} is a stand-in: {pr.stand_in}; no hardware figure")

    pk, sk = paillier.keygen(args.key_bits)      # held for the run: the guard scans for it
    ctx = pk.nsquare_ctx
    values = np.random.default_rng(1).standard_normal(args.rows)
    made = EncryptedArray.encrypt(pk, values, backend=registry.backend(), private_key=sk)
    frame = codec.encode(made)
    plain = np.ascontiguousarray(made.batch.ciphertexts())

    def keys(_fp: bytes) -> paillier.PublicKey:
        return pk

    print(f"bench_codec: {args.rows} ciphertexts of a {args.key_bits}-bit key "
          f"({len(frame) / 1e6:.1f} MB message); {args.repeats} timed calls a phase")
    rows: list[dict[str, Any]] = []
    for name, be in backends.items():
        arr = codec.decode(frame, keys, backend=be)       # resident where the backend keeps it
        assert np.array_equal(np.asarray(arr.batch.ciphertexts()), plain)
        phases: dict[str, Callable[[], Any]] = {
            "encode: out of Montgomery form": lambda arr=arr: np.asarray(arr.batch.ciphertexts()),
            "encode: the guard's scan": lambda: exposure.bytes_reveal(frame),
            "encode: whole": lambda arr=arr: codec.encode(arr),
            "decode: range check": lambda: less_than(plain, ctx.m_limbs).all(),
            "decode: unit check": lambda be=be: require_units(pk, plain, be),
            "decode: into Montgomery form": lambda be=be: base_op.to_mont(be, ctx, plain),
            "decode: whole": lambda be=be: codec.decode(frame, keys, backend=be),
        }
        engine = getattr(be, "engine", None)
        if engine is not None and hasattr(engine, "prod_groups"):
            from unifl.backends.gpu.kernel_backend import group_plan
            key = be._ctx(ctx)
            mont = base_op.to_mont(be, ctx, plain)
            balanced = group_plan(np.zeros(args.rows, np.int64), 1, be._chunk(args.rows))
            fill = _fill_only_plan(args.rows, engine.parallel_groups)
            for what, (order, plan) in (("balanced", balanced), ("fill only", fill)):
                phases[f"unit check's product, {what} ({len(plan)} parts)"] = (
                    lambda order=order, plan=plan, key=key, mont=mont, engine=engine:
                    np.asarray(engine.prod_groups(key, mont, order, plan, 1)))
        for phase, fn in phases.items():
            times = _timed(fn, args.repeats)
            rows.append({"backend": name, "label": labels[name], "phase": phase,
                         "median_s": statistics.median(times), "min_s": min(times),
                         "max_s": max(times)})
            print(f"  {os.path.basename(name):20s} {phase:52s} {statistics.median(times):8.4f} s "
                  f"({min(times):.4f}-{max(times):.4f})", flush=True)

        report = getattr(be, "dispatch_report", None)
        if callable(report):
            for d in report():
                print(f"    dispatch: {d['op']:18s} {d['route']:11s} {d['calls']:4d} calls "
                      f"{d['seconds']:.4f} s, slower than the CPU: {d['slower_than_cpu']} "
                      f"({d['reason']})")
            rows.append({"backend": name, "phase": "dispatch", "report": report()})

    base = {r["phase"]: r["median_s"] for r in rows if r["backend"] == names[0]}
    print(f"\nmedian s, and the ratio to {names[0]} (above 1: slower than {names[0]})")
    for r in rows:
        if r["backend"] != names[0] and r["phase"] in base and "median_s" in r:
            r["ratio_to_first"] = r["median_s"] / base[r["phase"]]
            print(f"  {os.path.basename(r['backend']):20s} {r['phase']:52s} {r['median_s']:8.4f} s "
                  f"{r['ratio_to_first']:6.2f}x")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"machine": machine_info(), "key_bits": args.key_bits, "rows": args.rows,
                       "repeats": args.repeats, "phases": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The QAT two-stage pipeline (UniFL Alg. 6, Fig. 6) on our QAT simulator library.

    python bench/bench_qat.py [--quick] [--json bench/results/qat.json]

For Paillier encryption with a 1024-bit key (r^n mod n²: a 2048-bit-class ModExp with a 1024-bit
exponent) it measures, in one process:

* ``pipelined``: ModExps on the (simulated) device, each ModMult (1 + m·n)·r^n on the CPU as soon
  as its ModExp lands;
* ``sequential``: all ModExps first, then all ModMults (the unpipelined baseline);
* the ModExp engine's utilisation during the pipelined run, two ways: the driver's view (share of
  the wall time with at least one request outstanding) and the simulator's (engine-busy time /
  (wall time × engines)).

Two device models: ``host-speed`` (the simulator's engines compute as fast as this CPU can, so the
device and the CPU stage share the same cores) and ``latency-shaped`` (each ModExp holds its engine
for UNIFL_QAT_SIM_LATENCY_US scaled by size class and exponent length -- a device slower than the
host's ModMult, the situation of UniFL's QAT 8970).  Every number is of the QAT simulator, not a QAT
device; no QAT hardware was available here.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import time


import numpy as np

import unifl
from unifl.backends.qat import runtime
from unifl.phe_sdk import paillier
from unifl.backends.qat import pipeline

LABEL = "QAT simulator"

MODELS = {
    "host-speed": {"UNIFL_QAT_SIM_ENGINES": "2", "UNIFL_QAT_SIM_LATENCY_US": "0"},
    # 15 ms per request (2048-bit class, 1024-bit exponent) on each of 6 engines: at most 400/s,
    # about half a core of real computation, so the model stays latency-bound on a busy host
    "latency-shaped": {"UNIFL_QAT_SIM_ENGINES": "6", "UNIFL_QAT_SIM_LATENCY_US": "30000"},
}


def _engine_busy(s: dict) -> float:
    return s.get("sim_engine_busy_seconds", 0.0)


def run_model(name: str, env: dict, pk, m_l, r_l, ref, repeats: int, max_in_flight: int,
              sequential: bool = True) -> dict:
    """Interleaved repeats (the box is shared, so medians, not bests)."""
    runtime.close()
    os.environ.update(env)
    be = unifl.backend("qat", library="simulator", max_in_flight=max_in_flight)
    assert be.simulator, "this benchmark is for the simulator"
    n = m_l.shape[0]
    ctx = pk.nsquare_ctx
    base, e = pipeline._paillier_operands(pk, r_l)
    pipeline.paillier_encrypt(be, pk, m_l[:32], r_l[:32])  # warm-up (pool, threads, caches)
    pipe, seq, exp_only, mul_only, util_drv, util_eng, chunks = [], [], [], [], [], [], []
    for _ in range(repeats):
        s0 = be.stats()
        st = pipeline.PipelineStats()
        t = time.perf_counter()
        out = pipeline.paillier_encrypt(be, pk, m_l, r_l, stats=st)
        dt = time.perf_counter() - t
        s1 = be.stats()
        assert np.array_equal(out, ref), "pipelined result differs from cpu"
        pipe.append(dt)
        util_drv.append(st.utilisation)
        util_eng.append((_engine_busy(s1) - _engine_busy(s0)) / (dt * max(1, s1.get("sim_engines", 1))))
        chunks.append(st.chunks)
        if not sequential:
            continue
        t = time.perf_counter()
        out = pipeline.paillier_encrypt_sequential(be, pk, m_l, r_l)
        seq.append(time.perf_counter() - t)
        assert np.array_equal(out, ref), "sequential result differs from cpu"
        t = time.perf_counter()
        rn = pipeline.hybrid_mod_exp(be, ctx, base, e)
        exp_only.append(time.perf_counter() - t)
        t = time.perf_counter()
        tmp = np.empty_like(rn)
        pipeline._modmult_into(be.cpu, pk, tmp, m_l, np.arange(n), rn)
        mul_only.append(time.perf_counter() - t)
    runtime.close()
    for k in env:
        os.environ.pop(k, None)
    med = statistics.median
    row = {"model": name, "stand_in": LABEL, "env": env, "elements": n,
           "max_in_flight": max_in_flight, "repeats": repeats,
           "pipelined_enc_per_s": n / med(pipe),
           "utilisation_driver_view": med(util_drv), "utilisation_engines": med(util_eng),
           "chunks": med(chunks)}
    if sequential:
        row.update({
            "sequential_enc_per_s": n / med(seq),
            "speedup_pipelined_over_sequential": med(seq) / med(pipe),
            "modexp_stage_seconds": med(exp_only), "modmult_stage_seconds": med(mul_only),
            # what overlap can save at most: (T_exp + T_mul) / max(T_exp, T_mul)
            "speedup_bound": (med(exp_only) + med(mul_only)) / max(med(exp_only), med(mul_only)),
        })
    return row


def run_matmul(pk, repeats: int, k: int = 4, n: int = 64, bits: int = 32) -> dict:
    """Alg. 7: out[k] = prod_j y_j^(x_kj) mod n² for K×N plaintext exponents of ``bits`` bits, on
    the host-speed simulator, beside the CPU's multi-exponentiation (native)."""
    from unifl import base_op, mod_op
    runtime.close()
    os.environ.update(MODELS["host-speed"])
    be = unifl.backend("qat", library="simulator", matmul_on_qat=True)
    native = unifl.backend("native")
    ctx = pk.nsquare_ctx
    y = base_op.to_mont(native, ctx, ctx.to_limbs([secrets.randbelow(ctx.m) for _ in range(n)]))
    x = mod_op.exp_limbs([secrets.randbits(bits) for _ in range(k * n)]).reshape(k, n, -1)
    ref = mod_op.mont_multi_exp(native, ctx, y, x)
    t_qat, t_cpu = [], []
    for _ in range(repeats):
        t = time.perf_counter()
        got = pipeline.mont_multi_exp(be, ctx, y, x)
        t_qat.append(time.perf_counter() - t)
        assert np.array_equal(got, ref), "Alg. 7 result differs from native"
        t = time.perf_counter()
        mod_op.mont_multi_exp(native, ctx, y, x)
        t_cpu.append(time.perf_counter() - t)
    runtime.close()
    for key in MODELS["host-speed"]:
        os.environ.pop(key, None)
    med = statistics.median
    return {"op": "matmul (Alg. 7)", "stand_in": LABEL, "k": k, "n": n, "exp_bits": bits,
            "qat_pipeline_seconds": med(t_qat), "native_multi_exp_seconds": med(t_cpu)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller batch, one repeat")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--n", type=int, default=None, help="elements per batch")
    ap.add_argument("--max-in-flight", type=int, default=96)
    args = ap.parse_args()
    n = args.n or (96 if args.quick else 384)
    repeats = 1 if args.quick else 5

    pk, _ = paillier.keygen(1024)
    ms = [secrets.randbelow(pk.n) for _ in range(n)]
    rs = [secrets.randbelow(pk.n - 1) + 1 for _ in range(n)]
    m_l, r_l = pk.plaintext_limbs(ms), pk.n_ctx.to_limbs(rs)
    native = unifl.backend("native")
    ref = paillier.encrypt_limbs(unifl.backend("cpu"), pk, m_l, r=r_l)
    t = time.perf_counter()
    assert np.array_equal(paillier.encrypt_limbs(native, pk, m_l, r=r_l), ref)
    native_rate = n / (time.perf_counter() - t)

    rows = [run_model(name, env, pk, m_l, r_l, ref, repeats, args.max_in_flight)
            for name, env in MODELS.items()]
    # the in-flight window: how much of the engines a bounded asynchronous window keeps busy
    w = min(n, 96)
    window = [run_model("latency-shaped", MODELS["latency-shaped"], pk, m_l[:w], r_l[:w], ref[:w],
                        max(1, repeats // 2), k, sequential=False) for k in (1, 3, 6, 24)]
    mm = run_matmul(pk, repeats)
    print(f"Paillier encryption, 1024-bit key, {n} elements; device = {LABEL} (no QAT hardware here)")
    print(f"  reference: native backend (fused, all on the CPU) {native_rate:9.1f} enc/s")
    for r in rows:
        print(f"  [{LABEL}, {r['model']:>14}] pipelined {r['pipelined_enc_per_s']:8.1f} enc/s | "
              f"sequential {r['sequential_enc_per_s']:8.1f} enc/s | speedup "
              f"{r['speedup_pipelined_over_sequential']:.3f}x (bound {r['speedup_bound']:.4f}x: "
              f"ModExp stage {r['modexp_stage_seconds'] * 1e3:.1f} ms, ModMult stage "
              f"{r['modmult_stage_seconds'] * 1e3:.2f} ms) | ModExp engine busy "
              f"{100 * r['utilisation_driver_view']:.1f}% (driver view), "
              f"{100 * r['utilisation_engines']:.1f}% (engines)")
    for r in window:
        print(f"  [{LABEL}, latency-shaped, 6 engines, {r['elements']} elements] max_in_flight "
              f"{r['max_in_flight']:3d}: "
              f"{r['pipelined_enc_per_s']:8.1f} enc/s, engines busy "
              f"{100 * r['utilisation_engines']:.1f}%")
    print(f"  [{LABEL}, host-speed] ciphertext matmul {mm['k']}x{mm['n']} ({mm['exp_bits']}-bit "
          f"plaintexts): Alg. 7 pipeline {mm['qat_pipeline_seconds'] * 1e3:.1f} ms | native "
          f"multi-exponentiation (CPU) {mm['native_multi_exp_seconds'] * 1e3:.1f} ms")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as fh:
            json.dump({"native_enc_per_s": native_rate, "rows": rows, "window": window,
                       "matmul": mm}, fh, indent=1)


if __name__ == "__main__":
    main()

"""Throughput of the ``fpga`` backend in both modes beside ``native`` and gmpy2, in one process.

    python -m bench.bench_fpga [--quick] [--json bench/results/fpga.json]   (from the checkout: it
    uses the developer package tools.fpga)

Rows: MontMult, ModMult, ModExp (full-length exponent, one per element) at 1024 and 2048 bits, and
Paillier encryption with a 1024-bit key.  ``fpga[montmul]`` is UniFL's split (only MontMult on the
device, ModExp composed on the host from ~1.2·bits device batches); ``fpga[modexp]`` runs the whole
exponentiation on the device (one launch).  Here the device is PoCL on the host CPU, so the fpga
numbers measure the host runtime and the kernel's code on a CPU, not an FPGA; every fpga row says so.

The RTL estimate at the end is *not* a measurement: cycles per MontMult are the interval of
rtl/unifl_mm_engine.v (tools/fpga/estimate.py; tests/backends/fpga/test_rtl_engine.py checks the formula against
the cocotb simulation), scaled to the stated clock and the engine count that yosys synthesis of
the exponentiation unit supports on a VU13P (250 MHz; 297 engines at 1024 and 2048 bits,
DSP-bound, after a 25 % shell reserve: docs/backends/fpga.md).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets


import gmpy2

from unifl import base_op, mod_op
from unifl.core import registry
from unifl.base_op import mont_context
from unifl.bench import measure
from unifl.phe_sdk import paillier
from unifl.phe_sdk.paillier import encrypt_limbs

from tools.fpga.estimate import (PINNED, engines as fit_engines,
                                 interval_cycles, job_montmults)


def rtl_estimate(bits: int, mhz: float = 250.0, engines: int | None = None) -> dict:
    """ModExp of a full-length exponent on the exponentiation unit: engines per VU13P from the
    unit's pinned synthesis figures (tools.fpga.estimate), the unit's constant-time schedule."""
    per = PINNED[("xcup", bits)]
    engines = fit_engines("VU13P", per)[0] if engines is None else engines
    mhz = min(mhz, per.get("mhz_walk", mhz))
    c = interval_cycles(bits // 64)
    mm = mhz * 1e6 / c * engines
    return {"bits": bits, "cycles_per_montmult": c, "mhz": mhz, "engines": engines,
            "montmult_per_s": mm, "modexp_per_s": mm / job_montmults(-(-bits // 4))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller batches, one repeat")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--engines", type=int, default=16)
    args = ap.parse_args()
    min_time, repeats = (0.2, 1) if args.quick else (0.5, 3)

    impls = {}
    if registry.probe("fpga").available:
        impls["fpga[montmul]"] = registry.backend("fpga", mode="montmul", engines=args.engines)
        impls["fpga[modexp]"] = registry.backend("fpga", mode="modexp", engines=args.engines)
    else:
        print("fpga unavailable:", registry.probe("fpga").reason)
    if registry.probe("native").available:
        impls["native"] = registry.backend("native")
    stand_in = registry.probe("fpga").stand_in
    rows = []

    def add(op, bits, impl, rate, spread, base=None):
        ratio = rate / base if base else None
        rows.append({"op": op, "bits": bits, "impl": impl, "ops_per_s": rate,
                     "spread": spread, "vs_gmpy2": ratio,
                     "stand_in": stand_in if impl.startswith("fpga") else None})
        tag = f"  [{stand_in}]" if impl.startswith("fpga") and stand_in else ""
        rs = f"{ratio:7.2f}x gmpy2" if ratio else " " * 13
        print(f"{op:28s} {bits:5d}  {impl:16s} {rate:14,.1f} /s  {rs}{tag}", flush=True)

    for bits in (1024, 2048):
        m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
        ctx = mont_context(m)
        n_mul = 1024 if args.quick else 8192
        n_exp = 16 if args.quick else 64
        a_i = [secrets.randbelow(m) for _ in range(n_mul)]
        b_i = [secrets.randbelow(m) for _ in range(n_mul)]
        e_i = [secrets.randbits(bits) | (1 << (bits - 1)) for _ in range(n_exp)]
        ga, gb, gm = [gmpy2.mpz(x) for x in a_i], [gmpy2.mpz(x) for x in b_i], gmpy2.mpz(m)

        def g_mul():
            for x, y in zip(ga, gb):
                x * y % gm
            return n_mul

        def g_exp():
            for x, e in zip(ga[:n_exp], e_i):
                gmpy2.powmod(x, e, gm)
            return n_exp
        r_gm, s_gm = measure(g_mul, min_time, repeats)
        r_ge, s_ge = measure(g_exp, min_time, repeats)
        add("ModMult", bits, "gmpy2 (1 core)", r_gm, s_gm)
        add("ModExp", bits, "gmpy2 (1 core)", r_ge, s_ge)
        a, b = ctx.to_limbs(a_i), ctx.to_limbs(b_i)
        exps = mod_op.exp_limbs(e_i)
        for name, be in impls.items():
            if name != "fpga[modexp]":   # same MontMult kernel in both modes
                r, s = measure(lambda: len(base_op.mont_mul(be, ctx, a, b, checked=False)),
                               min_time, repeats)
                add("MontMult", bits, name, r, s, r_gm)
                r, s = measure(lambda: len(mod_op.mod_mul(be, ctx, a, b)), min_time, repeats)
                add("ModMult", bits, name, r, s, r_gm)
            r, s = measure(lambda: len(mod_op.mod_exp(be, ctx, a[:n_exp], exps)), min_time,
                           repeats)
            add("ModExp", bits, name, r, s, r_ge)

    pk, _ = paillier.keygen(1024)
    n_enc = 32 if args.quick else 128
    m_l = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(n_enc)])
    ns = gmpy2.mpz(pk.nsquare)
    rs_ = [gmpy2.mpz(secrets.randbelow(pk.n)) for _ in range(n_enc)]
    ms_ = [gmpy2.mpz(secrets.randbelow(pk.n)) for _ in range(n_enc)]

    def g_enc():
        for mm, r in zip(ms_, rs_):
            (1 + mm * pk.n) * gmpy2.powmod(r, pk.n, ns) % ns
        return n_enc
    r_g, s_g = measure(g_enc, min_time, repeats)
    add("Paillier enc (1024-bit key)", 1024, "gmpy2 (1 core)", r_g, s_g)
    for name, be in impls.items():
        r, s = measure(lambda: len(encrypt_limbs(be, pk, m_l)), min_time, repeats)
        add("Paillier enc (1024-bit key)", 1024, name, r, s, r_g)

    print("\nRTL ESTIMATE (NOT measured: the interval of rtl/unifl_mm_engine.v, at the"
          " clock and VU13P engine count that yosys synthesis supports; docs/backends/fpga.md):")
    est = [rtl_estimate(b) for b in (1024, 2048)]
    for e in est:
        print(f"  {e['bits']:5d}-bit: {e['cycles_per_montmult']} cycles/MontMult -> "
              f"{e['montmult_per_s'] / 1e6:,.1f} M MontMult/s, ~{e['modexp_per_s']:,.0f} "
              f"full-length ModExp/s ({e['engines']} engines @ {e['mhz']:.0f} MHz)")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"rows": rows, "rtl_estimate": est,
                       "fpga_device": impls["fpga[montmul]"].describe() if impls else None},
                      fh, indent=1)


if __name__ == "__main__":
    main()

"""UniFL Table 2 operations on the ``gpu`` backend (CUDA), beside gmpy2 in the same process.

    python bench/bench_gpu.py [--quick] [--json bench/results/gpu.json] [--plot sweep.png]
                              [--host-bodies]

Each GPU op is timed two ways: ``host->host`` (host operands uploaded, result fetched: what one
isolated call costs) and ``on device`` (operands already resident, result left there: what a chained
SDK call costs, see ``unifl.base_op.DeviceBatch``).  A sweep over the batch size (ModExp, Paillier
encryption) shows where the device fills up; ``--plot`` draws it.

Rows: MontMult, ModMult, ModExp (2048-bit modulus, full 2048-bit exponents) and Paillier encryption
with a 1024-bit key (fused kernel, UniFL Alg. 4) and CRT decryption, with GPU-sized batches (the
device needs 10^4+ instances in flight), next to UniFL's quoted T4 row (3294 K ModMult/s, 32,398
ModExp/s, 65,091 enc/s -- quoted from the paper, not measured here).

Without a usable GPU the script says why (the backend's probe reason) and exits 0.  ``--host-bodies``
instead times the same kernel bodies run on the host CPU by the verification harness (backend
``gpu_host``): every such row is labelled with that stand-in, and it is no GPU figure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import gmpy2  # noqa: E402
import numpy as np  # noqa: E402

from unifl import base_op, mod_op  # noqa: E402
from unifl.core import registry  # noqa: E402
from unifl.base_op import mont_context  # noqa: E402
from unifl.bench import machine_info, measure  # noqa: E402
from unifl.phe_sdk import paillier  # noqa: E402
from unifl.phe_sdk.paillier import decrypt_limbs, encrypt_limbs  # noqa: E402

UNIFL_T4 = {"MontMult": None, "ModMult": 3_294_000, "ModExp": 32_398,
            "Paillier enc (1024-bit key)": 65_091}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller batches, one repeat")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--plot", default=None, help="draw the batch-size sweep into this PNG")
    ap.add_argument("--host-bodies", action="store_true",
                    help="time the kernel bodies on the host CPU (gpu_host stand-in), not a GPU")
    args = ap.parse_args()
    min_time, repeats = (0.2, 1) if args.quick else (0.5, 3)

    if args.host_bodies:
        from unifl.backends.gpu.host import GpuHostBackend
        registry.register("gpu_host", GpuHostBackend)
        name = "gpu_host"
    else:
        name = "gpu"
    pr = registry.probe(name)
    if not pr.available:
        print(f"bench_gpu: skipped, backend {name!r} unavailable: {pr.reason}")
        return 0
    be = registry.backend(name)
    label = f"{name} [{pr.stand_in}]" if pr.stand_in else f"{name} ({', '.join(pr.devices)})"
    small = args.quick or args.host_bodies
    n_mul = 4096 if small else 1 << 18
    n_exp = 16 if small else 1 << 14
    n_enc = 16 if small else 1 << 14

    bits = 2048
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = mont_context(m)
    a_i = [secrets.randbelow(m) for _ in range(n_mul)]
    b_i = [secrets.randbelow(m) for _ in range(n_mul)]
    a, b = ctx.to_limbs(a_i), ctx.to_limbs(b_i)
    e_full = [secrets.randbits(bits) | (1 << (bits - 1)) for _ in range(n_exp)]
    exps = mod_op.exp_limbs(e_full)
    ga, gb, gm, ge = gmpy2.mpz(a_i[0]), gmpy2.mpz(b_i[0]), gmpy2.mpz(m), gmpy2.mpz(e_full[0])
    rows = []

    def row(op, impl, rate, spread, stand_in=None, t4_op=None):
        key_bits = 2048 if "2048-bit key" in op else 1024
        r = {"op": op, "bits": bits if "Paillier" not in op else key_bits, "impl": impl,
             "ops_per_s": rate, "spread": spread, "stand_in": stand_in,
             "unifl_t4_quoted": UNIFL_T4.get(t4_op or op)
             if impl.startswith(label) and name == "gpu" else None}
        rows.append(r)
        t4 = f"   (UniFL T4, quoted: {r['unifl_t4_quoted']:,})" if r["unifl_t4_quoted"] else ""
        print(f"{op:30s} {impl:45s} {rate:14,.0f} /s{t4}")

    def g_mul():
        for _ in range(2000):
            ga * gb % gm
        return 2000
    row("ModMult", "gmpy2 (1 core)", *measure(g_mul, min_time, repeats))
    row("ModExp", "gmpy2 (1 core)",
        *measure(lambda: (gmpy2.powmod(ga, ge, gm), 1)[1], min_time, repeats))
    si = pr.stand_in
    fetch = np.asarray          # fetches a device batch (a host array passes through)
    if name == "gpu":           # resident copies for the on-device rows
        dev_a = be.engine.upload(a)
        dev_b = be.engine.upload(b, like=dev_a)
    row("MontMult", label + " host->host", *measure(
        lambda: len(fetch(base_op.mont_mul(be, ctx, a, b, checked=False))), min_time, repeats), si)
    dev = name == "gpu"         # the on-device rows mean nothing for the host-bodies stand-in
    if dev:
        row("MontMult", label + " on device", *measure(
            lambda: len(base_op.mont_mul(be, ctx, dev_a, dev_b, checked=False)), min_time, repeats),
            si)
    row("ModMult", label + " host->host", *measure(
        lambda: len(fetch(mod_op.mod_mul(be, ctx, a, b))), min_time, repeats), si)
    if dev:
        row("ModMult", label + " on device", *measure(
            lambda: len(mod_op.mod_mul(be, ctx, dev_a, dev_b)), min_time, repeats), si)
    row("ModExp", label + " host->host", *measure(
        lambda: len(fetch(mod_op.mod_exp(be, ctx, a[:n_exp], exps))), min_time, repeats), si)
    pk, sk = paillier.keygen(1024)
    m_l = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(n_enc)])
    r_l = pk.random_r(n_enc)
    row("Paillier enc (1024-bit key)", label + " host->host",
        *measure(lambda: len(fetch(encrypt_limbs(be, pk, m_l, r=r_l))), min_time, repeats), si)
    c = encrypt_limbs(be, pk, m_l, r=r_l)
    c_host = np.array(c)
    row("Paillier dec (1024-bit key)", label + " host->host",
        *measure(lambda: len(fetch(decrypt_limbs(be, sk, c_host))), min_time, repeats), si)
    if dev:
        row("Paillier dec (1024-bit key)", label + " on device",
            *measure(lambda: len(decrypt_limbs(be, sk, c)), min_time, repeats), si)

    # ---- batch-size sweep: throughput against the number of instances in flight
    sweep_n = [256, 1024] if small else [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 17]
    sweep = []
    many = [secrets.randbelow(m) for _ in range(max(sweep_n))]
    e_many = mod_op.exp_limbs([secrets.randbits(bits) | (1 << (bits - 1))
                               for _ in range(max(sweep_n))])
    x_many = ctx.to_limbs(many)
    for key_bits in (1024, 2048):
        pk_s, _ = (pk, sk) if key_bits == 1024 else paillier.keygen(2048)
        m_many = pk_s.plaintext_limbs([secrets.randbelow(pk_s.n) for _ in range(max(sweep_n))])
        r_many = pk_s.random_r(max(sweep_n))
        for n in sweep_n:
            rate, spread = measure(lambda: len(fetch(encrypt_limbs(be, pk_s, m_many[:n],
                                                                   r=r_many[:n]))), min_time, 1)
            sweep.append({"op": f"Paillier enc ({key_bits}-bit key)", "n": n, "ops_per_s": rate})
            print(f"  sweep  Paillier enc {key_bits}-bit key  n={n:>7}  {rate:14,.0f} /s")
    for n in sweep_n:
        rate, spread = measure(lambda: len(fetch(mod_op.mod_exp(be, ctx, x_many[:n], e_many[:n]))),
                               min_time, 1)
        sweep.append({"op": f"ModExp ({bits}-bit, full exponent)", "n": n, "ops_per_s": rate})
        print(f"  sweep  ModExp {bits}-bit  n={n:>7}  {rate:14,.0f} /s")
    best = {}
    for r in sweep:
        best[r["op"]] = max(best.get(r["op"], 0), r["ops_per_s"])
    for op, rate in best.items():
        q = {"Paillier enc (1024-bit key)": "Paillier enc (1024-bit key)",
             f"ModExp ({bits}-bit, full exponent)": "ModExp"}.get(op)
        row(op + " best of sweep", label + " host->host", rate, (rate, rate), si, t4_op=q or op)
    if args.plot:
        _plot(sweep, args.plot, label)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"machine": machine_info(), "rows": rows, "sweep": sweep}, fh, indent=1)
    return 0


def _plot(sweep: list[dict], path: str, label: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for op in dict.fromkeys(r["op"] for r in sweep):
        pts = [(r["n"], r["ops_per_s"]) for r in sweep if r["op"] == op]
        ax.plot(*zip(*pts), marker="o", label=op)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (instances per call)")
    ax.set_ylabel("operations / s (host->host)")
    ax.set_title(f"UniFL gpu backend: throughput vs batch size\n{label}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())

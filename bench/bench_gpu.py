"""UniFL Table 2 operations on the ``gpu`` backend (CUDA): both kernel families side by side.

    python bench/bench_gpu.py [--kernels thread,group] [--quick] [--json F] [--plot F]
                              [--sizes 1024,4096,...] [--no-auto] [--host-bodies]

One process, one device, every figure of every family measured with the same inputs:

* the two kernel families of the backend (``--kernels``, default both): ``thread`` (one thread per
  instance, 64-bit limbs in local memory) and ``group`` (cooperative: TPI threads per instance, 32-bit
  words in registers, window tables in shared memory);
* per op, a batch-size sweep (1,024 ... 131,072 instances per call) and, per family, the plateau
  (the best rate of the sweep) and the batch size at which the family first reaches 90 % of it:
  ModExp (2048-bit modulus, full 2048-bit exponents) and, for 1024- and 2048-bit Paillier keys,
  encryption with the public key (r^n, UniFL Alg. 4), as the key owner (CRT), DJN fixed-base
  (public and key owner: group kernels only, there is no one-thread body) and CRT decryption;
* the targets (ModExp >= 250 k/s; encryption >= 500 k/s public, >= 1.5 M/s key owner; decryption
  >= 1.5 M/s) printed beside the 1024-bit-key rows and the ModExp row they apply to;
* MontMult / ModMult (2048-bit, 2^18 per call) host->host and on device, and gmpy2 on one core, as
  before, with UniFL's quoted T4 row (3294 K ModMult/s, 32,398 ModExp/s, 65,091 enc/s -- quoted from
  the paper, not measured here);
* ``kernels="auto"``'s calibration on this device (which family it picks per size class, and the
  rates behind the pick), unless ``--no-auto``.

Timing of the sweep: each op is called through the backend's op method (``op_mod_exp``,
``op_paillier_encrypt`` ...) with host operands drawn once beforehand (so host-side randomness is
not charged), staged per call, and the result left on the device (decryption fetches its plaintexts,
as the op does); one untimed call per (op, family) first, then each batch size is called until at
least ``--min-time`` seconds passed.

Without a CUDA device the script fails (exit status 2) saying so and why (the backend's probe).
``--host-bodies`` instead times the same kernel bodies run on the host CPU by the verification
harness (backend ``gpu_host``, tiny batches): every such row is labelled with that stand-in, and it
is no GPU figure.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from typing import Any, Callable


import gmpy2
import numpy as np

from unifl import base_op, mod_op
from unifl.core import registry
from unifl.base_op import mont_context
from unifl.bench import machine_info, measure
from unifl.phe_sdk import paillier
from unifl.phe_sdk.paillier import random_limbs

UNIFL_T4 = {"ModMult": 3_294_000, "ModExp": 32_398, "Paillier enc (1024-bit key)": 65_091}
FAMILIES = ("thread", "group")
SWEEP_FULL = [1 << k for k in range(10, 18)]          # 1,024 ... 131,072
SWEEP_QUICK = [1 << 10, 1 << 12, 1 << 14]
SWEEP_HOST = [8, 16]
#: ops per second the cooperative kernels are meant to reach (1024-bit Paillier keys, 2048-bit
#: ModExp); printed beside the measured figures, never used to pass or fail anything
TARGETS = {"ModExp 2048-bit": 250_000,
           "enc public r^n (1024-bit key)": 500_000,
           "enc DJN public (1024-bit key)": 500_000,
           "enc key owner CRT (1024-bit key)": 1_500_000,
           "enc DJN key owner (1024-bit key)": 1_500_000,
           "dec CRT (1024-bit key)": 1_500_000}


def _families(text: str) -> list[str]:
    fams = [f.strip() for f in text.split(",") if f.strip()]
    bad = [f for f in fams if f not in FAMILIES]
    if not fams or bad:
        raise argparse.ArgumentTypeError(f"--kernels takes a comma list of {FAMILIES}, got {text!r}")
    return list(dict.fromkeys(fams))


def _sizes(text: str) -> list[int]:
    try:
        sizes = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"--sizes takes a comma list of batch sizes, got {text!r}")
    if not sizes or sizes[0] < 1:
        raise argparse.ArgumentTypeError("--sizes: batch sizes must be >= 1")
    return sizes


def _backend(name: str, family: str, pr: Any) -> Any:
    """A backend instance of this family (its own instance: the shared one has kernels='auto')."""
    if name == "gpu":
        return registry.backend("gpu", kernels=family)
    from unifl.backends.gpu.host import GpuHostBackend
    be = GpuHostBackend(kernels=family, threads=os.cpu_count())
    be.probe_result = pr
    return be


def _timed(fn: Callable[[int], Any], n: int, min_time: float) -> float:
    """Operations per second of fn(n), called until at least min_time seconds passed."""
    done, t0 = 0, time.perf_counter()
    while True:
        fn(n)
        done += n
        dt = time.perf_counter() - t0
        if dt >= min_time:
            return done / dt


def _plateau(points: list[tuple[int, float]]) -> tuple[float, int | None]:
    """(best rate, the smallest batch reaching 90 % of it)."""
    best = max(r for _, r in points)
    n90 = next((n for n, r in sorted(points) if r >= 0.9 * best), None)
    return best, n90


def _fmt(rate: float | None) -> str:
    if rate is None:
        return "-"
    return f"{rate / 1e6:.2f} M/s" if rate >= 1e6 else f"{rate / 1e3:.1f} k/s"


def _paillier_ops(bits: int, nmax: int, groups_only: set[str]) -> dict[str, tuple[Callable[[Any, int], Any], bool]]:
    """name -> (fn(backend, n), has a one-thread body) for one key size; inputs drawn once."""
    pk, sk = paillier.keygen(bits)
    pk.enable_fixed_base()               # the DJN rows (tables uploaded once per backend instance)
    fb = pk.fixed_base
    assert fb is not None
    n_ = pk.n
    m = random_limbs(nmax, n_.bit_length(), n_)
    r = random_limbs(nmax, n_.bit_length(), n_)
    yp = random_limbs(nmax, sk.p.bit_length(), sk.p)
    yq = random_limbs(nmax, sk.q.bit_length(), sk.q)
    a = random_limbs(nmax, fb.exp_bits)
    # valid ciphertexts for the decryption rows: 1,024 encrypted on the default CPU backend, tiled
    # to nmax rows (a decryption costs the same whatever the row; encrypting 131,072 on the CPU
    # would take minutes)
    k = min(nmax, 1024)
    c = np.asarray(paillier.encrypt_limbs(registry.backend(), pk, m[:k], r=r[:k]))
    c = np.ascontiguousarray(np.resize(c, (nmax, c.shape[1])))
    tag = f"({bits}-bit key)"
    ops: dict[str, tuple[Callable[[Any, int], Any], bool]] = {
        f"enc public r^n {tag}": (lambda be, n: be.op_paillier_encrypt(pk.material, m[:n], r[:n]), True),
        f"enc key owner CRT {tag}": (
            lambda be, n: be.op_paillier_encrypt_owner(sk.material, m[:n], yp[:n], yq[:n]), True),
        f"enc DJN public {tag}": (
            lambda be, n: be.op_paillier_encrypt_fixed_base(pk.material, m[:n], a[:n]), False),
        f"enc DJN key owner {tag}": (
            lambda be, n: be.op_paillier_encrypt_owner_fixed_base(sk.material, m[:n], a[:n]), False),
        f"dec CRT {tag}": (lambda be, n: be.op_paillier_decrypt(sk.material, c[:n]), True),
    }
    groups_only.update(k for k, (_, both) in ops.items() if not both)
    return ops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=_families, default=list(FAMILIES),
                    help="comma list of kernel families to compare (default: thread,group)")
    ap.add_argument("--quick", action="store_true", help="sweep 1k..16k only, one repeat")
    ap.add_argument("--sizes", type=_sizes, default=None,
                    help="batch sizes of the sweep (default 1024,2048,...,131072)")
    ap.add_argument("--min-time", type=float, default=None,
                    help="seconds per sweep point (default 0.3, --quick 0.15)")
    ap.add_argument("--bits", type=int, nargs="+", default=[1024, 2048],
                    help="Paillier key sizes (default 1024 2048)")
    ap.add_argument("--no-auto", dest="auto", action="store_false",
                    help="skip the kernels='auto' calibration report")
    ap.add_argument("--json", default=None, help="write rows, sweep and summary as JSON here")
    ap.add_argument("--plot", default=None, help="draw the batch-size sweep into this PNG")
    ap.add_argument("--host-bodies", action="store_true",
                    help="time the kernel bodies on the host CPU (gpu_host stand-in), not a GPU")
    args = ap.parse_args()

    if args.host_bodies:
        from unifl.backends.gpu.host import GpuHostBackend
        registry.register("gpu_host", GpuHostBackend)
        name = "gpu_host"
    else:
        name = "gpu"
    pr = registry.probe(name)
    if not pr.available:
        what = "no CUDA device" if name == "gpu" else "host harness unavailable"
        print(f"bench_gpu: {what}: backend {name!r} is unavailable here: {pr.reason}",
              file=sys.stderr)
        return 2
    host = name == "gpu_host"
    sizes = args.sizes or (SWEEP_HOST if host else SWEEP_QUICK if args.quick else SWEEP_FULL)
    min_time = args.min_time or (0.15 if args.quick or host else 0.3)
    repeats = 1 if args.quick or host else 3
    label = f"{name} [{pr.stand_in}]" if pr.stand_in else f"{name} ({', '.join(pr.devices)})"
    print(f"bench_gpu: {label}; kernel families {', '.join(args.kernels)}; sweep {sizes}")
    bes = {fam: _backend(name, fam, pr) for fam in args.kernels}
    rows: list[dict[str, Any]] = []

    def row(op: str, impl: str, rate: float, spread: tuple[float, float], t4: str | None = None
            ) -> None:
        quoted = UNIFL_T4.get(t4 or op) if not host and impl.startswith(name) else None
        rows.append({"op": op, "impl": impl, "ops_per_s": rate, "spread": spread,
                     "stand_in": pr.stand_in, "unifl_t4_quoted": quoted})
        note = f"   (UniFL T4, quoted: {quoted:,})" if quoted else ""
        print(f"{op:34s} {impl:44s} {rate:14,.0f} /s{note}")

    # ---- MontMult / ModMult and the gmpy2 baseline (as before, per family)
    bits = 2048
    m = secrets.randbits(bits) | (1 << (bits - 1)) | 1
    ctx = mont_context(m)
    n_mul = 4096 if host or args.quick else 1 << 18
    a_i = [secrets.randbelow(m) for _ in range(n_mul)]
    b_i = [secrets.randbelow(m) for _ in range(n_mul)]
    a, b = ctx.to_limbs(a_i), ctx.to_limbs(b_i)
    ga, gb, gm = gmpy2.mpz(a_i[0]), gmpy2.mpz(b_i[0]), gmpy2.mpz(m)
    ge = gmpy2.mpz(secrets.randbits(bits) | (1 << (bits - 1)))
    mt, mr = (0.2, 1) if host or args.quick else (0.5, 3)

    def g_mul() -> int:
        for _ in range(2000):
            ga * gb % gm
        return 2000
    row("ModMult 2048-bit", "gmpy2 (1 core)", *measure(g_mul, mt, mr), t4="ModMult")
    row("ModExp 2048-bit", "gmpy2 (1 core)",
        *measure(lambda: (gmpy2.powmod(ga, ge, gm), 1)[1], mt, mr), t4="ModExp")
    for fam, be in bes.items():
        impl = f"{name} {fam}"
        row("MontMult 2048-bit", impl + " host->host", *measure(
            lambda: len(np.asarray(base_op.mont_mul(be, ctx, a, b, checked=False))), mt, mr))
        row("ModMult 2048-bit", impl + " host->host", *measure(
            lambda: len(np.asarray(mod_op.mod_mul(be, ctx, a, b))), mt, mr), t4="ModMult")
        if not host:
            dev_a = be.engine.upload(a)
            dev_b = be.engine.upload(b, like=dev_a)
            row("MontMult 2048-bit", impl + " on device", *measure(
                lambda: len(base_op.mont_mul(be, ctx, dev_a, dev_b, checked=False)), mt, mr))
            row("ModMult 2048-bit", impl + " on device", *measure(
                lambda: len(mod_op.mod_mul(be, ctx, dev_a, dev_b)), mt, mr), t4="ModMult")

    # ---- the sweep: every op, every family, every batch size
    nmax = max(sizes)
    x_many = ctx.to_limbs([secrets.randbelow(m) for _ in range(nmax)])
    e_many = mod_op.exp_limbs([secrets.randbits(bits) | (1 << (bits - 1)) for _ in range(nmax)])
    ops: dict[str, tuple[Callable[[Any, int], Any], bool]] = {
        "ModExp 2048-bit": (lambda be, n: be.op_mod_exp(ctx, x_many[:n], e_many[:n]), True)}
    groups_only: set[str] = set()
    for kb in args.bits:
        ops.update(_paillier_ops(kb, nmax, groups_only))
    sweep: list[dict[str, Any]] = []
    summary: list[dict[str, Any]] = []
    for op, (fn, both) in ops.items():
        for fam, be in bes.items():
            if not both and fam == "thread":
                continue                       # no one-thread body: the group row is the figure
            def call(n: int, fn: Callable[[Any, int], Any] = fn, be: Any = be) -> Any:
                return fn(be, n)
            call(min(sizes))                   # first use: key / table uploads, smem opt-in
            points = []
            for n in sizes:
                rate = max(_timed(call, n, min_time) for _ in range(repeats if n <= 16384 else 1))
                points.append((n, rate))
                sweep.append({"op": op, "kernels": fam, "n": n, "ops_per_s": rate})
                print(f"  sweep  {op:34s} {fam:6s} n={n:>7}  {rate:14,.0f} /s", flush=True)
            best, n90 = _plateau(points)
            summary.append({"op": op, "kernels": fam, "plateau_ops_per_s": best, "n_90": n90,
                            "target_ops_per_s": TARGETS.get(op)})

    # ---- the side-by-side table
    print(f"\nplateau (best of the sweep) and the batch reaching 90 % of it; targets apply to the "
          f"rows they name ({label})")
    head = f"{'op':34s}" + "".join(f" {fam + ' plateau':>16s} {'n@90%':>8s}" for fam in args.kernels)
    print(head + f" {'group/thread':>12s} {'target':>11s}")
    for op in ops:
        cells, rates = "", {}
        for fam in args.kernels:
            s = next((x for x in summary if x["op"] == op and x["kernels"] == fam), None)
            if s is None:
                cells += f" {'(group only)':>16s} {'':>8s}"
                continue
            rates[fam] = s["plateau_ops_per_s"]
            cells += f" {_fmt(s['plateau_ops_per_s']):>16s} {s['n_90'] or '-':>8}"
        ratio = f"{rates['group'] / rates['thread']:.2f}x" if len(rates) == 2 else "-"
        target = TARGETS.get(op)
        print(f"{op:34s}{cells} {ratio:>12s} {_fmt(target) if target else '-':>11s}")

    auto: dict[str, Any] = {}
    if args.auto and not host:
        from unifl.backends.gpu import GpuBackend
        be_auto = registry.backend("gpu", kernels="auto")
        assert isinstance(be_auto, GpuBackend)
        for cls in (16, 32, 64):
            t0 = time.perf_counter()
            be_auto._auto_group(cls)
            auto[str(cls)] = {"choice": be_auto.kernel_choice[cls],
                              "calibration_s": time.perf_counter() - t0,
                              "rates": be_auto.kernel_timing[cls]}
        print("\nkernels='auto' on this device (ModExp calibration per size class):")
        for cls_key, v in auto.items():
            how = ", ".join(f"{k} {_fmt(r) if isinstance(r, float) else r}"
                            for k, r in v["rates"].items())
            print(f"  {64 * int(cls_key):>5}-bit class: {v['choice']:6s} ({how}; "
                  f"{v['calibration_s']:.1f} s)")
    if args.plot:
        _plot(sweep, args.plot, label)
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"machine": machine_info(), "device": label, "kernels": args.kernels,
                       "rows": rows, "sweep": sweep, "summary": summary, "targets": TARGETS,
                       "auto": auto}, fh, indent=1)
    return 0


def _plot(sweep: list[dict[str, Any]], path: str, label: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(9, 6))
    for op, fam in dict.fromkeys((r["op"], r["kernels"]) for r in sweep):
        pts = [(r["n"], r["ops_per_s"]) for r in sweep if r["op"] == op and r["kernels"] == fam]
        ax.plot(*zip(*pts), marker="o", linestyle="-" if fam == "group" else "--",
                label=f"{op} [{fam}]")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size (instances per call)")
    ax.set_ylabel("operations / s (host operands, result on device)")
    ax.set_title(f"UniFL gpu backend: thread vs group kernels\n{label}", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())

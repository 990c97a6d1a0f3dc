"""How many instances one launch of the exponentiation kernels should carry (the wave size), for
both kernel families.

    UNIFL_GPU_WAVE=16384 python bench/bench_gpu_waves.py [--n 65536] [--kernels thread,group]

The wave size is read once per process from UNIFL_GPU_WAVE (0: the whole batch in one launch; unset:
the built-in default of the device runtime, 16,384 for both families), so bench/gpu_checks.sh runs this
script once per value.  The one-thread kernels' default was measured (docs/backends/gpu.md, "Wave size"); the
group kernels (tables in shared memory, numbers in registers) use the same default until this
script says otherwise.  Prints one line per family and op: wave, kernels, op, batch size, ops/s
(one timed repetition, host operands, result fetched).  Needs a CUDA GPU: without one it fails
(exit status 2) saying why.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys


import numpy as np

from unifl import mod_op
from unifl.core import registry
from unifl.base_op import mont_context
from unifl.bench import measure
from unifl.phe_sdk import paillier
from unifl.phe_sdk.paillier import encrypt_limbs

FAMILIES = ("thread", "group")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 16)
    ap.add_argument("--kernels", default="thread,group",
                    help="comma list of kernel families (default: thread,group)")
    args = ap.parse_args()
    fams = [f.strip() for f in args.kernels.split(",") if f.strip()]
    if not fams or any(f not in FAMILIES for f in fams):
        ap.error(f"--kernels takes a comma list of {FAMILIES}, got {args.kernels!r}")
    pr = registry.probe("gpu")
    if not pr.available:
        print(f"bench_gpu_waves: no CUDA device: backend 'gpu' is unavailable here: {pr.reason}",
              file=sys.stderr)
        return 2
    wave = os.environ.get("UNIFL_GPU_WAVE", "default")
    n = args.n
    m = secrets.randbits(2048) | (1 << 2047) | 1
    ctx = mont_context(m)
    x = ctx.to_limbs([secrets.randbelow(m) for _ in range(n)])
    e = mod_op.exp_limbs([secrets.randbits(2048) | (1 << 2047) for _ in range(n)])
    keys = {bits: paillier.keygen(bits)[0] for bits in (1024, 2048)}
    data = {bits: (pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(n)]), pk.random_r(n))
            for bits, pk in keys.items()}
    for fam in fams:
        be = registry.backend("gpu", kernels=fam)
        rate, _ = measure(lambda: len(np.asarray(mod_op.mod_exp(be, ctx, x, e))), 0.3, 1)
        print(f"wave={wave:>8}  {fam:6s}  ModExp 2048-bit        n={n:>7}  {rate:12,.0f} /s",
              flush=True)
        for bits, pk in keys.items():
            ml, rl = data[bits]
            rate, _ = measure(lambda: len(np.asarray(encrypt_limbs(be, pk, ml, r=rl))), 0.3, 1)
            print(f"wave={wave:>8}  {fam:6s}  Paillier enc {bits}-bit key n={n:>7}  {rate:12,.0f} /s",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

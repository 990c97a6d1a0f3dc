"""How many instances one launch of the exponentiation kernels should carry (the wave size).

    UNIFL_GPU_WAVE=16384 python bench/bench_gpu_waves.py [--n 65536]

The wave size is read once per process from UNIFL_GPU_WAVE (0: the whole batch in one launch; unset:
the built-in default of gpu_runtime.cu), so bench/gpu_checks.sh runs this script once per value.
Prints one line per op: wave, op, batch size, ops/s (one timed repetition, host->host).  Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import numpy as np  # noqa: E402

from unifl import mod_op  # noqa: E402
from unifl.core import registry  # noqa: E402
from unifl.base_op import mont_context  # noqa: E402
from unifl.bench import measure  # noqa: E402
from unifl.phe_sdk import paillier  # noqa: E402
from unifl.phe_sdk.paillier import encrypt_limbs  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 16)
    args = ap.parse_args()
    pr = registry.probe("gpu")
    if not pr.available:
        print(f"bench_gpu_waves: skipped, gpu unavailable: {pr.reason}")
        return 0
    be = registry.backend("gpu")
    wave = os.environ.get("UNIFL_GPU_WAVE", "default")
    n = args.n
    m = secrets.randbits(2048) | (1 << 2047) | 1
    ctx = mont_context(m)
    x = ctx.to_limbs([secrets.randbelow(m) for _ in range(n)])
    e = mod_op.exp_limbs([secrets.randbits(2048) | (1 << 2047) for _ in range(n)])
    rate, _ = measure(lambda: len(np.asarray(mod_op.mod_exp(be, ctx, x, e))), 0.3, 1)
    print(f"wave={wave:>8}  ModExp 2048-bit        n={n:>7}  {rate:12,.0f} /s")
    for bits in (1024, 2048):
        pk, _ = paillier.keygen(bits)
        ml = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(n)])
        rl = pk.random_r(n)
        rate, _ = measure(lambda: len(np.asarray(encrypt_limbs(be, pk, ml, r=rl))), 0.3, 1)
        print(f"wave={wave:>8}  Paillier enc {bits}-bit key n={n:>7}  {rate:12,.0f} /s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

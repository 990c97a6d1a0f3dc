"""The Ray executor's overhead: a party's batches on 2 Ray worker actors against native threads in
the party's own process, on the same cores, in ONE run with the rows interleaved (repetition k of
every row before repetition k+1 of any), so the ratio compares the two under the same load.

    python bench/bench_ray.py [--n 20000] [--k 10] [--bits 2048] [--reps 2] [--json F]

Rows (2048-bit key, n values):

* ``encrypt (public key)``   ``op_paillier_encrypt``: (1 + m·n)·r^n mod n², r drawn beforehand;
* ``encrypt (key owner)``    ``op_paillier_encrypt_owner`` (CRT halves; shipped to the workers with
                             ``ray.private_key_ops: workers``);
* ``matmul k x n``           X @ E(a) through the SDK (``EncryptedArray``): a k-output
                             multi-exponentiation over n ciphertexts, X integers of 24 bits;
* ``add``                    ``op_mont_mul`` mod n² of n ciphertext pairs (O3's addition): the
                             cheapest op, where shipping costs more than computing.

Each row runs on (a) ``native`` with 2 threads in this process and (b) ``executor: ray`` with a
local Ray instance (``address: null``) of 2 workers, each ``native`` with 1 thread, every op
shipped (``local_ops: []``, ``private_key_ops: workers``: what is measured is the cost of shipping
each op).  Both give the same ciphertexts (checked).  For the scale model of docs/scale.md it records, per row, the bytes
that crossed to and from the workers (counted by the executor) and the seconds the workers spent in
the op against the seconds the party waited for them (the difference is the executor's cost:
serialising, the object store, scheduling).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from typing import Any, Callable

import numpy as np

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")   # the loopback only

import unifl
from unifl.configs import PartyConfig
from unifl.core.limbs import to_limbs
from unifl.scheduler import backend_from_config


def configs(workers: int) -> dict[str, PartyConfig]:
    threads = PartyConfig.model_validate({"party": "guest", "backend": "native",
                                          "fallback": ["cpu"], "native": {"threads": workers}})
    on_ray = PartyConfig.model_validate({
        "party": "guest", "backend": "native", "fallback": ["cpu"], "native": {"threads": 1},
        "executor": "ray", "ray": {"address": None, "workers": workers, "local_ops": [],
                                   "private_key_ops": "workers", "start_timeout_s": 120}})
    return {"threads": threads, "ray": on_ray}


def workloads(bits: int, n: int, k: int) -> dict[str, Callable[[Any], tuple[Any, int]]]:
    """name -> run(backend) returning (result to compare, elements)."""
    pk, sk = unifl.keygen(bits)
    m = pk.n_ctx.to_limbs([secrets.randbelow(pk.n) for _ in range(n)])
    r = pk.n_ctx.to_limbs([secrets.randbelow(pk.n - 1) + 1 for _ in range(n)])
    mat = sk.material
    yp = to_limbs([secrets.randbelow(mat.p - 1) + 1 for _ in range(n)], mat.p_limbs)
    yq = to_limbs([secrets.randbelow(mat.q - 1) + 1 for _ in range(n)], mat.q_limbs)
    a = np.array([secrets.randbelow(2**24) - 2**23 for _ in range(n)], dtype=np.int64)
    x = np.array([[secrets.randbelow(2**24) - 2**23 for _ in range(n)] for _ in range(k)],
                 dtype=np.int64)
    enc_a = unifl.EncryptedArray.encrypt(pk, a, backend="native", private_key=sk)
    n2 = mat.public_key.nsquare_ctx
    c1 = np.ascontiguousarray(enc_a.batch.limbs, dtype=np.uint64)
    c2 = np.ascontiguousarray(np.roll(c1, 1, axis=0))

    def public(be: Any) -> tuple[Any, int]:
        return be.op_paillier_encrypt(pk.material, m, r), n

    def owner(be: Any) -> tuple[Any, int]:
        return be.op_paillier_encrypt_owner(mat, m, yp, yq), n

    def matmul(be: Any) -> tuple[Any, int]:
        return (x @ _on(enc_a, be)).batch.ciphertexts(), k * n

    def add(be: Any) -> tuple[Any, int]:
        # O3's homomorphic addition: one MontMult mod n² per element, the cheapest op there is
        return be.op_mont_mul(n2, c1, c2), n

    return {"encrypt (public key)": public, "encrypt (key owner)": owner,
            f"matmul {k} x {n}": matmul, "add (MontMult mod n^2)": add}


def _on(arr: Any, be: Any) -> Any:
    """``arr`` computing on ``be`` (an array computes on the backend its batch was made with)."""
    from unifl.phe_sdk.array import EncryptedArray
    from unifl.phe_sdk.ciphertexts import CiphertextBatch
    b = arr.batch
    return EncryptedArray._wrap(CiphertextBatch(b.public_key, b.limbs, be, b.bound), arr.shape,
                                arr.scale_bits)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    print(f"preparing {args.bits}-bit key and {args.n} values ...", flush=True)
    work = workloads(args.bits, args.n, args.k)
    cfgs = configs(args.workers)
    t0 = time.perf_counter()
    backends = {name: backend_from_config(cfg) for name, cfg in cfgs.items()}
    print(f"backends up in {time.perf_counter() - t0:.1f} s: "
          + "; ".join(f"{k}: {b.describe()}" for k, b in backends.items()), flush=True)
    best: dict[tuple[str, str], float] = {}
    pieces: dict[str, dict[str, Any]] = {}
    results: dict[str, Any] = {}
    try:
        for rep in range(args.reps):
            for row, run in work.items():
                for name, be in backends.items():
                    be.reset_counters()
                    busy0, sent0 = _busy(be), _bytes(be)
                    t = time.perf_counter()
                    out, elements = run(be)
                    secs = time.perf_counter() - t
                    sent = tuple(b - b0 for b, b0 in zip(_bytes(be), sent0))
                    rate = elements / secs
                    best[(row, name)] = max(best.get((row, name), 0.0), rate)
                    if name == "threads":
                        results[row] = out
                    elif not np.array_equal(np.asarray(results[row]), np.asarray(out)):
                        sys.exit(f"{row}: the Ray executor's result differs from threads")
                    if name == "ray":
                        pieces[row] = piece_figures(be, secs, elements, sent, _busy(be) - busy0)
                    print(f"  rep {rep + 1}/{args.reps}  {row:24s} {name:8s} {secs:8.2f} s  "
                          f"{rate:10.1f} /s", flush=True)
    finally:
        for be in backends.values():
            be.close()
    print(f"\n{'row':26s} {'threads /s':>12s} {'ray /s':>12s} {'ray/threads':>12s}")
    summary = []
    for row in work:
        th, ry = best[(row, "threads")], best[(row, "ray")]
        print(f"{row:26s} {th:12.1f} {ry:12.1f} {ry / th:12.3f}")
        summary.append({"row": row, "threads_per_s": th, "ray_per_s": ry, "ratio": ry / th,
                        **pieces.get(row, {})})
    out = {"bits": args.bits, "n": args.n, "k": args.k, "workers": args.workers,
           "cores": os.cpu_count(), "rows": summary, "driver": driver_costs(args.bits),
           "threads": "native, 2 threads, in the party's process",
           "ray": "executor: ray, local instance, 2 workers x native 1 thread"}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
        print(f"wrote {args.json}")


def driver_costs(bits: int, n: int = 20000) -> dict[str, float]:
    """Seconds per element of the host work an encryption leaves in the party's process whatever
    computes it: drawing r (public key) or y_p, y_q (key owner) with ``secrets``, as limbs."""
    pk, sk = unifl.keygen(bits)
    t = time.perf_counter()
    pk.random_r(n)
    public = (time.perf_counter() - t) / n
    mat = sk.material
    t = time.perf_counter()
    to_limbs([secrets.randbelow(mat.p - 1) + 1 for _ in range(n)], mat.p_limbs)
    to_limbs([secrets.randbelow(mat.q - 1) + 1 for _ in range(n)], mat.q_limbs)
    owner = (time.perf_counter() - t) / n
    return {"random_r_s_per_element": public, "random_ypq_s_per_element": owner}


def _busy(be: Any) -> float:
    """Seconds the Ray workers have spent in ops so far (0 for an in-process backend)."""
    proxies = getattr(be, "proxies", None)
    if not proxies:
        return 0.0
    import ray
    return float(sum(ray.get(p.actor.stats.remote())["busy_seconds"] for p in proxies))


def _bytes(be: Any) -> tuple[int, int]:
    """(array bytes shipped to the workers, result bytes fetched from them) so far."""
    proxies = getattr(be, "proxies", None)
    if not proxies:
        return 0, 0
    return be.shipper.bytes_sent, sum(p.bytes_received for p in proxies)


def piece_figures(be: Any, wall: float, elements: int, sent: tuple[int, ...],
                  busy: float) -> dict[str, Any]:
    """The last batch on the workers: its pieces, the seconds the party waited for them and the
    seconds the workers spent in the op, and the bytes that crossed each way (measured)."""
    rows = [r for r in be.report() if r["device"].startswith("ray worker")]
    calls = sum(r["calls"] for r in rows) or 1
    here = sum(r["elements"] for r in be.report() if not r["device"].startswith("ray worker"))
    return {"pieces": calls, "wall_s": wall, "worker_busy_s": busy,
            "party_wait_s": sum(r["seconds"] for r in rows), "elements": elements,
            "elements_in_party_process": here, "bytes_out": sent[0], "bytes_back": sent[1],
            "bytes_per_element": (sent[0] + sent[1]) / max(1, elements),
            "busy_s_per_element": busy / max(1, elements)}


if __name__ == "__main__":
    main()

"""Key-owner Paillier encryption: throughput of each path, measured in ONE process with every row
interleaved (repetition k of every row runs before repetition k+1 of any), so the ratios printed
compare the paths under the same machine load.

    python bench/bench_owner_encrypt.py [--bits 1024 2048] [--reps 5] [--heu-site DIR] [--json F]

Rows, per key size (fresh randomness drawn inside every timed call, ciphertexts left in the
Montgomery form the SDK keeps):

* ``phe``                  python-paillier ``raw_encrypt`` (fresh r, gmpy2): the same-run baseline;
* ``public r^n``           the fused public-key encryption (native): r^n mod n², an n-bit exponent;
* ``owner composed``       the key owner's CRT encryption composed from the lower layers on native
                           (two secret-exponent ModExps, the combine on the host): the path before
                           the fused op existed, and what a backend without the op still runs;
* ``owner fused``          ``paillier_encrypt_owner`` on native (y^p mod p², constant-time
                           ModExps): one call per batch;
* ``owner generators``     ``paillier_encrypt_owner_generator`` on native: the owner's proven
                           generators from fixed-schedule comb tables (what keys from ``keygen``
                           take on native);
* ``DJN public comb``      the DJN fixed base from the full-size comb table (mod n²), native;
* ``DJN owner CRT comb``   ``paillier_encrypt_owner_fixed_base``: combs mod p² and mod q², native;
* the two DJN rows again with native on 1 thread (``--one-thread``, default on), for a per-core
  comparison with HEU, whose pool had one thread on the 2-vCPU machine this was written on;
* on a machine where the ``gpu`` backend probes available, for each kernel family (``thread``:
  one thread per instance, ``group``: cooperative): the owner's fused kernel, its composition on
  the gpu kernels, and the public fused kernel, on one wave (``--gpu-n``); and the two DJN comb
  encryptions on the gpu (group kernels only: they have no one-thread body);
* ``HEU ZPaillier``        SecretFlow HEU's DJN encryption (``heu.numpy`` encryptor, its own thread
                           pool) when ``heu`` imports (``--heu-site`` adds its site-packages).

It also prints the device traffic of one key-owner batch on the gpu kernel bodies (the host harness
``gpu_host`` modelling device memory): kernel launches, uploads, downloads, fused vs composed.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import statistics
import sys
import time
from typing import Any, Callable

import numpy as np

import unifl
from unifl.backends.native import NativeBackend
from unifl.phe_sdk import paillier as P

GENERATOR_OP = "paillier_encrypt_owner_generator"
OWNER_OPS = {"paillier_encrypt_owner", "paillier_encrypt_owner_fixed_base", GENERATOR_OP}


class NativeYp(NativeBackend):
    """native without the generator op: the key owner's fused y^p path."""

    name = "native-yp"
    native_ops = NativeBackend.native_ops - {GENERATOR_OP}


class NativeComposed(NativeBackend):
    """native without its fused key-owner ops: the generic composition (the pre-fused path)."""

    name = "native-composed"
    native_ops = NativeBackend.native_ops - OWNER_OPS


def _native(cls: type = NativeBackend, threads: int | None = None) -> NativeBackend:
    be = cls(threads=threads) if threads else cls()
    be.probe_result = NativeBackend.probe()
    return be


def _gpu_composed(kernels: str) -> Any:
    """The gpu backend without its fused owner op (the composition on its kernels)."""
    from unifl.backends.gpu import GpuBackend

    class GpuComposed(GpuBackend):
        name = "gpu-composed"
        native_ops = GpuBackend.native_ops - OWNER_OPS
    be = GpuComposed(kernels=kernels)
    be.probe_result = GpuBackend.probe()
    return be


def _heu(site: str | None) -> tuple[Any, str]:
    """(the heu module, a version string) or (None, why not)."""
    if site:
        sys.path.append(site)
    try:
        import heu  # noqa: F401
        from heu import numpy as hnp, phe as hphe  # noqa: F401
    except ImportError as exc:
        return None, f"heu not importable: {exc}"
    version = "unknown version"
    try:
        from importlib.metadata import version as dist_version
        version = dist_version("sf-heu")
    except Exception:  # noqa: BLE001 - the version is informative only
        pass
    return heu, f"sf-heu {version}"


def _rows(bits: int, args) -> dict[str, tuple[Callable[[], None], int]]:
    """name -> (one timed call, elements it encrypts)."""
    pk, sk = unifl.keygen(bits)
    fresh = P.PrivateKey(sk.p, sk.q)             # a key object of its own for the DJN rows
    fpk = fresh.public_key
    native, composed, yp = _native(), _native(NativeComposed), _native(NativeYp)
    fpk.enable_fixed_base(backend=native)
    one = _native(threads=1)
    big = args.n or (2000 if bits <= 1024 else 400)
    small = max(20, big // 20)
    m_big = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(big)])
    m_small = m_big[:small]
    fm = fpk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(big * 4)])
    ppk = __import__("phe").PaillierPublicKey(pk.n)
    phe_ms = [secrets.randbelow(pk.n) for _ in range(small // 2)]

    def enc(be, key, m, owner=None) -> Callable[[], None]:
        return lambda: P.encrypt_limbs(be, key, m, use_pool=False, private_key=owner)

    rows: dict[str, tuple[Callable[[], None], int]] = {
        "phe": (lambda: [ppk.raw_encrypt(x) for x in phe_ms], len(phe_ms)),
        "public r^n (native)": (enc(native, pk, m_small), small),
        "owner composed (native)": (enc(composed, pk, m_small, sk), small),
        "owner fused (native)": (enc(yp, pk, m_big, sk), big),
        "owner generators (native)": (enc(native, pk, m_big, sk), big),
        "DJN public comb (native)": (enc(native, fpk, fm), len(fm)),
        "DJN owner CRT comb (native)": (enc(native, fpk, fm, fresh), len(fm)),
    }
    if args.one_thread:
        rows["DJN public comb (native, 1 thread)"] = (enc(one, fpk, fm[:big]), big)
        rows["DJN owner CRT comb (native, 1 thread)"] = (enc(one, fpk, fm[:big], fresh), big)
    if args.gpu:
        mg = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(args.gpu_n)])
        for fam in ("thread", "group"):
            gpu = unifl.backend("gpu", kernels=fam)
            rows[f"owner fused (gpu {fam})"] = (enc(gpu, pk, mg, sk), args.gpu_n)
            rows[f"owner composed (gpu {fam})"] = (enc(_gpu_composed(fam), pk, mg, sk), args.gpu_n)
            rows[f"public r^n (gpu {fam})"] = (enc(gpu, pk, mg), args.gpu_n)
        gpu = unifl.backend("gpu", kernels="group")
        fmg = fpk.plaintext_limbs([secrets.randbelow(fpk.n) for _ in range(args.gpu_n)])
        rows["DJN public comb (gpu group)"] = (enc(gpu, fpk, fmg), args.gpu_n)
        rows["DJN owner CRT comb (gpu group)"] = (enc(gpu, fpk, fmg, fresh), args.gpu_n)
    if args.heu_module is not None:
        from heu import numpy as hnp, phe as hphe
        kit = hnp.setup(hphe.SchemaType.ZPaillier, bits)
        encoder = kit.integer_encoder(scale=1)
        arr = kit.array(np.array([secrets.randbits(62) for _ in range(len(fm))], dtype=np.int64),
                        encoder)
        encryptor = kit.encryptor()
        rows["HEU ZPaillier"] = (lambda: encryptor.encrypt(arr), len(fm))
    # warm-up: tables, contexts, C++ key objects, thread pools
    for fn, _ in rows.values():
        fn()
    return rows


def _measure(rows: dict[str, tuple[Callable[[], None], int]], reps: int) -> dict[str, list[float]]:
    rates: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(reps):
        for name, (fn, count) in rows.items():
            t = time.perf_counter()
            fn()
            rates[name].append(count / (time.perf_counter() - t))
    return rates


def _traffic(bits: int) -> dict[str, dict[str, int]]:
    """Launches / uploads / downloads of one 64-element key-owner batch on the gpu kernel bodies
    (host harness in its device-memory model), fused vs composed."""
    from unifl.backends.gpu.host import GpuHostBackend

    class Composed(GpuHostBackend):
        name = "gpu_host-composed"
        native_ops = GpuHostBackend.native_ops - OWNER_OPS

    pk, sk = unifl.keygen(bits)
    m = pk.plaintext_limbs([secrets.randbelow(pk.n) for _ in range(64)])
    out = {}
    for cls in (GpuHostBackend, Composed):
        be = cls(threads=2, resident=True)
        be.probe_result = GpuHostBackend.probe()
        P.encrypt_limbs(be, pk, m[:2], use_pool=False, private_key=sk)
        before = be.engine.counters()
        P.encrypt_limbs(be, pk, m, use_pool=False, private_key=sk)
        after = be.engine.counters()
        out["fused" if cls is GpuHostBackend else "composed"] = {
            k: after[k] - before[k] for k in before}
    return out


RATIOS = [
    ("owner generators (native)", "owner fused (native)"),
    ("owner generators (native)", "phe"),
    ("owner generators (native)", "DJN owner CRT comb (native)"),
    ("owner fused (native)", "owner composed (native)"),
    ("owner fused (native)", "phe"),
    ("owner fused (native)", "public r^n (native)"),
    ("DJN owner CRT comb (native)", "DJN public comb (native)"),
    ("DJN owner CRT comb (native, 1 thread)", "DJN public comb (native, 1 thread)"),
    ("DJN public comb (native)", "HEU ZPaillier"),
    ("DJN owner CRT comb (native)", "HEU ZPaillier"),
    ("DJN public comb (native, 1 thread)", "HEU ZPaillier"),
    ("DJN owner CRT comb (native, 1 thread)", "HEU ZPaillier"),
    ("DJN owner CRT comb (native)", "phe"),
    ("owner fused (gpu thread)", "owner composed (gpu thread)"),
    ("owner fused (gpu group)", "owner composed (gpu group)"),
    ("owner fused (gpu group)", "owner fused (gpu thread)"),
    ("public r^n (gpu group)", "public r^n (gpu thread)"),
    ("owner fused (gpu group)", "public r^n (gpu group)"),
    ("owner fused (gpu thread)", "owner fused (native)"),
    ("owner fused (gpu group)", "owner fused (native)"),
    ("DJN owner CRT comb (gpu group)", "DJN public comb (gpu group)"),
    ("DJN owner CRT comb (gpu group)", "DJN owner CRT comb (native)"),
]


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bits", type=int, nargs="+", default=[1024, 2048])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--n", type=int, default=0,
                    help="batch size of the fast rows (default by key size)")
    ap.add_argument("--heu-site", default=None,
                    help="a site-packages holding sf-heu, appended to sys.path")
    ap.add_argument("--no-one-thread", dest="one_thread", action="store_false")
    ap.add_argument("--no-traffic", dest="traffic", action="store_false")
    ap.add_argument("--gpu-n", type=int, default=16384,
                    help="batch of the gpu rows (one wave); the rows run, for both kernel "
                         "families, when gpu probes available")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from unifl.core import registry
    gpu_probe = registry.probe("gpu")
    args.gpu = gpu_probe.available
    args.heu_module, heu_note = _heu(args.heu_site)
    native = _native()
    report: dict[str, Any] = {
        "cpu_count": os.cpu_count(), "native_threads": native.threads, "heu": heu_note,
        "load_average": os.getloadavg(), "sizes": {}}
    report["gpu"] = gpu_probe.devices if args.gpu else f"no gpu rows: {gpu_probe.reason}"
    print(f"native threads: {native.threads}; cpus: {os.cpu_count()}; HEU: {heu_note}; "
          f"gpu: {report['gpu']}; load average {report['load_average'][0]:.2f}")
    for bits in args.bits:
        rows = _rows(bits, args)
        rates = _measure(rows, args.reps)
        med = {k: statistics.median(v) for k, v in rates.items()}
        print(f"\n{bits}-bit key: encryptions per second (median of {args.reps}; min..max)")
        for name, v in rates.items():
            print(f"  {name:42s} {med[name]:>10.1f}   ({min(v):.1f}..{max(v):.1f})")
        ratios = {f"{a} / {b}": med[a] / med[b] for a, b in RATIOS if a in med and b in med}
        print("  ratios (medians):")
        for k, v in ratios.items():
            print(f"    {k:84s} {v:6.2f}x")
        entry: dict[str, Any] = {"rates": rates, "median": med, "ratios": ratios}
        if args.traffic:
            entry["gpu_traffic_per_batch"] = _traffic(bits)
            print(f"  gpu kernel bodies (host harness, device-memory model), one key-owner batch: "
                  f"{entry['gpu_traffic_per_batch']}")
        report["sizes"][bits] = entry
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=1)
    return report


if __name__ == "__main__":
    main()

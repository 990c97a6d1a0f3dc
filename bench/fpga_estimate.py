#!/usr/bin/env python3
"""Paillier throughput of the RTL MontMult engine on a card: an ESTIMATE, never a measurement.

Inputs, each from something that ran here:
  * cycles: the engine's initiation interval, (D-1)·max(D, PQ) + max(D, 2·LQ+1) cycles per
    MontMult, from its stage counts -- the formula tests/test_fpga_rtl.py checks against the
    cocotb simulation of rtl/unifl_mm_engine.v (271 cycles at 1024 bits, 1024 at 2048);
  * resources per engine: yosys synthesis (bench/fpga_synth.py --json, or the figures pinned in
    tests/test_fpga_synth.py when no JSON is given);
  * device sizes: the vendors' selection guides (below);
and two stated assumptions: the clock (250 MHz by default, from the synthesized netlist's
register-to-register walk: docs/fpga.md) and a 25 % shell reserve of every resource (PCIe DMA,
memory controllers, the operand loaders, routing headroom).  Reaching one MontMult per interval
needs two independent exponentiations in flight per engine (the engine's two operand banks): a
batch gives that; one ModExp alone waits for each result.

    python bench/fpga_estimate.py [--synth synth.json] [--mhz 250] [--json out.json] [--plot out.png]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

TA, TB = 26, 17          # DSP tile of the engine (rtl/unifl_mm_engine.v parameters)

#: device resources: AMD UltraScale+ selection guide (VU13P); Intel Stratix 10 GX/SX device
#: overview (GX 2800: 933,120 ALMs, 3,732,480 registers, 5,760 variable-precision DSP blocks)
DEVICES = {
    "VU13P": {"family": "xcup", "dsp": 12288, "lut_sites": 1_728_000, "ff": 3_456_000},
    "Stratix 10 GX 2800": {"family": "cyclone10gx", "dsp": 5760, "alm": 933_120,
                           "ff": 3_732_480},
}
#: published figures to compare against (quoted, not ours): FLASH on a VU13P, 1024-bit key;
#: UniFL's D5005 (Stratix 10 SX 2800), its Table 2
PUBLISHED = {"FLASH (VU13P)": {"enc": 40_700, "dec": 107_700},
             "UniFL paper (D5005)": {"enc": 1_488, "dec": None}}
#: per-engine figures pinned by tests/test_fpga_synth.py (xcup, 1024 bits), used without --synth
PINNED = {("xcup", 1024): {"dsp": 31, "lut_sites": 2376, "ff": 4876}}


def _clog2(v: int) -> int:
    return max(0, (v - 1).bit_length())


def interval_cycles(d: int, w: int = 64) -> int:
    """Cycles between the starts of back-to-back MontMults of one engine with D words of W bits."""
    na, nb = -(-w // TA), -(-w // TB)
    st = 3 + _clog2(na * nb + 1)
    lq = 3 + _clog2(sum(1 for a in range(na) for b in range(nb) if a * TA + b * TB < w))
    return (d - 1) * max(d, st + 4 + lq) + max(d, 2 * lq + 1)


def encrypt_montmults(key_bits: int = 1024, w: int = 6) -> float:
    """MontMults (at 2·key_bits) of one Paillier encryption (1 + m·n)·r^n mod n² with fixed w-bit
    windows: r into the Montgomery domain, 2^w - 2 table products, the squarings, a product per
    non-zero window after the first (expected (2^w-1)/2^w of them), then one product by 1 + m·n
    and one out of the domain."""
    windows = math.ceil(key_bits / w)
    return 1 + (2 ** w - 2) + (windows - 1) * (w + (2 ** w - 1) / 2 ** w) + 2


def decrypt_montmults(key_bits: int = 1024, w: int = 4) -> float:
    """MontMults (at key_bits) of one CRT decryption: c^(p-1) mod p² and c^(q-1) mod q², each a
    fixed-schedule ladder (a product at every window: no data-dependent skip)."""
    half = key_bits // 2
    windows = math.ceil(half / w)
    return 2 * (1 + (2 ** w - 2) + (windows - 1) * (w + 1) + 1)


def engines(device: str, per_engine: dict[str, float], reserve: float = 0.25
            ) -> tuple[int, str, dict[str, float]]:
    """Engines that fit ``device`` after the reserve, the binding resource, and every ratio."""
    dev = DEVICES[device]
    ratios = {k: dev[k] / per_engine[k] for k in dev if k != "family" and per_engine.get(k)}
    bind = min(ratios, key=ratios.__getitem__)
    return int((1 - reserve) * ratios[bind]), bind, ratios


def estimate(per_engine: dict[tuple[str, int], dict[str, float]], mhz: float = 250.0,
             reserve: float = 0.25, key_bits: int = 1024) -> list[dict[str, Any]]:
    rows = []
    hz = mhz * 1e6
    for device, dev in DEVICES.items():
        fam = dev["family"]
        if (fam, key_bits) not in per_engine or (fam, 2 * key_bits) not in per_engine:
            continue
        n_dec, bind_dec, _ = engines(device, per_engine[(fam, key_bits)], reserve)
        n_enc, bind_enc, _ = engines(device, per_engine[(fam, 2 * key_bits)], reserve)
        c_dec = interval_cycles(key_bits // 64)
        c_enc = interval_cycles(2 * key_bits // 64)
        rows.append({
            "device": device, "mhz": mhz, "reserve": reserve,
            "engines_1024": n_dec, "binding_1024": bind_dec,
            "engines_2048": n_enc, "binding_2048": bind_enc,
            "cycles_1024": c_dec, "cycles_2048": c_enc,
            "montmult_per_s_1024": n_dec * hz / c_dec,
            "montmult_per_s_2048": n_enc * hz / c_enc,
            "enc_per_s": n_enc * hz / c_enc / encrypt_montmults(key_bits),
            "dec_per_s": n_dec * hz / c_dec / decrypt_montmults(key_bits),
        })
    return rows


def per_engine_from_synth(path: Path | None) -> dict[tuple[str, int], dict[str, float]]:
    if path is None:
        return dict(PINNED)
    out: dict[tuple[str, int], dict[str, float]] = {}
    for r in json.loads(path.read_text())["results"]:
        fig = {"dsp": float(r["dsp"]), "ff": float(r["ff"])}
        if r["family"] == "xcup":
            fig["lut_sites"] = float(r["lut_sites"])
        else:
            fig["alm"] = float(r["alm_est"])
        out[(r["family"], r["bits"])] = fig
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--synth", type=Path, help="bench/fpga_synth.py --json output")
    ap.add_argument("--mhz", type=float, default=250.0, help="stated clock (default 250)")
    ap.add_argument("--reserve", type=float, default=0.25, help="shell reserve (default 0.25)")
    ap.add_argument("--json", type=Path, help="write the rows as JSON")
    ap.add_argument("--plot", type=Path, help="bar chart of enc/s and dec/s against FLASH")
    args = ap.parse_args(argv)
    if not 0 <= args.reserve < 1 or args.mhz <= 0:
        ap.error("--reserve must be in [0, 1) and --mhz > 0")
    per = per_engine_from_synth(args.synth)
    rows = estimate(per, args.mhz, args.reserve)
    if not rows:
        print("no device has both 1024- and 2048-bit figures (pass --synth with both sizes)",
              file=sys.stderr)
        return 2
    print(f"ESTIMATE (nothing here ran on an FPGA): {args.mhz:.0f} MHz stated, "
          f"{args.reserve:.0%} shell reserve, Paillier with a 1024-bit key; "
          f"{encrypt_montmults():.0f} MontMults (2048-bit) per encryption, "
          f"{decrypt_montmults():.0f} (1024-bit) per CRT decryption")
    print("| device | engines (1024 / 2048-bit) | cycles per MontMult | enc/s | dec/s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['device']} | {r['engines_1024']} ({r['binding_1024']}) / "
              f"{r['engines_2048']} ({r['binding_2048']}) | {r['cycles_1024']} / "
              f"{r['cycles_2048']} | {r['enc_per_s']:,.0f} | {r['dec_per_s']:,.0f} |")
    for name, p in PUBLISHED.items():
        dec = f"{p['dec']:,}" if p["dec"] else "—"
        print(f"| {name} (published) | | | {p['enc']:,} | {dec} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"rows": rows, "published": PUBLISHED,
                                         "enc_montmults": encrypt_montmults(),
                                         "dec_montmults": decrypt_montmults()}, indent=1))
    if args.plot:
        import matplotlib  # noqa: PLC0415 - only for --plot
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
        names = [f"UniFL RTL\n{r['device']}\n(estimate)" for r in rows] + \
                [f"{n}\n(published)" for n in PUBLISHED]
        enc = [r["enc_per_s"] for r in rows] + [p["enc"] for p in PUBLISHED.values()]
        dec = [r["dec_per_s"] for r in rows] + [p["dec"] or 0 for p in PUBLISHED.values()]
        fig, ax = plt.subplots(figsize=(8, 4))
        xs = range(len(names))
        ax.bar([x - 0.2 for x in xs], enc, 0.4, label="encryptions/s")
        ax.bar([x + 0.2 for x in xs], dec, 0.4, label="decryptions/s")
        ax.set_xticks(list(xs), names, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("per second, 1024-bit key (log)")
        ax.set_title(f"Paillier on one card: RTL estimate at {args.mhz:.0f} MHz vs published")
        ax.legend()
        fig.tight_layout()
        args.plot.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())

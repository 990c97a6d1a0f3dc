"""Paillier throughput of the exponentiation unit on a card: an ESTIMATE, never a measurement.

Inputs, each from something that ran here:

* cycles per MontMult: the engine's initiation interval, (D-1)·max(D, PQ) + max(D, 2·LQ+1)
  (:func:`interval_cycles`; ``tests/backends/fpga/test_rtl_engine.py`` checks it against the cocotb simulation of
  ``rtl/unifl_mm_engine.v``: 271 cycles at 1024 bits, 1,024 at 2048, 4,096 at 4096);
* MontMults per operation: the unit's fixed schedule (:func:`job_montmults`: entry, table,
  K squarings and one product per window, exit; ``tests/backends/fpga/test_rtl_modexp.py`` checks it
  against the MontMults the simulated unit issues), and the measured fact that with two
  exponentiations per engine the engine starts one every interval;
* resources per engine: yosys synthesis of ``unifl_modexp`` with one engine -- the engine plus the
  unit's own share, so every engine brings its window tables, sequencer and RAM
  (``python -m tools.fpga.synth --design unit --json``, or the figures pinned below);
* device sizes: the vendors' selection guides (``DEVICES``);

and stated assumptions: the clock (250 MHz, capped per size by the slow bound of the synthesized
unit's register-to-register walk on UltraScale+ -- 171 MHz for the 4096-bit unit of a 2048-bit
key's encryption, whose larger RAMs yosys puts in block RAM on the path; the Intel rows take the
same clock, carried over, not derived), a 25 % shell reserve of every resource (PCIe DMA, memory controllers, the
wrappers, routing headroom), and the card's bandwidths (``MEMORY``, ``PCIE``).

What must cross: with the exponentiation on the card only the operands and results of whole
operations move (:func:`bytes_per_op`): an encryption reads m and r (n-sized) and writes c
(n²-sized); a CRT decryption reads c mod p² and c mod q² with the exponents p-1 and q-1 and writes
the two ladder results (the host reduces c and finishes L, h and the CRT).  Each byte crosses PCIe
once and card memory twice (the DMA writes it, the kernel reads it; the kernel writes a result,
the DMA reads it).  The rate is the least of the compute, memory and PCIe bounds.  For contrast,
the MontMult-only kernel (the host drives the ladder, one launch per MontMult) moves two operands
in and one result out per MontMult.

    python -m tools.fpga.estimate [--synth unit.json] [--mhz 250] [--json out.json] [--plot out.png]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

TA, TB = 26, 17          # DSP tile of the engine (rtl/unifl_mm_engine.v parameters)
WINDOW = 4               # the unit's fixed window (rtl/unifl_modexp.v parameter K)

#: device resources: AMD UltraScale+ selection guide (VU13P: 12,288 DSP48E2, 1,728k LUTs, 3,456k
#: flip-flops, 94.5 Mb of block RAM = 2,688 RAMB36); Intel Stratix 10 GX/SX device overview (GX
#: 2800: 933,120 ALMs, 3,732,480 registers, 5,760 variable-precision DSP blocks, 11,721 M20K)
DEVICES: dict[str, dict[str, Any]] = {
    "VU13P": {"family": "xcup", "dsp": 12288, "lut_sites": 1_728_000, "ff": 3_456_000,
              "bram": 2688},
    "Stratix 10 GX 2800": {"family": "cyclone10gx", "dsp": 5760, "alm": 933_120,
                           "ff": 3_732_480, "bram": 11_721},
}
#: card memory, GB/s (stated assumptions): four DDR4-2400 channels of 64 bits (19.2 GB/s each, the
#: VU13P boards FLASH-class designs use); HBM2 on an HBM card of the same fabric class (Alveo
#: U280 / U55C: 460 GB/s; Stratix 10 MX: 512 GB/s -- 460 is taken for both)
MEMORY = {"DDR4 x4": 76.8, "HBM2": 460.0}
#: PCIe Gen3 x16 (FLASH's card), GB/s per direction after protocol overhead (assumption: 12 of
#: the 15.75 raw)
PCIE = 12.0
#: published figures to compare against (quoted, not ours): FLASH on a VU13P (its Table 2),
#: operations per second by key size; UniFL's D5005 (Stratix 10 SX 2800, its Table 2)
PUBLISHED: dict[str, dict[int, dict[str, int | None]]] = {
    "FLASH (VU13P)": {1024: {"enc": 40_706, "dec": 107_707},
                               2048: {"enc": 6_033, "dec": 19_373}},
    "UniFL (D5005)": {1024: {"enc": 1_488, "dec": None}}}
#: per-engine figures of unifl_modexp with one engine and two key contexts (yosys 0.23, pinned by
#: tests/tools/test_fpga_synth.py; `python -m tools.fpga.synth --design unit` reproduces them), used
#: without --synth
PINNED: dict[tuple[str, int], dict[str, float]] = {
    ("xcup", 1024): {"dsp": 31, "lut_sites": 2973, "ff": 5015, "bram": 2, "mhz_walk": 247},
    ("xcup", 2048): {"dsp": 31, "lut_sites": 3269, "ff": 5034, "bram": 4, "mhz_walk": 247},
    ("xcup", 4096): {"dsp": 31, "lut_sites": 3544, "ff": 4861, "bram": 11, "mhz_walk": 171},
    ("cyclone10gx", 1024): {"dsp": 27.5, "alm": 2394, "ff": 5694, "bram": 0},
    ("cyclone10gx", 2048): {"dsp": 27.5, "alm": 2600, "ff": 5650, "bram": 0},
    ("cyclone10gx", 4096): {"dsp": 27.5, "alm": 3101, "ff": 5669, "bram": 0},
}


def _clog2(v: int) -> int:
    return max(0, (v - 1).bit_length())


def interval_cycles(d: int, w: int = 64) -> int:
    """Cycles between the starts of back-to-back MontMults of one engine with D words of W bits."""
    na, nb = -(-w // TA), -(-w // TB)
    st = 3 + _clog2(na * nb + 1)
    lq = 3 + _clog2(sum(1 for a in range(na) for b in range(nb) if a * TA + b * TB < w))
    return (d - 1) * max(d, st + 4 + lq) + max(d, 2 * lq + 1)


def job_montmults(nwin: int, k: int = WINDOW, enc: bool = False, montgomery_out: bool = False
                  ) -> int:
    """MontMults of one job of the unit: entry, 2^k - 2 table products, k squarings and one
    product per window after the first, exit; an encryption adds G = m·n + 1 and, for a
    Montgomery-form result, G·R."""
    extra = (1 + (1 if montgomery_out else 0)) if enc else 0
    return 1 + extra + (2 ** k - 2) + (max(nwin, 1) - 1) * (k + 1) + 1


def encrypt_montmults(key_bits: int, k: int = WINDOW) -> int:
    """MontMults (modulo n², 2·key_bits) of one encryption (1 + m·n)·r^n mod n², exponent n."""
    return job_montmults(math.ceil(key_bits / k), k, enc=True, montgomery_out=True)


def decrypt_montmults(key_bits: int, k: int = WINDOW) -> int:
    """MontMults (modulo p² and q², key_bits each) of one CRT decryption: two ladders over
    half-size exponents p-1 and q-1."""
    return 2 * job_montmults(math.ceil(key_bits / 2 / k), k)


def bytes_per_op(op: str, key_bits: int) -> tuple[int, int]:
    """(bytes in, bytes out) of one operation with the exponentiation on the card."""
    nb = key_bits // 8
    if op == "enc":
        return 2 * nb, 2 * nb              # m, r in; c (n²-sized) out; the exponent n once a batch
    return 2 * nb + nb, 2 * nb             # c mod p², c mod q², p-1 and q-1 in; x_p, x_q out


def montmult_only_bytes(op: str, key_bits: int) -> tuple[int, int]:
    """(bytes in, bytes out) per operation when the card runs MontMults only and the host drives
    the ladder: two operands in and one result out per MontMult."""
    mm = encrypt_montmults(key_bits) if op == "enc" else decrypt_montmults(key_bits)
    size = 2 * key_bits // 8 if op == "enc" else key_bits // 8
    return 2 * size * mm, size * mm


@dataclass
class Row:
    device: str
    key_bits: int
    memory: str
    mhz_enc: float
    mhz_dec: float
    engines_enc: int
    engines_dec: int
    binding_enc: str
    binding_dec: str
    cycles_enc: int
    cycles_dec: int
    montmults_enc: int
    montmults_dec: int
    compute_enc: float
    compute_dec: float
    memory_enc: float
    memory_dec: float
    pcie_enc: float
    pcie_dec: float
    enc_per_s: float
    dec_per_s: float
    montmult_only_enc: float
    montmult_only_dec: float


def engines(device: str, per_engine: dict[str, float], reserve: float = 0.25
            ) -> tuple[int, str, dict[str, float]]:
    """Engines (each with its unit share) that fit ``device`` after the reserve, the binding
    resource, and every ratio."""
    dev = DEVICES[device]
    ratios = {k: float(dev[k]) / per_engine[k] for k in dev
              if k != "family" and per_engine.get(k)}
    bind = min(ratios, key=ratios.__getitem__)
    return int((1 - reserve) * ratios[bind]), bind, ratios


def bounds(rate_compute: float, io: tuple[int, int], memory_gbs: float
           ) -> tuple[float, float, float]:
    """(compute, memory, PCIe) bounds in operations per second for an operation moving ``io``."""
    bin_, bout = io
    mem = memory_gbs * 1e9 / (2 * (bin_ + bout))
    pcie = PCIE * 1e9 / max(bin_, bout)
    return rate_compute, mem, pcie


def estimate(per_engine: dict[tuple[str, int], dict[str, float]], mhz: float = 250.0,
             reserve: float = 0.25) -> list[Row]:
    rows = []

    def clock(bits: int) -> float:
        walk = per_engine.get(("xcup", bits), {}).get("mhz_walk")
        return min(mhz, walk) if walk else mhz
    for device, dev in DEVICES.items():
        fam = str(dev["family"])
        for key in (1024, 2048):
            if (fam, 2 * key) not in per_engine or (fam, key) not in per_engine:
                continue
            n_enc, b_enc, _ = engines(device, per_engine[(fam, 2 * key)], reserve)
            n_dec, b_dec, _ = engines(device, per_engine[(fam, key)], reserve)
            c_enc, c_dec = interval_cycles(2 * key // 64), interval_cycles(key // 64)
            m_enc, m_dec = encrypt_montmults(key), decrypt_montmults(key)
            f_enc, f_dec = clock(2 * key), clock(key)
            r_enc = n_enc * f_enc * 1e6 / (c_enc * m_enc)
            r_dec = n_dec * f_dec * 1e6 / (c_dec * m_dec)
            for mem_name, gbs in MEMORY.items():
                ce, me, pe = bounds(r_enc, bytes_per_op("enc", key), gbs)
                cd, md, pd = bounds(r_dec, bytes_per_op("dec", key), gbs)
                oe = min(bounds(r_enc, montmult_only_bytes("enc", key), gbs))
                od = min(bounds(r_dec, montmult_only_bytes("dec", key), gbs))
                rows.append(Row(device, key, mem_name, f_enc, f_dec, n_enc, n_dec, b_enc, b_dec, c_enc,
                                c_dec, m_enc, m_dec, ce, cd, me, md, pe, pd, min(ce, me, pe),
                                min(cd, md, pd), oe, od))
    return rows


def per_engine_from_synth(paths: list[Path]) -> dict[tuple[str, int], dict[str, float]]:
    """Per-engine figures from ``tools.fpga.synth --json`` files: the one-engine unit's totals
    (engine plus the unit's own share) by (family, bits)."""
    if not paths:
        return dict(PINNED)
    out: dict[tuple[str, int], dict[str, float]] = {}
    for path in paths:
        for r in json.loads(path.read_text())["results"]:
            if r.get("design") != "unit" or r.get("engines") != 1:
                continue
            fig = {"dsp": float(r["dsp"]), "ff": float(r["ff"]), "bram": float(r["bram"])}
            if r["family"] == "xcup":
                fig["lut_sites"] = float(r["lut_sites"])
                fig["mhz_walk"] = float(r["path"]["fmax_mhz"][0])
            else:
                fig["alm"] = float(r["alm_est"])
            out[(r["family"], r["bits"])] = fig
    return out


def table(rows: list[Row]) -> str:
    out = ["| device | key | memory | engines enc / dec (binding) | MHz enc / dec | enc/s "
           "(compute · memory · PCIe bound) | dec/s (compute · memory · PCIe bound) | "
           "MontMult-only kernel enc/s, dec/s |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(
            f"| {r.device} | {r.key_bits} | {r.memory} | {r.engines_enc} / {r.engines_dec} "
            f"({r.binding_enc}) | {r.mhz_enc:g} / {r.mhz_dec:g} | "
            f"**{r.enc_per_s:,.0f}** ({r.compute_enc:,.0f} · "
            f"{r.memory_enc:,.0f} · {r.pcie_enc:,.0f}) | **{r.dec_per_s:,.0f}** "
            f"({r.compute_dec:,.0f} · {r.memory_dec:,.0f} · {r.pcie_dec:,.0f}) | "
            f"{r.montmult_only_enc:,.0f}, {r.montmult_only_dec:,.0f} |")
    for name, p in PUBLISHED.items():
        for key, v in p.items():
            dec = f"{v['dec']:,}" if v["dec"] else "—"
            out.append(f"| {name} (published) | {key} | | | | {v['enc'] or 0:,} | {dec} | |")
    return "\n".join(out)


def plot(rows: list[Row], path: Path, mhz: float) -> None:
    import matplotlib  # noqa: PLC0415 - only for --plot
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, key in zip(axes, (1024, 2048)):
        sel = [r for r in rows if r.key_bits == key and r.memory == "DDR4 x4"]
        names = [f"unifl_modexp\n{r.device}\n(estimate)" for r in sel]
        enc = [r.enc_per_s for r in sel]
        dec = [r.dec_per_s for r in sel]
        names += [f"MontMult-only\n{r.device}\n(estimate)" for r in sel]
        enc += [r.montmult_only_enc for r in sel]
        dec += [r.montmult_only_dec for r in sel]
        for name, p in PUBLISHED.items():
            if key in p:
                names.append(f"{name}\n(published)")
                enc.append(float(p[key]["enc"] or 0))
                dec.append(float(p[key]["dec"] or 0))
        xs = list(range(len(names)))
        ax.bar([x - 0.2 for x in xs], enc, 0.4, label="encryptions/s")
        ax.bar([x + 0.2 for x in xs], dec, 0.4, label="decryptions/s")
        ax.set_xticks(xs, names, fontsize=6.5)
        ax.set_yscale("log")
        ax.set_title(f"{key}-bit key")
        ax.set_ylabel("per second (log)")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Paillier on one card (DDR4): unifl_modexp ESTIMATE at <= {mhz:.0f} MHz vs "
                 "published")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--synth", type=Path, action="append", default=[],
                    help="tools.fpga.synth --json output with one-engine unit figures (repeatable)")
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
        print("no device has figures for both n and n² sizes of a key (pass --synth with the "
              "unit at 1024, 2048 and 4096 bits)", file=sys.stderr)
        return 2
    print(f"ESTIMATE (nothing here ran on an FPGA): {args.mhz:.0f} MHz stated (capped by the walk), "
          f"{args.reserve:.0%} shell reserve, PCIe {PCIE:g} GB/s per direction; MontMults per "
          f"encryption {encrypt_montmults(1024)} (1024-bit key) / {encrypt_montmults(2048)} "
          f"(2048), per CRT decryption {decrypt_montmults(1024)} / {decrypt_montmults(2048)}")
    print(table(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(
            {"rows": [asdict(r) for r in rows], "memory_gbs": MEMORY, "pcie_gbs": PCIE,
             "published": {k: {str(b): v for b, v in p.items()} for k, p in PUBLISHED.items()},
             "per_engine": {f"{f}:{b}": v for (f, b), v in per.items()}}, indent=1))
    if args.plot:
        plot(rows, args.plot, args.mhz)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The scale model of docs/scale.md: a party's projected throughput on a Ray cluster, from what
bench/bench_ray.py measured on this machine.  Every input is a measurement, and every output is a
projection; the two are never mixed up in the output.

    python -m tools.scale_model /tmp/ray_overhead.json [--plot docs/scale_model.png]

Inputs per op (from the bench's JSON, 2 workers of 1 core each, on the 2 cores of this machine):
  b  worker-core seconds per element (the workers' time in the op / elements);
  o  the executor's cost per piece (the party's wait for its pieces minus the workers' time in
     the op, per piece): serialising, the object store, scheduling;
  B  bytes per element that crossed between the party's process and the workers (both ways);
  d  the host work that stays in the party's process per element (drawing r or y_p, y_q with
     ``secrets``), measured here by bench_ray.driver_costs.
For the GPU party, b comes from the H100 figures measured earlier (docs/backends/gpu.md); they are per
GPU at full waves (>= 16,384 instances per call).

Model for W workers and a batch of N elements: the pieces run side by side, so a batch takes
N·b/W + o, and the throughput is the least of
  compute   N / (N·b/W + o)
  link      L / B            (L: the party process's network link, 10 or 25 Gbit/s)
  driver    1 / d            (one thread of the party's process drawing the randomness)
What this leaves out (and so over-estimates): contention among the W submissions of one batch in
the party's process, the object store's copy rate on the party's node, stragglers.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

#: measured on one H100 (docs/backends/gpu.md), per GPU, host->host, full waves
H100_PER_S = {"encrypt (public key)": 18.7e3, "add (MontMult mod n^2)": 5.1e6}
LINKS_GBIT = (10.0, 25.0)


def load(path: str) -> dict[str, Any]:
    """bench_ray's JSON; it must carry the driver costs that bench measures (``"driver"``)."""
    with open(path) as f:
        data: dict[str, Any] = json.load(f)
    missing = [k for k in ("driver", "rows", "workers", "bits", "n") if k not in data]
    if missing:
        raise SystemExit(f"{path}: no {', '.join(missing)} -- not a bench/bench_ray.py --json "
                         "output of this version (it records the driver costs the model needs)")
    return data


def inputs(row: dict[str, Any], driver: dict[str, float]) -> dict[str, float]:
    pieces = max(1, int(row["pieces"]))
    b = float(row["busy_s_per_element"])
    o = max(0.0, (float(row["party_wait_s"]) - float(row["worker_busy_s"])) / pieces)
    d = 0.0
    if row["row"] == "encrypt (public key)":
        d = driver["random_r_s_per_element"]
    elif row["row"] == "encrypt (key owner)":
        d = driver["random_ypq_s_per_element"]
    return {"b": b, "o": o, "B": float(row["bytes_per_element"]), "d": d}


def project(x: dict[str, float], workers: int, n: int, link_gbit: float) -> tuple[float, str]:
    """(elements/s, the bound that sets it)."""
    caps = {"compute": n / (n * x["b"] / workers + x["o"]),
            "link": link_gbit * 1e9 / 8 / x["B"] if x["B"] else float("inf"),
            "driver": 1.0 / x["d"] if x["d"] else float("inf")}
    which = min(caps, key=lambda k: caps[k])
    return caps[which], which


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json")
    ap.add_argument("--plot", default=None)
    args = ap.parse_args()
    data = load(args.json)
    driver = data["driver"]
    print(f"measured here: {data['workers']} Ray workers x 1 core, {data['bits']}-bit key, "
          f"batch {data['n']}; driver r {driver['random_r_s_per_element'] * 1e6:.1f} us/element, "
          f"y_p,y_q {driver['random_ypq_s_per_element'] * 1e6:.1f} us/element")
    print("\n| op | b (core-s/elem) | o (s/piece) | B (bytes/elem) | measured 2 workers /s | "
          "8 x 64 cores, N=20k | 8 x 64 cores, N=1M | 8 x H100, N=1M |")
    print("|---|---|---|---|---|---|---|---|")
    model: dict[str, Any] = {}
    for row in data["rows"]:
        base = inputs(row, driver)
        cells = []
        for workers, n, per in ((512, 20_000, None), (512, 1_000_000, None),
                                (8, 1_000_000, H100_PER_S.get(row["row"]))):
            x = base
            if workers == 8:
                if per is None:
                    cells.append("no GPU figure")
                    continue
                x = {**base, "b": 1.0 / per}
            rate, bound = project(x, workers, n, LINKS_GBIT[1])
            rate10, _ = project(x, workers, n, LINKS_GBIT[0])
            note = f"; {rate10:,.0f}/s at 10 Gbit/s" if rate10 < rate * 0.99 else ""
            cells.append(f"{rate:,.0f}/s ({bound}{note})")
            model.setdefault(row["row"], []).append({"workers": workers, "n": n,
                                                     "per_s": rate, "bound": bound})
        print(f"| {row['row']} | {base['b']:.3g} | {base['o']:.3g} | {base['B']:.0f} | "
              f"{row['ray_per_s']:,.0f} | " + " | ".join(cells) + " |")
    if args.plot:
        plot(data, args.plot)


def plot(data: dict[str, Any], path: str) -> None:
    """Projected throughput against the number of CPU workers, per op, with its bound."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    ws = [2 ** i for i in range(0, 13)]
    for row in data["rows"]:
        x = inputs(row, data["driver"])
        for n, style in ((20_000, "--"), (1_000_000, "-")):
            ys = [project(x, w, n, LINKS_GBIT[1])[0] for w in ws]
            ax.plot(ws, ys, style, label=f"{row['row']}, {n:,} elements per batch")
        ax.plot([data["workers"]], [row["ray_per_s"]], "k.")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.axvline(512, color="grey", lw=0.8)
    ax.text(512 * 1.08, ax.get_ylim()[1] / 3, "8 nodes x 64 cores", rotation=90, va="top",
            fontsize=7, color="grey")
    ax.set_xlabel("Ray workers (1 core each)")
    ax.set_ylabel("elements / s (projected; dots: measured)")
    ax.set_title(f"One party on its Ray cluster, {data['bits']}-bit key (model, 25 Gbit/s link)",
                 fontsize=9)
    ax.legend(fontsize=6, loc="upper left")
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()

"""What a benchmark run leaves behind: the terminal table, the JSON document and the speedup plots.

The JSON (schema ``unifl-bench/2``) holds the machine and versions (:func:`machine_info`), the run's
settings, every row (:class:`unifl.bench.harness.Row` as a dict) and what could not be measured.
Rows that ran on a stand-in (PoCL, a simulator) name it in the table, the legend and the plot title;
quoted rows say so in ``source`` and never carry a ratio.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np
from rich.table import Table

from .harness import Row, Session, machine_info

__all__ = ["SCHEMA", "to_json", "table", "plot"]

#: The schema tag of ``unifl bench``'s JSON document.
SCHEMA = "unifl-bench/2"

_NOTES = ["ops_per_s / seconds are medians of the repetitions after one warm-up; spread is (min, "
          "max), iqr the 25th-75th percentiles",
          "ratios are computed within this run against the row named in baseline",
          "rows with a stand_in ran on a stand-in (PoCL, a simulator), not on the named hardware; "
          "rows whose source is 'quoted' were not measured here"]


def to_json(s: Session) -> dict[str, Any]:
    """The run as the JSON document ``unifl bench`` writes (schema :data:`SCHEMA`)."""
    info = machine_info()
    return {"schema": SCHEMA, "machine": info, "threads": info["unifl_threads"],
            "min_time_s": s.min_time, "repeats": s.repeats, "quick": s.quick,
            "backends": list(s.backends), "notes": list(_NOTES), "skipped": list(s.skipped),
            "rows": [r.to_dict() for r in s.rows]}


def table(rows: Iterable[Row]) -> Table:
    """The rows as the terminal table of ``unifl bench``: value with its spread, the ratio and the
    baseline it was taken against, and where the figure came from."""
    t = Table(title="UniFL benchmark (median of repetitions; ratios within this run)")
    for col in ("suite", "op", "bits", "impl", "ops/s or s", "spread (min-max)", "vs baseline",
                "source"):
        t.add_column(col)
    for r in rows:
        impl = r.impl + (f" [stand-in: {r.stand_in}]" if r.stand_in else "")
        ratio = f"{r.ratio:.2f}x {r.baseline}" if r.ratio else "-"
        if r.seconds is not None:
            val, spread = f"{r.seconds:.2f} s", f"{r.spread[0]:.2f}-{r.spread[1]:.2f} s"
        else:
            val = f"{r.ops_per_s:,.0f}/s" if r.ops_per_s is not None else "-"
            spread = f"{r.spread[0]:,.0f}-{r.spread[1]:,.0f}"
        t.add_row(r.suite, r.op, str(r.bits), impl, val, spread, ratio, r.source)
    return t


def _label(r: dict[str, Any]) -> str:
    out = str(r["impl"])
    if r.get("stand_in"):
        out += f" [stand-in: {r['stand_in']}]"
    if str(r.get("source", "")).startswith("quoted"):
        out += " (quoted)"
    return out


def plot(rows: Sequence[dict[str, Any]], path: str | Path, suite: str | None = None) -> None:
    """Bar chart (log scale) of each row's speedup over its same-run baseline, per op and
    implementation (UniFL Fig. 8 / FLASH Fig. 8 style), written to ``path`` as PNG.  Stand-ins are
    named in the legend and the title."""
    import matplotlib
    matplotlib.use("Agg")   # files only: never open a window, even where a display exists
    import matplotlib.pyplot as plt
    data = [r for r in rows if r.get("ratio") and (suite is None or r["suite"] == suite)]
    fig, ax = plt.subplots(figsize=(max(8.0, len({(r["op"], r["bits"]) for r in data}) * 1.0), 5))
    labels = sorted({f"{r['op']} ({r['bits']})" for r in data})
    impls = sorted({_label(r) for r in data})
    width = 0.8 / max(1, len(impls))
    for i, impl in enumerate(impls):
        ys = []
        for lab in labels:
            match = [r["ratio"] for r in data
                     if f"{r['op']} ({r['bits']})" == lab and _label(r) == impl]
            ys.append(float(match[0]) if match else 0.0)
        bars = ax.bar(np.arange(len(labels)) + i * width, ys, width, label=impl)
        ax.bar_label(bars, labels=[f"{y:.2g}x" if y else "" for y in ys], fontsize=7)
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    if data:
        ax.set_yscale("log")
    ax.set_xticks(np.arange(len(labels)) + 0.4 - width / 2, labels, rotation=35, ha="right")
    bases = sorted({str(r["baseline"]) for r in data if r.get("baseline")})
    ax.set_ylabel(f"speedup over {', '.join(bases) or 'baseline'} (same run), log")
    stand_ins = sorted({str(r["stand_in"]) for r in data if r.get("stand_in")})
    title = f"UniFL {suite or ''} speedup per op and implementation"
    title += (f"\nstand-ins (not real hardware): {', '.join(stand_ins)}" if stand_ins
              else "\nno stand-in rows")
    if not data:
        title += " -- no ratios in this run"
    ax.set_title(title, fontsize=10)
    if impls:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

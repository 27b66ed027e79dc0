"""``python -m bench.growth_plot [RESULTS] [--output PNG]``: ``bench --only growth``'s curves as a plot.

Two panels, each a curve of the benchmark (chunk rows in the metastore; Delta versions of the
table), with commit p50, ``table describe`` and the query pin (and Spark's planning, when it was
measured) against the curve's point, on log-log axes: a flat line is what issue 15 asks for.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from bench.__main__ import RESULTS

DEFAULT_PNG = Path(__file__).parent.parent / "docs" / "growth.png"
SERIES = {
    "commit_p50_ms": "commit p50",
    "describe_ms": "table describe",
    "pin_ms": "query pin (log + file list)",
    "spark_plan_ms": "query planning incl. Spark",
}


def growth_result(path: Path) -> dict[str, Any]:
    """The growth benchmark's entry of a results file (SystemExit naming the file if it has none)."""
    doc = json.loads(path.read_text())
    for bench in doc["benchmarks"]:
        if bench["name"] == "growth":
            return {**bench, "environment": doc.get("environment", {}), "scale": doc.get("scale")}
    raise SystemExit(f"error: {path} holds no growth benchmark; run: python -m bench --only growth")


def plot(result: dict[str, Any], output: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    raw = result["params"]["raw"]
    curves = [
        (name, key, label)
        for name, key, label in (
            ("chunk_rows", "chunk_rows", "chunk rows in the metastore (SQLite)"),
            ("chunk_rows_pg", "chunk_rows", "chunk rows in the metastore (PostgreSQL)"),
            ("versions", "versions", "Delta versions, each adding a live file"),
            ("rolled", "versions", "Delta versions, a roll every 100"),
        )
        if raw.get(name)
    ]
    fig, axes = plt.subplots(1, len(curves), figsize=(4.6 * len(curves), 4.2), sharey=True)
    for ax, (name, key, label) in zip(axes, curves, strict=True):
        points = raw[name]
        xs = [max(p[key], 1) for p in points]
        for series, name in SERIES.items():
            if all(series in p for p in points):
                ax.plot(xs, [p[series] for p in points], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label + (" (0 drawn at 1)" if key == "chunk_rows" else ""), fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].set_ylabel("milliseconds")
    axes[-1].axhline(1000, color="grey", linestyle="--", linewidth=0.8)
    axes[-1].annotate("1 s planning goal", (1, 1000), xycoords=("axes fraction", "data"), ha="right",
                     va="bottom", fontsize=8, color="grey")  # fmt: skip
    axes[0].legend(fontsize=8)
    load = result["environment"].get("load_average_at_start")
    fig.suptitle(
        f"streampart growth curves (bench --only growth, scale {result['scale']}"
        + (f", load average {load[0]}" if load else "")
        + ")",
        fontsize=10,
    )
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.growth_plot", description=__doc__.splitlines()[0])
    p.add_argument("results", nargs="?", type=Path, default=RESULTS, help=f"results JSON (default {RESULTS})")
    p.add_argument("--output", type=Path, default=DEFAULT_PNG, help=f"the PNG (default {DEFAULT_PNG})")
    args = p.parse_args(argv)
    plot(growth_result(args.results), args.output)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

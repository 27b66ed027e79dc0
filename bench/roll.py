"""Benchmark 2: rolling one streaming partition that holds many chunks."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from bench.common import (
    BenchResult,
    Metric,
    commit_chunks,
    console,
    create_table,
    fmt,
    fmt_ratio,
    median,
    percentile,
    workdir,
)

NAME = "roll"


def plain_compaction(paths: list[Path], out: Path) -> tuple[float, int]:
    """The baseline: read ``paths`` with pyarrow and write them as one Parquet file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    t0 = time.perf_counter()
    data = pa.concat_tables([pq.read_table(p) for p in paths])
    pq.write_table(data, out, compression="snappy")
    return time.perf_counter() - t0, data.num_rows


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from scheduler.roll import Roller

    n, rows, reps = scale["roll_chunks"], scale["rows"], scale["baseline_reps"]
    result = BenchResult(
        name=NAME,
        title=f"Roll of a partition holding {n:,} chunks",
        method=[
            f"Commit {n:,} chunks of {rows} rows (ChunkWriter.write_table, one Delta commit each) into one "
            "fresh arrival-mode table on the SQLite metastore: they all land in its one streaming partition.",
            "Then time Roller(catalog).roll_table(table, force=True) once, wall clock (time.perf_counter): "
            "begin (metastore), seal (Delta metadata commit), compact the staged files into the partition "
            "directory, sweep (one dataChange=false Delta commit), _SUCCESS, partition STANDARD.",
            "files before/after and rows come from the RollResult.",
        ],
        baseline=(
            f"pyarrow alone on the same {n:,} staged files (taken from the Delta snapshot before the roll): "
            f"pq.read_table each, concat, pq.write_table as one snappy Parquet file; median of {reps} runs."
        ),
        params={"chunks": n, "rows_per_chunk": rows, "baseline_reps": reps},
    )
    with workdir("roll") as tmp:
        catalog = Catalog.open(tmp / "warehouse")
        table = create_table(catalog)
        build_s, latencies = commit_chunks(catalog, table, n, rows, f"committing {n:,} chunks")
        dt = catalog.warehouse.load(table)
        staged = [f for f in catalog.warehouse.live_files(dt) if f.staged]
        paths = [Path(table.location) / f.path for f in staged]
        base_runs = []
        base_rows = 0
        for i in range(reps):
            seconds, base_rows = plain_compaction(paths, tmp / f"plain-{i}.parquet")
            base_runs.append(seconds)
        base_s = median(base_runs)

        t0 = time.perf_counter()
        rolls = Roller(catalog).roll_table(table, force=True)
        roll_s = time.perf_counter() - t0
        catalog.close()
    if len(rolls) != 1:
        result.notes.append(f"roll_table returned {len(rolls)} results, expected 1")
    r = rolls[0]
    if r.rows != n * rows or r.files_before != n or base_rows != n * rows:
        result.notes.append(
            f"check failed: roll saw {r.files_before} files / {r.rows} rows, baseline {base_rows} rows, "
            f"expected {n} files / {n * rows} rows"
        )
    result.metrics += [
        Metric("roll duration", roll_s, "s", base_s),
        Metric("roll rows/s", r.rows / roll_s, "rows/s", base_rows / base_s, higher_is_better=True),
        Metric("files before roll", r.files_before, "files"),
        Metric("files after roll", r.files_after, "files"),
        Metric("rows rolled", r.rows, "rows"),
    ]
    result.params.update(
        {
            "build_seconds": round(build_s, 3),
            "build_commit_p50_ms": percentile(latencies, 50) * 1000,
            "build_commit_p99_ms": percentile(latencies, 99) * 1000,
            "roll_result": r.to_json(),
            "baseline_runs_s": base_runs,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "streampart roll", "pyarrow read+write", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    t.add_row("duration", fmt(roll_s, "s"), fmt(base_s, "s"), fmt_ratio(roll_s / base_s))
    t.add_row(
        "rows/s",
        fmt(r.rows / roll_s, "rows/s"),
        fmt(base_rows / base_s, "rows/s"),
        fmt_ratio((r.rows / roll_s) / (base_rows / base_s)),
    )
    t.add_row("files before → after", f"{r.files_before:,} → {r.files_after:,}", f"{len(paths):,} → 1", "")
    t.add_row("rows", f"{r.rows:,}", f"{base_rows:,}", "")
    t.add_row("RollResult.seconds", fmt(r.seconds, "s"), "", "")
    console.print(t)
    console.print(
        f"  building the partition took {build_s:.1f} s "
        f"(commit p50 {percentile(latencies, 50) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.1f} ms)"
    )
    return result

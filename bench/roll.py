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
    """The baseline: read ``paths`` with pyarrow and write them as one Parquet file.

    Written as the roll's local compaction writes (same compression, same row-group size), and
    read the fastest plain way (``ParquetFile.read``: ``pq.read_table`` goes through the dataset
    layer and costs about twice as much per small file, which would flatter the roll).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from scheduler.local_compaction import COMPRESSION, ROW_GROUP_ROWS

    t0 = time.perf_counter()
    data = pa.concat_tables([pq.ParquetFile(p).read() for p in paths])
    pq.write_table(data, out, compression=COMPRESSION, row_group_size=ROW_GROUP_ROWS)
    return time.perf_counter() - t0, data.num_rows


def timed_roller(catalog: Any) -> Any:
    """A :class:`~scheduler.roll.Roller` that also times its compaction step (``compact_seconds``)."""
    from scheduler.roll import Roller

    class TimedRoller(Roller):
        compact_seconds: float = 0.0

        def _compact(self, *args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return super()._compact(*args, **kwargs)
            finally:
                self.compact_seconds += time.perf_counter() - t0

    return TimedRoller(catalog)


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from metastore.delta.files import live_files

    n, rows, reps = scale["roll_chunks"], scale["rows"], scale["baseline_reps"]
    result = BenchResult(
        name=NAME,
        title=f"Roll of a partition holding {n:,} chunks",
        method=[
            f"Commit {n:,} chunks of {rows} rows (ChunkWriter.write_table, one Delta commit each) into one "
            "fresh arrival-mode table on the SQLite metastore: they all land in its one streaming partition.",
            "Then time Roller(catalog).roll_table(table, force=True) once, wall clock (time.perf_counter): "
            "begin (metastore), seal (Delta metadata commit), compact the staged files into the partition "
            "directory, sweep (one dataChange=false Delta commit), _SUCCESS, partition STANDARD. "
            "Goal: the whole roll of 1,000 chunks in at most 30 s.",
            "The compaction step alone (Roller._compact: read every staged file, write the partition's "
            "file) is timed inside that roll and set against the baseline: goal at least 0.8x its speed.",
            "files before/after and rows come from the RollResult.",
        ],
        baseline=(
            f"pyarrow alone on the same {n:,} staged files (taken from the Delta snapshot before the roll): "
            "pq.ParquetFile(f).read() each, concat, pq.write_table as one Parquet file with the roll's "
            "compression and row-group size (scheduler.local_compaction.COMPRESSION, ROW_GROUP_ROWS); "
            f"median of {2 * reps} runs in the same process, {reps} just before the roll and {reps} "
            "just after."
        ),
        params={"chunks": n, "rows_per_chunk": rows, "baseline_reps": reps},
    )
    with workdir("roll") as tmp:
        catalog = Catalog.open(tmp / "warehouse")
        table = create_table(catalog)
        build_s, latencies = commit_chunks(catalog, table, n, rows, f"committing {n:,} chunks")
        dt = catalog.warehouse.load(table)
        staged = [f for f in live_files(dt) if f.staged]
        paths = [Path(table.location) / f.path for f in staged]
        base_runs: list[float] = []
        base_rows = 0

        def baseline() -> None:
            nonlocal base_rows
            for _ in range(reps):
                seconds, base_rows = plain_compaction(paths, tmp / f"plain-{len(base_runs)}.parquet")
                base_runs.append(seconds)

        # The baseline runs before and after the roll (the same files stay on disk: the sweep
        # removes them from the log, not from storage), so a drift in the machine's other load
        # weighs on both sides alike; its median over all runs is the figure.
        baseline()
        roller = timed_roller(catalog)
        t0 = time.perf_counter()
        rolls = roller.roll_table(table, force=True)
        roll_s = time.perf_counter() - t0
        compact_s = roller.compact_seconds
        baseline()
        base_s = median(base_runs)
        catalog.close()
    if len(rolls) != 1:
        result.notes.append(f"roll_table returned {len(rolls)} results, expected 1")
    r = rolls[0]
    if r.rows != n * rows or r.files_before != n or base_rows != n * rows:
        result.notes.append(
            f"check failed: roll saw {r.files_before} files / {r.rows} rows, baseline {base_rows} rows, "
            f"expected {n} files / {n * rows} rows"
        )
    compaction_ratio = base_s / compact_s  # speed: the baseline's time over ours (>= 0.8 is the goal)
    result.metrics += [
        Metric("roll duration", roll_s, "s"),
        Metric("compaction duration", compact_s, "s", base_s),
        Metric("compaction rows/s", r.rows / compact_s, "rows/s", base_rows / base_s, higher_is_better=True),
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
            "compact_seconds": compact_s,
            "compaction_speed_vs_baseline": compaction_ratio,
            "baseline_runs_s": base_runs,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "streampart roll", "pyarrow read+write", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    t.add_row("whole roll (goal ≤ 30 s)", fmt(roll_s, "s"), "", "")
    t.add_row("compaction step", fmt(compact_s, "s"), fmt(base_s, "s"), fmt_ratio(compact_s / base_s))
    t.add_row(
        "compaction rows/s (goal ≥ 0.8x)",
        fmt(r.rows / compact_s, "rows/s"),
        fmt(base_rows / base_s, "rows/s"),
        fmt_ratio(compaction_ratio),
    )
    t.add_row("rest of the roll (metastore, seal, sweep)", fmt(roll_s - compact_s, "s"), "", "")
    t.add_row("files before → after", f"{r.files_before:,} → {r.files_after:,}", f"{len(paths):,} → 1", "")
    t.add_row("rows", f"{r.rows:,}", f"{base_rows:,}", "")
    console.print(t)
    console.print(
        f"  roll of {n:,} chunks: {roll_s:.2f} s (goal ≤ 30 s: {'met' if roll_s <= 30 else 'NOT met'}); "
        f"compaction at {compaction_ratio:.2f}x the speed of the pyarrow baseline "
        f"(goal ≥ 0.8x: {'met' if compaction_ratio >= 0.8 else 'NOT met'})"
    )
    console.print(
        f"  building the partition took {build_s:.1f} s "
        f"(commit p50 {percentile(latencies, 50) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.1f} ms)"
    )
    return result

"""Benchmark 3: Spark snapshot reads of a table made of many chunks, against plain Parquet reads."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.common import (
    TABLE_NAME,
    BenchResult,
    Metric,
    commit_chunks,
    console,
    create_table,
    fmt,
    fmt_ratio,
    median,
    percentile,
    progress,
    timed,
    warm_spark,
    workdir,
)

NAME = "read"


def _measure(build: Callable[[], Any]) -> dict[str, Any]:
    """Plan (build the DataFrame), count, and full scan (sum of id), each timed on its own."""
    from pyspark.sql import functions as F

    t0 = time.perf_counter()
    df = build()
    plan = time.perf_counter() - t0
    t0 = time.perf_counter()
    count = df.count()
    count_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    total = df.agg(F.sum("id")).collect()[0][0]
    scan_s = time.perf_counter() - t0
    return {"plan": plan, "count": count_s, "scan": scan_s, "rows": count, "sum": total}


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from streampart.query import pin, read_table, spark_session

    n, rows, reps = scale["read_chunks"], scale["rows"], scale["read_reps"]
    warm = scale["read_warmup_rounds"]
    result = BenchResult(
        name=NAME,
        title=f"Snapshot read of a table of {n:,} committed chunks",
        method=[
            f"Commit {n:,} chunks of {rows} rows (ChunkWriter.write_table, one Delta commit each) into one "
            "fresh arrival-mode table (SQLite metastore); no roll, so all are staged files of one partition.",
            "One SparkSession from streampart.query.spark_session() (default SparkConfig: local[2]) for "
            "both sides, started in the background while the chunks are committed.",
            "plan = time to build the DataFrame: read_table(spark, catalog, name) (metastore lookup, "
            "Delta snapshot pin, file list, Spark file index; no job).",
            "count = df.count(); scan = df.agg(F.sum('id')).collect() (a full scan of one column); "
            "each timed separately with time.perf_counter(); rows/s = rows / that time.",
            "Spark is warmed up in the background first (a small Parquet file written and read); then "
            f"{warm} untimed warm-up round(s) of each side and {reps} timed round(s), the two sides "
            "taking turns (streampart first in even rounds, the baseline in odd); medians reported.",
        ],
        baseline=(
            "spark.read.parquet(*paths) on exactly the same data files (the paths of the pinned snapshot), "
            "same session, same queries; it gets the file list for free and has no partition column."
        ),
        params={"chunks": n, "rows_per_chunk": rows, "rounds": reps, "warmup_rounds": warm},
    )
    with workdir("read") as tmp:
        catalog = Catalog.open(tmp / "warehouse")
        table = create_table(catalog)
        # Spark starts (a JVM) in the background while the chunks are committed.
        with ThreadPoolExecutor(max_workers=1) as pool:
            spark_future = pool.submit(timed, lambda: warm_spark(spark_session(), tmp))
            build_s, latencies = commit_chunks(catalog, table, n, rows, f"committing {n:,} chunks")
            spark, spark_start = spark_future.result()
        snap = pin(catalog, table)
        paths = [str(Path(table.location) / f.path) for f in snap.files]
        console.print(f"  {len(paths):,} live files at Delta version {snap.version}")

        def ours() -> Any:
            return read_table(spark, catalog, TABLE_NAME)

        def baseline() -> Any:
            return spark.read.parquet(*paths)

        runs: dict[str, list[dict[str, Any]]] = {"streampart": [], "baseline": []}
        with progress() as bar:
            task = bar.add_task(f"Spark rounds ({warm} warm-up + {reps} timed)", total=2 * (warm + reps))
            for i in range(warm + reps):
                sides = [("streampart", ours), ("baseline", baseline)]
                for side, build in sides if i % 2 == 0 else sides[::-1]:
                    m = _measure(build)
                    if i >= warm:
                        runs[side].append(m)
                    bar.advance(task)
        spark.stop()
        catalog.close()

    def agg(side: str, key: str) -> float:
        return median([r[key] for r in runs[side]])

    total_rows = runs["streampart"][0]["rows"]
    if {r["rows"] for r in runs["streampart"] + runs["baseline"]} != {n * rows} or len(
        {r["sum"] for r in runs["streampart"] + runs["baseline"]}
    ) != 1:
        result.notes.append("check failed: streampart and baseline disagree on count or sum(id)")
    ours_plan, base_plan = agg("streampart", "plan"), agg("baseline", "plan")
    ours_count, base_count = agg("streampart", "count"), agg("baseline", "count")
    ours_scan, base_scan = agg("streampart", "scan"), agg("baseline", "scan")
    result.metrics += [
        Metric("plan (build DataFrame)", ours_plan, "s", base_plan),
        Metric("count()", ours_count, "s", base_count),
        Metric(
            "count() rows/s",
            total_rows / ours_count,
            "rows/s",
            total_rows / base_count,
            higher_is_better=True,
        ),
        Metric("full scan sum(id)", ours_scan, "s", base_scan),
        Metric(
            "full scan rows/s",
            total_rows / ours_scan,
            "rows/s",
            total_rows / base_scan,
            higher_is_better=True,
        ),
        Metric("rows read", total_rows, "rows"),
    ]
    result.params.update(
        {
            "build_seconds": round(build_s, 3),
            "build_commit_p50_ms": percentile(latencies, 50) * 1000,
            "build_commit_p99_ms": percentile(latencies, 99) * 1000,
            "files": len(paths),
            "delta_version": snap.version,
            "spark_start_seconds": round(spark_start, 3),
            "rounds_raw": runs,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "streampart read_table", "spark.read.parquet", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in result.metrics:
        t.add_row(m.name, fmt(m.value, m.unit), fmt(m.baseline, m.unit), fmt_ratio(m.ratio))
    console.print(t)
    console.print(
        f"  building the table took {build_s:.1f} s "
        f"(commit p50 {percentile(latencies, 50) * 1000:.1f} ms, "
        f"p99 {percentile(latencies, 99) * 1000:.1f} ms); "
        f"Spark start and warm-up {spark_start:.1f} s (in the background, meanwhile)"
    )
    return result

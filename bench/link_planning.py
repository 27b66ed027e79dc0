"""Benchmark 6: planning a query over a link, against the same query over the link's source table.

A link ``a.l`` (dynamic, ``--include-streaming``) imports ``b.t``, a table of many small files:
several rolled (standard) partitions and the open streaming partition. Both sides run the same
``SELECT count(*)``, once through ``a.l`` and once through ``b.t``, in one SparkSession; the link
admits every partition, so both sides read exactly the same files and rows (checked: same file
count in the pinned view, same count(*), equal to the rows written).

What "planning" means here: everything before Spark executes a job for the query —
``run_sql`` (``split_use``; ``rewrite``: sqlglot parse, query policy, ``Catalog.resolve``;
``register_snapshots``: resolve again, ``pin`` = load the Delta log, list the live files, stat
every file on disk; ``view_of`` = the link's filter; ``snapshot_frame`` = ``spark.read.parquet``
over the file list, which builds Spark's file index, plus the file-name → partition table and
the join; ``createOrReplaceTempView``; ``spark.sql``, which analyses the plan eagerly), then
``df._jdf.queryExecution().executedPlan()``, which forces Spark's optimisation and physical
planning without running the query. One caveat, the same for both sides: with more than 32
paths Spark lists/stats them with a small distributed job while building the file index, so
"planning" does include that Spark job (it is part of what any read of these files must do).
The phases are timed by wrapping ``streampart.query.rewrite/pin/view_of/snapshot_frame`` for the
measured calls (a few microseconds of overhead, both sides); "rest of run_sql" is run_sql's
time minus those phases. End-to-end is a fresh ``run_sql(...).collect()`` of the count.

Measured on this 2-core machine while other jobs ran (load average 6.4 at the start, 6-7 during,
10.1 at the end), ``python -m bench --only links`` (10,000 files: 4 rolled partitions of 1,250
and 5,000 staged files in the streaming one, Delta version 110; 1 warm-up + 5 rounds; 309 s, of
which 70 s building the source)::

    plan (run_sql + executedPlan)   link 3.437 s   source 3.199 s   1.07x
      rewrite                            4.00 ms          2.14 ms
      pin                                 486 ms           397 ms   (per round: 276-560 vs 293-457)
      link filter                       13.73 ms          0.00 ms   (now printed "-": a table has no filter)
      snapshot_frame                     2923 ms          2796 ms   1.05x
      rest of run_sql                   45.21 ms         55.91 ms
      optimise                          42.70 ms         60.31 ms
    end-to-end count(*)                 9.860 s           11.0 s    0.90x   (20,000 rows both sides)
    per-round ratios link/source: plan 1.13x, 1.09x, 0.86x, 1.08x, 0.86x; count 0.96x, 0.83x,
    0.88x, 1.46x, 0.88x

So a link costs no measurable planning time beyond its source: the only work of its own, the
filter, is 14 ms over 10,000 files (about 1.4 us a file); the per-round ratios straddle 1 and the
pin difference is within its round-to-round spread. For both sides about 85% of planning is
``snapshot_frame`` (Spark's file index over 10,000 paths, the file-name table, the join) and about
12% is ``pin``. ``--quick`` (500 files, load 4.4-6.9): plan 0.767 s vs 0.703 s (1.09x, per round
1.10x, 1.08x), end-to-end 2.069 s vs 2.152 s (0.96x).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

from bench.common import (
    BenchResult,
    Metric,
    console,
    fmt,
    fmt_ratio,
    median,
    progress,
    sample_data,
    timed,
    warm_spark,
    workdir,
)

NAME = "links"

SOURCE = "b.t"
LINK = "a.l"
ROWS_PER_FILE = 2
PHASES = ("rewrite", "pin", "link filter", "snapshot_frame", "rest of run_sql", "optimise")


def _commit_chunk(writer: Any, table: Any, files: int, first_id: int) -> None:
    """One chunk of ``files`` staged files (as a distributed writer stages them), committed once."""
    from ingest.chunks import write_staged_files

    chunk = writer.reserve()
    prefix = f"{chunk.id}-{uuid.uuid4().hex[:8]}"
    staged = []
    for k in range(files):
        data = sample_data(table, ROWS_PER_FILE, first_id + k * ROWS_PER_FILE)
        staged += write_staged_files(writer.warehouse, table, f"{prefix}-{k}", data)
    writer.stage_files(chunk, staged, [])
    writer.commit(chunk.id)


def build_source(catalog: Any, files: int, rolled: int, files_per_chunk: int) -> dict[str, Any]:
    """``b.t``: ``rolled`` standard partitions and the streaming one, ``files`` small files in all.

    Half the files go to the rolled partitions. The roller compacts toward a 1 KiB target, below
    one staged file's size, so every staged file stays one file in its standard partition.
    """
    from bench.common import create_table
    from ingest.chunks import ChunkWriter
    from metastore.links import LinkSpec
    from metastore.models import TableName
    from scheduler.config import RollConfig
    from scheduler.roll import Roller

    table = create_table(catalog, SOURCE)
    writer = ChunkWriter(catalog, table)
    roller = Roller(catalog, RollConfig(target_file_size=1024))
    per_rolled = files // 2 // rolled if rolled else 0
    plan = [per_rolled] * rolled + [files - per_rolled * rolled]  # files per partition, streaming last
    next_id = 0
    with progress() as bar:
        task = bar.add_task(f"writing {files:,} files into {len(plan)} partitions", total=files)
        for p, count in enumerate(plan):
            left = count
            while left:
                n = min(files_per_chunk, left)
                _commit_chunk(writer, table, n, next_id)
                next_id += n * ROWS_PER_FILE
                left -= n
                bar.advance(task, n)
            if p < rolled:
                roller.roll_table(table, force=True)
    link = catalog.links.create(
        LinkSpec(name=TableName.parse(LINK), source=TableName.parse(SOURCE), include_streaming=True)
    )
    return {"table": table, "link": link, "rows": next_id}


@contextmanager
def phase_timers() -> Iterator[dict[str, float]]:
    """Time run_sql's phases by wrapping the functions of streampart.query it calls by name."""
    import streampart.query as q

    spent: dict[str, float] = {}
    names = {"rewrite": "rewrite", "pin": "pin", "view_of": "link filter", "snapshot_frame": "snapshot_frame"}
    originals = {attr: getattr(q, attr) for attr in names}

    def wrap(attr: str) -> Callable[..., Any]:
        fn, label = originals[attr], names[attr]

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.perf_counter() - t0

        return timed

    for attr in names:
        setattr(q, attr, wrap(attr))
    try:
        yield spent
    finally:
        for attr, fn in originals.items():
            setattr(q, attr, fn)


def plan_once(spark: Any, catalog: Any, sql: str) -> dict[str, float]:
    """Plan ``sql`` (run_sql, then Spark's optimised physical plan), executing nothing; phases timed."""
    from streampart.query import run_sql

    with phase_timers() as spent:
        t0 = time.perf_counter()
        df = run_sql(spark, catalog, sql)
        t1 = time.perf_counter()
        df._jdf.queryExecution().executedPlan()
        t2 = time.perf_counter()
    out = {"plan": t2 - t0, "run_sql": t1 - t0, "optimise": t2 - t1}
    out.update({k: spent.get(k, 0.0) for k in ("rewrite", "pin", "link filter", "snapshot_frame")})
    out["rest of run_sql"] = out["run_sql"] - sum(spent.values())
    return out


def count_once(spark: Any, catalog: Any, sql: str) -> tuple[int, float]:
    """End to end: run_sql and collect the count."""
    from streampart.query import run_sql

    t0 = time.perf_counter()
    n = run_sql(spark, catalog, sql).collect()[0][0]
    return int(n), time.perf_counter() - t0


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from metastore.links import Resolved
    from streampart.query import pin, spark_session, view_of

    files, reps, warm = scale["links_files"], scale["links_reps"], scale["links_warmup_rounds"]
    rolled, per_chunk = scale["links_rolled_partitions"], scale["links_files_per_chunk"]
    queries = {"link": f"SELECT count(*) FROM {LINK}", "source": f"SELECT count(*) FROM {SOURCE}"}
    result = BenchResult(
        name=NAME,
        title=f"Planning a query over a link vs over its source ({files:,} files)",
        method=[
            f"Source {SOURCE} (arrival mode, SQLite metastore): {files:,} files of {ROWS_PER_FILE} rows, "
            f"committed as chunks of up to {per_chunk} staged files each (write_staged_files + "
            f"stage_files + commit); half in {rolled} partitions rolled with Roller.roll_table(force=True) "
            "(target_file_size 1 KiB: one compacted file per staged file), the rest in the streaming "
            f"partition. Link {LINK}: dynamic, include_streaming, no range or retention (admits all).",
            f"Queries: {queries['link']!r} vs {queries['source']!r}, run_sql(spark, catalog, sql), one "
            "SparkSession (default SparkConfig: local[2]) started and warmed up in the background meanwhile.",
            "plan = run_sql (rewrite, register_snapshots: pin = Delta log + file list + stat of every file, "
            "link filter, snapshot_frame = Spark file index + name table + join, temp view; spark.sql "
            "analyses) + df._jdf.queryExecution().executedPlan() (optimised physical plan); no query job "
            "runs (Spark's file index lists >32 paths with a small job, both sides alike).",
            "phases timed by wrapping streampart.query.rewrite/pin/view_of/snapshot_frame during the call.",
            "end-to-end = a fresh run_sql(...).collect() of the count.",
            f"{warm} untimed warm-up round(s) and {reps} timed round(s); each round runs both sides (plan, "
            "then end-to-end), link first in even rounds and source first in odd; medians, and the "
            "per-round ratios link/source.",
        ],
        baseline=f"the same query over the source table {SOURCE} itself, same session, same files",
        params={
            "files": files,
            "rows_per_file": ROWS_PER_FILE,
            "rolled_partitions": rolled,
            "files_per_chunk": per_chunk,
            "rounds": reps,
            "warmup_rounds": warm,
        },
    )
    runs: dict[str, list[dict[str, float]]] = {"link": [], "source": []}
    counts: set[int] = set()
    with workdir("links") as tmp:
        catalog = Catalog.open(tmp / "warehouse")
        with ThreadPoolExecutor(max_workers=1) as pool:
            spark_future = pool.submit(timed, lambda: warm_spark(spark_session(), tmp))
            built, build_s = timed(lambda: build_source(catalog, files, rolled, per_chunk))
            spark, spark_start = spark_future.result()
        table = built["table"]
        snap = pin(catalog, table)
        link_view = view_of(catalog.resolve(LINK), snap)
        source_view = view_of(Resolved(table.name, table), snap)
        staged = sum(1 for f in snap.files if f.staged)
        partitions = len({f.partition for f in snap.files})
        console.print(
            f"  {len(snap.files):,} live files ({staged:,} staged) in {partitions} partitions at Delta "
            f"version {snap.version}; the link shows {len(link_view.files):,}; built in {build_s:.1f} s"
        )
        if len(link_view.files) != len(source_view.files):
            result.notes.append("check failed: the link does not show every file of its source")
        with progress() as bar:
            task = bar.add_task(f"rounds ({warm} warm-up + {reps} timed)", total=warm + reps)
            for i in range(warm + reps):
                sides = ["link", "source"] if i % 2 == 0 else ["source", "link"]
                for side in sides:
                    m = plan_once(spark, catalog, queries[side])
                    n, m["count"] = count_once(spark, catalog, queries[side])
                    counts.add(n)
                    if i >= warm:
                        runs[side].append(m)
                bar.advance(task)
        spark.stop()
        catalog.close()

    if counts != {built["rows"]}:
        result.notes.append(f"check failed: counts {sorted(counts)}, expected {built['rows']}")

    def agg(side: str, key: str) -> float:
        return median([r[key] for r in runs[side]])

    def per_round(key: str) -> list[float]:
        return [a[key] / b[key] for a, b in zip(runs["link"], runs["source"], strict=True)]

    result.metrics += [
        Metric("plan (run_sql + executedPlan)", agg("link", "plan"), "s", agg("source", "plan")),
        # the source has no link filter (0 ms): a ratio against it would mean nothing
        *[
            Metric(
                f"  {p}", agg("link", p) * 1000, "ms", None if p == "link filter" else agg("source", p) * 1000
            )
            for p in PHASES
        ],
        Metric("end-to-end count(*)", agg("link", "count"), "s", agg("source", "count")),
        Metric("rows counted", float(built["rows"]), "rows"),
        Metric("files read", float(len(link_view.files)), "files"),
    ]
    plan_ratios, count_ratios = per_round("plan"), per_round("count")
    result.params.update(
        {
            "build_seconds": round(build_s, 3),
            "spark_start_seconds": round(spark_start, 3),
            "delta_version": snap.version,
            "live_files": len(snap.files),
            "staged_files": staged,
            "partitions": partitions,
            "per_round_plan_ratios": plan_ratios,
            "per_round_count_ratios": count_ratios,
            "rounds_raw": runs,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", f"link {LINK}", f"source {SOURCE}", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in result.metrics:
        t.add_row(m.name, fmt(m.value, m.unit), fmt(m.baseline, m.unit), fmt_ratio(m.ratio))
    console.print(t)

    def spread(ratios: list[float]) -> str:
        return ", ".join(fmt_ratio(r) for r in ratios)

    console.print(f"  per-round ratios link/source: plan {spread(plan_ratios)}; count {spread(count_ratios)}")
    console.print(
        f"  medians of per-round ratios: plan {fmt_ratio(median(plan_ratios))}, "
        f"count {fmt_ratio(median(count_ratios))}; building the source took {build_s:.1f} s, "
        f"Spark start and warm-up {spark_start:.1f} s (in the background, meanwhile)"
    )
    return result

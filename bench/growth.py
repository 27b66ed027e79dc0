"""Benchmark: flat as it grows — commit latency, ``table describe`` and query planning vs the table's history.

Issue 15 asks that a chunk commit and ``table describe`` cost the same on an empty metastore and
on one holding a million chunk rows, on a table of ten Delta versions and on one of ten thousand,
and that planning a query over 10,000 files takes at most a second. Two growth curves, each in
one table that grows between its points (so each ratio compares the same table with itself):

- **chunk rows**: the metastore's ``sp_chunks`` holds 0, then 100k, then 1M committed chunk rows
  of the measured table (its history of the past days), added in bulk by the database itself
  (:func:`bench.common.insert_chunk_history`, shared with the federation benchmark);
- **Delta versions**: the table's log grows to 10, 1k, then 10k versions, one added staged file
  each, as chunk commits leave it. The log is fast-forwarded by writing the commit files in the
  shape our chunk commits have (commitInfo with the chunk key, one ``add`` of a real Parquet file
  in ``_staging/``), with the checkpoints delta-rs' post-commit hook writes at the table's
  ``delta.checkpointInterval``, spread over the past days; then housekeeping runs once (as its
  schedule would) before the point is measured. Fast-forwarding makes 10k versions in seconds
  where real commits take minutes, and leaves the same log.

At every point: the p50 of real chunk commits (``ChunkWriter.write_table`` of 100 rows: reserve,
stage, Delta commit, metastore bookkeeping), the median time of ``Catalog.describe(catalog.resolve
(name))`` (what ``streampart table describe`` runs), and of ``streampart.query.pin`` (what
``streampart query`` does for each table before Spark: load the Delta log, list the live files,
check each on disk). With ``growth_spark`` also Spark's part of planning over the table's files
(``snapshot_frame`` + the optimised physical plan of a ``count(*)``, no job run).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.parse
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import (
    TABLE_NAME,
    BenchResult,
    Metric,
    console,
    create_table,
    drop_pg_schema,
    fmt,
    fmt_ratio,
    fresh_metastore_url,
    insert_chunk_history,
    median,
    percentile,
    pg_url_safe,
    postgres_problem,
    sample_data,
    workdir,
)

NAME = "growth"
ROWS_PER_CHUNK = 100
# Chunk rows and log versions spread over the past days, as a table with a week's retention has.
HISTORY = timedelta(days=6)
LOG_RETENTION = timedelta(days=1)
# The third curve's roll: one sweep every 100 versions keeps about 100 staged files live.
SWEEP_EVERY = 100


# -- measuring -----------------------------------------------------------------------------
def commit_latencies(catalog: Any, table: Any, n: int, warmup: int) -> list[float]:
    """``n`` timed real chunk commits (after ``warmup`` untimed ones) through a fresh ChunkWriter."""
    from ingest.chunks import ChunkWriter

    writer = ChunkWriter(catalog, table)
    out = []
    for i in range(warmup + n):
        data = sample_data(table, ROWS_PER_CHUNK, first_id=i * ROWS_PER_CHUNK)
        t0 = time.perf_counter()
        writer.write_table(data)
        if i >= warmup:
            out.append(time.perf_counter() - t0)
    return out


def describe_seconds(catalog: Any, name: str, reps: int) -> float:
    """The median time of what ``streampart table describe NAME`` runs."""
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        catalog.describe(catalog.resolve(name))
        times.append(time.perf_counter() - t0)
    return median(times)


def pin_seconds(catalog: Any, table: Any, reps: int) -> tuple[float, int]:
    """The median time of ``streampart.query.pin`` (the snapshot a query reads); and its file count."""
    from streampart.query import pin

    times, files = [], 0
    for _ in range(reps):
        t0 = time.perf_counter()
        snap = pin(catalog, table)
        times.append(time.perf_counter() - t0)
        files = len(snap.files)
    return median(times), files


def spark_plan_seconds(spark: Any, catalog: Any, table: Any, reps: int) -> float:
    """Median of pin + ``snapshot_frame`` + the optimised physical plan of a count(*) (no job run)."""
    from streampart.query import pin, snapshot_frame

    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        df = snapshot_frame(spark, pin(catalog, table)).groupBy().count()
        df._jdf.queryExecution().executedPlan()
        times.append(time.perf_counter() - t0)
    return median(times)


# -- growing -------------------------------------------------------------------------------
def log_versions(table: Any) -> int:
    from deltalake import DeltaTable

    return int(DeltaTable(table.location).version())


def fast_forward(
    catalog: Any,
    table: Any,
    to_version: int,
    template: Path,
    start: datetime,
    last: int,
    sweep_every: int | None = None,
) -> None:
    """Grow the table's Delta log to ``to_version``, one chunk-commit-shaped commit per version.

    Each commit adds one staged file (a copy of ``template``, a real one-chunk Parquet file);
    commit timestamps and file times grow evenly with the version, from ``start`` (version 0) to
    an hour ago (version ``last``). A checkpoint is written
    at every multiple of the table's ``delta.checkpointInterval``, as delta-rs' post-commit hook
    writes one after a real commit there.

    With ``sweep_every``, every such version is a roll's sweep instead: its commit removes every
    staged file (``dataChange: false``) and adds one compacted file in the partition's directory,
    so the table's live files stay few while its log grows.
    """
    from deltalake import DeltaTable

    from metastore.delta.files import live_files
    from metastore.delta.layout import STAGING_DIR, partition_dir, partition_value_text
    from metastore.delta.log import CHUNK_KEY, ROLL_KEY

    root = Path(table.location)
    log = root / "_delta_log"
    dt = DeltaTable(str(root))
    first = int(dt.version()) + 1
    interval = int(dt.metadata().configuration.get("delta.checkpointInterval", "100"))
    partition = catalog.store.streaming_partition(table.id).value
    size = template.stat().st_size
    step = (datetime.now(UTC) - timedelta(hours=1) - start) / max(last, 1)
    # the commits measured at the last point are part of this history now: as old as their place
    # in it (a log's file times grow with its versions; delta-rs' cleanup relies on that)
    before = (start + step * (first - 1)).timestamp()
    for entry in log.iterdir():
        if entry.name != "_last_checkpoint" and entry.stat().st_mtime > before:
            os.utime(entry, (before, before))
    values = {table.partition_column: partition_value_text(partition)}
    staged = [f.path for f in live_files(dt) if f.staged]
    for v in range(first, to_version + 1):
        when = start + step * v
        ms = int(when.timestamp() * 1000)
        chunk = str(uuid.uuid4())
        if sweep_every and v % sweep_every == 0:
            compacted = f"{partition_dir(table, partition)}/part-{v:06d}-ff.parquet"
            (root / compacted).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, root / compacted)
            sweep: list[dict[str, Any]] = [
                {"commitInfo": {"timestamp": ms, "operation": "WRITE", ROLL_KEY: chunk}},
                {
                    "add": {
                        "path": urllib.parse.quote(compacted),  # the log holds URI-encoded paths
                        "partitionValues": values,
                        "size": size,
                        "modificationTime": ms,
                        "dataChange": False,
                        "stats": json.dumps({"numRecords": ROWS_PER_CHUNK}),  # the copy's own
                    }
                },
            ]
            for gone in staged:
                sweep.append(
                    {
                        "remove": {
                            "path": gone,
                            "deletionTimestamp": ms,
                            "dataChange": False,
                            "extendedFileMetadata": True,
                            "partitionValues": values,
                            "size": size,
                        }
                    }
                )
            staged = []
            actions = sweep
        else:
            rel = f"{STAGING_DIR}/{chunk}-ff-0.parquet"
            shutil.copyfile(template, root / rel)
            staged.append(rel)
            actions = [
                {
                    "commitInfo": {
                        "timestamp": ms,
                        "operation": "WRITE",
                        "operationParameters": {
                            "partitionBy": json.dumps([table.partition_column]),
                            "mode": "Append",
                        },
                        CHUNK_KEY: chunk,
                    }
                },
                {
                    "add": {
                        "path": rel,
                        "partitionValues": {table.partition_column: partition_value_text(partition)},
                        "size": size,
                        "modificationTime": ms,
                        "dataChange": True,
                        "stats": json.dumps({"numRecords": ROWS_PER_CHUNK}),
                    }
                },
            ]
        path = log / f"{v:020d}.json"
        path.write_text("\n".join(json.dumps(a) for a in actions) + "\n")
        os.utime(path, (when.timestamp(), when.timestamp()))
        if v % interval == 0:
            dt.update_incremental()
            dt.create_checkpoint()
            for cp in log.glob(f"{v:020d}.checkpoint*.parquet"):
                os.utime(cp, (when.timestamp(), when.timestamp()))
    # the commit path's cached snapshot of this process moves on with the next commit


# -- the benchmark -------------------------------------------------------------------------
def _measure(catalog: Any, table: Any, scale: dict[str, Any], spark: Any | None) -> dict[str, float]:
    lat = commit_latencies(catalog, table, scale["growth_commits"], scale["growth_warmup"])
    reps = scale["growth_reps"]
    out = {
        "commit_p50_ms": percentile(lat, 50) * 1000,
        "commit_p99_ms": percentile(lat, 99) * 1000,
        "describe_ms": describe_seconds(catalog, TABLE_NAME, reps) * 1000,
    }
    pin_s, files = pin_seconds(catalog, table, reps)
    out["pin_ms"] = pin_s * 1000
    out["files"] = files
    if spark is not None:
        out["spark_plan_ms"] = spark_plan_seconds(spark, catalog, table, reps) * 1000
    return out


def _housekeeping(catalog: Any) -> dict[str, Any]:
    from scheduler.housekeeping import Housekeeper

    return Housekeeper(catalog).run().to_json()


def run(scale: dict[str, Any]) -> BenchResult:
    import sqlalchemy as sa
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from metastore.delta.checkpoints import log_entries, set_log_settings

    row_points: list[int] = scale["growth_chunk_rows"]
    version_points: list[int] = scale["growth_versions"]
    with_spark: bool = scale["growth_spark"]
    result = BenchResult(
        name=NAME,
        title="Flat as it grows: commit p50, describe and planning vs chunk rows and Delta versions",
        method=[
            "Chunk rows: one SQLite metastore (then one PostgreSQL schema, when the server answers); "
            "its sp_chunks grows to "
            f"{', '.join(f'{n:,}' for n in row_points)} committed chunk rows of the measured table "
            "(spread over the past 6 days), inserted by one "
            "INSERT … SELECT over a generated series (bench.common.insert_chunk_history).",
            f"Delta versions: a second table's log grows to {', '.join(f'{n:,}' for n in version_points)} "
            "versions: commit files written in our chunk commits' shape (commitInfo + one add of a real "
            "Parquet file: every version adds a live file, as in a streaming partition that has not "
            "rolled yet), checkpoints at the table's delta.checkpointInterval (100) as delta-rs writes "
            "them, times spread over the past 6 days; the table's log retention is 1 day (table alter "
            "--log-retention 1d); one housekeeping pass (Housekeeper.run, the operator's defaults) "
            "before each point is measured. Third curve ('versions, rolled'): the same, but every "
            f"{SWEEP_EVERY}th version is a roll's sweep (removes the staged files, adds one compacted "
            "file), so the log grows while the live files stay few.",
            "One untimed round of every measurement before the first point (the baseline). "
            f"At each point: {scale['growth_warmup']} untimed + {scale['growth_commits']} timed real commits "
            f"(ChunkWriter.write_table of {ROWS_PER_CHUNK} rows), p50; describe = median of "
            f"{scale['growth_reps']} Catalog.describe(catalog.resolve(name)) (the CLI's `table describe`); "
            "pin = median of streampart.query.pin (load the log, list live files, stat each: the part of "
            "`streampart query`'s planning before Spark)"
            + (
                "; spark plan = pin + snapshot_frame + the optimised physical plan of a count(*) (no job)."
                if with_spark
                else "."
            ),
        ],
        baseline="the same table at the curve's first point (0 chunk rows; fewest Delta versions), same run",
        params={
            "chunk_rows": row_points,
            "versions": version_points,
            "commits": scale["growth_commits"],
            "warmup": scale["growth_warmup"],
            "reps": scale["growth_reps"],
            "spark": with_spark,
        },
    )
    rows_raw: list[dict[str, Any]] = []
    versions_raw: list[dict[str, Any]] = []
    rolled_raw: list[dict[str, Any]] = []
    rows_pg_raw: list[dict[str, Any]] = []
    pg_problem = postgres_problem()
    if pg_problem is not None:
        result.notes.append(f"PostgreSQL skipped: {pg_url_safe()} is not reachable ({pg_problem})")
    with workdir("growth") as tmp:
        spark = None
        if with_spark:
            from bench.common import warm_spark
            from streampart.query import spark_session

            spark = warm_spark(spark_session(), tmp)

        # curve 1: chunk rows, on SQLite (the default) and on PostgreSQL when one answers
        first_round = True
        for backend, out_rows in (("sqlite", rows_raw), ("postgresql", rows_pg_raw)):
            if backend == "postgresql" and pg_problem is not None:
                continue
            url = fresh_metastore_url(backend, tmp)
            try:
                catalog = Catalog.open(tmp / f"rows-{backend}" / "warehouse", url)
                table = create_table(catalog)
                if first_round:
                    # one untimed round first: the first point is the baseline, and must not pay
                    # first-use costs (imports, caches, Spark's first plans) the later ones do not
                    _measure(catalog, table, scale, spark)
                    first_round = False
                have = 0
                for n in row_points:
                    if n > have:
                        t0 = time.perf_counter()
                        with catalog.store.engine.begin() as conn:
                            insert_chunk_history(conn, n - have, [table.id], HISTORY, first=have + 1)
                        if backend == "postgresql":  # statistics, as autovacuum would gather them
                            with catalog.store.engine.connect().execution_options(
                                isolation_level="AUTOCOMMIT"
                            ) as conn:
                                conn.execute(sa.text("ANALYZE sp_chunks"))
                        console.print(
                            f"  {backend}: {n - have:,} chunk rows added in {time.perf_counter() - t0:.1f} s"
                        )
                        have = n
                    point = {"chunk_rows": n, **_measure(catalog, table, scale, spark)}
                    console.print(f"  {backend}, {n:,} chunk rows: {point}")
                    out_rows.append(point)
                catalog.close()
            finally:
                if url is not None:
                    drop_pg_schema(url)

        # curves 2 and 3: Delta versions, every one adding a live file / rolled every SWEEP_EVERY
        template = tmp / "template.parquet"
        for curve, sweep_every, out in (
            ("versions", None, versions_raw),
            ("rolled", SWEEP_EVERY, rolled_raw),
        ):
            catalog = Catalog.open(tmp / curve / "warehouse")
            table = create_table(catalog)
            # as `streampart table alter bench.events --log-retention 1d` sets it (the default, 30d,
            # would keep every commit file of this 6-day history)
            set_log_settings(catalog.load(table), log_retention=LOG_RETENTION)
            start = datetime.now(UTC) - HISTORY
            for entry in (Path(table.location) / "_delta_log").iterdir():  # made at the history's start
                os.utime(entry, (start.timestamp(), start.timestamp()))
            if not template.exists():
                import pyarrow.parquet as pq

                pq.write_table(sample_data(table, ROWS_PER_CHUNK), template)
            for n in version_points:
                if n > log_versions(table):
                    t0 = time.perf_counter()
                    fast_forward(catalog, table, n, template, start, max(version_points), sweep_every)
                    console.print(
                        f"  {curve}: log grown to {n:,} versions in {time.perf_counter() - t0:.1f} s"
                    )
                t0 = time.perf_counter()
                hk = _housekeeping(catalog)
                hk_s = time.perf_counter() - t0
                point = {
                    "versions": log_versions(table),
                    "log_entries": log_entries(table.location),
                    "housekeeping_s": hk_s,
                    "housekeeping": {k: hk[k] for k in ("checkpoints", "log_files_removed", "errors")},
                    **_measure(catalog, table, scale, spark),
                }
                console.print(f"  {curve}, {n:,} versions: {point}")
                out.append(point)
            catalog.close()

    def ratio(points: list[dict[str, Any]], i: int, key: str) -> float:
        return points[i][key] / points[0][key] if points[0][key] else float("nan")

    keys = ["commit_p50_ms", "describe_ms", "pin_ms"] + (["spark_plan_ms"] if with_spark else [])
    t = RichTable(title="Growth curves (x = against the curve's first point, same run)", title_justify="left")
    for col in ("point", "files", "log entries", *[k.removesuffix("_ms") + " ms" for k in keys]):
        t.add_column(col, justify="left" if col == "point" else "right")
    for label, points, key in (
        ("chunk rows", rows_raw, "chunk_rows"),
        ("chunk rows, PostgreSQL", rows_pg_raw, "chunk_rows"),
        ("Delta versions", versions_raw, "versions"),
        ("versions, rolled", rolled_raw, "versions"),
    ):
        for i, p in enumerate(points):
            cells = [f"{fmt(p[k], 'ms')} ({fmt_ratio(ratio(points, i, k))})" for k in keys]
            t.add_row(f"{p[key]:,} {label}", f"{p['files']:,}", f"{p.get('log_entries', '-')}", *cells)
            for k in keys:
                result.metrics.append(
                    Metric(f"{p[key]:,} {label}: {k.removesuffix('_ms')}", p[k], "ms", points[0][k])
                )
    console.print(t)
    result.params["raw"] = {
        "chunk_rows": rows_raw,
        "chunk_rows_pg": rows_pg_raw,
        "versions": versions_raw,
        "rolled": rolled_raw,
    }
    return result

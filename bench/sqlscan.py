"""Benchmark ``sqlscan``: a streampart table scanned through a Python data source, against the native path.

The issue suggested serving tables to the SQL server through a Python data source
(``pyspark.sql.datasource``) named ``streampart``: ``CREATE TABLE ns.t USING streampart``, the
snapshot pinned when Spark plans the scan, rows handed to Spark as Arrow batches. This measures
its scan speed against the path ``streampart query`` (and the SQL server) use: Spark's native
Parquet reader over the file list of a pinned version (:func:`streampart.query.snapshot_frame`).
Both read the same pinned version; their counts and sums are checked equal.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

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
    timed,
    warm_spark,
    workdir,
)

NAME = "sqlscan"
# Why 4: two cores here, and a few more tasks than cores keep both busy while one waits on I/O.
_SLICES = 4


class StreampartSource(DataSource):
    """``USING streampart``: one table, one pinned snapshot per scan.

    Spark 4.2 keeps no OPTIONS of a ``CREATE TABLE … USING <python data source>`` (its reader
    sees none), so the table is a class attribute: :func:`source_for` makes a subclass per table.
    """

    WAREHOUSE = ""
    TABLE = ""

    @classmethod
    def name(cls) -> str:
        return "streampart"

    def schema(self) -> str:
        from metastore.catalog import Catalog
        from streampart.query import spark_ddl

        catalog = Catalog.open(Path(self.WAREHOUSE))
        try:
            table = catalog.table(self.TABLE)
            return f"{spark_ddl(table.columns)}, `{table.partition_column}` TIMESTAMP"
        finally:
            catalog.close()

    def reader(self, schema: Any) -> DataSourceReader:
        return _Reader(self.WAREHOUSE, self.TABLE)


def source_for(warehouse: Path, table: str) -> type[StreampartSource]:
    """A data source class for one table (pickled by value to Spark's Python workers)."""
    return type("StreampartTableSource", (StreampartSource,), {"WAREHOUSE": str(warehouse), "TABLE": table})


class _Reader(DataSourceReader):
    """Pins the table's newest version when Spark plans the scan (in the planner's Python worker)."""

    def __init__(self, warehouse: str, name: str) -> None:
        from metastore.catalog import Catalog
        from streampart.query import pin

        catalog = Catalog.open(Path(warehouse))
        try:
            table = catalog.table(name)
            snap = pin(catalog, table)
        finally:
            catalog.close()
        self.version = snap.version
        self.pcol = table.partition_column
        self.files = [(str(Path(table.location) / f.path), f.partition) for f in snap.files]

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(self.files[i::_SLICES]) for i in range(_SLICES) if self.files[i::_SLICES]]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        for path, value in partition.value:
            data = pq.read_table(path)
            column = pa.array([value] * data.num_rows, type=pa.timestamp("us", tz="UTC"))
            yield from data.append_column(self.pcol, column).to_batches()


def _measure(spark: Any, sql_of: Callable[[str], str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for label, sql in (("count", "SELECT count(*) FROM {t}"), ("scan", "SELECT sum(id) FROM {t}")):
        t0 = time.perf_counter()
        out[label + "_value"] = spark.sql(sql_of(sql)).collect()[0][0]
        out[label] = time.perf_counter() - t0
    return out


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from streampart.query import pin, snapshot_frame, spark_session

    n, rows, reps = scale["sqlscan_chunks"], scale["sqlscan_rows"], scale["sqlscan_reps"]
    result = BenchResult(
        name=NAME,
        title=f"Scan of a table of {n:,} chunks × {rows:,} rows: Python data source vs native Parquet",
        method=[
            f"Commit {n:,} chunks of {rows:,} rows (ChunkWriter.write_table) into one arrival-mode table.",
            "One SparkSession (local[2]). Native: snapshot_frame of the pinned version as a temporary "
            "view (the streampart query and sql-server path). Python data source: "
            "CREATE TABLE bench.py_events USING streampart (a pyspark.sql.datasource.DataSource that "
            "pins the newest version when Spark plans the scan and yields pyarrow batches from the "
            f"same files, {_SLICES} input partitions).",
            "count = SELECT count(*); scan = SELECT sum(id); each with time.perf_counter() around "
            f"spark.sql(…).collect(). One untimed warm-up round, then {reps} timed rounds, the sides "
            "taking turns; medians reported. Native planning (pin + view) is included in each round.",
        ],
        baseline="Spark's native Parquet reader over the pinned version's file list (streampart.query).",
        params={"chunks": n, "rows_per_chunk": rows, "rounds": reps},
    )
    with workdir("sqlscan") as tmp:
        # the data source's classes are pickled by reference: its workers import bench.sqlscan
        root = str(Path(__file__).resolve().parents[1])
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
        catalog = Catalog.open(tmp / "warehouse")
        table = create_table(catalog)
        with ThreadPoolExecutor(max_workers=1) as pool:
            spark_future = pool.submit(timed, lambda: warm_spark(spark_session(), tmp))
            build_s, _ = commit_chunks(catalog, table, n, rows, f"committing {n:,} chunks")
            spark, _ = spark_future.result()
        spark.dataSource.register(source_for(tmp / "warehouse", TABLE_NAME))
        spark.sql("CREATE DATABASE IF NOT EXISTS bench")
        spark.sql("CREATE TABLE bench.py_events USING streampart")

        def native(sql: str) -> str:
            snapshot_frame(spark, pin(catalog, table)).createOrReplaceTempView("native_events")
            return sql.format(t="native_events")

        def python_source(sql: str) -> str:
            return sql.format(t="bench.py_events")

        runs: dict[str, list[dict[str, float]]] = {"native": [], "python": []}
        for i in range(1 + reps):
            sides = [("native", native), ("python", python_source)]
            for side, sql_of in sides if i % 2 == 0 else sides[::-1]:
                m = _measure(spark, sql_of)
                if i >= 1:
                    runs[side].append(m)
            console.print(f"  round {i + 1}/{1 + reps} done" + (" (warm-up)" if i == 0 else ""))
        spark.stop()
        catalog.close()

    def agg(side: str, key: str) -> float:
        return median([r[key] for r in runs[side]])

    values = {(r["count_value"], r["scan_value"]) for side in runs.values() for r in side}
    if len(values) != 1:
        result.notes.append(f"check failed: the two paths disagree on count or sum(id): {values}")
    total = n * rows
    py_count, nat_count = agg("python", "count"), agg("native", "count")
    py_scan, nat_scan = agg("python", "scan"), agg("native", "scan")
    result.metrics += [
        Metric("count(*) (python data source)", py_count, "s", nat_count),
        Metric("sum(id) (python data source)", py_scan, "s", nat_scan),
        Metric("scan rows/s (python data source)", total / py_scan, "rows/s", total / nat_scan, True),
        Metric("rows", total, "rows"),
    ]
    result.params.update({"build_seconds": round(build_s, 3), "rounds_raw": runs})
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "python data source", "native Parquet", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in result.metrics:
        t.add_row(m.name, fmt(m.value, m.unit), fmt(m.baseline, m.unit), fmt_ratio(m.ratio))
    console.print(t)
    console.print(
        f"  python data source / native: count {py_count / nat_count:.1f}x the time, "
        f"sum(id) {py_scan / nat_scan:.1f}x the time (same run, same files)"
    )
    return result

"""Compaction of a rolling partition by Spark (``[roll] engine = "spark"``), on the table's cluster.

For partitions too big for one process: executors read the partition's live files and write
the compacted ones; the roller's process only renames files and reads their Parquet footers.
The sweep's crash safety rests on names (:mod:`scheduler.compacted_names`), and this engine
keeps every property of the local one:

1. Spark writes into a hidden directory inside the partition directory, named after the
   attempt (:func:`spark_attempt_dir`: the roll, the snapshot version the sweep commit is based
   on, a random attempt id). Hidden names are skipped by every Parquet reader of the directory,
   and the directory is on the partition's own file system, so the renames below are atomic.
2. The roller reads each output file's row count from its Parquet footer (the Delta log needs
   it) and renames the file to :func:`compacted_name`, in the order of Spark's task numbers; then
   the hidden directory goes.
3. On any failure, the hidden directory and the files renamed so far are deleted (never
   committed: nobody saw them). After a crash, the next roller's ``_remove_leftovers`` deletes
   both by their names: their version is older than that roller's own seal.

The session comes from the caller (a factory per table: the scheduler layer knows nothing of
how a cluster's Spark settings are found). Its Python workers import only this module's
dependencies, which are already in the workers' environment: the job ships no Python code.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from metastore.crashpoints import crashpoint
from metastore.delta.errors import storage_error
from metastore.delta.files import LiveFile
from metastore.delta.layout import partition_dir
from metastore.delta.stats import Ranges
from metastore.models import Column, Table, iso
from scheduler.clustering import spark_clustered
from scheduler.compacted_names import compacted_name, spark_attempt_dir
from scheduler.errors import RollFailedError
from scheduler.spark_files import parquet_files

# A Spark session for the cluster of a table: ``streampart`` builds it (``Settings.spark_for``).
SparkFactory = Callable[[Table], Any]

# Delta readers expect TIMESTAMP columns as Parquet INT64 microseconds adjusted to UTC (as
# delta-rs and the local engine write them); Spark's own default is the legacy INT96.
TIMESTAMP_TYPE = ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")


def compact_with_spark(
    spark: Any,
    table: Table,
    columns: Sequence[Column],
    value: datetime,
    files: Sequence[LiveFile],
    roll_id: str,
    base_version: int,
    attempt: str,
    target_file_size: int,
    cluster_by: Sequence[str] = (),
) -> tuple[list[tuple[str, datetime, int]], dict[str, str]]:
    """Rewrite ``files`` into the partition's directory with Spark, toward ``target_file_size``.

    ``columns`` (those of the version the sweep commits on) are Spark's read schema: a column a
    file lacks is written as nulls, a widened one in its wider type. ``cluster_by``: the table's
    clustering columns (``scheduler/clustering.py``); its files are then range-partitioned by their
    order, so each holds a narrow range of them, and written in the order of their ranges.

    Returns:
        ``(path relative to the table, partition value, rows)`` of each compacted file, named
        ``compacted_name(roll_id, base_version, attempt, k)``, and each one's statistics by that
        path, from its Parquet footer (``metastore/delta/stats.py``).

    Raises:
        RollFailedError: the Spark job failed (one line: the cause); StorageError: the file
            system did. Either way nothing written by this attempt is left behind.
    """
    rel = partition_dir(table, value)
    directory = Path(table.location) / rel
    scratch = directory / spark_attempt_dir(roll_id, base_version, attempt)
    out: list[tuple[str, datetime, int]] = []
    ranges: dict[str, str] = {}
    what = f"compacting partition {iso(value)} of table {table.name} with Spark"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # as many output files as the target size asks for; coalesce keeps Spark from shuffling
        count = max(1, math.ceil(sum(f.size for f in files) / target_file_size))
        paths = [str(Path(table.location) / f.path) for f in sorted(files, key=lambda f: f.path)]
        ddl = ", ".join(f"`{c.name}` {c.sql_type}" for c in columns)
        with _spark_failures(what):
            spark.conf.set(*TIMESTAMP_TYPE)
            frame = parquet_files(spark, ddl, paths)
            if cluster_by:  # range-partitioned by the clustering order, each task's rows sorted by it
                frame = spark_clustered(frame, cluster_by, sum(f.rows for f in files), count)
            else:
                frame = frame.coalesce(count)
            frame.write.mode("errorifexists").option("compression", "snappy").parquet(str(scratch))
        crashpoint("roll-spark-after-write")
        written = sorted(
            p for p in scratch.iterdir() if p.name.startswith("part-") and p.name.endswith(".parquet")
        )
        for k, path in enumerate(written):
            footer = pq.read_metadata(path)
            final = compacted_name(roll_id, base_version, attempt, k)
            os.replace(path, directory / final)
            out.append((f"{rel}/{final}", value, footer.num_rows))
            ranges[f"{rel}/{final}"] = Ranges(columns).add_footer(footer).json()
            crashpoint("roll-spark-mid-rename")
        _remove_tree(scratch)
    except BaseException as exc:
        _remove_tree(scratch)
        for path_in_table, _, _ in out:
            (Path(table.location) / path_in_table).unlink(missing_ok=True)
        if isinstance(exc, OSError):  # a full disk, say: say so
            raise storage_error(exc, what) from exc
        raise
    return out, ranges


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _spark_failures(what: str) -> Iterator[None]:
    """A failed Spark job as one line naming its cause (Py4J's first line names only the Java call)."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    try:
        yield
    except (PySparkException, Py4JError) as exc:
        java = getattr(exc, "java_exception", None)
        lines = (str(java) if java is not None else str(exc)).strip().splitlines()
        raise RollFailedError(f"{what} failed: {lines[0] if lines else type(exc).__name__}") from None

"""Spark reads of snapshots whose files are in a bucket, without a JVM S3 connector.

Spark's own Parquet reader opens ``s3://`` paths only through Hadoop's S3A jars, which are not
installable here (nor wanted: a second S3 client, with its own credentials chain, beside the
one every other part of streampart uses). So for a table in a bucket :func:`bucket_frame` hands
Spark the snapshot's file list and reads the files in Spark's Python workers, through
``metastore.storage`` (obstore, the client delta-rs uses) and pyarrow:

- a DataFrame of the files, one row per file (its URL and its partition value), split into
  about ``spark.default.parallelism`` tasks of similar bytes;
- ``mapInArrow`` over it: each task reads its files a row group at a time and yields Arrow
  record batches in the snapshot's columns (``metastore.delta.arrow.conform``: a column a file
  lacks as nulls, a widened one in its wider type — what Spark's reader does given the read
  schema), with the partition column from the Delta log.

Why ``mapInArrow`` and not a Python data source (``pyspark.sql.datasource``): a data source is
planned in a Python worker the JVM starts, which sees neither this process's ``[storage]``
settings nor the files of the pinned snapshot without passing both through string options (the
query plan shows those, secrets included). The function given to ``mapInArrow`` is pickled here,
with the store's options in it, and never printed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from metastore import storage
from metastore.models import ARRIVAL_COLUMN, Column

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from metastore.snapshots import Snapshot

# A task reads at least this many bytes of files (fewer, larger tasks: each costs a Python
# worker's round trip), unless the snapshot is smaller than the cores times this.
TASK_BYTES = 64 * 1024 * 1024


def unused_name(base: str, taken: Iterable[str]) -> str:
    """``base``, with ``_`` appended until it differs from every name of ``taken`` but for case (as
    Spark matches names): a name for a read's own column that no column of the table can shadow.
    (Columns named ``__sp_…`` are refused, but a table's log may hold one from before.)"""
    lower = {t.lower() for t in taken}
    name = base
    while name.lower() in lower:
        name += "_"
    return name


def bucket_frame(
    spark: SparkSession, snap: Snapshot, ddl: str, arrivals: Mapping[str, int] | None = None
) -> DataFrame:
    """The rows of ``snap`` (a table in a bucket) in its version's columns (``ddl``) and the partition
    column, read by Spark's Python workers (see the module docstring). With ``arrivals`` (a keyed
    table's), each row's arrival too, as ``streampart.query.files_frame`` reads it."""
    table = snap.table
    pcol = table.partition_column
    task_col = unused_name("__sp_task", [pcol])
    path_col = unused_name("__sp_path", [pcol, task_col])
    tasks = _tasks(snap.files, max(1, spark.sparkContext.defaultParallelism))
    keyed = arrivals is not None
    files = spark.createDataFrame(
        [
            (task, storage.join(table.location, f.path), f.partition, (arrivals or {}).get(f.path))
            for task, group in enumerate(tasks)
            for f in group
        ],
        f"`{task_col}` INT, `{path_col}` STRING, `{pcol}` TIMESTAMP, `{ARRIVAL_COLUMN}` BIGINT",
    )
    reader = _Reader(storage.current(), snap.columns, pcol, path_col, keyed)
    extra = f", `{ARRIVAL_COLUMN}` BIGINT" if keyed else ""
    return files.repartition(len(tasks), task_col).mapInArrow(reader, f"{ddl}, `{pcol}` TIMESTAMP{extra}")


def _tasks(files: Sequence[Any], cores: int) -> list[list[Any]]:
    """The files in groups of similar bytes: at least one per core, none much over :data:`TASK_BYTES`
    unless a file alone is."""
    total = sum(f.size for f in files)
    count = max(1, min(len(files), max(cores, -(-total // TASK_BYTES))))
    groups: list[list[Any]] = [[] for _ in range(count)]
    sizes = [0] * count
    for f in sorted(files, key=lambda f: -f.size):  # largest first into the lightest group
        k = sizes.index(min(sizes))
        groups[k].append(f)
        sizes[k] += f.size
    return [g for g in groups if g]


class _Reader:
    """What each task runs: its files read and conformed, a row group at a time (picklable)."""

    def __init__(
        self,
        options: storage.S3Options,
        columns: tuple[Column, ...],
        pcol: str,
        path_col: str,
        keyed: bool = False,
    ) -> None:
        self.options, self.columns, self.pcol, self.path_col = options, columns, pcol, path_col
        self.keyed = keyed  # a keyed table's: each row's arrival, its file's column or its file's tag

    def __call__(self, batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        from metastore.delta.arrow import conform

        storage.configure(self.options)  # this worker's store: the driver's settings
        names = [c.name for c in self.columns]
        if self.keyed:
            names.append(ARRIVAL_COLUMN)
        for batch in batches:
            paths = batch.column(self.path_col).to_pylist()
            values = batch.column(self.pcol).cast(pa.timestamp("us", tz="UTC"))
            tags = batch.column(ARRIVAL_COLUMN).to_pylist() if self.keyed else None
            for i, path in enumerate(paths):
                with storage.open_input(path) as handle:
                    source = pq.ParquetFile(handle)
                    present = [n for n in names if n in source.schema_arrow.names]
                    for group in range(source.num_row_groups):
                        read = source.read_row_group(group, columns=present)
                        data = conform(read, self.columns)
                        value = pa.repeat(values[i], data.num_rows)
                        data = data.append_column(self.pcol, value)
                        if tags is not None:
                            own = read.column(ARRIVAL_COLUMN) if ARRIVAL_COLUMN in present else None
                            arrival = (
                                own
                                if own is not None
                                else pa.repeat(pa.scalar(tags[i], pa.int64()), data.num_rows)
                            )
                            data = data.append_column(ARRIVAL_COLUMN, arrival)
                        yield from data.to_batches()

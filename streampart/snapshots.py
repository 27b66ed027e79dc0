"""Snapshots: a table pinned at one Delta version, what a link shows of it, and its rows without Spark.

The rules every read follows, whether Spark runs it (:mod:`streampart.query`) or not
(``streampart table read``): the metastore's newest recorded version first, then the log at
the newest version or the one asked for (:meth:`Catalog.load`), then that version's file list,
each file checked on disk at the size the log recorded. The log holds committed chunks only, so
a snapshot shows exactly the committed rows; a link reads its source's snapshot, keeping the
partitions it admits. No Spark and no SQL parser here: the CLI imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import check_files, live_files
from metastore.links import Resolved
from metastore.models import Table

__all__ = ["Snapshot", "pin", "read_batches", "view_of"]


@dataclass(frozen=True)
class Snapshot:
    """One table pinned at one Delta version."""

    table: Table
    version: int
    files: tuple[Any, ...]


def pin(catalog: Catalog, table: Table, version: int | None = None, *, check: bool = True) -> Snapshot:
    """``table`` at ``version`` (default: the newest), its log and (unless not ``check``) its files
    checked first (a statement read on another cluster checks the copies it reads instead)."""
    dt = catalog.load(table, version)
    files = tuple(live_files(dt))
    if check:
        check_files(table, files)
    return Snapshot(table, int(dt.version()), files)


def view_of(resolved: Resolved, snap: Snapshot) -> Snapshot:
    """What ``resolved`` shows of ``snap`` (a snapshot of its table): all of it, or what its link admits."""
    if resolved.link is None:
        return snap
    return Snapshot(
        snap.table, snap.version, tuple(resolved.link.filter(snap.files, snap.table, clock.now()))
    )


def read_batches(snap: Snapshot, limit: int | None = None) -> Iterator[Any]:
    """The rows of ``snap`` as Arrow record batches, partition column last; at most ``limit`` rows.

    Exactly its files (oldest partition first), read with pyarrow's Parquet reader as Spark reads
    them in a query: the partition column lives in the log only and is attached per file. Reads
    stop once ``limit`` rows are out, so a peek at a big table reads a file or two.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metastore.delta.arrow import data_schema, table_schema

    table = snap.table
    schema, out_schema = data_schema(table.columns), table_schema(table)
    pcol_type = out_schema.field(table.partition_column).type
    left = limit
    for f in sorted(snap.files, key=lambda f: (f.partition, f.path)):
        if left is not None and left <= 0:
            return
        source = pq.ParquetFile(Path(table.location) / f.path)
        for batch in source.iter_batches(batch_size=min(left or 65536, 65536)):
            if left is not None:
                batch = batch.slice(0, left)
                left -= batch.num_rows
            data = pa.Table.from_batches([batch]).select(schema.names).cast(schema)
            value = pa.array([f.partition] * data.num_rows, type=pcol_type)
            yield from data.append_column(out_schema.field(table.partition_column), value).to_batches()
            if left is not None and left <= 0:
                return

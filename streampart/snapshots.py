"""Snapshots: a table pinned at one Delta version, what a link shows of it, and its rows without Spark.

The rules every read follows, whether Spark runs it (:mod:`streampart.query`) or not
(``streampart table read``): the metastore's newest recorded version first, then the log at
the newest version or the one asked for (:meth:`Catalog.load`), then that version's file list,
each file checked on disk at the size the log recorded. The log holds committed chunks only, so
a snapshot shows exactly the committed rows; a link reads its source's snapshot, keeping the
partitions it admits. A snapshot's columns are its version's, from the log (not the metastore's):
a file written before a column was added reads it as nulls, one written before a type was widened
reads in the wider type, and a read of an older version shows the columns of then. No Spark and
no SQL parser here: the CLI imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from metastore import clock, storage
from metastore.catalog import Catalog
from metastore.delta.files import check_files, live_files
from metastore.delta.metadata import columns_of
from metastore.links import Resolved
from metastore.models import Column, Table

__all__ = ["Snapshot", "pin", "read_batches", "view_of"]


@dataclass(frozen=True)
class Snapshot:
    """One table pinned at one Delta version: its files and its data columns at that version."""

    table: Table
    version: int
    files: tuple[Any, ...]
    columns: tuple[Column, ...]  # the partition column left out, as in ``Table.columns``


def pin(catalog: Catalog, table: Table, version: int | None = None, *, check: bool = True) -> Snapshot:
    """``table`` at ``version`` (default: the newest), its log and (unless not ``check``) its files
    checked first (a statement read on another cluster checks the copies it reads instead)."""
    dt = catalog.load(table, version)
    files = tuple(live_files(dt))
    if check:
        check_files(table, files)
    return Snapshot(table, int(dt.version()), files, columns_of(dt, f"table {table.name}"))


def view_of(resolved: Resolved, snap: Snapshot) -> Snapshot:
    """What ``resolved`` shows of ``snap`` (a snapshot of its table): all of it, or what its link admits."""
    if resolved.link is None:
        return snap
    admitted = tuple(resolved.link.filter(snap.files, snap.table, clock.now()))
    return Snapshot(snap.table, snap.version, admitted, snap.columns)


def read_batches(snap: Snapshot, limit: int | None = None) -> Iterator[Any]:
    """The rows of ``snap`` as Arrow record batches in its columns, partition column last; at most
    ``limit`` rows.

    Exactly its files (oldest partition first), read with pyarrow's Parquet reader as Spark reads
    them in a query: the partition column lives in the log only and is attached per file, and
    each file's rows are conformed to the snapshot's columns (a column added since reads null, a
    widened one in its wider type). Reads stop once ``limit`` rows are out, so a peek at a big
    table reads a file or two.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    from metastore.delta.arrow import conform, partition_field

    table = snap.table
    pcol = partition_field(table)
    if table.keys is not None:
        yield from _keyed_batches(snap, limit)
        return
    left = limit
    for f in sorted(snap.files, key=lambda f: (f.partition, f.path)):
        if left is not None and left <= 0:
            return
        with storage.open_input(storage.join(table.location, f.path)) as handle:
            source = pq.ParquetFile(handle)
            for batch in source.iter_batches(batch_size=min(left or 65536, 65536)):
                if left is not None:
                    batch = batch.slice(0, left)
                    left -= batch.num_rows
                data = conform(pa.Table.from_batches([batch]), snap.columns)
                value = pa.array([f.partition] * data.num_rows, type=pcol.type)
                yield from data.append_column(pcol, value).to_batches()
                if left is not None and left <= 0:
                    return


def _keyed_batches(snap: Snapshot, limit: int | None) -> Iterator[Any]:
    """:func:`read_batches` of a keyed table: its live keys' newest versions (``ingest/keys.py``),
    the rows of the oldest partition first."""
    from ingest.keys import current_rows

    rows = current_rows(snap.table, snap.version, snap.files, snap.columns)
    if rows is None:
        return
    rows = rows.sort_by([(snap.table.partition_column, "ascending")])
    if limit is not None:
        rows = rows.slice(0, limit)
    yield from rows.to_batches()

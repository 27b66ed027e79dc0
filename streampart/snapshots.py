"""A snapshot's rows without Spark (``streampart table read``), read as a query reads them.

The snapshot itself (:func:`metastore.snapshots.pin`, a link's view of it) follows the rules every
read follows. Its columns are its version's, from the log (not the metastore's): a file written before
a column was added reads it as nulls, one written before a type was widened reads in the wider type,
and a read of an older version shows the columns of then. No Spark and no SQL parser here: the CLI
imports this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from metastore import storage
from metastore.snapshots import Snapshot

__all__ = ["read_batches"]


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

"""The deletes a keyed table with a sequence column keeps after its rolls: keys, sequence values, arrivals.

A roll drops a key's winning delete from its standard partition (a plain reader must see no row for
it). On a table ordered by arrival nothing can undo that: any later version arrives later, so it is
newer. On a table ordered by a sequence column, a version arriving later may be older (an
out-of-order change event): it must lose to the delete, so the delete is kept here, beside the
table's data and outside its Delta log — ``<table>/_sp_deleted/<roll>-<attempt>.parquet``, one file
per sweep attempt, written before its commit. What a file holds was committed to the table already
(each delete is a version in its chunk), so a file of an attempt that never committed says nothing
false; and a delete is in force at a version from the version its chunk committed (its arrival),
which is how a read at an older version leaves later ones out.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metastore import storage
from metastore.delta.errors import storage_errors
from metastore.models import ARRIVAL_COLUMN, ARRIVAL_SPAN, Keys, Table

DIRECTORY = "_sp_deleted"


def tombstone_columns(keys: Keys) -> list[str]:
    """What a kept delete holds: its key, its sequence value and its arrival."""
    assert keys.sequence_by is not None
    return [*keys.columns, keys.sequence_by, ARRIVAL_COLUMN]


def write_tombstones(table: Table, name: str, data: pa.Table) -> str:
    """Keep ``data`` (:func:`tombstone_columns`) as ``name``; its path in the table."""
    path = f"{DIRECTORY}/{name}.parquet"
    target = storage.join(table.location, path)
    with storage_errors(f"keeping the deletes of {table.name}"), storage.open_output(target) as f:
        pq.write_table(data, f, compression="snappy")
    return path


def read_tombstones(table: Table, version: int) -> pa.Table | None:
    """The deletes kept for ``table`` in force at ``version`` (None: none): its newest of each key.

    Raises:
        StorageError: the store could not be read.
    """
    keys = table.keys
    if keys is None or keys.sequence_by is None:
        return None
    directory = storage.join(table.location, DIRECTORY)
    with storage_errors(f"reading the deletes kept for {table.name}"):
        if not storage.is_dir(directory):
            return None
        parts = []
        for entry in storage.list_dir(directory):
            if not entry.name.endswith(".parquet"):
                continue
            with storage.open_input(storage.join(directory, entry.name)) as f:
                parts.append(pq.read_table(f))
    if not parts:
        return None
    data = pa.concat_tables(parts, promote_options="permissive")
    data = data.filter(pc.less(data.column(ARRIVAL_COLUMN), (version + 1) * ARRIVAL_SPAN))
    return data if data.num_rows else None

"""Keyed tables' versions in Arrow: which records delete their key, and the newest version of each key.

Every record written to a keyed table (``metastore/models/keys.py``) is a version of its key. A chunk
is staged with its newest version of each key only — the greatest by the table's sequence column,
then by its place in the chunk — so one staged file holds a key at most once, and the order of a
key's versions across files is the order of their commits (the arrival the commit's add actions
carry). The same resolution, with the arrival of every row given, is what a roll and a read apply
to the versions of several files (:func:`newest_versions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.errors import MalformedChunkError
from metastore.models import ARRIVAL_COLUMN, VALID_FROM, VALID_TO, Column, Keys, Table

_PLACE = "__sp_place"  # a temporary column: a row's place in what is resolved
KEPT = "__sp_kept"  # a temporary column: a version kept by a roll or an expiry (it is no row)


def deletes(keys: Keys, data: pa.Table) -> pa.ChunkedArray | pa.Array:
    """Which rows of ``data`` delete their key (its op value is a delete value; a null op upserts)."""
    if keys.op_column is None or keys.op_column not in data.column_names:
        return pa.array([False] * data.num_rows, pa.bool_())
    found = pc.is_in(data.column(keys.op_column), value_set=pa.array(list(keys.delete_ops), pa.string()))
    return pc.fill_null(found, False)


def op_refusal(keys: Keys, value: Any) -> str:
    """Why a record whose op column holds ``value`` is a bad record."""
    return (
        f"column {keys.op_column!r}: {value!r} is neither an upsert ({', '.join(keys.upsert_ops)}) nor a "
        f"delete ({', '.join(keys.delete_ops)})"
    )


def ops_valid(keys: Keys, array: Any) -> bool:
    """Whether every value of ``array`` (a keyed table's op column) upserts or deletes (or is null)."""
    known = pa.array([*keys.upsert_ops, *keys.delete_ops], pa.string())
    return bool(pc.all(pc.fill_null(pc.is_in(array, value_set=known), True)).as_py())


def check_ops(keys: Keys, data: pa.Table) -> None:
    """Refuse a chunk holding an op value that neither upserts nor deletes.

    Raises:
        MalformedChunkError: naming the column, the first such value and how many records hold one.
    """
    if keys.op_column is None or keys.op_column not in data.column_names or data.num_rows == 0:
        return
    column = data.column(keys.op_column)
    known = pa.array([*keys.upsert_ops, *keys.delete_ops], pa.string())
    unknown = pc.and_(pc.invert(pc.is_in(column, value_set=known)), pc.is_valid(column))
    count = pc.sum(unknown).as_py() or 0
    if count:
        first = column.filter(unknown)[0].as_py()
        raise MalformedChunkError(
            f"column {keys.op_column!r} holds {first!r} in {count} record(s): neither an upsert "
            f"({', '.join(keys.upsert_ops)}) nor a delete ({', '.join(keys.delete_ops)}); "
            "nothing was committed"
        )


def newest_versions(keys: Keys, data: pa.Table, order: Sequence[str] = ()) -> pa.Table:
    """The newest version of each key in ``data``: the row greatest by the sequence column, then by
    the columns ``order`` (each ascending: later is newer), then by its place in ``data``.

    Deletes are kept (a delete is a key's version too); :func:`live` drops them. Rows come out in
    the order of their keys.
    """
    if data.num_rows <= 1:
        return data
    placed = data.append_column(_PLACE, pa.array(range(data.num_rows), pa.int64()))
    by = [(c, "ascending") for c in keys.columns]
    if keys.sequence_by is not None:
        by.append((keys.sequence_by, "ascending"))
    by += [(c, "ascending") for c in order]
    by.append((_PLACE, "ascending"))
    ordered = placed.sort_by(by)
    n = ordered.num_rows
    last = None  # whether each row is the last of its key's run
    for name in keys.columns:
        column = ordered.column(name)
        differs = pc.not_equal(column.slice(0, n - 1), column.slice(1))
        last = differs if last is None else pc.or_(last, differs)
    assert last is not None
    flags = pa.concat_arrays([c for c in pa.chunked_array(last).chunks] + [pa.array([True])])
    return ordered.filter(flags).drop_columns([_PLACE])


def live(keys: Keys, data: pa.Table) -> pa.Table:
    """``data`` (one version per key, :func:`newest_versions`) without the keys whose version deletes."""
    if keys.op_column is None:
        return data
    return data.filter(pc.invert(deletes(keys, data)))


def staged_versions(keys: Keys | None, data: pa.Table) -> pa.Table:
    """What a chunk of ``data`` stages: on a keyed table its newest version of each key (its op values
    checked first), or with history each distinct version (:func:`distinct_versions`, valid from its
    sequence value, until none yet); on a table of appends ``data`` itself."""
    if keys is None:
        return data
    check_ops(keys, data)
    if keys.history:
        return valid_from_sequence(keys, distinct_versions(keys, data))
    return newest_versions(keys, data)


def distinct_versions(keys: Keys, data: pa.Table, order: Sequence[str] = ()) -> pa.Table:
    """With history: one row per key and sequence value, the latest (by ``order``, then place) — a
    retry, or a correction of the same version. Sorted by key, then sequence value."""
    assert keys.sequence_by is not None
    by_version = keys.model_copy(update={"columns": (*keys.columns, keys.sequence_by), "sequence_by": None})
    return newest_versions(by_version, data, order)


def valid_from_sequence(keys: Keys, data: pa.Table, valid_to: Any = None) -> pa.Table:
    """``data`` with :data:`VALID_FROM` its sequence value and :data:`VALID_TO` ``valid_to`` (an array;
    None: null), where it has those columns."""
    assert keys.sequence_by is not None
    for name, values in ((VALID_FROM, data.column(keys.sequence_by)), (VALID_TO, valid_to)):
        if name not in data.column_names:
            continue
        i = data.column_names.index(name)
        kind = data.schema.field(i).type
        column = pa.nulls(data.num_rows, kind) if values is None else pc.cast(values, kind)
        data = data.set_column(i, data.schema.field(i), column)
    return data


def history_rows(keys: Keys, versions: pa.Table, kept: pa.Table | None = None) -> pa.Table:
    """A table with history's rows from ``versions`` (versions of its keys, with their
    :data:`ARRIVAL_COLUMN`; deletes among them) and the deletes rolls ``kept`` (their key, sequence
    value and arrival): each distinct version (:func:`distinct_versions`) that is not a delete, valid
    from its sequence value until the next version's of its key (a delete's too; null: the key's
    current row). Sorted by key, then sequence value; other columns (provenance) kept."""
    assert keys.sequence_by is not None
    versions = versions.append_column(KEPT, pa.repeat(False, versions.num_rows))
    if kept is not None and kept.num_rows:
        versions = pa.concat_tables([versions, as_deletes(keys, kept, versions.schema)])
    distinct = distinct_versions(keys, versions, [ARRIVAL_COLUMN])
    n = distinct.num_rows
    if n == 0:
        return distinct.drop_columns([KEPT])
    seq = distinct.column(keys.sequence_by)
    same = None  # whether each row's key is the next row's
    for name in keys.columns:
        column = distinct.column(name)
        equal = pc.equal(column.slice(0, n - 1), column.slice(1))
        same = equal if same is None else pc.and_(same, equal)
    assert same is not None
    follows = pa.concat_arrays([*pa.chunked_array(same).chunks, pa.array([False])])
    following = pa.concat_arrays([*pa.chunked_array(seq.slice(1)).chunks, pa.nulls(1, seq.type)])
    valid_to = pc.if_else(follows, following, pa.nulls(n, seq.type))
    rows = valid_from_sequence(keys, distinct, valid_to)
    gone = pc.or_(deletes(keys, rows), rows.column(KEPT))
    return rows.filter(pc.invert(gone)).drop_columns([KEPT])


def as_deletes(keys: Keys, kept: pa.Table, schema: pa.Schema) -> pa.Table:
    """Deletes kept by rolls and versions kept by expiries (key, sequence value, arrival) as versions
    in ``schema`` (with its :data:`KEPT` column: true) that end a version and are no row."""
    n = kept.num_rows
    columns = []
    for field in schema:
        if field.name == KEPT:
            columns.append(pa.repeat(True, n))
        elif field.name in kept.column_names:
            columns.append(pc.cast(kept.column(field.name), field.type))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def version_order(keys: Keys) -> list[str]:
    """The columns that order a key's versions: the sequence column (if any), then the arrival."""
    return [*([keys.sequence_by] if keys.sequence_by else []), ARRIVAL_COLUMN]


def newer_versions(found: pa.Table, order: list[str], prefix: str) -> pa.ChunkedArray:
    """Whether each row's version (columns ``order``) is newer than the other beside it (the same
    columns, named ``prefix`` + name): compared in that order, a later column deciding ties only."""
    result = None
    for c in reversed(order):
        gt = pc.greater(found.column(c), found.column(prefix + c))
        if result is None:
            result = gt
        else:
            result = pc.or_(gt, pc.and_(pc.equal(found.column(c), found.column(prefix + c)), result))
    assert result is not None
    return result


def beaten_by(keys: Keys, rows: pa.Table, kept: pa.Table) -> pa.Table:
    """The keys of ``rows`` (one version each, with :data:`ARRIVAL_COLUMN`) whose version is older
    than a delete ``kept`` for them (``metastore/delta/tombstones.py``)."""
    order = version_order(keys)
    prefix = "__sp_mine_"
    mine = rows.select([*keys.columns, *order]).rename_columns([*keys.columns, *(prefix + c for c in order)])
    found = kept.select([*keys.columns, *order]).join(mine, list(keys.columns), join_type="inner")
    older = found.filter(newer_versions(found, order, prefix)).select(list(keys.columns))
    return older.group_by(list(keys.columns)).aggregate([])


def without_keys(keys: Keys, rows: pa.Table, gone: pa.Table) -> pa.Table:
    """``rows`` but those of the keys in ``gone``."""
    if gone.num_rows == 0:
        return rows
    return rows.join(gone, list(keys.columns), join_type="left anti")


def current_rows(
    table: Table, version: int, files: Sequence[Any], columns: Sequence[Column]
) -> pa.Table | None:
    """The live rows of a keyed table's snapshot at ``version`` (its live ``files``, its ``columns``),
    read without Spark: :func:`newest_rows` without the deletes and the arrival column. None: no file.

    Raises:
        StorageError: a file or the log could not be read.
    """
    keys = table.keys
    assert keys is not None
    if keys.history:
        versions = every_version(table, version, files, columns)
        if versions is None:
            return None
        from metastore.delta.tombstones import read_tombstones

        rows = history_rows(keys, versions, read_tombstones(table, version))
        return rows.drop_columns([ARRIVAL_COLUMN])
    newest = newest_rows(table, version, files, columns)
    return None if newest is None else live(keys, newest).drop_columns([ARRIVAL_COLUMN])


def newest_rows(
    table: Table, version: int, files: Sequence[Any], columns: Sequence[Column]
) -> pa.Table | None:
    """The newest version of each key in ``files`` (live files of a keyed table's snapshot at
    ``version``), read without Spark, with its :data:`ARRIVAL_COLUMN` and the partition column last:
    every version read, the newest of each key kept, those older than a delete a roll kept dropped
    (``metastore/delta/tombstones.py``); deletes are kept. None: no file.

    Raises:
        StorageError: a file or the log could not be read.
    """
    from metastore.delta.tombstones import read_tombstones

    keys = table.keys
    assert keys is not None
    versions = every_version(table, version, files, columns)
    if versions is None:
        return None
    newest = newest_versions(keys, versions, [ARRIVAL_COLUMN])
    kept = read_tombstones(table, version)  # deletes a roll kept: older versions lose to them
    if kept is not None:
        newest = without_keys(keys, newest, beaten_by(keys, newest, kept))
    return newest


def every_version(
    table: Table, version: int, files: Sequence[Any], columns: Sequence[Column]
) -> pa.Table | None:
    """Every row of ``files`` (live files of a keyed table's snapshot at ``version``), read without
    Spark, with its :data:`ARRIVAL_COLUMN` and the partition column last. None: no file.

    Raises:
        StorageError: a file or the log could not be read.
    """
    import pyarrow.parquet as pq

    from metastore import storage
    from metastore.delta.arrivals import arrivals
    from metastore.delta.arrow import conform, partition_field

    pcol = partition_field(table)
    tags = arrivals(table, version) if any(f.staged for f in files) else {}
    parts = []
    for f in files:
        with storage.open_input(storage.join(table.location, f.path)) as handle:
            read = pq.read_table(handle)
        data = conform(read, tuple(columns)).append_column(
            pcol, pa.array([f.partition] * read.num_rows, pcol.type)
        )
        own = read.column(ARRIVAL_COLUMN) if ARRIVAL_COLUMN in read.column_names else None
        arrival = own if own is not None else pa.array([tags.get(f.path)] * read.num_rows, pa.int64())
        parts.append(data.append_column(ARRIVAL_COLUMN, arrival.cast(pa.int64())))
    if not parts:
        return None
    return pa.concat_tables(parts)

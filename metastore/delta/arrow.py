"""The Arrow schemas of a table: its Delta column types as Arrow types, for its data files and its log.

Also :func:`conform`: data written under an older schema (a column added since, a type widened
since) made to fit the table's columns now.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from metastore.errors import TableIntegrityError
from metastore.models import Column, Table, widening_refusal

_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


_DELTA = {arrow: delta for delta, arrow in _ARROW.items()}
# Other Arrow layouts of the same Delta type, as pyarrow reads a file that stored them in its
# Arrow schema: delta-rs appending a polars frame writes ``string_view``, say. Cast, not refused.
_DELTA.update(
    {
        pa.large_string(): "string",
        pa.string_view(): "string",
        pa.large_binary(): "binary",
        pa.binary_view(): "binary",
    }
)


def arrow_type(delta_type: str) -> pa.DataType:
    if delta_type.startswith("decimal("):
        p, sc = delta_type[len("decimal(") : -1].split(",")
        return pa.decimal128(int(p), int(sc))
    return _ARROW[delta_type]


def data_schema(columns: Sequence[Column]) -> pa.Schema:
    """Arrow schema of the data files (the partition column lives in the Delta log only)."""
    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in columns])


def table_schema(table: Table) -> pa.Schema:
    """Arrow schema of the whole table: data columns, then the partition column."""
    return data_schema(table.columns).append(partition_field(table))


def partition_field(table: Table) -> pa.Field:
    """The partition column's Arrow field (its values live in the Delta log, not in data files)."""
    return pa.field(table.partition_column, pa.timestamp("us", tz="UTC"), nullable=False)


def delta_type(arrow: pa.DataType) -> str | None:
    """The Delta type of an Arrow type streampart writes (None: none of them)."""
    if pa.types.is_decimal128(arrow):
        return f"decimal({arrow.precision},{arrow.scale})"
    return _DELTA.get(arrow)


def conform(data: pa.RecordBatch | pa.Table, columns: Sequence[Column]) -> pa.RecordBatch | pa.Table:
    """``data`` with exactly ``columns``, in their order: absent ones as nulls, widened ones cast.

    Only the widenings of ``metastore/models/evolution.py`` are cast, and safely (exact values);
    columns of ``data`` that ``columns`` lack are left out.

    Raises:
        TableIntegrityError: a column ``data`` holds in a type that does not widen to the
            column's, or a NOT NULL column ``data`` lacks.
    """
    schema = data_schema(columns)
    arrays = []
    for column, field in zip(columns, schema, strict=True):
        if column.name not in data.schema.names:
            if not column.nullable:
                raise TableIntegrityError(f"column {column.name!r} is NOT NULL and the data lacks it")
            arrays.append(pa.nulls(data.num_rows, field.type))
            continue
        array = data.column(column.name)
        if array.type != field.type:
            old = delta_type(array.type)
            reason = (
                f"{array.type} is not a Delta type" if old is None else widening_refusal(old, column.type)
            )
            if reason:
                raise TableIntegrityError(
                    f"column {column.name!r} cannot be read as {column.sql_type}: {reason}"
                )
            array = array.cast(field.type, safe=True)
        arrays.append(array)
    if isinstance(data, pa.Table):
        return pa.Table.from_arrays(arrays, schema=schema)
    return pa.RecordBatch.from_arrays(arrays, schema=schema)

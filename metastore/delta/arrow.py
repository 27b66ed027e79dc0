"""The Arrow schemas of a table: its Delta column types as Arrow types, for its data files and its log."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from metastore.models import Column, Table

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
    return data_schema(table.columns).append(
        pa.field(table.partition_column, pa.timestamp("us", tz="UTC"), nullable=False)
    )

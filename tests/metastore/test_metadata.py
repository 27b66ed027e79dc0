"""A schema change as a hand-written ``metaData`` commit (metastore/delta/metadata.py), read back by
readers that are not streampart: delta-rs, polars and a pyarrow dataset over the files."""

from __future__ import annotations

import json
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Field
from deltalake.schema import PrimitiveType

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta import append
from metastore.delta.checkpoints import CHECKPOINT_INTERVAL
from metastore.delta.layout import partition_value_text, staged_dir
from metastore.delta.log import SEAL_PROPERTY, commit_file
from metastore.delta.metadata import current_metadata, metadata_action, schema_at
from metastore.errors import UserInputError
from metastore.models import Column, parse_column_change, plan_alter
from tests.fixtures import make_table
from tests.helpers import jsonl

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, qty INT, price FLOAT, amount DECIMAL(5,2)"
OLD_ROWS = [
    {"id": 1, "ts": "2026-11-21T10:15:00Z", "msg": "a", "qty": -(2**31), "price": 0.1, "amount": "-999.99"},
    {
        "id": 2,
        "ts": "2026-11-21T10:15:00Z",
        "msg": "b",
        "qty": 2**31 - 1,
        "price": 3.0e38,
        "amount": "999.99",
    },
]
F32_01 = 0.10000000149011612  # 0.1 as a float, widened exactly
F32_3E38 = float(pa.array([3.0e38], pa.float32()).cast(pa.float64())[0].as_py())
# (id, qty, price, amount, coupon) after the change, the old rows then the new one
EXPECTED = [
    (1, -(2**31), F32_01, Decimal("-999.99"), None),
    (2, 2**31 - 1, F32_3E38, Decimal("999.99"), None),
    (3, -(2**63), 1e300, Decimal("-9999999.99"), "X"),
]
NEW_DATA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("msg", pa.string()),
        ("qty", pa.int64()),
        ("price", pa.float64()),
        ("amount", pa.decimal128(9, 2)),
        ("coupon", pa.string()),
    ]
)


def _log_metadata(root: Path, version: int) -> tuple[str, dict[str, Any]]:
    """The ``metaData`` line of a commit file, as written and as parsed."""
    for line in Path(commit_file(str(root), version)).read_text().splitlines():
        if '"metaData"' in line:
            return line, json.loads(line)["metaData"]
    raise AssertionError(f"no metaData in version {version}")


def _rows(table: pa.Table | pl.DataFrame) -> list[tuple[Any, ...]]:
    if isinstance(table, pl.DataFrame):
        table = table.to_arrow()
    names = ["id", "qty", "price", "amount", "coupon"]
    return sorted(zip(*(table.column(n).to_pylist() for n in names), strict=True))


def _evolve(catalog: Any, table: Any, read_version: int) -> tuple[int, tuple[Column, ...]]:
    """One commit: the new ``metaData`` and a file written in the new types (id 3)."""
    root = Path(table.location)
    columns = plan_alter(
        table.columns,
        table.time_column,
        table.partition_column,
        add=[parse_column_change("coupon STRING", "--add-column")],
        widen=[
            parse_column_change(t, "--widen-column")
            for t in ("qty BIGINT", "price DOUBLE", "amount DECIMAL(9,2)")
        ],
    )
    action = metadata_action(current_metadata(root), columns, table.partition_column)
    new = pa.table(
        {
            "id": [3],
            "ts": pa.array([1_790_000_000_000_000], pa.timestamp("us", tz="UTC")),
            "msg": ["c"],
            "qty": [-(2**63)],
            "price": [1e300],
            "amount": [Decimal("-9999999.99")],
            "coupon": ["X"],
        },
        schema=NEW_DATA,
    )
    part = catalog.store.streaming_partition(table.id).value
    path = f"{staged_dir(table, part)}/evolved-0.parquet"  # where polars finds the partition value
    pq.write_table(new, root / path)
    st = (root / path).stat()
    entry = (path, partition_value_text(part), 1, st.st_size, int(st.st_mtime * 1000))
    commit_info, *adds = append.append_actions(
        table.partition_column, [entry], {"k": "evolve"}, int(time.time() * 1000)
    ).splitlines(keepends=True)
    body = b"".join([commit_info, json.dumps({"metaData": action}).encode() + b"\n", *adds])
    return append.publish(table.location, body, read_version, 5), columns


def test_an_added_column_reads_null_and_widened_values_read_exactly_in_every_reader(catalog: Any) -> None:
    table = make_table(catalog, schema=SCHEMA)
    root = Path(table.location)
    ChunkWriter(catalog, table).write(jsonl(OLD_ROWS), Format.JSONL)  # version 1, the old types
    sealed = catalog.warehouse.seal(table, "roll-1")  # the seal property is in the configuration
    seal = DeltaTable(str(root)).metadata().configuration[SEAL_PROPERTY]
    version, columns = _evolve(catalog, table, sealed)
    assert version == sealed + 1

    dt = DeltaTable(str(root))
    assert dt.version() == version
    got = dt.to_pyarrow_table()
    assert got.schema.field("qty").type == pa.int64() and got.schema.field("amount").type == pa.decimal128(
        9, 2
    )
    assert got.schema.field("price").type == pa.float64() and got.schema.field("coupon").type == pa.string()
    assert _rows(got) == EXPECTED
    assert _rows(pl.read_delta(str(root))) == EXPECTED
    files = [u.removeprefix("file://") for u in dt.file_uris()]
    assert len(files) == 2
    assert _rows(ds.dataset(files, schema=NEW_DATA, format="parquet").to_table()) == EXPECTED

    # the configuration survives: the roll's seal and the checkpoint interval
    configuration = dt.metadata().configuration
    assert configuration[SEAL_PROPERTY] == seal and configuration[CHECKPOINT_INTERVAL] == "100"
    # the log's schema at each version: the old columns before, the new after
    assert schema_at(root, sealed) == table.columns == schema_at(root, 1)
    assert schema_at(root) == columns == schema_at(root, version)
    old = DeltaTable(str(root), version=sealed).to_pyarrow_table()
    assert "coupon" not in old.column_names and old.schema.field("qty").type == pa.int32()

    # a checkpoint of the new version reads the same, and so does the metaData read from it
    dt.create_checkpoint()
    assert _rows(DeltaTable(str(root)).to_pyarrow_table()) == EXPECTED
    assert current_metadata(root) == _log_metadata(root, version)[1]


def test_current_metadata_is_the_log_s_metadata_action(catalog: Any) -> None:
    table = make_table(catalog, schema=SCHEMA)
    root = Path(table.location)
    sealed = catalog.warehouse.seal(table, "roll-1")
    assert current_metadata(root, 0) == _log_metadata(root, 0)[1]
    assert current_metadata(root) == _log_metadata(root, sealed)[1]
    assert SEAL_PROPERTY in current_metadata(root)["configuration"]


def test_a_hand_written_added_column_is_what_delta_rs_alter_add_columns_writes(catalog: Any) -> None:
    table = make_table(catalog, schema=SCHEMA)
    root = Path(table.location)
    catalog.warehouse.seal(table, "roll-1")
    before = current_metadata(root)
    columns = plan_alter(
        table.columns,
        table.time_column,
        table.partition_column,
        add=[parse_column_change("coupon STRING", "--add-column")],
    )
    expected = metadata_action(before, columns, table.partition_column)
    dt = DeltaTable(str(root))
    dt.alter.add_columns(Field("coupon", PrimitiveType("string"), nullable=True))
    line, written = _log_metadata(root, int(DeltaTable(str(root)).version()))
    assert written == expected
    # byte for byte, but for the order of the configuration's keys (delta-rs keeps them in a hash map)
    unordered = {"metaData": {**written, "configuration": expected["configuration"]}}
    assert json.dumps({"metaData": expected}, separators=(",", ":")) == json.dumps(
        unordered, separators=(",", ":")
    )
    assert line.startswith(
        json.dumps({"metaData": expected}, separators=(",", ":")).split('"configuration"')[0]
    )
    # the new field is the last one, after the partition column
    names = [f["name"] for f in json.loads(written["schemaString"])["fields"]]
    assert names == [*(c.name for c in table.columns), table.partition_column, "coupon"]


def test_a_metadata_action_cannot_drop_a_column_or_take_the_partition_column(catalog: Any) -> None:
    table = make_table(catalog, schema=SCHEMA)
    current = current_metadata(Path(table.location))
    with pytest.raises(UserInputError, match="cannot be dropped: msg"):
        metadata_action(current, [c for c in table.columns if c.name != "msg"], table.partition_column)
    with pytest.raises(UserInputError, match="partition column"):
        metadata_action(
            current,
            [*table.columns, Column(name=table.partition_column, type="timestamp")],
            table.partition_column,
        )

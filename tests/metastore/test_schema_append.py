"""An append that carries a schema change (``append_actions(…, schema_change=…)``, metastore/delta/append.py):
the ``metaData`` and the rows that bring its columns land in one Delta version (docs/design/
schema-changes.md, invariant 4), read back by engines that are not streampart: delta-rs, polars and
DuckDB over the live files. Like a roll's seal, it makes blind appends planned before it conflict."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta import append
from metastore.delta.arrow import data_schema
from metastore.delta.files import write_parquet
from metastore.delta.layout import partition_value_text, staged_dir, staging_path
from metastore.delta.log import ACTIONS_KEY, SCHEMA_KEY, commit_file, commit_file_damaged
from metastore.delta.metadata import current_metadata, metadata_action
from metastore.errors import ConflictError
from metastore.models import Column, parse_column_change, plan_alter
from tests.fixtures import make_table
from tests.helpers import all_ids, records

OLD = list(range(10))  # rows written before the change: no coupon
NEW = list(range(10, 15))  # rows that bring it
EXPECTED = [(i, None) for i in OLD] + [(i, f"c{i}") for i in NEW]


def _evolved(catalog: Any, table: Any) -> tuple[tuple[Column, ...], tuple[str, str, int, int, int]]:
    """The table's columns with ``coupon STRING`` added, and a staged file of NEW rows that carry it."""
    columns = plan_alter(
        table.columns,
        table.time_column,
        table.partition_column,
        add=[parse_column_change("coupon STRING", "--add-column")],
    )
    part = catalog.store.streaming_partition(table.id).value
    data = pa.table(
        {
            "id": NEW,
            "ts": pa.array([1_795_000_000_000_000] * len(NEW), pa.timestamp("us", tz="UTC")),
            "msg": [f"m{i}" for i in NEW],
            "coupon": [f"c{i}" for i in NEW],
        },
        schema=data_schema(columns),
    )
    path = f"{staged_dir(table, part)}/evolved-0.parquet"  # where polars finds the partition value
    size = write_parquet(table, path, data)
    mtime = int((Path(table.location) / path).stat().st_mtime * 1000)
    return columns, (path, partition_value_text(part), len(NEW), size, mtime)


def _pairs(rows: Any) -> list[tuple[Any, Any]]:
    if isinstance(rows, pl.DataFrame):
        rows = rows.to_arrow()
    return sorted(zip(rows.column("id").to_pylist(), rows.column("coupon").to_pylist(), strict=True))


def test_rows_and_the_column_they_bring_land_in_one_version_and_every_engine_reads_old_and_new_files(
    catalog: Any,
) -> None:
    table = make_table(catalog)
    root = Path(table.location)
    old = ChunkWriter(catalog, table).write(records(OLD), Format.JSONL).version  # without coupon
    assert old == 1
    columns, entry = _evolved(catalog, table)
    action = metadata_action(current_metadata(root), columns, table.partition_column)
    body = append.append_actions(
        table.partition_column,
        [entry],
        {SCHEMA_KEY: "alter-1"},
        int(time.time() * 1000),
        "app-1",
        schema_change=action,
    )
    lines = [json.loads(line) for line in body.decode().splitlines()]
    # commitInfo, then the metaData, then the txn and the adds
    assert [next(iter(a)) for a in lines] == ["commitInfo", "metaData", "txn", "add"]
    assert lines[0]["commitInfo"][SCHEMA_KEY] == "alter-1" and lines[0]["commitInfo"][ACTIONS_KEY] == "1"
    assert lines[1]["metaData"] == action
    version = append.publish(table.location, body, old, 5, "app-1")
    assert version == old + 1

    dt = DeltaTable(str(root))
    assert dt.version() == version and "coupon" in [f.name for f in dt.schema().fields]
    assert _pairs(dt.to_pyarrow_table()) == EXPECTED  # delta-rs: the old file reads null
    assert _pairs(pl.read_delta(str(root))) == EXPECTED
    files = [u.removeprefix("file://") for u in dt.file_uris()]
    assert len(files) == 2
    got = duckdb.sql(
        "SELECT id, coupon FROM read_parquet($files, union_by_name = true) ORDER BY id",
        params={"files": files},
    )
    assert got is not None and got.fetchall() == EXPECTED
    # the version before it has the old schema: no column appears without its rows
    before = DeltaTable(str(root), version=old)
    assert (
        "coupon" not in [f.name for f in before.schema().fields] and before.to_pyarrow_table().num_rows == 10
    )
    assert not commit_file_damaged(table, version)


def test_an_append_planned_before_a_schema_change_conflicts_and_lands_when_planned_again(
    catalog: Any,
) -> None:
    table = make_table(catalog)
    wh = catalog.warehouse
    root = Path(table.location)
    columns, entry = _evolved(catalog, table)
    action = metadata_action(current_metadata(root), columns, table.partition_column)
    body = append.append_actions(
        table.partition_column, [entry], {}, int(time.time() * 1000), schema_change=action
    )
    assert json.loads(body.splitlines()[0])["commitInfo"][SCHEMA_KEY] == "schema of 5 fields"  # 4 + partition
    changed = append.publish(table.location, body, 0, 5)
    w = ChunkWriter(catalog, table)  # its table: the columns of before the change
    path = staging_path("planned-before", 0)
    write_parquet(table, path, w.parse(records(OLD), Format.JSONL).good)
    part = catalog.store.streaming_partition(table.id).value
    with pytest.raises(ConflictError, match=f"version {changed} changed the table's metadata"):
        wh.commit_files(table, changed - 1, [(path, part, len(OLD))], {"k": "old"})
    assert DeltaTable(str(root)).version() == changed  # it wrote nothing
    # planned again on the version of the change: a file without the new column is still valid
    assert wh.commit_files(table, changed, [(path, part, len(OLD))], {"k": "old"}) == changed + 1
    assert _pairs(DeltaTable(str(root)).to_pyarrow_table()) == EXPECTED
    assert sorted(all_ids(table)) == OLD + NEW


def test_a_schema_change_s_commit_cut_after_its_commit_info_is_damaged(catalog: Any) -> None:
    table = make_table(catalog)
    root = Path(table.location)
    columns, _ = _evolved(catalog, table)
    action = metadata_action(current_metadata(root), columns, table.partition_column)
    body = append.append_actions(
        table.partition_column, [], {SCHEMA_KEY: "alter-1"}, int(time.time() * 1000), schema_change=action
    )
    info, metadata = body.splitlines(keepends=True)
    assert json.loads(info)["commitInfo"][ACTIONS_KEY] == "0"  # a metaData-only commit adds nothing
    version = append.publish(table.location, info, 0, 5)  # lost its metaData line, as a torn write would
    assert commit_file_damaged(table, version)
    Path(commit_file(table.location, version)).write_bytes(info + metadata)
    assert not commit_file_damaged(table, version)
    assert "coupon" in [f.name for f in DeltaTable(str(root)).schema().fields]

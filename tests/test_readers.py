"""Delta readers nobody here wrote read every table as delta-rs does, row for row.

polars' native ``read_delta`` takes each file's partition value from its path (a Hive
``<pcol>=<value>`` directory), not from the log. Chunk files used to be committed as
``_staging/<chunk>.parquet``: before the first roll polars read the partition column as null,
after it (a standard partition plus staged chunks, the normal state) it failed with
``SchemaFieldNotFoundError``. Committed chunk files are now placed under
``_staging/<pcol>=<value>/`` (``metastore/delta/staging.py``); tables written before still read
(and roll) as they did, and polars reads them once their old chunks have rolled.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta import layout, staging
from metastore.delta.checkpoints import set_log_settings
from metastore.delta.files import live_files
from metastore.delta.layout import legacy_dir, partition_dir, readable_dir
from metastore.integrity import check_table
from metastore.models import Mode, Table
from scheduler.config import HousekeepingConfig
from scheduler.housekeeping import Housekeeper
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import records

COLUMNS = ["id", "ts", "msg", "ts_period"]
H10 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def rows_by_deltalake(table: Table) -> list[tuple[Any, ...]]:
    data = DeltaTable(table.location).to_pyarrow_table(columns=COLUMNS)
    return sorted(zip(*(data.column(c).to_pylist() for c in COLUMNS), strict=True))


def rows_by_polars(table: Table) -> list[tuple[Any, ...]]:
    frame = pl.read_delta(table.location)  # the native reader (use_pyarrow=False)
    return sorted(frame.select(COLUMNS).iter_rows())


def rows_by_duckdb_paths(table: Table) -> list[tuple[Any, ...]]:
    """DuckDB over the log's file list, partition values from the paths (its delta extension is a
    download: not here)."""
    files = DeltaTable(table.location).file_uris()
    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        rel = con.execute(
            f"SELECT {', '.join(COLUMNS)} FROM read_parquet($files, hive_partitioning = true, "
            "hive_types = {'ts_period': TIMESTAMPTZ})",
            {"files": files},
        )
        return sorted(rel.fetchall())


def assert_readers_agree(table: Table, expected_ids: list[int]) -> list[tuple[Any, ...]]:
    by_delta = rows_by_deltalake(table)
    assert sorted(r[0] for r in by_delta) == expected_ids
    assert all(r[3] is not None for r in by_delta)
    assert rows_by_polars(table) == by_delta
    assert rows_by_duckdb_paths(table) == by_delta
    return by_delta


@pytest.mark.parametrize("mode", [Mode.ARRIVAL, Mode.EVENT_TIME])
def test_polars_duckdb_and_deltalake_agree_on_a_rolled_plus_streaming_table(sqlite_catalog, mode) -> None:
    catalog = sqlite_catalog
    table = make_table(catalog, mode=mode)
    w = ChunkWriter(catalog, table)
    # event time: rows of two hours, so one partition rolls and the other stays streaming
    first, second = "2026-11-21T10:15:00Z", "2026-11-21T11:15:00Z"
    w.write(records(range(10), first), Format.JSONL)
    w.write(records(range(10, 15), first), Format.JSONL)
    # before any roll: only chunk files (polars read their partition column as null)
    assert_readers_agree(table, list(range(15)))
    if mode is Mode.ARRIVAL:
        Roller(catalog).roll_table(table, force=True)
        w.write(records(range(15, 20), first), Format.JSONL)
    else:
        w.write(records(range(15, 20), second), Format.JSONL)
        Roller(catalog).roll_table(table, now=H10 + timedelta(hours=1, minutes=1))
    w.write(records(range(20, 23), second), Format.JSONL)
    by_delta = assert_readers_agree(table, list(range(23)))
    assert len({r[3] for r in by_delta}) == 2  # a standard and a streaming partition
    # every live file sits in a directory naming the partition the log gives it
    wh = catalog.warehouse
    for f in live_files(wh.load(table)):
        assert f.path.split("/")[-2] == readable_dir(table.partition_column, f.partition), f.path


def test_a_table_written_in_the_old_layout_reads_rolls_and_is_cleaned(sqlite_catalog, monkeypatch) -> None:
    """Chunk files committed as ``_staging/<name>`` and a standard partition in a delta-rs-escaped
    directory (what streampart wrote before) stay readable, roll into the new layout, and the
    legacy partition keeps its directory."""
    catalog = sqlite_catalog
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    old = catalog.store.streaming_partition(table.id).value
    with monkeypatch.context() as old_code:  # the writer and roller as they were
        old_code.setattr(staging, "place", lambda table, relative, value: relative)
        old_code.setattr(
            layout, "readable_dir", lambda column, value, bucket=False: legacy_dir(column, value)
        )
        w.write(records(range(5)), Format.JSONL)
        Roller(catalog).roll_table(table, force=True)
        w.write(records(range(5, 8)), Format.JSONL)  # staged flat in the next partition
    legacy = Path(table.location) / legacy_dir(table.partition_column, old)
    assert (legacy / "_SUCCESS").is_file()
    assert partition_dir(table, old) == legacy.name  # found where it is
    wh = catalog.warehouse
    assert any(f.path.count("/") == 1 and f.staged for f in live_files(wh.load(table)))

    w.write(records(range(8, 10)), Format.JSONL)  # the new code, into the same streaming partition
    assert sorted(r[0] for r in rows_by_deltalake(table)) == list(range(10))
    mixed = catalog.store.streaming_partition(table.id)
    [result] = Roller(catalog).roll_table(table, force=True)
    assert (result.chunks, result.rows) == (2, 5)
    rolled_dir = Path(table.location) / readable_dir(table.partition_column, mixed.value)
    assert (rolled_dir / "_SUCCESS").is_file()
    assert check_table(catalog, table) == []  # `streampart check`: nothing wrong
    assert_readers_agree(table, list(range(10)))

    info = catalog.describe(catalog.resolve("ns.events"))
    locations = {p["value"]: p["location"] for p in info["partitions"]}
    assert set(locations.values()) >= {str(legacy), str(rolled_dir)}

    # housekeeping removes the swept chunk files, old and new layout alike, once past retention and
    # once the log no longer holds the versions before the rolls (which list them)
    later = datetime.now(UTC) + timedelta(days=30)
    keeper = Housekeeper(catalog, HousekeepingConfig(retention=timedelta(seconds=1)))
    set_log_settings(catalog.load(table), log_retention=timedelta(hours=1))
    catalog.load(table).create_checkpoint()
    hours_ago = time.time() - 2 * 3600
    for path in (Path(table.location) / "_delta_log").iterdir():
        os.utime(path, (hours_ago, hours_ago))
    assert keeper.clean_log(table) > 0
    removed = keeper.remove_files(table, later)
    # chunk 1 and 2 (staged flat), chunk 3 (placed; its staged name went at its commit)
    assert len([r for r in removed if r.startswith("_staging/")]) == 3, removed
    assert_readers_agree(table, list(range(10)))


def test_a_forced_roll_opens_a_partition_named_after_its_whole_second(sqlite_catalog) -> None:
    catalog = sqlite_catalog
    table = make_table(catalog)
    first = catalog.store.streaming_partition(table.id).value
    now = first + timedelta(minutes=17, seconds=39, microseconds=868691)
    Roller(catalog).roll_table(table, now=now, force=True)
    opened = catalog.store.streaming_partition(table.id).value
    assert opened == first + timedelta(minutes=17, seconds=39)
    assert layout.partition_label(opened) == f"{first:%Y-%m-%d %H}:17:39"
    # a second forced roll within that second cannot take the same name: it takes the instant
    Roller(catalog).roll_table(table, now=now, force=True)
    assert catalog.store.streaming_partition(table.id).value == now
    assert len({p.value for p in catalog.store.list_partitions(table.id)}) == 3

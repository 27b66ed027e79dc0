"""Appends written straight to the Delta log (metastore/append.py), read back by delta-rs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta import append
from metastore.delta.files import live_files, write_parquet
from metastore.delta.layout import staging_path
from metastore.delta.log import commit_info, log_dir, newest_version
from metastore.errors import ConflictError
from tests.fixtures import make_table
from tests.helpers import all_ids, records, wait_for


def stage(catalog: Any, table: Any, name: str, ids: range) -> tuple[str, Any, int]:
    w = ChunkWriter(catalog, table)
    path = staging_path(name, 0)
    write_parquet(table, path, w.parse(records(ids), Format.JSONL).good)
    return path, catalog.store.streaming_partition(table.id).value, len(ids)


def test_an_append_lands_after_commits_it_did_not_see_and_delta_rs_reads_it_as_its_own(
    catalog: Any,
) -> None:
    table = make_table(catalog)
    wh = catalog.warehouse
    first = wh.commit_files(table, 0, [stage(catalog, table, "a", range(10))], {"k": "a"})
    # written on version 0 too, after ``first`` landed: a blind append does not conflict
    second = wh.commit_files(table, 0, [stage(catalog, table, "b", range(10, 20))], {"k": "b"})
    assert (first, second) == (1, 2) and newest_version(table, 0) == 2
    assert sorted(all_ids(table)) == list(range(20))
    assert [(commit_info(table, v) or {}).get("k") for v in (1, 2)] == ["a", "b"]
    stats = {f.path: f.rows for f in live_files(wh.load(table))}
    assert stats == {"_staging/a-0.parquet": 10, "_staging/b-0.parquet": 10}


def test_an_append_after_a_seal_it_did_not_see_conflicts_and_writes_nothing(catalog: Any) -> None:
    table = make_table(catalog)
    wh = catalog.warehouse
    sealed = wh.seal(table, "roll-1")
    with pytest.raises(ConflictError, match=f"version {sealed} changed the table's metadata"):
        wh.commit_files(table, sealed - 1, [stage(catalog, table, "a", range(10))], {"k": "a"})
    assert newest_version(table, 0) == sealed and all_ids(table) == []
    assert not list(Path(log_dir(table.location)).glob("*.tmp"))  # no temp file left behind
    # on the version that holds the seal, it lands
    assert wh.commit_files(table, sealed, [stage(catalog, table, "a", range(10))], {"k": "a"}) == sealed + 1


def test_one_application_transaction_lands_once(catalog: Any) -> None:
    table = make_table(catalog)
    wh = catalog.warehouse
    wh.commit_files(table, 0, [stage(catalog, table, "a", range(10))], {"k": "a"}, app_id="copy-1")
    with pytest.raises(ConflictError, match="application transaction copy-1"):
        wh.commit_files(table, 0, [stage(catalog, table, "b", range(10, 20))], {"k": "b"}, app_id="copy-1")
    assert wh.load(table).transaction_version("copy-1") == 1 and sorted(all_ids(table)) == list(range(10))


def test_the_log_is_checkpointed_every_interval_the_table_sets(catalog: Any) -> None:
    table = make_table(catalog)
    catalog.warehouse.load(table).alter.set_table_properties({"delta.checkpointInterval": "4"})  # version 1
    w = ChunkWriter(catalog, table)
    for k in range(7):  # versions 2..8
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    last = Path(log_dir(table.location)) / "_last_checkpoint"
    # at 4 and at 8; one still being written when the next falls due is not started twice (on a
    # busy machine the one at 4 may outlast four commits), so either may be the newest
    wait_for(
        lambda: last.exists() and json.loads(last.read_text())["version"] in (4, 8), "a checkpoint at 4 or 8"
    )
    assert sorted(all_ids(table)) == list(range(70))


def test_a_table_whose_protocol_asks_more_is_written_through_delta_rs(catalog: Any) -> None:
    table = make_table(catalog)
    catalog.warehouse.load(table).alter.add_constraint({"positive_id": "id >= 0"})  # writer version 3
    assert not append.plain_appends(catalog.warehouse.load(table))
    result = ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL)
    assert result.version is not None
    info = commit_info(table, result.version)
    assert info is not None and info.get("engineInfo") != append.ENGINE  # delta-rs wrote it
    assert sorted(all_ids(table)) == list(range(10))

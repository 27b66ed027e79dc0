"""The Iceberg metadata written beside a table: reused across loads, and cleaned by housekeeping."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from pyiceberg.table import StaticTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore.catalog import Catalog
from metastore.iceberg import View, iceberg_table, view_directories
from metastore.snapshots import pin
from scheduler.housekeeping import Housekeeper
from scheduler.roll import Roller
from tests.catalogs.helpers import orders
from tests.fixtures import make_table


def test_a_standard_partitions_manifest_is_written_once_and_housekeeping_keeps_what_the_newest_load_needs(
    sqlite_catalog: Catalog,
) -> None:
    cat = sqlite_catalog
    t = make_table(cat, "ns.t", schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2), note STRING, qty INT")
    w = ChunkWriter(cat, t)
    view = View(str(t.name), t.location, t.uid)
    w.write(orders(range(0, 5)), Format.JSONL, key="a")
    Roller(cat).roll_table(t, force=True)
    loads = []
    for k in range(4):
        w.write(orders(range(10 + 10 * k, 15 + 10 * k)), Format.JSONL, key=f"b{k}")
        loads.append(iceberg_table(view, pin(cat, t)))
    [directory] = view_directories(t.location)
    names = sorted(os.listdir(directory))
    manifests = [n for n in names if n.endswith(".avro") and not n.startswith("snap-")]
    # the standard partition's manifest once; the open partition's once per load (its files changed)
    assert len(manifests) == 1 + len(loads)
    assert len([n for n in names if n.endswith(".metadata.json")]) == len(loads)

    keeper = Housekeeper(cat)
    assert keeper.clean_iceberg(t, clock.now()) == 0  # nothing older than the retention
    past = (clock.now() - keeper.config.retention - timedelta(hours=1)).timestamp()
    for name in names:
        os.utime(os.path.join(directory, name), (past, past))
    removed = keeper.clean_iceberg(t, clock.now())
    left = sorted(os.listdir(directory))
    assert removed == len(names) - len(left)
    # the newest metadata, every manifest list it lists, and the manifests those lists name stay
    assert [n for n in left if n.endswith(".metadata.json")] == [loads[-1].location.rsplit("/", 1)[1]]
    newest = StaticTable.from_metadata(loads[-1].location)
    assert {s.snapshot_id for s in newest.metadata.snapshots} == {
        load.metadata.current_snapshot_id for load in loads
    }
    for snapshot in newest.metadata.snapshots:
        ids = newest.scan(snapshot_id=snapshot.snapshot_id).to_arrow().column("id").to_pylist()
        assert len(ids) == len(set(ids)) and min(ids) == 0
    assert sorted(newest.scan().to_arrow().column("id").to_pylist()) == sorted(
        [*range(0, 5), *(i for k in range(4) for i in range(10 + 10 * k, 15 + 10 * k))]
    )
    # every snapshot is still listed, so every manifest list and manifest stays: only the older
    # metadata files went
    assert removed == len(loads) - 1
    assert [n for n in left if n.endswith(".avro")] == [n for n in names if n.endswith(".avro")]


def test_snapshots_past_those_kept_go_and_housekeeping_deletes_what_only_they_listed(
    sqlite_catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metastore.iceberg import metadata

    monkeypatch.setattr(metadata, "SNAPSHOTS_KEPT", 2)
    cat = sqlite_catalog
    t = make_table(cat, "ns.t", schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2), note STRING, qty INT")
    w = ChunkWriter(cat, t)
    view = View(str(t.name), t.location, t.uid)
    loads = []
    for k in range(4):
        w.write(orders(range(10 * k, 10 * k + 5)), Format.JSONL, key=f"b{k}")
        loads.append(iceberg_table(view, pin(cat, t)))
    newest = loads[-1].metadata
    assert [s.snapshot_id for s in newest.snapshots] == [v.metadata.current_snapshot_id for v in loads[-2:]]
    [directory] = view_directories(t.location)
    names = sorted(os.listdir(directory))
    past = (clock.now() - timedelta(days=30)).timestamp()
    for name in names:
        os.utime(os.path.join(directory, name), (past, past))
    Housekeeper(cat).clean_iceberg(t, clock.now())
    left = sorted(os.listdir(directory))
    lists = [n for n in left if n.startswith("snap-")]
    manifests = [n for n in left if n.endswith(".avro") and not n.startswith("snap-")]
    assert len(lists) == 2 and len(manifests) == 2  # the two snapshots kept, one partition each
    table = StaticTable.from_metadata(loads[-1].location)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == sorted(
        i for k in range(4) for i in range(10 * k, 10 * k + 5)
    )


def test_the_standard_partitions_of_one_period_share_a_manifest(sqlite_catalog: Catalog) -> None:
    """Hourly partitions: those of one 64-hour period in one manifest (a reader opens one file for
    them), and its bounds let a filter skip it whole."""
    from datetime import UTC, datetime

    from metastore.models import Mode

    cat = sqlite_catalog
    t = make_table(cat, "ns.e", mode=Mode.EVENT_TIME, max_future="3650d", max_age="3650d")
    start = datetime(2026, 1, 1, tzinfo=UTC)
    hours = [start + timedelta(hours=h) for h in (0, 1, 2, 70)]  # 70: the next 64-hour period
    rows = "".join(f'{{"id": {k}, "ts": "{h.isoformat()}", "msg": "m"}}\n' for k, h in enumerate(hours))
    ChunkWriter(cat, t).write(rows.encode(), Format.JSONL)
    Roller(cat).roll_table(t, now=start + timedelta(hours=100))
    loaded = iceberg_table(View(str(t.name), t.location, t.uid), pin(cat, t))
    table = StaticTable.from_metadata(loaded.location)
    snapshot = table.current_snapshot()
    assert snapshot is not None
    manifests = snapshot.manifests(table.io)
    assert sorted(m.added_files_count or 0 for m in manifests) == [1, 3]
    assert table.scan(row_filter="id = 3").to_arrow().column("id").to_pylist() == [3]

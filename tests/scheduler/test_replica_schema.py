"""Schema changes reach a table's replicas (issue 27, plan step 5), on SQLite and PostgreSQL.

A partition written after the source gained or widened columns is committed to the secondary's Delta
log in one commit with the source's newest schema: the secondary's columns are never narrower than
its files, never ahead of the source's log, and every reader of the secondary sees the primary's rows.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.models import Column, Table, parse_schema
from metastore.replicas import REPLICA_KEY, Replica, replica_table
from scheduler.errors import ReplicationFailedError
from scheduler.replica_schema import catch_up
from scheduler.replication import Replicator
from scheduler.roll import Roller
from tests.fixtures import add_clusters, make_table
from tests.helpers import delta_rows, jsonl, worker_call

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, qty INT"
BIG = 2**40  # fits BIGINT only: proves the widened type reached the reader


def _setup(
    catalog: Catalog, tmp_path: Path, *clusters: str, replicate_to: tuple[str, ...] = ("c2",)
) -> Table:
    add_clusters(catalog, tmp_path, *clusters)
    return make_table(catalog, "ns.events", schema=SCHEMA, cluster="c1", replicate_to=replicate_to)


def _roll(catalog: Catalog, table: Table, rows: list[dict[str, Any]]) -> None:
    ChunkWriter(catalog, table).write(jsonl(rows), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)


def _old_rows() -> list[dict[str, Any]]:
    return [{"id": i, "ts": "2026-11-21T10:15:00Z", "msg": f"m{i}", "qty": -(2**31)} for i in range(5)]


def _new_rows() -> list[dict[str, Any]]:
    return [
        {"id": 100 + i, "ts": "2026-11-21T10:15:00Z", "msg": "n", "qty": BIG + i, "coupon": f"c{i}"}
        for i in range(5)
    ]


def _altered(catalog: Catalog, table: Table) -> Table:
    """Roll one partition in the old schema, then add ``coupon`` and widen ``qty``; the table now."""
    _roll(catalog, table, _old_rows())
    catalog.schemas.alter(table.name, add=parse_schema("coupon STRING"), widen=parse_schema("qty BIGINT"))
    return catalog.table("ns.events")


def _replicated_then_altered(catalog: Catalog, table: Table) -> Table:
    """Roll one partition in the old schema and copy it, then add ``coupon`` and widen ``qty``."""
    _roll(catalog, table, _old_rows())
    assert len(Replicator(catalog).replicate(table).copied) == 1
    [replica] = catalog.replicas.list(table)
    assert _fields(replica.location)["qty"] == "integer" and "coupon" not in _fields(replica.location)
    catalog.schemas.alter(table.name, add=parse_schema("coupon STRING"), widen=parse_schema("qty BIGINT"))
    return catalog.table("ns.events")


def _fields(location: str) -> dict[str, str]:
    from deltalake import DeltaTable

    return {f["name"]: f["type"] for f in json.loads(DeltaTable(location).schema().to_json())["fields"]}


def _rows(table: Table) -> list[tuple[Any, ...]]:
    got = delta_rows(table, columns="id, qty, coupon, ts_period").to_pylist()
    return sorted((r["id"], r["qty"], r["coupon"], r["ts_period"]) for r in got)


def _expected() -> list[tuple[Any, ...]]:
    old = [(r["id"], r["qty"], None) for r in _old_rows()]
    return sorted(old + [(r["id"], r["qty"], r["coupon"]) for r in _new_rows()])


def _replica_commit(replica: Replica, partition_dir: str) -> list[dict[str, Any]]:
    """The actions of the secondary's commit that added ``partition_dir``."""
    for f in sorted((Path(replica.location) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
        if any(a.get("commitInfo", {}).get(REPLICA_KEY) == partition_dir for a in actions):
            return actions
    raise AssertionError(f"no commit of {partition_dir} in {replica.location}")


def test_a_partition_copied_after_a_schema_change_brings_the_new_schema_in_its_own_commit(
    catalog: Catalog, tmp_path: Path
) -> None:
    from metastore.delta.layout import partition_dir
    from metastore.integrity import check_table

    table = _setup(catalog, tmp_path, "c1", "c2")
    [replica] = catalog.replicas.list(table)
    table = _replicated_then_altered(catalog, table)
    _roll(catalog, table, _new_rows())
    assert len(Replicator(catalog).replicate(table).copied) == 1
    # the secondary has the source's columns, carried by the commit of the first partition needing them
    assert _fields(replica.location) == _fields(table.location)
    assert _fields(replica.location)["coupon"] == "string" and _fields(replica.location)["qty"] == "long"
    [new] = [
        p
        for p in catalog.store.list_partitions(table.id)
        if p.value == max(catalog.replicas.present_on(table, "c2"))
    ]
    actions = _replica_commit(replica, partition_dir(table, new.value))
    assert any("metaData" in a for a in actions) and any("add" in a for a in actions)
    copy = replica_table(table, replica)
    # every reader of the secondary: nulls in the old partition, exact widened values, the primary's rows
    assert _rows(copy) == _rows(table)
    assert [r[:3] for r in _rows(copy)] == _expected()
    assert check_table(catalog, table) == []
    assert Replicator(catalog).replicate(table).copied == []


def test_polars_and_duckdb_read_both_partitions_of_the_secondary(catalog: Catalog, tmp_path: Path) -> None:
    import duckdb
    import polars as pl
    from deltalake import DeltaTable

    table = _setup(catalog, tmp_path, "c1", "c2")
    [replica] = catalog.replicas.list(table)
    table = _altered(catalog, table)
    Replicator(catalog).replicate(table)  # the old partition, copied after the change: brings it
    assert _fields(replica.location) == _fields(table.location)
    _roll(catalog, table, _new_rows())
    Replicator(catalog).replicate(table)
    by_polars = pl.read_delta(replica.location).select("id", "qty", "coupon").sort("id").rows()
    assert by_polars == _expected()
    files = [u.removeprefix("file://") for u in DeltaTable(replica.location).file_uris()]
    assert len(files) == 2
    sql = f"SELECT id, qty, coupon FROM read_parquet({files!r}, union_by_name=true) ORDER BY id"
    by_duckdb = duckdb.connect().execute(sql).fetchall()
    assert by_duckdb == _expected()


def test_queries_on_the_secondary_see_its_new_columns(catalog: Catalog, tmp_path: Path) -> None:
    from streampart.query_copies import locate, snapshots_on
    from streampart.query_policy import TableRef

    table = _setup(catalog, tmp_path, "c1", "c2")
    table = _altered(catalog, table)
    _roll(catalog, table, _new_rows())
    Replicator(catalog).replicate(table)
    ref = TableRef("ns.events")
    located = locate(catalog, [ref])
    assert located[ref].copies["c2"].full
    snap = snapshots_on(catalog, located, "c2", ["ns.events"])[ref]
    assert [c.name for c in snap.columns] == ["id", "ts", "msg", "qty", "coupon"]
    assert {c.name: c.type for c in snap.columns}["qty"] == "long"
    assert len({f.partition for f in snap.files}) == 2


def test_a_replica_added_after_a_schema_change_starts_with_the_current_schema(
    catalog: Catalog, tmp_path: Path
) -> None:
    before = _setup(catalog, tmp_path, "c1", "c3", replicate_to=())
    table = _altered(catalog, before)
    _roll(catalog, table, _new_rows())
    replica = catalog.replicas.add(before, "c3")  # a reading from before the change, as a daemon may hold
    assert _fields(replica.location) == _fields(table.location)
    assert len(Replicator(catalog).replicate(table).copied) == 2
    log = sorted((Path(replica.location) / "_delta_log").glob("*.json"))[1:]
    assert not any('"metaData"' in f.read_text() for f in log)  # no copy needed a schema change
    assert _rows(replica_table(table, replica)) == _rows(table)


def test_a_secondary_with_delta_features_takes_added_columns_first_and_refuses_widening(
    catalog: Catalog, tmp_path: Path
) -> None:
    from deltalake import DeltaTable, TableFeatures

    table = _setup(catalog, tmp_path, "c1", "c2")
    [replica] = catalog.replicas.list(table)
    DeltaTable(replica.location).alter.add_feature(
        [TableFeatures.ChangeDataFeed], allow_protocol_versions_increase=True
    )
    _roll(catalog, table, _old_rows())
    catalog.schemas.alter(table.name, add=parse_schema("coupon STRING"))
    table = catalog.table("ns.events")
    _roll(catalog, table, [{k: v for k, v in r.items() if k != "qty"} for r in _new_rows()])
    assert len(Replicator(catalog).replicate(table).copied) == 2
    assert _fields(replica.location) == _fields(table.location)  # through delta-rs' add_columns
    assert delta_rows(replica_table(table, replica), columns="id, coupon").num_rows == 10
    catalog.schemas.alter(table.name, widen=parse_schema("qty BIGINT"))
    table = catalog.table("ns.events")
    _roll(catalog, table, _old_rows())
    report = Replicator(catalog).replicate(table)
    assert report.copied == [] and "cannot widen a column's type" in report.failed[0].error
    assert _fields(replica.location)["qty"] == "integer"  # nothing changed there


# (secondary's columns, source's columns, what the secondary then has: None = nothing to change)
CATCH_UP = [
    ("a INT, b STRING", "a INT, b STRING", None),  # covered: no metaData
    ("a INT, b STRING", "a INT, b STRING, c DOUBLE", "a INT, b STRING, c DOUBLE"),  # added at the end
    ("a INT, b STRING", "a BIGINT, b STRING", "a BIGINT, b STRING"),  # widened in place
    ("a INT, b STRING", "b STRING, a BIGINT, c DATE", "a BIGINT, b STRING, c DATE"),  # its own order kept
    ("a BIGINT, x STRING", "a BIGINT", None),  # a column only the secondary has is kept, never dropped
]


@pytest.mark.parametrize(("have", "source", "after"), CATCH_UP)
def test_a_secondary_takes_the_sources_columns_only_growing(
    have: str, source: str, after: str | None
) -> None:
    got = catch_up(parse_schema(have), parse_schema(source), "replica")
    assert got == (None if after is None else tuple(parse_schema(after)))


def test_a_secondary_column_wider_than_the_sources_is_a_clear_error() -> None:
    with pytest.raises(ReplicationFailedError, match="column 'a' is BIGINT on the secondary but INT"):
        catch_up((Column(name="a", type="long"),), (Column(name="a", type="integer"),), "replica")


@pytest.mark.parametrize("point", ["replica-before-commit", "replica-after-commit"])
@pytest.mark.process
def test_a_copier_killed_around_the_commit_that_brings_a_schema_leaves_the_secondary_readable(
    catalog: Catalog, tmp_path: Path, point: str
) -> None:
    table = _setup(catalog, tmp_path, "c1", "c2")
    [replica] = catalog.replicas.list(table)
    table = _replicated_then_altered(catalog, table)
    _roll(catalog, table, _new_rows())
    killed = subprocess.run(
        **worker_call(catalog, table, "replicator", "--count", "1", "--lease", "1", crashpoint=point),
        capture_output=True,
        timeout=120,
    )
    assert killed.returncode == -9, killed.stderr
    copy = replica_table(table, replica)
    fields = _fields(replica.location)
    if point == "replica-before-commit":  # nothing committed: the old schema, the old partition
        assert "coupon" not in fields and fields["qty"] == "integer"
        assert [r[:3] for r in _rows_old_schema(copy)] == sorted((r["id"], r["qty"]) for r in _old_rows())
    else:  # schema and files landed together
        assert fields["coupon"] == "string" and [r[:3] for r in _rows(copy)] == _expected()
    time.sleep(1.2)  # the dead copier's lease lapses
    assert len(Replicator(catalog).replicate(table).copied) == 1
    assert _fields(replica.location) == _fields(table.location)
    assert _rows(copy) == _rows(table)
    assert len(catalog.replicas.present_on(table, "c2")) == 2


def _rows_old_schema(table: Table) -> list[tuple[Any, ...]]:
    got = delta_rows(table, columns="id, qty").to_pylist()
    return sorted((r["id"], r["qty"]) for r in got)


def test_columns_the_data_added_reach_the_secondary_with_the_first_copy_needing_them(
    catalog: Catalog, tmp_path: Path
) -> None:
    """Schema evolution from data (issue 27, step 6): a column a chunk's records added on the primary
    and widened by a value past its range comes to the secondary as an ALTER's does."""
    table = _setup(catalog, tmp_path, "c1", "c2")
    [replica] = catalog.replicas.list(table)
    _roll(catalog, table, _old_rows())
    assert len(Replicator(catalog).replicate(table).copied) == 1
    table = catalog.schemas.set_evolution(table, "add-and-widen")
    _roll(catalog, table, _new_rows())  # brings coupon, and qty values past INT
    table = catalog.table("ns.events")
    assert _fields(table.location)["coupon"] == "string" and _fields(table.location)["qty"] == "long"
    assert len(Replicator(catalog).replicate(table).copied) == 1
    assert _fields(replica.location) == _fields(table.location)
    copy = replica_table(table, replica)
    assert _rows(copy) == _rows(table) and [r[:3] for r in _rows(copy)] == _expected()

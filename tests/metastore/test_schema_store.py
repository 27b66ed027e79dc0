"""A table's schema changes in the metastore (metastore/store/schemas.py, migration 0014), on SQLite and
PostgreSQL: recorded pending under a key, finished by a compare-and-set on the table's columns (the
metastore never ahead of the Delta log: docs/design/schema-changes.md, invariant 1), listed as a
history; the table's evolution settings; the migration of a metastore made before them."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pydantic
import pytest
import sqlalchemy as sa

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import schema as s
from metastore.catalog import Catalog
from metastore.durations import parse_duration
from metastore.errors import (
    ConflictError,
    NamespaceMovingError,
    NotFoundError,
    SchemaConflictError,
    UserInputError,
)
from metastore.models import (
    DEFAULT_MAX_NEW_COLUMNS,
    Column,
    SchemaChangeState,
    SchemaEvolution,
    TableName,
    TableSpec,
    parse_column_change,
    parse_schema,
    plan_alter,
)
from metastore.store import Metastore
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import downgraded, records


def _plus(table: Any, *add: str, widen: tuple[str, ...] = ()) -> tuple[Column, ...]:
    """The table's columns with ``add`` added and ``widen`` widened, as an ALTER plans them."""
    return plan_alter(
        table.columns,
        table.time_column,
        table.partition_column,
        add=[parse_column_change(a, "--add-column") for a in add],
        widen=[parse_column_change(w, "--widen-column") for w in widen],
    )


def test_a_table_s_evolution_settings_default_to_today_s_behaviour_and_are_kept(catalog: Catalog) -> None:
    plain = make_table(catalog, "ns.plain")
    assert plain.schema_evolution is SchemaEvolution.NONE and plain.max_new_columns == DEFAULT_MAX_NEW_COLUMNS
    spec = TableSpec(
        name=TableName.parse("ns.evolving"),
        columns=parse_schema("id BIGINT, ts TIMESTAMP"),
        time_column="ts",
        roll_every=parse_duration("1h"),
        schema_evolution=SchemaEvolution.ADD_AND_WIDEN,
        max_new_columns=7,
    )
    made = catalog.create_table(spec)
    store = catalog.store
    got = store.get_table("ns.evolving")
    assert (
        (got.schema_evolution, got.max_new_columns)
        == (SchemaEvolution.ADD_AND_WIDEN, 7)
        == (
            made.schema_evolution,
            made.max_new_columns,
        )
    )
    changed = store.set_schema_evolution(plain.id, SchemaEvolution.ADD_COLUMNS)
    assert (changed.schema_evolution, changed.max_new_columns) == (SchemaEvolution.ADD_COLUMNS, 100)
    changed = store.set_schema_evolution(plain.id, max_new_columns=0)
    assert (changed.schema_evolution, changed.max_new_columns) == (SchemaEvolution.ADD_COLUMNS, 0)
    assert store.get_table("ns.plain") == changed
    with pytest.raises(UserInputError, match="max new columns must be 0 or more, not -1"):
        store.set_schema_evolution(plain.id, max_new_columns=-1)
    with pytest.raises(pydantic.ValidationError, match="max_new_columns"):
        TableSpec.model_validate({**spec.model_dump(), "max_new_columns": -1})
    with pytest.raises(NotFoundError):
        store.set_schema_evolution(10_000, SchemaEvolution.NONE)


def test_a_change_recorded_pending_changes_the_columns_only_when_finished(catalog: Catalog) -> None:
    table = make_table(catalog)
    store = catalog.store
    after = _plus(table, "coupon STRING")
    pending = store.record_schema_change(table.id, "alter-1", table.columns, after, "alter")
    assert pending.state is SchemaChangeState.PENDING and pending.version is None
    assert pending.change == ({"op": "add", "column": "coupon", "type": "string"},)
    assert pending.summary() is None
    assert store.get_table_by_id(table.id).columns == table.columns  # not ahead of the log
    assert store.pending_schema_changes(table.id) == [pending] == store.pending_schema_changes()

    done = store.finish_schema_change(table.id, "alter-1", 3)
    assert (done.state, done.version, done.after) == (SchemaChangeState.DONE, 3, after)
    assert done.done_at is not None and done.at == pending.at
    assert store.get_table_by_id(table.id).columns == after
    assert store.pending_schema_changes() == []
    # finishing again at the same version (a retry) finds it; at another version is a conflict
    assert store.finish_schema_change(table.id, "alter-1", 3) == done
    with pytest.raises(ConflictError, match="done already, at version 3, not 4"):
        store.finish_schema_change(table.id, "alter-1", 4)
    with pytest.raises(NotFoundError, match="has no schema change nope"):
        store.finish_schema_change(table.id, "nope", 5)

    second = store.record_schema_change(
        table.id, "chunk-x", after, _plus(store.get_table_by_id(table.id), "n INT"), "chunk:x"
    )
    store.finish_schema_change(table.id, "chunk-x", 5)
    history = store.schema_changes(table.id)
    assert [(c.key, c.version) for c in history] == [("chunk-x", 5), ("alter-1", 3)]  # newest first
    assert store.schema_changes(table.id, limit=1)[0].id == second.id
    summary = history[1].summary()
    assert summary is not None and (summary.version, summary.change, summary.source) == (
        3,
        "add coupon STRING",
        "alter",
    )


def test_a_widening_is_recorded_with_the_type_it_came_from(catalog: Catalog) -> None:
    table = make_table(catalog, schema="id BIGINT, ts TIMESTAMP, qty INT, price FLOAT")
    after = _plus(table, "coupon STRING", widen=("qty BIGINT", "price DOUBLE"))
    change = catalog.store.record_schema_change(table.id, "k", table.columns, after, "alter")
    assert change.change == (
        {"op": "widen", "column": "qty", "from": "integer", "type": "long"},
        {"op": "widen", "column": "price", "from": "float", "type": "double"},
        {"op": "add", "column": "coupon", "type": "string"},
    )
    assert change.description == "widen qty INT to BIGINT, widen price FLOAT to DOUBLE, add coupon STRING"


def test_a_key_names_one_change_for_good(catalog: Catalog) -> None:
    table = make_table(catalog)
    store = catalog.store
    after = _plus(table, "coupon STRING")
    first = store.record_schema_change(table.id, "k", table.columns, after, "alter")
    assert store.record_schema_change(table.id, "k", table.columns, after, "alter") == first  # a retry
    with pytest.raises(ConflictError, match=r"schema change k of table #\d+ is another change"):
        store.record_schema_change(table.id, "k", table.columns, _plus(table, "other STRING"), "alter")
    store.finish_schema_change(table.id, "k", 2)
    # a retry after it finished: found done, not refused for the columns having moved on
    again = store.record_schema_change(table.id, "k", table.columns, after, "alter")
    assert (again.id, again.state, again.version) == (first.id, SchemaChangeState.DONE, 2)
    assert len(store.schema_changes(table.id)) == 1


def test_what_is_not_a_schema_change_is_refused_before_anything_is_recorded(catalog: Catalog) -> None:
    table = make_table(catalog)
    store = catalog.store
    cases = [
        (table.columns[:-1], "cannot drop columns: msg"),
        (table.columns, "must add or widen a column"),
        ((*table.columns[:-1], Column(name="msg", type="string", nullable=False)), "nullable"),
    ]
    for after, message in cases:
        with pytest.raises(UserInputError, match=message):
            store.record_schema_change(table.id, "bad", table.columns, after, "alter")
    assert store.schema_changes(table.id) == []


def test_a_change_that_lost_the_race_changes_nothing_and_is_discarded(catalog: Catalog) -> None:
    """Two changes planned from the same columns: the second to finish finds them changed."""
    table = make_table(catalog)
    store = catalog.store
    a, b = _plus(table, "coupon STRING"), _plus(table, "region STRING")
    store.record_schema_change(table.id, "a", table.columns, a, "alter")
    store.record_schema_change(table.id, "b", table.columns, b, "chunk:c1")
    store.finish_schema_change(table.id, "a", 2)
    with pytest.raises(SchemaConflictError, match=r"schema change b of table #\d+ started from the columns"):
        store.finish_schema_change(table.id, "b", 3)
    assert store.get_table_by_id(table.id).columns == a  # a's, never b's
    [still] = store.pending_schema_changes(table.id)
    assert still.key == "b"
    assert store.discard_schema_change(table.id, "b") and not store.discard_schema_change(table.id, "b")
    assert not store.discard_schema_change(table.id, "a")  # done: it stays in the history
    assert [c.key for c in store.schema_changes(table.id)] == ["a"]
    # planned again from the columns as they are now, it lands
    store.record_schema_change(
        table.id, "b2", a, _plus(store.get_table_by_id(table.id), "region STRING"), "x"
    )
    store.finish_schema_change(table.id, "b2", 3)
    assert [c.name for c in store.get_table_by_id(table.id).columns][-2:] == ["coupon", "region"]


def test_a_change_planned_from_columns_the_table_no_longer_has_is_refused_naming_the_pending_ones(
    catalog: Catalog,
) -> None:
    table = make_table(catalog)
    store = catalog.store
    a = _plus(table, "coupon STRING")
    store.record_schema_change(table.id, "a", table.columns, a, "alter")
    # the log has a's columns (its commit landed) but a was not finished yet: the metastore lags
    with pytest.raises(SchemaConflictError, match=r"changes still pending: a\)"):
        store.record_schema_change(table.id, "next", a, _plus(table, "coupon STRING", "x INT"), "alter")
    assert [c.key for c in store.schema_changes(table.id)] == ["a"]


def test_of_two_processes_finishing_changes_from_the_same_columns_exactly_one_wins(
    metastore_url: str, tmp_path: Path
) -> None:
    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    try:
        table = make_table(catalog)
        keys = [f"c{i}" for i in range(4)]
        for k in keys:
            after = _plus(table, f"{k} STRING")
            catalog.store.record_schema_change(table.id, k, table.columns, after, "race")
        stores = [Metastore(metastore_url) for _ in keys]
        outcomes: dict[str, Any] = {}
        start = threading.Barrier(len(keys))

        def finish(store: Metastore, key: str) -> None:
            start.wait()
            try:
                outcomes[key] = store.finish_schema_change(table.id, key, 2)
            except SchemaConflictError as exc:
                outcomes[key] = exc

        threads = [threading.Thread(target=finish, args=pair) for pair in zip(stores, keys, strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for store in stores:
            store.close()
        winners = [k for k, v in outcomes.items() if not isinstance(v, BaseException)]
        assert len(outcomes) == len(keys) and len(winners) == 1, outcomes
        [winner] = winners
        assert catalog.store.get_table_by_id(table.id).columns == outcomes[winner].after
        assert sorted(c.key for c in catalog.store.pending_schema_changes()) == sorted(set(keys) - {winner})
    finally:
        catalog.close()


def test_schema_writes_wait_while_the_namespace_moves(catalog: Catalog) -> None:
    table = make_table(catalog)
    store = catalog.store
    after = _plus(table, "coupon STRING")
    store.record_schema_change(table.id, "a", table.columns, after, "alter")
    store.fence_namespace_for_move("ns", "m2")
    for call in (
        lambda: store.record_schema_change(table.id, "b", table.columns, after, "alter"),
        lambda: store.finish_schema_change(table.id, "a", 2),
        lambda: store.discard_schema_change(table.id, "a"),
        lambda: store.set_schema_evolution(table.id, SchemaEvolution.ADD_COLUMNS),
    ):
        with pytest.raises(NamespaceMovingError, match="namespace ns is moving to metastore m2"):
            call()
    assert store.get_table_by_id(table.id).columns == table.columns
    assert store.unfence_namespace("ns")
    assert store.finish_schema_change(table.id, "a", 2).state is SchemaChangeState.DONE


def test_dropping_a_table_drops_its_schema_history(catalog: Catalog) -> None:
    table = make_table(catalog)
    kept = make_table(catalog, "ns.kept")
    for t in (table, kept):
        catalog.store.record_schema_change(t.id, "a", t.columns, _plus(t, "coupon STRING"), "alter")
    catalog.drop_table(table)
    with catalog.store.read_tx() as conn:
        left = conn.execute(sa.select(s.schema_changes.c.table_id)).scalars().all()
    assert left == [kept.id]


def _rows(conn: sa.Connection, table: sa.Table) -> list[dict[str, Any]]:
    """Every row of ``table`` but the columns migration 0014 (and later ones) add, in key order."""
    added = {"schema_evolution", "max_new_columns"} | {  # 0016: retention; 0017: deletes; 0018: keys
        "retain_s", "default_retain_s", "expired_at", "expired_version", "reclaimed_at", "generation",
        "keys", "removed_files", "cluster_by",  # 0020: clustering
    }  # fmt: skip
    order = list(table.primary_key.columns)
    rows = conn.execute(sa.select(*(c for c in table.c if c.name not in added)).order_by(*order)).all()
    return [dict(r._mapping) for r in rows]


KEPT = (s.tables, s.partitions, s.chunks, s.rolls, s.namespaces)


def test_migration_0014_keeps_every_table_and_chunk_of_a_0013_metastore_and_goes_back(
    metastore_url: str, tmp_path: Path
) -> None:
    """0014 → 0013 → 0014 over a metastore with tables, chunks and a roll: nothing lost either way;
    the new settings come back at their defaults and the history empty (0013 had neither)."""
    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    try:
        table = make_table(catalog, dead_letter=True)
        w = ChunkWriter(catalog, table)
        for k in range(3):
            w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"k{k}")
        Roller(catalog).roll_table(table, force=True)
        w.write(records(range(30, 40)), Format.JSONL, key="k3")
        catalog.store.set_schema_evolution(table.id, SchemaEvolution.ADD_COLUMNS, 5)
        catalog.store.record_schema_change(table.id, "a", table.columns, _plus(table, "c STRING"), "alter")
        with catalog.store.read_tx() as conn:
            before = {t.name: _rows(conn, t) for t in KEPT}
    finally:
        catalog.close()
    assert len(before["sp_chunks"]) >= 4 and len(before["sp_tables"]) == 2 and before["sp_rolls"]

    with downgraded(metastore_url, "0013") as conn:
        inspector = sa.inspect(conn)
        assert "sp_schema_changes" not in inspector.get_table_names()
        columns = {c["name"] for c in inspector.get_columns("sp_tables")}
        assert not columns & {"schema_evolution", "max_new_columns"} and "uid" in columns
        assert {t.name: _rows(conn, t) for t in KEPT} == before

    store = Metastore(metastore_url)  # migrates to head
    try:
        with store.read_tx() as conn:
            assert {t.name: _rows(conn, t) for t in KEPT} == before
        again = store.get_table_by_id(table.id)
        assert (again.schema_evolution, again.max_new_columns) == (SchemaEvolution.NONE, 100)
        assert store.schema_changes(table.id) == []
        # and it works: a change recorded, finished
        store.record_schema_change(table.id, "b", again.columns, _plus(again, "c STRING"), "alter")
        assert store.finish_schema_change(table.id, "b", 9).version == 9
    finally:
        store.close()
    reopened = Catalog.open(tmp_path / "wh", metastore_url)
    try:
        ChunkWriter(reopened, reopened.table(str(table.name))).write(
            records(range(40, 50)), Format.JSONL, key="k4"
        )
        assert reopened.store.find_chunk_by_key(table.id, "k0") is not None
    finally:
        reopened.close()


def test_the_migrated_schema_is_the_one_metastore_schema_declares(metastore_url: str) -> None:
    """What migration 0014 makes of sp_tables and sp_schema_changes is what schema.py says (alembic's
    own comparison finds no difference in them)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    store = Metastore(metastore_url)
    try:
        with store.read_tx() as conn:
            diffs = compare_metadata(
                MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": True}),
                s.metadata,
            )
    finally:
        store.close()
    ours = [d for d in diffs if "sp_schema_changes" in repr(d) or "schema_evolution" in repr(d)]
    ours += [d for d in diffs if "max_new_columns" in repr(d)]
    assert ours == []

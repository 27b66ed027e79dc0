"""Namespace moves (issue 12, part 6), in one process: the row copy with new ids, the fence, the
refusals, rolling back. Each case runs from a SQLite primary to a PostgreSQL metastore and from a
PostgreSQL primary to a SQLite one. Crashes of the mover under continuous writes are in
tests/test_namespace_move.py.

What the copy holds is read straight from the metastore databases with SQL (not through the
move's own export), with every row id replaced by what it stands for (a table by its uid, a
partition by its table and value), so "the same rows with new ids" is compared literally.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore import schema as s
from metastore.catalog import Catalog
from metastore.delta import append
from metastore.delta.log import SCHEMA_KEY, newest_version
from metastore.delta.metadata import current_metadata, metadata_action
from metastore.errors import (
    AlreadyExistsError,
    FederationAccessError,
    MoveBusyError,
    NamespaceMovingError,
    NotFoundError,
    UserInputError,
)
from metastore.federation import PRIMARY
from metastore.links import LinkMode, LinkSpec
from metastore.models import (
    Mode,
    MoveStep,
    PartitionState,
    RollOutcome,
    Table,
    TableName,
    parse_column_change,
    plan_alter,
)
from metastore.moves import MoveReport
from metastore.store import Metastore
from scheduler.roll import Roller
from tests.fixtures import make_table, mixed_federation
from tests.helpers import all_ids, records

DIRECTIONS = ["sqlite-to-postgresql", "postgresql-to-sqlite"]


@pytest.fixture(params=DIRECTIONS)
def federation(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Catalog]:
    """A primary of one backend and ``m2`` of the other."""
    with mixed_federation(request.param.split("-to-")[0], tmp_path) as catalog:
        yield catalog


# -- what a metastore holds of a namespace, ids replaced by what they stand for ------------------
def _select(conn: sa.Connection, table: sa.Table, where: Any) -> list[dict[str, Any]]:
    return [dict(r._mapping) for r in conn.execute(sa.select(table).where(where)).all()]


def held(store: Metastore, namespace: str) -> dict[str, Any]:
    """Every row of ``namespace`` in ``store`` with its ids replaced (see the module's docstring)."""
    t = s.tables.c
    out: dict[str, Any] = {}
    with store.read_tx() as conn:
        out["namespace"] = [
            {k: v for k, v in r.items() if k not in ("moving_to", "moving_since")}
            for r in _select(conn, s.namespaces, s.namespaces.c.name == namespace)
        ]
        tables = _select(conn, s.tables, t.namespace == namespace)
        uid = {r["id"]: r["uid"] for r in tables}
        all_uids = dict(conn.execute(sa.select(t.id, t.uid)).all())
        parts = _select(conn, s.partitions, s.partitions.c.table_id.in_(uid))
        part = {p["id"]: (uid[p["table_id"]], p["value"]) for p in parts}

        def mapped(rows: list[dict[str, Any]], drop: tuple[str, ...] = ()) -> list[Any]:
            result = []
            for r in rows:
                r = {k: v for k, v in r.items() if k not in drop}
                if "table_id" in r:
                    r["table_id"] = uid[r["table_id"]]
                if "partition_id" in r:
                    r["partition_id"] = part[r["partition_id"]]
                result.append(sorted(r.items(), key=lambda kv: kv[0]))
            return sorted(result, key=repr)

        by_table = lambda kind: _select(conn, kind, kind.c.table_id.in_(uid))  # noqa: E731
        out["tables"] = mapped(tables, ("id",))
        out["partitions"] = mapped(parts, ("id",))
        out["chunks"] = mapped(by_table(s.chunks))
        out["rolls"] = mapped(by_table(s.rolls), ("lease_until",))
        out["roll_attempts"] = mapped(by_table(s.roll_attempts), ("id",))
        out["chunk_summaries"] = mapped(by_table(s.chunk_summaries), ("id",))
        out["replicas"] = mapped(by_table(s.replicas))
        out["partition_copies"] = mapped(by_table(s.partition_copies), ("lease_until",))
        out["schema_changes"] = mapped(by_table(s.schema_changes), ("id",))
        out["expiries"] = mapped(by_table(s.expiries), ("lease_until",))
        out["deletes"] = mapped(by_table(s.deletes), ("lease_until",))
        links = _select(conn, s.links, s.links.c.namespace == namespace)
        # a link names its source by uid; by row id too only where the source lives in the same metastore
        out["links"] = mapped(links, ("id", "source_table_id"))
        out["link_sources_here"] = sorted(
            (x["name"], all_uids[x["source_table_id"]]) for x in links if x["source_table_id"] is not None
        )
        lp = s.link_partitions.c
        out["link_partitions"] = sorted(
            (x["name"], v)
            for x in links
            for v in conn.execute(sa.select(lp.value).where(lp.link_id == x["id"])).scalars()
        )
    return out


def _alter(catalog: Catalog, table: Table, key: str, column: str, land: bool = True) -> None:
    """Add ``column`` to ``table`` as an ALTER will: recorded pending, its ``metaData`` committed to the
    log, finished (``land``: else it stays pending, as a crash before its Delta commit leaves it)."""
    store = catalog.store
    now = store.get_table_by_id(table.id)
    after = plan_alter(
        now.columns, now.time_column, now.partition_column, add=[parse_column_change(column, "add")]
    )
    store.record_schema_change(table.id, key, now.columns, after, "alter")
    if not land:
        return
    action = metadata_action(current_metadata(Path(table.location)), after, table.partition_column)
    body = append.append_actions(
        table.partition_column, [], {SCHEMA_KEY: key}, int(time.time() * 1000), schema_change=action
    )
    read = newest_version(table, 0)
    assert read is not None
    store.finish_schema_change(table.id, key, append.publish(table.location, body, read, 5))


def _fill(catalog: Catalog, tmp_path: Path) -> None:
    """Namespace ``shop`` in the primary with something of every kind of row; ``other`` beside it."""
    make_table(catalog, "other.first")  # the primary's ids and m2's differ from here on
    make_table(catalog.on("m2"), "noise.a")
    make_table(catalog.on("m2"), "noise.b")
    (tmp_path / "c2").mkdir()
    catalog.clusters.add("c2", str(tmp_path / "c2"), "spark://c2:7077")
    orders = make_table(catalog, "shop.orders", dead_letter=True, replicate_to=("c2",))
    make_table(catalog, "shop.clicks", mode=Mode.EVENT_TIME, lateness="10m")
    w = ChunkWriter(catalog, orders)
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"k{k}")
    w.write(b'{"id": 99, "ts": "2026-11-21T10:15:00Z"}\nnot json\n', Format.JSONL, key="bad")  # a dead letter
    [rolled] = Roller(catalog).roll_table(orders, force=True)
    w.write(records(range(100, 110)), Format.JSONL, key="k9")
    w.reserve("reserved-only")
    store = catalog.store
    partition = store.get_partition(orders.id, store.list_rolls(orders.id)[0].partition_value)
    assert partition is not None and rolled.rows == 31
    store.claim_copy(partition, "c2", "copier", timedelta(minutes=1))
    now = clock.now()
    store.record_roll_attempt(
        table_id=orders.id, partition_value=partition.value, owner="daemon", started_at=now,
        finished_at=now, outcome=RollOutcome.DONE, roll_id=rolled.roll, rows=31,
    )  # fmt: skip
    assert store.prune_chunks(orders.id, before=now + timedelta(seconds=1)) == 4  # into a summary
    _alter(catalog, orders, "alter-1", "coupon STRING")  # its schema history: one change done …
    _alter(catalog, orders, "alter-2", "region STRING", land=False)  # … and one pending
    src = make_table(catalog, "other.src")
    catalog.links.create(LinkSpec(name=TableName.parse("shop.dyn"), source=src.name, include_streaming=True))
    static = LinkSpec(name=TableName.parse("shop.stat"), source=src.name, mode=LinkMode.STATIC)
    catalog.links.create(
        static.model_copy(update={"partitions": (catalog.store.streaming_partition(src.id).value,)})
    )
    catalog.links.create(LinkSpec(name=TableName.parse("other.orders"), source=orders.name))
    catalog.namespaces.alter(
        "shop", quota_bytes=10**9, description="the shop", default_retain=timedelta(days=9)
    )
    # retention: a table's own setting, and an expiry pass begun (its partition EXPIRING) but not done
    old = catalog.retention.set(make_table(catalog, "shop.old"), timedelta(days=30))
    ChunkWriter(catalog, old).write(records(range(5)), Format.JSONL, key="old")
    Roller(catalog).roll_table(old, force=True)
    [standard] = store.list_partitions(old.id, [PartitionState.STANDARD])
    assert store.begin_expiry(old.id, [standard], "expirer", timedelta(minutes=1)) is not None
    store.begin_delete(old.id, "id = 1", "admin", "deleter", timedelta(minutes=1))  # and a delete begun


def test_the_copy_holds_every_row_with_new_ids_and_the_source_none(
    federation: Catalog, tmp_path: Path
) -> None:
    catalog = federation
    _fill(catalog, tmp_path)
    before = held(catalog.store, "shop")
    assert all(before[k] for k in before), [k for k in before if not before[k]]  # every kind of row
    old_ids = {t.name: t.id for t in catalog.store.list_tables() if t.name.namespace == "shop"}
    report = catalog.namespaces.mover(grace_s=0).move("shop", "m2")
    assert report.links == 2 and set(report.tables) == {
        "shop.orders", "shop.orders__dead_letter", "shop.clicks", "shop.old"
    }  # fmt: skip
    m2 = catalog.on("m2").store
    after = held(m2, "shop")
    assert after["link_sources_here"] == [] and len(before.pop("link_sources_here")) == 2  # source: primary
    assert {k: v for k, v in after.items() if k != "link_sources_here"} == before  # every key remapped
    new_ids = {t.name: t.id for t in m2.list_tables() if t.name.namespace == "shop"}
    assert new_ids.keys() == old_ids.keys() and all(new_ids[n] != old_ids[n] for n in new_ids)
    orders = TableName.parse("shop.orders")
    history = m2.schema_changes(new_ids[orders])  # the schema history came along, in its order
    assert [(c.key, c.state.value) for c in history] == [("alter-2", "pending"), ("alter-1", "done")]
    assert m2.get_table(orders).columns == history[1].after and history[0].before == history[1].after
    assert not catalog.store.holds_namespace("shop")  # nothing left in the source
    assert held(catalog.store, "shop")["chunks"] == []
    assert catalog.router.metastore_of("shop") == "m2" and catalog.primary.list_moves() == []
    assert m2.get_namespace("shop").moving_to is None and m2.committed_bytes("shop") > 0
    # links out of the moved namespace and into it still resolve, to the right metastore
    assert catalog.links.source(m2.get_link(TableName.parse("shop.dyn"))).metastore == PRIMARY
    into = catalog.store.get_link(TableName.parse("other.orders"))
    assert catalog.links.source(into).metastore == "m2"
    assert [str(x.name) for x in catalog.links.to(catalog.table("shop.orders")).merged()] == ["other.orders"]


def test_a_writer_holding_the_old_table_carries_on_in_the_new_metastore(federation: Catalog) -> None:
    catalog = federation
    table = make_table(catalog, "shop.orders")
    w = ChunkWriter(catalog, table)
    first = w.write(records(range(10)), Format.JSONL, key="k0")
    staged = w.reserve("k1")  # reserved before the move, committed after it
    w.stage(staged, records(range(10, 20)), Format.JSONL)
    catalog.namespaces.mover(grace_s=0).move("shop", "m2")
    again = w.write(records(range(10)), Format.JSONL, key="k0")  # the same key: the same chunk, once
    assert (again.chunk, again.version) == (first.chunk, first.version) and w.table.metastore == "m2"
    stale = ChunkWriter(catalog, table)  # still names the primary's row
    assert stale.commit(staged.id).chunk == staged.id
    ChunkWriter(catalog, table).write(records(range(20, 30)), Format.JSONL, key="k2")
    assert sorted(all_ids(catalog.table("shop.orders"))) == list(range(30))


def test_every_write_is_fenced_while_the_namespace_moves(federation: Catalog) -> None:
    catalog = federation
    table = make_table(catalog, "shop.orders")
    src = make_table(catalog, "other.src")
    w = ChunkWriter(catalog, table)
    w.write(records(range(10)), Format.JSONL, key="k0")
    reserved = w.reserve("k1")
    catalog.store.fence_namespace_for_move("shop", "m2")
    link = LinkSpec(name=TableName.parse("shop.l"), source=src.name)
    refused = [
        ("chunk write", lambda: w.write(records(range(10, 20)), Format.JSONL, key="k2")),
        ("chunk staging", lambda: w.stage(reserved, records(range(10, 20)), Format.JSONL)),
        ("roll", lambda: Roller(catalog).roll_table(table, force=True)),
        ("table create", lambda: make_table(catalog, "shop.more")),
        ("link create", lambda: catalog.links.create(link)),
        ("namespace alter", lambda: catalog.namespaces.alter("shop", description="x")),
    ]
    for what, call in refused:
        with pytest.raises(NamespaceMovingError, match="namespace shop is moving to metastore m2"):
            call()
        assert what
    ChunkWriter(catalog, src).write(records(range(5)), Format.JSONL)  # other namespaces carry on
    assert catalog.store.unfence_namespace("shop")
    w.write(records(range(10, 20)), Format.JSONL, key="k2")
    assert sorted(all_ids(table)) == list(range(20))


def test_replica_records_are_fenced_while_the_namespace_moves(federation: Catalog) -> None:
    """A replica added or removed, or copies marked expired, in the source after the move copied the
    table would be lost with the source's rows: refused while the namespace is fenced."""
    catalog = federation
    table = make_table(catalog, "shop.orders")
    store = catalog.store
    store.add_replica(table.id, "c1", "/replicas/c1")
    store.fence_namespace_for_move("shop", "m2")
    value = store.streaming_partition(table.id).value
    for call in (
        lambda: store.add_replica(table.id, "c2", "/replicas/c2"),
        lambda: store.remove_replica(table.id, "c1"),
        lambda: store.expire_copies(table.id, "c1", [value]),
    ):
        with pytest.raises(NamespaceMovingError, match="namespace shop is moving to metastore m2"):
            call()
    assert [r.cluster for r in store.list_replicas(table.id)] == ["c1"]
    assert store.unfence_namespace("shop")
    store.add_replica(table.id, "c2", "/replicas/c2")
    store.remove_replica(table.id, "c1")
    assert [r.cluster for r in store.list_replicas(table.id)] == ["c2"]


# Each refusal: what is asked, the error, and a word of its message.
REFUSALS = [
    ("missing", "m2", NotFoundError, "namespace missing does not exist"),
    ("shop", "nowhere", NotFoundError, "metastore nowhere does not exist"),
    ("shop", "primary", UserInputError, "lives in metastore primary already"),
    ("shop", "ro", FederationAccessError, "read-only"),
    ("shop", "wl", FederationAccessError, "wl"),
    ("taken", "m2", AlreadyExistsError, "present in metastore m2 already"),
]


def test_a_move_that_cannot_be_made_is_refused_and_changes_nothing(
    federation: Catalog, tmp_path: Path
) -> None:
    catalog = federation
    catalog.federation.add("ro", f"sqlite:///{tmp_path / 'ro.sqlite'}", "read-only")
    catalog.federation.add(
        "wl", f"sqlite:///{tmp_path / 'wl.sqlite'}", "read-write-create-whitelist", writable=["sales_*"]
    )
    make_table(catalog, "shop.orders")
    make_table(catalog, "taken.t")
    catalog.on("m2").store.create_namespace("taken")  # clash: a namespace in two metastores
    before = {ns: held(catalog.store, ns) for ns in ("shop", "taken")}
    for namespace, target, error, message in REFUSALS:
        with pytest.raises(error, match=message):
            catalog.namespaces.mover(grace_s=0).move(namespace, target)
        assert {ns: held(catalog.store, ns) for ns in ("shop", "taken")} == before, namespace
        assert catalog.primary.list_moves() == [] and catalog.router.metastore_of("shop") == PRIMARY


def test_an_unflipped_move_is_rolled_back_and_another_target_refused(federation: Catalog) -> None:
    catalog = federation
    table = make_table(catalog, "shop.orders")
    ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL, key="k0")
    before = held(catalog.store, "shop")
    mover = catalog.namespaces.mover(grace_s=0)
    # a move that stopped after its copy (as a crash before the flip leaves it)
    move = catalog.primary.begin_move("shop", PRIMARY, "m2", mover.owner)
    catalog.store.fence_namespace_for_move("shop", "m2")
    move = catalog.primary.advance_move(move, MoveStep.COPYING)
    mover._copy(catalog.store, catalog.on("m2").store, move, MoveReport("shop", PRIMARY, "m2"))
    with pytest.raises(UserInputError, match="is being moved to m2"):
        mover.move("shop", "wl")
    report = mover.abort("shop")
    assert report.aborted and report.resumed_at == "copying"
    assert not catalog.on("m2").store.holds_namespace("shop")
    assert held(catalog.store, "shop") == before and catalog.store.get_namespace("shop").moving_to is None
    assert catalog.primary.list_moves() == [] and catalog.router.metastore_of("shop") == PRIMARY
    ChunkWriter(catalog, table).write(records(range(10, 20)), Format.JSONL, key="k1")
    with pytest.raises(NotFoundError, match="no move of namespace shop"):
        mover.abort("shop")


def test_a_flipped_move_cannot_be_rolled_back_only_finished(federation: Catalog) -> None:
    catalog = federation
    make_table(catalog, "shop.orders")
    mover = catalog.namespaces.mover(grace_s=0)
    move = catalog.primary.begin_move("shop", PRIMARY, "m2", mover.owner)
    catalog.store.fence_namespace_for_move("shop", "m2")
    move = catalog.primary.advance_move(move, MoveStep.COPYING)
    mover._copy(catalog.store, catalog.on("m2").store, move, MoveReport("shop", PRIMARY, "m2"))
    move = catalog.primary.advance_move(move, MoveStep.COPIED)
    catalog.primary.flip_move(move)
    with pytest.raises(UserInputError, match="can only be finished"):
        mover.abort("shop")
    report = mover.move("shop", "m2")
    assert report.resumed_at == "flipped" and not catalog.store.holds_namespace("shop")
    assert catalog.table("shop.orders").metastore == "m2"


def _stuck_commit(catalog: Catalog, table: Any, key: str, ids: range) -> str:
    """A chunk left COMMITTING, as by a writer that died after begin_commit; its id."""
    w = ChunkWriter(catalog, table)
    chunk = w.stage(w.reserve(key), records(ids), Format.JSONL)
    catalog.store.begin_commit(chunk, int(catalog.warehouse.load(table).version()))
    return chunk.id


def test_a_commit_in_flight_is_drained_before_the_copy_or_the_move_rolls_back(federation: Catalog) -> None:
    catalog = federation
    table = make_table(catalog, "shop.orders")
    ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL, key="k0")
    stuck = _stuck_commit(catalog, table, "k1", range(10, 20))
    # nobody finishes it: the drain gives up, and the move is rolled back whole
    with pytest.raises(NamespaceMovingError, match=f"rolled back: chunk {stuck}"):
        catalog.namespaces.mover(grace_s=0, drain_timeout_s=0.3).move("shop", "m2")
    assert catalog.primary.list_moves() == [] and catalog.store.get_namespace("shop").moving_to is None
    assert not catalog.on("m2").store.holds_namespace("shop")
    # with a resolver (the CLI's rolls a dead writer's commit forward), it lands once, then moves
    resolved: list[str] = []

    def resolve(metastore: str, chunk: Any) -> None:
        resolved.append(chunk.id)
        home = catalog.on(metastore)
        ChunkWriter(home, home.store.get_table_by_id(chunk.table_id)).commit(chunk.id, owner_is_dead=True)

    catalog.namespaces.mover(grace_s=0, resolve=resolve).move("shop", "m2")
    assert resolved == [stuck]
    moved = catalog.table("shop.orders")
    assert catalog.on("m2").store.get_chunk(stuck).state.value == "committed"
    assert sorted(all_ids(moved)) == list(range(20))


@pytest.mark.process
def test_one_mover_at_a_time_and_a_dead_ones_move_is_taken_over(federation: Catalog) -> None:
    import socket
    import subprocess
    import sys

    catalog = federation
    make_table(catalog, "shop.orders")
    dead_pid = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_pid.wait()
    # a mover on another host, seen just now: refused (it may be alive)
    catalog.primary.begin_move("shop", PRIMARY, "m2", "elsewhere:4242:abcd")
    with pytest.raises(MoveBusyError, match="run by another mover \\(elsewhere:4242:abcd"):
        catalog.namespaces.mover(grace_s=0).move("shop", "m2")
    with pytest.raises(MoveBusyError):
        catalog.namespaces.mover(grace_s=0).abort("shop")
    # a mover of this host whose process is gone (SIGKILLed, say): taken over at once
    move = catalog.primary.find_move("shop")
    assert move is not None
    catalog.primary.claim_move(
        move, f"{socket.gethostname()}:{dead_pid.pid}:dead", stale_before=clock.now(), dead=move.owner
    )
    report = catalog.namespaces.mover(grace_s=0).move("shop", "m2")
    assert report.resumed_at == "fencing" and catalog.table("shop.orders").metastore == "m2"

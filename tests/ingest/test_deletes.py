"""Deletes by predicate (issue 30): the matching rows of standard and streaming partitions leave in
one Delta commit; older versions keep them; rows committed later are untouched; a delete killed at
any step is finished once by the next; a delete racing writers and rolls never loses nor resurrects
a row. Rows are read back with delta-rs and DuckDB, never through streampart's own reader.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from ingest.chunks import ChunkWriter
from ingest.deletes.deleter import Deleter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.layout import partition_dir
from metastore.errors import DeleteBusyError, ReadOnlyLinkError, RetriableError, UserInputError
from metastore.integrity import check_table
from metastore.links import LinkSpec
from metastore.models import Column, DeleteState, PartitionState, Table, TableKind, TableName
from scheduler.config import HousekeepingConfig
from scheduler.housekeeping import Housekeeper
from scheduler.roll import Roller
from tests.fixtures import add_clusters, make_table
from tests.helpers import (
    all_ids,
    assert_gone_early_flagged,
    cli_process,
    delta_file_paths,
    delta_rows,
    ids_by_partition,
    jsonl,
    wait_for,
    worker_call,
)

SCHEMA = "id BIGINT, ts TIMESTAMP, user_id BIGINT"


def rows(ids: range | list[int], users: int = 5) -> bytes:
    return jsonl([{"id": i, "ts": "2026-11-21T10:15:00Z", "user_id": i % users} for i in ids])


def table_rows(table: Table, version: int | None = None) -> list[tuple[int, int]]:
    got = delta_rows(table, version, columns="id, user_id").to_pylist()
    return sorted((r["id"], r["user_id"]) for r in got)


def filled(catalog: Catalog, name: str = "ns.events") -> tuple[Table, list[int]]:
    """Two standard partitions (30 rows each) and a streaming one (20 rows); user_id = id % 5."""
    table = make_table(catalog, name, schema=SCHEMA)
    w = ChunkWriter(catalog, table)
    for k in range(2):
        w.write(rows(range(k * 30, k * 30 + 15)), Format.JSONL)
        w.write(rows(range(k * 30 + 15, k * 30 + 30)), Format.JSONL)
        Roller(catalog).roll_table(table, force=True)
    w.write(rows(range(100, 120)), Format.JSONL)
    return table, [*range(60), *range(100, 120)]


def test_matching_rows_leave_standard_and_streaming_partitions_in_one_commit(catalog) -> None:
    table, ids = filled(catalog)
    store = catalog.store
    before = int(catalog.load(table).version())
    [dry] = Deleter(catalog).delete(table, "user_id = 1", dry_run=True)
    assert dry.dry_run and dry.rows == 16 and dry.files_removed == 3 and len(dry.partitions) == 3
    assert int(catalog.load(table).version()) == before  # a dry run changes nothing
    first = min(p.value for p in catalog.partitions(table))  # the partition column may be named too
    literal = first.strftime("%Y-%m-%d %H:%M:%S.%f")
    [by_period] = Deleter(catalog).delete(table, f"ts_period = TIMESTAMP '{literal}'", dry_run=True)
    assert (by_period.rows, by_period.files_read) == (30, 1)

    [done] = Deleter(catalog).delete(table, "user_id = 1")
    assert (done.rows, done.files_removed, len(done.partitions)) == (16, 3, 3)
    assert done.version == before + 2  # the seal, then one commit of every rewrite
    expected = [(i, i % 5) for i in ids if i % 5 != 1]
    assert table_rows(table) == expected
    assert table_rows(table, before) == [(i, i % 5) for i in ids]  # older versions keep them
    # an independent engine over the files the log lists agrees
    dt = catalog.warehouse.load(table)
    paths = [u.removeprefix("file://") for u in dt.file_uris()]
    with duckdb.connect() as con:  # its own connection: the module's default one is shared by tests
        counted = con.execute(
            f"SELECT count(*), count(*) FILTER (user_id = 1) FROM read_parquet({paths!r})"
        ).fetchall()[0]
    assert counted == (len(expected), 0)
    for p in catalog.partitions(table, [PartitionState.STANDARD]):
        assert p.rows == 24 and p.files is not None and p.files >= 1  # counted anew
    assert store.list_deletes(table.id)[0].state is DeleteState.DONE
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []
    assert Deleter(catalog).delete(table, "user_id = 1")[0].rows == 0  # nothing left to delete


def test_the_replaced_files_go_once_no_readable_version_lists_them(catalog) -> None:
    table, _ = filled(catalog)
    [done] = Deleter(catalog).delete(table, "user_id = 2")
    [d] = catalog.store.list_deletes(table.id)
    assert len(d.removed_files) == done.files_removed and all(
        (Path(table.location) / f).is_file() for f in d.removed_files
    )
    assert d.finished_at is not None
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h"))
    assert (
        keeper.run(now=d.finished_at + timedelta(hours=2)).deleted_files_reclaimed == 0
    )  # the log lists them
    assert_gone_early_flagged(catalog, table, Path(table.location) / d.removed_files[0])
    from metastore.delta.checkpoints import set_log_settings

    set_log_settings(catalog.load(table), log_retention=timedelta(hours=1))
    old = datetime.now(UTC).timestamp() - 7200
    for path in (Path(table.location) / "_delta_log").iterdir():
        os.utime(path, (old, old))
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h", checkpoint_every=1))
    gone = keeper.run(now=d.finished_at + timedelta(hours=2)).deleted_files_reclaimed
    gone += keeper.run(now=d.finished_at + timedelta(hours=2)).deleted_files_reclaimed
    assert gone >= 2 and not any(
        (Path(table.location) / f).is_file() for f in d.removed_files if "_staging" not in f
    )
    by_partition = ids_by_partition(table)
    for p in catalog.partitions(table, [PartitionState.STANDARD]):  # a plain reader of the directory
        plain = (
            pq.read_table(str(Path(table.location) / partition_dir(table, p.value))).column("id").to_pylist()
        )
        assert sorted(plain) == sorted(by_partition[p.value]) and all(i % 5 != 2 for i in plain)
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


@pytest.mark.parametrize(
    ("where", "fragment"),
    [
        ("nope = 1", "the table has no column 'nope'"),
        ("TRUE", "say so: --all"),
        ("user_id = 'x'", "user_id"),
        ("1 = 0", "matches no row"),
        ("user_id >= 0", "matches every row of ns.events; to delete every row, say so: --all"),
        ("ts_period IS NOT NULL", "matches every row"),
    ],
)
def test_a_bad_predicate_is_one_error_and_changes_nothing(catalog, where: str, fragment: str) -> None:
    table, _ = filled(catalog)
    before = int(catalog.load(table).version())
    with pytest.raises(UserInputError, match=fragment):
        Deleter(catalog).delete(table, where)
    assert int(catalog.load(table).version()) == before and catalog.store.list_deletes(table.id) == []


def test_links_companions_and_a_second_delete_are_refused(catalog) -> None:
    table, _ = filled(catalog)
    catalog.links.create(LinkSpec(name=TableName.parse("other.t"), source=table.name))
    with pytest.raises(ReadOnlyLinkError):
        catalog.table("other.t")
    dead = make_table(catalog, "ns.x", dead_letter=True)
    with pytest.raises(UserInputError, match="dead-letter table"):
        Deleter(catalog).delete(catalog.companion(dead, TableKind.DEAD_LETTER), "id = 1")
    catalog.store.begin_delete(table.id, "user_id = 3", "someone", "another-process", timedelta(minutes=5))
    with pytest.raises(
        DeleteBusyError,
        match=r"another delete of ns.events runs \(.user_id = 3., by someone\); retry once it finished",
    ):
        Deleter(catalog).delete(table, "user_id = 1")


def test_everything_goes_with_all(catalog) -> None:
    table, _ = filled(catalog)
    [done] = Deleter(catalog).delete(table, "TRUE", all_rows=True)
    assert done.rows == 80 and done.files_added == 0 and table_rows(table) == []
    again, _ = filled(catalog, "ns.again")
    [done] = Deleter(catalog).delete(again, "user_id < 5", all_rows=True)  # every row, and --all says so
    assert done.rows == 80 and table_rows(again) == []


@pytest.mark.process
@pytest.mark.parametrize("point", ["delete-after-begin", "delete-after-rewrite", "delete-after-commit"])
def test_a_delete_killed_at_each_step_is_finished_once_by_the_next(catalog, point: str) -> None:
    table, ids = filled(catalog)
    proc = cli_process(catalog, "delete", "ns.events", "--where", "user_id = 4", crashpoint=point)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    landed = point == "delete-after-commit"
    assert table_rows(table) == [(i, i % 5) for i in ids if not (landed and i % 5 == 4)]
    [dead] = catalog.store.list_deletes(table.id, unfinished=True)
    assert dead.lease_until is not None
    resumed = Deleter(catalog)
    catalog.store.claim_delete(
        dead, resumed.owner, timedelta(minutes=1), now=dead.lease_until + timedelta(seconds=1)
    )
    results = resumed.delete(table, "user_id = 3")
    assert [(r.where, r.resumed) for r in results] == [("user_id = 4", True), ("user_id = 3", False)]
    assert table_rows(table) == [(i, i % 5) for i in ids if i % 5 not in (3, 4)]
    assert catalog.store.list_deletes(table.id, unfinished=True) == []
    assert [p for p in check_table(catalog, table) if p.severity != "info"] == []  # no stray file either


def _replicated(catalog: Catalog, tmp_path: Path) -> Table:
    """A table of :data:`SCHEMA` on local cluster c1, replicated to c2."""
    add_clusters(catalog, tmp_path, "c1", "c2")
    return make_table(catalog, schema=SCHEMA, cluster="c1", replicate_to=("c2",))


def _spawn(catalog: Catalog, table: Table, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        **worker_call(catalog, table, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


@pytest.mark.process
def test_a_delete_racing_writers_rolls_and_replication_loses_and_resurrects_nothing(
    catalog, tmp_path
) -> None:
    """Two writer processes commit, a roller process force-rolls every 0.3 s and a replicator process
    copies standard partitions to a secondary while a ``streampart delete`` process removes writer 1's
    rows: every row of writer 1 the delete's snapshot held is gone, every other acknowledged row (and
    each of writer 1's later ones) is there once, on the primary and, once replication caught up, on
    the secondary (delta-rs reading both)."""
    from metastore.replicas import replica_table
    from scheduler.replication import Replicator

    add_clusters(catalog, tmp_path, "c1", "c2")
    table = make_table(catalog, cluster="c1", replicate_to=("c2",))
    stop = tmp_path / "stop"
    until = ("--until", str(stop))
    workers = [
        *(_spawn(catalog, table, "writer", "--writer", str(k), "--interval", "0.02", *until) for k in (0, 1)),
        _spawn(catalog, table, "roller", "--force", "--interval", "0.3", "--count", "100000", *until),
        _spawn(
            catalog, table, "replicator", "--interval", "0.3", "--count", "100000", "--lease", "5", *until
        ),
    ]
    try:
        wait_for(lambda: sum(i >= 1_000_000 for i in all_ids(table)) >= 200, "writer 1's first rows", 120)
        wait_for(lambda: catalog.replicas.present_on(table, "c2"), "a first copy on the secondary", 120)
        deleting = cli_process(catalog, "delete", str(table.name), "--where", "id >= 1000000")
        out, err = deleting.communicate(timeout=300)
        assert deleting.returncode == 0, err
        [done] = json.loads(out)["deletes"]
        time.sleep(1)  # writer 1 goes on: its later rows stay
    finally:
        stop.touch()
        outputs = [w.communicate(timeout=120) for w in workers]
    for w, (_, err) in zip(workers, outputs, strict=True):
        assert w.returncode == 0, err
    acked = [i for out, _ in outputs[:2] for line in out.splitlines() if "chunk" in (a := json.loads(line))
             for i in range(a["first"], a["first"] + a["rows"])]  # fmt: skip
    seen = all_ids(table)
    now, at_read = set(seen), set(all_ids(table, done["read_version"]))
    assert len(seen) == len(now), "a row is visible twice"
    assert done["rows"] == sum(i >= 1_000_000 for i in at_read) > 0
    for i in acked:
        if i >= 1_000_000 and i in at_read:
            assert i not in now, f"row {i} came back"
        else:
            assert i in now, f"row {i} was lost"
    while Replicator(catalog).replicate(table, include_waiting=True).copied:
        pass  # caught up: every standard partition's copy of the current generation
    [replica] = catalog.replicas.list(table)
    primary, copy = ids_by_partition(table), ids_by_partition(replica_table(table, replica))
    standard = {p.value for p in catalog.partitions(table) if p.state is PartitionState.STANDARD}
    assert catalog.replicas.present_on(table, "c2") == standard
    assert any(c.generation for c in catalog.store.list_copies(table.id, "c2")), "no copy was rewritten"
    held = {v: sorted(ids) for v, ids in primary.items() if v in standard}  # (a partition may be left empty)
    assert {v: sorted(ids) for v, ids in copy.items()} == held
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


def test_a_delete_commit_planned_before_a_sweep_of_its_files_is_refused(catalog) -> None:
    """delta-rs lets a commit remove a file another commit removed with dataChange=false (a roll's
    sweep, which moved the file's rows into its own): a delete planned before that sweep committed,
    and the rows it deleted stayed in the sweep's file. A delete's commit is checked against every
    commit since its snapshot, so it is refused and planned again."""
    from metastore.delta.files import live_files
    from metastore.errors import ConflictError

    table = make_table(catalog, schema=SCHEMA)
    ChunkWriter(catalog, table).write(rows(range(10)), Format.JSONL)
    wh = catalog.warehouse
    planned = catalog.load(table)  # the delete's snapshot
    [chunk] = live_files(planned)
    swept = catalog.load(table)
    wh.replace_files(swept, table, [chunk], [], {"test.sweep": "1"})  # a sweep's remove (dataChange=false)
    with pytest.raises(ConflictError, match="changed what it was planned on"):
        wh.replace_files(planned, table, [chunk], [], {"test.delete": "1"}, data_change=True, checked=True)
    unchecked = catalog.load(table)  # (delta-rs' own check lets the same commit through)
    unchecked.load_as_version(int(planned.version()))
    wh.replace_files(unchecked, table, [chunk], [], {"test.delete": "2"}, data_change=True)


def test_a_copy_under_way_when_a_delete_rewrites_its_partition_is_copied_again(catalog, tmp_path) -> None:
    """A copy read the partition's files before a delete rewrote it: renewing its claim after a file is
    refused (the claim kept its generation), so the copy is abandoned and the next pass copies the
    files the delete left; the secondary never holds the deleted rows as present."""
    from metastore.replicas import CopyState, replica_table
    from scheduler.errors import ReplicationAbandonedError
    from scheduler.replication import Replicator

    table = _replicated(catalog, tmp_path)
    w = ChunkWriter(catalog, table)
    for k in range(2):
        w.write(rows(range(k * 10, k * 10 + 10)), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    steps: list[int] = []

    def delete_after_the_first_file() -> bool:
        steps.append(1)
        if len(steps) == 2:  # after the claim (1); after the first file (2), the claim renewed next
            Deleter(catalog).delete(table, "user_id = 1")
        return False

    with pytest.raises(ReplicationAbandonedError, match="a delete rewrote the partition"):
        Replicator(catalog, should_abandon=delete_after_the_first_file).replicate(table)
    assert len(steps) == 2
    assert {c.state for c in catalog.store.list_copies(table.id, "c2")} != {CopyState.PRESENT}
    assert len(Replicator(catalog).replicate(table).copied) == 1
    [replica] = catalog.replicas.list(table)
    assert table_rows(replica_table(table, replica)) == [(i, i % 5) for i in range(20) if i % 5 != 1]


def test_a_copy_finishing_while_a_rewrite_commits_is_not_recorded_present(catalog, tmp_path) -> None:
    """A copier records its copy present while a delete's rewrite of the partition is committing
    (its new generation and its present copies marked stale, in one transaction): the copy is refused
    (it was made at the old generation), never left present with the replaced files. On PostgreSQL
    the copier's read of the generation once came before the rewrite's commit and its own update
    after the rewrite's stale-marking, and the copy stayed present."""
    from metastore.errors import ConflictError
    from metastore.replicas import CopyState
    from metastore.store.rewrites import record_rewritten

    table = _replicated(catalog, tmp_path)
    ChunkWriter(catalog, table).write(rows(range(10)), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    [partition] = catalog.partitions(table, [PartitionState.STANDARD])
    copy = catalog.store.claim_copy(partition, "c2", "copier", timedelta(seconds=60))
    outcome: list[object] = []

    def finish() -> None:
        try:
            outcome.append(
                catalog.store.finish_copy(copy, "copier", files=1, bytes=1, checksum="x", delta_version=1)
            )
        except ConflictError as exc:
            outcome.append(exc)

    with catalog.store.tx() as conn:  # the rewrite's transaction, open while the copier finishes
        record_rewritten(conn, table.id, {partition.value: (8, 1, 1)}, {})
        copier = threading.Thread(target=finish)
        copier.start()
        copier.join(timeout=1.5)  # it waits for the rewrite (or, before the fix, did not)
    copier.join(timeout=60)
    [result] = outcome
    assert isinstance(result, ConflictError) and "a delete rewrote the partition" in str(result), result
    [after] = catalog.store.list_copies(table.id, "c2")
    assert after.state is not CopyState.PRESENT and catalog.replicas.present_on(table, "c2") == set()


def test_a_delete_reaches_the_secondaries(catalog, tmp_path) -> None:
    """A rewritten standard partition's copies go stale at once (queries there stop reading them) and
    the next copy pass replaces the secondary's files in one commit of the new generation."""
    from metastore.replicas import CopyState, replica_table
    from scheduler.replication import Replicator

    table = _replicated(catalog, tmp_path)
    w = ChunkWriter(catalog, table)
    for k in range(2):
        w.write(rows(range(k * 10, k * 10 + 10)), Format.JSONL)
        Roller(catalog).roll_table(table, force=True)
    assert len(Replicator(catalog).replicate(table).copied) == 2
    [replica] = catalog.replicas.list(table)
    copy = replica_table(table, replica)
    assert table_rows(copy) == [(i, i % 5) for i in range(20)]
    Deleter(catalog).delete(table, "user_id = 1")
    assert {c.state for c in catalog.store.list_copies(table.id, "c2")} == {CopyState.STALE}
    assert catalog.replicas.present_on(table, "c2") == set()  # queries there read the primary now
    report = Replicator(catalog).replicate(table)
    assert len(report.copied) == 2 and not report.failed
    assert table_rows(copy) == [(i, i % 5) for i in range(20) if i % 5 != 1]
    copies = catalog.store.list_copies(table.id, "c2")
    assert {(c.state, c.generation) for c in copies} == {(CopyState.PRESENT, 1)}
    assert Replicator(catalog).replicate(table).copied == []  # nothing owed
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []
    # the secondary's replaced files: kept while its log holds a version listing them, then gone
    root = Path(copy.location)
    before = {f.relative_to(root) for f in root.rglob("*.parquet") if "_delta_log" not in f.parts}
    now = set(ids_by_partition(copy))  # (partition values)
    old_files = before - {Path(f) for f in delta_file_paths(copy)}
    assert len(old_files) == 2
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h", checkpoint_every=1))
    later = datetime.now(UTC) + timedelta(hours=2)
    assert keeper.run(now=later).secondary_files_reclaimed == 0  # version 0.. still readable there
    from metastore.delta.checkpoints import set_log_settings

    set_log_settings(catalog.warehouse.load(copy), log_retention=timedelta(hours=1))
    Roller(catalog).roll_table(table, force=True)  # (a commit after the settings, on the primary)
    old = time.time() - 7200
    for path in (root / "_delta_log").iterdir():
        os.utime(path, (old, old))
    first, second = keeper.run(now=later), keeper.run(now=later)
    assert not first.errors and not second.errors, (first.errors, second.errors)
    gone = first.secondary_files_reclaimed + second.secondary_files_reclaimed
    assert gone == 2 and not any((root / f).exists() for f in old_files)
    assert (
        table_rows(copy) == [(i, i % 5) for i in range(20) if i % 5 != 1]
        and set(ids_by_partition(copy)) == now
    )


def test_migrations_0016_and_0017_go_back_and_forth_keeping_every_row(metastore_url: str, tmp_path) -> None:
    """Down to 0015 (before retention and deletes) and up again: tables, partitions and chunks stay,
    the new settings come back at their defaults, and a delete works after."""
    import sqlalchemy as sa

    from metastore import schema as s
    from metastore.store import Metastore
    from tests.helpers import downgraded

    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    try:
        table, ids = filled(catalog)
        Deleter(catalog).delete(table, "user_id = 0")
        keep = [s.tables.c.id, s.tables.c.name, s.tables.c.columns]
        with catalog.store.read_tx() as conn:
            before = conn.execute(sa.select(*keep)).all(), conn.execute(sa.select(s.chunks.c.id)).all()
    finally:
        catalog.close()
    with downgraded(metastore_url, "0015") as conn:
        names = set(sa.inspect(conn).get_table_names())
        assert "sp_deletes" not in names and "sp_expiries" not in names
        assert (conn.execute(sa.select(*keep)).all(), conn.execute(sa.select(s.chunks.c.id)).all()) == before
    Metastore(metastore_url).close()  # migrates to head
    catalog = Catalog.open(tmp_path / "wh", metastore_url)
    try:
        again = catalog.table("ns.events")
        assert again.retain is None and {p.generation for p in catalog.partitions(again)} == {0}
        [done] = Deleter(catalog).delete(again, "user_id = 3")
        assert table_rows(again) == [(i, i % 5) for i in ids if i % 5 not in (0, 3)] and done.rows == 16
    finally:
        catalog.close()


def test_a_delete_racing_expiry_passes_leaves_every_partition_whole_or_gone(catalog) -> None:
    """Expiry passes remove hour after hour while a delete rewrites the same partitions: whichever
    commit comes second is refused and planned again, so no expired partition keeps a file and no
    kept row of a live partition is lost."""
    from metastore.models import Mode, iso
    from scheduler.expiry import Expirer

    start = datetime(2026, 11, 21, tzinfo=UTC)
    table = make_table(catalog, mode=Mode.EVENT_TIME, schema=SCHEMA)
    w = ChunkWriter(catalog, table)
    for h in range(12):
        ts = iso(start + timedelta(hours=h, minutes=5))
        w.write(jsonl([{"id": h * 10 + k, "ts": ts, "user_id": k % 5} for k in range(10)]), Format.JSONL)
    Roller(catalog).roll_table(table, now=start + timedelta(hours=13))
    table = catalog.retention.set(table, timedelta(hours=1))
    errors: list[BaseException] = []

    def expire() -> None:
        try:
            for h in range(2, 10):  # an hour more due each pass, up to the first 8
                while True:
                    try:
                        Expirer(catalog).expire_table(table, now=start + timedelta(hours=h))
                        break
                    except RetriableError:
                        continue  # a delete's seal or commit came first: the next try plans again
        except BaseException as exc:
            errors.append(exc)

    expirer = threading.Thread(target=expire)
    expirer.start()
    try:
        [done] = Deleter(catalog).delete(table, "user_id = 2")
    finally:
        expirer.join(timeout=120)
    assert not errors, errors
    assert done.rows > 0
    states = {p.value: p.state for p in catalog.partitions(table)}
    by_partition = ids_by_partition(table)
    for h in range(12):
        value = start + timedelta(hours=h)
        if states[value] is PartitionState.EXPIRED:
            assert value not in by_partition, f"expired partition {iso(value)} still holds rows"
        else:
            kept = sorted(h * 10 + k for k in range(10) if k % 5 != 2)
            assert sorted(by_partition.get(value, [])) == kept, f"partition {iso(value)} lost rows"
    assert sum(s is PartitionState.EXPIRED for s in states.values()) == 8
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


def test_a_column_added_after_files_were_written_is_null_in_them(catalog) -> None:
    """Files written before ``country`` was added lack it: there it is NULL, so ``country = 'DE'``
    matches none of their rows and ``country IS NULL`` every one (as Spark and delta-rs read them)."""
    table, ids = filled(catalog)
    catalog.schemas.alter(table, add=[Column(name="country", type="string", nullable=True)])
    table = catalog.table("ns.events")
    later = [{"id": 200 + k, "ts": "2026-11-21T10:15:00Z", "user_id": 1, "country": ["DE", None][k % 2]}
             for k in range(10)]  # fmt: skip
    ChunkWriter(catalog, table).write(jsonl(later), Format.JSONL)
    [de] = Deleter(catalog).delete(table, "country = 'DE'")
    assert de.rows == 5 and de.files_removed == 1
    [unknown] = Deleter(catalog).delete(table, "country IS NULL AND user_id = 1")
    assert unknown.rows == 16 + 5
    got = delta_rows(table, columns="id, country").to_pylist()
    assert sorted(r["id"] for r in got) == sorted(i for i in ids if i % 5 != 1)
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


# -- a partition in between states is never skipped; a dead or frozen deleter is taken over in seconds

H = datetime(2026, 11, 21, tzinfo=UTC)


def two_hours(catalog: Catalog) -> Table:
    """An hourly event-time table: hours H and H+1, three rows each (g = 1, 2, 3), both rolled, and
    kept one hour after its period (so both are due at H+4h)."""
    from metastore.models import Mode, iso

    table = make_table(catalog, "ns.t", mode=Mode.EVENT_TIME, schema="id BIGINT, ts TIMESTAMP, g BIGINT")
    w = ChunkWriter(catalog, table)
    for h in range(2):
        ts = iso(H + timedelta(hours=h, minutes=15))
        w.write(jsonl([{"id": h * 3 + g, "ts": ts, "g": g} for g in (1, 2, 3)]), Format.JSONL)
    Roller(catalog).roll_table(table, now=H + timedelta(hours=3))
    return catalog.retention.set(table, timedelta(hours=1))


def g_rows(table: Table) -> list[tuple[int, int]]:
    """(id, g) of every row, read by delta-rs."""
    return sorted((r["id"], r["g"]) for r in delta_rows(table, columns="id, g").to_pylist())


def killed_expiry(catalog: Catalog, table: Table) -> None:
    """``streampart expire`` SIGKILLed right after it marked both partitions EXPIRING."""
    from metastore.models import iso

    proc = cli_process(
        catalog, "expire", "ns.t", "--now", iso(H + timedelta(hours=4)), crashpoint="expire-after-begin"
    )
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    assert {p.state for p in catalog.partitions(table)} == {PartitionState.EXPIRING}


@pytest.mark.process
def test_a_delete_removes_the_matches_of_partitions_a_dead_expiry_left_expiring(catalog) -> None:
    """The reproducer: 6 rows in two partitions, an expiry SIGKILLed after it marked them EXPIRING
    (their files still in the table, every reader sees their rows), then ``streampart delete --where
    "g = 3"``. It used to skip both partitions, exit 0 with ``rows: 0`` and leave the g = 3 rows
    visible; the delete now removes them (delta-rs reads none), ``check`` is clean, and the expiry
    resumed later removes the rest."""
    from scheduler.expiry import Expirer

    table = two_hours(catalog)
    killed_expiry(catalog, table)
    deleting = cli_process(catalog, "delete", "ns.t", "--where", "g = 3")
    out, err = deleting.communicate(timeout=120)
    assert deleting.returncode == 0, err
    [done] = json.loads(out)["deletes"]
    assert done["rows"] == 2
    assert g_rows(table) == [(1, 1), (2, 2), (4, 1), (5, 2)]
    checked = cli_process(catalog, "check", "ns.t")
    out, err = checked.communicate(timeout=120)
    assert checked.returncode == 0, out + err
    [expiry] = catalog.store.list_expiries(table.id, unfinished=True)
    assert expiry.lease_until is not None  # (its process died: once its lease lapsed, resumed)
    resumed = Expirer(catalog)
    catalog.store.claim_expiry(
        expiry, resumed.owner, timedelta(minutes=1), now=expiry.lease_until + timedelta(seconds=1)
    )
    [result] = resumed.expire_table(table, now=H + timedelta(hours=4))
    assert result.resumed and g_rows(table) == []
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


@pytest.mark.process
def test_check_names_a_row_a_finished_delete_left_visible(catalog, monkeypatch) -> None:
    """A delete that skips a partition (as one did with expiring partitions) finishes with the
    matching rows still visible: ``streampart check`` names one of them, and the delete to run
    again."""
    import ingest.deletes.deleter as deleter_module
    from ingest.deletes.plan import candidates

    table = two_hours(catalog)
    killed_expiry(catalog, table)

    def skipping(table, predicate, files, states, bounds=None):  # the old plan: expiring ones left out
        files = [f for f in files if states.get(f.partition) is not PartitionState.EXPIRING]
        return candidates(table, predicate, files, states, bounds)

    monkeypatch.setattr(deleter_module, "candidates", skipping)
    [done] = Deleter(catalog).delete(table, "g = 3")
    assert done.rows == 0 and (3, 3) in g_rows(table)
    checked = cli_process(catalog, "check", "ns.t")
    out, err = checked.communicate(timeout=120)
    assert checked.returncode == 1, out + err
    missed = [p for p in json.loads(out)["problems"] if p["kind"] == "delete_missed_rows"]
    assert len(missed) == 2, out  # one file in each partition
    assert all(done.delete in p["message"] and "g=3" in p["message"] for p in missed), missed
    assert all("run the delete again" in p["message"] for p in missed)


def _retry_until_taken_over(catalog: Catalog, table: Table, where: str, since: float) -> list:
    """Delete ``where`` in this process, again while the dead or frozen one holds the table."""
    busy = 0
    while True:
        try:
            return [busy, time.monotonic() - since, Deleter(catalog).delete(table, where)]
        except DeleteBusyError as exc:
            assert "taken over" in str(exc) and "about 10 s after" in str(exc), exc
            busy += 1
            assert time.monotonic() - since < 60, "the dead delete was never taken over"
            time.sleep(0.5)


@pytest.mark.process
def test_a_killed_delete_is_taken_over_within_seconds_by_the_next(catalog) -> None:
    """A ``streampart delete`` SIGKILLed after its rewrite held its table for its whole lease
    (10 minutes); its process lease now lapses ~8 s after its last renewal, and the next delete,
    refused until then, takes it over and finishes it, then runs its own."""
    table, ids = filled(catalog)
    proc = cli_process(
        catalog, "delete", "ns.events", "--where", "user_id = 4", crashpoint="delete-after-rewrite"
    )
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    [dead] = catalog.store.list_deletes(table.id, unfinished=True)
    assert dead.lease_until is not None and dead.lease_until > datetime.now(UTC) + timedelta(minutes=5)
    busy, took, results = _retry_until_taken_over(catalog, table, "user_id = 3", time.monotonic())
    assert busy > 0, "taken over while its process lease was live"
    assert took < 20, f"taken over after {took:.1f} s"
    assert [(r.where, r.resumed) for r in results] == [("user_id = 4", True), ("user_id = 3", False)]
    assert table_rows(table) == [(i, i % 5) for i in ids if i % 5 not in (3, 4)]


# A ``streampart delete`` frozen (SIGSTOP) at a step, taken over by another delete, then woken:
# it must commit nothing — no seal, no rewrite — and exit with one line.
FROZEN = [
    # recorded, not sealed: its own lease check (the fence) stops it before its seal
    ("delete-after-begin", 0),
    # sealed and rewritten, not committed: the delete is no longer its own; its rewrite is discarded
    ("delete-after-rewrite", 1),
]


@pytest.mark.process
@pytest.mark.parametrize(("point", "sealed"), FROZEN)
def test_a_frozen_delete_woken_after_its_takeover_commits_nothing(catalog, point: str, sealed: int) -> None:
    table, ids = filled(catalog)
    before = int(catalog.load(table).version())
    proc = cli_process(catalog, "delete", "ns.events", "--where", "user_id = 4", pausepoint=f"{point}:3")
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == f"pausepoint {point}"
    proc.send_signal(signal.SIGSTOP)
    try:
        _, took, results = _retry_until_taken_over(catalog, table, "user_id = 3", time.monotonic())
    finally:
        proc.send_signal(signal.SIGCONT)
    assert took < 20
    assert [(r.where, r.resumed) for r in results] == [("user_id = 4", True), ("user_id = 3", False)]
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    # each delete here: one seal and one commit; the frozen one's seal only if it sealed before
    assert int(catalog.load(table).version()) == before + sealed + 4
    assert table_rows(table) == [(i, i % 5) for i in ids if i % 5 not in (3, 4)]
    assert [p for p in check_table(catalog, table) if p.severity != "info"] == []  # no stray file

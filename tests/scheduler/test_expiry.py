"""Retention (issue 30): standard partitions whose retention ran out leave the table in one Delta
commit; versions before it keep them (time travel, pinned queries); their periods stay sealed; their
files go only once no readable version lists them. Both metastore backends; rows are read back with
delta-rs (an independent reader); time is given explicitly.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.errors import LateDataError
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.checkpoints import set_log_settings
from metastore.delta.history import oldest_readable_version
from metastore.delta.layout import partition_dir
from metastore.durations import parse_duration
from metastore.errors import UserInputError
from metastore.integrity import check_table
from metastore.models import Mode, PartitionState, Table, iso
from metastore.replicas import CopyState, replica_table
from scheduler.config import HousekeepingConfig
from scheduler.expiry import Expirer
from scheduler.housekeeping import Housekeeper
from scheduler.replication import Replicator
from scheduler.roll import Roller
from tests.fixtures import add_clusters, make_table
from tests.helpers import (
    all_ids,
    assert_gone_early_flagged,
    cli_process,
    duplicates,
    ids_by_partition,
    records,
    wait_for,
)
from tests.scheduler.helpers import Writer, fast_config, metrics_samples, running

H = datetime(2026, 11, 21, tzinfo=UTC)
HOURS = 6


def backfilled(catalog: Catalog, retain: str | None = "3h", name: str = "ns.events") -> Table:
    """An hourly event-time table holding hours H..H+5 (ten rows each), every one rolled, then given
    ``retain`` (written before: with it, rows older than the retention are late)."""
    table = make_table(catalog, name, mode=Mode.EVENT_TIME)
    w = ChunkWriter(catalog, table)
    for h in range(HOURS):
        w.write(records(range(h * 10, h * 10 + 10), ts=iso(H + timedelta(hours=h, minutes=15))), Format.JSONL)
    Roller(catalog).roll_table(table, now=H + timedelta(hours=HOURS + 1))
    assert len(catalog.partitions(table, [PartitionState.STANDARD])) == HOURS
    return catalog.retention.set(table, parse_duration(retain)) if retain is not None else table


def test_due_partitions_leave_the_table_in_one_commit_and_older_versions_keep_them(catalog) -> None:
    table = backfilled(catalog)
    store = catalog.store
    before = int(catalog.load(table).version())
    quota_before = store.committed_bytes("ns")
    # at H+7h: hours H..H+3 ended at least 3 h ago (retention counts from a period's end)
    now = H + timedelta(hours=7)
    [dry] = Expirer(catalog).expire_table(table, now=now, dry_run=True)
    assert dry.dry_run and dry.partitions == [iso(H + timedelta(hours=h)) for h in range(4)]
    assert int(catalog.load(table).version()) == before  # a dry run changes nothing

    [result] = Expirer(catalog).expire_table(table, now=now)
    assert result.partitions == dry.partitions and result.rows == 40 and result.version == before + 1
    assert int(catalog.load(table).version()) == before + 1  # one commit for four partitions
    assert sorted(all_ids(table)) == list(range(40, 60))
    assert sorted(all_ids(table, version=before)) == list(range(60))  # time travel keeps them
    states = {p.value: p for p in catalog.partitions(table)}
    for h in range(HOURS):
        p = states[H + timedelta(hours=h)]
        expired = h < 4
        assert p.state is (PartitionState.EXPIRED if expired else PartitionState.STANDARD)
        assert p.expired_version == (before + 1 if expired else None)
        assert (Path(table.location) / partition_dir(table, p.value)).is_dir()  # files stay for now
    expired_bytes = sum(states[H + timedelta(hours=h)].bytes or 0 for h in range(4))
    assert expired_bytes > 0 and store.committed_bytes("ns") == quota_before - expired_bytes
    assert Expirer(catalog).expire_table(table, now=now) == []  # nothing more is due
    described = catalog.describe(table)
    assert [p["value"] for p in described["partitions"]] == [iso(H + timedelta(hours=h)) for h in (4, 5)]
    assert described["retention"]["retain"] == "3h" and described["retention"]["source"] == "table"
    assert described["retention"]["expired"]["partitions"] == 4
    assert described["retention"]["next_expiry"] == iso(H + timedelta(hours=8))
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []
    # the period of an expired partition stays sealed: a late row is late, no partition reopens;
    # and a row whose period ended longer ago than the retention is late too (never a partition
    # that would expire at the next pass)
    table = catalog.retention.set(table, timedelta(days=30))
    with pytest.raises(LateDataError, match="sealed"):
        ChunkWriter(catalog, table).write(records([999], ts=iso(H + timedelta(minutes=5))), Format.JSONL)
    assert catalog.store.get_partition(table.id, H).state is PartitionState.EXPIRED
    old = iso(datetime.now(UTC) - timedelta(days=40))
    with pytest.raises(LateDataError, match=r"ended more than 30d ago \(its retention\)"):
        ChunkWriter(catalog, table).write(records([998], ts=old), Format.JSONL)
    assert len(catalog.partitions(table)) == HOURS


def test_the_files_go_once_no_readable_version_lists_them_and_the_grace_passed(catalog) -> None:
    table = backfilled(catalog)
    [result] = Expirer(catalog).expire_table(table, now=H + timedelta(hours=7))
    root = Path(table.location)
    dirs = [root / partition_dir(table, H + timedelta(hours=h)) for h in range(HOURS)]
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h"))
    expired_at = catalog.store.get_partition(table.id, H).expired_at
    assert expired_at is not None
    # past the grace, but the log still holds the versions before the expiry: time travel reads them
    assert keeper.run(now=expired_at + timedelta(hours=2)).partitions_reclaimed == 0
    assert all(d.is_dir() for d in dirs)
    assert_gone_early_flagged(catalog, table, next(dirs[0].glob("*.parquet")))
    # the log forgets those versions: then the expired partitions' files go, and only theirs
    set_log_settings(catalog.load(table), log_retention=timedelta(hours=1))
    Roller(catalog).roll_table(table, now=H + timedelta(hours=8))  # (a commit or two after the expiry)
    old = time.time() - 2 * 3600
    for path in (root / "_delta_log").iterdir():
        os.utime(path, (old, old))
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h", checkpoint_every=1))
    reclaimed = keeper.run(now=expired_at + timedelta(hours=2)).partitions_reclaimed  # checkpoints, cleans
    assert oldest_readable_version(table) > (result.version or 0)
    reclaimed += keeper.run(now=expired_at + timedelta(hours=2)).partitions_reclaimed
    assert reclaimed == 4
    assert [d.is_dir() for d in dirs] == [False] * 4 + [True] * 2
    assert all(catalog.store.get_partition(table.id, H + timedelta(hours=h)).reclaimed_at for h in range(4))
    assert sorted(all_ids(table)) == list(range(40, 60))
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


def test_a_namespace_default_applies_to_tables_that_set_none_and_companions_follow(catalog) -> None:
    catalog.namespaces.create("ns", default_retain=timedelta(hours=3))
    table = backfilled(catalog, retain=None)
    assert catalog.retention.of(table) == (timedelta(hours=3), "namespace")
    keep = catalog.retention.set(table, timedelta(0))  # --retain none: for ever, whatever the namespace
    assert catalog.retention.of(keep) == (None, "table")
    assert Expirer(catalog).expire_table(keep, now=H + timedelta(days=30)) == []
    follow = catalog.retention.set(keep, None)  # --retain namespace
    [result] = Expirer(catalog).expire_table(follow, now=H + timedelta(hours=7))
    assert len(result.partitions) == 4 and result.retain == "3h"


def test_a_retention_below_the_roll_interval_is_refused_and_nothing_changes(catalog) -> None:
    table = make_table(catalog, mode=Mode.EVENT_TIME, lateness="30m", retain="2h")
    with pytest.raises(
        UserInputError, match=r"--retain 1h is shorter than ns.events's roll interval 1h plus"
    ):
        catalog.retention.set(table, timedelta(hours=1))
    with pytest.raises(
        UserInputError,
        match=r"--retain 30m is shorter than ns.other.s roll interval 1h: its partitions would expire",
    ):
        make_table(catalog, "ns.other", retain="30m")
    assert catalog.find_table(make_table(catalog, "ns.kept").name) is not None
    assert catalog.table("ns.events").retain == timedelta(hours=2)
    follows = catalog.retention.set(table, None)  # its namespace has no default: kept for ever
    assert catalog.retention.of(follows) == (None, "none")
    with pytest.raises(UserInputError, match=r"ns.events \(at least 1h30m\)"):
        catalog.namespaces.alter("ns", default_retain=timedelta(hours=1))
    assert catalog.namespaces.get("ns").default_retain is None
    catalog.namespaces.alter("ns", default_retain=timedelta(hours=2))
    assert catalog.retention.of(catalog.table("ns.events")) == (timedelta(hours=2), "namespace")


@pytest.mark.process
@pytest.mark.parametrize("point", ["expire-after-begin", "expire-after-commit"])
def test_an_expirer_killed_at_each_step_is_resumed_and_expires_each_partition_once(catalog, point) -> None:
    table = backfilled(catalog)
    store, now = catalog.store, H + timedelta(hours=7)
    before = int(catalog.load(table).version())
    proc = cli_process(catalog, "expire", "ns.events", "--now", iso(now), crashpoint=point)
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    states = [p.state for p in catalog.partitions(table)]
    assert states == [PartitionState.EXPIRING] * 4 + [PartitionState.STANDARD] * 2
    landed = point == "expire-after-commit"
    assert int(catalog.load(table).version()) == before + landed
    assert sorted(all_ids(table)) == list(range(40 if landed else 0, 60))  # whole partitions, or none
    # the dead expirer's lease must lapse before another resumes it (here, in the metastore's clock)
    [expiry] = store.list_expiries(table.id, unfinished=True)
    resumed = Expirer(catalog)
    assert expiry.lease_until is not None
    store.claim_expiry(
        expiry, resumed.owner, timedelta(minutes=1), now=expiry.lease_until + timedelta(seconds=1)
    )
    [result] = resumed.expire_table(table, now=now)
    assert result.resumed and result.version == before + 1 and result.rows == 40
    assert int(catalog.load(table).version()) == before + 1  # one commit removed them, once
    assert sorted(all_ids(table)) == list(range(40, 60))
    assert [p.state for p in catalog.partitions(table)][:4] == [PartitionState.EXPIRED] * 4
    assert (
        Expirer(catalog).expire_table(table, now=now) == []
        and store.list_expiries(table.id, unfinished=True) == []
    )
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


@pytest.mark.process
def test_a_stalled_expirer_whose_pass_was_taken_over_commits_nothing_twice(catalog) -> None:
    """An expirer stalls (a GC pause, a frozen VM) after it began, past its lease; another takes the
    pass over and finishes it. The stalled one wakes: the removes are in the log already (their app
    transaction), and the pass is not its own any more: it stops, nothing is removed or recorded twice."""
    table = backfilled(catalog)
    store, now = catalog.store, H + timedelta(hours=7)
    before = int(catalog.load(table).version())
    proc = cli_process(catalog, "expire", "ns.events", "--now", iso(now), pausepoint="expire-after-begin:6")
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == "pausepoint expire-after-begin"
    [expiry] = store.list_expiries(table.id, unfinished=True)
    assert expiry.lease_until is not None
    other = Expirer(catalog)
    store.claim_expiry(
        expiry, other.owner, timedelta(minutes=1), now=expiry.lease_until + timedelta(seconds=1)
    )
    [result] = other.expire_table(table, now=now)
    assert result.resumed and result.version == before + 1
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert int(catalog.load(table).version()) == before + 1
    assert sorted(all_ids(table)) == list(range(40, 60))
    [done] = store.list_expiries(table.id)
    assert done.owner == other.owner and done.commit_version == before + 1


def test_the_daemon_expires_partitions_on_schedule_while_writers_commit_and_partitions_roll(catalog) -> None:
    """A table rolled every 2 s and kept 2 s past each period: the leader's expiry pass removes its
    old partitions while a writer commits and the daemon rolls. Every acknowledged row is in the
    table once, or in a partition that expired: then in the version before its expiry (time travel)
    and never after it."""
    table = make_table(catalog, roll_every="2s", retain="2s")
    writer = Writer(catalog, table)
    writer.start()
    try:
        with running(catalog, fast_config(expiry_interval="0.5s")) as daemon:
            wait_for(lambda: len(catalog.partitions(table, [PartitionState.EXPIRED])) >= 2, timeout=60)
            port = daemon.metrics_port
            expired_total = metrics_samples(port)[
                ("streampart_expired_partitions_total", (("table", "ns.events"),))
            ]
    finally:
        writer.stop()
    assert expired_total >= 2
    now = {p.value: p for p in catalog.partitions(table)}
    current = ids_by_partition(table)
    assert not duplicates([i for ids in current.values() for i in ids])
    acked: dict[datetime, list[int]] = {}
    for ids, [value] in writer.acks:
        acked.setdefault(value, []).extend(ids)
    for value, ids in acked.items():
        p = now[value]
        if p.state is PartitionState.EXPIRED:
            assert value not in current and p.expired_version is not None
            assert sorted(ids_by_partition(table, p.expired_version - 1).get(value, [])) == sorted(ids)
        else:
            assert sorted(current.get(value, [])) == sorted(ids), f"partition {iso(value)} lost rows"
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


@pytest.mark.process
def test_a_daemon_process_expires_while_writer_processes_commit_and_a_delete_process_runs(
    catalog, tmp_path
) -> None:
    """Processes only: two writers commit, ``streampart scheduler run`` rolls every 2 s and expires each
    partition 2 s after its period, and ``streampart delete`` removes writer 1's rows mid-way. Every
    acknowledged row is where it should be: gone with its expired partition (and in the version
    before that expiry unless the delete had taken it), else in the table once unless the delete's
    snapshot held it (delta-rs reads every version)."""
    from tests.helpers import worker_call
    from tests.scheduler.helpers import start_daemon

    table = make_table(catalog, roll_every="2s", retain="2s")
    stop = tmp_path / "stop"
    writers = [subprocess.Popen(**worker_call(catalog, table, "writer", "--writer", str(k), "--rows", "5",
                                              "--interval", "0.05", "--until", str(stop)),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for k in (0, 1)]  # fmt: skip
    daemon = start_daemon(catalog, tmp_path / "daemon.log", expiry_interval="0.5s")

    def expired() -> int:
        return len(catalog.partitions(table, [PartitionState.EXPIRED]))

    try:
        wait_for(lambda: expired() >= 2, "two partitions to expire", timeout=120)
        deleting = cli_process(catalog, "delete", "ns.events", "--where", "id >= 1000000")
        out, err = deleting.communicate(timeout=300)
        assert deleting.returncode == 0, err
        [done] = json.loads(out)["deletes"]
        after = expired()
        wait_for(lambda: expired() > after, "a partition to expire after the delete", timeout=120)
    finally:
        stop.touch()
        outputs = [w.communicate(timeout=120) for w in writers]
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    for w, (_, err) in zip(writers, outputs, strict=True):
        assert w.returncode == 0, err
    acks = [a for out, _ in outputs for line in out.splitlines() if "chunk" in (a := json.loads(line))]
    acked = [(i, datetime.fromisoformat(a["partitions"][0])) for a in acks
             for i in range(a["first"], a["first"] + a["rows"])]  # fmt: skip
    deleted = {i for i in all_ids(table, done["read_version"]) if i >= 1_000_000}
    assert done["rows"] == len(deleted) > 0
    parts = {p.value: p for p in catalog.partitions(table)}
    current = ids_by_partition(table)
    assert not duplicates([i for ids in current.values() for i in ids])
    before_expiry: dict[int, dict[datetime, list[int]]] = {}
    for i, value in acked:
        p = parts[value]
        if p.state is PartitionState.EXPIRED:
            assert i not in current.get(value, []) and p.expired_version is not None
            v = p.expired_version - 1
            held = before_expiry.setdefault(v, ids_by_partition(table, v)).get(value, [])
            gone = i in deleted and v >= done["version"]
            assert (i in held) != gone, f"row {i} of expired partition {iso(value)} at version {v}"
        elif p.state is PartitionState.EXPIRING and value not in current:
            continue  # the daemon stopped between its expiry's commit and its record: gone, as planned
        else:
            assert (i in current.get(value, [])) != (i in deleted), f"row {i} lost or come back"
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


def test_expired_partitions_leave_the_secondaries_too(catalog, tmp_path) -> None:
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = make_table(catalog, cluster="c1", replicate_to=("c2",), retain="1h")
    w = ChunkWriter(catalog, table)
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
        Roller(catalog).roll_table(table, force=True)
    w.write(records(range(100, 105)), Format.JSONL)  # streaming: neither copied nor expired
    assert len(Replicator(catalog).replicate(table).copied) == 3
    [replica] = catalog.replicas.list(table)
    copy = replica_table(table, replica)
    before = int(DeltaTable(copy.location).version())
    assert sorted(all_ids(copy)) == list(range(30))
    [result] = Expirer(catalog).expire_table(table, now=datetime.now(UTC) + timedelta(days=1))
    assert len(result.partitions) == 3 and result.rows == 30
    assert sorted(all_ids(table)) == list(range(100, 105))
    assert all_ids(copy) == [] and int(DeltaTable(copy.location).version()) == before + 1  # one commit
    assert sorted(all_ids(copy, version=before)) == list(range(30))  # time travel on the secondary too
    states = {c.state for c in catalog.store.list_copies(table.id, "c2")}
    assert states == {CopyState.EXPIRED}
    assert catalog.replicas.present_on(table, "c2") == set()
    assert Replicator(catalog).replicate(table).copied == []  # nothing is owed to c2
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []
    # their files there go once the secondary's log forgets the versions listing them
    dirs = [
        Path(copy.location) / partition_dir(table, c.partition_value)
        for c in catalog.store.list_copies(table.id, "c2")
    ]
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h", checkpoint_every=1))
    later = datetime.now(UTC) + timedelta(hours=2)
    assert keeper.run(now=later).secondary_files_reclaimed == 0 and all(d.is_dir() for d in dirs)
    set_log_settings(catalog.warehouse.load(copy), log_retention=timedelta(hours=1))
    old = time.time() - 2 * 3600
    for path in (Path(copy.location) / "_delta_log").iterdir():
        os.utime(path, (old, old))
    first, second = keeper.run(now=later), keeper.run(now=later)
    assert not first.errors and not second.errors, (first.errors, second.errors)
    assert first.secondary_files_reclaimed + second.secondary_files_reclaimed == 3
    assert not any(d.exists() for d in dirs) and all_ids(copy) == []


def _expire_until_taken_over(catalog: Catalog, table: Table, now: datetime) -> tuple[int, float, list]:
    """Expire in this process, again while the dead or frozen expirer holds its pass ("nothing to
    expire": its partitions are EXPIRING, and its pass is not ours to resume yet)."""
    since, idle = time.monotonic(), 0
    while not (results := Expirer(catalog).expire_table(table, now=now)):
        idle += 1
        assert time.monotonic() - since < 60, "the dead expiry was never taken over"
        time.sleep(0.5)
    return idle, time.monotonic() - since, results


@pytest.mark.process
def test_a_killed_expirer_is_taken_over_within_seconds_by_the_next(catalog) -> None:
    """A ``streampart expire`` SIGKILLed after it marked its partitions held them for its whole
    lease (10 minutes; meanwhile expire found nothing to expire); its process lease now lapses ~8 s
    after its last renewal, and the next pass resumes it."""
    table = backfilled(catalog)
    now = H + timedelta(hours=7)
    before = int(catalog.load(table).version())
    proc = cli_process(catalog, "expire", "ns.events", "--now", iso(now), crashpoint="expire-after-begin")
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    [dead] = catalog.store.list_expiries(table.id, unfinished=True)
    assert dead.lease_until is not None and dead.lease_until > datetime.now(UTC) + timedelta(minutes=5)
    idle, took, [result] = _expire_until_taken_over(catalog, table, now)
    assert idle > 0, "taken over while its process lease was live"
    assert took < 20, f"taken over after {took:.1f} s"
    assert result.resumed and result.expiry == dead.id and result.version == before + 1
    assert sorted(all_ids(table)) == list(range(40, 60))


# A ``streampart expire`` frozen (SIGSTOP) at a step, its pass taken over and finished by another
# expirer, then woken: it must commit and record nothing, and exit with one line.
FROZEN = [
    # partitions marked, nothing removed: its lease check stops it before its commit
    "expire-after-begin",
    # removes committed, pass not finished: its lease check stops it before it finishes the pass
    "expire-after-commit",
]


@pytest.mark.process
@pytest.mark.parametrize("point", FROZEN)
def test_a_frozen_expirer_woken_after_its_takeover_commits_nothing(catalog, point: str) -> None:
    table = backfilled(catalog)
    now = H + timedelta(hours=7)
    before = int(catalog.load(table).version())
    proc = cli_process(catalog, "expire", "ns.events", "--now", iso(now), pausepoint=f"{point}:3")
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == f"pausepoint {point}"
    proc.send_signal(signal.SIGSTOP)
    try:
        _, took, [result] = _expire_until_taken_over(catalog, table, now)
    finally:
        proc.send_signal(signal.SIGCONT)
    assert took < 20 and result.resumed
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert int(catalog.load(table).version()) == before + 1  # one commit removed them, once
    assert sorted(all_ids(table)) == list(range(40, 60))
    [done] = catalog.store.list_expiries(table.id)
    assert done.id == result.expiry and done.commit_version == before + 1
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []

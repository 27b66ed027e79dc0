"""The roll daemon in-process: rolls on time, follows the table list, retries with backoff.

Short roll intervals (2 to 3 s) and fast daemon timings (tests/scheduler/helpers.py); every wait
is for a condition, with a deadline. No assertion is about how fast something happened, only
about what happened and in which order (a partition never rolls before it is due; a retry
never runs before its backoff has passed).
"""

from __future__ import annotations

import itertools
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.models import Mode, PartitionState, RollOutcome, iso, parse_instant
from scheduler.daemon import RollDaemon
from scheduler.roll import due_time
from scheduler.roll_jobs import backoff
from scheduler.status import scheduler_status
from tests.fixtures import make_table
from tests.helpers import records, wait_for
from tests.scheduler.helpers import (
    Writer,
    check_rolled_rows,
    fast_config,
    fast_roll_config,
    metrics_samples,
    running,
    standard,
)

SQLITE_ONLY = pytest.mark.parametrize("metastore_url", ["sqlite"], indirect=True)


def _attempts(catalog: Catalog, table, outcome: RollOutcome | None = None):
    got = catalog.store.list_roll_attempts(table.id, limit=1000)
    return sorted((a for a in got if outcome is None or a.outcome is outcome), key=lambda a: a.id)


def test_tables_roll_on_time_each_by_its_own_schedule_and_mode(catalog) -> None:
    fast = make_table(catalog, "ns.fast", roll_every="2s")
    slow = make_table(catalog, "ns.slow", roll_every="3s")
    events = make_table(catalog, "ns.events", mode=Mode.EVENT_TIME, roll_every="2s", lateness="1s")
    ChunkWriter(catalog, slow).write(records(range(10)), Format.JSONL)
    ev = ChunkWriter(catalog, events).write(records(range(7), iso(datetime.now(UTC))), Format.JSONL)
    [ev_value] = [parse_instant(p) for p in ev.partitions]
    writer = Writer(catalog, fast)  # continuous writes into the table rolling fastest
    writer.start()
    try:
        with running(catalog) as daemon:
            wait_for(
                lambda: (
                    len(standard(catalog, fast)) >= 3
                    and len(standard(catalog, slow)) >= 2
                    and catalog.store.get_partition(events.id, ev_value).state is PartitionState.STANDARD
                ),
                "three rolls of ns.fast, two of ns.slow and the event-time partition of ns.events",
            )
            # a roll counts in the metrics just after the metastore says STANDARD: wait for both
            samples = wait_for(
                lambda: (
                    bool(
                        (m := metrics_samples(daemon.metrics_port)).get(
                            ("streampart_partitions_open", (("table", "ns.fast"),))
                        )
                    )
                    and m.get(("streampart_rolls_total", (("outcome", "done"), ("table", "ns.fast"))), 0) >= 3
                    and m
                ),
                "the per-table gauges and three counted rolls of ns.fast",
            )
    finally:
        writer.stop()
    for table in (fast, slow, events):
        for p in standard(catalog, table):
            assert p.rolled_at >= due_time(table, p), f"{table.name} {p.value} rolled before it was due"
        done = _attempts(catalog, table, RollOutcome.DONE)
        assert len({a.partition_value for a in done}) == len(done), "a partition was rolled twice"
        assert not _attempts(catalog, table, RollOutcome.FAILED)
    check_rolled_rows(catalog, fast, writer.acks)
    assert writer.acks and any(
        parts[0] in {p.value for p in standard(catalog, fast)} for _, parts in writer.acks
    ), "the writer's rows reached standard partitions"
    assert standard(catalog, slow)[0].rows == 10
    assert catalog.store.get_partition(events.id, ev_value).rows == 7
    # an event-time partition opens on demand only: no empty partition follows it
    assert [p.value for p in catalog.store.list_partitions(events.id)] == [ev_value]
    # metrics an operator scrapes
    assert samples[("streampart_scheduler_leader", ())] == 1
    assert samples[("streampart_rolls_total", (("outcome", "done"), ("table", "ns.fast")))] >= 3
    assert samples[("streampart_roll_duration_seconds_count", (("table", "ns.slow"),))] >= 1
    assert samples[("streampart_partitions_open", (("table", "ns.fast"),))] == 1
    assert ("streampart_chunks_pending", (("table", "ns.fast"),)) in samples
    assert ("streampart_oldest_due_partition_lag_seconds", (("table", "ns.slow"),)) in samples


@SQLITE_ONLY
def test_a_table_created_while_running_is_rolled_and_a_dropped_one_is_not(catalog) -> None:
    keep = make_table(catalog, "ns.keep", roll_every="2s")
    with running(catalog) as daemon:
        wait_for(lambda: daemon.is_leader, "leadership")
        new = make_table(catalog, "ns.new", roll_every="2s")
        ChunkWriter(catalog, new).write(records(range(5)), Format.JSONL)
        # its rows reach a standard partition (on a busy machine the daemon may roll the table's
        # first, empty partition before the chunk commits: the rows are then in the next one)
        wait_for(lambda: sum(p.rows or 0 for p in standard(catalog, new)) == 5, "the new table's rows rolled")
        catalog.store.drop_table(new.id)  # what `streampart table drop` does
        shutil.rmtree(new.location)
        wait_for(
            lambda: (
                new.id not in daemon.rolls._known
                and not any(j.id.startswith(f"roll:{new.id}:") for j in daemon.scheduler.get_jobs())
            ),
            "the daemon to forget the dropped table",
        )
        rolled = len(standard(catalog, keep))
        wait_for(lambda: len(standard(catalog, keep)) >= rolled + 2, "ns.keep to go on rolling")
        assert not any(j.id.startswith(f"roll:{new.id}:") for j in daemon.scheduler.get_jobs())
        assert not Path(new.location).exists()  # nothing recreated it
        assert daemon.rolls._failures == {}
    assert not _attempts(catalog, keep, RollOutcome.FAILED)


@SQLITE_ONLY
def test_a_failing_table_is_retried_with_backoff_and_reported_while_others_roll(catalog) -> None:
    broken = make_table(catalog, "ns.broken", roll_every="2s")
    ok = make_table(catalog, "ns.ok", roll_every="2s")
    ChunkWriter(catalog, broken).write(records(range(6)), Format.JSONL)
    value = catalog.store.streaming_partition(broken.id).value
    # storage unwritable: the table's directory is replaced by a file (root ignores permissions)
    location, moved = Path(broken.location), Path(broken.location + ".moved")
    location.rename(moved)
    location.write_text("not a directory")
    # no periodic re-read of the tables to lean on: retries must come from the backoff itself
    config = fast_config(sync_interval="60s")
    with running(catalog, config) as daemon:
        failed = wait_for(
            lambda: f if len(f := _attempts(catalog, broken, RollOutcome.FAILED)) >= 3 else None,
            "three failed attempts at ns.broken",
            timeout=90,  # seconds of backoff, but a loaded 2-core machine once took over 30
        )
        wait_for(lambda: len(standard(catalog, ok)) >= 2, "ns.ok to roll meanwhile")
        assert [a.failures for a in failed[:3]] == [1, 2, 3]
        for before, after in itertools.pairwise(failed[:3]):
            assert after.started_at >= before.retry_at, "a retry ran before its backoff had passed"
        planned = [(a.retry_at - a.finished_at).total_seconds() for a in failed[:3]]
        assert planned[0] < planned[1] < planned[2], f"backoff does not grow: {planned}"
        assert backoff(config, 3) == 4 * backoff(config, 1)  # no jitter configured: doubling exactly
        # reported: status, metrics, the attempt history
        status = scheduler_status(catalog, config)
        [entry] = [t for t in status["tables"] if t["table"] == "ns.broken"]
        assert entry["failures"] >= 3 and entry["retry_at"] and "broken" in entry["last_error"]
        assert entry["rolling"] and entry["rolling"][0]["partition"] == iso(value)
        assert any(r["outcome"] == "failed" and r["table"] == "ns.broken" for r in status["recent_rolls"])
        samples = wait_for(
            lambda: (
                (m := metrics_samples(daemon.metrics_port)).get(
                    ("streampart_roll_consecutive_failures", (("table", "ns.broken"),)), 0
                )
                >= 3
                and m
            ),
            "the failure gauge",
        )
        assert samples[("streampart_rolls_total", (("outcome", "failed"), ("table", "ns.broken")))] >= 3
        assert samples[("streampart_roll_consecutive_failures", (("table", "ns.ok"),))] == 0
        # the storage comes back: the table catches up, its rows intact
        location.unlink()
        moved.rename(location)
        wait_for(
            lambda: catalog.store.get_partition(broken.id, value).state is PartitionState.STANDARD,
            "ns.broken to roll once its storage is back",
            timeout=90,  # a retry within retry_max (5 s), but CI's loaded 2-core machine once took over 30
        )
        wait_for(
            lambda: (
                next(t for t in scheduler_status(catalog, config)["tables"] if t["table"] == "ns.broken")[
                    "failures"
                ]
                == 0
            ),
            "the failure streak to end",
        )
    assert catalog.store.get_partition(broken.id, value).rows == 6
    done = _attempts(catalog, broken, RollOutcome.DONE)
    assert done[0].partition_value == value and done[0].resumed


def test_one_leader_rolls_and_a_standby_takes_over_when_it_stops(catalog) -> None:
    table = make_table(catalog, "ns.t", roll_every="2s")
    other = Catalog.open(catalog.warehouse.root, catalog.store.url)  # as a second process would
    first = RollDaemon(catalog, fast_config(), fast_roll_config())
    second = RollDaemon(other, fast_config(), fast_roll_config())
    first.start()
    try:
        wait_for(lambda: first.is_leader, "the first daemon to lead")
        second.start()
        wait_for(lambda: any(a.owner == first.owner for a in _attempts(catalog, table, RollOutcome.DONE)),
                 "a roll by the leader")  # fmt: skip
        assert not second.is_leader
        epoch = catalog.store.get_lease("roll-daemon").epoch
        first.stop()  # releases the lease: the standby need not wait for it to lapse
        wait_for(lambda: second.is_leader, "the standby to take over")
        wait_for(lambda: any(a.owner == second.owner for a in _attempts(catalog, table, RollOutcome.DONE)),
                 "a roll by the new leader")  # fmt: skip
        assert catalog.store.get_lease("roll-daemon").epoch == epoch + 1
    finally:
        first.stop()
        second.stop()
        other.close()
    done = _attempts(catalog, table, RollOutcome.DONE)
    assert {a.owner for a in done} == {first.owner, second.owner}
    assert len({a.partition_value for a in done}) == len(done), "a partition was rolled twice"
    assert all(p.state is not PartitionState.ROLLING for p in catalog.store.list_partitions(table.id))


def test_a_partition_at_the_end_of_the_calendar_never_stops_rolls_status_or_metrics(catalog) -> None:
    """A year-9999 partition, as releases before event times were bounded let producers open.

    Its due time overflowed: the daemon failed that table's sync every 10 s and never rolled it
    again, its metrics job failed for every table, and `scheduler status` and `roll` crashed.
    """
    from scheduler.roll import NEVER, Roller

    table = make_table(catalog, "ns.events", mode=Mode.EVENT_TIME, roll_every="2s")
    doomsday = catalog.store.ensure_partition(table.id, datetime(9999, 12, 31, 23, 59, 58, tzinfo=UTC))
    assert due_time(table, doomsday) == NEVER
    assert Roller(catalog).roll_table(table) == []  # nothing due, no error
    ev = ChunkWriter(catalog, table).write(records(range(5), iso(datetime.now(UTC))), Format.JSONL)
    [value] = [parse_instant(p) for p in ev.partitions]
    with running(catalog) as daemon:
        wait_for(lambda: catalog.store.get_partition(table.id, value).state is PartitionState.STANDARD,
                 "the table's ordinary partition to roll")  # fmt: skip
        daemon._observe()  # the metrics job, over every table
        lag = metrics_samples(daemon.metrics_port)[
            ("streampart_oldest_due_partition_lag_seconds", (("table", "ns.events"),))
        ]
        assert lag <= 30  # the partition due at the end of time does not count
    status = scheduler_status(catalog)
    assert [t["table"] for t in status["tables"]] == ["ns.events"]
    assert catalog.store.get_partition(table.id, doomsday.value).state is PartitionState.STREAMING


class _CopiesUnreachable(Exception):
    """The metastore failing the heartbeat's update of the copies' leases."""


def test_the_heartbeat_extends_its_rolls_and_copies_leases_in_one_transaction(catalog) -> None:
    """Rolls and copies are renewed together or not at all: when the copies' update fails, the
    rolls' is rolled back with it (two transactions would have left the rolls extended).
    The failure is injected at the database, so it holds however the renewal is written."""
    daemon = RollDaemon(catalog, fast_config(metrics=False), fast_roll_config())
    daemon.leadership.on_elected = None  # not started: there are no jobs to run early
    daemon._heartbeat()
    assert daemon.is_leader
    p = catalog.store.streaming_partition(make_table(catalog).id)
    roll = catalog.store.begin_roll(
        p, p.value + timedelta(hours=1), daemon.owner, timedelta(seconds=1), fence=daemon.leadership.lease
    )

    def fail_copies(_conn, _cursor, statement, *_args) -> None:
        if statement.lstrip().upper().startswith("UPDATE SP_PARTITION_COPIES"):
            raise _CopiesUnreachable(statement)

    sa.event.listen(catalog.store.engine, "before_cursor_execute", fail_copies)
    try:
        with pytest.raises(_CopiesUnreachable):
            daemon._heartbeat()
    finally:
        sa.event.remove(catalog.store.engine, "before_cursor_execute", fail_copies)
    assert catalog.store.get_roll(roll.id).lease_until == roll.lease_until  # not extended alone
    daemon._heartbeat()  # and when the metastore answers, both are extended again
    assert catalog.store.get_roll(roll.id).lease_until > roll.lease_until
    daemon.leadership.release()


@SQLITE_ONLY
def test_every_due_roll_begins_at_once_while_one_worker_carries_them_out_in_turn(
    catalog, monkeypatch
) -> None:
    """Four tables due at one instant, one worker, each roll held 1.5 s after its seal: every
    partition closes (its roll begins, the next partition opens) before the first roll is done,
    and each roll is then carried out whole, none counted as resumed."""
    tables = [make_table(catalog, f"ns.t{k}", roll_every="3s") for k in range(4)]
    for table in tables:
        ChunkWriter(catalog, table).write(records(range(5)), Format.JSONL)
    first = {t.id: catalog.store.streaming_partition(t.id) for t in tables}
    monkeypatch.setenv("STREAMPART_PAUSEPOINT", "roll-after-seal:1.5")
    # a leader's lease that a busy host's stall cannot lapse: leadership lost and taken again
    # (the 1.5 s of the others, at a load of 7) resumes the roll in progress, counted as resumed
    with running(catalog, fast_config(workers=1, lease_ttl="6s")):
        wait_for(
            lambda: all(
                catalog.store.get_partition(t.id, first[t.id].value).state is PartitionState.STANDARD
                for t in tables
            ),
            "the first partition of every table rolled",
            timeout=60,
        )
    rolls = [
        next(r for r in catalog.store.list_rolls(t.id) if r.partition_value == first[t.id].value)
        for t in tables
    ]
    assert max(r.started_at for r in rolls) < min(r.finished_at for r in rolls), rolls
    for table in tables:
        done = _attempts(catalog, table, RollOutcome.DONE)
        assert done and not any(a.resumed for a in done if a.partition_value == first[table.id].value)
        assert standard(catalog, table)[0].rows == 5

"""What the status page reads from the metastore, on both backends: the daemons' heartbeats and
housekeeping passes, each table's commit activity, the newest partitions and their rolls."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.store.daemons import FORGET_SILENT_DAEMONS
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import jsonl, records

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def test_heartbeats_name_every_daemon_and_housekeeping_stamps_its_pass(catalog) -> None:
    store = catalog.store
    store.record_heartbeat("roll-daemon", "a", {"host": "h1"}, now=T0)
    store.record_heartbeat("roll-daemon", "b", {"host": "h2"}, now=T0 + timedelta(seconds=1))
    store.record_heartbeat(
        "roll-daemon", "a", {"host": "h1", "role": "leader"}, now=T0 + timedelta(seconds=2)
    )
    store.record_heartbeat("other-lease", "c", now=T0)
    store.record_housekeeping("roll-daemon", "a", "ok", now=T0 + timedelta(seconds=3))
    beats = store.list_daemons("roll-daemon")
    assert [(d.holder, d.info.get("role")) for d in beats] == [("a", "leader"), ("b", None)]  # newest first
    assert beats[0].heartbeat_at == T0 + timedelta(seconds=2)
    assert (beats[0].housekeeping_at, beats[0].housekeeping_outcome) == (T0 + timedelta(seconds=3), "ok")
    assert beats[1].housekeeping_at is None
    # a daemon silent for longer than FORGET_SILENT_DAEMONS is forgotten at the next heartbeat
    store.record_heartbeat("roll-daemon", "b", now=T0 + FORGET_SILENT_DAEMONS + timedelta(seconds=3))
    assert [d.holder for d in store.list_daemons("roll-daemon")] == ["b"]


def test_activity_counts_committed_chunks_by_commit_time(catalog) -> None:
    busy = make_table(catalog, "ns.busy", dead_letter=True)
    quiet = make_table(catalog, "ns.quiet")
    w = ChunkWriter(catalog, busy)
    w.write(records(range(3)), Format.JSONL)
    w.write(records(range(3, 5)) + b"not json\n" + jsonl([{"id": 9}]), Format.JSONL)
    store = catalog.home(busy, write=True).store
    now = datetime.now(UTC)
    activity = store.table_activity([busy.id, quiet.id], now - timedelta(minutes=5), now - timedelta(hours=1))
    assert activity[busy.id].recent_commits == 2
    assert activity[busy.id].dead_letter_rows == 2
    newest = max(c.committing_since for c in store.list_chunks(busy.id) if c.committing_since)
    assert activity[busy.id].newest_commit == newest
    assert activity[quiet.id].recent_commits == 0 and activity[quiet.id].newest_commit is None
    # the windows are cut-offs: a window that starts after the commits counts none of them
    later = store.table_activity([busy.id], now + timedelta(seconds=1), now + timedelta(seconds=1))
    assert (later[busy.id].recent_commits, later[busy.id].dead_letter_rows) == (0, 0)
    assert later[busy.id].newest_commit == newest


def test_the_newest_partitions_and_their_rolls(catalog) -> None:
    table = make_table(catalog, "ns.t")
    store = catalog.home(table, write=True).store
    for _ in range(3):
        ChunkWriter(catalog, table).write(records(range(2)), Format.JSONL)
        Roller(catalog).roll_table(table, force=True)
    everything = store.list_partitions(table.id)
    assert len(everything) == 4
    newest = store.list_partitions(table.id, newest=2)
    assert newest == everything[-2:]  # oldest first, as without ``newest``
    rolls = store.list_rolls(partition_ids=[p.id for p in everything[:2]])
    assert sorted(r.partition_id for r in rolls) == sorted(p.id for p in everything[:2])

"""Housekeeping: files go only after the retention period, Delta logs get checkpoints, old chunk
rows become summaries; readers notice nothing. Runs on both metastore backends; time is given
explicitly (file ages are set with ``os.utime``), so nothing sleeps.
"""

from __future__ import annotations

import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta import staging
from metastore.delta.checkpoints import last_checkpoint_version, set_log_settings
from metastore.delta.history import oldest_readable_version
from metastore.delta.layout import STAGING_DIR, partition_dir
from metastore.delta.log import commit_file
from metastore.models import ChunkState
from scheduler.config import HousekeepingConfig
from scheduler.housekeeping import Housekeeper
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, delta_rows, records


def test_files_go_after_the_retention_and_readers_notice_nothing(catalog) -> None:
    store = catalog.store
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first = store.streaming_partition(table.id).value
    swept = store.get_chunk(w.write(records(range(10)), Format.JSONL, key="swept").chunk)
    # aborted by a process that died before it removed the chunk's files
    aborted = w.stage(w.reserve("aborted"), records(range(50, 55)), Format.JSONL)
    store.abort_chunk(aborted)
    # reserved and staged by a writer that vanished: never committed
    stuck = w.stage(w.reserve("stuck"), records(range(60, 65)), Format.JSONL)
    before_roll = int(catalog.load(table).version())
    Roller(catalog).roll_table(table, force=True)  # sweeps the committed chunk's file out of the table
    live = store.get_chunk(w.write(records(range(100, 105)), Format.JSONL, key="live").chunk)
    root = Path(table.location)
    orphan = root / STAGING_DIR / f"{uuid.uuid4()}-0.parquet"  # a crashed writer's, never recorded
    orphan.write_bytes(b"PAR1")
    leftover = root / partition_dir(table, first) / ".part-0000-crashed.snappy.parquet.tmp"
    leftover.write_bytes(b"PAR1")  # a compaction interrupted by a crash
    attempt = root / partition_dir(table, first) / ".part-00000000-v1-deadbeef.spark"
    attempt.mkdir()  # a Spark compaction's hidden directory, interrupted by a crash
    (attempt / "part-00000-x-c000.snappy.parquet").write_bytes(b"PAR1")
    rolled_at = store.get_partition(table.id, first).rolled_at
    rows, described = sorted(all_ids(table)), catalog.describe(table)

    def name(chunk) -> str:
        return Path(chunk.files[0].path).name

    def on_disk() -> set[str]:
        # committed chunks' files are in their partitions' staging directories (staging.place)
        return {e.name for _, e in staging.files(table)} | ({leftover.name} if leftover.exists() else set())

    keeper = Housekeeper(
        catalog, HousekeepingConfig(retention="1h", chunk_retention="1h", checkpoint_every=3)
    )
    # 1. every file is younger than the retention: nothing goes; the Delta log gets its checkpoint
    report = keeper.run(now=datetime.now(UTC))
    assert (report.files_removed, report.expired, report.chunks_pruned, report.errors) == ([], 0, 0, {})
    version = int(catalog.warehouse.load(table).version())
    assert report.checkpoints == {"ns.events": version} and last_checkpoint_version(table) == version
    assert keeper.run(now=datetime.now(UTC)).checkpoints == {}  # not again until the log grows

    # 2. the files are old now, but the roll is recent: a snapshot pinned before it may still
    # read the swept file, and the stuck chunk may still commit
    old = time.time() - 2 * 3600
    for path in [*(Path(table.location) / rel for rel, _ in staging.files(table)), leftover, attempt]:
        os.utime(path, (old, old))
    report = keeper.run(now=rolled_at + timedelta(minutes=30))
    gone = {Path(p).name for p in report.files_removed}
    assert gone == {name(aborted), orphan.name, leftover.name, attempt.name}
    assert not attempt.exists()
    assert on_disk() == {name(swept), name(stuck), name(live)}

    # 3. past the retention since the roll: the stuck chunk expires (its file with it), and the rows
    # of finished chunks become summaries; the swept file stays while the Delta log still holds the
    # versions before the roll, which list it (time travel reads them)
    report = keeper.run(now=rolled_at + timedelta(hours=2))
    assert report.files_removed == []
    assert report.expired == 1 and store.find_chunk_by_key(table.id, "stuck") is None
    assert on_disk() == {name(swept), name(live)}  # a live file stays, whatever its age
    assert sorted(delta_rows(table, version=before_roll, columns="id").column("id").to_pylist()) == list(
        range(10)
    )
    assert report.chunks_pruned == 3
    assert [c.idempotency_key for c in store.list_chunks(table.id)] == ["live"]
    summary = {(s.partition_value, s.state): s.chunks for s in store.chunk_summaries(table.id)}
    assert summary == {
        (first, ChunkState.COMMITTED): 1,
        (None, ChunkState.ABORTED): 1,
        (None, ChunkState.EXPIRED): 1,
    }
    # readers notice nothing
    assert sorted(all_ids(table)) == rows
    assert catalog.describe(table) == described

    # 4. the log forgets the versions before the roll (its retention, past its checkpoint): then
    # the swept file goes
    set_log_settings(catalog.load(table), log_retention=timedelta(hours=1))
    for path in (root / "_delta_log").iterdir():
        os.utime(path, (old, old))
    assert keeper.run(now=rolled_at + timedelta(hours=2)).log_files_removed["ns.events"] > 0
    assert oldest_readable_version(table) > before_roll
    report = keeper.run(now=rolled_at + timedelta(hours=2))
    assert {Path(p).name for p in report.files_removed} == {name(swept)}
    assert on_disk() == {name(live)}
    assert sorted(all_ids(table)) == rows  # the newest version: every row, as before


def _commits(writer: ChunkWriter, n: int, first: int = 0) -> None:
    for i in range(first, first + n):
        writer.write(records(range(i * 10, i * 10 + 10)), Format.JSONL, key=f"c{i}")


def test_checkpoints_follow_the_interval_the_table_sets(catalog) -> None:
    table = make_table(catalog)
    # an interval no commit reaches: neither delta-rs' commit hook nor housekeeping checkpoints
    set_log_settings(catalog.load(table), checkpoint_interval=1000)
    _commits(ChunkWriter(catalog, table), 12)
    keeper = Housekeeper(catalog)  # the operator leaves checkpoint_every unset: each table's own
    assert keeper.run().checkpoints == {} and last_checkpoint_version(table) == -1
    # the table asks for one every 10 commits: its log grew by more since the last (none)
    set_log_settings(catalog.load(table), checkpoint_interval=10)
    newest = int(catalog.load(table).version())
    report = keeper.run()
    assert report.errors == {} and last_checkpoint_version(table) == newest
    assert catalog.describe(table)["delta_log"] == {"checkpoint_interval": 10, "log_retention": "30d"}
    # an operator's checkpoint_every wins over the table's, for every table
    _commits(ChunkWriter(catalog, table), 3, first=12)
    assert Housekeeper(catalog).run().checkpoints == {}
    forced = Housekeeper(catalog, HousekeepingConfig(checkpoint_every=2)).run()
    assert forced.checkpoints == {"ns.events": int(catalog.load(table).version())}


def test_commit_files_past_the_tables_log_retention_go_and_nothing_else_changes(catalog) -> None:
    table = make_table(catalog)
    set_log_settings(catalog.load(table), checkpoint_interval=5, log_retention=timedelta(hours=1))
    writer = ChunkWriter(catalog, table)
    first = writer.write(records(range(1000, 1010)), Format.JSONL, key="retried")
    _commits(writer, 15)
    log = Path(table.location) / "_delta_log"
    rows, described = sorted(all_ids(table)), catalog.describe(table)
    keeper = Housekeeper(catalog)
    # every commit file is younger than the retention: none goes
    assert keeper.run().log_files_removed == {}
    # two hours later, all are past it: those a checkpoint covers go, the newest checkpoint stays
    old = time.time() - 2 * 3600
    for path in log.iterdir():
        os.utime(path, (old, old))
    report = keeper.run()
    checkpoint = last_checkpoint_version(table)
    assert report.errors == {} and report.log_files_removed["ns.events"] > 0
    commits = sorted(int(p.stem) for p in log.glob("*.json"))
    assert commits[0] == checkpoint and (log / f"{checkpoint:020d}.checkpoint.parquet").exists()
    assert first.version is not None and not Path(commit_file(table.location, first.version)).exists()
    # readers and describe notice nothing; a retry of a chunk whose commit file went still
    # answers with its first version (the chunk row remembers it), and adds no rows
    assert sorted(all_ids(table)) == rows
    assert catalog.describe(table) == described
    again = ChunkWriter(catalog, table).write(records(range(1000, 1010)), Format.JSONL, key="retried")
    assert again.version == first.version and sorted(all_ids(table)) == rows
    # the table goes on taking commits, and loads from its checkpoint
    _commits(ChunkWriter(catalog, table), 2, first=20)
    assert len(all_ids(table)) == len(rows) + 20
    assert keeper.run().errors == {}


def test_a_log_retention_below_the_minimum_is_reported_not_applied(catalog) -> None:
    table = make_table(catalog)
    # set by another Delta writer: streampart itself refuses it (check_log_retention)
    catalog.load(table).alter.set_table_properties({"delta.logRetentionDuration": "interval 1 minute"})
    _commits(ChunkWriter(catalog, table), 3)
    report = Housekeeper(catalog, HousekeepingConfig(checkpoint_every=1)).run()
    assert "delta.logRetentionDuration (1m) is below 1h" in report.errors["ns.events"]
    assert "--log-retention" in report.errors["ns.events"]

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
from metastore.models import ChunkState
from metastore.warehouse import STAGING_DIR, last_checkpoint_version, partition_dir
from scheduler.config import HousekeepingConfig
from scheduler.housekeeping import Housekeeper
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, records


def test_files_go_after_the_retention_and_readers_notice_nothing(catalog) -> None:  # type: ignore[no-untyped-def]
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

    def name(chunk) -> str:  # type: ignore[no-untyped-def]
        return Path(chunk.files[0].path).name

    def on_disk() -> set[str]:
        return {p.name for p in (root / STAGING_DIR).iterdir()} | (
            {leftover.name} if leftover.exists() else set()
        )

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
    for path in [*(root / STAGING_DIR).iterdir(), leftover, attempt]:
        os.utime(path, (old, old))
    report = keeper.run(now=rolled_at + timedelta(minutes=30))
    gone = {Path(p).name for p in report.files_removed}
    assert gone == {name(aborted), orphan.name, leftover.name, attempt.name}
    assert not attempt.exists()
    assert on_disk() == {name(swept), name(stuck), name(live)}

    # 3. past the retention since the roll: the swept file goes, the stuck chunk expires (its file
    # with it), and the rows of finished chunks become summaries
    report = keeper.run(now=rolled_at + timedelta(hours=2))
    assert {Path(p).name for p in report.files_removed} == {name(swept)}
    assert report.expired == 1 and store.find_chunk_by_key(table.id, "stuck") is None
    assert on_disk() == {name(live)}  # a live file stays, whatever its age
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

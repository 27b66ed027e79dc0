"""The roll operation (invariant 4) against real Delta tables, on both metastore backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta.files import live_files
from metastore.delta.layout import partition_dir
from metastore.errors import RetriableError, StoreUnavailableError
from metastore.models import Mode, PartitionState
from scheduler.config import RollConfig
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, ids_by_partition, records

H10 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def test_every_version_shows_each_row_once_in_exactly_one_partition(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first = catalog.store.streaming_partition(table.id).value
    for k in range(5):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    [result] = Roller(catalog).roll_table(table, force=True)
    w.write(records(range(100, 105)), Format.JSONL)
    latest = int(catalog.warehouse.load(table).version())
    seen = 0
    for version in range(latest + 1):
        ids = all_ids(table, version)
        assert len(ids) == len(set(ids)), f"version {version} shows a row twice"
        assert len(ids) >= seen, f"version {version} lost rows"
        seen = len(ids)
        # a chunk's rows are all in one place: staged or swept, never split
        by_part = ids_by_partition(table, version)
        assert sorted(by_part.get(first, [])) == list(range(len(by_part.get(first, []))))
    by_part = ids_by_partition(table)
    assert sorted(by_part[first]) == list(range(50))  # rolled rows == rows committed while open
    assert sorted(by_part[catalog.store.streaming_partition(table.id).value]) == list(range(100, 105))
    assert (result.chunks, result.rows, result.files_before, result.files_after) == (5, 50, 5, 1)


def test_a_standard_partition_is_one_directory_of_exactly_its_rows(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    value = catalog.store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 7, k * 7 + 7)), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    directory = Path(table.location) / partition_dir(table, value)
    names = sorted(p.name for p in directory.iterdir())
    assert "_SUCCESS" in names
    live = {f.path for f in live_files(catalog.warehouse.load(table)) if f.partition == value}
    on_disk = {f"{partition_dir(table, value)}/{n}" for n in names if not n.startswith(("_", "."))}
    assert on_disk == live
    # a plain Parquet reader pointed at the directory reads exactly the partition's rows
    plain = pq.read_table(str(directory)).column("id").to_pylist()
    assert sorted(plain) == list(range(21))
    p = catalog.store.get_partition(table.id, value)
    assert (p.state, p.chunks, p.rows, p.files) == (PartitionState.STANDARD, 3, 21, 1)


def test_compaction_aims_at_the_target_file_size(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(8):
        w.write(records(range(k * 100, k * 100 + 100)), Format.JSONL)
    chunk_size = max(f.size for f in live_files(catalog.warehouse.load(table)))
    [r] = Roller(catalog, RollConfig(target_file_size=max(1024, chunk_size * 2))).roll_table(
        table, force=True
    )
    assert r.files_before == 8 and 2 <= r.files_after <= 5
    assert sorted(all_ids(table)) == list(range(800))


def test_nothing_due_is_a_no_op_and_rolling_twice_rolls_once(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    w.write(records(range(4)), Format.JSONL)
    open_value = catalog.store.streaming_partition(table.id).value
    assert Roller(catalog).roll_table(table, now=open_value + timedelta(minutes=59)) == []
    versions = int(catalog.warehouse.load(table).version())
    rolled = Roller(catalog).roll_table(table, now=open_value + timedelta(hours=1))
    assert [r.partition for r in rolled] == [open_value.strftime("%Y-%m-%dT%H:%M:%SZ")]
    assert rolled[0].next_partition == (open_value + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    after = int(catalog.warehouse.load(table).version())
    assert after == versions + 2  # one seal, one sweep
    assert Roller(catalog).roll_table(table, now=open_value + timedelta(hours=1)) == []
    assert int(catalog.warehouse.load(table).version()) == after
    states = [p.state for p in catalog.store.list_partitions(table.id)]
    assert states == [PartitionState.STANDARD, PartitionState.STREAMING]


def test_event_time_partitions_roll_after_their_end_plus_lateness(catalog) -> None:
    table = make_table(catalog, mode=Mode.EVENT_TIME, lateness="10m")
    w = ChunkWriter(catalog, table)
    w.write(
        records(range(3), "2026-11-21T10:20:00Z") + records(range(3, 5), "2026-11-21T11:20:00Z"), Format.JSONL
    )
    assert Roller(catalog).roll_table(table, now=H10 + timedelta(hours=1, minutes=9)) == []
    rolled = Roller(catalog).roll_table(table, now=H10 + timedelta(hours=1, minutes=10))
    assert [r.partition for r in rolled] == ["2026-11-21T10:00:00Z"]
    assert rolled[0].next_partition is None  # event time opens partitions on demand
    assert ids_by_partition(table) == {H10: [0, 1, 2], H10 + timedelta(hours=1): [3, 4]}


def test_a_forced_roll_mid_period_opens_a_distinct_partition(catalog) -> None:
    table = make_table(catalog)
    first = catalog.store.streaming_partition(table.id).value
    now = first + timedelta(minutes=17)
    [r] = Roller(catalog).roll_table(table, now=now, force=True)
    assert r.next_partition == now.strftime("%Y-%m-%dT%H:%M:%SZ")
    [r2] = Roller(catalog).roll_table(table, now=now, force=True)  # same instant again
    assert r2.partition == r.next_partition and r2.next_partition != r.next_partition
    assert len({p.value for p in catalog.store.list_partitions(table.id)}) == 3


def test_a_chunk_staged_by_several_tasks_counts_once(catalog) -> None:
    # A Spark micro-batch is one chunk whose files are staged by several tasks.
    from ingest.chunks import write_staged_files

    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    chunk = w.reserve()
    files = []
    for task in range(3):
        data = w.parse(records(range(task * 10, task * 10 + 10)), Format.JSONL).good
        files += write_staged_files(catalog.warehouse, table, f"{chunk.id}-{task:05d}", data)
    w.stage_files(chunk, files, [])
    w.commit(chunk.id)
    [before] = catalog.describe(table)["partitions"]
    assert (before["chunks"], before["files"], before["rows"]) == (1, 3, 30)
    [result] = Roller(catalog).roll_table(table, force=True)
    assert (result.chunks, result.files_before, result.files_after, result.rows) == (1, 3, 1, 30)
    [standard] = catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
    assert standard.chunks == 1


def test_a_roller_on_a_host_with_a_long_name_rolls(catalog, monkeypatch) -> None:
    # Issue 9: `streampart roll` used the whole host name in its owner id; PostgreSQL refused
    # an id longer than the 64-character owner column. The daemon cut it; now both do.
    monkeypatch.setattr("socket.gethostname", lambda: "build-agent-" + "x" * 100 + ".example.internal")
    monkeypatch.setattr("ingest.commit_holders._ids", {})  # this process's holder id, named afresh
    table = make_table(catalog)
    ChunkWriter(catalog, table).write(records(range(3)), Format.JSONL)
    roller = Roller(catalog)
    assert len(roller.owner) <= 64 and roller.owner.startswith("build-agent-xxx")
    [result] = roller.roll_table(table, force=True)
    assert result.rows == 3


def test_a_roll_failing_while_the_store_is_out_says_so_with_the_stores_address(catalog, monkeypatch) -> None:
    """The roll's error says it resumes, and stays the store's: retriable, with the store's address
    and what it answered (the daemon logs it as a warning, the HTTP API answers 503)."""
    table = make_table(catalog)
    ChunkWriter(catalog, table).write(records(range(3)), Format.JSONL)

    def out(self, *args, **kwargs):
        raise StoreUnavailableError(
            "the store at http://127.0.0.1:9 is unavailable: it answered 503", "http://127.0.0.1:9", "503"
        )

    monkeypatch.setattr(type(catalog.warehouse), "seal", out)
    with pytest.raises(StoreUnavailableError) as raised:
        Roller(catalog).roll_table(table, force=True)
    assert isinstance(raised.value, RetriableError)
    assert (raised.value.store, raised.value.answered) == ("http://127.0.0.1:9", "503")
    assert str(raised.value).endswith("the roll resumes from its last step on the next attempt")


def test_a_roller_that_stalled_and_was_taken_over_says_so(catalog, monkeypatch) -> None:
    """A roller that stalled past its lease (frozen, or a deposed leader) meets the traces of the
    one that took its roll over (its temporary file removed): it says it was taken over, a busy
    roll, not a storage failure."""
    from scheduler.errors import RollBusyError

    table = make_table(catalog)
    ChunkWriter(catalog, table).write(records(range(3)), Format.JSONL)

    def stalled(self, table, value, files, roll_id, base):
        [roll] = catalog.store.list_rolls(table.id, unfinished=True)
        later = datetime.now(UTC) + timedelta(hours=1)  # its lease lapsed meanwhile: another took it
        catalog.store.claim_roll(roll, "elsewhere:1:0badf00d/abc123", timedelta(minutes=1), now=later)
        raise FileNotFoundError(2, "No such file or directory", f"{table.location}/.part-x.tmp")

    monkeypatch.setattr(Roller, "_compact", stalled)
    with pytest.raises(RollBusyError, match=r"was taken over by elsewhere:1:0badf00d/abc123"):
        Roller(catalog).roll_table(table, force=True)

"""Pruning old chunk rows into per-partition summaries, on every metastore backend.

The metastore must stay small at millions of chunks, while what users see — ``describe``,
the table's rows — stays exactly as it was.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.models import ChunkState, Mode, PartitionState
from metastore.store import summarize_chunk
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, records

H10 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def _totals(chunks) -> dict:
    out: dict = {}
    for chunk in chunks:
        for key, part in summarize_chunk(chunk).items():
            acc = out.setdefault(key, dict.fromkeys(part, 0))
            for k, v in part.items():
                acc[k] += v
    return out


def test_old_chunks_become_summaries_and_describe_does_not_change(catalog) -> None:
    store = catalog.store
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first = store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"t{k}")
    aborted = w.reserve("gave-up")
    w.abort(aborted.id)
    Roller(catalog).roll_table(table, force=True)
    w.write(records(range(100, 105)), Format.JSONL, key="open")  # stays in the streaming partition
    rolled_at = store.get_partition(table.id, first).rolled_at
    described, rows = catalog.describe(table), sorted(all_ids(table))
    expected = _totals(c for c in store.list_chunks(table.id) if c.idempotency_key != "open")

    # within the retention nothing goes
    assert store.prune_chunks(table.id, before=store.list_chunks(table.id)[0].created_at) == 0
    assert len(store.list_chunks(table.id)) == 5
    # an aborted chunk goes once old enough; committed ones only once their partition rolled that long ago
    assert store.prune_chunks(table.id, before=rolled_at) == 1
    assert store.find_chunk_by_key(table.id, "gave-up") is None
    assert store.prune_chunks(table.id, before=rolled_at + timedelta(seconds=1)) == 3
    assert [c.idempotency_key for c in store.list_chunks(table.id)] == ["open"]  # its partition is still open
    summaries = {(s.partition_value, s.state): s for s in store.chunk_summaries(table.id)}
    assert set(summaries) == set(expected) == {(first, ChunkState.COMMITTED), (None, ChunkState.ABORTED)}
    for key, s in summaries.items():
        assert {k: getattr(s, k) for k in expected[key]} == expected[key]
    assert (
        summaries[(first, ChunkState.COMMITTED)].chunks,
        summaries[(first, ChunkState.COMMITTED)].rows,
    ) == (3, 30)
    # what users see is unchanged
    assert catalog.describe(table) == described
    assert sorted(all_ids(table)) == rows
    p = store.get_partition(table.id, first)
    assert (p.state, p.chunks, p.rows) == (PartitionState.STANDARD, 3, 30)
    # pruning again finds nothing; the summaries do not double
    assert store.prune_chunks(table.id, before=rolled_at + timedelta(days=1)) == 0
    assert (
        summaries[(first, ChunkState.COMMITTED)]
        == {(s.partition_value, s.state): s for s in store.chunk_summaries(table.id)}[
            (first, ChunkState.COMMITTED)
        ]
    )


def test_a_chunk_spanning_partitions_is_summarised_in_each_once_both_rolled(catalog) -> None:
    store = catalog.store
    table = make_table(catalog, mode=Mode.EVENT_TIME)
    w = ChunkWriter(catalog, table)
    w.write(
        records(range(3), "2026-11-21T10:20:00Z") + records(range(3, 5), "2026-11-21T11:20:00Z"), Format.JSONL
    )
    Roller(catalog).roll_table(table, now=H10 + timedelta(hours=1, minutes=1))  # only 10:00 is due
    after_first = store.get_partition(table.id, H10).rolled_at
    assert store.prune_chunks(table.id, before=after_first + timedelta(seconds=1)) == 0  # 11:00 still open
    Roller(catalog).roll_table(table, now=H10 + timedelta(hours=2, minutes=1))
    last = store.get_partition(table.id, H10 + timedelta(hours=1)).rolled_at
    assert store.prune_chunks(table.id, before=last + timedelta(seconds=1)) == 1
    got = {s.partition_value: (s.chunks, s.rows) for s in store.chunk_summaries(table.id)}
    assert got == {H10: (1, 3), H10 + timedelta(hours=1): (1, 2)}
    assert sorted(all_ids(table)) == list(range(5))


def test_pruning_walks_many_chunks_in_batches(catalog) -> None:
    store = catalog.store
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(7):
        w.write(records([k]), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    value = store.list_partitions(table.id)[0]
    assert store.prune_chunks(table.id, before=value.rolled_at + timedelta(seconds=1), batch=3) == 7
    [summary] = store.chunk_summaries(table.id)
    assert (summary.chunks, summary.rows) == (7, 7)  # three batches added up

"""The chunk protocol against real Delta tables, on both metastore backends.

Invariants: 1 (atomic visibility), 2 (exactly once), 5 (a chunk never lands in a sealed
partition), 7 (bad input: clear error, nothing committed is lost).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pytest

from ingest.chunks import ChunkWriter, expire_chunks, write_staged_files
from ingest.config import ChunkConfig
from ingest.digests import digest_bytes
from ingest.errors import (
    ChunkBusyError,
    ChunkStateError,
    IdempotencyConflictError,
    LateDataError,
    MalformedChunkError,
)
from ingest.formats import Format
from metastore import clock
from metastore.delta.files import live_files
from metastore.models import ChunkState, LateDataPolicy, Mode, PartitionState, TableKind
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, delta_rows, ids_by_partition, jsonl, records

H10 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
H11 = H10 + timedelta(hours=1)


def live_paths(catalog, table) -> set[str]:
    return {f.path for f in live_files(catalog.warehouse.load(table))}


def test_a_chunk_is_invisible_until_its_commit_returns(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    chunk = w.stage(w.reserve(), records(range(100)), Format.JSONL)
    assert all_ids(table) == []  # written, staged, not committed: invisible
    assert all((Path(table.location) / f.path).is_file() for f in chunk.files)
    result = w.commit(chunk.id)
    assert sorted(all_ids(table)) == list(range(100))  # wholly visible at once
    assert result.rows == 100 and result.version == 1
    assert result.partitions == [catalog.describe(table)["partitions"][0]["value"]]


def test_abort_and_expiry_leave_no_files_and_nothing_visible(catalog, tmp_path: Path) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig(ttl=timedelta(microseconds=1)))  # expired at once
    aborted = w.stage(w.reserve(), records(range(10)), Format.JSONL)
    w.abort(aborted.id)
    with pytest.raises(ChunkStateError, match="aborted"):
        w.commit(aborted.id)
    expiring = w.stage(w.reserve(), records(range(10, 20)), Format.JSONL)
    assert [c.id for c in expire_chunks(catalog)] == [expiring.id]
    with pytest.raises(ChunkStateError, match="expired"):
        w.commit(expiring.id)
    staging = Path(table.location) / "_staging"
    assert list(staging.iterdir()) == []
    assert all_ids(table) == []


def test_a_retried_token_lands_once(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first = w.write(records(range(50)), Format.JSONL, key="batch-7")
    again = w.write(records(range(50)), Format.JSONL, key="batch-7")
    assert again == first
    assert w.commit(first.chunk) == first  # a retried commit call, too
    assert sorted(all_ids(table)) == list(range(50))


# The same idempotency key with other content: whichever step of the protocol the first use reached.
TOKEN_REUSE_CASES = [
    "committed",  # the first content committed: a reuse must not answer with its result
    "staged",  # staged by another producer under the same key, not yet committed
]


@pytest.mark.parametrize("case", TOKEN_REUSE_CASES)
def test_a_token_reused_for_other_content_is_a_conflict(catalog, case: str) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    if case == "committed":
        first = w.write(records(range(50)), Format.JSONL, key="batch-1")
        with pytest.raises(
            IdempotencyConflictError, match=r"key 'batch-1' of table ns.events .* committed 50 rows"
        ):
            w.write(records(range(100, 120)), Format.JSONL, key="batch-1")
        with pytest.raises(IdempotencyConflictError):
            w.write_table(w.parse(records(range(100, 120)), Format.JSONL).good, key="batch-1")
        assert w.write(records(range(50)), Format.JSONL, key="batch-1") == first  # a retry
        assert sorted(all_ids(table)) == list(range(50))
    else:
        chunk = w.stage(w.reserve("batch-1"), records(range(50)), Format.JSONL)  # producer A staged …
        w.stage(chunk, records(range(100, 120)), Format.JSONL)  # … B re-staged under the same key
        with pytest.raises(IdempotencyConflictError, match="is reserved with other data"):
            w.commit(chunk.id, content_digest=digest_bytes(records(range(50))))  # A's commit: refused
        assert w.commit(chunk.id, content_digest=digest_bytes(records(range(100, 120)))).rows == 20
        assert sorted(all_ids(table)) == list(range(100, 120))


def test_an_arrow_table_retried_under_its_token_lands_once_however_it_is_batched(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    data = w.parse(records(range(30)), Format.JSONL).good
    first = w.write_table(data, key="arrow-1")
    rebatched = pa.Table.from_batches(data.to_batches(max_chunksize=7))
    assert w.write_table(rebatched, key="arrow-1") == first
    assert sorted(all_ids(table)) == list(range(30))


def test_a_retry_after_a_crash_between_delta_commit_and_metastore_lands_once(catalog) -> None:
    """The Delta commit landed but the writer died before telling the metastore."""
    table = make_table(catalog)
    cfg = ChunkConfig(commit_timeout=timedelta(milliseconds=200))
    w = ChunkWriter(catalog, table, cfg)
    chunk = w.stage(w.reserve("tok"), records(range(30)), Format.JSONL)
    dt = catalog.warehouse.load(table)
    chunk = catalog.store.begin_commit(chunk, int(dt.version()))
    part = catalog.store.streaming_partition(table.id).value
    catalog.warehouse.commit_files(
        table,
        int(dt.version()),
        [(f.path, part, f.rows) for f in chunk.files],
        {"streampart.chunk": chunk.id},
    )
    # the writer "died" here; a retry while the attempt may still be alive is refused …
    with pytest.raises(ChunkBusyError):
        w.commit(chunk.id)
    # … and after the takeover deadline the retry finds the landed commit instead of re-committing
    with clock.use(clock.SystemClock(timedelta(seconds=0.5))):
        result = w.write(records(range(30)), Format.JSONL, key="tok")
    assert result.chunk == chunk.id and result.version == 1 and result.partitions
    assert sorted(all_ids(table)) == list(range(30))
    assert catalog.store.get_chunk(chunk.id).state is ChunkState.COMMITTED


def test_a_chunk_prepared_before_a_seal_goes_to_the_next_partition(catalog) -> None:
    """Invariant 5, arrival mode: a commit racing a roll retries into the new open partition."""
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    w.write(records(range(10)), Format.JSONL)
    old = catalog.store.streaming_partition(table.id)
    staged = w.stage(w.reserve(), records(range(10, 20)), Format.JSONL)
    stale_snapshot = catalog.warehouse.load(table)  # the writer loaded its snapshot …
    roll = catalog.store.begin_roll(old, old.value + timedelta(hours=1), "r", timedelta(minutes=1))
    catalog.warehouse.seal(table, roll.id)  # … then a roll began and sealed
    from metastore.errors import ConflictError

    with pytest.raises(ConflictError):  # Delta refuses the stale commit into the sealed table
        catalog.warehouse.commit_files(
            table,
            int(stale_snapshot.version()),
            [(f.path, old.value, f.rows) for f in staged.files],
            {"streampart.chunk": "x"},
        )
    result = w.commit(staged.id)  # the protocol re-plans against the open partition
    assert result.partitions == [(old.value + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")]
    Roller(catalog, owner="r").run(table, catalog.store.get_roll(roll.id))
    by_part = ids_by_partition(table)
    assert sorted(by_part[old.value]) == list(range(10))
    assert sorted(by_part[old.value + timedelta(hours=1)]) == list(range(10, 20))


def test_event_time_splits_a_chunk_by_period_in_one_commit(catalog) -> None:
    table = make_table(catalog, mode=Mode.EVENT_TIME, lateness="10m")
    w = ChunkWriter(catalog, table)
    data = records(range(0, 5), "2026-11-21T10:59:59Z") + records(range(5, 8), "2026-11-21T11:00:00Z")
    result = w.write(data, Format.JSONL)
    assert result.version == 1  # one atomic commit for both partitions
    assert ids_by_partition(table) == {H10: [0, 1, 2, 3, 4], H11: [5, 6, 7]}


def test_late_rows_are_rejected_whole(catalog) -> None:
    table = make_table(catalog, mode=Mode.EVENT_TIME, lateness="10m")
    w = ChunkWriter(catalog, table)
    w.write(records(range(5), "2026-11-21T10:30:00Z"), Format.JSONL)
    Roller(catalog).roll_table(table, now=H11 + timedelta(minutes=10))
    assert catalog.store.get_partition(table.id, H10).state is PartitionState.STANDARD
    mixed = records([100], "2026-11-21T10:45:00Z") + records([101], "2026-11-21T11:05:00Z")
    with pytest.raises(LateDataError, match=r"partition\(s\) 2026-11-21T10:00:00Z are sealed"):
        w.write(mixed, Format.JSONL)
    assert sorted(all_ids(table)) == [0, 1, 2, 3, 4]  # nothing of the rejected chunk landed
    assert catalog.describe(table)["partitions"][0]["rows"] == 5  # the standard partition never changed


def test_late_rows_are_diverted_when_the_table_says_so(catalog) -> None:
    table = make_table(catalog, mode=Mode.EVENT_TIME, late_data=LateDataPolicy.DIVERT)
    w = ChunkWriter(catalog, table)
    w.write(records(range(5), "2026-11-21T10:30:00Z"), Format.JSONL)
    Roller(catalog).roll_table(table, now=H11)
    mixed = records([100, 102], "2026-11-21T10:45:00Z") + records([101], "2026-11-21T11:05:00Z")
    result = w.write(mixed, Format.JSONL, key="t")
    assert result.late_rows == 2 and result.rows == 1
    assert w.write(mixed, Format.JSONL, key="t") == result  # the divert is exactly once too
    late = catalog.companion(table, TableKind.LATE)
    assert sorted(all_ids(late)) == [100, 102]
    assert ids_by_partition(table) == {H10: [0, 1, 2, 3, 4], H11: [101]}


def test_a_malformed_chunk_fails_whole_with_the_line_number(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    w.write(records(range(3)), Format.JSONL)
    bad = records(range(10, 12)) + b'{"id": "eleven", "ts": "2026-11-21T10:00:00Z"}\n'
    with pytest.raises(MalformedChunkError, match=r"record 3: column 'id': expected an integer"):
        w.write(bad, Format.JSONL, key="bad")
    assert sorted(all_ids(table)) == [0, 1, 2]  # what was committed is untouched, nothing added
    assert catalog.store.find_chunk_by_key(table.id, "bad").state is ChunkState.ABORTED
    # the aborted chunk's staged file is gone: staging holds exactly the one live chunk file (in its
    # partition's staging directory, where its commit placed it)
    root = Path(table.location)
    staged = {p.relative_to(root).as_posix() for p in (root / "_staging").rglob("*.parquet")}
    assert staged == live_paths(catalog, table) and len(staged) == 1


def test_bad_records_go_to_the_dead_letter_table_with_reason_and_position(catalog) -> None:
    table = make_table(catalog, dead_letter=True)
    w = ChunkWriter(catalog, table)
    data = records([1]) + b"not json\n" + records([2]) + b'{"id": 3}\n'
    result = w.write(data, Format.JSONL, key="t", source="upload.jsonl")
    assert result.rows == 2 and result.dead_letter_rows == 2
    dlq = catalog.companion(table, TableKind.DEAD_LETTER)
    rows = delta_rows(dlq, columns="position, reason, source, raw, chunk").to_pylist()
    assert sorted((r["position"], r["reason"].split(":")[0]) for r in rows) == [
        (2, "invalid JSON"),
        (4, "column 'ts' is required but missing or null"),
    ]
    assert {r["source"] for r in rows} == {"upload.jsonl"}
    assert {r["chunk"] for r in rows} == {result.chunk}
    assert b"not json" in {r["raw"] for r in rows}
    w.write(data, Format.JSONL, key="t")  # a retry adds no dead letters either
    assert delta_rows(dlq, columns="position").num_rows == 2


def test_a_commit_whose_staged_file_is_gone_ends_the_chunk_at_once(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig(commit_timeout=timedelta(minutes=5)))
    chunk = w.stage(w.reserve("t-1"), records(range(10)), Format.JSONL)
    (Path(table.location) / chunk.files[0].path).unlink()  # lost from storage
    with pytest.raises(ChunkStateError, match=r"staged file .* is gone from storage.*new idempotency key"):
        w.commit(chunk.id)  # at once: not a retry loop until the 5-minute deadline
    after = catalog.store.get_chunk(chunk.id)
    assert after.state is ChunkState.ABORTED and "gone from storage" in (after.error or "")
    with pytest.raises(ChunkStateError, match="aborted"):
        w.commit(chunk.id)
    assert all_ids(table) == []


def test_an_upload_after_the_commit_began_keeps_the_committing_files(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first = w.stage(w.reserve(), records(range(10)), Format.JSONL)
    replaced = w.stage(first, records(range(10, 25)), Format.JSONL)  # a re-upload replaces …
    assert replaced.rows == 15 and not set(first.files) & set(replaced.files)
    assert not (Path(table.location) / first.files[0].path).exists()  # … and its old file goes
    # another upload has passed its state check and written its files; a commit begins now
    late_files = write_staged_files(
        w.warehouse, table, f"{first.id}-late", w.parse(records(range(99)), Format.JSONL).good
    )
    catalog.store.begin_commit(replaced, 0)
    with pytest.raises(ChunkStateError, match="committing"):
        w._record_files(replaced, late_files, [])
    staged = sorted(p.name for p in (Path(table.location) / "_staging").iterdir())
    assert staged == sorted(f.path.rsplit("/", 1)[1] for f in replaced.files)  # only the committing data


# Event times a producer may send to an event-time table that no partition may be made of.
OUT_OF_RANGE_EVENT_TIMES = [
    # a broken clock: made due_time overflow, and the daemon never rolled the table again
    ("9999-12-31T23:59:59Z", "is after"),
    # further ahead than the table's max-future (1 day by default)
    ("in-3-days", "1d ahead of now: the table's max-future"),
    # a year of fewer than four digits: its partition directory was named 500-06-01 …
    ("0500-06-01T00:00:00Z", "is before 1000-01-01T00:00:00Z, the earliest accepted"),
]


@pytest.mark.parametrize("ts, says", OUT_OF_RANGE_EVENT_TIMES, ids=[c[0] for c in OUT_OF_RANGE_EVENT_TIMES])
def test_event_times_out_of_range_are_bad_records_not_partitions(catalog, ts: str, says: str) -> None:
    from metastore.models import iso

    if ts == "in-3-days":
        ts = iso(datetime.now(UTC) + timedelta(days=3))
    now = iso(datetime.now(UTC))
    table = make_table(catalog, mode=Mode.EVENT_TIME, dead_letter=True)
    w = ChunkWriter(catalog, table)
    data = jsonl([{"id": 1, "ts": now}, {"id": 2, "ts": ts}])
    result = w.write(data, Format.JSONL)
    assert (result.rows, result.dead_letter_rows) == (1, 1)
    dlq = catalog.companion(table, TableKind.DEAD_LETTER)
    [dead] = delta_rows(dlq, columns="position, reason").to_pylist()
    assert dead["position"] == 2 and says in dead["reason"], dead
    assert len(catalog.store.list_partitions(table.id)) == 1  # only now's partition opened
    strict = make_table(catalog, "ns.strict", mode=Mode.EVENT_TIME)
    with pytest.raises(MalformedChunkError, match=f"record 2: column 'ts': .*{says}"):
        ChunkWriter(catalog, strict).write(data, Format.JSONL)


def test_rows_older_than_max_age_are_late_and_open_no_partition(catalog) -> None:
    from metastore.models import iso

    now = iso(datetime.now(UTC))
    backfill = jsonl([{"id": 1, "ts": now}, {"id": 2, "ts": "2020-03-01T10:00:00Z"}])
    bounded = make_table(
        catalog, "ns.bounded", mode=Mode.EVENT_TIME, late_data=LateDataPolicy.DIVERT, max_age="30d"
    )
    result = ChunkWriter(catalog, bounded).write(backfill, Format.JSONL)
    assert (result.rows, result.late_rows) == (1, 1)
    assert all_ids(catalog.companion(bounded, TableKind.LATE)) == [2]
    assert [iso(p.value)[:4] for p in catalog.store.list_partitions(bounded.id)] == [now[:4]]
    rejecting = make_table(catalog, "ns.rejecting", mode=Mode.EVENT_TIME, max_age="30d")
    with pytest.raises(LateDataError, match=r"2020-03-01T10:00:00Z are sealed, or ended more than 30d ago"):
        ChunkWriter(catalog, rejecting).write(backfill, Format.JSONL)
    # without max-age (the default), a backfill opens its old partition, as it always did
    open_ended = make_table(catalog, "ns.open", mode=Mode.EVENT_TIME, late_data=LateDataPolicy.DIVERT)
    assert ChunkWriter(catalog, open_ended).write(backfill, Format.JSONL).late_rows == 0
    assert len(catalog.store.list_partitions(open_ended.id)) == 2


def test_an_empty_file_is_an_error_not_a_zero_row_commit(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for content in (b"", b"\n\n"):
        with pytest.raises(MalformedChunkError, match="holds no records; nothing was committed"):
            w.write(content, Format.JSONL)
    assert catalog.store.list_chunks(table.id, [ChunkState.COMMITTED]) == []
    assert w.stage(w.reserve(), records(range(3)), "jsonl").rows == 3  # a format by its name


def test_fields_the_table_lacks_are_counted_not_dropped_in_silence(catalog) -> None:
    table = make_table(catalog)
    data = jsonl([{"id": 1, "ts": "2026-11-21T10:00:00Z", "colour": "red"},
                  {"id": 2, "ts": "2026-11-21T10:00:00Z", "colour": "blue", "size": 3}])  # fmt: skip
    result = ChunkWriter(catalog, table).write(data, Format.JSONL, key="extra")
    assert result.rows == 2 and result.ignored_fields == {"colour": 2, "size": 1}
    assert result.to_json()["ignored_fields"] == {"colour": 2, "size": 1}


def test_decimals_beyond_the_scale_are_rounded_half_to_even_and_counted(catalog) -> None:
    """A value with more decimals than its DECIMAL(p,s) column is rounded as Spark's cast rounds, and
    the result says how many values of which column were (a value equal after rounding is not)."""
    from decimal import Decimal

    import pyarrow.parquet as pq

    table = make_table(
        catalog, "ns.prices", schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2), fee DECIMAL(5,1)"
    )
    ts = "2026-11-21T10:00:00Z"
    rows = [
        {"id": 1, "ts": ts, "amount": 9.999, "fee": 1.25},  # 10.00 and 1.2 (half to even)
        {"id": 2, "ts": ts, "amount": "2.345", "fee": "1.0"},  # 2.34; 1.0 stays
        {"id": 3, "ts": ts, "amount": 3.10, "fee": 2},  # 3.10 = 3.1: unchanged, not counted
        {"id": 4, "ts": ts, "amount": "1.005"},  # 1.00
    ]
    result = ChunkWriter(catalog, table).write(jsonl(rows), Format.JSONL, key="dec")
    assert result.rows == 4 and result.rounded_values == {"amount": 3, "fee": 1}
    assert result.to_json()["rounded_values"] == {"amount": 3, "fee": 1}
    written = {
        r["id"]: (r["amount"], r["fee"]) for r in delta_rows(table, columns="id, amount, fee").to_pylist()
    }
    assert written == {
        1: (Decimal("10.00"), Decimal("1.2")),
        2: (Decimal("2.34"), Decimal("1.0")),
        3: (Decimal("3.10"), Decimal("2.0")),
        4: (Decimal("1.00"), None),
    }
    # Parquet with a finer decimal type: Arrow's safe cast refuses, the rows are converted and counted
    finer = pa.table({
        "id": pa.array([5, 6], pa.int64()),
        "ts": pa.array([datetime(2026, 11, 21, 10, tzinfo=UTC)] * 2, pa.timestamp("us", tz="UTC")),
        "amount": pa.array([Decimal("1.2345"), Decimal("7.5000")], pa.decimal128(10, 4)),
    })  # fmt: skip
    sink = pa.BufferOutputStream()
    pq.write_table(finer, sink)
    result = ChunkWriter(catalog, table).write(sink.getvalue().to_pybytes(), Format.PARQUET, key="dec-pq")
    assert result.rows == 2 and result.rounded_values == {"amount": 1}
    unrounded = ChunkWriter(catalog, table).write(jsonl([{"id": 7, "ts": ts, "amount": 1.5}]), Format.JSONL)
    assert unrounded.rounded_values == {} and unrounded.to_json()["rounded_values"] == {}


def test_arrow_tables_from_python_are_checked_like_files(catalog) -> None:
    """write_table took a table in the table's schema as it was: no NOT NULL or event-time check."""
    from metastore.models import iso

    table = make_table(catalog, mode=Mode.EVENT_TIME)
    w = ChunkWriter(catalog, table)
    now = datetime.now(UTC)
    data = pa.table(
        {"id": pa.array([1, 2], pa.int64()),
         "ts": pa.array([now, datetime(9999, 12, 31, tzinfo=UTC)], pa.timestamp("us", tz="UTC")),
         "msg": pa.array(["a", "b"])}
    )  # fmt: skip
    assert data.schema.equals(w.validator().schema)  # the shape that skipped every check
    with pytest.raises(
        MalformedChunkError, match=r"record 2: column 'ts': event time 9999-12-31T00:00:00Z is after"
    ):
        w.write_table(data)
    assert w.write_table(data.slice(0, 1)).partitions == [iso(now.replace(minute=0, second=0, microsecond=0))]


def test_an_io_error_after_the_delta_commit_is_looked_up_and_lands_once(catalog, monkeypatch) -> None:
    """An I/O error while committing is 'commit state unknown': the writer looks before committing again."""
    from metastore.delta import append

    table = make_table(catalog)
    real = append.publish
    failures: list[str] = []

    def lands_then_fails(*args, **kwargs):
        real(*args, **kwargs)
        if not failures:
            failures.append("once")
            raise OSError("connection reset while reading the commit's response")

    monkeypatch.setattr(append, "publish", lands_then_fails)
    result = ChunkWriter(catalog, table).write(records(range(20)), Format.JSONL)
    assert failures == ["once"] and result.version == 1
    assert sorted(all_ids(table)) == list(range(20))


def test_a_bug_during_a_commit_is_raised_not_retried_until_the_deadline(catalog, monkeypatch) -> None:
    # Issue 9: a bare `except Exception` took any error for an ambiguous commit: a bug's
    # TypeError was retried until the commit deadline and reported as a timeout.
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig(commit_timeout=timedelta(seconds=2)))

    def broken(*args, **kwargs):
        raise TypeError("unsupported operand type(s) for +: 'int' and 'str'")

    monkeypatch.setattr(catalog.warehouse, "commit_files", broken)
    with pytest.raises(TypeError, match="unsupported operand"):
        w.write(records(range(5)), Format.JSONL)
    assert all_ids(table) == []

"""The metastore contract, run against every backend (SQLite and PostgreSQL), alone and as a namespace's
home in a federation (``routed_catalog``: the tables' namespace lives in another metastore than the
primary, and every call reaches it through the router)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from metastore import schema as s
from metastore.errors import AlreadyExistsError, ConflictError, IllegalTransitionError, NotFoundError
from metastore.models import ChunkState, Mode, PartitionState, RollState, StagedFile, TableName
from metastore.replicas import CopyState
from metastore.store import Metastore
from tests.fixtures import home, make_table, routed_catalog  # noqa: F401

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def test_migrations_are_idempotent_and_concurrent_safe(metastore_url: str) -> None:
    first = Metastore(metastore_url)
    second = Metastore(metastore_url)  # runs migrate() again: a no-op at head
    assert first.list_tables() == second.list_tables() == []
    first.close()
    second.close()


def test_tables_create_get_list_and_duplicate(catalog) -> None:
    t = make_table(catalog, "ns.a")
    make_table(catalog, "ns.b", mode=Mode.EVENT_TIME, lateness="10m")
    assert home(catalog).get_table("ns.a").id == t.id
    assert [str(x.name) for x in home(catalog).list_tables()] == ["ns.a", "ns.b"]
    with pytest.raises(AlreadyExistsError, match=r"ns\.a exists"):
        make_table(catalog, "ns.a")
    with pytest.raises(NotFoundError, match=r"ns\.zzz does not exist"):
        home(catalog).get_table(TableName.parse("ns.zzz"))
    # arrival tables open a streaming partition at creation; event-time ones on first write
    assert [p.state for p in home(catalog).list_partitions(t.id)] == [PartitionState.STREAMING]
    assert home(catalog).list_partitions(home(catalog).get_table("ns.b").id) == []


def test_event_time_partitions_open_once(catalog) -> None:
    t = make_table(catalog, mode=Mode.EVENT_TIME)
    a = home(catalog).ensure_partition(t.id, T0)
    b = home(catalog).ensure_partition(t.id, T0)
    assert a.id == b.id and a.value == T0 and a.state is PartitionState.STREAMING


def test_begin_roll_is_a_compare_and_swap(catalog) -> None:
    t = make_table(catalog)
    p = home(catalog).streaming_partition(t.id)
    roll = home(catalog).begin_roll(p, p.value + timedelta(hours=1), "me", timedelta(minutes=1))
    assert roll.state is RollState.SEALING and roll.partition_value == p.value
    # the next partition opened in the same transaction
    assert home(catalog).streaming_partition(t.id).value == p.value + timedelta(hours=1)
    # a second roller with the same stale view loses
    with pytest.raises(ConflictError):
        home(catalog).begin_roll(p, p.value + timedelta(hours=2), "other", timedelta(minutes=1))
    states = [x.state for x in home(catalog).list_partitions(t.id)]
    assert states == [PartitionState.ROLLING, PartitionState.STREAMING]


def test_rolls_due_together_begin_in_one_transaction_and_a_taken_one_is_skipped(catalog) -> None:
    """``begin_rolls``: each partition closes and its next opens as ``begin_roll`` does, all at once;
    one another roller began meanwhile is None; one that fails (its table dropped) fails them all."""
    store = home(catalog)
    tables = [make_table(catalog, f"ns.t{k}") for k in range(3)]
    parts = [store.streaming_partition(t.id) for t in tables]
    hour = timedelta(hours=1)
    store.begin_roll(parts[1], parts[1].value + hour, "other", timedelta(minutes=1))  # taken
    now = datetime.now(UTC)
    rolls = store.begin_rolls([(p, p.value + hour) for p in parts], "me", timedelta(minutes=1), now=now)
    assert rolls[1] is None
    for t, p, roll in ((tables[0], parts[0], rolls[0]), (tables[2], parts[2], rolls[2])):
        assert roll is not None and roll.partition_value == p.value and roll.owner == "me"
        assert roll.state is RollState.SEALING and roll.started_at == now
        assert [x.state for x in store.list_partitions(t.id)] == [
            PartitionState.ROLLING,
            PartitionState.STREAMING,
        ]
    assert len(store.list_rolls(tables[1].id, unfinished=True)) == 1  # the other roller's alone
    fresh = [make_table(catalog, f"ns.u{k}") for k in range(2)]
    due = [(store.streaming_partition(t.id), None) for t in fresh]
    store.drop_table(fresh[1].id)
    with pytest.raises(NotFoundError):
        store.begin_rolls(due, "me", timedelta(minutes=1))
    assert store.streaming_partition(fresh[0].id).state is PartitionState.STREAMING  # nothing began
    assert store.list_rolls(fresh[0].id, unfinished=True) == []


def test_roll_lease_excludes_other_owners_until_it_expires(catalog) -> None:
    t = make_table(catalog)
    p = home(catalog).streaming_partition(t.id)
    now = datetime.now(UTC)
    roll = home(catalog).begin_roll(p, p.value + timedelta(hours=1), "a", timedelta(seconds=30), now=now)
    with pytest.raises(ConflictError):
        home(catalog).claim_roll(roll, "b", timedelta(seconds=30), now=now + timedelta(seconds=5))
    taken = home(catalog).claim_roll(roll, "b", timedelta(seconds=30), now=now + timedelta(seconds=31))
    assert taken.owner == "b"
    # the old owner can no longer move the roll forward
    with pytest.raises(ConflictError):
        home(catalog).advance_roll(roll, RollState.SWEEPING, "a", seal_version=1)
    done = home(catalog).advance_roll(taken, RollState.SWEEPING, "b", seal_version=1)
    with pytest.raises(IllegalTransitionError):
        home(catalog).advance_roll(done, RollState.SEALING, "b")
    finished = home(catalog).finish_roll(done, "b", chunks=0, rows=0, bytes=0, files=0)
    assert finished.state is RollState.DONE
    assert home(catalog).list_partitions(t.id)[0].state is PartitionState.STANDARD


def test_chunk_token_reserves_once(catalog) -> None:
    t = make_table(catalog)
    a = home(catalog).reserve_chunk(t.id, "tok", timedelta(hours=1))
    b = home(catalog).reserve_chunk(t.id, "tok", timedelta(hours=1))
    c = home(catalog).reserve_chunk(t.id, None, timedelta(hours=1))
    assert a.id == b.id != c.id
    assert a.state is ChunkState.RESERVED


def test_chunk_lifecycle_is_guarded(catalog) -> None:
    t = make_table(catalog)
    store = home(catalog)
    chunk = store.reserve_chunk(t.id, None, timedelta(hours=1))
    chunk, replaced = store.record_chunk_files(
        chunk, [StagedFile(path="_staging/x-0.parquet", rows=3, bytes=10)]
    )
    assert chunk.rows == 3 and replaced == ()
    again, replaced = store.record_chunk_files(
        chunk, [StagedFile(path="_staging/x-1.parquet", rows=4, bytes=9)]
    )
    assert again.rows == 4 and [f.path for f in replaced] == ["_staging/x-0.parquet"]
    committing = store.begin_commit(chunk, base_version=0)
    assert committing.state is ChunkState.COMMITTING and committing.attempt
    with pytest.raises(ConflictError):  # only one committer wins
        store.begin_commit(chunk, base_version=0)
    with pytest.raises(ConflictError):  # files cannot change once committing
        store.record_chunk_files(chunk, [])
    taken = store.take_over_commit(committing)
    assert taken.attempt != committing.attempt
    with pytest.raises(ConflictError):  # the replaced attempt is fenced
        store.take_over_commit(committing)
    with pytest.raises(ConflictError):  # … and cannot abort what its successor may have committed
        store.abort_chunk(committing, error="late")
    assert store.get_chunk(chunk.id).state is ChunkState.COMMITTING
    done = store.finish_commit(taken, version=5, partitions=[T0])
    assert done.state is ChunkState.COMMITTED and done.version == 5 and done.partitions == (T0,)
    with pytest.raises(IllegalTransitionError):
        store.abort_chunk(done)


def test_expiry_only_takes_reserved_chunks_past_their_ttl(catalog) -> None:
    t = make_table(catalog)
    store = home(catalog)
    now = datetime.now(UTC)
    old = store.reserve_chunk(t.id, None, timedelta(seconds=1), now=now - timedelta(seconds=10))
    young = store.reserve_chunk(t.id, None, timedelta(hours=1), now=now)
    committing = store.reserve_chunk(t.id, None, timedelta(seconds=5), now=now - timedelta(seconds=10))
    store.begin_commit(committing, 0, now=now - timedelta(seconds=9))
    expired = store.expire_chunks(now=now)
    assert [c.id for c in expired] == [old.id]
    assert store.get_chunk(old.id).state is ChunkState.EXPIRED
    assert store.get_chunk(young.id).state is ChunkState.RESERVED
    assert store.get_chunk(committing.id).state is ChunkState.COMMITTING
    with pytest.raises(ConflictError):  # an expired chunk can never begin its commit
        store.begin_commit(old, 0)


def test_roll_progress_is_recorded_by_its_owner_at_its_step_only(catalog) -> None:
    store = home(catalog)
    p = store.streaming_partition(make_table(catalog).id)
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "a", timedelta(minutes=1))
    roll = store.record_roll_progress(roll, "a", seal_version=4)
    assert roll.seal_version == 4 and roll.state is RollState.SEALING
    with pytest.raises(ConflictError, match="is owned by a"):
        store.record_roll_progress(roll, "b", seal_version=5)
    swept = store.advance_roll(roll, RollState.SWEEPING, "a")
    with pytest.raises(ConflictError, match="is sweeping, expected sealing"):  # a stale view of the step
        store.record_roll_progress(roll, "a", files_before=1)
    assert store.get_roll(roll.id) == swept


def test_a_released_roll_can_be_claimed_at_once(catalog) -> None:
    store = home(catalog)
    p = store.streaming_partition(make_table(catalog).id)
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "a", timedelta(hours=1), now=T0)
    assert not store.release_roll(roll, "b", error="not mine", now=T0)  # only its owner lets it go
    assert store.release_roll(roll, "a", error="boom", now=T0 + timedelta(seconds=1))
    assert store.get_roll(roll.id).error == "boom"
    taken = store.claim_roll(roll, "b", timedelta(minutes=1), now=T0 + timedelta(seconds=2))
    assert taken.owner == "b" and taken.lease_until == T0 + timedelta(minutes=1, seconds=2)
    done = store.finish_roll(
        store.advance_roll(taken, RollState.SWEEPING, "b"), "b", chunks=0, rows=0, bytes=0, files=0
    )
    assert not store.release_roll(done, "b")  # a done roll has nothing to release
    with pytest.raises(ConflictError, match=r"is done \(since "):
        store.claim_roll(done, "b", timedelta(minutes=1))


def test_newest_version_spans_commits_seals_and_sweeps(catalog) -> None:
    store = home(catalog)
    t = make_table(catalog)
    assert store.newest_version(t.id) == -1
    chunk = store.reserve_chunk(t.id, None, timedelta(hours=1))
    store.finish_commit(store.begin_commit(chunk, 0), version=3, partitions=[T0])
    aborted = store.begin_commit(store.reserve_chunk(t.id, None, timedelta(hours=1)), 9)
    store.abort_chunk(aborted)  # never committed: its base version is no version of the table
    assert store.newest_version(t.id) == 3
    p = store.streaming_partition(t.id)
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "a", timedelta(minutes=1))
    roll = store.advance_roll(roll, RollState.SWEEPING, "a", seal_version=5)
    assert store.newest_version(t.id) == 5
    store.record_roll_progress(roll, "a", sweep_version=7)
    assert store.newest_version(t.id) == 7


def test_stale_commits_and_the_monitoring_counts(catalog) -> None:
    store = home(catalog)
    a, b = make_table(catalog, "ns.a"), make_table(catalog, "ns.b", mode=Mode.EVENT_TIME)
    day = timedelta(days=1)
    stalled = store.begin_commit(store.reserve_chunk(a.id, None, day, now=T0), 0, now=T0)
    store.begin_commit(store.reserve_chunk(a.id, None, day, now=T0), 0, now=T0 + timedelta(hours=1))
    store.reserve_chunk(b.id, None, timedelta(hours=1), now=T0)
    assert [c.id for c in store.stale_commits(T0 + timedelta(minutes=30))] == [stalled.id]
    assert store.pending_chunk_counts() == {a.id: 2, b.id: 1}
    store.ensure_partition(b.id, T0)
    store.ensure_partition(b.id, T0 + timedelta(hours=1))
    streaming = PartitionState.STREAMING
    assert store.partition_counts() == {a.id: {streaming: 1}, b.id: {streaming: 2}}


def test_dropping_a_table_removes_its_partitions_chunks_and_rolls(catalog) -> None:
    store = home(catalog)
    t, other = make_table(catalog, "ns.a"), make_table(catalog, "ns.b")
    store.reserve_chunk(t.id, "tok", timedelta(hours=1))
    p = store.streaming_partition(t.id)
    store.begin_roll(p, p.value + timedelta(hours=1), "a", timedelta(minutes=1))
    store.drop_table(t.id)
    assert store.find_table(t.name) is None
    with pytest.raises(NotFoundError, match=f"table #{t.id} does not exist"):
        store.get_table_by_id(t.id)
    assert store.list_partitions(t.id) == store.list_chunks(t.id) == store.list_rolls(t.id) == []
    assert store.find_chunk_by_key(t.id, "tok") is None
    assert store.get_table_by_id(other.id) == other


def test_a_table_lives_in_its_namespaces_home_only(catalog) -> None:
    """What makes the federated variant of this suite mean something: ``ns`` is not on the primary."""
    t = make_table(catalog, "ns.a")
    assert t.metastore == home(catalog).name == catalog.router.metastore_of("ns")
    for name in catalog.router.names():
        held = [str(x.name) for x in catalog.on(name).store.list_tables()]
        assert held == (["ns.a"] if name == t.metastore else []), name


def test_a_copy_counts_as_present_only_at_its_partitions_generation(catalog) -> None:
    """What a query may read on a secondary: a present copy of the partition as it is now. A copy
    left marked present after its partition was rewritten (a newer generation) does not count."""
    store = home(catalog)
    table = make_table(catalog)
    p = store.streaming_partition(table.id)
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "roller", timedelta(minutes=1))
    roll = store.advance_roll(roll, RollState.SWEEPING, "roller", seal_version=1)
    store.finish_roll(roll, "roller", chunks=1, rows=10, bytes=100, files=1)
    [p] = store.list_partitions(table.id, [PartitionState.STANDARD])
    store.add_replica(table.id, "c2", "/replicas/c2")
    claim = store.claim_copy(p, "c2", "copier", timedelta(minutes=1))
    store.finish_copy(claim, "copier", files=1, bytes=100, checksum="x", delta_version=1)
    assert store.present_values(table.id, "c2") == {p.value}
    with store.engine.begin() as conn:  # the partition rewritten, its copy's state left as it was
        conn.execute(sa.update(s.partitions).where(s.partitions.c.id == p.id).values(generation=1))
    assert [c.state for c in store.list_copies(table.id, "c2")] == [CopyState.PRESENT]
    assert store.present_values(table.id, "c2") == set()

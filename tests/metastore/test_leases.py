"""Leadership leases with fencing epochs, and the roll daemon's history: the metastore contract.

Runs on every backend (SQLite and PostgreSQL). Times are given explicitly, so expiry is
tested without sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from metastore.errors import ConflictError, LeaseLostError, RetriableError
from metastore.models import PartitionState, RollOutcome
from metastore.store import Metastore
from tests.fixtures import make_table

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
TTL = timedelta(seconds=10)
S = timedelta(seconds=1)


def test_a_lease_has_one_holder_until_it_lapses_then_the_epoch_grows(catalog) -> None:
    store = catalog.store
    a = store.acquire_lease("roll", "a", TTL, info={"pid": 1}, now=T0)
    assert (a.holder, a.epoch, a.expires_at, a.info) == ("a", 1, T0 + TTL, {"pid": 1})
    assert store.acquire_lease("roll", "b", TTL, now=T0 + 5 * S) is None  # held: b waits
    a = store.renew_lease(a, TTL, now=T0 + 5 * S)
    assert (a.epoch, a.expires_at) == (1, T0 + 15 * S)  # renewing keeps the epoch
    assert store.acquire_lease("roll", "a", TTL, now=T0 + 6 * S).epoch == 1  # ours and live: same
    assert store.acquire_lease("roll", "b", TTL, now=T0 + 15 * S) is None  # extended to T0 + 16 s
    assert store.acquire_lease("roll", "b", TTL, now=T0 + 16 * S) is not None  # lapsed: b takes it
    b = store.get_lease("roll")
    assert (b.holder, b.epoch) == ("b", 2)
    with pytest.raises(LeaseLostError):  # the deposed holder cannot renew
        store.renew_lease(a, TTL, now=T0 + 16 * S)
    assert store.get_lease("nobody") is None


def test_renewal_after_expiry_fails_and_retaking_it_raises_the_epoch(catalog) -> None:
    store = catalog.store
    a = store.acquire_lease("roll", "a", TTL, now=T0)
    with pytest.raises(LeaseLostError):  # lapsed, even though nobody took it meanwhile
        store.renew_lease(a, TTL, now=T0 + TTL)
    again = store.acquire_lease("roll", "a", TTL, now=T0 + TTL)
    assert again.epoch == 2  # anything done under epoch 1 is fenced off from now on


def test_release_lets_a_standby_take_over_at_once(catalog) -> None:
    store = catalog.store
    a = store.acquire_lease("roll", "a", TTL, now=T0)
    assert store.release_lease(a, now=T0 + S)
    assert not store.get_lease("roll").live(T0 + S)
    b = store.acquire_lease("roll", "b", TTL, now=T0 + 2 * S)  # long before a's TTL would end
    assert (b.holder, b.epoch) == ("b", 2)
    assert not store.release_lease(a)  # releasing a lease one no longer holds changes nothing
    assert store.get_lease("roll").holder == "b"


def test_leases_of_different_names_are_independent(catalog) -> None:
    store = catalog.store
    assert store.acquire_lease("one", "a", TTL, now=T0).epoch == 1
    assert store.acquire_lease("two", "b", TTL, now=T0).epoch == 1


@pytest.mark.parametrize("contenders", [8])
def test_of_many_racing_contenders_exactly_one_wins(metastore_url: str, contenders: int) -> None:
    """Every contender races with its own connection pool, as separate processes would."""
    stores = [Metastore(metastore_url) for _ in range(contenders)]
    try:
        for round_, now in enumerate([T0, T0 + TTL]):  # the first take, then after it lapsed
            barrier = threading.Barrier(contenders)
            won: list[str] = []

            def contend(
                i: int, now: datetime = now, barrier: threading.Barrier = barrier, won: list[str] = won
            ) -> None:
                barrier.wait()
                if stores[i].acquire_lease("race", f"c{i}", TTL, now=now) is not None:
                    won.append(f"c{i}")

            threads = [threading.Thread(target=contend, args=(i,)) for i in range(contenders)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert len(won) == 1, won
            lease = stores[0].get_lease("race")
            assert lease is not None
            assert (lease.holder, lease.epoch) == (won[0], round_ + 1)
    finally:
        for st in stores:
            st.close()


def test_a_deposed_leader_can_neither_begin_nor_claim_a_roll(catalog) -> None:
    store = catalog.store
    table = make_table(catalog)
    p = store.streaming_partition(table.id)
    old = store.acquire_lease("roll", "a", TTL, now=T0)
    new = store.acquire_lease("roll", "b", TTL, now=T0 + TTL)  # a stalled past its TTL
    with pytest.raises(LeaseLostError):
        store.begin_roll(p, p.value + timedelta(hours=1), "a", TTL, now=T0 + TTL, fence=old)
    # the fenced transaction changed nothing: still one partition, still streaming
    assert [x.state for x in store.list_partitions(table.id)] == [PartitionState.STREAMING]
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "b", TTL, now=T0 + TTL, fence=new)
    with pytest.raises(LeaseLostError):
        store.claim_roll(roll, "a", TTL, now=T0 + 3 * TTL, fence=old)
    assert store.get_roll(roll.id).owner == "b"
    # and the current leader may (its lease is live at that time)
    assert store.claim_roll(roll, "b", TTL, now=T0 + TTL + S, fence=new).owner == "b"


def test_a_lost_lease_is_no_conflict(catalog) -> None:
    """``except ConflictError`` (a lost race for one row: retry) never swallows lost leadership (stop)."""
    assert not issubclass(LeaseLostError, ConflictError) and not issubclass(ConflictError, LeaseLostError)
    assert issubclass(LeaseLostError, RetriableError)
    store = catalog.store
    p = store.streaming_partition(make_table(catalog).id)
    old = store.acquire_lease("roll", "a", TTL, now=T0)
    store.acquire_lease("roll", "b", TTL, now=T0 + TTL)
    with pytest.raises(LeaseLostError):
        try:
            store.begin_roll(p, p.value + timedelta(hours=1), "a", TTL, now=T0 + TTL, fence=old)
        except ConflictError:  # what a roller does when another roller has the partition
            pytest.fail("a lost lease was caught as a conflict")


def test_roll_leases_are_renewed_only_under_a_live_fence_and_released_at_shutdown(catalog) -> None:
    store = catalog.store
    table = make_table(catalog)
    p = store.streaming_partition(table.id)
    lease = store.acquire_lease("roll", "me", TTL, now=T0)
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "me", TTL, now=T0, fence=lease)
    assert store.renew_roll_and_copy_leases("me", 3 * TTL, fence=lease, now=T0 + S) == (1, 0)
    assert store.get_roll(roll.id).lease_until == T0 + S + 3 * TTL
    assert store.renew_roll_and_copy_leases("someone else", TTL, now=T0 + S) == (0, 0)
    with pytest.raises(LeaseLostError):  # after leadership lapsed, the rolls lapse too
        store.renew_roll_and_copy_leases("me", 3 * TTL, fence=lease, now=T0 + 2 * TTL)
    assert store.get_roll(roll.id).lease_until == T0 + S + 3 * TTL
    assert store.release_rolls("me", now=T0 + 2 * S) == 1
    # released: another roller may claim it at once
    assert store.claim_roll(roll, "next", TTL, now=T0 + 3 * S).owner == "next"


def test_roll_attempts_keep_each_tables_history_newest_first(catalog) -> None:
    store = catalog.store
    a, b = make_table(catalog, "ns.a"), make_table(catalog, "ns.b")
    for n in range(3):
        store.record_roll_attempt(
            table_id=a.id, partition_value=T0, owner="d", epoch=1, started_at=T0 + n * S,
            finished_at=T0 + n * S + S / 2, outcome=RollOutcome.FAILED, error=f"boom {n}",
            failures=n + 1, retry_at=T0 + 10 * S,
        )  # fmt: skip
    done = store.record_roll_attempt(
        table_id=b.id, partition_value=T0, owner="d", epoch=1, started_at=T0, finished_at=T0 + 2 * S,
        outcome=RollOutcome.DONE, rows=7, resumed=True,
    )  # fmt: skip
    assert (done.seconds, done.rows, done.resumed, done.failures) == (2.0, 7, True, 0)
    assert [x.error for x in store.list_roll_attempts(a.id)] == ["boom 2", "boom 1", "boom 0"]
    latest = store.latest_roll_attempts()
    assert (latest[a.id].failures, latest[a.id].retry_at) == (3, T0 + 10 * S)
    assert latest[b.id].outcome is RollOutcome.DONE
    # forgetting old history keeps each table's newest attempt
    assert store.prune_roll_attempts(before=T0 + timedelta(days=1)) == 2
    assert [x.error for x in store.list_roll_attempts(a.id)] == ["boom 2"]
    assert len(store.list_roll_attempts()) == 2
    store.drop_table(a.id)  # history goes with its table
    assert [x.table_id for x in store.list_roll_attempts()] == [b.id]


def test_migrating_a_metastore_from_0001_keeps_its_data(metastore_url: str) -> None:
    from alembic import command
    from alembic.config import Config

    from metastore.store.engine import MIGRATIONS

    old = Metastore(metastore_url, migrate=False)
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    with old.tx() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
    with old.tx() as conn:  # a table and its partition as release 0001 wrote them (its columns only)
        conn.execute(
            sa.text(
                "INSERT INTO sp_tables (namespace, name, kind, cluster, location, columns, time_column, "
                "partition_column, mode, roll_every_s, lateness_s, late_data, dead_letter, created_at) "
                "VALUES "
                "('ns', 'old', 'main', 'default', '/nowhere/ns/old', :columns, 'ts', 'ts_period', 'arrival', "
                "3600, 0, 'reject', false, :t)"
            ),
            {"columns": '[{"name": "id", "type": "long", "nullable": true}]', "t": T0.replace(tzinfo=None)},
        )
        table_id = conn.execute(sa.text("SELECT id FROM sp_tables WHERE name = 'old'")).scalar_one()
        conn.execute(
            sa.text(
                "INSERT INTO sp_partitions (table_id, value, state, opened_at) "
                "VALUES (:id, :t, 'streaming', :t)"
            ),
            {"id": table_id, "t": T0.replace(tzinfo=None)},
        )
        assert not sa.inspect(conn).has_table("sp_leases")
    old.close()
    new = Metastore(metastore_url)  # migrates to head
    try:
        table = new.get_table("ns.old")
        assert table.id == table_id and table.max_future == timedelta(days=1) and table.max_age is None
        assert [p.value for p in new.list_partitions(table.id)] == [T0]
        lease = new.acquire_lease("roll", "a", TTL, now=T0)
        assert lease is not None and lease.epoch == 1
        with new.tx() as conn:
            assert {"sp_leases", "sp_roll_attempts", "sp_chunk_summaries"} <= set(
                sa.inspect(conn).get_table_names()
            )
    finally:
        new.close()

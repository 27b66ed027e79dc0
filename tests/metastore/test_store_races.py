"""Store transactions that race: each test holds one transaction at the step where, on
PostgreSQL's READ COMMITTED, another could overtake it (a pause inside the store's own code), runs
the other, and checks the two end as if one had run after the other. On SQLite the same tests
pass because one writing transaction runs at a time; on PostgreSQL each failed before its lock.
"""

from __future__ import annotations

import threading
import time
import types
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

import metastore.store.deletes as deletes_module
import metastore.store.replicas as replicas_module
import metastore.store.transfer as transfer_module
from metastore import schema as s
from metastore.catalog import Catalog
from metastore.errors import ConflictError, DeleteBusyError
from metastore.models import Partition, PartitionState, RollState, Table
from metastore.replicas import CopyState
from tests.fixtures import make_table

LEASE = timedelta(seconds=60)


def _standard(catalog: Catalog) -> tuple[Table, Partition]:
    """A table with one standard partition (rolled in the metastore; nothing in Delta is needed)."""
    table = make_table(catalog)
    store = catalog.store
    p = store.streaming_partition(table.id)
    roll = store.begin_roll(p, p.value + timedelta(hours=1), "roller", LEASE)
    roll = store.advance_roll(roll, RollState.SWEEPING, "roller", seal_version=1)
    store.finish_roll(roll, "roller", chunks=1, rows=10, bytes=100, files=1)
    [p] = store.list_partitions(table.id, [PartitionState.STANDARD])
    return table, p


def _paused_after(
    monkeypatch: pytest.MonkeyPatch, module: Any, name: str, thread: str
) -> tuple[threading.Event, threading.Event]:
    """``module.name`` pauses (in thread ``thread`` only, the first time) after it ran: set
    ``reached`` then, and waits for ``go``."""
    reached, go = threading.Event(), threading.Event()
    original: Callable[..., Any] = getattr(module, name)

    def paused(*args: Any, **kw: Any) -> Any:
        result = original(*args, **kw)
        if threading.current_thread().name == thread and not reached.is_set():
            reached.set()
            go.wait(30)
        return result

    monkeypatch.setattr(module, name, paused)
    return reached, go


def _run(name: str, call: Callable[[], Any], out: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            out[name] = call()
        except Exception as exc:
            out[name] = exc

    thread = threading.Thread(target=run, name=name)
    thread.start()
    return thread


def _overtaken(
    first: tuple[str, Callable[[], Any]],
    then: tuple[str, Callable[[], Any]],
    reached: threading.Event,
    go: threading.Event,
    settle: float = 1,
) -> dict[str, Any]:
    """Run ``first`` (a name and a call; its thread pauses once it has ``reached`` its step), then
    ``then`` while ``first`` is held there; ``settle`` seconds on, let ``first`` go. What each
    returned or raised, by name."""
    out: dict[str, Any] = {}
    held = _run(*first, out)
    assert reached.wait(30)
    other = _run(*then, out)
    time.sleep(settle)  # the other reaches its reads (or waits for the first's transaction)
    go.set()
    held.join(60)
    other.join(60)
    return out


def test_an_expiry_beginning_while_a_copy_is_claimed_leaves_that_partition(catalog, monkeypatch) -> None:
    """A copy claimed while an expiry begins: the expiry sees it copying and leaves the partition
    for its next pass. (Before: the expiry read the copies before the claim committed, the
    partition expired under the copy, the copy became present, and the secondary kept the rows.)"""
    store = catalog.store
    table, p = _standard(catalog)
    store.add_replica(table.id, "c2", "/tmp/c2")
    reached, go = _paused_after(monkeypatch, replicas_module, "_partition_held", "claim")
    out = _overtaken(
        ("claim", lambda: store.claim_copy(p, "c2", "copier", LEASE)),
        ("expiry", lambda: store.begin_expiry(table.id, [p], "expirer", LEASE)),
        reached,
        go,
    )
    assert out["expiry"] is None, out["expiry"]  # it took nothing
    assert store.get_partition(table.id, p.value).state is PartitionState.STANDARD
    done = store.finish_copy(out["claim"], "copier", files=1, bytes=1, checksum="x", delta_version=1)
    assert done.state is CopyState.PRESENT


def test_two_deletes_of_a_table_beginning_at_once_take_turns(catalog, monkeypatch) -> None:
    """Two deletes begin at once: one is recorded, the other is refused as busy. (Before: both
    found no unfinished delete and both were recorded.)"""
    store = catalog.store
    table, _ = _standard(catalog)
    reached, go = threading.Event(), threading.Event()

    class _Uuid:  # begin_delete names its delete after it has found no other: pause there
        @staticmethod
        def uuid4() -> uuid.UUID:
            if threading.current_thread().name == "first" and not reached.is_set():
                reached.set()
                go.wait(30)
            return uuid.uuid4()

    monkeypatch.setattr(deletes_module, "uuid", _Uuid)
    out = _overtaken(
        ("first", lambda: store.begin_delete(table.id, "id = 1", "cli", "d1", LEASE)),
        ("second", lambda: store.begin_delete(table.id, "id = 2", "cli", "d2", LEASE)),
        reached,
        go,
    )
    assert not isinstance(out["first"], Exception), out["first"]
    assert isinstance(out["second"], DeleteBusyError), out["second"]
    assert [d.predicate for d in store.list_deletes(table.id, unfinished=True)] == ["id = 1"]


def test_a_replica_removed_while_a_copy_is_claimed_leaves_no_copy_behind(catalog, monkeypatch) -> None:
    """A replica removed while a copy to it is claimed: the copy goes with it, cannot become present,
    and a replica added again on that cluster gets its copy made. (Before: the claim's copy outlived
    the replica, was recorded present, and blocked the new replica's copy.)"""
    store = catalog.store
    table, p = _standard(catalog)
    store.add_replica(table.id, "c2", "/tmp/c2")
    reached, go = _paused_after(monkeypatch, replicas_module, "_copy_key", "claim")
    out = _overtaken(  # the claim held after its replica's read, its copy not yet recorded
        ("claim", lambda: store.claim_copy(p, "c2", "copier", LEASE)),
        ("remove", lambda: store.remove_replica(table.id, "c2")),
        reached,
        go,
    )
    assert not isinstance(out["remove"], Exception), out["remove"]
    assert store.list_copies(table.id) == []
    if not isinstance(out["claim"], Exception):  # claimed first: its copy went with the replica
        with pytest.raises(ConflictError):
            store.finish_copy(out["claim"], "copier", files=1, bytes=1, checksum="x", delta_version=1)
    store.add_replica(table.id, "c2", "/tmp/c2-again")
    assert store.claim_copy(p, "c2", "copier-2", LEASE).state is CopyState.COPYING


def test_a_replica_removed_while_its_table_is_dropped_neither_waits_for_the_other(
    catalog, monkeypatch
) -> None:
    """``remove_replica`` holding its replica's row while the table is dropped: the drop waits for
    it, then goes on. (Before: the drop took the copies first and the replica last, the removal the
    other way round, and on PostgreSQL each waited for the other until one was rolled back.)"""
    store = catalog.store
    table, p = _standard(catalog)
    store.add_replica(table.id, "c2", "/tmp/c2")
    store.claim_copy(p, "c2", "copier", LEASE)  # a copy row for both to remove
    # remove_replica pauses as it builds its first statement after the locked read: the delete
    # of the copies (its module's sqlalchemy, with ``delete`` paused in that thread)
    paused_sa = types.SimpleNamespace(**{k: getattr(sa, k) for k in dir(sa) if not k.startswith("__")})
    monkeypatch.setattr(replicas_module, "sa", paused_sa)
    reached, go = _paused_after(monkeypatch, paused_sa, "delete", "remove")
    out = _overtaken(  # the removal held with its replica's row, its copies not yet removed
        ("remove", lambda: store.remove_replica(table.id, "c2")),
        ("drop", lambda: store.drop_table(table.id)),
        reached,
        go,
        settle=1.5,  # the drop reaches its locks (PostgreSQL looks for a deadlock after 1 s)
    )
    assert not isinstance(out["remove"], Exception), out["remove"]
    assert not isinstance(out["drop"], Exception), out["drop"]
    assert store.list_replicas(table.id) == [] and store.list_copies(table.id) == []


def test_a_tables_export_is_one_snapshot_whatever_commits_meanwhile(catalog, monkeypatch) -> None:
    """A namespace move copies each table from one export: its rows as they were at one instant,
    though other transactions commit between its reads. (Before, on PostgreSQL: a partition and a
    replica committed after the table's row was read were exported with it.)"""
    store = catalog.store
    table, _ = _standard(catalog)
    before = store.export_table(table.id)
    reached, go = _paused_after(monkeypatch, transfer_module, "_rows", "export")
    later = before.partitions[-1]["value"] + timedelta(hours=5)

    def write() -> None:
        store.ensure_partition(table.id, later)
        store.add_replica(table.id, "c2", "/c2")

    out = _overtaken(  # the export held after its first read (the table's row)
        ("export", lambda: store.export_table(table.id)),
        ("write", write),
        reached,
        go,
    )
    assert out["write"] is None, out["write"]
    exported = out["export"]
    assert not isinstance(exported, Exception), exported
    assert exported.partitions == before.partitions and exported.replicas == []
    assert len(store.export_table(table.id).partitions) == len(before.partitions) + 1


def test_a_deadlock_is_a_lost_race_not_an_outage(catalog) -> None:
    """Two transactions that each wait for the other: PostgreSQL rolls one back, and the store says
    so as a conflict to retry, not as the metastore being unavailable (which would fail every
    namespace on a federated metastore for a while)."""
    if catalog.store.is_sqlite:
        pytest.skip("SQLite runs one writing transaction at a time: no deadlock to meet")
    store = catalog.store
    table, first = _standard(catalog)
    second = store.streaming_partition(table.id)
    both = threading.Barrier(2, timeout=30)
    out: dict[str, Any] = {}

    def lock(mine: Partition, theirs: Partition) -> None:
        with store.tx() as conn:
            for k, partition in enumerate((mine, theirs)):
                conn.execute(sa.update(s.partitions).where(s.partitions.c.id == partition.id).values(rows=k))
                if k == 0:
                    both.wait()  # each holds its first row before it asks for the other's

    one = _run("one", lambda: lock(first, second), out)
    other = _run("other", lambda: lock(second, first), out)
    one.join(60)
    other.join(60)
    lost = [x for x in out.values() if isinstance(x, Exception)]
    assert len(lost) == 1 and isinstance(lost[0], ConflictError), out
    assert "try it again" in str(lost[0]) and store.down is None

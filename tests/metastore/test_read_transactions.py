"""Reads never take SQLite's write lock; writes still take it up front.

SQLite serialises writers: a write transaction begins ``BEGIN IMMEDIATE`` and waits (up to the
busy timeout) for the lock. A reader in WAL mode needs no lock at all, so a read-only store call
must return at once while another process holds a write transaction open — not wait behind it,
nor fail with MetastoreUnavailableError when the writer is slow.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from metastore.catalog import Catalog
from metastore.errors import MetastoreUnavailableError
from metastore.models import RollOutcome, TableName
from metastore.store import Metastore
from tests.fixtures import fresh_metastore_url, make_table
from tests.pg import drop_scratch_schema

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


@pytest.fixture
def sqlite_file(tmp_path: Path) -> Path:
    return tmp_path / "metastore.sqlite"


def hold_write_lock(path: Path) -> sqlite3.Connection:
    """Another process's write transaction, held open (as a slow writer does)."""
    writer = sqlite3.connect(path, isolation_level=None, timeout=0)
    writer.execute("BEGIN IMMEDIATE")
    return writer


def test_reads_do_not_wait_for_a_writer(sqlite_file: Path, tmp_path: Path) -> None:
    catalog = Catalog.open(tmp_path / "wh", f"sqlite:///{sqlite_file}")
    make_table(catalog, "ns.a")
    done: dict[str, Any] = {}

    def read() -> None:
        try:
            done["found"] = catalog.store.find_table(TableName.parse("ns.a"))
            done["tables"] = catalog.store.list_tables()
        except Exception as exc:  # reported below
            done["error"] = exc

    writer = hold_write_lock(sqlite_file)
    reader = threading.Thread(target=read, daemon=True)
    try:
        started = time.monotonic()
        reader.start()
        reader.join(timeout=5)  # the busy timeout is 30 s: a read that waits for the lock shows here
        assert not reader.is_alive(), "a read waited for another connection's write transaction"
        assert "error" not in done, done.get("error")
        assert [str(t.name) for t in done["tables"]] == ["ns.a"]
        assert time.monotonic() - started < 5
    finally:
        writer.rollback()
        writer.close()
        reader.join()
        catalog.close()


@pytest.fixture
def locked_store(
    sqlite_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Metastore, dict[str, object]]]:
    """A store with rows of every kind, a 0.2 s busy timeout, and another connection's write lock."""
    from metastore.store import engine

    monkeypatch.setattr(engine, "SQLITE_BUSY_TIMEOUT_S", 0.2)  # a call that waits fails fast
    catalog = Catalog.open(tmp_path / "wh", f"sqlite:///{sqlite_file}")
    store = catalog.store
    table = make_table(catalog)
    chunk = store.reserve_chunk(table.id, "tok", timedelta(hours=1))
    part = store.streaming_partition(table.id)
    roll = store.begin_roll(part, part.value + timedelta(hours=1), "me", timedelta(minutes=1))
    store.acquire_lease("roll", "me", timedelta(minutes=1))
    store.record_roll_attempt(
        table_id=table.id, partition_value=part.value, owner="me", started_at=T0, finished_at=T0,
        outcome=RollOutcome.DONE,
    )  # fmt: skip
    rows: dict[str, object] = {"table": table, "chunk": chunk, "partition": part, "roll": roll}
    writer = hold_write_lock(sqlite_file)
    try:
        yield store, rows
    finally:
        writer.rollback()
        writer.close()
        catalog.close()


# Every read-only method of the store, as its callers call it.
READS: list[tuple[str, Callable[[Metastore, dict], object]]] = [
    ("get_table", lambda st, r: st.get_table(r["table"].name)),
    ("find_table", lambda st, r: st.find_table(r["table"].name)),
    ("get_table_by_id", lambda st, r: st.get_table_by_id(r["table"].id)),
    ("list_tables", lambda st, r: st.list_tables()),
    ("newest_version", lambda st, r: st.newest_version(r["table"].id)),
    ("list_partitions", lambda st, r: st.list_partitions(r["table"].id)),
    ("list_partitions newest", lambda st, r: st.list_partitions(r["table"].id, newest=5)),
    ("get_partition", lambda st, r: st.get_partition(r["table"].id, r["partition"].value)),
    ("streaming_partition", lambda st, r: st.streaming_partition(r["table"].id)),
    # an existing partition: nothing to open, so nothing to write
    ("ensure_partition", lambda st, r: st.ensure_partition(r["table"].id, r["partition"].value)),
    ("partition_counts", lambda st, r: st.partition_counts()),
    ("get_chunk", lambda st, r: st.get_chunk(r["chunk"].id)),
    ("find_chunk_by_key", lambda st, r: st.find_chunk_by_key(r["table"].id, "tok")),
    # a token reserved already: the same chunk, read back
    ("reserve_chunk", lambda st, r: st.reserve_chunk(r["table"].id, "tok", timedelta(hours=1))),
    ("list_chunks", lambda st, r: st.list_chunks(r["table"].id)),
    ("stale_commits", lambda st, r: st.stale_commits(T0)),
    ("pending_chunk_counts", lambda st, r: st.pending_chunk_counts()),
    ("table_activity", lambda st, r: st.table_activity([r["table"].id], T0, T0)),
    # nothing has expired: the housekeeping sweep must not queue behind writers for nothing
    ("expire_chunks", lambda st, r: st.expire_chunks()),
    ("get_roll", lambda st, r: st.get_roll(r["roll"].id)),
    ("list_rolls", lambda st, r: st.list_rolls(r["table"].id, unfinished=True)),
    ("list_rolls by partition", lambda st, r: st.list_rolls(partition_ids=[r["partition"].id])),
    ("get_lease", lambda st, r: st.get_lease("roll")),
    ("list_daemons", lambda st, r: st.list_daemons("roll")),
    ("list_roll_attempts", lambda st, r: st.list_roll_attempts(r["table"].id)),
    ("latest_roll_attempts", lambda st, r: st.latest_roll_attempts()),
    ("chunk_summaries", lambda st, r: st.chunk_summaries(r["table"].id)),
    ("find_token_by_hash", lambda st, r: st.find_token_by_hash("nope")),
    ("list_tokens", lambda st, r: st.list_tokens()),
    ("ping", lambda st, r: st.ping()),
]


@pytest.mark.parametrize("call", [c for _, c in READS], ids=[n for n, _ in READS])
def test_no_read_takes_the_write_lock(
    locked_store: tuple[Metastore, dict], call: Callable[[Metastore, dict], object]
) -> None:
    store, rows = locked_store
    call(store, rows)  # MetastoreUnavailableError after 0.2 s if it waited for the lock


def test_writes_still_take_the_write_lock_up_front(locked_store: tuple[Metastore, dict]) -> None:
    store, _ = locked_store
    with pytest.raises(MetastoreUnavailableError, match="locked"):
        store.acquire_lease("other", "me", timedelta(minutes=1))


def test_a_read_transaction_cannot_write_on_postgresql(tmp_path: Path) -> None:
    """On PostgreSQL the read transaction is READ ONLY; its connection writes again afterwards."""
    url = fresh_metastore_url("postgresql", tmp_path)
    store = Metastore(url)
    try:
        for n in range(8):  # more rounds than the pool has connections
            with pytest.raises(sa.exc.DBAPIError, match="read-only"), store.read_tx() as conn:
                conn.execute(sa.text("DELETE FROM sp_leases"))
            assert store.acquire_lease(f"lease-{n}", "me", timedelta(minutes=1)) is not None
    finally:
        store.close()
        drop_scratch_schema(url)

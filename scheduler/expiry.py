"""Expiring partitions by retention (issue 30): begin → one Delta commit of removes → finish.

A table's standard partitions whose retention ran out (:func:`metastore.retention.due_for_expiry`)
expire together, in one pass recorded in ``sp_expiries`` (``metastore/store/expiries.py``):

1. ``begin``: in one metastore transaction (under the daemon's leadership ``fence``, as a roll's
   begin) they go STANDARD → EXPIRING and the pass is recorded PENDING. A partition with a copy in
   flight to a secondary waits for the next pass.
2. ``commit``: one Delta commit removes every live file of them (``dataChange=true``) under the
   app transaction ``streampart.expire/<id>``, so it lands at most once however often the pass is
   resumed. That commit is the one version at which they leave the table, whole: a query pinned
   to an older version reads them still (their files stay on disk), a newer one never sees a part.
3. ``finish``: they become EXPIRED (their rows stay: their periods stay sealed, so a late row for
   one is late, never a new partition) and the pass DONE, in one transaction.

Unlike a roll there is no seal: a standard partition never takes rows (group commit plans every
row of a non-streaming partition as late), a roll's sweep touches other files, and the removes
land once by their app transaction, so nothing planned on an older snapshot can undo or repeat
them. An interrupted pass is resumed (ours, or once its lease lapsed) by the next pass over the
table: while a pass runs, its process keeps its process lease renewed (``ingest/commit_holders.py``,
as for chunk commits and deletes), so a pass whose process died is taken over about 10 s later, and
it checks that lease before each commit it makes (a process frozen past it commits nothing). Its
files are deleted later by housekeeping, once no version time travel still promises lists them
(:meth:`scheduler.housekeeping.Housekeeper.reclaim_expired`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ingest.commit_holders import commit_holder, work_owner
from metastore import clock
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint, pausepoint
from metastore.delta.errors import retry_conflicts
from metastore.delta.files import live_files
from metastore.delta.layout import partition_dir
from metastore.delta.log import EXPIRE_KEY
from metastore.delta.warehouse import expiry_app_id
from metastore.durations import format_duration
from metastore.errors import ConflictError, LeaseLostError, StreampartError
from metastore.models import Expiry, ExpiryState, Lease, Partition, PartitionState, Table, iso
from metastore.replicas import CopyState, app_id, replica_table
from metastore.retention import due_for_expiry
from scheduler.config import RollConfig
from scheduler.errors import RollAbandonedError, RollBusyError, RollFailedError
from scheduler.keyed_rolls import keep_expired_versions


@dataclass(frozen=True)
class ExpiryResult:
    """What one pass expired (or, with ``dry_run``, would expire) of one table."""

    table: str
    retain: str | None
    partitions: list[str]
    rows: int
    bytes: int
    files: int
    expiry: str | None = None
    version: int | None = None
    resumed: bool = False
    dry_run: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def _sums(partitions: list[Partition]) -> dict[str, Any]:
    """Rows, bytes and files of ``partitions``, as their rolls recorded them."""
    return {
        "rows": sum(p.rows or 0 for p in partitions),
        "bytes": sum(p.bytes or 0 for p in partitions),
        "files": sum(p.files or 0 for p in partitions),
    }


@dataclass
class Expirer:
    """Expires the partitions of tables in a catalog; safe alongside rollers, writers and others."""

    catalog: Catalog
    config: RollConfig = field(default_factory=RollConfig)
    owner: str = field(default_factory=work_owner)
    fence: Lease | None = None  # the roll daemon's leadership: passes begin only while it is held
    should_abandon: Callable[[], bool] | None = None

    def _home(self, table: Table) -> Expirer | None:
        home = self.catalog.home(table, write=True)
        return None if home is self.catalog else replace(self, catalog=home)

    def expire_table(
        self, table: Table, now: datetime | None = None, dry_run: bool = False
    ) -> list[ExpiryResult]:
        """Resume the table's interrupted passes, then expire every partition due at ``now``
        (``dry_run``: only say which, changing nothing)."""
        if (home := self._home(table)) is not None:
            return home.expire_table(table, now, dry_run)
        if dry_run:
            return self._expire_table(table, now, dry_run)
        with commit_holder(self.catalog.store).holding(self.owner):  # renewed while we run
            return self._expire_table(table, now, dry_run)

    def _expire_table(self, table: Table, now: datetime | None, dry_run: bool) -> list[ExpiryResult]:
        now = now or clock.now()
        store = self.catalog.store
        retain, _ = self.catalog.retention.of(table)
        shown = format_duration(retain) if retain is not None else None
        results = []
        if not dry_run:
            for expiry in store.list_expiries(table.id, unfinished=True):
                with contextlib.suppress(RollBusyError):
                    results.append(self.run(table, expiry, shown, resumed=True))
        due = due_for_expiry(table, store.list_partitions(table.id, [PartitionState.STANDARD]), retain, now)
        if dry_run:
            if due:
                planned = [iso(p.value) for p in due]
                results.append(ExpiryResult(str(table.name), shown, planned, **_sums(due), dry_run=True))
            return results
        begun = store.begin_expiry(table.id, due, self.owner, self.config.lease, now=now, fence=self.fence)
        if begun is not None:  # None: nothing due, or another expirer took it
            results.append(self.run(table, begun, shown))
        return results

    def _step(self, name: str) -> None:
        crashpoint(name)
        pausepoint(name)
        if self.should_abandon is not None and self.should_abandon():
            raise RollAbandonedError(f"expiry abandoned at step {name}; it resumes from there")

    def _fenced(self, table: Table, expiry: Expiry) -> None:
        """Before a commit: this process's lease has been live all along (see the module's doc)."""
        if not commit_holder(self.catalog.store).holds(self.owner):
            raise LeaseLostError(
                f"expiry {expiry.id} of {table.name}: this process stalled past its lease, so another "
                "process may have taken the pass over; this one committed nothing more"
            )

    def run(self, table: Table, expiry: Expiry, retain: str | None, resumed: bool = False) -> ExpiryResult:
        """Carry ``expiry`` from its recorded step to DONE (inside :meth:`expire_table`, which holds
        this process's lease)."""
        store = self.catalog.store
        try:
            expiry = store.claim_expiry(expiry, self.owner, self.config.lease, fence=self.fence)
        except ConflictError as exc:
            raise RollBusyError(str(exc)) from None
        try:
            expiry = self._carry(table, expiry)
        except (RollAbandonedError, ConflictError, LeaseLostError):
            raise
        except Exception as exc:
            raise self._failed(table, expiry, exc) from exc
        return ExpiryResult(
            table=str(table.name),
            retain=retain,
            partitions=[iso(v) for v in expiry.partitions],
            rows=expiry.rows or 0,
            bytes=expiry.bytes or 0,
            files=expiry.files or 0,
            expiry=expiry.id,
            version=expiry.commit_version,
            resumed=resumed,
        )

    def _carry(self, table: Table, expiry: Expiry) -> Expiry:
        store = self.catalog.store
        self._step("expire-after-begin")
        if expiry.state is ExpiryState.PENDING:
            values = set(expiry.partitions)
            expiring = [
                p for p in store.list_partitions(table.id, [PartitionState.EXPIRING]) if p.value in values
            ]
            self._fenced(table, expiry)
            version = self._commit(table, expiry)
            expiry = store.record_expiry(
                expiry,
                self.owner,
                state=ExpiryState.COMMITTED.value,
                commit_version=version,
                **_sums(expiring),
            )
            self._step("expire-after-commit")
        self._fenced(table, expiry)
        self._expire_copies(table, expiry)
        return store.finish_expiry(expiry, self.owner)

    def _expire_copies(self, table: Table, expiry: Expiry) -> None:
        """Remove the expired partitions from each secondary's log too (one commit per secondary;
        each partition's app transaction one past any copy of it: at most once, and never under a
        stale copier's), then record those copies EXPIRED."""
        store, wh = self.catalog.store, self.catalog.warehouse
        values = set(expiry.partitions)
        generation = {p.value: p.generation for p in store.list_partitions(table.id) if p.value in values}
        for replica in self.catalog.replicas.list(table):
            present = [
                c.partition_value
                for c in store.list_copies(table.id, replica.cluster)
                if c.partition_value in values and c.state in (CopyState.PRESENT, CopyState.STALE)
            ]
            if not present:
                continue
            target = replica_table(table, replica)

            def remove(
                target: Table = target, present: list[datetime] = present, cluster: str = replica.cluster
            ) -> None:
                secondary = wh.load(target)
                txns = [(app_id(partition_dir(table, v)), generation[v] + 2) for v in present]
                pending = [(t, n) for t, n in txns if (secondary.transaction_version(t) or 0) < n]
                if pending:  # else: landed by an earlier run
                    files = [f for f in live_files(secondary) if f.partition in values]
                    wh.remove_partitions(secondary, target, files, f"{expiry.id}/{cluster}", pending)

            retry_conflicts(remove)
            store.expire_copies(table.id, replica.cluster, present)

    def _commit(self, table: Table, expiry: Expiry) -> int:
        """The version of the commit removing the expiry's partitions' files (made now, or found)."""
        wh = self.catalog.warehouse
        values = set(expiry.partitions)

        def remove() -> int:
            dt = self.catalog.load(table)  # a damaged log refuses here, before anything is committed
            if dt.transaction_version(expiry_app_id(expiry.id)) is not None:  # landed by an earlier run
                found = wh.find_commit(table, EXPIRE_KEY, expiry.id, -1)
                if found is None:
                    raise RollFailedError(
                        f"expiry {expiry.id} of {table.name}: its commit is in the log's "
                        "transactions but no commit file names it"
                    )
                return found
            files = [f for f in live_files(dt) if f.partition in values]
            if table.keys is not None and table.keys.sequence_by is not None:
                keep_expired_versions(table, int(dt.version()), files, f"expiry-{expiry.id[:8]}")
            return wh.remove_partitions(dt, table, files, expiry.id)

        return retry_conflicts(remove)

    def _failed(self, table: Table, expiry: Expiry, exc: Exception) -> StreampartError:
        where = f"expiry of {table.name} ({len(expiry.partitions)} partitions)"
        if isinstance(exc, StreampartError):
            error = exc
        else:
            error = RollFailedError(f"{where} failed: {type(exc).__name__}: {exc}; the next pass resumes it")
        with contextlib.suppress(StreampartError):
            self.catalog.store.release_expiry(expiry, self.owner, error=str(error))
        return error

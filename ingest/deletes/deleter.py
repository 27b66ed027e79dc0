"""Deletes by predicate (issue 30): ``streampart delete NS.T --where …`` and ``POST …/deletes``.

A delete removes, in **one Delta commit**, every row that matches its predicate in the snapshot it
read, from standard and streaming partitions alike: each file holding a match is replaced by one
without it (``dataChange=true``). Its steps, recorded in ``sp_deletes`` (``metastore/store/deletes.py``):

1. ``begin``: one delete per table at a time (another is ``DeleteBusyError``; one whose process died
   is resumed by the next delete of the table). While it runs, its process keeps its process lease
   renewed (``ingest/commit_holders.py``, as for chunk commits): a delete whose process died is taken
   over about 10 s later, and before each commit it makes a delete checks that lease, so a process
   frozen past it never commits a delete another process took over.
2. ``seal``: a metadata commit, as a roll's: a rewrite attempt planned before it (this delete's own,
   when it resumes one that died) can never commit, so its files may go.
3. ``plan and rewrite`` at the newest version (:mod:`ingest.deletes.plan`); while a partition holding
   a match is rolling, the delete waits for that roll (a roll counts its partition's rows), and fails
   with one line if it does not finish. An expiring partition's files are rewritten like a standard
   one's (its rows are in the snapshot until the expiry's commit removes them): never skipped.
4. ``commit`` the removes and the rewritten files, at most once (app transaction
   ``streampart.delete/<id>``). It is refused when a commit since the plan removed one of the same
   files (a roll's sweep, an expiry) or changed the metadata (a seal): then the delete plans again
   on the newer snapshot. That check is ours (``Warehouse.replace_files(checked=True)``): delta-rs
   lets a remove through when the concurrent one had ``dataChange=false``, as a sweep's has. Chunk
   appends never conflict with it.
5. ``finish``: the rewritten standard partitions counted anew (and their ``_SUCCESS``), the bytes it
   freed in streaming partitions taken off the quota ledger.

Rows committed after the snapshot it read — chunks landing while it runs — are not deleted: run
the delete again for those. Files it replaced stay on disk for older versions (time travel) until
housekeeping deletes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ingest.commit_holders import commit_holder, work_owner
from ingest.deletes.plan import (
    COUNTED,
    Plan,
    candidates,
    matches_every_row,
    rewrite,
    rewritten_version,
    staged_of,
)
from ingest.deletes.predicate import EVERY_ROW, Predicate, parse_predicate
from metastore import clock
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint, pausepoint
from metastore.delta.errors import COMMIT_ATTEMPTS, retry_conflicts
from metastore.delta.files import (
    LiveFile,
    live_files,
    partition_dir_entries,
    remove_file,
    write_success_marker,
)
from metastore.delta.layout import parse_partition_value
from metastore.delta.log import DELETE_KEY, DELETED_KEY, commit_actions
from metastore.delta.staging import files as staged_files
from metastore.delta.stats import file_bounds
from metastore.errors import (
    ConflictError,
    DeleteBusyError,
    LeaseLostError,
    StreampartError,
    UserInputError,
)
from metastore.models import Column, Delete, DeleteState, Mode, PartitionState, Table, TableKind, iso

# How long a delete waits for a roll of a partition holding a match to finish.
ROLL_WAIT_S = 120.0
# Why 10 min: the delete's own lease only matters when its process keeps no process lease (it
# renews one every second while the delete runs, and is taken over ~10 s after it stops); it
# bounds how long a delete whose process lease cannot be read blocks its table.
LEASE = timedelta(minutes=10)
MARKER_THREADS = 8  # completeness markers of the rewritten standard partitions written at once


def delete_app_id(delete_id: str) -> str:
    return f"streampart.delete/{delete_id}"


@dataclass(frozen=True)
class DeleteResult:
    """What a delete removed (or, with ``dry_run``, would remove)."""

    table: str
    where: str
    rows: int
    files_removed: int
    files_added: int
    partitions: list[str]
    rows_read: int = 0
    files_read: int = 0
    delete: str | None = None
    read_version: int | None = None
    version: int | None = None
    dry_run: bool = False
    resumed: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class Deleter:
    """Deletes rows of a catalog's tables by predicate; safe alongside writers, rollers and expiries."""

    catalog: Catalog
    owner: str = field(default_factory=work_owner)
    lease: timedelta = LEASE
    roll_wait_s: float = ROLL_WAIT_S

    def delete(
        self,
        table: Table,
        where: str,
        *,
        all_rows: bool = False,
        dry_run: bool = False,
        requested_by: str = "cli",
    ) -> list[DeleteResult]:
        """Delete the rows of ``table`` matching ``where``; a delete of it that died is finished first
        (its result comes first). ``dry_run``: only count them.

        Raises:
            UserInputError: a bad predicate, or a companion table; DeleteBusyError: another delete
                of the table runs, or a roll holds a partition too long.
        """
        home = self.catalog.home(table, write=not dry_run)
        if home is not self.catalog:
            return Deleter(home, self.owner, self.lease, self.roll_wait_s).delete(
                table, where, all_rows=all_rows, dry_run=dry_run, requested_by=requested_by
            )
        check_deletable(table)
        predicate = parse_predicate(where, where_columns(table), allow_all=all_rows)
        if table.keys is not None:
            return [self._delete_keys(table, predicate, all_rows, dry_run)]
        if dry_run:
            return [self._dry_run(table, predicate)]
        if not all_rows:
            self._refuse_every_row(table, predicate)
        with commit_holder(self.catalog.store).holding(self.owner):  # renewed while we run
            store = self.catalog.store
            results = [self._resume(table, d) for d in store.list_deletes(table.id, unfinished=True)]
            begun = store.begin_delete(table.id, where, requested_by, self.owner, self.lease)
            return [*results, self._carry(table, begun, predicate)]

    def _delete_keys(self, table: Table, predicate: Predicate, all_rows: bool, dry_run: bool) -> DeleteResult:
        """A keyed table's delete: the keys whose current row (at the newest version) matches get a
        delete version — the row itself, its op the table's first delete value — committed as one
        chunk, as a producer's deletes are. A version of such a key that arrives later (or has a
        greater sequence value) is newer, and stands."""
        import pyarrow as pa

        from ingest.chunks.writer import ChunkWriter
        from ingest.keys import current_rows
        from metastore.delta.metadata import columns_of

        keys = table.keys
        assert keys is not None
        if keys.history:
            raise UserInputError(
                f"{table.name} keeps every version (--history): a delete is a version with its own "
                f"sequence value, which a predicate cannot choose; write delete records (op "
                f"{keys.delete_ops[0]!r}) with their {keys.sequence_by} instead"
            )
        if keys.op_column is None:
            raise UserInputError(
                f"{table.name} is keyed without an op column: its keys are deleted by writing delete "
                "versions, which need one; create the table with --op-column"
            )
        dt = self.catalog.load(table)
        version = int(dt.version())
        columns = columns_of(dt, f"table {table.name}")
        rows = current_rows(table, version, live_files(dt), columns)
        if rows is None:
            rows = pa.table({})
        hits = rows.filter(predicate.matches) if rows.num_rows else rows
        if hits.num_rows and hits.num_rows == rows.num_rows and not all_rows:
            raise UserInputError(
                f"the condition {predicate.sql} matches every row of {table.name}; {EVERY_ROW}"
            )
        data = hits.select([c.name for c in columns]) if hits.num_rows else hits
        ops = pa.array([keys.delete_ops[0]] * data.num_rows, pa.string())
        data = data.set_column(data.column_names.index(keys.op_column), keys.op_column, ops)
        if table.mode is Mode.EVENT_TIME and data.num_rows:  # a key's delete may sit in any partition:
            at = pa.array([clock.now()] * data.num_rows, data.schema.field(table.time_column).type)
            data = data.set_column(
                data.column_names.index(table.time_column), table.time_column, at
            )  # an open one
        values = hits.column(table.partition_column).to_pylist() if hits.num_rows else []
        partitions = sorted({iso(v) for v in values})
        result = DeleteResult(
            table=str(table.name),
            where=predicate.text,
            rows=data.num_rows,
            files_removed=0,
            files_added=0,
            partitions=partitions,
            rows_read=rows.num_rows,
            read_version=version,
            dry_run=dry_run,
        )
        if dry_run or data.num_rows == 0:
            return result
        commit = ChunkWriter(self.catalog, table).write_table(data)
        return dataclasses.replace(result, version=commit.version)

    def _resume(self, table: Table, delete: Delete) -> DeleteResult:
        try:
            delete = self.catalog.store.claim_delete(delete, self.owner, self.lease)
        except ConflictError:
            raise DeleteBusyError(
                f"another delete of {table.name} runs ({delete.predicate!r}, by {delete.requested_by}); "
                "retry once it finished (a delete whose process died is taken over about 10 s after)"
            ) from None
        return self._carry(
            table, delete, parse_predicate(delete.predicate, where_columns(table), allow_all=True), True
        )

    def _refuse_every_row(self, table: Table, predicate: Predicate) -> None:
        """A condition true for every row the table holds is a mistake unless ``--all`` says not."""
        if matches_every_row(table, predicate, live_files(self.catalog.load(table))):
            raise UserInputError(
                f"the condition {predicate.sql} matches every row of {table.name}; {EVERY_ROW}"
            )

    def _dry_run(self, table: Table, predicate: Predicate) -> DeleteResult:
        dt = self.catalog.load(table)
        states = {p.value: p.state for p in self.catalog.partitions(table)}
        files, _ = candidates(table, predicate, live_files(dt), states, file_bounds(dt, predicate.columns))
        plan = rewrite(table, predicate, files, "", int(dt.version()), "", dry_run=True)
        return self._result(table, predicate.text, plan, dry_run=True)

    def _result(self, table: Table, where: str, plan: Plan, **more: Any) -> DeleteResult:
        return DeleteResult(
            table=str(table.name),
            where=where,
            rows=plan.rows,
            files_removed=len(plan.removes),
            files_added=len(plan.adds),
            partitions=[iso(v) for v in plan.partitions],
            rows_read=plan.rows_read,
            files_read=plan.files_read,
            read_version=plan.version,
            **more,
        )

    def _step(self, name: str) -> None:
        crashpoint(name)
        pausepoint(name)

    def _fenced(self, table: Table, delete: Delete) -> None:
        """Before a commit: this process's lease has been live all along (see the module's doc)."""
        if not commit_holder(self.catalog.store).holds(self.owner):
            raise LeaseLostError(
                f"delete {delete.id} of {table.name}: this process stalled past its lease, so another "
                "process may have taken the delete over; this one committed nothing more"
            )

    def _carry(
        self, table: Table, delete: Delete, predicate: Predicate, resumed: bool = False
    ) -> DeleteResult:
        store = self.catalog.store
        try:
            self._step("delete-after-begin")
            plan = Plan(delete.read_version or -1)
            if delete.state is DeleteState.PENDING:
                self._fenced(table, delete)
                seal = self._seal(table, delete)  # fences every attempt planned before it
                delete = store.record_delete(delete, self.owner, seal_version=seal)
                if resumed:  # (a new delete has no earlier attempt)
                    self._remove_leftovers(table, delete, seal)
                plan, version = self._commit(table, delete, predicate)
                delete = store.record_delete(
                    delete, self.owner, state=DeleteState.COMMITTED.value, commit_version=version
                )
                self._step("delete-after-commit")
            self._fenced(table, delete)
            delete = self._finish(table, delete)
        except (ConflictError, DeleteBusyError):
            with contextlib.suppress(StreampartError):
                store.release_delete(
                    delete, self.owner, error="another process took it over, or a roll held it"
                )
            raise
        except Exception as exc:
            with contextlib.suppress(StreampartError):
                store.release_delete(delete, self.owner, error=f"{type(exc).__name__}: {exc}")
            raise
        return DeleteResult(
            table=str(table.name),
            where=delete.predicate,
            rows=delete.rows or 0,
            files_removed=delete.files_removed or 0,
            files_added=delete.files_added or 0,
            partitions=[iso(v) for v in delete.partitions],
            rows_read=plan.rows_read,
            files_read=plan.files_read,
            delete=delete.id,
            read_version=delete.read_version,
            version=delete.commit_version,
            resumed=resumed,
        )

    def _seal(self, table: Table, delete: Delete) -> int:
        """The delete's seal, sealed again on the newer snapshot when a concurrent commit (an expiry's
        removes, a roll's sweep) made Delta refuse it: a seal only changes a property."""
        return retry_conflicts(lambda: self.catalog.warehouse.seal(table, delete.id, DELETE_KEY))

    def _commit(self, table: Table, delete: Delete, predicate: Predicate) -> tuple[Plan, int]:
        """Plan, rewrite and commit (again after a refused commit); the plan and the commit's version."""
        store, wh = self.catalog.store, self.catalog.warehouse
        waited_since, refused = time.monotonic(), 0
        while refused < COMMIT_ATTEMPTS:
            dt = self.catalog.load(table)
            if dt.transaction_version(delete_app_id(delete.id)) is not None:  # an earlier run's landed
                found = wh.find_commit(table, DELETED_KEY, delete.id, -1)
                if found is None:
                    raise ConflictError(
                        f"delete {delete.id}: its transaction is in the log, its commit is not"
                    )
                return Plan(delete.read_version or -1), found
            states = {p.value: p.state for p in store.list_partitions(table.id)}  # after the snapshot
            bounds = file_bounds(dt, predicate.columns)  # files whose statistics rule it out are not read
            files, rolling = candidates(table, predicate, live_files(dt), states, bounds)
            if rolling:
                if time.monotonic() - waited_since > self.roll_wait_s:
                    raise DeleteBusyError(
                        f"partition(s) {', '.join(iso(v) for v in rolling)} of {table.name} are rolling and "
                        f"did not finish within {self.roll_wait_s:.0f} s; run the delete again"
                    )
                time.sleep(0.5)
                continue
            version = int(dt.version())
            plan = rewrite(table, predicate, files, delete.id, version, uuid.uuid4().hex[:8])
            try:
                self._step("delete-after-rewrite")
                store.record_delete(
                    delete,
                    self.owner,
                    read_version=version,
                    rows=plan.rows,
                    files_removed=len(plan.removes),
                    files_added=len(plan.adds),
                    partitions=plan.partitions,
                    removed_files=[f.path for f in plan.removes],
                )
                delete = store.get_delete(delete.id)
                self._fenced(table, delete)
                metadata = {DELETED_KEY: delete.id}
                landed = wh.replace_files(
                    dt,
                    table,
                    plan.removes,
                    plan.adds,
                    metadata,
                    data_change=True,
                    app_id=delete_app_id(delete.id),
                    ranges=plan.ranges,
                    checked=True,  # (delta-rs lets it past a sweep of the same files)
                )
                return plan, landed
            except ConflictError:
                plan.discard(table)  # never committed: nobody reads them
                if store.get_delete(delete.id).owner != self.owner:
                    raise
                refused += 1
        raise ConflictError(
            f"delete of {table.name}: its commit was refused {COMMIT_ATTEMPTS} times; run it again"
        )

    def _remove_leftovers(self, table: Table, delete: Delete, seal: int) -> None:
        """The files of this delete's attempts that can never commit: planned before our own seal
        (standard partitions' files name their snapshot) and not in the newest snapshot."""
        live = {f.path for f in live_files(self.catalog.warehouse.load(table))}
        for p in self.catalog.partitions(table, [PartitionState.STANDARD]):
            for path in partition_dir_entries(table, p.value):
                v = rewritten_version(delete.id, path.rsplit("/", 1)[-1])
                if v is not None and v < seal and path not in live:
                    remove_file(table, path)
        for rel, entry in staged_files(table):
            if staged_of(delete.id, entry.name) and rel not in live:
                remove_file(table, rel)  # (a staged rewrite's attempt: before our seal, as we sealed first)

    def _finish(self, table: Table, delete: Delete) -> Delete:
        """Count the rewritten standard partitions anew and free the streaming ones' quota; DONE."""
        assert delete.commit_version is not None
        counted, freed = recount(
            self.catalog, table, delete.commit_version, set(delete.partitions), {"delete": delete.id}
        )
        return self.catalog.store.finish_delete(delete, self.owner, counted, freed)


def recount(
    catalog: Catalog, table: Table, version: int, touched: set[datetime], marked: dict[str, Any]
) -> tuple[dict[datetime, tuple[int, int, int]], dict[datetime, int]]:
    """After the commit at ``version`` rewrote files of the partitions ``touched`` (copy-on-write: a
    delete's, a keyed roll's): the standard and expiring ones counted anew (rows, bytes, files; the
    standard ones' completeness markers written again, saying ``marked`` too), and the bytes it freed
    in each other one (its quota ledger's), as ``finish_delete`` and ``finish_roll`` record them."""
    freed: dict[datetime, int] = {}
    for action in commit_actions(table, version) or []:
        for kind, sign in (("remove", 1), ("add", -1)):
            a = action.get(kind)
            if a is not None:
                value = parse_partition_value(a["partitionValues"][table.partition_column])
                if value in touched:
                    freed[value] = freed.get(value, 0) + sign * int(a.get("size") or 0)
    states = {p.value: p.state for p in catalog.partitions(table)}
    live: dict[datetime, list[LiveFile]] = {}
    for f in live_files(catalog.warehouse.load(table)):
        if f.partition in touched:
            live.setdefault(f.partition, []).append(f)
    counted: dict[datetime, tuple[int, int, int]] = {}  # standard and expiring ones (a roll counted)
    for value in touched:
        if states.get(value) in COUNTED:
            mine = live.get(value, [])
            counted[value] = (sum(f.rows for f in mine), sum(f.size for f in mine), len(mine))
    standard = [v for v in counted if states.get(v) is PartitionState.STANDARD]  # (expiring: leaving)

    def mark(value: datetime) -> None:
        rows, _, files = counted[value]
        info = {"table": str(table.name), "partition": iso(value), **marked, "rows": rows}
        write_success_marker(table, value, {**info, "files": files})

    with ThreadPoolExecutor(MARKER_THREADS) as pool:  # a bucket's PUTs are latency, not CPU
        list(pool.map(mark, standard))
    return counted, {v: n for v, n in freed.items() if states.get(v) not in COUNTED}


def where_columns(table: Table) -> list[Column]:
    """What ``--where`` may name: the table's columns and its partition column (a period's start)."""
    return [*table.columns, Column(name=table.partition_column, type="timestamp", nullable=False)]


def check_deletable(table: Table) -> None:
    """A companion table takes no delete by predicate (its rows are the raw records of its main table)."""
    if table.kind is not TableKind.MAIN:
        raise UserInputError(
            f"{table.name} is a {table.kind.value} table: delete its main table's rows instead (its raw "
            "records are not deleted by predicate yet)"
        )

"""The catalog's schema changes (``catalog.schemas``): ALTER of a table's columns, and its evolution settings.

An ALTER runs in the metastore of the table it is given (:meth:`Routing.home`), in four steps
(docs/design/schema-changes.md):

1. **Check** everything first with :func:`~metastore.models.plan_alter` against the log's newest
   columns: one :class:`UserInputError` naming every problem, nothing changed.
2. **Record** the change pending in the metastore (``record_schema_change``: before/after, under an
   idempotency key).
3. **Commit** a ``metaData``-only Delta version (:meth:`Warehouse.commit_schema`, put-if-absent); its
   commitInfo names the key under ``streampart.schema``. A concurrent append lands first and the
   change follows it; a concurrent seal is re-read and the change committed again on top; a
   concurrent schema change that left the log with columns this one did not plan on refuses it.
4. **Finish** in the metastore (``finish_schema_change``: a compare-and-set of the table's columns).

A process that died between 3 and 4 left a pending change whose commit is in the log:
:meth:`Schemas.recover` (run by every ALTER of the table, and by ``streampart check``) finishes
it. One that died before 3 left a pending change with no commit: it is discarded once it is older
than :data:`STALE_PENDING` (a younger one may belong to an ALTER still running, whose commit is
about to land). The ``__late`` companion, which has the table's columns,
changes with it, under the key ``<key>/late``.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta

from metastore import clock
from metastore.catalog.routing import Routing
from metastore.crashpoints import crashpoint
from metastore.delta.log import SCHEMA_KEY
from metastore.delta.metadata import current_metadata, metadata_action, schema_at
from metastore.delta.warehouse import WIDEN_WITH_FEATURES
from metastore.errors import ConflictError, NotFoundError, SchemaConflictError, UserInputError
from metastore.models import (
    Column,
    RecordedSchemaChange,
    SchemaChangeState,
    SchemaEvolution,
    Table,
    TableKind,
    TableName,
    plan_alter,
    widening_refusal,
)
from metastore.store import Metastore

# Why 5 minutes: a pending change without a commit in the log is either dead (its process died
# before committing) or alive (its commit is a few milliseconds away). An ALTER takes well under a
# second between recording and committing; 5 minutes covers a long GC pause or a frozen VM, and an
# ALTER that finds its own change discarded records it again (see Schemas._finish).
STALE_PENDING = timedelta(minutes=5)

# How many times a schema change is committed again after a concurrent seal (a roll) took its
# version; each roll seals once, so more than a few in a row means something loops.
MAX_SEAL_RETRIES = 10


@dataclass(frozen=True)
class Altered:
    """What an ALTER did: the table as it is now, its change, and its ``__late`` companion's (if any)."""

    table: Table
    change: RecordedSchemaChange
    late: RecordedSchemaChange | None = None


def _applies(log_columns: Sequence[Column], after: Sequence[Column]) -> bool:
    """Whether ``after`` still extends the log's columns: every one kept, each same or widened."""
    wanted = {c.name: c for c in after}
    return all(
        c.name in wanted and widening_refusal(c.type, wanted[c.name].type) is None for c in log_columns
    )


class Schemas:
    """Schema changes of a catalog's tables (reached as ``catalog.schemas``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def _table(self, name: Table | TableName | str) -> Table:
        """``name``'s table, read from its namespace's metastore (NotFoundError: no such table; a link
        or a name in another case is the caller's to resolve, as ``catalog.table`` does)."""
        if isinstance(name, Table):
            return name
        parsed = TableName.parse(name) if isinstance(name, str) else name
        return self._routing.home(parsed).store.get_table(parsed)

    def alter(
        self,
        name: Table | TableName | str,
        add: Sequence[Column] = (),
        widen: Sequence[Column] = (),
        key: str | None = None,
        source: str = "alter",
    ) -> Altered:
        """Add the nullable columns ``add`` (at the end) and widen the columns ``widen`` in place.

        ``key``: the idempotency key (default: a new one); running it again with the same key after
        a crash finishes the change once.

        Raises:
            UserInputError: naming every problem of the change (nothing changed).
            SchemaConflictError: another schema change came first, or is in progress; run it again.
            NamespaceMovingError: the table's namespace is being moved.
        """
        table = self._table(name)
        if table.kind is not TableKind.MAIN:
            raise UserInputError(
                f"{table.name} is a {table.kind.value} companion table: alter its main table, "
                f"whose changes it follows"
            )
        store = self._routing.home(table, write=True).store
        key = key or uuid.uuid4().hex
        self.recover(table, keep=key)
        table = store.get_table_by_id(table.id)
        change = self._alter_one(store, table, add, widen, key, source)
        late = store.find_table(table.companion(TableKind.LATE))
        late_change = None
        if late is not None:
            self.recover(late, keep=f"{key}/late")
            late_change = self._alter_one(store, late, add, widen, f"{key}/late", source)
        return Altered(store.get_table_by_id(table.id), change, late_change)

    def _alter_one(
        self,
        store: Metastore,
        table: Table,
        add: Sequence[Column],
        widen: Sequence[Column],
        key: str,
        source: str,
    ) -> RecordedSchemaChange:
        found = next((c for c in store.schema_changes(table.id) if c.key == key), None)
        if found is not None and found.state is SchemaChangeState.DONE:
            return found  # a retry of a change that landed
        if found is None:
            log_columns = schema_at(table.location)
            after = plan_alter(log_columns, table.time_column, table.partition_column, add, widen)
            if widen and not self._routing.warehouse.takes_plain_appends(table):
                raise UserInputError(WIDEN_WITH_FEATURES.format(name=table.name))
            found = store.record_schema_change(table.id, key, table.columns, after, source)
        version = self._routing.warehouse.find_commit(table, SCHEMA_KEY, key, -1)
        if version is None:
            crashpoint("schema-before-log")
            version = self._commit(store, table, found)
        crashpoint("schema-after-log")
        return self._finish(store, table, found, version)

    def _commit(self, store: Metastore, table: Table, change: RecordedSchemaChange) -> int:
        """Commit ``change``'s ``metaData`` to the log (step 3); its version. A concurrent seal makes
        it read the log again and commit on top; a concurrent schema change discards it."""
        root = table.location
        before = {c.name for c in change.before}
        added = [c for c in change.after if c.name not in before]
        widening = {op["column"] for op in change.change if op["op"] == "widen"}
        widened = [c for c in change.after if c.name in widening]
        for _ in range(MAX_SEAL_RETRIES):
            dt = self._routing.warehouse.load(table)
            read_version = int(dt.version())
            if not _applies(schema_at(root, read_version), change.after):
                store.discard_schema_change(table.id, change.key)
                raise SchemaConflictError(
                    f"another schema change of {table.name} landed first (the log's columns are now "
                    f"{', '.join(c.name for c in schema_at(root, read_version))}); nothing was changed: "
                    "run the change again"
                )
            current = current_metadata(root, read_version)
            action = metadata_action(current, change.after, table.partition_column)
            try:
                return self._routing.warehouse.commit_schema(
                    table, read_version, action, added, widened, change.key
                )
            except ConflictError:
                continue  # a seal, or another change: read the log again
        store.discard_schema_change(table.id, change.key)
        raise SchemaConflictError(
            f"the schema change of {table.name} lost {MAX_SEAL_RETRIES} races for the log in a row; "
            "nothing was changed: run it again"
        )

    def _finish(
        self, store: Metastore, table: Table, change: RecordedSchemaChange, version: int
    ) -> RecordedSchemaChange:
        try:
            return store.finish_schema_change(table.id, change.key, version)
        except NotFoundError:
            pass
        # Discarded as stale while this process was paused after its commit landed: record it again.
        store.record_schema_change(table.id, change.key, change.before, change.after, change.source)
        return store.finish_schema_change(table.id, change.key, version)

    def recover(
        self, name: Table | TableName | str, stale_after: timedelta = STALE_PENDING, keep: str | None = None
    ) -> list[RecordedSchemaChange]:
        """Finish the table's pending schema changes whose commit is in the log; discard those without
        one older than ``stale_after`` (``keep``: a key left alone, the caller's own). The changes
        finished or discarded.

        Raises:
            SchemaConflictError: a pending change younger than ``stale_after`` has no commit yet
                (another ALTER is running); or a landed one cannot finish (``streampart check`` says).
        """
        table = self._table(name)
        store = self._routing.home(table, write=True).store
        handled = []
        for change in store.pending_schema_changes(table.id):
            if change.key == keep:
                continue
            version = self._routing.warehouse.find_commit(table, SCHEMA_KEY, change.key, -1)
            if version is not None:
                handled.append(self._finish_found(store, table, change, version))
            elif clock.now() - change.at >= stale_after:
                store.discard_schema_change(table.id, change.key)
                handled.append(change)
            else:
                raise SchemaConflictError(
                    f"a schema change of {table.name} is in progress ({change.description}, recorded "
                    f"{change.at:%Y-%m-%d %H:%M:%S}); run yours when it has finished"
                )
        return handled

    def settle(self, name: Table | TableName | str) -> list[RecordedSchemaChange]:
        """Finish the table's pending schema changes whose commit is in the log, oldest first, as far
        as they go; the changes finished.

        Unlike :meth:`recover` it discards nothing and refuses nothing: a change without a commit
        (an ALTER still running, or one that died: :meth:`recover`'s to discard) or one that cannot
        finish yet stays pending. A group commit runs it when its own change could not finish in
        its transaction (an earlier change in the log had not finished), and after a crash.
        """
        table = self._table(name)
        store = self._routing.home(table, write=True).store
        found: dict[str, int] = {}
        for change in store.pending_schema_changes(table.id):
            version = self._routing.warehouse.find_commit(table, SCHEMA_KEY, change.key, -1)
            if version is not None:
                found[change.key] = version
        finished: list[RecordedSchemaChange] = []
        progress = True
        while found and progress:  # in the log's order: each finishes on the one before it
            progress = False
            for key, version in sorted(found.items(), key=lambda kv: kv[1]):
                try:
                    finished.append(store.finish_schema_change(table.id, key, version))
                except SchemaConflictError:
                    continue
                del found[key]
                progress = True
        return finished

    def _finish_found(
        self, store: Metastore, table: Table, change: RecordedSchemaChange, version: int
    ) -> RecordedSchemaChange:
        """Finish a pending change found in the log at ``version``. If another change, racing it, added
        the same columns and finished first, the table has this one's columns already: it is dropped
        from the history (its commit changed nothing the other did not), rather than blocking every
        later change of the table."""
        try:
            return store.finish_schema_change(table.id, change.key, version)
        except SchemaConflictError:
            if store.get_table_by_id(table.id).columns != change.after:
                raise
        store.discard_schema_change(table.id, change.key)
        return change

    def set_evolution(
        self,
        name: Table | TableName | str,
        mode: SchemaEvolution | str | None = None,
        max_new_columns: int | None = None,
    ) -> Table:
        """Set what rows may change in the table's schema and the cap on the columns they may add
        (None: left as it is); the table as it is now.

        Raises:
            UserInputError: an unknown mode, or a negative cap.
        """
        table = self._table(name)
        evolution = None
        if mode is not None:
            try:
                evolution = SchemaEvolution(mode)
            except ValueError:
                modes = ", ".join(m.value for m in SchemaEvolution)
                raise UserInputError(f"schema evolution {mode!r}: give one of {modes}") from None
        store = self._routing.home(table, write=True).store
        return store.set_schema_evolution(table.id, evolution, max_new_columns)

"""A table's schema changes: recorded pending, finished fenced, listed as its history; its evolution settings.

A schema change lands in two places, the Delta log first (a ``metaData`` commit) and the metastore
after it, so the metastore's columns are never ahead of the log (docs/design/schema-changes.md,
invariant 1). Its steps here:

1. :meth:`SchemaStore.record_schema_change` records it ``pending`` under an idempotency key, with
   the columns it starts from (``before``) and gives (``after``), before its Delta commit; a
   retry under the same key finds it, the same key for another change is a conflict. It refuses
   at once when the table's columns are not ``before`` any more (another change came first).
2. The caller commits the ``metaData`` to the log.
3. :meth:`SchemaStore.finish_schema_change` (or :func:`finish_change`, inside a transaction of the
   caller's, such as a group commit's) sets ``sp_tables.columns`` to ``after`` and the change
   ``done`` at its version, in one transaction, **only if the columns are still ``before``**: a
   compare-and-set on the table's row, locked (``FOR UPDATE`` on PostgreSQL; SQLite holds its write
   lock). A lost race raises :class:`~metastore.errors.SchemaConflictError` and changes nothing.
   (The columns are JSON, which PostgreSQL cannot compare in SQL: hence the lock and the
   comparison in Python rather than a ``WHERE columns = …``.)

A change whose Delta commit conflicted is :meth:`SchemaStore.discard_schema_change`\\ d. One whose
process died between 2 and 3 stays ``pending`` (:meth:`SchemaStore.pending_schema_changes`) until a
recovery finds its commit in the log and finishes it. Every write here is fenced by a namespace move
(``fence_table``), as every other write of a table is.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from metastore import schema as s
from metastore.errors import ConflictError, UserInputError
from metastore.models import (
    Column,
    RecordedSchemaChange,
    SchemaChangeState,
    SchemaEvolution,
    Table,
    column_changes,
)
from metastore.store.engine import Database, _db, _now
from metastore.store.namespaces import fence_table
from metastore.store.schema_changes import (
    DATA_SOURCE,
    change_from_row,
    dump_columns,
    find_change,
    finish_change,
    require_columns,
)
from metastore.store.tables import table_from_row


class SchemaStore(Database):
    """A table's schema changes and its evolution settings (see the module's docstring)."""

    def record_schema_change(
        self,
        table_id: int,
        key: str,
        before: Sequence[Column],
        after: Sequence[Column],
        source: str,
        now: datetime | None = None,
    ) -> RecordedSchemaChange:
        """Record the change of table ``table_id``'s data columns from ``before`` to ``after``,
        pending, under the idempotency key ``key`` (step 1); the change as recorded.

        Recorded again under the same key (a retry), it returns the change as it stands, pending
        or done.

        Raises:
            UserInputError: ``after`` drops a column, changes a nullability, or changes nothing.
            ConflictError: ``key`` names another change of the table.
            SchemaConflictError: the table's columns are not ``before`` (another change came first).
            NamespaceMovingError: the table's namespace is being moved.
        """
        before, after = tuple(before), tuple(after)
        changes = column_changes(before, after)
        values = {
            "table_id": table_id,
            "key": key,
            "change": changes,
            "before": dump_columns(before),
            "after": dump_columns(after),
            "source": source,
            "state": SchemaChangeState.PENDING.value,
            "at": _db(now or _now()),
        }
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            found = find_change(conn, table_id, key)
            if found is None:
                require_columns(conn, table_id, key, before)
                insert = (postgresql.insert if conn.dialect.name == "postgresql" else sqlite.insert)(
                    s.schema_changes
                )
                conn.execute(
                    insert.values(**values).on_conflict_do_nothing(index_elements=["table_id", "key"])
                )
                found = find_change(conn, table_id, key)
                assert found is not None
        if (found.before, found.after, found.source) != (before, after, source):
            raise ConflictError(
                f"schema change {key} of table #{table_id} is another change ({found.description}, by "
                f"{found.source}): a key names one change for good; use a new key"
            )
        return found

    def finish_schema_change(
        self, table_id: int, key: str, version: int, now: datetime | None = None
    ) -> RecordedSchemaChange:
        """Finish the pending schema change ``key``, whose ``metaData`` landed at Delta ``version``
        (step 3: :func:`finish_change` in a transaction of its own); the change, done.

        Raises:
            SchemaConflictError: the table's columns are not the ones the change started from.
            ConflictError: it is done already, at another version.
            NotFoundError: no such change; NamespaceMovingError: the namespace is being moved.
        """
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            done = finish_change(conn, table_id, key, version, now or _now())
        assert done is not None
        return done

    def columns_added_by_data(self, table_id: int) -> int:
        """How many columns the table's data added to it (schema evolution), the pending changes too:
        what its ``max_new_columns`` caps (columns added by hand do not count)."""
        c = s.schema_changes.c
        q = sa.select(c.change).where(c.table_id == table_id, c.source.like(f"{DATA_SOURCE}%"))
        with self.read_tx() as conn:
            return sum(1 for ops in conn.execute(q).scalars() for op in ops if op["op"] == "add")

    def discard_schema_change(self, table_id: int, key: str) -> bool:
        """Forget the pending change ``key`` (its Delta commit did not land: it conflicted); whether
        there was one. A change that is done stays in the history."""
        c = s.schema_changes.c
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            return bool(
                conn.execute(
                    sa.delete(s.schema_changes).where(
                        c.table_id == table_id, c.key == key, c.state == SchemaChangeState.PENDING.value
                    )
                ).rowcount
            )

    def schema_changes(self, table_id: int, limit: int | None = None) -> list[RecordedSchemaChange]:
        """The table's schema changes, newest first (the pending ones among them); ``limit``: so many."""
        c = s.schema_changes.c
        q = sa.select(s.schema_changes).where(c.table_id == table_id).order_by(c.id.desc())
        if limit is not None:
            q = q.limit(limit)
        with self.read_tx() as conn:
            return [change_from_row(r) for r in conn.execute(q).all()]

    def latest_schema_changes(self, table_ids: Sequence[int]) -> dict[int, RecordedSchemaChange]:
        """Each of the tables' newest finished schema change (a table without one is left out), in one
        statement for all of them (the status page asks for every table at once)."""
        if not table_ids:
            return {}
        c = s.schema_changes.c
        newest = (
            sa.select(sa.func.max(c.id))
            .where(c.table_id.in_(list(table_ids)), c.state == SchemaChangeState.DONE.value)
            .group_by(c.table_id)
        )
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.schema_changes).where(c.id.in_(newest))).all()
        return {change.table_id: change for change in map(change_from_row, rows)}

    def pending_schema_changes(self, table_id: int | None = None) -> list[RecordedSchemaChange]:
        """Changes recorded but not finished (of table ``table_id``, or of every table), oldest first."""
        c = s.schema_changes.c
        q = sa.select(s.schema_changes).where(c.state == SchemaChangeState.PENDING.value)
        if table_id is not None:
            q = q.where(c.table_id == table_id)
        with self.read_tx() as conn:
            return [change_from_row(r) for r in conn.execute(q.order_by(c.id)).all()]

    def set_schema_evolution(
        self,
        table_id: int,
        evolution: SchemaEvolution | None = None,
        max_new_columns: int | None = None,
    ) -> Table:
        """Set what rows may change in the table's schema, and the cap on the columns they may add
        (None: left as it is); the table as it is now.

        Raises:
            UserInputError: a negative ``max_new_columns``.
            NotFoundError: no such table; NamespaceMovingError: its namespace is being moved.
        """
        values: dict[str, Any] = {}
        if evolution is not None:
            values["schema_evolution"] = SchemaEvolution(evolution).value
        if max_new_columns is not None:
            if max_new_columns < 0:
                raise UserInputError(f"max new columns must be 0 or more, not {max_new_columns}")
            values["max_new_columns"] = max_new_columns
        t = s.tables.c
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            if values:
                conn.execute(sa.update(s.tables).where(t.id == table_id).values(**values))
            row = conn.execute(sa.select(s.tables).where(t.id == table_id)).one()
        return table_from_row(row, self.name)

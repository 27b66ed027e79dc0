"""A schema change's finishing step, which a group commit's transaction runs too (``finish_commits``).

The steps of a schema change are described in ``metastore/store/schemas.py``; this module holds
the part the chunk store needs as well (step 3, :func:`finish_change`), below both, so that the
stores import it without importing each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from metastore import schema as s
from metastore.errors import ConflictError, NotFoundError, SchemaConflictError
from metastore.models import Column, RecordedSchemaChange, SchemaChangeState, check_transition, format_schema
from metastore.store.engine import _db, _out, locking
from metastore.store.preconditions import guarded_update, state_in

# The source of a schema change made by a chunk's data (then the chunks' ids): its columns count
# against the table's max_new_columns.
DATA_SOURCE = "chunk:"


def columns_from_json(value: Any) -> tuple[Column, ...]:
    return tuple(Column(**c) for c in value)


def dump_columns(columns: Sequence[Column]) -> list[dict[str, Any]]:
    return [c.model_dump() for c in columns]


def _text_of(columns: Sequence[Column]) -> str:
    return format_schema(tuple(columns)) or "(none)"


def change_from_row(row: Any) -> RecordedSchemaChange:
    m = row._mapping
    return RecordedSchemaChange(
        id=m["id"],
        table_id=m["table_id"],
        key=m["key"],
        version=m["version"],
        change=tuple(m["change"]),
        before=columns_from_json(m["before"]),
        after=columns_from_json(m["after"]),
        source=m["source"],
        state=SchemaChangeState(m["state"]),
        at=_out(m["at"]),
        done_at=_out(m["done_at"]),
    )


def find_change(conn: Connection, table_id: int, key: str) -> RecordedSchemaChange | None:
    c = s.schema_changes.c
    row = conn.execute(sa.select(s.schema_changes).where(c.table_id == table_id, c.key == key)).first()
    return None if row is None else change_from_row(row)


def _locked_columns(conn: Connection, table_id: int) -> tuple[Column, ...]:
    """The table's columns, its row locked until the transaction ends (PostgreSQL; SQLite holds its
    write lock already): no other change of them commits between this read and our update."""
    q = sa.select(s.tables.c.columns).where(s.tables.c.id == table_id)
    value = conn.execute(locking(conn, q)).scalar()
    if value is None:
        raise NotFoundError(f"table #{table_id} does not exist")
    return columns_from_json(value)


def require_columns(conn: Connection, table_id: int, key: str, before: Sequence[Column]) -> None:
    """SchemaConflictError unless the table's columns are ``before`` (what change ``key`` started from)."""
    current = _locked_columns(conn, table_id)
    if current == tuple(before):
        return
    c = s.schema_changes.c
    pending = conn.execute(
        sa.select(c.key).where(
            c.table_id == table_id, c.state == SchemaChangeState.PENDING.value, c.key != key
        )
    ).scalars()
    waiting = ", ".join(pending)
    raise SchemaConflictError(
        f"schema change {key} of table #{table_id} started from the columns ({_text_of(before)}), but the "
        f"table's are ({_text_of(current)}): another change came first; read the table's schema again"
        + (f" (changes still pending: {waiting})" if waiting else "")
    )


def finish_change(
    conn: Connection, table_id: int, key: str, version: int, now: datetime, *, strict: bool = True
) -> RecordedSchemaChange | None:
    """Give the table the columns of its pending schema change ``key``, made at Delta ``version``,
    inside the caller's transaction (see the module's docstring, step 3). Finishing it again at
    the same version returns it as it is.

    ``strict=False``: if the table's columns are not the ones the change started from (an earlier
    change whose commit is in the log has not finished yet), leave it pending and return None
    instead of raising; a group commit does so, to record its chunks all the same.

    Raises:
        SchemaConflictError: the table's columns are not the ones the change started from.
        ConflictError: the change is done already, at another version.
        NotFoundError: no change ``key`` for the table (or no such table).
    """
    change = find_change(conn, table_id, key)
    if change is None:
        raise NotFoundError(f"table #{table_id} has no schema change {key}")
    if change.state is SchemaChangeState.DONE:
        if change.version == version:
            return change
        raise ConflictError(
            f"schema change {key} of table #{table_id} is done already, at version {change.version}, "
            f"not {version}"
        )
    check_transition(change.state, SchemaChangeState.DONE)
    if not strict and _locked_columns(conn, table_id) != change.before:
        return None
    require_columns(conn, table_id, key, change.before)
    conn.execute(
        sa.update(s.tables).where(s.tables.c.id == table_id).values(columns=dump_columns(change.after))
    )
    c = s.schema_changes.c
    row = guarded_update(
        conn,
        s.schema_changes,
        c.id == change.id,
        f"schema change {key} of table #{table_id}",
        [state_in(c.state, [SchemaChangeState.PENDING])],
        {"state": SchemaChangeState.DONE.value, "version": version, "done_at": _db(now)},
    )
    return change_from_row(row)

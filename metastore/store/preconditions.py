"""Conditional updates that say which of their preconditions failed.

Every state change in the metastore is an ``UPDATE … WHERE <key> AND <preconditions>``; zero
rows updated means another process changed the row first. Each :class:`Precondition` carries
the SQL that checks it and the words that explain it, side by side, so the two cannot drift
apart. When an update matches no row, :func:`guarded_update` reads the row again (in the same
transaction) and names the first precondition it no longer meets — "chunk … expired at …Z (its
TTL)", "roll … is held by b until …Z" — the way pyiceberg's ``AssertRefSnapshotId`` says
"expected X, found Y", instead of only the state the row is in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row, RowMapping

from metastore.errors import ConflictError, NotFoundError, StreampartError
from metastore.models import iso


@dataclass(frozen=True)
class Precondition:
    """One thing a conditional update requires of its row.

    Attributes:
        clause: The SQL condition (part of the update's WHERE).
        holds: The same condition, evaluated on the row as read back (times naive UTC).
        failure: What to say of a row that does not meet it, after its subject ("chunk 42").
    """

    clause: sa.ColumnElement[bool]
    holds: Callable[[RowMapping], bool]
    failure: Callable[[RowMapping], str]


def state_in(column: sa.Column[Any], expected: Sequence[StrEnum]) -> Precondition:
    """The row's state is one of ``expected``."""
    values = [e.value for e in expected]
    return Precondition(
        column.in_(values),
        lambda m: m[column.name] in values,
        lambda m: f"is {m[column.name]}, expected {'/'.join(values)}",
    )


def equals(column: sa.Column[Any], value: Any, failure: Callable[[RowMapping], str]) -> Precondition:
    """``column`` still holds ``value`` (an owner, an attempt, an epoch)."""
    return Precondition(column == value, lambda m: m[column.name] == value, failure)


def guarded_update(
    conn: Connection,
    table: sa.Table,
    key: sa.ColumnElement[bool],
    subject: str,
    preconditions: Sequence[Precondition],
    values: Mapping[str, Any],
    *,
    error: type[StreampartError] = ConflictError,
    gone: type[StreampartError] = NotFoundError,
) -> Row[Any]:
    """Update the row at ``key`` if it meets every precondition; the updated row.

    Raises:
        error: a precondition failed; the message names it (``ConflictError`` by default).
        gone: no row has ``key`` (any more).
    """
    q = sa.update(table).where(key, *(p.clause for p in preconditions)).values(**values)
    # UPDATE … RETURNING: the new row in the same round trip (SQLite ≥ 3.35, PostgreSQL)
    row = conn.execute(q.returning(*table.c)).first()
    if row is None:
        raise failed_precondition(conn, table, key, subject, preconditions, error=error, gone=gone)
    return row


def failed_precondition(
    conn: Connection,
    table: sa.Table,
    key: sa.ColumnElement[bool],
    subject: str,
    preconditions: Sequence[Precondition],
    *,
    error: type[StreampartError] = ConflictError,
    gone: type[StreampartError] = NotFoundError,
) -> StreampartError:
    """The error for a conditional update that matched no row: re-read it, name what failed."""
    current = conn.execute(sa.select(table).where(key)).first()
    if current is None:
        return gone(f"{subject} does not exist")
    m = current._mapping
    for p in preconditions:
        if not p.holds(m):
            return error(f"{subject} {p.failure(m)}")
    # On PostgreSQL the row may have changed and changed back between the update and this read.
    return error(f"{subject} changed while we updated it; read it again")


def at(ts: datetime | None) -> str:
    """A stored (naive UTC) time in a message."""
    return "never" if ts is None else iso(ts)

"""The steps every leased piece of work shares (an expiry pass, a delete): its rows have an ``id``, a
``state`` whose last value is ``done``, an ``owner`` and a ``lease_until``. Claimed by whoever holds
it, once its lease lapsed (:func:`metastore.store.rolls.ours_or_lapsed`), or once the process its
owner names stopped renewing its process lease (:func:`metastore.store.leases.holder_gone`: seconds
after a SIGKILL, where the work's own lease may run for minutes), moved one recorded step
at a time by its owner, let go at once when it fails. A roll's steps (``rolls.py``) are the model;
rolls keep their own functions, as their rows join their partition's.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from metastore.errors import ConflictError, NotFoundError
from metastore.models import check_transition
from metastore.store.engine import _db
from metastore.store.preconditions import Precondition, guarded_update, state_in
from metastore.store.rolls import claimable, owned_by, unfinished

T = TypeVar("T")


class Work:
    """One kind of leased work: its table, what a row reads as, its done state, its name in messages."""

    def __init__(self, table: sa.Table, from_row: Callable[[Any], Any], done: StrEnum, what: str) -> None:
        self.table, self.from_row, self.done, self.what = table, from_row, done, what

    def read(self, conn: Connection, work_id: str) -> Any:
        row = conn.execute(sa.select(self.table).where(self.table.c.id == work_id)).first()
        if row is None:
            raise NotFoundError(f"{self.what} {work_id} does not exist")
        return self.from_row(row)

    def update(
        self, conn: Connection, work_id: str, preconditions: list[Precondition], values: dict[str, Any]
    ) -> None:
        c = self.table.c
        guarded_update(
            conn,
            self.table,
            c.id == work_id,
            f"{self.what} {work_id}",
            preconditions,
            values,
            gone=ConflictError,
        )

    def claim(self, conn: Connection, work: Any, owner: str, lease: timedelta, now: datetime) -> Any:
        """Take over (or extend) an unfinished one that is ``owner``'s, whose lease lapsed, or whose
        owner's process is gone (then only while that dead process still owns it: of several
        successors racing, one wins)."""
        whose = claimable(conn, self.table, self.table.c.id == work.id, owner, now)
        self.update(
            conn,
            work.id,
            [unfinished(self.table, self.done.value), whose],
            {"owner": owner, "lease_until": _db(now + lease), "error": None},
        )
        return self.read(conn, work.id)

    def step(
        self, conn: Connection, work: Any, owner: str, values: dict[str, Any], expected: StrEnum | None = None
    ) -> Any:
        """Record a step of one ``owner`` holds, from its recorded state (``expected``: from that one)."""
        if "state" in values:
            check_transition(work.state, type(work.state)(values["state"]))
        now_state = expected if expected is not None else work.state
        self.update(
            conn, work.id, [state_in(self.table.c.state, [now_state]), owned_by(owner, self.table)], values
        )
        return self.read(conn, work.id)

    def release(self, conn: Connection, work: Any, owner: str, error: str | None) -> bool:
        """Let it go at once (its lease ends now), recording why; only by its owner, if unfinished."""
        c = self.table.c
        return bool(
            conn.execute(
                sa.update(self.table)
                .where(c.id == work.id, c.owner == owner, c.state != self.done.value)
                .values(lease_until=None, error=error)
            ).rowcount
        )

    def extend(self, conn: Connection, owner: str, until: datetime) -> int:
        """Extend to ``until`` the lease of every unfinished one ``owner`` holds; how many."""
        c = self.table.c
        return int(
            conn.execute(
                sa.update(self.table)
                .where(c.owner == owner, c.state != self.done.value)
                .values(lease_until=_db(until))
            ).rowcount
        )

    def listed(self, conn: Connection, table_id: int | None, unfinished_only: bool, limit: int) -> list[Any]:
        """The newest first."""
        c = self.table.c
        q = sa.select(self.table)
        if table_id is not None:
            q = q.where(c.table_id == table_id)
        if unfinished_only:
            q = q.where(c.state != self.done.value)
        return [self.from_row(r) for r in conn.execute(q.order_by(c.started_at.desc()).limit(limit)).all()]

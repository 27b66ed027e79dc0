"""Leases: leadership with fencing, through the database (never a local file or process memory).

A lease has one holder until it expires; taking a free or lapsed lease raises its epoch, the
fencing token. A holder's later writes check, in their own transaction, that the lease is
still theirs at that epoch (:func:`check_fence`), so a deposed leader that wakes up late can
change nothing. Failing that check is :class:`~metastore.errors.LeaseLostError`, which names
what happened to the lease: lapsed, released, or taken by another holder.

A process's own lease, ``commit-holder/<host:pid:nonce>``, says it is alive: it keeps it renewed
every second while it has a commit, a delete or an expiry in flight (``ingest/commit_holders.py``).
Work it owns (a chunk's commit attempt, a delete, an expiry pass) names the process, so another
process takes it over once that lease lapsed, :data:`HOLDER_GRACE` later (:func:`holder_gone`),
instead of after the work's own, long lease.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import LeaseLostError
from metastore.models import Lease
from metastore.store.engine import Database, _db, _now, _out
from metastore.store.preconditions import Precondition, at, guarded_update

HOLDER_PREFIX = "commit-holder/"
# Why 2 s: a successor waits this much past the holder's lease (clocks of two hosts may differ a
# little); the holder itself stops writing a second before its lease lapses by its own clock.
HOLDER_GRACE = timedelta(seconds=2)


def process_of(owner: str) -> str:
    """The process (commit holder id) named by the owner of a piece of work: ``<holder>/<nonce>``
    for a delete or an expiry (one process may carry several at once), the holder id itself for a
    chunk's commit attempt."""
    return owner.split("/", 1)[0]


def holder_gone(conn: Connection, owner: str, now: datetime) -> bool:
    """Inside a transaction: whether the process named by ``owner`` is known to have stopped
    (its lease released, or lapsed more than :data:`HOLDER_GRACE` before ``now``). False when it
    keeps no lease (an owner that is no process, such as a daemon renewing the work's own lease):
    then the work's own lease decides."""
    row = conn.execute(
        sa.select(s.leases).where(s.leases.c.name == HOLDER_PREFIX + process_of(owner))
    ).first()
    if row is None:
        return False
    lease = lease_from_row(row)
    return lease.holder is None or lease.expires_at + HOLDER_GRACE < now


def lease_from_row(row: Any) -> Lease:
    m = row._mapping
    return Lease(
        name=m["name"],
        holder=m["holder"],
        epoch=m["epoch"],
        acquired_at=_out(m["acquired_at"]),
        renewed_at=_out(m["renewed_at"]),
        expires_at=_out(m["expires_at"]),
        info=m["info"] or {},
    )


def _passed_on(m: Any) -> str:
    if m["holder"] is None:
        return f"was released (epoch {m['epoch']})"
    return f"is held by {m['holder']} at epoch {m['epoch']}"


def _still_held(lease: Lease, now: datetime) -> list[Precondition]:
    """``lease`` is still its holder's, at its epoch, and has not lapsed."""
    c = s.leases.c
    return [
        Precondition(
            sa.and_(c.holder == lease.holder, c.epoch == lease.epoch),
            lambda m: m["holder"] == lease.holder and m["epoch"] == lease.epoch,
            _passed_on,
        ),
        Precondition(
            c.expires_at > _db(now),
            lambda m: m["expires_at"] > _db(now),
            lambda m: f"lapsed at {at(m['expires_at'])}",
        ),
    ]


def _held(conn: Connection, lease: Lease, now: datetime, values: dict[str, Any]) -> Any:
    """Update ``lease``'s row while it is still held; LeaseLostError names what became of it."""
    return guarded_update(
        conn,
        s.leases,
        s.leases.c.name == lease.name,
        f"lease {lease.name} (epoch {lease.epoch} of {lease.holder})",
        _still_held(lease, now),
        values,
        error=LeaseLostError,
        gone=LeaseLostError,
    )


def check_fence(conn: Connection, fence: Lease, now: datetime) -> None:
    """Inside a transaction: fail unless ``fence`` is still held, live, at its epoch.

    A conditional no-op update rather than a read: on PostgreSQL it also locks the lease
    row until the transaction ends, so no other process can take the lease over between
    this check and the caller's own writes (on SQLite the write lock does the same).

    Raises:
        LeaseLostError: a newer leader (or none) has it.
    """
    _held(conn, fence, now, {"epoch": s.leases.c.epoch})


class LeaseStore(Database):
    """Leases (leadership with fencing)."""

    def get_lease(self, name: str) -> Lease | None:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).first()
        return None if row is None else lease_from_row(row)

    def acquire_lease(
        self,
        name: str,
        holder: str,
        ttl: timedelta,
        *,
        info: dict[str, Any] | None = None,
        now: datetime | None = None,
    ) -> Lease | None:
        """Take the lease ``name`` if it is free, lapsed or already ours; ``None`` if another holds it.

        Taking a free or lapsed lease raises its epoch by one (the new fencing token); extending
        our own live lease keeps the epoch. Both are compare-and-swaps on the epoch read, so of
        several processes racing for a lapsed lease exactly one wins.
        """
        now = now or _now()
        values = {"renewed_at": _db(now), "expires_at": _db(now + ttl), "info": info or {}}
        try:
            with self.tx() as conn:
                row = conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).first()
                if row is None:
                    conn.execute(
                        sa.insert(s.leases).values(
                            name=name, holder=holder, epoch=1, acquired_at=_db(now), **values
                        )
                    )
                    return lease_from_row(
                        conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).one()
                    )
                current = lease_from_row(row)
                same = s.leases.c.name == name, s.leases.c.epoch == current.epoch
                if current.holder == holder and current.live(now):
                    q = sa.update(s.leases).where(*same, s.leases.c.holder == holder).values(**values)
                elif not current.live(now):
                    q = (
                        sa.update(s.leases)
                        .where(
                            *same,
                            sa.or_(s.leases.c.holder.is_(None), s.leases.c.expires_at <= _db(now)),
                        )
                        .values(holder=holder, epoch=current.epoch + 1, acquired_at=_db(now), **values)
                    )
                else:
                    return None
                if conn.execute(q).rowcount != 1:
                    return None  # another contender moved the lease first
                return lease_from_row(conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).one())
        except IntegrityError:
            return None  # another contender created the lease row first

    def renew_lease(self, lease: Lease, ttl: timedelta, now: datetime | None = None) -> Lease:
        """Extend a lease we hold, before it expires; the epoch stays.

        Raises:
            LeaseLostError: it expired, or another holder has it (a higher epoch).
        """
        now = now or _now()
        with self.tx() as conn:
            row = _held(conn, lease, now, {"renewed_at": _db(now), "expires_at": _db(now + ttl)})
        return lease_from_row(row)

    def delete_lapsed_leases(self, prefix: str, before: datetime) -> int:
        """Delete the leases named ``prefix…`` that lapsed before ``before`` (one per process that
        ever held one, such as commit holders: they would pile up). Returns how many went."""
        c = s.leases.c
        with self.tx() as conn:
            return int(
                conn.execute(
                    sa.delete(s.leases).where(
                        c.name.startswith(prefix, autoescape=True), c.expires_at < _db(before)
                    )
                ).rowcount
            )

    def release_lease(self, lease: Lease, now: datetime | None = None) -> bool:
        """Give a lease up at once (e.g. at shutdown) so another process may take it without waiting."""
        now = now or _now()
        with self.tx() as conn:
            return bool(
                conn.execute(
                    sa.update(s.leases)
                    .where(
                        s.leases.c.name == lease.name,
                        s.leases.c.holder == lease.holder,
                        s.leases.c.epoch == lease.epoch,
                    )
                    .values(holder=None, expires_at=_db(now))
                ).rowcount
            )

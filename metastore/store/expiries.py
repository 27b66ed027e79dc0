"""Expiry passes (issue 30): PENDING → COMMITTED → DONE, one per table and pass, owned by one expirer
at a time under a renewable lease, as a roll is (``rolls.py``; scheduler/expiry.py carries them).

``begin_expiry`` moves the due partitions STANDARD → EXPIRING and records the pass in one
transaction (under the daemon's ``fence``, as ``begin_roll``); ``finish_expiry`` makes them EXPIRED
and the pass DONE in another. An EXPIRING or EXPIRED partition keeps its row: its period stays
sealed, so a late row for it is late (group commit's plan), never a new partition. A partition
with a copy in flight to a secondary is left for the next pass. ``reclaimable`` and
``mark_reclaimed`` are housekeeping's: the files of an expired partition are deleted once no Delta
version time travel still promises lists them.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from metastore import schema as s
from metastore.errors import ConflictError, NotFoundError
from metastore.models import Expiry, ExpiryState, Lease, Partition, PartitionState, Table, check_transition
from metastore.replicas import CopyState
from metastore.store.engine import Database, _db, _now, _out
from metastore.store.leases import check_fence
from metastore.store.namespaces import fence_table
from metastore.store.preconditions import guarded_update, state_in
from metastore.store.rolls import ours_or_lapsed, owned_by, unfinished
from metastore.store.tables import partition_from_row, table_from_row


def expiry_from_row(row: Any) -> Expiry:
    m = row._mapping
    return Expiry(
        id=m["id"],
        table_id=m["table_id"],
        state=ExpiryState(m["state"]),
        partitions=tuple(datetime.fromisoformat(v) for v in m["partitions"]),
        started_at=_out(m["started_at"]),
        finished_at=_out(m["finished_at"]),
        owner=m["owner"],
        lease_until=_out(m["lease_until"]),
        commit_version=m["commit_version"],
        rows=m["rows"],
        bytes=m["bytes"],
        files=m["files"],
        error=m["error"],
    )


def _read(conn: Connection, expiry_id: str) -> Expiry:
    row = conn.execute(sa.select(s.expiries).where(s.expiries.c.id == expiry_id)).first()
    if row is None:
        raise NotFoundError(f"expiry {expiry_id} does not exist")
    return expiry_from_row(row)


def _update(conn: Connection, expiry: Expiry, preconditions: list[Any], values: dict[str, Any]) -> None:
    guarded_update(
        conn,
        s.expiries,
        s.expiries.c.id == expiry.id,
        f"expiry {expiry.id}",
        preconditions,
        values,
        gone=ConflictError,
    )


def extend_expiry_leases(conn: Connection, owner: str, until: datetime) -> int:
    """Inside a transaction: extend the lease of every unfinished expiry ``owner`` holds."""
    e = s.expiries.c
    return int(
        conn.execute(
            sa.update(s.expiries)
            .where(e.owner == owner, e.state != ExpiryState.DONE.value)
            .values(lease_until=_db(until))
        ).rowcount
    )


class ExpiryStore(Database):
    """Retention settings, expiry passes and the reclaiming of expired partitions' files."""

    def set_retain(self, table_id: int, retain: timedelta | None) -> Table:
        """Set how long the table keeps a standard partition after its period ends (None: its
        namespace's default; ``timedelta(0)``: for ever); the table as it is now."""
        t = s.tables.c
        value = None if retain is None else int(retain.total_seconds())
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            conn.execute(sa.update(s.tables).where(t.id == table_id).values(retain_s=value))
            return table_from_row(conn.execute(sa.select(s.tables).where(t.id == table_id)).one(), self.name)

    def begin_expiry(
        self,
        table_id: int,
        partitions: Sequence[Partition],
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
        fence: Lease | None = None,
    ) -> Expiry | None:
        """Move the standard ``partitions`` that are not being copied to EXPIRING and record the
        pass, in one transaction; None when none of them could be taken (another expirer has them).

        Raises:
            LeaseLostError: ``fence`` is no longer held.
        """
        if not partitions:
            return None
        now = now or _now()
        expiry_id = str(uuid.uuid4())
        p, c = s.partitions.c, s.partition_copies.c
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            fence_table(conn, table_id, self.label)
            copying = {
                r.partition_id
                for r in conn.execute(
                    sa.select(c.partition_id).where(
                        c.partition_id.in_([x.id for x in partitions]), c.state == CopyState.COPYING.value
                    )
                )
            }
            taken = []
            for partition in partitions:
                if partition.id in copying:
                    continue  # a copy to a secondary in flight: next pass
                check_transition(partition.state, PartitionState.EXPIRING)
                moved = conn.execute(
                    sa.update(s.partitions)
                    .where(p.id == partition.id, p.state == PartitionState.STANDARD.value)
                    .values(state=PartitionState.EXPIRING.value)
                ).rowcount
                if moved:
                    taken.append(partition.value)
            if not taken:
                return None
            conn.execute(
                sa.insert(s.expiries).values(
                    id=expiry_id,
                    table_id=table_id,
                    state=ExpiryState.PENDING.value,
                    partitions=[v.isoformat() for v in sorted(taken)],
                    started_at=_db(now),
                    owner=owner,
                    lease_until=_db(now + lease),
                )
            )
            return _read(conn, expiry_id)

    def claim_expiry(
        self,
        expiry: Expiry,
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
        fence: Lease | None = None,
    ) -> Expiry:
        """Take over (or extend) an unfinished expiry that is ours or whose lease lapsed.

        Raises:
            ConflictError: another live owner holds it, or it is done.
            LeaseLostError: ``fence`` is no longer held.
        """
        now = now or _now()
        done = ExpiryState.DONE.value
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            fence_table(conn, expiry.table_id, self.label)
            _update(
                conn,
                expiry,
                [unfinished(s.expiries, done), ours_or_lapsed(owner, now, s.expiries)],
                {"owner": owner, "lease_until": _db(now + lease), "error": None},
            )
            return _read(conn, expiry.id)

    def record_expiry(self, expiry: Expiry, owner: str, **values: Any) -> Expiry:
        """Record a step of an expiry we own (``state`` COMMITTED with its ``commit_version``,
        ``rows``, ``bytes``, ``files``)."""
        if "state" in values:
            check_transition(expiry.state, ExpiryState(values["state"]))
        with self.tx() as conn:
            fence_table(conn, expiry.table_id, self.label)
            _update(
                conn,
                expiry,
                [state_in(s.expiries.c.state, [expiry.state]), owned_by(owner, s.expiries)],
                values,
            )
            return _read(conn, expiry.id)

    def finish_expiry(self, expiry: Expiry, owner: str, now: datetime | None = None) -> Expiry:
        """Its partitions EXPIRED (at its commit's version) and the pass DONE, in one transaction."""
        now = now or _now()
        check_transition(expiry.state, ExpiryState.DONE)
        p = s.partitions.c
        with self.tx() as conn:
            fence_table(conn, expiry.table_id, self.label)
            _update(
                conn,
                expiry,
                [state_in(s.expiries.c.state, [ExpiryState.COMMITTED]), owned_by(owner, s.expiries)],
                {"state": ExpiryState.DONE.value, "finished_at": _db(now), "error": None},
            )
            conn.execute(
                sa.update(s.partitions)
                .where(
                    p.table_id == expiry.table_id,
                    p.value.in_([_db(v) for v in expiry.partitions]),
                    p.state == PartitionState.EXPIRING.value,
                )
                .values(
                    state=PartitionState.EXPIRED.value,
                    expired_at=_db(now),
                    expired_version=expiry.commit_version,
                )
            )
            return _read(conn, expiry.id)

    def expire_copies(self, table_id: int, cluster: str, values: Sequence[datetime]) -> int:
        """The copies on ``cluster`` of the table's partitions ``values`` whose files are in the
        secondary's log (present or stale) become EXPIRED (those files left it); how many."""
        c, p = s.partition_copies.c, s.partitions.c
        ids = sa.select(p.id).where(p.table_id == table_id, p.value.in_([_db(v) for v in values]))
        with self.tx() as conn:
            return int(
                conn.execute(
                    sa.update(s.partition_copies)
                    .where(
                        c.partition_id.in_(ids),
                        c.cluster == cluster,
                        c.state.in_([CopyState.PRESENT.value, CopyState.STALE.value]),
                    )
                    .values(state=CopyState.EXPIRED.value, lease_until=None)
                ).rowcount
            )

    def release_expiry(self, expiry: Expiry, owner: str, error: str | None = None) -> bool:
        """Let a failed expiry go at once (its lease ends now), recording why; only by its owner."""
        e = s.expiries.c
        with self.tx() as conn:
            return bool(
                conn.execute(
                    sa.update(s.expiries)
                    .where(e.id == expiry.id, e.owner == owner, e.state != ExpiryState.DONE.value)
                    .values(lease_until=None, error=error)
                ).rowcount
            )

    def list_expiries(
        self, table_id: int | None = None, unfinished: bool = False, limit: int = 100
    ) -> list[Expiry]:
        """The newest first."""
        e = s.expiries.c
        q = sa.select(s.expiries)
        if table_id is not None:
            q = q.where(e.table_id == table_id)
        if unfinished:
            q = q.where(e.state != ExpiryState.DONE.value)
        with self.read_tx() as conn:
            rows = conn.execute(q.order_by(e.started_at.desc()).limit(limit)).all()
        return [expiry_from_row(r) for r in rows]

    # -- housekeeping: the files of expired partitions ---------------------------------------
    def reclaimable(self, table_id: int, oldest_readable: int) -> list[Partition]:
        """Expired partitions whose files no version from ``oldest_readable`` on lists, not deleted yet."""
        p = s.partitions.c
        q = sa.select(s.partitions).where(
            p.table_id == table_id,
            p.state == PartitionState.EXPIRED.value,
            p.reclaimed_at.is_(None),
            p.expired_version <= oldest_readable,
        )
        with self.read_tx() as conn:
            return [partition_from_row(r) for r in conn.execute(q.order_by(p.value)).all()]

    def mark_reclaimed(self, partition: Partition, now: datetime | None = None) -> None:
        p = s.partitions.c
        with self.tx() as conn:
            conn.execute(
                sa.update(s.partitions)
                .where(p.id == partition.id, p.state == PartitionState.EXPIRED.value)
                .values(reclaimed_at=_db(now or _now()))
            )

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
from metastore.models import Expiry, ExpiryState, Lease, Partition, PartitionState, Table, check_transition
from metastore.replicas import CopyState
from metastore.store.engine import Database, _db, _now, _out, locking
from metastore.store.leased import Work
from metastore.store.leases import check_fence
from metastore.store.namespaces import fence_table
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


_WORK = Work(s.expiries, expiry_from_row, ExpiryState.DONE, "expiry")


def extend_expiry_leases(conn: Connection, owner: str, until: datetime) -> int:
    """Inside a transaction: extend the lease of every unfinished expiry ``owner`` holds."""
    return _WORK.extend(conn, owner, until)


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
            # the partitions locked first: a copy claimed meanwhile (it holds its partition FOR
            # SHARE) commits before the copies are read, so it is seen copying below; else the
            # partition expired under a copy that then became present, and the secondary kept the
            # expired rows. In value order, as a rewrite updates them (record_rewritten): else each
            # could hold one partition the other waits for
            held = sa.select(p.id).where(p.id.in_([x.id for x in partitions])).order_by(p.value)
            conn.execute(locking(conn, held, no_key=True)).all()
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
            return _WORK.read(conn, expiry_id)

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
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            fence_table(conn, expiry.table_id, self.label)
            return _WORK.claim(conn, expiry, owner, lease, now)

    def record_expiry(self, expiry: Expiry, owner: str, **values: Any) -> Expiry:
        """Record a step of an expiry we own (``state`` COMMITTED with its ``commit_version``,
        ``rows``, ``bytes``, ``files``)."""
        with self.tx() as conn:
            fence_table(conn, expiry.table_id, self.label)
            return _WORK.step(conn, expiry, owner, values)

    def finish_expiry(self, expiry: Expiry, owner: str, now: datetime | None = None) -> Expiry:
        """Its partitions EXPIRED (at its commit's version) and the pass DONE, in one transaction."""
        now = now or _now()
        p = s.partitions.c
        with self.tx() as conn:
            fence_table(conn, expiry.table_id, self.label)
            done = {"state": ExpiryState.DONE.value, "finished_at": _db(now), "error": None}
            _WORK.step(conn, expiry, owner, done, expected=ExpiryState.COMMITTED)
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
            return _WORK.read(conn, expiry.id)

    def expire_copies(self, table_id: int, cluster: str, values: Sequence[datetime]) -> int:
        """The copies on ``cluster`` of the table's partitions ``values`` whose files are in the
        secondary's log (present or stale) become EXPIRED (those files left it); how many."""
        c, p = s.partition_copies.c, s.partitions.c
        ids = sa.select(p.id).where(p.table_id == table_id, p.value.in_([_db(v) for v in values]))
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)  # not while its namespace moves
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
        with self.tx() as conn:
            return _WORK.release(conn, expiry, owner, error)

    def list_expiries(
        self, table_id: int | None = None, unfinished: bool = False, limit: int = 100
    ) -> list[Expiry]:
        """The newest first."""
        with self.read_tx() as conn:
            return _WORK.listed(conn, table_id, unfinished, limit)

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

"""Replicas: a table's secondary clusters, and each standard partition's copy on them.

A copy is claimed under a lease (``claim_copy``), like a roll: one copier at a time, another
takes over once the lease lapses, and with a ``fence`` (the roll daemon's leadership) only
while that is held. It becomes ``present`` (``finish_copy``) only after its files were copied,
verified and committed to the secondary's Delta log; a failed attempt is let go at once with
its error and the time it may be tried again (``release_copy``).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, ConflictError, NotFoundError
from metastore.models import Lease, Partition, PartitionState, iso
from metastore.replicas import CopyState, PartitionCopy, Replica
from metastore.store.engine import Database, _db, _now, _out, locking
from metastore.store.leases import check_fence
from metastore.store.namespaces import fence_table
from metastore.store.preconditions import Precondition, at, guarded_update, state_in
from metastore.store.rolls import claimable


def _partition_held(conn: Connection, partition_id: int) -> tuple[str, int] | None:
    """The partition's state and generation, read so that a rewrite cannot slip past what the caller
    records next (a copy claimed at, or made present at, this generation).

    A rewrite (:func:`metastore.store.rewrites.record_rewritten`) bumps the generation and marks
    the present copies stale in one transaction. Under PostgreSQL's READ COMMITTED a copier's plain
    read of the old generation could precede that transaction's commit and the copier's own update
    follow its stale-marking, so a copy of the replaced files was recorded present (a secondary
    kept deleted rows). ``FOR SHARE`` on the partition's row orders the two: the rewrite's update of
    that row waits for the copier's transaction, or the copier's read waits for the rewrite's and
    sees the new generation. SQLite runs one writing transaction at a time (``BEGIN IMMEDIATE``)."""
    p = s.partitions.c
    row = conn.execute(
        locking(conn, sa.select(p.state, p.generation).where(p.id == partition_id), share=True)
    ).one_or_none()
    return None if row is None else (row[0], row[1] or 0)


def replica_from_row(row: Any) -> Replica:
    m = row._mapping
    return Replica(
        table_id=m["table_id"], cluster=m["cluster"], location=m["location"], added_at=_out(m["added_at"])
    )


def copy_from_row(row: Any) -> PartitionCopy:
    m = row._mapping
    return PartitionCopy(
        table_id=m["table_id"],
        partition_id=m["partition_id"],
        partition_value=_out(m["value"]),
        cluster=m["cluster"],
        state=CopyState(m["state"]),
        owner=m["owner"],
        lease_until=_out(m["lease_until"]),
        attempts=m["attempts"],
        error=m["error"],
        retry_at=_out(m["retry_at"]),
        files=m["files"],
        bytes=m["bytes"],
        checksum=m["checksum"],
        delta_version=m["delta_version"],
        started_at=_out(m["started_at"]),
        copied_at=_out(m["copied_at"]),
        file_digests=m["file_digests"],
        verified_at=_out(m["verified_at"]),
        generation=m["generation"],
    )


def _copy_query() -> sa.Select[Any]:
    """Copies with the value of their partition."""
    c = s.partition_copies.c
    return sa.select(s.partition_copies, s.partitions.c.value).join(
        s.partitions, s.partitions.c.id == c.partition_id
    )


def _copy_key(partition_id: int, cluster: str) -> sa.ColumnElement[bool]:
    c = s.partition_copies.c
    return sa.and_(c.partition_id == partition_id, c.cluster == cluster)


def _read_copy(conn: Connection, partition_id: int, cluster: str) -> PartitionCopy:
    row = conn.execute(_copy_query().where(_copy_key(partition_id, cluster))).first()
    if row is None:
        raise ConflictError(
            f"the copy of partition #{partition_id} on {cluster} is gone (its replica was dropped)"
        )
    return copy_from_row(row)


def _subject(copy: PartitionCopy) -> str:
    return f"the copy of partition {iso(copy.partition_value)} on {copy.cluster}"


def _ours_or_lapsed(owner: str, now: datetime) -> Precondition:
    c = s.partition_copies.c
    return Precondition(
        sa.or_(c.owner == owner, c.owner.is_(None), c.lease_until.is_(None), c.lease_until < _db(now)),
        lambda m: m["owner"] in (owner, None) or m["lease_until"] is None or m["lease_until"] < _db(now),
        lambda m: f"is being copied by {m['owner']} (lease until {at(m['lease_until'])})",
    )


def _owned_by(owner: str) -> Precondition:
    c = s.partition_copies.c
    return Precondition(
        c.owner == owner,
        lambda m: m["owner"] == owner,
        lambda m: f"is being copied by {m['owner']}, not {owner}",
    )


_COPYING = state_in(s.partition_copies.c.state, [CopyState.COPYING])
_CLAIMABLE = state_in(s.partition_copies.c.state, [CopyState.COPYING, CopyState.STALE])


def extend_copy_leases(conn: Connection, owner: str, now: datetime, until: datetime) -> int:
    """Inside a transaction: extend to ``until`` the lease of every copy ``owner`` still holds at
    ``now`` (one it let go, failed or released, stays free for another copier); returns how many."""
    c = s.partition_copies.c
    return int(
        conn.execute(
            sa.update(s.partition_copies)
            .where(c.owner == owner, c.state == CopyState.COPYING.value, c.lease_until > _db(now))
            .values(lease_until=_db(until))
        ).rowcount
    )


class ReplicaStore(Database):
    """Replicas and partition copies."""

    # -- replicas ----------------------------------------------------------------------------
    def add_replica(self, table_id: int, cluster: str, location: str, now: datetime | None = None) -> Replica:
        """Record ``cluster`` as a secondary of the table (the catalog has checked it may be one)."""
        try:
            with self.tx() as conn:
                fence_table(conn, table_id, self.label)  # not while its namespace moves
                conn.execute(
                    sa.insert(s.replicas).values(
                        table_id=table_id, cluster=cluster, location=location, added_at=_db(now or _now())
                    )
                )
        except IntegrityError:
            raise AlreadyExistsError(f"the table replicates to {cluster} already") from None
        return self.get_replica(table_id, cluster)

    def get_replica(self, table_id: int, cluster: str) -> Replica:
        r = s.replicas.c
        with self.read_tx() as conn:
            row = conn.execute(
                sa.select(s.replicas).where(r.table_id == table_id, r.cluster == cluster)
            ).first()
        if row is None:
            raise NotFoundError(f"table #{table_id} has no replica on {cluster}")
        return replica_from_row(row)

    def list_replicas(self, table_id: int | None = None) -> list[Replica]:
        """The replicas of a table (of every table: ``None``), by table and cluster."""
        r = s.replicas.c
        q = sa.select(s.replicas).order_by(r.table_id, r.cluster)
        if table_id is not None:
            q = q.where(r.table_id == table_id)
        with self.read_tx() as conn:
            return [replica_from_row(row) for row in conn.execute(q).all()]

    def tables_replicated_on(self, cluster: str) -> list[str]:
        """The tables with a replica on ``cluster``."""
        t, r = s.tables.c, s.replicas.c
        q = (
            sa.select(t.namespace, t.name)
            .join(s.replicas, r.table_id == t.id)
            .where(r.cluster == cluster)
            .order_by(t.namespace, t.name)
        )
        with self.read_tx() as conn:
            return [f"{ns}.{name}" for ns, name in conn.execute(q).all()]

    def remove_replica(self, table_id: int, cluster: str) -> Replica:
        """Forget a replica and every copy on it, in one transaction; returns what it was."""
        r, c = s.replicas.c, s.partition_copies.c
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)  # not while its namespace moves
            # locked: a copy claimed meanwhile waits, then finds the replica gone (else its copy
            # outlived the replica, recorded present on a secondary that no longer has it)
            row = conn.execute(
                locking(conn, sa.select(s.replicas).where(r.table_id == table_id, r.cluster == cluster))
            ).first()
            if row is None:
                raise NotFoundError(f"table #{table_id} has no replica on {cluster}")
            conn.execute(sa.delete(s.partition_copies).where(c.table_id == table_id, c.cluster == cluster))
            conn.execute(sa.delete(s.replicas).where(r.table_id == table_id, r.cluster == cluster))
        return replica_from_row(row)

    # -- copies ------------------------------------------------------------------------------
    def list_copies(
        self, table_id: int, cluster: str | None = None, state: CopyState | None = None
    ) -> list[PartitionCopy]:
        """A table's partition copies (on one cluster, in one state), by partition and cluster."""
        c = s.partition_copies.c
        q = _copy_query().where(c.table_id == table_id)
        if cluster is not None:
            q = q.where(c.cluster == cluster)
        if state is not None:
            q = q.where(c.state == state.value)
        with self.read_tx() as conn:
            rows = conn.execute(q.order_by(s.partitions.c.value, c.cluster)).all()
        return [copy_from_row(row) for row in rows]

    def present_values(self, table_id: int, cluster: str) -> set[datetime]:
        """The partition values wholly present on the secondary ``cluster``: copies recorded present
        at their partition's current generation (a copy of files a rewrite replaced never counts,
        even if something left it marked present)."""
        c, p = s.partition_copies.c, s.partitions.c
        q = _copy_query().where(
            c.table_id == table_id,
            c.cluster == cluster,
            c.state == CopyState.PRESENT.value,
            sa.func.coalesce(c.generation, 0) == sa.func.coalesce(p.generation, 0),
        )
        with self.read_tx() as conn:
            return {copy_from_row(row).partition_value for row in conn.execute(q).all()}

    def claim_copy(
        self,
        partition: Partition,
        cluster: str,
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
        fence: Lease | None = None,
        renewing: PartitionCopy | None = None,
    ) -> PartitionCopy:
        """Take (or extend) the copy of a standard partition to a secondary, under a lease.

        ``renewing``: the claim being extended mid-copy; it keeps the partition's generation it was
        taken at, and is refused if a delete rewrote the partition since (the files being copied
        may be the ones it replaced).

        Raises:
            ConflictError: the copy is present already, another live owner holds it, the
                partition is not standard, the replica was dropped, or (``renewing``) a delete
                rewrote the partition since the claim was taken.
            LeaseLostError: ``fence`` (if given) is no longer held.
        """
        now = now or _now()
        try:
            return self._claim_copy(partition, cluster, owner, lease, now, fence, renewing)
        except IntegrityError:  # another copier recorded it first, in between: claim it as any other
            return self._claim_copy(partition, cluster, owner, lease, now, fence, renewing)

    def _claim_copy(
        self,
        partition: Partition,
        cluster: str,
        owner: str,
        lease: timedelta,
        now: datetime,
        fence: Lease | None,
        renewing: PartitionCopy | None,
    ) -> PartitionCopy:
        c = s.partition_copies.c
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            fence_table(conn, partition.table_id, self.label)  # not while its namespace moves
            # Rows locked in one order everywhere: the replica's, then the partition's, then the
            # copy's (drop_table and remove_replica take the replica's first too; a rewrite and an
            # expiry take partitions only), so no two of them can each wait for the other.
            replica = conn.execute(  # held: not removed under the claim (remove_replica)
                locking(
                    conn,
                    sa.select(s.replicas.c.cluster).where(
                        s.replicas.c.table_id == partition.table_id, s.replicas.c.cluster == cluster
                    ),
                    share=True,
                )
            ).first()
            state, generation = _partition_held(conn, partition.id) or (None, 0)
            if state != PartitionState.STANDARD.value:
                raise ConflictError(
                    f"partition {iso(partition.value)} is {state or 'gone'}; "
                    "only standard partitions are copied"
                )
            if replica is None:
                raise ConflictError(f"table #{partition.table_id} has no replica on {cluster} (any more)")
            if renewing is not None and (generation or 0) != (renewing.generation or 0):
                raise ConflictError(
                    f"{_subject(renewing)}: a delete rewrote the partition while it was copied "
                    f"(generation {renewing.generation or 0}, now {generation}); it is copied again"
                )
            values = {"owner": owner, "lease_until": _db(now + lease), "generation": generation}
            key = _copy_key(partition.id, cluster)
            if conn.execute(sa.select(c.state).where(key)).first() is None:
                conn.execute(
                    sa.insert(s.partition_copies).values(
                        partition_id=partition.id,
                        cluster=cluster,
                        table_id=partition.table_id,
                        state=CopyState.COPYING.value,
                        attempts=0,
                        started_at=_db(now),
                        **values,
                    )
                )
            else:
                guarded_update(
                    conn,
                    s.partition_copies,
                    key,
                    f"the copy of partition {iso(partition.value)} on {cluster}",
                    [
                        _CLAIMABLE,
                        claimable(conn, s.partition_copies, key, owner, now, _ours_or_lapsed(owner, now)),
                    ],
                    {**values, "state": CopyState.COPYING.value},
                    gone=ConflictError,
                )
            return _read_copy(conn, partition.id, cluster)

    def finish_copy(
        self,
        copy: PartitionCopy,
        owner: str,
        *,
        files: int,
        bytes: int,
        checksum: str,
        delta_version: int,
        file_digests: dict[str, str] | None = None,
        now: datetime | None = None,
    ) -> PartitionCopy:
        """The copy is present: verified and committed to the secondary's Delta log.

        ``file_digests``: each file's SHA-256 as verified (path → hex), kept for check and scrub.
        """
        now = now or _now()
        with self.tx() as conn:
            fence_table(conn, copy.table_id, self.label)  # not while its namespace moves
            _, generation = _partition_held(conn, copy.partition_id) or (None, 0)
            if (generation or 0) != (copy.generation or 0):
                raise ConflictError(
                    f"{_subject(copy)}: a delete rewrote the partition while it was copied (generation "
                    f"{copy.generation or 0}, now {generation}); it is copied again"
                )
            guarded_update(
                conn,
                s.partition_copies,
                _copy_key(copy.partition_id, copy.cluster),
                _subject(copy),
                [_COPYING, _owned_by(owner)],
                {
                    "state": CopyState.PRESENT.value,
                    "lease_until": None,
                    "error": None,
                    "retry_at": None,
                    "files": files,
                    "bytes": bytes,
                    "checksum": checksum,
                    "delta_version": delta_version,
                    "copied_at": _db(now),
                    "file_digests": file_digests,
                    "verified_at": _db(now),
                },
                gone=ConflictError,
            )
            return _read_copy(conn, copy.partition_id, copy.cluster)

    def copies_to_verify(self, table_id: int, verified_before: datetime, limit: int) -> list[PartitionCopy]:
        """Present copies of the table not verified since ``verified_before``, least recently first."""
        c = s.partition_copies.c
        q = (
            _copy_query()
            .where(
                c.table_id == table_id,
                c.state == CopyState.PRESENT.value,
                sa.or_(c.verified_at.is_(None), c.verified_at < _db(verified_before)),
            )
            .order_by(c.verified_at.is_not(None), c.verified_at, c.partition_id)
            .limit(limit)
        )
        with self.read_tx() as conn:
            return [copy_from_row(r) for r in conn.execute(q).all()]

    def copy_verified(
        self, copy: PartitionCopy, file_digests: dict[str, str], now: datetime | None = None
    ) -> bool:
        """Record that a present copy's files were found to match ``file_digests`` just now."""
        return self._update_present(copy, file_digests=file_digests, verified_at=_db(now or _now()))

    def invalidate_copy(self, copy: PartitionCopy, error: str, now: datetime | None = None) -> bool:
        """A present copy whose files no longer match what was verified is present no more.

        PRESENT → COPYING, unowned and free to claim at once: queries stop reading the partition
        there (they read present copies only), and the next copy pass copies it again, replacing
        the files that differ from the source. Returns whether it was present.
        """
        return self._update_present(
            copy,
            state=CopyState.COPYING.value,
            owner=None,
            lease_until=_db(now or _now()),
            error=error,
            retry_at=None,
            verified_at=None,
        )

    def _update_present(self, copy: PartitionCopy, **values: Any) -> bool:
        """Set ``values`` on ``copy`` if it is still PRESENT (a conditional update); whether it was."""
        c = s.partition_copies.c
        with self.tx() as conn:
            return bool(
                conn.execute(
                    sa.update(s.partition_copies)
                    .where(_copy_key(copy.partition_id, copy.cluster), c.state == CopyState.PRESENT.value)
                    .values(**values)
                ).rowcount
            )

    def release_copy(
        self,
        copy: PartitionCopy,
        owner: str,
        error: str | None = None,
        retry_at: datetime | None = None,
        now: datetime | None = None,
    ) -> bool:
        """Let a copy go at once (its lease ends now); with ``error``, a failed attempt is counted.

        Returns:
            Whether it was still ours to release.
        """
        now = now or _now()
        c = s.partition_copies.c
        values: dict[str, Any] = {"lease_until": _db(now)}
        if error is not None:
            values |= {"error": error, "retry_at": _db(retry_at), "attempts": c.attempts + 1}
        with self.tx() as conn:
            return bool(
                conn.execute(
                    sa.update(s.partition_copies)
                    .where(
                        _copy_key(copy.partition_id, copy.cluster),
                        c.owner == owner,
                        c.state == CopyState.COPYING.value,
                    )
                    .values(**values)
                ).rowcount
            )

    def release_copies(self, owner: str, now: datetime | None = None) -> int:
        """End the lease of every unfinished copy ``owner`` holds (a clean shutdown), so another
        copier may resume it now; returns how many."""
        now = now or _now()
        c = s.partition_copies.c
        with self.tx() as conn:
            return int(
                conn.execute(
                    sa.update(s.partition_copies)
                    .where(c.owner == owner, c.state == CopyState.COPYING.value)
                    .values(lease_until=_db(now))
                ).rowcount
            )

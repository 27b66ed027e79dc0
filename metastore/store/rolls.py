"""Rolls: SEALING → SWEEPING → DONE, owned by one roller at a time under a renewable lease.

``begin_roll`` closes a streaming partition (STREAMING → ROLLING) and, in arrival mode, opens
the next one in the same transaction, so writers always find one open; ``finish_roll`` makes
the partition standard and the roll done, again in one transaction. Between them the owner
moves the roll step by step, each step guarded by the state it expects and by its ownership;
a roller that stopped heartbeating loses the roll to any other once its lease lapses. With a
``fence`` (the roll daemon's leadership lease, see ``leases.py``), a step happens only while
that lease is still held, checked in the step's own transaction. Every step refuses while the
table's namespace is fenced by a move (NamespaceMovingError; see ``namespaces.py``): the roll
then resumes from the namespace's new metastore, where the move copied it.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from metastore import schema as s
from metastore.errors import ConflictError, NotFoundError
from metastore.models import Lease, Partition, PartitionState, Roll, RollState, check_transition
from metastore.store.engine import Database, _db, _now, _out
from metastore.store.leases import check_fence, holder_gone
from metastore.store.namespaces import fence_table
from metastore.store.preconditions import Precondition, at, guarded_update, state_in
from metastore.store.rewrites import record_rewritten
from metastore.store.tables import insert_partition, partition_subject


def roll_from_row(row: Any) -> Roll:
    m = row._mapping
    return Roll(
        id=m["id"],
        table_id=m["table_id"],
        partition_id=m["partition_id"],
        partition_value=_out(m["value"]),
        state=RollState(m["state"]),
        started_at=_out(m["started_at"]),
        finished_at=_out(m["finished_at"]),
        owner=m["owner"],
        lease_until=_out(m["lease_until"]),
        seal_version=m["seal_version"],
        sweep_version=m["sweep_version"],
        files_before=m["files_before"],
        files_after=m["files_after"],
        rows=m["rows"],
        bytes=m["bytes"],
        error=m["error"],
        removed_files=tuple(m["removed_files"] or ()),
        reclaimed_at=_out(m["reclaimed_at"]),
    )


def _roll_query() -> sa.Select[Any]:
    """Rolls with the value of their partition."""
    return sa.select(s.rolls, s.partitions.c.value).join(
        s.partitions, s.partitions.c.id == s.rolls.c.partition_id
    )


def _begin(
    conn: Connection,
    partition: Partition,
    next_value: datetime | None,
    owner: str,
    lease: timedelta,
    now: datetime,
    label: str,
) -> str:
    """In ``conn``'s transaction: ``partition`` STREAMING → ROLLING, the next one opened (arrival
    mode: ``next_value``) and its roll recorded; the roll's id. A partition not streaming any more
    is a ConflictError, and then nothing was changed (the transaction can go on)."""
    check_transition(partition.state, PartitionState.ROLLING)
    fence_table(conn, partition.table_id, label)
    guarded_update(
        conn,
        s.partitions,
        s.partitions.c.id == partition.id,
        partition_subject(partition.table_id, partition.value),
        [state_in(s.partitions.c.state, [PartitionState.STREAMING])],
        {"state": PartitionState.ROLLING.value},
        gone=ConflictError,
    )
    if next_value is not None:
        insert_partition(conn, partition.table_id, next_value, now)
    roll_id = str(uuid.uuid4())
    conn.execute(
        sa.insert(s.rolls).values(
            id=roll_id,
            table_id=partition.table_id,
            partition_id=partition.id,
            state=RollState.SEALING.value,
            started_at=_db(now),
            owner=owner,
            lease_until=_db(now + lease),
        )
    )
    return roll_id


def _read_roll(conn: Connection, roll_id: str) -> Roll:
    row = conn.execute(_roll_query().where(s.rolls.c.id == roll_id)).first()
    if row is None:
        raise NotFoundError(f"roll {roll_id} does not exist")
    return roll_from_row(row)


# -- the preconditions of a roll's steps ---------------------------------------------------------
def _in_state(*expected: RollState) -> Precondition:
    return state_in(s.rolls.c.state, expected)


def unfinished(table: sa.Table = s.rolls, done: str = RollState.DONE.value) -> Precondition:
    """Not ``done`` yet (a roll's, or an expiry's: ``table`` is its table)."""
    return Precondition(
        table.c.state != done,
        lambda m: m["state"] != done,
        lambda m: f"is done (since {at(m['finished_at'])})",
    )


def owned_by(owner: str, table: sa.Table = s.rolls) -> Precondition:
    return Precondition(
        table.c.owner == owner,
        lambda m: m["owner"] == owner,
        lambda m: f"is owned by {m['owner']} (lease until {at(m['lease_until'])}), not {owner}",
    )


def ours_or_lapsed(owner: str, now: datetime, table: sa.Table = s.rolls) -> Precondition:
    """Ours already, or its owner's lease has lapsed (so anyone may take it over): a roll's, or a
    step of another leased piece of work whose rows have ``owner`` and ``lease_until`` (``table``)."""
    c = table.c
    return Precondition(
        sa.or_(c.owner == owner, c.lease_until.is_(None), c.lease_until < _db(now)),
        lambda m: m["owner"] == owner or m["lease_until"] is None or m["lease_until"] < _db(now),
        lambda m: f"is held by {m['owner']} until {at(m['lease_until'])}",
    )


def claimable(
    conn: Connection,
    table: sa.Table,
    where: Any,
    owner: str,
    now: datetime,
    otherwise: Precondition | None = None,
) -> Precondition:
    """Inside a transaction: that ``owner`` may claim the leased work at ``where`` (a row of
    ``table``, which has ``owner`` and ``lease_until``): it is ours, its lease lapsed, or the process
    its owner names stopped renewing its process lease (:func:`metastore.store.leases.holder_gone`:
    seconds after a SIGKILL, where the work's own lease may run for minutes); then only while that
    dead owner still has it, so of several successors racing one wins. (``otherwise``: the kind's
    own "ours or lapsed", if not :func:`ours_or_lapsed`.)"""
    held_by = conn.execute(sa.select(table.c.owner).where(where)).scalar()
    if held_by is not None and held_by != owner and holder_gone(conn, held_by, now):
        return owned_by(held_by, table)
    return otherwise or ours_or_lapsed(owner, now, table)


def _update_roll(
    conn: Connection, roll: Roll, preconditions: list[Precondition], values: dict[str, Any]
) -> None:
    # A roll row only goes with its table (drop_table): to a roller, a lost race like any other.
    guarded_update(
        conn, s.rolls, s.rolls.c.id == roll.id, f"roll {roll.id}", preconditions, values, gone=ConflictError
    )


def extend_roll_leases(conn: Connection, owner: str, until: datetime) -> int:
    """Inside a transaction: extend to ``until`` the lease of every unfinished roll ``owner`` holds;
    returns how many."""
    return int(
        conn.execute(
            sa.update(s.rolls)
            .where(s.rolls.c.owner == owner, s.rolls.c.state != RollState.DONE.value)
            .values(lease_until=_db(until))
        ).rowcount
    )


class RollStore(Database):
    """Rolls and their leases."""

    def get_roll(self, roll_id: str) -> Roll:
        with self.read_tx() as conn:
            return _read_roll(conn, roll_id)

    def list_rolls(
        self,
        table_id: int | None = None,
        unfinished: bool = False,
        limit: int = 100,
        partition_ids: Collection[int] | None = None,
    ) -> list[Roll]:
        """The newest rolls first; ``partition_ids``: only the rolls of these partitions."""
        q = _roll_query()
        if table_id is not None:
            q = q.where(s.rolls.c.table_id == table_id)
        if partition_ids is not None:
            q = q.where(s.rolls.c.partition_id.in_(list(partition_ids)))
        if unfinished:
            q = q.where(s.rolls.c.state != RollState.DONE.value)
        with self.read_tx() as conn:
            rows = conn.execute(q.order_by(s.rolls.c.started_at.desc()).limit(limit)).all()
        return [roll_from_row(r) for r in rows]

    def begin_roll(
        self,
        partition: Partition,
        next_value: datetime | None,
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
        fence: Lease | None = None,
    ) -> Roll:
        """Close a streaming partition for writes and record its roll, in one transaction.

        The partition goes STREAMING → ROLLING; in arrival mode the next streaming partition
        (``next_value``) opens in the same transaction, so writers always find one open.
        With ``fence``, only while that lease is still held at its epoch (same transaction).

        Raises:
            ConflictError: the partition is not streaming any more (another roller has it).
            LeaseLostError: ``fence`` is no longer held.
        """
        now = now or _now()
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            return _read_roll(conn, _begin(conn, partition, next_value, owner, lease, now, self.label))

    def begin_rolls(
        self,
        due: Sequence[tuple[Partition, datetime | None]],
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
        fence: Lease | None = None,
    ) -> list[Roll | None]:
        """``begin_roll`` of each ``(partition, next_value)`` in ``due``, all in one transaction (the
        roll daemon's partitions due at one instant): one round of locks and one commit instead of one
        each. A partition no longer streaming (another roller began it) is skipped: None in its place.

        Raises:
            LeaseLostError: ``fence`` is no longer held; anything else a ``begin_roll`` raises (a
                namespace being moved, a table dropped), for the whole batch: nothing began.
        """
        now = now or _now()
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            ids: list[str | None] = []
            for partition, next_value in due:
                try:
                    ids.append(_begin(conn, partition, next_value, owner, lease, now, self.label))
                except ConflictError:  # another roller began it: its update matched no row
                    ids.append(None)
            began = conn.execute(_roll_query().where(s.rolls.c.id.in_([i for i in ids if i])))
            found = {r.id: r for r in map(roll_from_row, began)}
            return [found[i] if i is not None else None for i in ids]

    def claim_roll(
        self,
        roll: Roll,
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
        fence: Lease | None = None,
    ) -> Roll:
        """Take over (or extend) a roll whose lease is ours or has expired.

        Raises:
            ConflictError: another live owner holds the roll, or it is done.
            LeaseLostError: ``fence`` (if given) is no longer held.
        """
        now = now or _now()
        with self.tx() as conn:
            if fence is not None:
                check_fence(conn, fence, now)
            fence_table(conn, roll.table_id, self.label)
            _update_roll(
                conn,
                roll,
                [unfinished(), claimable(conn, s.rolls, s.rolls.c.id == roll.id, owner, now)],
                {"owner": owner, "lease_until": _db(now + lease)},
            )
            return _read_roll(conn, roll.id)

    def advance_roll(self, roll: Roll, target: RollState, owner: str, **values: Any) -> Roll:
        """Move a roll one step forward (guarded by its state and owner)."""
        check_transition(roll.state, target)
        with self.tx() as conn:
            fence_table(conn, roll.table_id, self.label)
            _update_roll(
                conn, roll, [_in_state(roll.state), owned_by(owner)], {"state": target.value, **values}
            )
            return _read_roll(conn, roll.id)

    def record_roll_progress(self, roll: Roll, owner: str, **values: Any) -> Roll:
        with self.tx() as conn:
            fence_table(conn, roll.table_id, self.label)
            _update_roll(conn, roll, [_in_state(roll.state), owned_by(owner)], values)
            return _read_roll(conn, roll.id)

    def finish_roll(
        self,
        roll: Roll,
        owner: str,
        *,
        chunks: int,
        rows: int,
        bytes: int,
        files: int,
        rewritten: Mapping[datetime, tuple[int, int, int]] | None = None,
        freed: Mapping[datetime, int] | None = None,
        removed_files: Sequence[str] = (),
        now: datetime | None = None,
    ) -> Roll:
        """The partition becomes standard and the roll done, in one transaction; with the other
        partitions a keyed table's sweep rewrote recorded as a delete's are (``rewritten``: standard
        ones counted anew, ``freed``: bytes freed in streaming ones, ``record_rewritten``; the files
        it replaced there, ``removed_files``, for housekeeping to delete in time)."""
        now = now or _now()
        check_transition(roll.state, RollState.DONE)
        with self.tx() as conn:
            fence_table(conn, roll.table_id, self.label)
            _update_roll(
                conn,
                roll,
                [_in_state(RollState.SWEEPING), owned_by(owner)],
                {
                    "state": RollState.DONE.value,
                    "error": None,
                    "finished_at": _db(now),
                    "rows": rows,
                    "bytes": bytes,
                    "files_after": files,
                    **({"removed_files": list(removed_files)} if removed_files else {}),
                },
            )
            guarded_update(
                conn,
                s.partitions,
                s.partitions.c.id == roll.partition_id,
                partition_subject(roll.table_id, roll.partition_value),
                [state_in(s.partitions.c.state, [PartitionState.ROLLING])],
                {
                    "state": PartitionState.STANDARD.value,
                    "rolled_at": _db(now),
                    "chunks": chunks,
                    "rows": rows,
                    "bytes": bytes,
                    "files": files,
                },
                gone=ConflictError,
            )
            if rewritten or freed:
                record_rewritten(conn, roll.table_id, rewritten or {}, freed or {})
            return _read_roll(conn, roll.id)

    def reclaimable_rolls(self, table_id: int, oldest_readable: int, finished_before: datetime) -> list[Roll]:
        """Done rolls of a keyed table whose replaced files no readable version lists and whose grace
        passed (as ``reclaimable_deletes``)."""
        r = s.rolls.c
        q = _roll_query().where(
            r.table_id == table_id,
            r.state == RollState.DONE.value,
            r.removed_files.is_not(None),
            r.reclaimed_at.is_(None),
            r.sweep_version <= oldest_readable,
            r.finished_at < _db(finished_before),
        )
        with self.read_tx() as conn:
            return [roll_from_row(row) for row in conn.execute(q).all()]

    def mark_roll_reclaimed(self, roll: Roll, now: datetime | None = None) -> None:
        with self.tx() as conn:
            conn.execute(
                sa.update(s.rolls).where(s.rolls.c.id == roll.id).values(reclaimed_at=_db(now or _now()))
            )

    # -- roll leases (renewed with the copies' at each heartbeat: DaemonStore) -----------------
    def release_roll(
        self, roll: Roll, owner: str, error: str | None = None, now: datetime | None = None
    ) -> bool:
        """Let a failed roll go at once (its lease ends now), recording why; only by its owner.

        Returns:
            Whether it was still ours to release.
        """
        now = now or _now()
        with self.tx() as conn:
            return bool(
                conn.execute(
                    sa.update(s.rolls)
                    .where(
                        s.rolls.c.id == roll.id,
                        s.rolls.c.owner == owner,
                        s.rolls.c.state != RollState.DONE.value,
                    )
                    .values(lease_until=_db(now), error=error)
                ).rowcount
            )

    def release_rolls(self, owner: str, now: datetime | None = None) -> int:
        """End the lease of every unfinished roll ``owner`` holds, so another roller may resume it now.

        Only for an owner that has stopped working on them (a clean shutdown).
        """
        now = now or _now()
        with self.tx() as conn:
            return int(
                conn.execute(
                    sa.update(s.rolls)
                    .where(s.rolls.c.owner == owner, s.rolls.c.state != RollState.DONE.value)
                    .values(lease_until=_db(now))
                ).rowcount
            )

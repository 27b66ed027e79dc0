"""Deletes by predicate (issue 30): PENDING → COMMITTED → DONE, one live delete per table, owned by one
deleter under a lease (ingest/deletes/deleter.py carries them): the delete's own, and its process's
(:func:`metastore.store.leases.holder_gone`: taken over seconds after that process died).

``begin_delete`` records the delete, refusing while another delete of the table is live (a lapsed
one is the caller's to resume first: :meth:`DeleteStore.claim_delete`). ``finish_delete`` counts
the rewritten standard partitions anew (rows, bytes, files, as the log holds them after the
commit) and takes the bytes a delete removed from streaming partitions off their quota ledger, in
one transaction with the delete becoming DONE.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from metastore import schema as s
from metastore.errors import DeleteBusyError
from metastore.models import Delete, DeleteState
from metastore.store.engine import Database, _db, _now, _out, locking
from metastore.store.leased import Work
from metastore.store.namespaces import fence_table
from metastore.store.rewrites import record_rewritten


def delete_from_row(row: Any) -> Delete:
    m = row._mapping
    return Delete(
        id=m["id"],
        table_id=m["table_id"],
        predicate=m["predicate"],
        state=DeleteState(m["state"]),
        requested_by=m["requested_by"],
        started_at=_out(m["started_at"]),
        finished_at=_out(m["finished_at"]),
        owner=m["owner"],
        lease_until=_out(m["lease_until"]),
        seal_version=m["seal_version"],
        read_version=m["read_version"],
        commit_version=m["commit_version"],
        rows=m["rows"],
        files_removed=m["files_removed"],
        files_added=m["files_added"],
        partitions=tuple(datetime.fromisoformat(v) for v in m["partitions"] or ()),
        removed_files=tuple(m["removed_files"] or ()),
        reclaimed_at=_out(m["reclaimed_at"]),
        error=m["error"],
    )


_WORK = Work(s.deletes, delete_from_row, DeleteState.DONE, "delete")


class DeleteStore(Database):
    """Deletes by predicate and their leases."""

    def begin_delete(
        self,
        table_id: int,
        predicate: str,
        requested_by: str,
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
    ) -> Delete:
        """Record a new delete of the table, ours under ``lease``.

        Raises:
            DeleteBusyError: another delete of the table is unfinished (live, or lapsed: resume it).
        """
        now = now or _now()
        d = s.deletes.c
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            # the table's row locked: two deletes beginning at once take turns, and the second
            # finds the first (fence_table's lock on the namespace is shared: both would pass)
            conn.execute(
                locking(conn, sa.select(s.tables.c.id).where(s.tables.c.id == table_id), no_key=True)
            )
            other = conn.execute(
                sa.select(s.deletes).where(d.table_id == table_id, d.state != DeleteState.DONE.value)
            ).first()
            if other is not None:
                busy = delete_from_row(other)
                raise DeleteBusyError(
                    f"delete {busy.id} of this table ({busy.predicate!r}, by {busy.requested_by}) is not "
                    "finished; retry once it is (a delete whose process died is taken over by the next "
                    "one about 10 s after)"
                )
            delete_id = str(uuid.uuid4())
            conn.execute(
                sa.insert(s.deletes).values(
                    id=delete_id,
                    table_id=table_id,
                    predicate=predicate,
                    state=DeleteState.PENDING.value,
                    requested_by=requested_by,
                    started_at=_db(now),
                    owner=owner,
                    lease_until=_db(now + lease),
                )
            )
            return _WORK.read(conn, delete_id)

    def claim_delete(
        self, delete: Delete, owner: str, lease: timedelta, now: datetime | None = None
    ) -> Delete:
        """Take over (or extend) an unfinished delete that is ours or whose lease lapsed.

        Raises:
            ConflictError: another live owner holds it, or it is done.
        """
        now = now or _now()
        with self.tx() as conn:
            fence_table(conn, delete.table_id, self.label)
            return _WORK.claim(conn, delete, owner, lease, now)

    def record_delete(self, delete: Delete, owner: str, **values: Any) -> Delete:
        """Record a step of a delete we own (``seal_version``; ``read_version``, ``rows``, ``files_*``,
        ``partitions`` of its plan; ``state`` COMMITTED with ``commit_version``)."""
        if "partitions" in values:
            values["partitions"] = [v.isoformat() for v in values["partitions"]]
        if "removed_files" in values:
            values["removed_files"] = list(values["removed_files"])
        with self.tx() as conn:
            fence_table(conn, delete.table_id, self.label)
            return _WORK.step(conn, delete, owner, values)

    def finish_delete(
        self,
        delete: Delete,
        owner: str,
        standard: Mapping[datetime, tuple[int, int, int]],
        freed: Mapping[datetime, int],
        now: datetime | None = None,
    ) -> Delete:
        """The delete DONE; each standard (or expiring) partition of ``standard`` counted anew (rows,
        bytes, files), one generation on and its present copies stale; each other partition's quota
        ledger less the bytes ``freed`` there; in one transaction."""
        now = now or _now()
        with self.tx() as conn:
            fence_table(conn, delete.table_id, self.label)
            done = {
                "state": DeleteState.DONE.value,
                "finished_at": _db(now),
                "lease_until": None,
                "error": None,
            }
            _WORK.step(conn, delete, owner, done, expected=DeleteState.COMMITTED)
            record_rewritten(conn, delete.table_id, standard, freed)
            return _WORK.read(conn, delete.id)

    def release_delete(self, delete: Delete, owner: str, error: str | None = None) -> bool:
        """Let a failed delete go at once (its lease ends now), recording why; only by its owner."""
        with self.tx() as conn:
            return _WORK.release(conn, delete, owner, error)

    def reclaimable_deletes(
        self, table_id: int, oldest_readable: int, finished_before: datetime
    ) -> list[Delete]:
        """Done deletes whose replaced files no readable version lists and whose grace passed."""
        d = s.deletes.c
        q = sa.select(s.deletes).where(
            d.table_id == table_id,
            d.state == DeleteState.DONE.value,
            d.reclaimed_at.is_(None),
            d.commit_version <= oldest_readable,
            d.finished_at < _db(finished_before),
        )
        with self.read_tx() as conn:
            return [delete_from_row(r) for r in conn.execute(q).all()]

    def mark_delete_reclaimed(self, delete: Delete, now: datetime | None = None) -> None:
        with self.tx() as conn:
            conn.execute(
                sa.update(s.deletes)
                .where(s.deletes.c.id == delete.id)
                .values(reclaimed_at=_db(now or _now()))
            )

    def get_delete(self, delete_id: str) -> Delete:
        with self.read_tx() as conn:
            return _WORK.read(conn, delete_id)

    def list_deletes(self, table_id: int, unfinished: bool = False, limit: int = 100) -> list[Delete]:
        """The newest first."""
        with self.read_tx() as conn:
            return _WORK.listed(conn, table_id, unfinished, limit)

"""A namespace's rows leaving one metastore for another: fence, export, import with new ids, remove.

What ``metastore/moves.py`` does to each of the two metastores of a move, one call per step:

- :meth:`TransferStore.fence_namespace_for_move` sets the namespace's ``moving_to`` (from then on
  its writes here refuse: see ``namespaces.py``); :meth:`TransferStore.unfence_namespace` clears it;
- :meth:`TransferStore.committing_chunks` lists the commits in flight the move waits for;
- :meth:`TransferStore.export_table` reads one table's rows (one read transaction: one snapshot),
  :meth:`TransferStore.import_table` writes them with **new row ids** (each metastore numbers its
  own rows), remapping every foreign key — partitions of rolls and of partition copies, the table
  of every row (its schema history's and expiries' too) — in one transaction per table; chunk and roll ids
  (UUIDs) and the table's uid are kept, so an idempotency key retried after the move finds its
  chunk, and links find the table;
- :meth:`TransferStore.copy_namespace_row` and :meth:`TransferStore.import_links` do the same for
  the namespace's row and its links (with the partitions static links list);
- :meth:`TransferStore.remove_table_rows` and :meth:`TransferStore.remove_namespace_rows` delete
  them (the source's after the flip; the target's partial copy when a move rolls back).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from metastore import schema as s
from metastore.errors import ConflictError, NotFoundError
from metastore.models import Chunk, ChunkState, DeleteState, ExpiryState, RollState
from metastore.store.chunks import chunk_from_row
from metastore.store.engine import Database, _db, _new_id, _now
from metastore.store.namespaces import lock_namespace

# Why 1,000: a chunk row is about 1 KiB with its file list; 1,000 per INSERT keeps each
# statement well under PostgreSQL's parameter limit and gives the progress bar a steady pace.
BATCH_ROWS = 1000


@dataclass
class TableRows:
    """One table's rows as read from its metastore (column → value, ids as they are there)."""

    table: dict[str, Any]
    partitions: list[dict[str, Any]] = field(default_factory=list)
    chunks: list[dict[str, Any]] = field(default_factory=list)
    rolls: list[dict[str, Any]] = field(default_factory=list)
    roll_attempts: list[dict[str, Any]] = field(default_factory=list)
    chunk_summaries: list[dict[str, Any]] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    partition_copies: list[dict[str, Any]] = field(default_factory=list)
    schema_changes: list[dict[str, Any]] = field(default_factory=list)
    expiries: list[dict[str, Any]] = field(default_factory=list)
    deletes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.table['namespace']}.{self.table['name']}"

    @property
    def count(self) -> int:
        """How many rows it is, the table's own included (what a progress bar counts)."""
        return 1 + sum(
            len(rows)
            for rows in (
                self.partitions,
                self.chunks,
                self.rolls,
                self.roll_attempts,
                self.chunk_summaries,
                self.replicas,
                self.partition_copies,
                self.schema_changes,
                self.expiries,
                self.deletes,
            )
        )


def _rows(conn: Connection, table: sa.Table, where: sa.ColumnElement[bool]) -> list[dict[str, Any]]:
    order = list(table.primary_key.columns)
    return [dict(r._mapping) for r in conn.execute(sa.select(table).where(where).order_by(*order)).all()]


def _without_id(row: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "id"} | changes


class TransferStore(Database):
    """The rows of a namespace on the way in or out of this metastore (see the module's docstring)."""

    # -- the fence ---------------------------------------------------------------------------
    def fence_namespace_for_move(self, namespace: str, target: str, now: datetime | None = None) -> None:
        """Fence ``namespace`` here for its move to ``target`` (again, if it is fenced for it already).

        Once this returns, no transaction that writes the namespace commits here any more (on
        PostgreSQL the update waits for those holding its row; see ``namespaces.py``).

        Raises:
            NotFoundError: no such namespace here; ConflictError: it is fenced for another move.
        """
        n = s.namespaces.c
        with self.tx() as conn:
            row = lock_namespace(conn, namespace)
            if row is None:
                raise NotFoundError(f"namespace {namespace} does not exist in metastore {self.label}")
            if row.moving_to not in (None, target):
                raise ConflictError(
                    f"namespace {namespace} is fenced for a move to {row.moving_to}, not {target}"
                )
            if row.moving_to is None:
                conn.execute(
                    sa.update(s.namespaces)
                    .where(n.name == namespace)
                    .values(moving_to=target, moving_since=_db(now or _now()))
                )

    def unfence_namespace(self, namespace: str) -> bool:
        """Lift a move's fence (a move rolled back); whether there was one."""
        n = s.namespaces.c
        with self.tx() as conn:
            return bool(
                conn.execute(
                    sa.update(s.namespaces)
                    .where(n.name == namespace, n.moving_to.is_not(None))
                    .values(moving_to=None, moving_since=None)
                ).rowcount
            )

    def committing_chunks(self, namespace: str) -> list[Chunk]:
        """The namespace's chunks whose commit is in flight (COMMITTING), oldest first."""
        c, t = s.chunks.c, s.tables.c
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.chunks)
                .join(s.tables, c.table_id == t.id)
                .where(t.namespace == namespace, c.state == ChunkState.COMMITTING.value)
                .order_by(c.committing_since)
            ).all()
        return [chunk_from_row(r) for r in rows]

    def namespace_table_ids(self, namespace: str) -> list[int]:
        """The ids of the namespace's tables here, in the order they were made."""
        t = s.tables.c
        with self.read_tx() as conn:
            return [
                int(i)
                for i in conn.execute(
                    sa.select(t.id).where(t.namespace == namespace).order_by(t.id)
                ).scalars()
            ]

    def holds_namespace(self, namespace: str) -> bool:
        """Whether anything of ``namespace`` is here: its row, a table or a link."""
        with self.read_tx() as conn:
            for table, column in ((s.namespaces, "name"), (s.tables, "namespace"), (s.links, "namespace")):
                if conn.execute(
                    sa.select(table.c[column]).where(table.c[column] == namespace).limit(1)
                ).first():
                    return True
        return False

    # -- export ------------------------------------------------------------------------------
    def export_table(self, table_id: int) -> TableRows:
        """Every row of the table ``table_id`` and of what belongs to it, in one snapshot."""
        with self.read_tx(snapshot=True) as conn:
            found = _rows(conn, s.tables, s.tables.c.id == table_id)
            if not found:
                raise NotFoundError(f"table #{table_id} does not exist in metastore {self.label}")
            return TableRows(
                table=found[0],
                partitions=_rows(conn, s.partitions, s.partitions.c.table_id == table_id),
                chunks=_rows(conn, s.chunks, s.chunks.c.table_id == table_id),
                rolls=_rows(conn, s.rolls, s.rolls.c.table_id == table_id),
                roll_attempts=_rows(conn, s.roll_attempts, s.roll_attempts.c.table_id == table_id),
                chunk_summaries=_rows(conn, s.chunk_summaries, s.chunk_summaries.c.table_id == table_id),
                replicas=_rows(conn, s.replicas, s.replicas.c.table_id == table_id),
                partition_copies=_rows(conn, s.partition_copies, s.partition_copies.c.table_id == table_id),
                schema_changes=_rows(conn, s.schema_changes, s.schema_changes.c.table_id == table_id),
                expiries=_rows(conn, s.expiries, s.expiries.c.table_id == table_id),
                deletes=_rows(conn, s.deletes, s.deletes.c.table_id == table_id),
            )

    def export_namespace_row(self, namespace: str) -> dict[str, Any]:
        with self.read_tx() as conn:
            found = _rows(conn, s.namespaces, s.namespaces.c.name == namespace)
        if not found:
            raise NotFoundError(f"namespace {namespace} does not exist in metastore {self.label}")
        return found[0]

    def export_links(self, namespace: str) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The namespace's links, each with the partitions it lists (static links)."""
        with self.read_tx() as conn:
            links = _rows(conn, s.links, s.links.c.namespace == namespace)
            return [
                (link, _rows(conn, s.link_partitions, s.link_partitions.c.link_id == link["id"]))
                for link in links
            ]

    # -- import ------------------------------------------------------------------------------
    def copy_namespace_row(self, row: dict[str, Any], now: datetime | None = None) -> None:
        """The namespace's row, as it was in the source, fenced here until the route flips.

        Fenced, so nothing here acts on the copy before it is the namespace's home (a roll daemon
        serving this metastore would otherwise roll its tables while the source is still the home);
        the move lifts this fence right after the flip.
        """
        fenced = {"moving_to": self.name, "moving_since": _db(now or _now())}
        with self.tx() as conn:
            conn.execute(sa.insert(s.namespaces).values(**(row | fenced)))

    def import_table(
        self, rows: TableRows, progress: Callable[[int], None] | None = None, now: datetime | None = None
    ) -> int:
        """Write ``rows`` (of another metastore) here with new row ids, in one transaction; the new id.

        Unfinished rolls, expiries and partition copies come with their leases ended: their owner was
        fenced out of the source, so any may resume them here at once (each resumes from any step).
        """
        tick = progress or (lambda n: None)
        released = _db(now or _now())
        with self.tx() as conn:
            table_id = _new_id(conn.execute(sa.insert(s.tables).values(**_without_id(rows.table))))
            tick(1)
            partition_ids: dict[int, int] = {}
            for p in rows.partitions:
                partition_ids[p["id"]] = _new_id(
                    conn.execute(sa.insert(s.partitions).values(**_without_id(p, table_id=table_id)))
                )
            tick(len(rows.partitions))
            _insert_batches(conn, s.chunks, ({**c, "table_id": table_id} for c in rows.chunks), tick)
            _insert_batches(
                conn,
                s.rolls,
                (
                    {**r, "table_id": table_id, "partition_id": partition_ids[r["partition_id"]]}
                    | ({"lease_until": released} if r["state"] != RollState.DONE.value else {})
                    for r in rows.rolls
                ),
                tick,
            )
            for kind, source in (
                (s.roll_attempts, rows.roll_attempts),
                (s.chunk_summaries, rows.chunk_summaries),
                (s.schema_changes, rows.schema_changes),  # in id order: the history keeps its order
            ):
                _insert_batches(conn, kind, (_without_id(r, table_id=table_id) for r in source), tick)
            _insert_batches(
                conn,
                s.expiries,  # (its partitions are named by value: nothing to remap)
                (
                    {**e, "table_id": table_id}
                    | ({"lease_until": released} if e["state"] != ExpiryState.DONE.value else {})
                    for e in rows.expiries
                ),
                tick,
            )
            _insert_batches(
                conn,
                s.deletes,
                (
                    {**d, "table_id": table_id}
                    | ({"lease_until": released} if d["state"] != DeleteState.DONE.value else {})
                    for d in rows.deletes
                ),
                tick,
            )
            _insert_batches(conn, s.replicas, ({**r, "table_id": table_id} for r in rows.replicas), tick)
            _insert_batches(
                conn,
                s.partition_copies,
                (
                    {**c, "table_id": table_id, "partition_id": partition_ids[c["partition_id"]]}
                    | ({"lease_until": released} if c["lease_until"] is not None else {})
                    for c in rows.partition_copies
                ),
                tick,
            )
        return table_id

    def import_links(self, links: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
        """The namespace's links, with new ids; each names its source by uid (and by row id when the
        source lives here), so it reads the same table wherever that one lives."""
        t = s.tables.c
        with self.tx() as conn:
            for link, values in links:
                uid = link["source_uid"]
                here = conn.execute(sa.select(t.id).where(t.uid == uid)).scalar() if uid else None
                link_id = _new_id(
                    conn.execute(sa.insert(s.links).values(**_without_id(link, source_table_id=here)))
                )
                if values:
                    conn.execute(sa.insert(s.link_partitions), [{**v, "link_id": link_id} for v in values])

    # -- removal -----------------------------------------------------------------------------
    def remove_table_rows(self, table_id: int) -> None:
        """Delete the table ``table_id`` and every row that belongs to it, in one transaction.

        Links here that name it by row id keep naming it by uid (their source moved, not dropped).
        """
        with self.tx() as conn:
            conn.execute(
                sa.update(s.links).where(s.links.c.source_table_id == table_id).values(source_table_id=None)
            )
            for kind in (
                s.schema_changes,
                s.expiries,
                s.deletes,
                s.partition_copies,
                s.replicas,
                s.roll_attempts,
                s.chunk_summaries,
                s.rolls,
                s.chunks,
                s.partitions,
            ):
                conn.execute(sa.delete(kind).where(kind.c.table_id == table_id))
            conn.execute(sa.delete(s.tables).where(s.tables.c.id == table_id))

    def remove_namespace_rows(self, namespace: str) -> None:
        """Delete the namespace's links and its row (its tables are removed first, one by one)."""
        with self.tx() as conn:
            links = sa.select(s.links.c.id).where(s.links.c.namespace == namespace)
            conn.execute(sa.delete(s.link_partitions).where(s.link_partitions.c.link_id.in_(links)))
            conn.execute(sa.delete(s.links).where(s.links.c.namespace == namespace))
            conn.execute(sa.delete(s.namespaces).where(s.namespaces.c.name == namespace))


def _insert_batches(
    conn: Connection, table: sa.Table, rows: Iterable[dict[str, Any]], tick: Callable[[int], None]
) -> None:
    batch: list[dict[str, Any]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= BATCH_ROWS:
            conn.execute(sa.insert(table), batch)
            tick(len(batch))
            batch = []
    if batch:
        conn.execute(sa.insert(table), batch)
        tick(len(batch))

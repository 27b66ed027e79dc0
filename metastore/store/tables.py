"""Tables and their partitions (STREAMING → ROLLING → STANDARD), and what is recorded of them.

A table row holds its spec and its storage location; an arrival-mode table's first streaming
partition opens in the same transaction as the table. Event-time partitions open on first
write (:meth:`TableStore.ensure_partition`), once, whichever writer comes first. The partition
state changes themselves belong to the roll (``rolls.py``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, ConflictError, NotFoundError
from metastore.models import (
    PRIMARY,
    ChunkState,
    Column,
    Keys,
    LateDataPolicy,
    Mode,
    Partition,
    PartitionState,
    SchemaEvolution,
    Table,
    TableKind,
    TableName,
    TableSpec,
    iso,
    period_start,
    utc,
)
from metastore.store.chunks import insert_chunk
from metastore.store.engine import Database, _db, _new_id, _now, _out, locking
from metastore.store.links import link_named
from metastore.store.namespaces import ensure_namespace, fence_table


def table_from_row(row: Any, metastore: str = PRIMARY) -> Table:
    """A table from its row, as read from the federation's metastore ``metastore``."""
    m = dict(row._mapping) if hasattr(row, "_mapping") else dict(row)
    return Table(
        uid=m["uid"] or "",
        metastore=metastore,
        id=m["id"],
        name=TableName(namespace=m["namespace"], table=m["name"]),
        kind=TableKind(m["kind"]),
        cluster=m["cluster"],
        location=m["location"],
        columns=tuple(Column(**c) for c in m["columns"]),
        time_column=m["time_column"],
        partition_column=m["partition_column"],
        mode=Mode(m["mode"]),
        roll_every=timedelta(seconds=m["roll_every_s"]),
        lateness=timedelta(seconds=m["lateness_s"]),
        late_data=LateDataPolicy(m["late_data"]),
        max_future=timedelta(seconds=m["max_future_s"]),
        max_age=None if m["max_age_s"] is None else timedelta(seconds=m["max_age_s"]),
        retain=None if m.get("retain_s") is None else timedelta(seconds=m["retain_s"]),
        dead_letter=m["dead_letter"],
        created_at=utc(m["created_at"]),
        schema_evolution=SchemaEvolution(m["schema_evolution"]),
        max_new_columns=m["max_new_columns"],
        keys=None if m.get("keys") is None else Keys(**m["keys"]),
        cluster_by=tuple(m.get("cluster_by") or ()),
    )


def partition_from_row(row: Any) -> Partition:
    m = row._mapping
    return Partition(
        id=m["id"],
        table_id=m["table_id"],
        value=_out(m["value"]),
        state=PartitionState(m["state"]),
        opened_at=_out(m["opened_at"]),
        rolled_at=_out(m["rolled_at"]),
        chunks=m["chunks"],
        rows=m["rows"],
        bytes=m["bytes"],
        files=m["files"],
        expired_at=_out(m["expired_at"]),
        expired_version=m["expired_version"],
        reclaimed_at=_out(m["reclaimed_at"]),
        generation=m["generation"],
    )


def partition_subject(table_id: int, value: datetime) -> str:
    """How messages name a partition."""
    return f"partition {iso(value)} of table #{table_id}"


def insert_partition(conn: Connection, table_id: int, value: datetime, now: datetime) -> int:
    """Open a streaming partition (inside the caller's transaction)."""
    return _new_id(
        conn.execute(
            sa.insert(s.partitions).values(
                table_id=table_id,
                value=_db(value),
                state=PartitionState.STREAMING.value,
                opened_at=_db(now),
            )
        )
    )


class TableStore(Database):
    """Tables and partitions."""

    # -- tables ----------------------------------------------------------------------------
    def create_table(
        self,
        spec: TableSpec,
        location: str,
        now: datetime | None = None,
        *,
        create_namespace: bool = True,
        first_chunk: tuple[str, timedelta] | None = None,
    ) -> Table:
        """Record a new table. In arrival mode its first streaming partition opens at once.

        Its namespace is made first if it does not exist, unless ``create_namespace`` is false
        (then that is a NotFoundError naming the command that makes it). ``first_chunk``
        (idempotency key, TTL) reserves the table's first chunk in the same transaction, so the
        key proves for good who created the table (``CREATE TABLE … AS SELECT``: its retry
        finds the table *and* its chunk, never a table without one).
        """
        now = now or _now()
        row = {
            "namespace": spec.name.namespace,
            "name": spec.name.table,
            "kind": spec.kind.value,
            "cluster": spec.cluster,
            "location": location,
            "columns": [c.model_dump() for c in spec.columns],
            "time_column": spec.time_column,
            "partition_column": spec.partition_column,
            "mode": spec.mode.value,
            "roll_every_s": int(spec.roll_every.total_seconds()),
            "lateness_s": int(spec.lateness.total_seconds()),
            "late_data": spec.late_data.value,
            "max_future_s": int(spec.max_future.total_seconds()),
            "max_age_s": None if spec.max_age is None else int(spec.max_age.total_seconds()),
            "retain_s": None if spec.retain is None else int(spec.retain.total_seconds()),
            "dead_letter": spec.dead_letter,
            "created_at": _db(now),
            "uid": str(uuid.uuid4()),
            "schema_evolution": spec.schema_evolution.value,
            "max_new_columns": spec.max_new_columns,
            "keys": None if spec.keys is None else spec.keys.model_dump(mode="json"),
            "cluster_by": list(spec.cluster_by) or None,
        }
        try:
            with self.tx() as conn:
                ensure_namespace(conn, spec.name.namespace, create_namespace, now)
                link = link_named(conn, spec.name)
                if link is not None:
                    raise AlreadyExistsError(
                        f"{spec.name} is a link (to {link.source_namespace}.{link.source_name}); choose "
                        "another name, or drop the link first"
                    )
                table_id = _new_id(conn.execute(sa.insert(s.tables).values(**row)))
                table = table_from_row({**row, "id": table_id}, self.name)
                if spec.mode is Mode.ARRIVAL:
                    insert_partition(conn, table_id, period_start(now, spec.roll_every), now)
                if first_chunk is not None:
                    insert_chunk(conn, table_id, first_chunk[0], first_chunk[1], now)
        except IntegrityError:
            raise AlreadyExistsError(f"table {spec.name} exists already") from None
        return table

    def get_table(self, name: TableName | str) -> Table:
        name = TableName.parse(name) if isinstance(name, str) else name
        with self.read_tx() as conn:
            row = conn.execute(
                sa.select(s.tables).where(
                    s.tables.c.namespace == name.namespace, s.tables.c.name == name.table
                )
            ).first()
        if row is None:
            raise NotFoundError(f"table {name} does not exist")
        return table_from_row(row, self.name)

    def find_table(self, name: TableName) -> Table | None:
        try:
            return self.get_table(name)
        except NotFoundError:
            return None

    def get_table_by_id(self, table_id: int) -> Table:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.tables).where(s.tables.c.id == table_id)).first()
        if row is None:
            raise NotFoundError(f"table #{table_id} does not exist")
        return table_from_row(row, self.name)

    def list_tables(self) -> list[Table]:
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.tables).order_by(s.tables.c.namespace, s.tables.c.name)).all()
        return [table_from_row(r, self.name) for r in rows]

    def drop_table(self, table_id: int) -> None:
        """Remove a table's records; links to it are left dangling (the catalog decides whether to)."""
        with self.tx() as conn:
            try:
                fence_table(conn, table_id, self.label)
            except NotFoundError:
                return  # gone already
            # its replicas' rows first, as a copy's claim and remove_replica lock them (before any
            # partition or copy): else a replica removed meanwhile and this drop each wait for the other
            replicas = sa.select(s.replicas.c.cluster).where(s.replicas.c.table_id == table_id)
            conn.execute(locking(conn, replicas.order_by(s.replicas.c.cluster))).all()
            conn.execute(
                sa.update(s.links).where(s.links.c.source_table_id == table_id).values(source_table_id=None)
            )
            conn.execute(sa.delete(s.rolls).where(s.rolls.c.table_id == table_id))
            conn.execute(sa.delete(s.expiries).where(s.expiries.c.table_id == table_id))
            conn.execute(sa.delete(s.deletes).where(s.deletes.c.table_id == table_id))
            conn.execute(sa.delete(s.chunks).where(s.chunks.c.table_id == table_id))
            conn.execute(sa.delete(s.partitions).where(s.partitions.c.table_id == table_id))
            conn.execute(sa.delete(s.tables).where(s.tables.c.id == table_id))

    def set_cluster_by(self, table_id: int, names: Sequence[str]) -> Table:
        """Set the columns a roll orders the table's partitions by (empty: none); the table as it is
        now. Partitions rolled already keep their order: the next rolls take the new one."""
        t = s.tables.c
        with self.tx() as conn:
            fence_table(conn, table_id, self.label)
            conn.execute(sa.update(s.tables).where(t.id == table_id).values(cluster_by=list(names) or None))
            return table_from_row(conn.execute(sa.select(s.tables).where(t.id == table_id)).one(), self.name)

    def declare_keys(self, table_id: int, keys: Keys, columns: Sequence[Column], seen_version: int) -> Table:
        """Make the empty table ``table_id`` keyed by ``keys``, with ``columns`` (its key columns NOT
        NULL); the table as it is now.

        ``seen_version``: the table's :meth:`newest_version` when its caller found its snapshot empty.
        Under its namespace's exclusive lock (which reservations wait for), it refuses while a chunk of
        the table is reserved or committing, or if one was committed since: every chunk reserved
        before is seen here, and every chunk reserved after reads the key at its commit
        (``fence_commit``), so no chunk written without the key commits after it.

        Raises:
            ConflictError: the table has a key already, a chunk is in flight, or data came meanwhile.
        """
        c = s.chunks.c
        with self.tx() as conn:
            fence_table(conn, table_id, self.label, share=False)
            row = conn.execute(sa.select(s.tables).where(s.tables.c.id == table_id)).one()
            table = table_from_row(row, self.name)
            if table.keys is not None:
                raise ConflictError(f"table {table.name} has a primary key already ({table.keys.describe()})")
            busy = conn.execute(
                sa.select(c.id, c.state)
                .where(
                    c.table_id == table_id,
                    c.state.in_([ChunkState.RESERVED.value, ChunkState.COMMITTING.value]),
                )
                .limit(1)
            ).first()
            if busy is not None:
                raise ConflictError(
                    f"table {table.name}: chunk {busy.id} is {busy.state}; a key is declared only while no "
                    "chunk is in flight: run it again once the chunk has committed or expired (streampart "
                    "chunk list)"
                )
            committed = conn.execute(
                sa.select(sa.func.max(c.version)).where(
                    c.table_id == table_id, c.state == ChunkState.COMMITTED.value
                )
            ).scalar()
            if committed is not None and committed > seen_version:
                raise ConflictError(
                    f"table {table.name} took rows while its key was being declared: it is not empty; "
                    "nothing was changed"
                )
            values = {"keys": keys.model_dump(mode="json"), "columns": [col.model_dump() for col in columns]}
            conn.execute(sa.update(s.tables).where(s.tables.c.id == table_id).values(**values))
        return table_from_row({**row._mapping, **values}, self.name)

    def newest_version(self, table_id: int) -> int:
        """The newest Delta version at which the metastore recorded a commit of the table (-1: none).

        Committed chunks, seals, sweeps, expiries and deletes: the Delta log must reach at least this
        far. (Chunks pruned into summaries are older than their partition's sweep, which stays recorded.)
        """
        with self.read_tx() as conn:
            chunk = conn.execute(
                sa.select(sa.func.max(s.chunks.c.version)).where(
                    s.chunks.c.table_id == table_id, s.chunks.c.state == ChunkState.COMMITTED.value
                )
            ).scalar()
            e, d = s.expiries.c, s.deletes.c
            expiry = sa.select(sa.func.max(e.commit_version)).where(e.table_id == table_id)
            sealed = sa.select(sa.func.max(d.seal_version)).where(d.table_id == table_id)
            deleted = sa.select(sa.func.max(d.commit_version)).where(d.table_id == table_id)
            rolled = conn.execute(  # (one statement: this is on every chunk commit's path)
                sa.select(
                    sa.func.max(s.rolls.c.seal_version),
                    sa.func.max(s.rolls.c.sweep_version),
                    expiry.scalar_subquery(),
                    sealed.scalar_subquery(),
                    deleted.scalar_subquery(),
                ).where(s.rolls.c.table_id == table_id)
            ).one()
        return max(v if v is not None else -1 for v in (chunk, *rolled))

    # -- partitions ------------------------------------------------------------------------
    def list_partitions(
        self, table_id: int, states: Sequence[PartitionState] | None = None, newest: int | None = None
    ) -> list[Partition]:
        """The table's partitions (in ``states``), oldest first; ``newest``: only the last so many."""
        q = sa.select(s.partitions).where(s.partitions.c.table_id == table_id)
        if states:
            q = q.where(s.partitions.c.state.in_([st.value for st in states]))
        if newest is not None:  # the newest by value (an index range), handed out oldest first
            q = q.order_by(s.partitions.c.value.desc()).limit(newest)
            with self.read_tx() as conn:
                rows = conn.execute(q).all()
            return [partition_from_row(r) for r in reversed(rows)]
        with self.read_tx() as conn:
            rows = conn.execute(q.order_by(s.partitions.c.value)).all()
        return [partition_from_row(r) for r in rows]

    def get_partition(self, table_id: int, value: datetime) -> Partition | None:
        with self.read_tx() as conn:
            row = conn.execute(
                sa.select(s.partitions).where(
                    s.partitions.c.table_id == table_id, s.partitions.c.value == _db(value)
                )
            ).first()
        return None if row is None else partition_from_row(row)

    def streaming_partition(self, table_id: int) -> Partition:
        """The arrival-mode table's streaming partition (there is always exactly one)."""
        parts = self.list_partitions(table_id, [PartitionState.STREAMING])
        if not parts:
            raise NotFoundError(f"table #{table_id} has no streaming partition")
        return parts[-1]

    def ensure_partition(self, table_id: int, value: datetime, now: datetime | None = None) -> Partition:
        """Event time: the partition for ``value``, opened as streaming if it did not exist."""
        existing = self.get_partition(table_id, value)
        if existing is not None:
            return existing
        try:
            with self.tx() as conn:
                insert_partition(conn, table_id, value, now or _now())
        except IntegrityError:
            pass  # another writer opened it first
        found = self.get_partition(table_id, value)
        assert found is not None
        return found

    def partition_counts(self) -> dict[int, dict[PartitionState, int]]:
        """Per table, how many partitions are in each state (for monitoring)."""
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.partitions.c.table_id, s.partitions.c.state, sa.func.count()).group_by(
                    s.partitions.c.table_id, s.partitions.c.state
                )
            ).all()
        out: dict[int, dict[PartitionState, int]] = {}
        for table_id, state, n in rows:
            out.setdefault(table_id, {})[PartitionState(state)] = int(n)
        return out

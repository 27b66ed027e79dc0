"""The SQL metastore: tables, partitions and their lifecycle, chunks, rolls.

One implementation serves SQLite (the embedded default) and PostgreSQL. Every state change is
a conditional ``UPDATE … WHERE state = :expected``; zero rows updated raises
:class:`~metastore.errors.ConflictError`. Locks and leadership go through this database,
never through local files or process memory, so any number of processes on any number of
hosts may share one metastore.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from metastore import schema as s
from metastore.errors import (
    AlreadyExistsError,
    ConflictError,
    MetastoreUnavailableError,
    NotFoundError,
    UserInputError,
)
from metastore.models import (
    Chunk,
    ChunkState,
    Column,
    LateDataPolicy,
    Mode,
    Partition,
    PartitionState,
    Roll,
    RollState,
    StagedFile,
    Table,
    TableKind,
    TableName,
    TableSpec,
    check_transition,
    utc,
)

# Why 30 s: SQLite serialises writers; under several writer processes plus a roller a write
# transaction may wait behind a few others. Each holds the lock for milliseconds, so 30 s only
# trips when the database is truly stuck, and then the error says so.
SQLITE_BUSY_TIMEOUT_S = 30


def _db(ts: datetime | None) -> datetime | None:
    return None if ts is None else utc(ts).replace(tzinfo=None)


def _out(ts: datetime | None) -> datetime | None:
    return None if ts is None else ts.replace(tzinfo=UTC)


def _now() -> datetime:
    return datetime.now(UTC)


def normalize_url(url: str) -> str:
    """Accept ``postgres://`` and ``postgresql://`` URLs and use the psycopg 3 driver for them."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def default_url(warehouse: str | Path) -> str:
    """The embedded metastore: a SQLite file inside the warehouse (hidden from Parquet readers)."""
    return f"sqlite:///{Path(warehouse).resolve() / '_metastore.sqlite'}"


class Metastore:
    """Access to one metastore database. Thread-safe; open one per process."""

    def __init__(self, url: str, *, migrate: bool = True) -> None:
        self.url = normalize_url(url)
        try:
            self.engine = self._make_engine(self.url)
        except (sa.exc.ArgumentError, ModuleNotFoundError) as exc:
            raise UserInputError(f"metastore URL {url!r} is not usable: {exc}") from None
        if migrate:
            self.migrate()

    # -- engine ----------------------------------------------------------------------------
    @staticmethod
    def _make_engine(url: str) -> Engine:
        if url.startswith("sqlite"):
            path = sa.engine.make_url(url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = sa.create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_S})

            @event.listens_for(engine, "connect")
            def _on_connect(dbapi_conn: Any, _record: Any) -> None:
                dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_S * 1000}")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()

            @event.listens_for(engine, "begin")
            def _on_begin(conn: Connection) -> None:
                # IMMEDIATE takes the write lock up front: a read-then-write transaction can
                # never fail to upgrade its lock half-way (SQLite's deadlock case).
                conn.exec_driver_sql("BEGIN IMMEDIATE")

            return engine
        return sa.create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)

    @property
    def is_sqlite(self) -> bool:
        return self.engine.dialect.name == "sqlite"

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One transaction; database unavailability becomes a clear, retriable error."""
        try:
            with self.engine.begin() as conn:
                yield conn
        except OperationalError as exc:
            raise MetastoreUnavailableError(
                f"metastore {self._safe_url()} is unavailable: {exc.orig}"
            ) from exc

    def _safe_url(self) -> str:
        return sa.engine.make_url(self.url).render_as_string(hide_password=True)

    def migrate(self) -> None:
        """Bring the schema to the newest migration (safe to run from many processes at once)."""
        from alembic import command
        from alembic.config import Config
        from alembic.runtime.migration import MigrationContext
        from alembic.script import ScriptDirectory

        cfg = Config()
        cfg.set_main_option("script_location", str(Path(__file__).parent / "migrations"))
        head = ScriptDirectory.from_config(cfg).get_current_head()
        with self.tx() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(sa.text("SELECT pg_advisory_xact_lock(4196)"))
            if MigrationContext.configure(conn).get_current_revision() == head:
                return
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")

    def close(self) -> None:
        self.engine.dispose()

    # -- tables ----------------------------------------------------------------------------
    def create_table(self, spec: TableSpec, location: str, now: datetime | None = None) -> Table:
        """Record a new table. In arrival mode its first streaming partition opens at once."""
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
            "dead_letter": spec.dead_letter,
            "created_at": _db(now),
        }
        try:
            with self.tx() as conn:
                table_id = conn.execute(sa.insert(s.tables).values(**row)).inserted_primary_key[0]
                table = self._table_from_row({**row, "id": table_id})
                if spec.mode is Mode.ARRIVAL:
                    from metastore.models import period_start

                    self._insert_partition(conn, table_id, period_start(now, spec.roll_every), now)
        except IntegrityError:
            raise AlreadyExistsError(f"table {spec.name} exists already") from None
        return table

    @staticmethod
    def _table_from_row(row: Any) -> Table:
        m = dict(row._mapping) if hasattr(row, "_mapping") else dict(row)
        return Table(
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
            dead_letter=m["dead_letter"],
            created_at=utc(m["created_at"]),
        )

    def get_table(self, name: TableName | str) -> Table:
        name = TableName.parse(name) if isinstance(name, str) else name
        with self.tx() as conn:
            row = conn.execute(
                sa.select(s.tables).where(
                    s.tables.c.namespace == name.namespace, s.tables.c.name == name.table
                )
            ).first()
        if row is None:
            raise NotFoundError(f"table {name} does not exist")
        return self._table_from_row(row)

    def find_table(self, name: TableName) -> Table | None:
        try:
            return self.get_table(name)
        except NotFoundError:
            return None

    def get_table_by_id(self, table_id: int) -> Table:
        with self.tx() as conn:
            row = conn.execute(sa.select(s.tables).where(s.tables.c.id == table_id)).first()
        if row is None:
            raise NotFoundError(f"table #{table_id} does not exist")
        return self._table_from_row(row)

    def list_tables(self) -> list[Table]:
        with self.tx() as conn:
            rows = conn.execute(sa.select(s.tables).order_by(s.tables.c.namespace, s.tables.c.name)).all()
        return [self._table_from_row(r) for r in rows]

    def drop_table(self, table_id: int) -> None:
        with self.tx() as conn:
            conn.execute(sa.delete(s.rolls).where(s.rolls.c.table_id == table_id))
            conn.execute(sa.delete(s.chunks).where(s.chunks.c.table_id == table_id))
            conn.execute(sa.delete(s.partitions).where(s.partitions.c.table_id == table_id))
            conn.execute(sa.delete(s.tables).where(s.tables.c.id == table_id))

    # -- partitions ------------------------------------------------------------------------
    @staticmethod
    def _insert_partition(conn: Connection, table_id: int, value: datetime, now: datetime) -> int:
        return int(
            conn.execute(
                sa.insert(s.partitions).values(
                    table_id=table_id,
                    value=_db(value),
                    state=PartitionState.STREAMING.value,
                    opened_at=_db(now),
                )
            ).inserted_primary_key[0]
        )

    @staticmethod
    def _partition_from_row(row: Any) -> Partition:
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
        )

    def list_partitions(
        self, table_id: int, states: Sequence[PartitionState] | None = None
    ) -> list[Partition]:
        q = sa.select(s.partitions).where(s.partitions.c.table_id == table_id)
        if states:
            q = q.where(s.partitions.c.state.in_([st.value for st in states]))
        with self.tx() as conn:
            rows = conn.execute(q.order_by(s.partitions.c.value)).all()
        return [self._partition_from_row(r) for r in rows]

    def get_partition(self, table_id: int, value: datetime) -> Partition | None:
        with self.tx() as conn:
            row = conn.execute(
                sa.select(s.partitions).where(
                    s.partitions.c.table_id == table_id, s.partitions.c.value == _db(value)
                )
            ).first()
        return None if row is None else self._partition_from_row(row)

    def open_partition(self, table_id: int) -> Partition:
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
                self._insert_partition(conn, table_id, value, now or _now())
        except IntegrityError:
            pass  # another writer opened it first
        found = self.get_partition(table_id, value)
        assert found is not None
        return found

    # -- rolls -----------------------------------------------------------------------------
    @staticmethod
    def _roll_from_row(row: Any) -> Roll:
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
        )

    def _roll_query(self) -> sa.Select[Any]:
        return sa.select(s.rolls, s.partitions.c.value).join(
            s.partitions, s.partitions.c.id == s.rolls.c.partition_id
        )

    def get_roll(self, roll_id: str) -> Roll:
        with self.tx() as conn:
            row = conn.execute(self._roll_query().where(s.rolls.c.id == roll_id)).first()
        if row is None:
            raise NotFoundError(f"roll {roll_id} does not exist")
        return self._roll_from_row(row)

    def list_rolls(
        self, table_id: int | None = None, unfinished: bool = False, limit: int = 100
    ) -> list[Roll]:
        q = self._roll_query()
        if table_id is not None:
            q = q.where(s.rolls.c.table_id == table_id)
        if unfinished:
            q = q.where(s.rolls.c.state != RollState.DONE.value)
        with self.tx() as conn:
            rows = conn.execute(q.order_by(s.rolls.c.started_at.desc()).limit(limit)).all()
        return [self._roll_from_row(r) for r in rows]

    def begin_roll(
        self,
        partition: Partition,
        next_value: datetime | None,
        owner: str,
        lease: timedelta,
        now: datetime | None = None,
    ) -> Roll:
        """Close a streaming partition for writes and record its roll, in one transaction.

        The partition goes STREAMING → ROLLING; in arrival mode the next streaming partition
        (``next_value``) opens in the same transaction, so writers always find one open.

        Raises:
            ConflictError: the partition is not streaming any more (another roller has it).
        """
        now = now or _now()
        check_transition(partition.state, PartitionState.ROLLING)
        roll_id = str(uuid.uuid4())
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.partitions)
                .where(
                    s.partitions.c.id == partition.id,
                    s.partitions.c.state == PartitionState.STREAMING.value,
                )
                .values(state=PartitionState.ROLLING.value)
            ).rowcount
            if updated != 1:
                raise ConflictError(f"partition {partition.value.isoformat()} is not streaming any more")
            if next_value is not None:
                self._insert_partition(conn, partition.table_id, next_value, now)
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
        return self.get_roll(roll_id)

    def claim_roll(self, roll: Roll, owner: str, lease: timedelta, now: datetime | None = None) -> Roll:
        """Take over (or extend) a roll whose lease is ours or has expired.

        Raises:
            ConflictError: another live owner holds the roll.
        """
        now = now or _now()
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.rolls)
                .where(
                    s.rolls.c.id == roll.id,
                    s.rolls.c.state != RollState.DONE.value,
                    sa.or_(
                        s.rolls.c.owner == owner,
                        s.rolls.c.lease_until.is_(None),
                        s.rolls.c.lease_until < _db(now),
                    ),
                )
                .values(owner=owner, lease_until=_db(now + lease))
            ).rowcount
        if updated != 1:
            raise ConflictError(f"roll {roll.id} is held by another roller")
        return self.get_roll(roll.id)

    def advance_roll(self, roll: Roll, target: RollState, owner: str, **values: Any) -> Roll:
        """Move a roll one step forward (guarded by its state and owner)."""
        check_transition(roll.state, target)
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.rolls)
                .where(s.rolls.c.id == roll.id, s.rolls.c.state == roll.state.value, s.rolls.c.owner == owner)
                .values(state=target.value, **values)
            ).rowcount
        if updated != 1:
            raise ConflictError(f"roll {roll.id} moved on without us (expected {roll.state.value})")
        return self.get_roll(roll.id)

    def record_roll_progress(self, roll: Roll, owner: str, **values: Any) -> Roll:
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.rolls)
                .where(s.rolls.c.id == roll.id, s.rolls.c.state == roll.state.value, s.rolls.c.owner == owner)
                .values(**values)
            ).rowcount
        if updated != 1:
            raise ConflictError(f"roll {roll.id} moved on without us")
        return self.get_roll(roll.id)

    def finish_roll(
        self,
        roll: Roll,
        owner: str,
        *,
        chunks: int,
        rows: int,
        nbytes: int,
        files: int,
        now: datetime | None = None,
    ) -> Roll:
        """The partition becomes standard and the roll done, in one transaction."""
        now = now or _now()
        check_transition(roll.state, RollState.DONE)
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.rolls)
                .where(
                    s.rolls.c.id == roll.id,
                    s.rolls.c.state == RollState.SWEEPING.value,
                    s.rolls.c.owner == owner,
                )
                .values(
                    state=RollState.DONE.value,
                    finished_at=_db(now),
                    rows=rows,
                    bytes=nbytes,
                    files_after=files,
                )
            ).rowcount
            if updated != 1:
                raise ConflictError(f"roll {roll.id} moved on without us")
            updated = conn.execute(
                sa.update(s.partitions)
                .where(
                    s.partitions.c.id == roll.partition_id,
                    s.partitions.c.state == PartitionState.ROLLING.value,
                )
                .values(
                    state=PartitionState.STANDARD.value,
                    rolled_at=_db(now),
                    chunks=chunks,
                    rows=rows,
                    bytes=nbytes,
                    files=files,
                )
            ).rowcount
            if updated != 1:
                raise ConflictError(f"partition of roll {roll.id} is not rolling")
        return self.get_roll(roll.id)

    # -- chunks ----------------------------------------------------------------------------
    @staticmethod
    def _chunk_from_row(row: Any) -> Chunk:
        m = row._mapping
        return Chunk(
            id=m["id"],
            table_id=m["table_id"],
            token=m["token"],
            state=ChunkState(m["state"]),
            created_at=_out(m["created_at"]),
            expires_at=_out(m["expires_at"]),
            files=tuple(StagedFile(**f) for f in m["files"]),
            rows=m["rows"],
            bytes=m["bytes"],
            committing_since=_out(m["committing_since"]),
            attempt=m["attempt"],
            base_version=m["base_version"],
            version=m["version"],
            partitions=tuple(utc(datetime.fromisoformat(v)) for v in m["partitions"]),
            dead_letter_rows=m["dead_letter_rows"],
            late_rows=m["late_rows"],
            error=m["error"],
        )

    def reserve_chunk(
        self, table_id: int, token: str | None, ttl: timedelta, now: datetime | None = None
    ) -> Chunk:
        """Reserve a new chunk, or return the chunk already reserved under ``token``."""
        now = now or _now()
        if token is not None:
            existing = self.find_chunk_by_token(table_id, token)
            if existing is not None:
                return existing
        chunk_id = str(uuid.uuid4())
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.chunks).values(
                        id=chunk_id,
                        table_id=table_id,
                        token=token,
                        state=ChunkState.RESERVED.value,
                        created_at=_db(now),
                        expires_at=_db(now + ttl),
                        files=[],
                        rows=0,
                        bytes=0,
                        partitions=[],
                        dead_letter_rows=0,
                        late_rows=0,
                    )
                )
        except IntegrityError:
            if token is None:
                raise
            found = self.find_chunk_by_token(table_id, token)
            assert found is not None
            return found
        return self.get_chunk(chunk_id)

    def find_chunk_by_token(self, table_id: int, token: str) -> Chunk | None:
        with self.tx() as conn:
            row = conn.execute(
                sa.select(s.chunks).where(s.chunks.c.table_id == table_id, s.chunks.c.token == token)
            ).first()
        return None if row is None else self._chunk_from_row(row)

    def get_chunk(self, chunk_id: str) -> Chunk:
        with self.tx() as conn:
            row = conn.execute(sa.select(s.chunks).where(s.chunks.c.id == chunk_id)).first()
        if row is None:
            raise NotFoundError(f"chunk {chunk_id} does not exist")
        return self._chunk_from_row(row)

    def list_chunks(
        self, table_id: int | None = None, states: Sequence[ChunkState] | None = None
    ) -> list[Chunk]:
        q = sa.select(s.chunks)
        if table_id is not None:
            q = q.where(s.chunks.c.table_id == table_id)
        if states:
            q = q.where(s.chunks.c.state.in_([st.value for st in states]))
        with self.tx() as conn:
            rows = conn.execute(q.order_by(s.chunks.c.created_at)).all()
        return [self._chunk_from_row(r) for r in rows]

    def _update_chunk(
        self, chunk: Chunk, expected: Sequence[ChunkState], extra: Any = None, **values: Any
    ) -> Chunk:
        q = sa.update(s.chunks).where(
            s.chunks.c.id == chunk.id, s.chunks.c.state.in_([st.value for st in expected])
        )
        if extra is not None:
            q = q.where(extra)
        with self.tx() as conn:
            updated = conn.execute(q.values(**values)).rowcount
        if updated != 1:
            current = self.get_chunk(chunk.id)
            raise ConflictError(
                f"chunk {chunk.id} is {current.state.value}, expected {'/'.join(e.value for e in expected)}"
            )
        return self.get_chunk(chunk.id)

    def record_chunk_files(
        self, chunk: Chunk, files: Sequence[StagedFile], *, dead_letter_rows: int = 0
    ) -> Chunk:
        """Record the files written for a reserved chunk (replacing an earlier attempt's)."""
        return self._update_chunk(
            chunk,
            [ChunkState.RESERVED],
            files=[f.model_dump(mode="json") for f in files],
            rows=sum(f.rows for f in files),
            bytes=sum(f.bytes for f in files),
            dead_letter_rows=dead_letter_rows,
        )

    def begin_commit(self, chunk: Chunk, base_version: int, now: datetime | None = None) -> Chunk:
        """RESERVED → COMMITTING, stamping this attempt; only one committer wins."""
        now = now or _now()
        check_transition(chunk.state, ChunkState.COMMITTING)
        return self._update_chunk(
            chunk,
            [ChunkState.RESERVED],
            s.chunks.c.expires_at > _db(now),
            state=ChunkState.COMMITTING.value,
            committing_since=_db(now),
            attempt=str(uuid.uuid4()),
            base_version=base_version,
        )

    def take_over_commit(self, chunk: Chunk, now: datetime | None = None) -> Chunk:
        """Replace a stale commit attempt (whose deadline has passed) by a new one."""
        now = now or _now()
        return self._update_chunk(
            chunk,
            [ChunkState.COMMITTING],
            s.chunks.c.attempt == chunk.attempt,
            committing_since=_db(now),
            attempt=str(uuid.uuid4()),
        )

    def finish_commit(
        self, chunk: Chunk, version: int, partitions: Sequence[datetime], late_rows: int = 0
    ) -> Chunk:
        check_transition(chunk.state, ChunkState.COMMITTED)
        return self._update_chunk(
            chunk,
            [ChunkState.COMMITTING],
            state=ChunkState.COMMITTED.value,
            version=version,
            partitions=[utc(p).isoformat() for p in partitions],
            late_rows=late_rows,
        )

    def abort_chunk(self, chunk: Chunk, error: str | None = None) -> Chunk:
        check_transition(chunk.state, ChunkState.ABORTED)
        return self._update_chunk(chunk, [chunk.state], state=ChunkState.ABORTED.value, error=error)

    def expire_chunks(self, now: datetime | None = None) -> list[Chunk]:
        """Reserved chunks past their expiry become EXPIRED; returns them (their files may go)."""
        now = now or _now()
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.chunks).where(
                    s.chunks.c.state == ChunkState.RESERVED.value, s.chunks.c.expires_at <= _db(now)
                )
            ).all()
            expired = []
            for row in rows:
                if conn.execute(
                    sa.update(s.chunks)
                    .where(s.chunks.c.id == row.id, s.chunks.c.state == ChunkState.RESERVED.value)
                    .values(state=ChunkState.EXPIRED.value, error="expired before commit")
                ).rowcount:
                    expired.append(row.id)
        return [self.get_chunk(cid) for cid in expired]

    def stale_commits(self, older_than: datetime) -> list[Chunk]:
        """COMMITTING chunks whose attempt began before ``older_than`` (their writer is gone)."""
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.chunks).where(
                    s.chunks.c.state == ChunkState.COMMITTING.value,
                    s.chunks.c.committing_since < _db(older_than),
                )
            ).all()
        return [self._chunk_from_row(r) for r in rows]

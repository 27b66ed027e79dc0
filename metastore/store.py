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

from metastore import clock
from metastore import schema as s
from metastore.errors import (
    AlreadyExistsError,
    ConflictError,
    LeaseLostError,
    MetastoreUnavailableError,
    NotFoundError,
    UserInputError,
)
from metastore.models import (
    ApiToken,
    Chunk,
    ChunkState,
    ChunkSummary,
    Column,
    LateDataPolicy,
    Lease,
    Mode,
    Partition,
    PartitionState,
    Roll,
    RollAttempt,
    RollOutcome,
    RollState,
    Scope,
    StagedFile,
    Table,
    TableKind,
    TableName,
    TableSpec,
    check_token_name,
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
    return clock.now()


def normalize_url(url: str) -> str:
    """Accept ``postgres://`` and ``postgresql://`` URLs and use the psycopg 3 driver for them."""
    for prefix in ("postgres://", "postgresql://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


def default_url(warehouse: str | Path) -> str:
    """The embedded metastore: a SQLite file inside the warehouse (hidden from Parquet readers)."""
    return f"sqlite:///{Path(warehouse).resolve() / '_metastore.sqlite'}"


def _new_id(result: Any) -> int:
    """The primary key of the row an INSERT just added."""
    key = result.inserted_primary_key
    assert key is not None, "not an INSERT"
    return int(key[0])


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
            "max_future_s": int(spec.max_future.total_seconds()),
            "max_age_s": None if spec.max_age is None else int(spec.max_age.total_seconds()),
            "dead_letter": spec.dead_letter,
            "created_at": _db(now),
        }
        try:
            with self.tx() as conn:
                table_id = _new_id(conn.execute(sa.insert(s.tables).values(**row)))
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
            max_future=timedelta(seconds=m["max_future_s"]),
            max_age=None if m["max_age_s"] is None else timedelta(seconds=m["max_age_s"]),
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
        check_transition(partition.state, PartitionState.ROLLING)
        roll_id = str(uuid.uuid4())
        with self.tx() as conn:
            if fence is not None:
                self._check_fence(conn, fence, now)
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
            ConflictError: another live owner holds the roll.
            LeaseLostError: ``fence`` (if given) is no longer held.
        """
        now = now or _now()
        with self.tx() as conn:
            if fence is not None:
                self._check_fence(conn, fence, now)
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
                    error=None,
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
            content_digest=m["content_digest"],
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
        # UPDATE … RETURNING: the new row in the same round trip (SQLite ≥ 3.35, PostgreSQL)
        with self.tx() as conn:
            row = conn.execute(q.values(**values).returning(*s.chunks.c)).first()
        if row is None:
            current = self.get_chunk(chunk.id)
            raise ConflictError(
                f"chunk {chunk.id} is {current.state.value}, expected {'/'.join(e.value for e in expected)}"
            )
        return self._chunk_from_row(row)

    def record_chunk_files(
        self,
        chunk: Chunk,
        files: Sequence[StagedFile],
        *,
        dead_letter_rows: int = 0,
        content_digest: str | None = None,
    ) -> tuple[Chunk, tuple[StagedFile, ...]]:
        """Record the files written for a reserved chunk, replacing an earlier attempt's.

        ``content_digest`` identifies the content they hold (see ``begin_commit``).

        Returns:
            The chunk, and the files it had until now (read in the same transaction): the
            caller may delete those the new set does not keep, and only those, only now.

        Raises:
            ConflictError: the chunk is not reserved any more (a commit began, or it was
                aborted or expired); nothing was recorded.
        """
        with self.tx() as conn:
            q = sa.select(s.chunks.c.files).where(
                s.chunks.c.id == chunk.id, s.chunks.c.state == ChunkState.RESERVED.value
            )
            before = conn.execute(q if self.is_sqlite else q.with_for_update()).first()
            row = None
            if before is not None:
                row = conn.execute(
                    sa.update(s.chunks)
                    .where(s.chunks.c.id == chunk.id, s.chunks.c.state == ChunkState.RESERVED.value)
                    .values(
                        files=[f.model_dump(mode="json") for f in files],
                        rows=sum(f.rows for f in files),
                        bytes=sum(f.bytes for f in files),
                        dead_letter_rows=dead_letter_rows,
                        content_digest=content_digest,
                    )
                    .returning(*s.chunks.c)
                ).first()
        if before is None or row is None:
            current = self.get_chunk(chunk.id)
            raise ConflictError(f"chunk {chunk.id} is {current.state.value}, expected reserved")
        return self._chunk_from_row(row), tuple(StagedFile(**f) for f in before.files)

    def begin_commit(
        self,
        chunk: Chunk,
        base_version: int,
        now: datetime | None = None,
        content_digest: str | None = None,
    ) -> Chunk:
        """RESERVED → COMMITTING, stamping this attempt; only one committer wins.

        With ``content_digest``, only if the staged content is that content (another producer
        may have re-staged the chunk under the same token with other data meanwhile).
        """
        now = now or _now()
        check_transition(chunk.state, ChunkState.COMMITTING)
        guard = s.chunks.c.expires_at > _db(now)
        if content_digest is not None:
            guard = sa.and_(
                guard,
                sa.or_(s.chunks.c.content_digest.is_(None), s.chunks.c.content_digest == content_digest),
            )
        return self._update_chunk(
            chunk,
            [ChunkState.RESERVED],
            guard,
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
        """RESERVED or COMMITTING → ABORTED; a COMMITTING chunk only by the attempt that holds it.

        An attempt that was taken over (it stalled past twice the commit timeout) must not abort
        the chunk its successor may have committed meanwhile, nor then delete its files.
        """
        check_transition(chunk.state, ChunkState.ABORTED)
        extra = s.chunks.c.attempt == chunk.attempt if chunk.state is ChunkState.COMMITTING else None
        return self._update_chunk(chunk, [chunk.state], extra, state=ChunkState.ABORTED.value, error=error)

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

    def newest_version(self, table_id: int) -> int:
        """The newest Delta version at which the metastore recorded a commit of the table (-1: none).

        Committed chunks, seals and sweeps: the Delta log must reach at least this far. (Chunks
        pruned into summaries are older than their partition's sweep, which stays recorded.)
        """
        with self.tx() as conn:
            chunk = conn.execute(
                sa.select(sa.func.max(s.chunks.c.version)).where(
                    s.chunks.c.table_id == table_id, s.chunks.c.state == ChunkState.COMMITTED.value
                )
            ).scalar()
            roll = conn.execute(
                sa.select(sa.func.max(s.rolls.c.seal_version), sa.func.max(s.rolls.c.sweep_version)).where(
                    s.rolls.c.table_id == table_id
                )
            ).one()
        return max(v if v is not None else -1 for v in (chunk, *roll))

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

    # -- leases (leadership with fencing) ----------------------------------------------------
    @staticmethod
    def _lease_from_row(row: Any) -> Lease:
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

    def get_lease(self, name: str) -> Lease | None:
        with self.tx() as conn:
            row = conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).first()
        return None if row is None else self._lease_from_row(row)

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
                    return self._lease_from_row(
                        conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).one()
                    )
                current = self._lease_from_row(row)
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
                return self._lease_from_row(
                    conn.execute(sa.select(s.leases).where(s.leases.c.name == name)).one()
                )
        except IntegrityError:
            return None  # another contender created the lease row first

    def renew_lease(self, lease: Lease, ttl: timedelta, now: datetime | None = None) -> Lease:
        """Extend a lease we hold, before it expires; the epoch stays.

        Raises:
            LeaseLostError: it expired, or another holder has it (a higher epoch).
        """
        now = now or _now()
        with self.tx() as conn:
            updated = conn.execute(
                sa.update(s.leases)
                .where(
                    s.leases.c.name == lease.name,
                    s.leases.c.holder == lease.holder,
                    s.leases.c.epoch == lease.epoch,
                    s.leases.c.expires_at > _db(now),
                )
                .values(renewed_at=_db(now), expires_at=_db(now + ttl))
            ).rowcount
            if updated != 1:
                raise LeaseLostError(
                    f"lease {lease.name} (epoch {lease.epoch}) is no longer held by {lease.holder}"
                )
            row = conn.execute(sa.select(s.leases).where(s.leases.c.name == lease.name)).one()
        return self._lease_from_row(row)

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

    @staticmethod
    def _check_fence(conn: Connection, fence: Lease, now: datetime) -> None:
        """Inside a transaction: fail unless ``fence`` is still held, live, at its epoch.

        A conditional no-op update rather than a read: on PostgreSQL it also locks the lease
        row until the transaction ends, so no other process can take the lease over between
        this check and the caller's own writes (on SQLite the write lock does the same).
        """
        updated = conn.execute(
            sa.update(s.leases)
            .where(
                s.leases.c.name == fence.name,
                s.leases.c.holder == fence.holder,
                s.leases.c.epoch == fence.epoch,
                s.leases.c.expires_at > _db(now),
            )
            .values(epoch=s.leases.c.epoch)
        ).rowcount
        if updated != 1:
            raise LeaseLostError(
                f"lease {fence.name} epoch {fence.epoch} is no longer held by {fence.holder}; "
                "a newer leader (or none) has it"
            )

    def renew_roll_leases(
        self, owner: str, lease: timedelta, fence: Lease | None = None, now: datetime | None = None
    ) -> int:
        """Extend the lease of every unfinished roll ``owner`` holds (its heartbeat); returns how many.

        Raises:
            LeaseLostError: ``fence`` is no longer held (then nothing is extended, and the
                rolls lapse so the new leader can resume them).
        """
        now = now or _now()
        with self.tx() as conn:
            if fence is not None:
                self._check_fence(conn, fence, now)
            return int(
                conn.execute(
                    sa.update(s.rolls)
                    .where(s.rolls.c.owner == owner, s.rolls.c.state != RollState.DONE.value)
                    .values(lease_until=_db(now + lease))
                ).rowcount
            )

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

    # -- roll attempts (the roll daemon's history) -------------------------------------------
    @staticmethod
    def _attempt_from_row(row: Any) -> RollAttempt:
        m = row._mapping
        return RollAttempt(
            id=m["id"],
            table_id=m["table_id"],
            partition_value=_out(m["partition_value"]),
            roll_id=m["roll_id"],
            owner=m["owner"],
            epoch=m["epoch"],
            started_at=_out(m["started_at"]),
            finished_at=_out(m["finished_at"]),
            outcome=RollOutcome(m["outcome"]),
            resumed=m["resumed"],
            rows=m["rows"],
            error=m["error"],
            failures=m["failures"],
            retry_at=_out(m["retry_at"]),
        )

    def record_roll_attempt(
        self,
        *,
        table_id: int,
        partition_value: datetime | None,
        owner: str,
        started_at: datetime,
        finished_at: datetime,
        outcome: RollOutcome,
        roll_id: str | None = None,
        epoch: int | None = None,
        resumed: bool = False,
        rows: int | None = None,
        error: str | None = None,
        failures: int = 0,
        retry_at: datetime | None = None,
    ) -> RollAttempt:
        with self.tx() as conn:
            attempt_id = _new_id(
                conn.execute(
                    sa.insert(s.roll_attempts).values(
                        table_id=table_id,
                        partition_value=_db(partition_value),
                        roll_id=roll_id,
                        owner=owner,
                        epoch=epoch,
                        started_at=_db(started_at),
                        finished_at=_db(finished_at),
                        outcome=outcome.value,
                        resumed=resumed,
                        rows=rows,
                        error=None if error is None else error[:4000],
                        failures=failures,
                        retry_at=_db(retry_at),
                    )
                )
            )
            row = conn.execute(sa.select(s.roll_attempts).where(s.roll_attempts.c.id == attempt_id)).one()
        return self._attempt_from_row(row)

    def list_roll_attempts(self, table_id: int | None = None, limit: int = 20) -> list[RollAttempt]:
        """The newest attempts first."""
        q = sa.select(s.roll_attempts)
        if table_id is not None:
            q = q.where(s.roll_attempts.c.table_id == table_id)
        with self.tx() as conn:
            rows = conn.execute(q.order_by(s.roll_attempts.c.id.desc()).limit(limit)).all()
        return [self._attempt_from_row(r) for r in rows]

    def latest_roll_attempts(self) -> dict[int, RollAttempt]:
        """Each table's newest attempt (its current failure streak and retry time)."""
        newest = (
            sa.select(sa.func.max(s.roll_attempts.c.id))
            .group_by(s.roll_attempts.c.table_id)
            .scalar_subquery()
        )
        with self.tx() as conn:
            rows = conn.execute(sa.select(s.roll_attempts).where(s.roll_attempts.c.id.in_(newest))).all()
        return {r.table_id: self._attempt_from_row(r) for r in rows}

    def prune_roll_attempts(self, before: datetime) -> int:
        """Forget attempts that finished before ``before``, keeping each table's newest."""
        newest = (
            sa.select(sa.func.max(s.roll_attempts.c.id))
            .group_by(s.roll_attempts.c.table_id)
            .scalar_subquery()
        )
        with self.tx() as conn:
            return int(
                conn.execute(
                    sa.delete(s.roll_attempts).where(
                        s.roll_attempts.c.finished_at < _db(before), s.roll_attempts.c.id.not_in(newest)
                    )
                ).rowcount
            )

    # -- counts for monitoring ---------------------------------------------------------------
    def partition_counts(self) -> dict[int, dict[PartitionState, int]]:
        """Per table, how many partitions are in each state."""
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.partitions.c.table_id, s.partitions.c.state, sa.func.count()).group_by(
                    s.partitions.c.table_id, s.partitions.c.state
                )
            ).all()
        out: dict[int, dict[PartitionState, int]] = {}
        for table_id, state, n in rows:
            out.setdefault(table_id, {})[PartitionState(state)] = int(n)
        return out

    def pending_chunk_counts(self) -> dict[int, int]:
        """Per table, chunks reserved or committing (not yet visible, not yet given up)."""
        pending = [ChunkState.RESERVED.value, ChunkState.COMMITTING.value]
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(s.chunks.c.table_id, sa.func.count())
                .where(s.chunks.c.state.in_(pending))
                .group_by(s.chunks.c.table_id)
            ).all()
        return {int(t): int(n) for t, n in rows}

    # -- pruning chunk rows into per-partition summaries -------------------------------------
    def prune_chunks(
        self, table_id: int, before: datetime, now: datetime | None = None, batch: int = 1000
    ) -> int:
        """Replace rows of old, finished chunks by per-partition summaries; returns how many went.

        A chunk row goes only when nothing can need it any more:

        - committed: every partition it landed in is standard, rolled before ``before``;
        - aborted or expired: created before ``before``.

        Its idempotency token goes with it: a retry under that token afterwards would be a new
        chunk, so ``before`` must lie further back than any producer retries (the roll
        daemon's default is 7 days). Partition rows (what ``describe`` shows) stay untouched.
        """
        now = now or _now()
        terminal = [ChunkState.COMMITTED.value, ChunkState.ABORTED.value, ChunkState.EXPIRED.value]
        with self.tx() as conn:
            rolled = {
                _out(v)
                for v in conn.execute(
                    sa.select(s.partitions.c.value).where(
                        s.partitions.c.table_id == table_id,
                        s.partitions.c.state == PartitionState.STANDARD.value,
                        s.partitions.c.rolled_at < _db(before),
                    )
                ).scalars()
            }
        pruned = 0
        cursor: tuple[datetime, str] | None = None
        c = s.chunks.c
        while True:
            q = sa.select(s.chunks).where(
                c.table_id == table_id, c.state.in_(terminal), c.created_at < _db(before)
            )
            if cursor is not None:
                q = q.where(
                    sa.or_(c.created_at > cursor[0], sa.and_(c.created_at == cursor[0], c.id > cursor[1]))
                )
            with self.tx() as conn:
                rows = conn.execute(q.order_by(c.created_at, c.id).limit(batch)).all()
            if not rows:
                return pruned
            cursor = (rows[-1].created_at, rows[-1].id)
            sums: dict[tuple[datetime | None, ChunkState], dict[str, Any]] = {}
            ids: list[str] = []
            for row in rows:
                chunk = self._chunk_from_row(row)
                if chunk.state is ChunkState.COMMITTED and any(p not in rolled for p in chunk.partitions):
                    continue
                ids.append(chunk.id)
                for key, part in summarize_chunk(chunk).items():
                    acc = sums.setdefault(key, dict.fromkeys(_SUMMED, 0) | {"first": None, "last": None})
                    for k in _SUMMED:
                        acc[k] += part[k]
                    acc["first"] = min(filter(None, (acc["first"], chunk.created_at)))
                    acc["last"] = max(filter(None, (acc["last"], chunk.created_at)))
            if not ids:
                continue
            with self.tx() as conn:
                for (value, state), acc in sums.items():
                    conn.execute(
                        sa.insert(s.chunk_summaries).values(
                            table_id=table_id,
                            partition_value=_db(value),
                            state=state.value,
                            **{k: acc[k] for k in _SUMMED},
                            first_created_at=_db(acc["first"]),
                            last_created_at=_db(acc["last"]),
                            pruned_at=_db(now),
                        )
                    )
                deleted = conn.execute(
                    sa.delete(s.chunks).where(c.id.in_(ids), c.state.in_(terminal))
                ).rowcount
                if deleted != len(ids):  # terminal states never change: someone else pruned them
                    raise ConflictError(f"chunks of table #{table_id} were pruned concurrently")
            pruned += len(ids)

    def chunk_summaries(self, table_id: int) -> list[ChunkSummary]:
        """The summaries of pruned chunks, one per partition and state (oldest partition first)."""
        cs = s.chunk_summaries.c
        with self.tx() as conn:
            rows = conn.execute(
                sa.select(
                    cs.partition_value,
                    cs.state,
                    *(sa.func.sum(cs[k]).label(k) for k in _SUMMED),
                    sa.func.min(cs.first_created_at).label("first"),
                    sa.func.max(cs.last_created_at).label("last"),
                )
                .where(cs.table_id == table_id)
                .group_by(cs.partition_value, cs.state)
                .order_by(cs.partition_value, cs.state)
            ).all()
        return [
            ChunkSummary(
                table_id=table_id,
                partition_value=_out(r.partition_value),
                state=ChunkState(r.state),
                **{k: int(getattr(r, k)) for k in _SUMMED},
                first_created_at=_out(r.first),
                last_created_at=_out(r.last),
            )
            for r in rows
        ]

    # -- API tokens (the HTTP API's bearer tokens) -------------------------------------------
    @staticmethod
    def _token_from_row(row: Any) -> ApiToken:
        m = row._mapping
        return ApiToken(
            id=m["id"],
            name=m["name"],
            token_hash=m["token_hash"],
            scopes=tuple(Scope.parse(x) for x in m["scopes"]),
            created_at=_out(m["created_at"]),
        )

    def create_token(
        self, name: str, token_hash: str, scopes: Sequence[Scope], now: datetime | None = None
    ) -> ApiToken:
        """Record a token by its digest (the caller hashes it; the token itself is never stored).

        Raises:
            AlreadyExistsError: a token of that name exists (revoke it first).
        """
        check_token_name(name)
        if not scopes:
            raise UserInputError(f"token {name!r} needs at least one scope")
        now = now or _now()
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.tokens).values(
                        name=name,
                        token_hash=token_hash,
                        scopes=[str(x) for x in scopes],
                        created_at=_db(now),
                    )
                )
                row = conn.execute(sa.select(s.tokens).where(s.tokens.c.name == name)).one()
        except IntegrityError:
            raise AlreadyExistsError(f"token {name!r} exists already; revoke it first") from None
        return self._token_from_row(row)

    def find_token_by_hash(self, token_hash: str) -> ApiToken | None:
        """The token whose digest is ``token_hash``, or None (unknown or revoked)."""
        with self.tx() as conn:
            row = conn.execute(sa.select(s.tokens).where(s.tokens.c.token_hash == token_hash)).first()
        return None if row is None else self._token_from_row(row)

    def list_tokens(self) -> list[ApiToken]:
        with self.tx() as conn:
            rows = conn.execute(sa.select(s.tokens).order_by(s.tokens.c.name)).all()
        return [self._token_from_row(r) for r in rows]

    def revoke_token(self, name: str) -> ApiToken:
        """Delete the token ``name``: from then on it authenticates nothing.

        Raises:
            NotFoundError: no token has that name.
        """
        with self.tx() as conn:
            row = conn.execute(sa.select(s.tokens).where(s.tokens.c.name == name)).first()
            if row is None or not conn.execute(sa.delete(s.tokens).where(s.tokens.c.id == row.id)).rowcount:
                raise NotFoundError(f"token {name!r} does not exist")
        return self._token_from_row(row)

    def ping(self) -> None:
        """A round trip to the database (health checks); raises MetastoreUnavailableError."""
        with self.tx() as conn:
            conn.execute(sa.text("SELECT 1"))


_SUMMED = ("chunks", "rows", "bytes", "dead_letter_rows", "late_rows")


def summarize_chunk(chunk: Chunk) -> dict[tuple[datetime | None, ChunkState], dict[str, int]]:
    """What one chunk adds to the summary of each partition it landed in (see ChunkSummary)."""
    extra = {"dead_letter_rows": chunk.dead_letter_rows, "late_rows": chunk.late_rows}
    if chunk.state is not ChunkState.COMMITTED or not chunk.partitions:
        return {(None, chunk.state): {"chunks": 1, "rows": chunk.rows, "bytes": chunk.bytes, **extra}}
    by_period = any(f.period is not None for f in chunk.files)
    out: dict[tuple[datetime | None, ChunkState], dict[str, int]] = {}
    for n, value in enumerate(sorted(chunk.partitions)):
        files = [f for f in chunk.files if not by_period or (f.period is not None and utc(f.period) == value)]
        out[(value, chunk.state)] = {
            "chunks": 1,
            "rows": sum(f.rows for f in files),
            "bytes": sum(f.bytes for f in files),
            # the companions' rows belong to the chunk, not to a partition: count them once
            **(extra if n == 0 else {"dead_letter_rows": 0, "late_rows": 0}),
        }
    return out

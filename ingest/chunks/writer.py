"""The chunk writer: a chunk's life, reserve → stage → commit (or abort), for one table.

:class:`ChunkWriter` runs the protocol described in ``ingest/chunks/__init__.py``: it reserves a
chunk under an idempotency key, parses and stages its data (bad records to the dead-letter
table: ``late.py``), moves it RESERVED → COMMITTING and hands it to its table's group commit
(``group_commit.py``), or aborts it. Taking over a COMMITTING chunk whose attempt died, and
following a table whose namespace moved to another metastore, are its job too.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from ingest.chunks.base import CommitResult, DeadLetter, remove_staged
from ingest.chunks.group_commit import base_version, commit_in_group
from ingest.chunks.late import abort_dead_letters, stage_dead_letters
from ingest.commit_holders import commit_holder
from ingest.config import ChunkConfig
from ingest.digests import digest_bytes
from ingest.errors import (
    ChunkBusyError,
    ChunkStateError,
    IdempotencyConflictError,
    MalformedChunkError,
)
from ingest.evolution import NewFields
from ingest.formats import Format, parse, parse_arrow
from ingest.keys import staged_versions
from ingest.records import BadRecord, Parsed, RecordValidator, TimeBounds
from metastore import clock
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint, pausepoint
from metastore.delta.files import remove_file, write_parquet
from metastore.delta.layout import staging_path
from metastore.delta.stats import ranges_stats
from metastore.delta.warehouse import Warehouse
from metastore.durations import format_duration
from metastore.errors import (
    ConflictError,
    NamespaceMovingError,
    NotFoundError,
    QuotaExceededError,
    SchemaConflictError,
    TableChangedError,
)
from metastore.models import Chunk, ChunkState, Column, Mode, StagedFile, Table, iso, period_start

T = TypeVar("T")


def require_records(count: int) -> None:
    """A producer's chunk must hold records: an empty file is a mistake, not a 0-row commit."""
    if count == 0:
        raise MalformedChunkError("the data holds no records; nothing was committed")


def time_bounds(table: Table, now: datetime) -> TimeBounds | None:
    """The event times rows of ``table`` may have at ``now`` (event-time tables only)."""
    span = table.event_time_range(now)
    if span is None:
        return None
    why = f"{format_duration(table.max_future)} ahead of now: the table's max-future"
    return TimeBounds(table.time_column, span[0], span[1], why)


def write_staged_files(
    warehouse: Warehouse,
    table: Table,
    prefix: str,
    data: pa.Table,
    columns: Sequence[Column] | None = None,
) -> list[StagedFile]:
    """Write ``data`` to the table's staging area as ``<prefix>-<k>.parquet`` files.

    One file in arrival mode (the partition is chosen at commit time); one file per period in
    event-time mode. Runs wherever the rows are: in the writer, or in a Spark task (with a
    ``prefix`` of ``<chunk>-<task>``), so it touches storage only, never the metastore.
    ``columns``: the data's columns when they are not the table's (:attr:`Parsed.columns`): each
    file records them, so its commit adds the ones the table lacks. A keyed table's ``data`` is
    staged as its newest version of each key (``ingest/keys.py``).
    """
    if data.num_rows == 0:
        return []
    data = staged_versions(table.keys, data)  # a keyed table's: its newest version of each key
    groups: list[tuple[datetime | None, pa.Table]]
    if table.mode is Mode.EVENT_TIME:
        periods = [period_start(ts, table.roll_every) for ts in data.column(table.time_column).to_pylist()]
        period_array = pa.array(periods, pa.timestamp("us", tz="UTC"))
        groups = [
            (value, data.filter(pc.equal(period_array, pa.scalar(value, period_array.type))))
            for value in sorted(set(periods))
        ]
    else:
        groups = [(None, data)]
    files = []
    for k, (period, part) in enumerate(groups):
        path = staging_path(prefix, k)
        size = write_parquet(table, path, part)
        kept = tuple(columns) if columns is not None else None
        ranges = ranges_stats(part, kept or table.columns)  # readers skip files by them
        files.append(
            StagedFile(path=path, rows=part.num_rows, bytes=size, period=period, columns=kept, stats=ranges)
        )
    return files


# How many times :meth:`ChunkWriter.write` parses a chunk again after another writer changed the
# table's schema under it (each time the chunk is parsed as the table is then; more than a few in a
# row means the schema changes faster than a chunk commits).
_SCHEMA_RETRIES = 3


@dataclass
class ChunkWriter:
    """Writes chunks into one table. Safe to use from many processes at once."""

    catalog: Catalog
    table: Table
    config: ChunkConfig = field(default_factory=ChunkConfig)
    # A stream cannot answer "rejected" to a producer: rows for sealed partitions of a table
    # that rejects late data go to its dead-letter table instead (with the reason), and the
    # rest of the chunk commits.
    late_rows_to_dead_letter: bool = False

    def __post_init__(self) -> None:
        # The table's own metastore (its ids are that one's), if its access type lets it be written.
        self.catalog = self.catalog.home(self.table, write=True)

    @property
    def store(self) -> Any:
        return self.catalog.store

    @property
    def warehouse(self) -> Any:
        return self.catalog.warehouse

    # -- a namespace move --------------------------------------------------------------------
    def _rebinding(self, op: Callable[[], T]) -> T:
        """``op``, and once more in the table's new metastore if a move took it meanwhile.

        A NamespaceMovingError whose move has not flipped yet stands (the caller retries later).
        """
        try:
            return op()
        except (NamespaceMovingError, NotFoundError):
            if not self.rebind():
                raise
        return op()

    def rebind(self) -> bool:
        """Read the table again where its namespace lives now; whether that is another metastore."""
        try:
            found = self.catalog.rebound(self.table)
        except NotFoundError:
            return False  # dropped: the original error stands
        if found.metastore == self.table.metastore and found.id == self.table.id:
            return False
        self.table = found
        self.catalog = self.catalog.home(found, write=True)
        return True

    def writer_for(self, table: Table) -> ChunkWriter:
        """A writer of ``table`` (a companion of this one's) with this writer's catalog and settings."""
        return ChunkWriter(self.catalog, table, self.config)

    # -- reserve / write -------------------------------------------------------------------
    def reserve(self, key: str | None = None) -> Chunk:
        """A new chunk, or the one reserved already under the idempotency ``key``."""
        return self.store.reserve_chunk(self.table.id, key, self.config.ttl)

    def validator(self, now: datetime | None = None, added: Sequence[Column] = ()) -> RecordValidator:
        """The validator of this table's records; ``added``: new columns an earlier batch of the same
        chunk brought (schema evolution), which the records may hold too."""
        table = self.table
        new_fields = NewFields(
            (*table.columns, *added),
            table.partition_column,
            table.schema_evolution,
            table.max_new_columns,
            earlier=len(added),
        )
        return RecordValidator(
            (*table.columns, *added),
            [table.time_column],
            self.config.max_value_bytes,
            self.config.max_rows,
            time_bounds(table, now or clock.now()),
            new_fields,
            added,
            table.keys,
        )

    def parse(self, content: bytes, fmt: Format | str, added: Sequence[Column] = ()) -> Parsed:
        """``content`` checked against the table's columns (and ``added``: see :meth:`validator`).

        Records that bring fields the table lacks, on a table whose schema evolves, make the
        writer read the table's columns again first (another writer may have added them since
        this one read the table), so they are parsed as the columns they are now.
        """
        parsed = parse(content, fmt, self.validator(added=added))
        if parsed.new_columns((*self.table.columns, *added)) and self.refresh_columns():
            parsed = parse(content, fmt, self.validator(added=[c for c in added if c.name not in self.names]))
        return parsed

    @property
    def names(self) -> set[str]:
        """The names of the table's columns, as this writer knows them."""
        return {c.name for c in self.table.columns}

    def refresh_columns(self) -> bool:
        """Read the table's columns again from its metastore; whether they changed since it was read."""
        fresh = self.store.get_table_by_id(self.table.id)
        if fresh.columns == self.table.columns:
            return False
        self.table = self.table.model_copy(update={"columns": fresh.columns})
        return True

    def schema_changed(self, columns: Sequence[Column]) -> None:
        """Learn the table's columns after a commit of this writer's added some (the log's, newest)."""
        if tuple(columns) != self.table.columns:
            self.table = self.table.model_copy(update={"columns": tuple(columns)})

    def stage(self, chunk: Chunk, content: bytes, fmt: Format | str, source: str = "") -> Chunk:
        """Parse ``content`` and stage it as the chunk's data (replacing an earlier attempt's);
        ``fmt`` a :class:`Format` or its name (``"jsonl"``), as :func:`ingest.formats.parse` takes it."""
        return self.stage_parsed(chunk, self.parse(content, fmt), source=source, digest=digest_bytes(content))

    def stage_parsed(
        self, chunk: Chunk, parsed: Parsed, source: str = "", digest: str | None = None
    ) -> Chunk:
        chunk = self.store.get_chunk(chunk.id)
        self._require_state(chunk, ChunkState.RESERVED, "write to")
        return self._stage_reserved(chunk, parsed, source, digest)

    def _stage_reserved(self, chunk: Chunk, parsed: Parsed, source: str, digest: str | None) -> Chunk:
        """Stage ``parsed`` for a chunk just seen RESERVED (recording the files checks it again)."""
        self._check_bad(parsed.bad)
        require_records(parsed.good.num_rows + len(parsed.bad))
        # new names for every attempt: a file a commit may be adding is never overwritten
        prefix = f"{chunk.id}-{uuid.uuid4().hex[:8]}"
        files = write_staged_files(self.warehouse, self.table, prefix, parsed.good, parsed.columns)
        letters = [DeadLetter(b.position, b.reason, b.raw.encode(), source or None) for b in parsed.bad]
        return self._record_files(chunk, files, letters, digest)

    def stage_files(
        self,
        chunk: Chunk,
        files: Sequence[StagedFile],
        bad: Sequence[DeadLetter],
        digest: str | None = None,
        *,
        read_again: bool = True,
    ) -> Chunk:
        """Record files already written to staging (by :func:`write_staged_files`) as the chunk's data.

        This is how a distributed writer stages a chunk: each Spark task writes its own files,
        the driver records them all here and commits once. An earlier attempt's files that the
        new set does not replace are removed. ``read_again=False``: the caller read ``chunk`` and
        found it open just before (the record itself still refuses a chunk no longer open).
        """
        if read_again:
            chunk = self.store.get_chunk(chunk.id)
        self._require_state(chunk, ChunkState.RESERVED, "write to")
        self._check_bad(bad)
        return self._record_files(chunk, files, bad, digest)

    def _record_files(
        self,
        chunk: Chunk,
        files: Sequence[StagedFile],
        bad: Sequence[DeadLetter],
        digest: str | None = None,
    ) -> Chunk:
        """Make ``files`` the chunk's data; delete the replaced files only once that is recorded.

        A commit may begin between our state check and here: then the record fails, the files
        the commit is adding stay untouched, and only the files we just wrote go.
        """
        if bad:
            stage_dead_letters(self, chunk, bad, files=files)
        pausepoint("chunk-before-record-files")
        new = {f.path for f in files}
        try:
            recorded, replaced = self.store.record_chunk_files(
                chunk, files, dead_letter_rows=len(bad), content_digest=digest
            )
        except ConflictError:
            current = self.store.get_chunk(chunk.id)
            for path in new - {
                f.path for f in current.files
            }:  # ours, never recorded: nobody else refers to them
                remove_file(self.table, path)
            raise ChunkStateError(
                f"cannot write to chunk {chunk.id}: it is {current.state.value}"
                " (a commit began meanwhile; nothing of this upload was kept)"
            ) from None
        for old in replaced:
            if old.path not in new:
                remove_file(self.table, old.path)
        return recorded

    def _check_bad(self, bad: Sequence[BadRecord | DeadLetter]) -> None:
        if bad and not self.table.dead_letter:
            first = bad[0]
            more = f" (and {len(bad) - 1} more bad records)" if len(bad) > 1 else ""
            raise MalformedChunkError(f"record {first.position}: {first.reason}{more}; nothing was committed")

    # -- commit ----------------------------------------------------------------------------
    def commit(
        self, chunk_id: str, owner_is_dead: bool = False, content_digest: str | None = None
    ) -> CommitResult:
        """Commit a reserved chunk; calling it again (any process, any time) returns the same result.

        If the table's namespace moved meanwhile, the chunk (kept with its id) is committed in its
        new metastore.

        Args:
            chunk_id: the chunk.
            owner_is_dead: the caller knows that no other attempt on this chunk is alive (a
                Spark micro-batch replayed after its query restarted: one query runs per
                checkpoint), so a COMMITTING chunk is taken over at once instead of after
                twice the commit timeout.
            content_digest: the digest of the content the caller staged (or means to have
                committed, when it retries): a chunk that holds other content is a conflict.

        Raises:
            IdempotencyConflictError: the chunk holds (or committed) content other than ``content_digest``.
            ChunkStateError: the chunk was aborted or expired.
            ChunkBusyError: another attempt is committing it right now.
            LateDataError: its rows belong to sealed partitions and the table rejects late data.
            QuotaExceededError: it would take its namespace past its quota; it was aborted.
            CommitTimeoutError: the commit could not land before its deadline (retry resolves).
            NamespaceMovingError: the namespace is being moved and its route has not flipped (retry).
        """
        return self._rebinding(lambda: self._commit(chunk_id, owner_is_dead, content_digest))

    def commit_staged(self, chunk: Chunk, content_digest: str | None = None) -> CommitResult:
        """:meth:`commit` of a chunk this caller has just staged: ``chunk`` as staging returned it (read
        in that transaction), not read again; read afresh only if a move makes it commit elsewhere."""
        fresh = [chunk]
        return self._rebinding(
            lambda: (
                self._commit_chunk(fresh.pop(), False, content_digest)
                if fresh
                else self._commit(chunk.id, False, content_digest)
            )
        )

    def _commit(self, chunk_id: str, owner_is_dead: bool, content_digest: str | None) -> CommitResult:
        return self._commit_chunk(self.store.get_chunk(chunk_id), owner_is_dead, content_digest)

    def _commit_chunk(self, chunk: Chunk, owner_is_dead: bool, content_digest: str | None) -> CommitResult:
        """:meth:`commit` of ``chunk`` as just read from the metastore."""
        chunk_id = chunk.id
        if chunk.table_id != self.table.id:
            raise ChunkStateError(f"chunk {chunk_id} belongs to another table")
        self.check_digest(chunk, content_digest)
        if chunk.state is ChunkState.COMMITTED:
            return dataclasses.replace(self.result(chunk), repeated=True)
        if chunk.state in (ChunkState.ABORTED, ChunkState.EXPIRED):
            raise ChunkStateError(
                f"chunk {chunk.id} is {chunk.state.value}{': ' + chunk.error if chunk.error else ''}"
            )
        if chunk.state is ChunkState.RESERVED:
            if chunk.expires_at <= clock.now():
                raise ChunkStateError(
                    f"chunk {chunk.id} expired at {iso(chunk.expires_at)} before its commit"
                )
            holder = commit_holder(self.store)
            with holder.holding(chunk.id):  # this process is known to be alive while it commits
                try:
                    chunk = self.store.begin_commit(
                        chunk,
                        base_version(self),
                        content_digest=content_digest,
                        holder=holder.id,
                        keyed=self.table.keys is not None,
                    )
                except TableChangedError as exc:  # staged for the table as it was: never committed
                    self.abort(chunk.id, reason=str(exc))
                    self.table = self.catalog.rebound(self.table)  # the next chunk is written for it
                    raise
                except ConflictError:  # someone else moved or re-staged it; answer from its new state
                    return self._commit(chunk_id, False, content_digest)
                except QuotaExceededError as exc:  # refused whole: nothing of it stays behind
                    self.abort(chunk.id, reason=str(exc))
                    raise
                return commit_in_group(self, chunk, may_have_landed=False)
        # COMMITTING: a previous attempt died or is still running
        assert chunk.committing_since is not None
        stale_after = chunk.committing_since + 2 * self.config.commit_timeout
        holder = commit_holder(self.store)
        if clock.now() < stale_after and not owner_is_dead and not holder.attempt_over(chunk):
            raise ChunkBusyError(
                f"chunk {chunk.id} is being committed by another attempt; retry after {iso(stale_after)}"
            )
        with holder.holding(chunk.id):
            try:
                chunk = self.store.take_over_commit(chunk, holder=holder.id)
            except ConflictError:
                raise ChunkBusyError(f"chunk {chunk.id} was just taken over by another attempt") from None
            return commit_in_group(self, chunk, may_have_landed=True)

    def check_digest(self, chunk: Chunk, digest: str | None) -> None:
        """Raise :class:`IdempotencyConflictError` if ``chunk`` is holds other content than ``digest``."""
        if digest is None or chunk.content_digest is None or chunk.content_digest == digest:
            return
        if chunk.state is ChunkState.COMMITTED:
            what = f"committed {chunk.rows - chunk.late_rows} rows of other data at version {chunk.version}"
        else:
            what = f"is {chunk.state.value} with other data"
        named = (
            f"idempotency key {chunk.idempotency_key!r}"
            if chunk.idempotency_key is not None
            else "this chunk"
        )
        raise IdempotencyConflictError(
            f"{named} of table {self.table.name} was used for different content (chunk {chunk.id} "
            f"{what}); nothing of this content was written: use a new idempotency key for new data"
        )

    def result(self, chunk: Chunk) -> CommitResult:
        return CommitResult(
            chunk=chunk.id,
            table=str(self.table.name),
            partitions=[iso(p) for p in chunk.partitions],
            rows=chunk.rows - chunk.late_rows,
            version=chunk.version,
            dead_letter_rows=chunk.dead_letter_rows,
            late_rows=chunk.late_rows,
            idempotency_key=chunk.idempotency_key,
        )

    # -- abort -----------------------------------------------------------------------------
    def abort(self, chunk_id: str, reason: str = "aborted by the producer") -> Chunk:
        chunk = self.store.get_chunk(chunk_id)
        if chunk.state is ChunkState.ABORTED:
            return chunk
        if chunk.state is not ChunkState.RESERVED:
            raise ChunkStateError(f"chunk {chunk.id} is {chunk.state.value} and cannot be aborted")
        try:
            chunk = self.store.abort_chunk(chunk, error=reason)
        except ConflictError:
            return self.abort(chunk_id, reason)
        remove_staged(self, chunk)
        if chunk.dead_letter_rows:
            abort_dead_letters(self, chunk, reason)
        return chunk

    @staticmethod
    def _require_state(chunk: Chunk, state: ChunkState, verb: str) -> None:
        if chunk.state is not state:
            raise ChunkStateError(f"cannot {verb} chunk {chunk.id}: it is {chunk.state.value}")

    # -- one call --------------------------------------------------------------------------
    def write(self, content: bytes, fmt: Format, key: str | None = None, source: str = "") -> CommitResult:
        """Reserve, write and commit ``content`` as one chunk; with an idempotency ``key``, exactly once.

        The same key with the same content answers the original commit; with other content it
        raises :class:`IdempotencyConflictError`. If the table's namespace moved meanwhile, the
        chunk is written in its new metastore (NamespaceMovingError while the move has not flipped).
        """
        return self._rebinding(lambda: self._write(content, fmt, key, source))

    def _write(self, content: bytes, fmt: Format, key: str | None, source: str) -> CommitResult:
        digest = digest_bytes(content)
        chunk = self.reserve(key)
        try:
            return self._write_reserved(chunk, content, fmt, source, digest)
        except KeyboardInterrupt as exc:  # Ctrl-C, or a SIGTERM the caller turned into one
            exc.args = (self._let_go(chunk.id),)
            raise

    def _let_go(self, chunk_id: str) -> str:
        """After an interrupt: abort the chunk unless its commit began; what became of it, in words."""
        try:
            state = self.store.get_chunk(chunk_id).state
            if state is ChunkState.COMMITTED:
                return f"chunk {chunk_id} was committed before the interrupt"
            if state is ChunkState.COMMITTING:
                return (
                    f"chunk {chunk_id} was committing: it lands whole or not at all "
                    f"(`streampart chunk show {chunk_id}` says which)"
                )
            self.abort(chunk_id, reason="interrupted")
        except Exception:
            return f"chunk {chunk_id} was not committed; it is aborted when its reservation expires"
        return f"nothing was committed (chunk {chunk_id} aborted)"

    def _write_reserved(
        self, chunk: Chunk, content: bytes, fmt: Format, source: str, digest: str
    ) -> CommitResult:
        parsed = None
        for attempt in range(1, _SCHEMA_RETRIES + 1):
            if chunk.state is ChunkState.RESERVED:
                try:
                    parsed = self.parse(content, fmt)
                    chunk = self._stage_reserved(chunk, parsed, source, digest)
                except MalformedChunkError:
                    self.abort(chunk.id, reason="malformed content")
                    raise
                new = parsed.new_columns(self.table.columns)
                crashpoint("chunk-after-write")
            try:
                result = self._commit_chunk(chunk, False, digest)
            except SchemaConflictError:
                # parsed before another writer added one of its new fields as another type: once
                # more, as the table is now (the chunk was released, nothing of it committed)
                if attempt == _SCHEMA_RETRIES:
                    raise
                self.refresh_columns()
                chunk = self.store.get_chunk(chunk.id)
                continue
            break
        if parsed is None:  # committed by an earlier call under the key: only the commit is known
            return result
        return dataclasses.replace(
            result,
            ignored_fields=parsed.ignored,
            rounded_values=parsed.rounded,
            new_columns={c.name: c.sql_type for c in new},
            refused_fields=parsed.refused,
        )

    def write_table(self, data: pa.Table, key: str | None = None) -> CommitResult:
        """Commit an Arrow table as one chunk; with an idempotency ``key``, exactly once."""
        return self._rebinding(lambda: self._write_table(data, key))

    def _write_table(self, data: pa.Table, key: str | None) -> CommitResult:
        digest = arrow_digest(data)
        chunk = self.reserve(key)
        if chunk.state is ChunkState.RESERVED:
            chunk = self._stage_reserved(chunk, parse_arrow(data, self.validator()), "", digest)
        return self._commit_chunk(chunk, False, digest)


def arrow_digest(data: pa.Table) -> str:
    """The digest of an Arrow table's schema and values (not of how they are split into batches)."""
    sink = pa.BufferOutputStream()
    combined = data.combine_chunks()
    with pa.ipc.new_stream(sink, combined.schema) as stream:
        stream.write_table(combined)
    return digest_bytes(sink.getvalue().to_pybytes())

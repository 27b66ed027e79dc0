"""The chunk protocol: reserve → write → commit (or abort), exactly once per idempotency key.

A chunk's files are written to the table's staging area; committing adds them to the table's
Delta log in one transaction, so the chunk is wholly visible or not at all.

Fencing against rolls (arrival and event-time alike): a writer loads the Delta snapshot
*first* and checks the target partition's state in the metastore *second*. A roll marks the
partition ROLLING in the metastore *first* and seals the Delta table (a metadata change)
*second*. So either the writer sees ROLLING and goes to the next partition, or its snapshot
predates the seal and its commit fails Delta's conflict check and is retried — a chunk never
lands in a sealed partition, and a retried chunk never lands twice (each commit names the
chunks it adds in its commit info, looked up before any retry that might follow a landed commit).

Group commit: the commits of a table in flight in one process at once are made together, by
the first of them, as one Delta commit and one metastore transaction (``_commit_group``; the
queue is ``ingest/group_commit.py``). The "snapshot" a group commits on is the newest version of
the log, found with a few file checks (``metastore.delta.log.newest_version``); the partition states are
read after it, so the fencing is exactly a lone chunk's.

Namespace moves (``metastore/moves.py``): while a table's namespace is fenced for a move, its
metastore refuses the writer's steps with a retriable NamespaceMovingError; once the route has
flipped (or the table's rows are gone from its old metastore), :meth:`ChunkWriter.write`,
``write_table`` and ``commit`` read the table again through the catalog and carry on in its new
metastore, where the move copied every chunk with its id and idempotency key: a retried key finds
its chunk there, so nothing is lost or doubled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import random
import time
import uuid
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.commit_holders import commit_holder
from ingest.config import ChunkConfig
from ingest.digests import digest_bytes
from ingest.errors import (
    ChunkBusyError,
    ChunkStateError,
    CommitTimeoutError,
    IdempotencyConflictError,
    LateDataError,
    MalformedChunkError,
)
from ingest.formats import BadRecord, Format, Parsed, RecordValidator, TimeBounds, parse, parse_arrow
from ingest.group_commit import CommitGroups, Member
from metastore import clock
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint, pausepoint
from metastore.delta import staging
from metastore.delta.errors import first_line
from metastore.delta.files import file_exists, live_files, remove_file, write_parquet
from metastore.delta.layout import staging_path
from metastore.delta.log import (
    CHUNKS_KEY,
    GROUP_KEY,
    commit_chunks,
    commit_info,
    newest_version,
    verify_newest,
)
from metastore.delta.warehouse import Warehouse
from metastore.durations import format_duration
from metastore.errors import (
    CommitStateUnknownError,
    ConflictError,
    FederationAccessError,
    NamespaceMovingError,
    NotFoundError,
    QuotaExceededError,
    StorageFullError,
    StreampartError,
    TableIntegrityError,
)
from metastore.models import (
    Chunk,
    ChunkState,
    LateDataPolicy,
    Mode,
    PartitionState,
    StagedFile,
    Table,
    TableKind,
    iso,
    period_start,
)
from metastore.progress import Progress

T = TypeVar("T")


@dataclass(frozen=True)
class DeadLetter:
    """A bad record on its way to the dead-letter table, with its source position."""

    position: int | None  # line or row of a chunk, or the offset of a Kafka record
    reason: str
    raw: bytes  # exactly as received
    source: str | None = None  # file, URL or topic/partition it came from


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


def write_staged_files(warehouse: Warehouse, table: Table, prefix: str, data: pa.Table) -> list[StagedFile]:
    """Write ``data`` to the table's staging area as ``<prefix>-<k>.parquet`` files.

    One file in arrival mode (the partition is chosen at commit time); one file per period in
    event-time mode. Runs wherever the rows are: in the writer, or in a Spark task (with a
    ``prefix`` of ``<chunk>-<task>``), so it touches storage only, never the metastore.
    """
    if data.num_rows == 0:
        return []
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
        files.append(StagedFile(path=path, rows=part.num_rows, bytes=size, period=period))
    return files


@dataclass(frozen=True)
class CommitResult:
    """What a committed chunk became: the shape of ``streampart write --json``."""

    chunk: str
    table: str
    partitions: list[str]
    rows: int
    version: int | None
    dead_letter_rows: int = 0
    late_rows: int = 0
    idempotency_key: str | None = None
    # fields of the records the table has no column for, and how many records had each: not
    # written (only known to the call that parsed the data, so not part of a retry's answer)
    ignored_fields: dict[str, int] = field(default_factory=dict)
    # DECIMAL columns, and how many values of each had more decimals than the column and were
    # rounded (half to even, as Spark's cast); known as ignored_fields is
    rounded_values: dict[str, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "chunk": self.chunk,
            "table": self.table,
            "partitions": self.partitions,
            "rows": self.rows,
            "version": self.version,
            "dead_letter_rows": self.dead_letter_rows,
            "late_rows": self.late_rows,
            "idempotency_key": self.idempotency_key,
            "ignored_fields": self.ignored_fields,
            "rounded_values": self.rounded_values,
        }


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

    # -- reserve / write -------------------------------------------------------------------
    def reserve(self, key: str | None = None) -> Chunk:
        """A new chunk, or the one reserved already under the idempotency ``key``."""
        return self.store.reserve_chunk(self.table.id, key, self.config.ttl)

    def validator(self, now: datetime | None = None) -> RecordValidator:
        return RecordValidator(
            self.table.columns,
            [self.table.time_column],
            self.config.max_value_bytes,
            self.config.max_rows,
            time_bounds(self.table, now or clock.now()),
        )

    def parse(self, content: bytes, fmt: Format) -> Parsed:
        return parse(content, fmt, self.validator())

    def stage(self, chunk: Chunk, content: bytes, fmt: Format, source: str = "") -> Chunk:
        """Parse ``content`` and stage it as the chunk's data (replacing an earlier attempt's)."""
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
        files = write_staged_files(self.warehouse, self.table, prefix, parsed.good)
        letters = [DeadLetter(b.position, b.reason, b.raw.encode(), source or None) for b in parsed.bad]
        return self._record_files(chunk, files, letters, digest)

    def stage_files(
        self,
        chunk: Chunk,
        files: Sequence[StagedFile],
        bad: Sequence[DeadLetter],
        digest: str | None = None,
    ) -> Chunk:
        """Record files already written to staging (by :func:`write_staged_files`) as the chunk's data.

        This is how a distributed writer stages a chunk: each Spark task writes its own files,
        the driver records them all here and commits once. An earlier attempt's files that the
        new set does not replace are removed.
        """
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
            self._stage_dead_letters(chunk, bad)
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

    def _stage_dead_letters(
        self, chunk: Chunk, bad: Sequence[DeadLetter], key: str | None = None
    ) -> tuple[ChunkWriter, Chunk]:
        """Stage ``bad`` as a dead-letter chunk (once per idempotency key); returns its writer and chunk."""
        dlq = self.catalog.companion(self.table, TableKind.DEAD_LETTER)
        writer = ChunkWriter(self.catalog, dlq, self.config)
        dlq_chunk = writer.reserve(key or f"dead-letter:{chunk.id}")
        if dlq_chunk.state is not ChunkState.RESERVED:
            return writer, dlq_chunk  # staged and committed by an earlier attempt
        now = clock.now()
        rows = pa.table(
            {
                "chunk": [chunk.id] * len(bad),
                "source": [b.source for b in bad],
                "position": [b.position for b in bad],
                "reason": [b.reason for b in bad],
                "raw": [b.raw for b in bad],
                "received_at": [now] * len(bad),
            },
            schema=writer.validator().schema,
        )
        return writer, writer.stage_parsed(dlq_chunk, Parsed(rows, []))

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

    def _commit(self, chunk_id: str, owner_is_dead: bool, content_digest: str | None) -> CommitResult:
        return self._commit_chunk(self.store.get_chunk(chunk_id), owner_is_dead, content_digest)

    def _commit_chunk(self, chunk: Chunk, owner_is_dead: bool, content_digest: str | None) -> CommitResult:
        """:meth:`commit` of ``chunk`` as just read from the metastore."""
        chunk_id = chunk.id
        if chunk.table_id != self.table.id:
            raise ChunkStateError(f"chunk {chunk_id} belongs to another table")
        self.check_digest(chunk, content_digest)
        if chunk.state is ChunkState.COMMITTED:
            return self.result(chunk)
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
                        chunk, self._base_version(), content_digest=content_digest, holder=holder.id
                    )
                except ConflictError:  # someone else moved or re-staged it; answer from its new state
                    return self._commit(chunk_id, False, content_digest)
                except QuotaExceededError as exc:  # refused whole: nothing of it stays behind
                    self.abort(chunk.id, reason=str(exc))
                    raise
                return self._commit_in_group(chunk, may_have_landed=False)
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
            return self._commit_in_group(chunk, may_have_landed=True)

    def _group_key(self) -> tuple[str, str, str]:
        # the uid, not the row id: SQLite may give a table made again the id of a dropped one
        return (self.store.url, self.table.uid, self.table.location)

    def _base_version(self) -> int:
        """A version the chunk's commit will land after (where a search for it may stop)."""
        known = _GROUPS.context(self._group_key()).get("version")
        return int(known) if known is not None else self.store.newest_version(self.table.id)

    def _commit_in_group(self, chunk: Chunk, may_have_landed: bool) -> CommitResult:
        """Commit the COMMITTING ``chunk`` together with this table's other commits now in flight."""
        pending = _Pending(self, chunk, may_have_landed)
        if chunk.dead_letter_rows:
            try:
                self._commit_companion(TableKind.DEAD_LETTER, f"dead-letter:{chunk.id}")
            except Exception as exc:
                _release(pending, exc)
                raise
        return _GROUPS.submit(
            self._group_key(), pending, _commit_group, linger=self.config.group_wait.total_seconds()
        )

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

    def _require_files(self, chunk: Chunk) -> None:
        """End the chunk cleanly if a staged file is gone: it can never commit whole.

        Only ever reached for a commit that has not landed (checked just before), so nothing
        of the chunk is visible; the chunk is aborted and its other files go.
        """
        missing = [f.path for f in chunk.files if not file_exists(self.table, f.path)]
        if not missing:
            return
        message = (
            f"staged file {missing[0]} of chunk {chunk.id} is gone from storage"
            f"{f' (and {len(missing) - 1} more)' if len(missing) > 1 else ''}; nothing of the chunk "
            "was committed; write its data again under a new idempotency key"
        )
        try:
            self.store.abort_chunk(chunk, error=message)
        except ConflictError:  # taken over by another attempt: its outcome stands
            raise ChunkBusyError(f"chunk {chunk.id} was taken over by another commit attempt") from None
        self._remove_files(chunk)
        raise ChunkStateError(message)

    def _plan(
        self, chunk: Chunk, open_value: datetime | None
    ) -> tuple[list[tuple[str, datetime, int]], list[StagedFile]]:
        """Where each staged file goes: ``(path, partition, rows)`` to commit, and the late files.

        ``open_value``: an arrival-mode table's streaming partition (read once for a group).
        Late (event-time tables): rows of a partition that is sealed already, or whose period
        ended more than the table's max-age ago (no partition is opened for those).
        The path committed is the file's link in its partition's staging directory
        (``metastore/delta/staging.py``): a reader that takes partition values from paths finds them.
        """
        if self.table.mode is Mode.ARRIVAL:
            assert open_value is not None
            return [
                (staging.place(self.table, f.path, open_value), open_value, f.rows) for f in chunk.files
            ], []
        plan, late = [], []
        now = clock.now()
        for f in chunk.files:
            assert f.period is not None
            if self.table.too_old(f.period, now):
                late.append(f)
                continue
            partition = self.store.ensure_partition(self.table.id, f.period)
            if partition.state is PartitionState.STREAMING:
                plan.append((staging.place(self.table, f.path, f.period), f.period, f.rows))
            else:
                late.append(f)
        return plan, late

    def _handle_late(self, chunk: Chunk, late: Sequence[StagedFile]) -> int:
        if not late:
            return 0
        if self.table.late_data is LateDataPolicy.REJECT and self.late_rows_to_dead_letter:
            return self._late_to_dead_letter(chunk, late)
        if self.table.late_data is LateDataPolicy.REJECT:
            periods = ", ".join(sorted({iso(f.period) for f in late if f.period}))
            message = (
                f"{sum(f.rows for f in late)} rows are late: their partition(s) {periods} are "
                f"{self._late_because()}, and table {self.table.name} rejects late data; "
                "the chunk was not committed"
            )
            try:
                self.store.abort_chunk(chunk, error=message)
            except ConflictError:  # taken over by another attempt: its outcome stands, its files stay
                raise ChunkBusyError(f"chunk {chunk.id} was taken over by another commit attempt") from None
            self._remove_files(chunk)
            raise LateDataError(message)
        late_table = self.catalog.companion(self.table, TableKind.LATE)
        writer = ChunkWriter(self.catalog, late_table, self.config)
        for f in late:
            late_chunk = writer.reserve(f"late:{chunk.id}:{f.path}")
            if late_chunk.state is ChunkState.RESERVED:
                data = pq.read_table(Path(self.table.location) / f.path)
                writer.stage_parsed(late_chunk, Parsed(data, []))
            writer.commit(late_chunk.id)
        return sum(f.rows for f in late)

    def _late_because(self) -> str:
        if self.table.max_age is None:
            return "sealed"
        return f"sealed, or ended more than {format_duration(self.table.max_age)} ago (max-age)"

    def _late_to_dead_letter(self, chunk: Chunk, late: Sequence[StagedFile]) -> int:
        # One dead-letter chunk per late file, like the divert policy's late-table chunks: a
        # retry that finds more late files (another roll meanwhile) adds only those.
        for f in late:
            data = pq.read_table(Path(self.table.location) / f.path)
            reason = (
                f"late: partition {iso(f.period) if f.period else '?'} of {self.table.name} is "
                f"{self._late_because()}, and the table rejects late data"
            )
            letters = [
                DeadLetter(None, reason, json.dumps(row, default=str).encode(), "late")
                for row in data.to_pylist()
            ]
            writer, dlq_chunk = self._stage_dead_letters(
                chunk, letters, f"late-dead-letter:{chunk.id}:{f.path}"
            )
            writer.commit(dlq_chunk.id)
        return sum(f.rows for f in late)

    def _commit_companion(self, kind: TableKind, key: str) -> None:
        companion = self.catalog.companion(self.table, kind)
        writer = ChunkWriter(self.catalog, companion, self.config)
        found = self.store.find_chunk_by_key(companion.id, key)
        if found is not None:
            writer.commit(found.id)

    def _finish(
        self, chunk: Chunk, version: int, late_rows: int, partitions: Sequence[datetime] | None = None
    ) -> CommitResult:
        named = None
        if partitions is None:  # found in the log after a crash: read the partitions from there
            partitions = self._partitions_of_commit(chunk, version)
            named = commit_chunks(commit_info(self.table, version) or {})
        try:
            done = self.store.finish_commit(chunk, version, partitions, late_rows, named=named)
        except ConflictError:
            done = self.store.get_chunk(chunk.id)
            if done.state is not ChunkState.COMMITTED:
                raise
        return self.result(done)

    def _partitions_of_commit(self, chunk: Chunk, version: int) -> list[datetime]:
        # at the very version that added them, the chunk's files cannot have been swept yet; the
        # log lists them by their placed paths (or, committed before placing, their staged ones)
        names = {f.path.rsplit("/", 1)[-1] for f in chunk.files}
        dt = self.warehouse.load(self.table, version)
        return sorted({f.partition for f in live_files(dt) if f.staged and f.name in names})

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
        self._remove_files(chunk)
        if chunk.dead_letter_rows:
            dlq = self.catalog.companion(self.table, TableKind.DEAD_LETTER)
            found = self.store.find_chunk_by_key(dlq.id, f"dead-letter:{chunk.id}")
            if found is not None and found.state is ChunkState.RESERVED:
                ChunkWriter(self.catalog, dlq, self.config).abort(found.id, reason)
        return chunk

    def _remove_files(self, chunk: Chunk) -> None:
        for f in chunk.files:
            staging.remove(self.table, f.path)

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
        ignored: dict[str, int] = {}
        rounded: dict[str, int] = {}
        if chunk.state is ChunkState.RESERVED:
            try:
                parsed = self.parse(content, fmt)
                chunk = self._stage_reserved(chunk, parsed, source, digest)
            except MalformedChunkError:
                self.abort(chunk.id, reason="malformed content")
                raise
            ignored, rounded = parsed.ignored, parsed.rounded
            crashpoint("chunk-after-write")
        result = self._commit_chunk(chunk, False, digest)
        return dataclasses.replace(result, ignored_fields=ignored, rounded_values=rounded)

    def write_table(self, data: pa.Table, key: str | None = None) -> CommitResult:
        """Commit an Arrow table as one chunk; with an idempotency ``key``, exactly once."""
        return self._rebinding(lambda: self._write_table(data, key))

    def _write_table(self, data: pa.Table, key: str | None) -> CommitResult:
        digest = arrow_digest(data)
        chunk = self.reserve(key)
        if chunk.state is ChunkState.RESERVED:
            chunk = self._stage_reserved(chunk, parse_arrow(data, self.validator()), "", digest)
        return self._commit_chunk(chunk, False, digest)


@dataclass(eq=False)
class _Pending:
    """A COMMITTING chunk waiting in its table's commit group, and what its commit found so far."""

    writer: ChunkWriter
    chunk: Chunk
    may_have_landed: bool  # a taken-over attempt: an earlier one may have committed it
    late_rows: int = 0
    diverted: set[str] = field(default_factory=set)  # late files sent to the late table already

    @property
    def deadline(self) -> datetime:
        assert self.chunk.committing_since is not None
        return self.chunk.committing_since + self.writer.config.commit_timeout


# One queue per table per process: see ingest/group_commit.py.
_GROUPS: CommitGroups[_Pending, CommitResult] = CommitGroups()


def _commit_group(group: list[Member[_Pending, CommitResult]], context: dict[str, Any]) -> None:
    """:func:`_commit_group_once`; if it fails before its Delta commit could have landed, the chunks
    it leaves unanswered are released (COMMITTING → RESERVED), so their retries begin at once
    rather than wait out this attempt's deadline as busy."""
    landing = {"maybe": False}
    try:
        _commit_group_once(group, context, landing)
    except BaseException as exc:
        if not landing["maybe"]:
            for m in group:
                if not m.settled:
                    _release(m.item, exc)
        raise


def _require_live(members: list[Member[_Pending, CommitResult]]) -> None:
    """The fence of a group's Delta commit: every member's holder lease live, and unbroken since its
    attempt began (``CommitHolder.require_live``); members may come through several store objects."""
    by_holder: dict[int, tuple[Any, list[str]]] = {}
    for m in members:
        holder = commit_holder(m.item.writer.store)
        by_holder.setdefault(id(holder), (holder, []))[1].append(m.item.chunk.id)
    for holder, ids in by_holder.values():
        holder.require_live(ids)


def _release(p: _Pending, why: BaseException) -> None:
    """Release ``p``'s chunk after its attempt failed, known to have committed nothing.

    Not a chunk whose earlier attempt may have landed and was not looked for yet, nor one whose
    late rows went elsewhere already (a retry re-stages the chunk under new file names, and would
    divert them again). Best effort: a metastore that does not answer leaves the chunk to its
    holder's lease and deadline.
    """
    if p.may_have_landed or p.diverted or p.late_rows:
        return
    with contextlib.suppress(StreampartError):
        p.writer.store.release_commit(
            p.chunk, error=f"commit attempt failed, nothing committed: {first_line(why)}"
        )


def _commit_group_once(
    group: list[Member[_Pending, CommitResult]], context: dict[str, Any], landing: dict[str, bool]
) -> None:
    """Commit a group of one table's COMMITTING chunks in one Delta commit; settle each member.

    Each chunk keeps its own outcome: one whose earlier attempt landed is answered from the log,
    one past its deadline or whose files are gone or whose rows are all late leaves the group
    with its own answer, and the rest land together — one Delta commit naming every chunk it
    adds (CHUNKS_KEY), one metastore transaction recording them all at its version. The fencing
    is one chunk's: (a) the snapshot first, (b) then the partitions' states, so a roll that
    seals meanwhile makes the commit conflict, and the group is planned again.

    ``context`` keeps the newest version of the table's log seen, between groups.
    """
    lead = group[0].item.writer
    table, store, warehouse = lead.table, lead.store, lead.warehouse
    active: list[Member[_Pending, CommitResult]] = []
    for m in group:
        p = m.item
        if p.may_have_landed:
            try:
                assert p.chunk.base_version is not None
                version = warehouse.find_chunk_commit(table, p.chunk.id, p.chunk.base_version)
                if version is not None:
                    m.resolve(p.writer._finish(p.chunk, version, 0))
                    continue
                p.may_have_landed = False  # looked for: no earlier attempt landed it
            except Exception as exc:  # this member's own answer: the group goes on without it
                m.fail(exc)
                continue
        active.append(m)
    attempt = 0
    while active:
        for m in active:
            p = m.item
            try:
                if clock.now() > p.deadline:
                    timeout = CommitTimeoutError(
                        f"chunk {p.chunk.id} did not commit before its deadline; nothing was committed: "
                        "retry with the same idempotency key"
                    )
                    _release(p, timeout)
                    raise timeout
                p.writer._require_files(p.chunk)
            except Exception as exc:
                m.fail(exc)
        active = [m for m in active if not m.settled]
        if not active:
            return
        read_version = _newest_version(lead, context)  # (a) the log's newest version first …
        # (b) … then the partitions' states
        open_value = store.streaming_partition(table.id).value if table.mode is Mode.ARRIVAL else None
        plans: dict[Member[_Pending, CommitResult], list[tuple[str, datetime, int]]] = {}
        for m in active:
            p = m.item
            try:
                plan, late = p.writer._plan(p.chunk, open_value)
                if late:
                    p.late_rows += p.writer._handle_late(
                        p.chunk, [f for f in late if f.path not in p.diverted]
                    )
                    p.diverted.update(f.path for f in late)
                if plan:
                    plans[m] = plan
                else:  # all of it late: nothing to add
                    m.resolve(p.writer._finish(p.chunk, read_version, p.late_rows, partitions=()))
            except Exception as exc:
                m.fail(exc)
        active = [m for m in active if not m.settled]
        if not active:
            return
        crashpoint("chunk-before-delta-commit")
        pausepoint("chunk-before-delta-commit")  # tests: chunks of several writers in flight at once
        group_id = uuid.uuid4().hex
        metadata = {GROUP_KEY: group_id, CHUNKS_KEY: ",".join(m.item.chunk.id for m in active)}
        files = [f for m in active for f in plans[m]]
        landing["maybe"] = True
        try:
            # fenced: written only while this process's commit-holder lease is live (checked last
            # thing before the commit file), never once a successor may take its chunks over
            version = warehouse.commit_files(
                table, read_version, files, metadata, fence=functools.partial(_require_live, active)
            )
            crashpoint("chunk-after-delta-commit")
        except (StorageFullError, CommitTimeoutError):  # not written (no space, or the lease ran out)
            landing["maybe"] = False
            raise
        except ConflictError:
            # a roll sealed the table since our snapshot: decide the partitions again
            landing["maybe"] = False
            attempt += 1
            time.sleep(min(0.5, 0.01 * 2**attempt) * random.random())
            continue
        except CommitStateUnknownError:
            # an ambiguous failure (I/O error mid-commit): find out before committing again
            attempt += 1
            time.sleep(min(1.0, 0.05 * 2**attempt))
            found = warehouse.find_commit(table, GROUP_KEY, group_id, read_version)
            if found is None:
                landing["maybe"] = False
                continue
            version = found
        context["version"] = version
        try:
            _record_group(active, plans, version)
        except TableIntegrityError:  # the version was taken again: the next group loads and verifies
            context.pop("version", None)
            raise
        for m in active:  # the log lists their placed paths now: the staged names may go
            committed = {path for path, _, _ in plans[m]}
            for f in m.item.chunk.files:
                if f.path not in committed:
                    staging.unstage(table, f.path)
        return


def _newest_version(lead: ChunkWriter, context: dict[str, Any]) -> int:
    """The newest version of the table's log, for a group to commit after (the fencing's snapshot).

    Looked for after the last group's version: a few file checks, and the log's tail since its
    last checkpoint checked to be whole. The first time (or when that version is gone, or the
    tail is damaged) the table is loaded, and its log is checked to hold every commit the
    metastore recorded.
    """
    table, warehouse = lead.table, lead.warehouse
    known = context.get("version")
    version = newest_version(table, known) if known is not None else None
    if version is None:
        recorded = lead.store.newest_version(table.id)  # the metastore first …
        chunks = lead.store.committed_at(table.id, [recorded]).get(recorded)
        dt = warehouse.load(table)  # … then the log
        verify_newest(table, dt, recorded, chunks)
        version = int(dt.version())
    context["version"] = version
    return version


def _record_group(
    members: list[Member[_Pending, CommitResult]],
    plans: dict[Member[_Pending, CommitResult], list[tuple[str, datetime, int]]],
    version: int,
) -> None:
    """Record a landed group commit at ``version`` in one metastore transaction; answer each member."""
    store = members[0].item.writer.store
    recorded = store.finish_commits(
        [
            (m.item.chunk, version, sorted({part for _, part, _ in plans[m]}), m.item.late_rows)
            for m in members
        ]
    )
    for m, done in zip(members, recorded, strict=True):
        writer = m.item.writer
        if isinstance(done, Chunk):
            m.resolve(writer.result(done))
            continue
        # not COMMITTING any more: another attempt recorded this very commit (it is in the log)
        current = store.get_chunk(m.item.chunk.id)
        if current.state is ChunkState.COMMITTED:
            m.resolve(writer.result(current))
        else:
            m.fail(done)


def arrow_digest(data: pa.Table) -> str:
    """The digest of an Arrow table's schema and values (not of how they are split into batches)."""
    sink = pa.BufferOutputStream()
    combined = data.combine_chunks()
    with pa.ipc.new_stream(sink, combined.schema) as stream:
        stream.write_table(combined)
    return digest_bytes(sink.getvalue().to_pybytes())


def expire_chunks(
    catalog: Catalog,
    now: datetime | None = None,
    table_ids: Collection[int] | None = None,
    progress: Progress | None = None,
) -> list[Chunk]:
    """Expire reserved chunks past their TTL (at ``now``) and delete their staged files.

    ``table_ids``: only chunks of these tables (None: of every table of the catalog's metastore).
    ``progress``: told how many chunks' files go, and as each chunk's are deleted.
    """
    expired = catalog.store.expire_chunks(now, table_ids)
    tables: dict[int, Table] = {}
    if progress is not None and expired:
        progress.start(f"deleting the files of {len(expired)} expired chunk(s)", len(expired), "chunks")
    for chunk in expired:
        table = tables.get(chunk.table_id) or catalog.store.get_table_by_id(chunk.table_id)
        tables[chunk.table_id] = table
        for f in chunk.files:
            remove_file(table, f.path)
        if progress is not None:
            progress.advance()
    return expired


def recover_commits(
    catalog: Catalog, config: ChunkConfig | None = None, progress: Progress | None = None
) -> list[CommitResult]:
    """Finish commits whose writer died mid-commit (roll forward: the producer asked to commit):
    those past twice ``commit_timeout``, and those whose holder's lease lapsed.

    ``progress``: told how many stale commits there are, and as each is finished (or skipped).
    """
    config = config or ChunkConfig()
    results = []
    stale = catalog.store.stale_commits(clock.now() - 2 * config.commit_timeout)
    # and those whose holder is known to be gone (ingest/commit_holders.py): taken over at once
    holder, seen = commit_holder(catalog.store), {c.id for c in stale}
    gone: dict[str, bool] = {}  # another process's holder: its lease read once for all its chunks
    for c in catalog.store.list_chunks(states=[ChunkState.COMMITTING]):
        if c.id in seen or c.holder is None:
            continue
        if c.holder == holder.id:
            over = holder.attempt_over(c)
        else:
            over = gone[c.holder] = gone[c.holder] if c.holder in gone else holder.attempt_over(c)
        if over:
            stale.append(c)
    if progress is not None and stale:
        progress.start(f"finishing {len(stale)} interrupted commit(s)", len(stale), "chunks")
    for chunk in stale:
        table = catalog.store.get_table_by_id(chunk.table_id)
        try:
            results.append(ChunkWriter(catalog, table, config).commit(chunk.id))
        except (ChunkBusyError, ChunkStateError, LateDataError, FederationAccessError):
            pass  # FederationAccessError: a namespace outside its metastore's whitelist
        finally:
            if progress is not None:
                progress.advance()
    return results

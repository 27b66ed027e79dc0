"""Records of the metastore: partitions, staged files, chunks, rolls, leases, moves, and the
roll daemon's and status page's rows.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from metastore.models.columns import Column
from metastore.models.lifecycles import (
    ChunkState,
    DeleteState,
    ExpiryState,
    MoveStep,
    PartitionState,
    RollState,
)


class Partition(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    table_id: int
    value: datetime
    state: PartitionState
    opened_at: datetime
    rolled_at: datetime | None = None
    # Set when the partition becomes standard; streaming partitions derive these from the Delta log.
    chunks: int | None = None
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    # Retention: when it expired, the Delta version that removed its files, when they were deleted.
    expired_at: datetime | None = None
    expired_version: int | None = None
    reclaimed_at: datetime | None = None
    generation: int = 0  # deletes by predicate that rewrote it since it rolled


class StagedFile(BaseModel):
    """One Parquet file of a chunk in the table's staging area.

    ``period`` is set in event-time mode (rows of one partition per file) and ``None`` in
    arrival mode, where the partition is chosen at commit time.
    """

    model_config = ConfigDict(frozen=True)

    path: str
    rows: int
    bytes: int
    period: datetime | None = None
    stats: str = "{}"
    # the file's data columns when it holds some its table lacked when it was written (schema
    # evolution: they are added in the commit that adds the file); None: the table's columns then
    columns: tuple[Column, ...] | None = None


class Chunk(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    table_id: int
    idempotency_key: str | None  # names the chunk for good: a retry under it lands once
    state: ChunkState
    created_at: datetime
    expires_at: datetime
    files: tuple[StagedFile, ...] = ()
    rows: int = 0
    bytes: int = 0
    committing_since: datetime | None = None
    attempt: str | None = None
    base_version: int | None = None
    version: int | None = None
    partitions: tuple[datetime, ...] = ()
    dead_letter_rows: int = 0
    late_rows: int = 0
    error: str | None = None
    # ``sha256:<hex>`` of the content staged under the chunk's idempotency key (None: not recorded, as
    # for chunks of a Kafka batch, whose key names the offsets, or of releases before 0.2)
    content_digest: str | None = None
    # the process (host:pid:nonce) whose commit attempt holds the chunk while it is COMMITTING
    holder: str | None = None


class Roll(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    table_id: int
    partition_id: int
    partition_value: datetime
    state: RollState
    started_at: datetime
    finished_at: datetime | None = None
    owner: str | None = None
    lease_until: datetime | None = None
    seal_version: int | None = None
    sweep_version: int | None = None
    files_before: int | None = None
    files_after: int | None = None
    rows: int | None = None
    bytes: int | None = None
    error: str | None = None
    removed_files: tuple[str, ...] = ()  # a keyed table's: other partitions' files its sweep replaced
    reclaimed_at: datetime | None = None


class Expiry(BaseModel):
    """One expiry pass over one table's partitions (``sp_expiries``, scheduler/expiry.py)."""

    model_config = ConfigDict(frozen=True)

    id: str
    table_id: int
    state: ExpiryState
    partitions: tuple[datetime, ...]
    started_at: datetime
    finished_at: datetime | None = None
    owner: str | None = None
    lease_until: datetime | None = None
    commit_version: int | None = None
    rows: int | None = None
    bytes: int | None = None
    files: int | None = None
    error: str | None = None


class Delete(BaseModel):
    """One delete by predicate of one table (``sp_deletes``, ingest/deletes/deleter.py)."""

    model_config = ConfigDict(frozen=True)

    id: str
    table_id: int
    predicate: str
    state: DeleteState
    requested_by: str
    started_at: datetime
    finished_at: datetime | None = None
    owner: str | None = None
    lease_until: datetime | None = None
    seal_version: int | None = None
    read_version: int | None = None
    commit_version: int | None = None
    rows: int | None = None
    files_removed: int | None = None
    files_added: int | None = None
    partitions: tuple[datetime, ...] = ()
    removed_files: tuple[str, ...] = ()
    reclaimed_at: datetime | None = None
    error: str | None = None


class Lease(BaseModel):
    """Leadership of one role (e.g. the roll daemon), held by one process until it expires.

    ``epoch`` is the fencing token: it grows by one every time the lease changes hands (or is
    taken again after it lapsed), never otherwise. A store operation given a lease as its
    fence succeeds only while that holder still holds the lease at that very epoch, checked in
    the operation's own transaction, so a deposed leader that wakes up late cannot act.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    holder: str | None
    epoch: int
    acquired_at: datetime | None = None
    renewed_at: datetime | None = None
    expires_at: datetime
    info: dict[str, Any] = Field(default_factory=dict)

    def live(self, now: datetime) -> bool:
        """Whether someone holds the lease at ``now`` (by the expiry the holder recorded)."""
        return self.holder is not None and self.expires_at > now


class Move(BaseModel):
    """A namespace move in progress, as the primary records it (``sp_moves``)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    source: str  # the metastore it lives in (until the flip)
    target: str  # the metastore it moves to
    step: MoveStep
    started_at: datetime
    updated_at: datetime
    owner: str | None = None  # the mover process running it (host:pid:nonce)
    heartbeat_at: datetime | None = None


class RollOutcome(StrEnum):
    """How one attempt of the roll daemon at one partition ended."""

    DONE = "done"
    FAILED = "failed"  # retried with backoff
    ABANDONED = "abandoned"  # stopped at a step boundary (shutdown, lost leadership); resumable


class RollAttempt(BaseModel):
    """One attempt of the roll daemon at rolling (or resuming) one partition: its history."""

    model_config = ConfigDict(frozen=True)

    id: int
    table_id: int
    partition_value: datetime | None
    roll_id: str | None
    owner: str
    epoch: int | None
    started_at: datetime
    finished_at: datetime
    outcome: RollOutcome
    resumed: bool = False
    rows: int | None = None
    error: str | None = None
    # consecutive failed attempts of the table up to and including this one (0 when done)
    failures: int = 0
    retry_at: datetime | None = None

    @property
    def seconds(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()


class DaemonBeat(BaseModel):
    """A roll daemon's last heartbeat for one lease (leader or standby), and its last housekeeping."""

    model_config = ConfigDict(frozen=True)

    lease: str
    holder: str
    heartbeat_at: datetime
    info: dict[str, Any] = Field(default_factory=dict)
    housekeeping_at: datetime | None = None
    housekeeping_outcome: str | None = None  # ok, failed


class TableActivity(BaseModel):
    """What a table's committed chunks say of its traffic (for the status page)."""

    model_config = ConfigDict(frozen=True)

    newest_commit: datetime | None = None  # when the newest committed chunk began its commit
    recent_commits: int = 0  # committed since the ``recent`` cut-off asked for
    dead_letter_rows: int = 0  # dead-lettered rows of chunks committed since the ``hour`` cut-off


class ChunkSummary(BaseModel):
    """What pruned chunk rows of one partition (and state) added up to.

    Chunks that never committed (aborted, expired) have no partition. A committed chunk that
    spans several partitions (event time) counts once in each, with the rows of its files
    there.
    """

    model_config = ConfigDict(frozen=True)

    table_id: int
    partition_value: datetime | None
    state: ChunkState
    chunks: int
    rows: int
    bytes: int
    dead_letter_rows: int = 0
    late_rows: int = 0
    first_created_at: datetime | None = None
    last_created_at: datetime | None = None

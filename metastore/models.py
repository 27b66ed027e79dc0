"""The product's nouns: tables, partitions, chunks and rolls, and their lifecycles.

Lifecycles are enums with an explicit table of allowed transitions; every state change in the
metastore is a conditional update guarded by :func:`check_transition`.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from metastore.errors import IllegalTransitionError, UserInputError

PRIMARY = "primary"
"""The federation's primary metastore: the one a process starts with (``--metastore``)."""


class Mode(StrEnum):
    """How a row's partition is chosen."""

    ARRIVAL = "arrival"  # HIVE-4196: the partition open when the chunk commits
    EVENT_TIME = "event-time"  # the partition of the row's own timestamp


class LateDataPolicy(StrEnum):
    """What happens to rows whose event-time partition is sealed already."""

    REJECT = "reject"
    DIVERT = "divert"


class TableKind(StrEnum):
    """Main tables hold user data; the others are companions created with a main table."""

    MAIN = "main"
    DEAD_LETTER = "dead-letter"
    LATE = "late"


class PartitionState(StrEnum):
    STREAMING = "streaming"
    ROLLING = "rolling"
    STANDARD = "standard"


class ChunkState(StrEnum):
    RESERVED = "reserved"
    COMMITTING = "committing"
    COMMITTED = "committed"
    ABORTED = "aborted"
    EXPIRED = "expired"


class RollState(StrEnum):
    SEALING = "sealing"
    SWEEPING = "sweeping"
    DONE = "done"


class MoveStep(StrEnum):
    """How far a namespace move has come (see metastore/moves.py); recorded before each step."""

    FENCING = "fencing"  # recorded; the source is being fenced and drained
    COPYING = "copying"  # fenced and drained; rows being copied to the target
    COPIED = "copied"  # the target holds a whole copy; the route not flipped yet
    FLIPPED = "flipped"  # the route names the target; the source's rows being removed


_TRANSITIONS: dict[type[StrEnum], set[tuple[StrEnum, StrEnum]]] = {
    PartitionState: {
        (PartitionState.STREAMING, PartitionState.ROLLING),
        (PartitionState.ROLLING, PartitionState.STANDARD),
    },
    ChunkState: {
        (ChunkState.RESERVED, ChunkState.COMMITTING),
        (ChunkState.RESERVED, ChunkState.ABORTED),
        (ChunkState.RESERVED, ChunkState.EXPIRED),
        # a commit found not to have landed, whose writer gave up (rejected late data, or
        # malformed content): the chunk is aborted and its files removed.
        (ChunkState.COMMITTING, ChunkState.ABORTED),
        (ChunkState.COMMITTING, ChunkState.COMMITTED),
        # an attempt that failed knowing it committed nothing (a full disk, a damaged log, the
        # metastore unreachable before its Delta commit) releases the chunk: a retry begins anew
        (ChunkState.COMMITTING, ChunkState.RESERVED),
    },
    RollState: {
        (RollState.SEALING, RollState.SWEEPING),
        (RollState.SWEEPING, RollState.DONE),
    },
    MoveStep: {
        (MoveStep.FENCING, MoveStep.COPYING),
        # a rerun after a crash mid-copy clears the partial copy and copies again
        (MoveStep.COPYING, MoveStep.COPYING),
        (MoveStep.COPYING, MoveStep.COPIED),
        (MoveStep.COPIED, MoveStep.FLIPPED),
    },
}


def check_transition(current: StrEnum, target: StrEnum) -> None:
    """Raise :class:`IllegalTransitionError` unless ``current → target`` is allowed."""
    allowed = _TRANSITIONS[type(current)]
    if (current, target) not in allowed:
        kind = type(current).__name__.removesuffix("State").lower()
        raise IllegalTransitionError(f"a {kind} cannot go from {current.value} to {target.value}")


# ---------------------------------------------------------------------------------------------
# Names

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")


def check_identifier(value: str, what: str) -> str:
    """Return ``value`` if it is a plain identifier; otherwise raise naming the fault."""
    if not value:
        raise UserInputError(f"{what} is empty")
    if "/" in value or "\\" in value:
        raise UserInputError(f"{what} {value!r} contains a path separator")
    if ".." in value:
        raise UserInputError(f"{what} {value!r} contains '..'")
    if any(q in value for q in "'\"`"):
        raise UserInputError(f"{what} {value!r} contains a quote")
    if not _IDENT.fullmatch(value):
        raise UserInputError(
            f"{what} {value!r} is not a valid name: use letters, digits and '_', "
            "starting with a letter or '_', at most 128 characters"
        )
    return value


class TableName(BaseModel):
    """``namespace.table``; both parts plain identifiers (they become directory names)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    table: str

    @classmethod
    def parse(cls, text: str) -> TableName:
        if text.count(".") != 1 or ".." in text:
            for bad in ("/", "\\", "'", '"', "`"):
                if bad in text:
                    check_identifier(text, "table name")
            raise UserInputError(f"table name {text!r} must have the form NAMESPACE.TABLE")
        ns, table = text.split(".")
        return cls(namespace=check_identifier(ns, "namespace"), table=check_identifier(table, "table"))

    def __str__(self) -> str:
        return f"{self.namespace}.{self.table}"


# ---------------------------------------------------------------------------------------------
# Periods

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The event times an event-time table accepts, whatever its settings. Inside this range every
# period start, period end plus lateness (each at most 100 years) and partition value text
# (a four-digit year) is representable; a row outside it is a bad record, never a partition.
MIN_EVENT_TIME = datetime(1000, 1, 1, tzinfo=UTC)
MAX_EVENT_TIME = datetime(9000, 1, 1, tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def saturating_add(ts: datetime, delta: timedelta) -> datetime:
    """``ts + delta``, or the latest (earliest) datetime where that would overflow.

    For date arithmetic on values already stored (a partition recorded before event times were
    bounded): a due time past year 9999 means "never", not an error that stops a daemon.
    """
    try:
        return ts + delta
    except OverflowError:
        return _LATEST if delta > timedelta(0) else _EARLIEST


def utc(ts: datetime) -> datetime:
    """A timezone-aware UTC datetime (naive values are taken as UTC)."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def period_start(ts: datetime, every: timedelta) -> datetime:
    """Start of the period of length ``every`` (aligned to the Unix epoch, UTC) holding ``ts``."""
    step = int(every.total_seconds() * 1_000_000)
    micros = (utc(ts) - EPOCH) // timedelta(microseconds=1)
    return EPOCH + timedelta(microseconds=micros - micros % step)


def iso(ts: datetime) -> str:
    """ISO-8601 in UTC with a ``Z``; microseconds only when present; always a four-digit year."""
    ts = utc(ts)
    text = f"{ts.year:04d}-{ts:%m-%dT%H:%M:%S}"
    if ts.microsecond:
        text += f".{ts.microsecond:06d}"
    return text + "Z"


def parse_instant(text: str, what: str = "time") -> datetime:
    """Parse an ISO-8601 instant; a value without offset is UTC."""
    try:
        return utc(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except ValueError:
        raise UserInputError(
            f"{what} {text!r} is not an ISO-8601 time such as 2026-11-21T10:00:00Z"
        ) from None


# ---------------------------------------------------------------------------------------------
# Table schema

SQL_TYPES = {
    "BOOLEAN": "boolean",
    "BOOL": "boolean",
    "TINYINT": "byte",
    "BYTE": "byte",
    "SMALLINT": "short",
    "SHORT": "short",
    "INT": "integer",
    "INTEGER": "integer",
    "BIGINT": "long",
    "LONG": "long",
    "FLOAT": "float",
    "REAL": "float",
    "DOUBLE": "double",
    "STRING": "string",
    "VARCHAR": "string",
    "TEXT": "string",
    "BINARY": "binary",
    "DATE": "date",
    "TIMESTAMP": "timestamp",
}
_DECIMAL = re.compile(r"^DECIMAL\s*\(\s*(\d+)\s*,\s*(\d+)\s*\)$")
_COLUMN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s+(.+?)(\s+NOT\s+NULL)?$", re.IGNORECASE)


class Column(BaseModel):
    """One column: ``type`` is a Delta primitive type name (``long``, ``timestamp``, ``decimal(p,s)``)."""

    model_config = ConfigDict(frozen=True)

    name: str
    type: str
    nullable: bool = True

    @property
    def sql_type(self) -> str:
        inverse = {
            "boolean": "BOOLEAN",
            "byte": "TINYINT",
            "short": "SMALLINT",
            "integer": "INT",
            "long": "BIGINT",
            "float": "FLOAT",
            "double": "DOUBLE",
            "string": "STRING",
            "binary": "BINARY",
            "date": "DATE",
            "timestamp": "TIMESTAMP",
        }
        return inverse.get(self.type, self.type.upper())


def _split_top_level(text: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


def parse_schema(ddl: str) -> tuple[Column, ...]:
    """Parse ``"id BIGINT, ts TIMESTAMP, msg STRING NOT NULL"`` into columns.

    Raises:
        UserInputError: naming the column (or position) at fault.
    """
    columns: list[Column] = []
    seen: set[str] = set()
    for position, raw in enumerate(_split_top_level(ddl), start=1):
        item = raw.strip()
        if not item:
            raise UserInputError(f"schema: column {position} is empty (stray comma?)")
        m = _COLUMN.match(item)
        if not m:
            raise UserInputError(f"schema: column {position} {item!r} is not 'NAME TYPE'")
        name, type_text, not_null = m.group(1), m.group(2).strip().upper(), m.group(3)
        check_identifier(name, f"schema: column {position} name")
        if name.lower() in seen:
            raise UserInputError(f"schema: column {name!r} appears twice")
        seen.add(name.lower())
        dec = _DECIMAL.match(type_text)
        if dec:
            precision, scale = int(dec.group(1)), int(dec.group(2))
            if not 1 <= precision <= 38 or scale > precision:
                raise UserInputError(f"schema: column {name!r} has an invalid DECIMAL({precision},{scale})")
            delta_type = f"decimal({precision},{scale})"
        elif type_text in SQL_TYPES:
            delta_type = SQL_TYPES[type_text]
        else:
            known = ", ".join(sorted({*SQL_TYPES, "DECIMAL(p,s)"}))
            raise UserInputError(
                f"schema: column {name!r} has unknown type {type_text!r}; known types: {known}"
            )
        columns.append(Column(name=name, type=delta_type, nullable=not not_null))
    return tuple(columns)


def format_schema(columns: tuple[Column, ...]) -> str:
    return ", ".join(f"{c.name} {c.sql_type}{'' if c.nullable else ' NOT NULL'}" for c in columns)


# ---------------------------------------------------------------------------------------------
# Records of the metastore


# Companion tables are named after their main table: NS.TABLE__dead_letter, NS.TABLE__late.
COMPANION_SUFFIX = {TableKind.DEAD_LETTER: "__dead_letter", TableKind.LATE: "__late"}


def companion_name(name: TableName, kind: TableKind) -> TableName:
    return TableName(namespace=name.namespace, table=name.table + COMPANION_SUFFIX[kind])


def default_partition_column(time_column: str) -> str:
    """The partition column of a table whose ``time_column`` is given: ``<time_column>_period``."""
    return f"{time_column}_period"


class TableSpec(BaseModel):
    """What a user asks for when creating a streaming table."""

    model_config = ConfigDict(frozen=True)

    name: TableName
    columns: tuple[Column, ...]
    time_column: str
    partition_column: str = Field(
        "", description="Column holding the partition value (period start); default <time_column>_period."
    )
    mode: Mode = Mode.ARRIVAL
    roll_every: timedelta
    lateness: timedelta = timedelta(0)
    late_data: LateDataPolicy = LateDataPolicy.REJECT
    # Event-time tables: a row more than max_future ahead of the clock is a bad record (a
    # producer's broken clock must not open a partition of the year 9999); a row whose period
    # ended more than max_age ago is late, as a row of a sealed partition is (None: backfills of
    # any age open their partitions, as before).
    max_future: timedelta = timedelta(days=1)
    max_age: timedelta | None = None
    dead_letter: bool = False
    kind: TableKind = TableKind.MAIN
    cluster: str = "default"

    @property
    def data_columns(self) -> tuple[Column, ...]:
        return self.columns

    @model_validator(mode="before")
    @classmethod
    def _default_partition_column(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("partition_column") and data.get("time_column"):
            return {**data, "partition_column": default_partition_column(str(data["time_column"]))}
        return data

    def companion(self, kind: TableKind) -> TableName:
        """The name of this table's dead-letter or late-data companion."""
        return companion_name(self.name, kind)


class Table(TableSpec):
    """A table as recorded in the metastore."""

    id: int  # its row's id in its own metastore (each metastore numbers its own rows)
    location: str
    created_at: datetime
    uid: str = ""  # its identity across the federation, kept when its namespace moves
    metastore: str = PRIMARY  # the metastore it was read from: the one to write it through

    def event_time_range(self, now: datetime) -> tuple[datetime, datetime] | None:
        """Event-time tables: the earliest and latest event time a row may have at ``now``."""
        if self.mode is not Mode.EVENT_TIME:
            return None
        return MIN_EVENT_TIME, min(MAX_EVENT_TIME, saturating_add(now, self.max_future))

    def period_end(self, value: datetime) -> datetime:
        """The end of the period of the partition of ``value`` (saturating at the calendar's end)."""
        return saturating_add(period_start(value, self.roll_every), self.roll_every)

    def too_old(self, period: datetime, now: datetime) -> bool:
        """Event-time tables: whether rows of ``period`` are past ``max_age`` at ``now`` (late)."""
        if self.mode is not Mode.EVENT_TIME or self.max_age is None:
            return False
        return self.period_end(period) <= saturating_add(now, -self.max_age)


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


# ---------------------------------------------------------------------------------------------
# API tokens (the HTTP API's bearer tokens)


class Permission(StrEnum):
    """What a token may do in a namespace. ``admin`` includes ``read`` and ``write``."""

    READ = "read"
    WRITE = "write"
    ADMIN = "admin"


_TOKEN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127}$")


def check_token_name(name: str) -> str:
    """A token's name: letters, digits, ``_``, ``.``, ``-``; at most 128 characters."""
    if not _TOKEN_NAME.fullmatch(name or "") or ".." in name:
        raise UserInputError(
            f"token name {name!r} is not valid: use letters, digits, '_', '.' and '-' "
            "(not '..'), starting with a letter, digit or '_', at most 128 characters"
        )
    return name


class Scope(BaseModel):
    """``PERMISSION:NAMESPACE``, e.g. ``write:shop``; the namespace ``*`` means every namespace."""

    model_config = ConfigDict(frozen=True)

    permission: Permission
    namespace: str

    @classmethod
    def parse(cls, text: str) -> Scope:
        permission, sep, namespace = text.strip().partition(":")
        if not sep:
            raise UserInputError(f"scope {text!r} must have the form PERMISSION:NAMESPACE (e.g. write:shop)")
        try:
            perm = Permission(permission)
        except ValueError:
            raise UserInputError(
                f"scope {text!r}: permission must be one of read, write, admin; got {permission!r}"
            ) from None
        if namespace != "*":
            check_identifier(namespace, f"scope {text!r}: namespace")
        return cls(permission=perm, namespace=namespace)

    def allows(self, permission: Permission, namespace: str) -> bool:
        if self.namespace not in ("*", namespace):
            return False
        return self.permission is permission or self.permission is Permission.ADMIN

    def __str__(self) -> str:
        return f"{self.permission.value}:{self.namespace}"


class ApiToken(BaseModel):
    """A bearer token of the HTTP API. Only its SHA-256 digest is stored, never the token."""

    model_config = ConfigDict(frozen=True)

    id: int
    name: str
    token_hash: str
    scopes: tuple[Scope, ...]
    created_at: datetime

    def allows(self, permission: Permission, namespace: str) -> bool:
        return any(s.allows(permission, namespace) for s in self.scopes)

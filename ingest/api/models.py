"""The request and response bodies of the HTTP API, as pydantic models (they make its OpenAPI schema).

Chunks answer :class:`ChunkInfo`, commits :class:`CommitInfo` (the shape of ``streampart write
--json``), tables :class:`TableInfo` (``streampart table describe --json``), namespaces
:class:`NamespaceInfo` and their :class:`UsageInfo`, links :class:`LinkInfo`, Kafka ingest jobs
:class:`IngestJobReport`, and every error (the federation's bodies: ``ingest/api/federation_models.py``)
:class:`ErrorBody`; :func:`error_responses` declares the latter for a route's error statuses.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from metastore.models import Chunk, ChunkState, IngestRequest, Table, iso
from metastore.namespaces import Namespace

MAX_NEW_COLUMNS = 10_000

# Idempotency keys are stored in the metastore (512 characters) and must be printable text.
KEY_PATTERN = r"^[^\x00-\x1f\x7f]+$"


class ErrorBody(BaseModel):
    error: str = Field(description="A stable code: not_found, malformed_body, chunk_state, …")
    message: str = Field(description="What is wrong, for a person.")
    field: str | None = Field(None, description="The field at fault: a path parameter, body, a header, …")
    line: int | None = Field(None, description="The line (row, event) of the body at fault, 1-based.")


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` of a route that may answer ``codes`` with an :class:`ErrorBody`."""
    return {c: {"model": ErrorBody} for c in codes}


class OpenChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        pattern=KEY_PATTERN,
        description="Opening again with the same key returns the same chunk (whatever its state).",
    )
    cluster: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="The cluster meant to take the write. Only the table's primary takes writes; another "
        "cluster is refused with 409 secondary_cluster (absent: the primary).",
    )


class CommitChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content_sha256: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="sha256:<hex> of the data the caller uploaded. If the chunk holds other data (the "
        "idempotency key was reused, or another caller uploaded under it), the commit answers 409 "
        "idempotency_conflict instead of committing or answering with the other data's commit.",
    )


class ChunkInfo(BaseModel):
    id: str
    table: str
    state: ChunkState
    idempotency_key: str | None
    created_at: str
    expires_at: str
    rows: int = Field(description="Rows staged (uploaded) so far.")
    bytes: int
    dead_letter_rows: int
    version: int | None = Field(description="Delta version of the commit, once committed.")
    partitions: list[str]
    error: str | None
    ignored_fields: dict[str, int] = Field(
        default_factory=dict,
        description="Upload: fields of the records the table has no column for, and how many records had "
        "each. They are not written.",
    )
    rounded_values: dict[str, int] = Field(
        default_factory=dict,
        description="Upload: DECIMAL(p,s) columns, and how many values of each had more than s decimals: "
        "they were written rounded to s decimals (half to even, as Spark's cast).",
    )
    new_columns: dict[str, str] = Field(
        default_factory=dict,
        description="Upload: fields the table had no column for that become columns when the chunk "
        "commits (the table's schema evolution), each with its SQL type.",
    )
    refused_fields: dict[str, str] = Field(
        default_factory=dict,
        description="Upload: ignored fields that schema evolution could not make columns, and why.",
    )

    @classmethod
    def of(cls, chunk: Chunk, table: Table) -> ChunkInfo:
        """The answer about ``chunk`` of ``table``."""
        return cls(
            id=chunk.id,
            table=str(table.name),
            state=chunk.state,
            idempotency_key=chunk.idempotency_key,
            created_at=iso(chunk.created_at),
            expires_at=iso(chunk.expires_at),
            rows=chunk.rows,
            bytes=chunk.bytes,
            dead_letter_rows=chunk.dead_letter_rows,
            version=chunk.version,
            partitions=[iso(p) for p in chunk.partitions],
            error=chunk.error,
        )


class CommitInfo(BaseModel):
    """The shape of ``streampart write --json``."""

    chunk: str
    table: str
    partitions: list[str]
    rows: int
    version: int | None
    dead_letter_rows: int
    late_rows: int
    idempotency_key: str | None = Field(description="The chunk's idempotency key.")
    ignored_fields: dict[str, int] = Field(
        default_factory=dict, description="Fields of the events' records that the table has no column for."
    )
    rounded_values: dict[str, int] = Field(
        default_factory=dict,
        description="DECIMAL(p,s) columns, and how many of the events' values of each had more than s "
        "decimals: they were written rounded to s decimals (half to even, as Spark's cast).",
    )
    new_columns: dict[str, str] = Field(
        default_factory=dict,
        description="Fields the table had no column for that became columns (the table's schema "
        "evolution), each with its SQL type.",
    )
    refused_fields: dict[str, str] = Field(
        default_factory=dict,
        description="Ignored fields that schema evolution could not make columns, and why.",
    )


class PartitionInfo(BaseModel):
    value: str = Field(description="The partition's value (its start), ISO-8601 in UTC.")
    name: str = Field("", description="The same value for a person: 2026-11-23 13:00 (UTC, no zero parts).")
    state: str
    chunks: int
    rows: int
    bytes: int
    files: int
    location: str
    clusters: list[str] = Field(
        default_factory=list,
        description="The clusters that hold it: the primary, then secondaries with a copy.",
    )


class ReplicaInfo(BaseModel):
    """A secondary cluster of a table: where its copy lives, and how complete it is."""

    cluster: str
    location: str
    added_at: str
    present: int = Field(description="Standard partitions copied there (verified and committed).")
    missing: list[str] = Field(description="Standard partitions not there yet.")
    failing: list[dict[str, Any]] = Field(description="Copies that failed: partition, attempts, error.")


class LinkInfo(BaseModel):
    """A link's own settings: what it points at and which partitions it admits."""

    name: str = Field(description="NAMESPACE.LOCAL")
    source: str = Field(description="The table it reads: NAMESPACE.TABLE of another namespace.")
    dangling: bool = Field(description="Its source was dropped (with --force): every read fails.")
    mode: str = Field(description="dynamic (follows the source's rolls) or static (listed partitions)")
    include_streaming: bool = Field(description="Also shows the source's open streaming partitions.")
    retention: str | None = Field(description="Hides partitions whose period ended longer ago than this.")
    range: str | None = Field(description="Dynamic links: the partition values FROM..TO it admits.")
    partitions: list[str] | None = Field(description="Static links: the partitions it lists.")
    admits: str = Field(description="The partitions it admits, in words.")
    created_at: str


class DeltaLogInfo(BaseModel):
    """A table's Delta log schedule (``table create|alter --checkpoint-interval --log-retention``)."""

    checkpoint_interval: int = Field(description="A Delta checkpoint every this many commits.")
    log_retention: str = Field(description="Commit files older than this go once a checkpoint covers them.")


class SchemaChangeInfo(BaseModel):
    """One schema change of a table, as ``table describe --json`` lists it."""

    version: int | None = Field(description="The Delta version that made it.")
    change: str = Field(description='What changed: "add coupon STRING", "widen qty INT to BIGINT", ...')
    source: str | None = Field(None, description='Who or what made it: "alter", "chunk:<id>", ...')
    at: str | None = Field(None, description="When (ISO-8601).")
    key: str | None = Field(None, description="Its idempotency key (in the answer of an ALTER).")


class ExpiredInfo(BaseModel):
    partitions: int = Field(description="How many of its partitions expired by retention (not listed).")
    oldest: str | None = Field(description="The oldest expired partition's value.")
    newest: str | None = Field(description="The newest expired partition's value.")
    last_at: str | None = Field(description="When the last of them expired.")


class RetentionInfo(BaseModel):
    retain: str | None = Field(
        description="How long a standard partition is kept after its period ends (null: for ever)."
    )
    source: str = Field(description="Where that is set: table, namespace (its default) or none.")
    next_expiry: str | None = Field(description="When the oldest standard partition expires.")
    expired: ExpiredInfo


class KeysInfo(BaseModel):
    """A keyed table's primary key, what orders a key's versions, and which records delete."""

    columns: list[str] = Field(description="The primary key's columns.")
    sequence_by: str | None = Field(
        description="The column whose greatest value wins (null: the latest to arrive)."
    )
    op_column: str | None = Field(
        description="The column saying whether a record upserts or deletes (null: none)."
    )
    upsert_ops: list[str] = Field(description="Values of the op column that upsert the key.")
    delete_ops: list[str] = Field(description="Values of the op column that delete the key.")
    history: bool = Field(False, description="Whether every version is kept (valid_from/valid_to).")


class TableInfo(BaseModel):
    """The shape of ``streampart table describe --json`` (a link: its source's, with ``link``)."""

    model_config = ConfigDict(populate_by_name=True)

    table: str
    kind: str
    mode: str
    roll_every: str
    lateness: str
    late_data: str
    max_future: str = Field(description="Event-time tables: rows further ahead of the clock are bad records.")
    max_age: str | None = Field(description="Event-time tables: rows of periods that ended before are late.")
    dead_letter: bool
    time_column: str
    partition_column: str
    partitioned_by: str = Field(
        "", description="What the partition column holds in the table's mode, and how rows are placed."
    )
    partition_names: str = Field("", description="How partitions and their directories are named.")
    schema_: str = Field(alias="schema")
    schema_evolution: str = Field(
        "none", description="What rows may change in the schema: none, add-columns, add-and-widen."
    )
    max_new_columns: int = Field(100, description="The most columns rows may add (per chunk and per table).")
    keys: KeysInfo | None = Field(None, description="A keyed table's key (null: a table of appends).")
    cluster_by: list[str] = Field(
        default_factory=list,
        description="The columns a roll orders each partition's rows by: sorted by one, Z-ordered by "
        "several (empty: arrival order).",
    )
    schema_changes: list[SchemaChangeInfo] = Field(
        default_factory=list, description="The table's recent schema changes, newest first."
    )
    location: str
    cluster: str = Field(description="The primary cluster: it holds all the data and takes every write.")
    replicas: list[ReplicaInfo] = Field(default_factory=list, description="The secondary clusters.")
    version: int
    partitions: list[PartitionInfo]
    delta_log: DeltaLogInfo | None = Field(
        None, description="A table's Delta log schedule (a link: none, its source's is the source's)."
    )
    link: LinkInfo | None = Field(None, description="Set when the name is a link.")
    retention: RetentionInfo | None = Field(None, description="Its retention (a link: its source's).")


class LinkDescription(LinkInfo):
    """A link's settings and the partitions of its source it exposes now."""

    version: int | None = Field(
        description="The source's Delta version the exposed partitions were read at (null: dangling)."
    )
    exposed: list[PartitionInfo] = Field(
        description="The source's partitions the link shows now (as ``GET /v1/tables/{ns}/{link}``)."
    )


class AlterTable(BaseModel):
    """``PATCH /v1/tables/{ns}/{t}``: change a table's columns or its schema evolution (any subset)."""

    model_config = ConfigDict(extra="forbid")

    add_columns: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description='Nullable columns to add, each "NAME TYPE" ("coupon STRING"); rows written before '
        "read null.",
    )
    widen_columns: list[str] = Field(
        default_factory=list,
        max_length=1000,
        description='Columns to widen in place, each "NAME TYPE" ("qty BIGINT"): INT to BIGINT, FLOAT to '
        "DOUBLE, a DECIMAL's precision.",
    )
    schema_evolution: str | None = Field(
        None, max_length=100, description="What rows may change: none, add-columns or add-and-widen."
    )
    # Why at most 10,000: evolution adds a column per new field name, and a table of tens of thousands
    # of columns is no table any engine reads well; the bound also keeps the value in the metastore's
    # integer column. Strict: 7, not "7", 7.0 or true.
    max_new_columns: int | None = Field(
        None,
        strict=True,
        ge=0,
        le=MAX_NEW_COLUMNS,
        description=f"The most columns rows may add, per chunk and per table (0 to {MAX_NEW_COLUMNS:,}).",
    )
    retain: str | None = Field(
        None,
        max_length=100,
        description="Keep a standard partition this long after its period ends (90d), then expire it; "
        "none: for ever; namespace: its namespace's default.",
    )
    cluster_by: str | None = Field(
        None,
        max_length=1000,
        description='The columns its next rolls order each partition\'s rows by, "A,B" (as `table alter '
        "--cluster-by`); none: stop clustering. Partitions rolled already keep their files.",
    )
    primary_key: str | None = Field(
        None,
        max_length=1000,
        description='Give the table, which must be empty, a primary key: its columns, "A,B" (as `table '
        "alter --primary-key`); it keeps one row per key from then on.",
    )
    sequence_by: str | None = Field(
        None, max_length=200, description="With primary_key: the column whose greatest value wins."
    )
    op_column: str | None = Field(
        None, max_length=200, description="With primary_key: the column saying whether a record deletes."
    )
    delete_ops: str | None = Field(
        None, max_length=1000, description='With op_column: the values that delete, "d,DELETE".'
    )
    upsert_ops: str | None = Field(
        None, max_length=1000, description='With op_column: the values that upsert, "c,r,u,INSERT,UPDATE".'
    )


class DeleteRows(BaseModel):
    """``POST /v1/tables/{ns}/{t}/deletes``: delete the rows matching ``where``."""

    model_config = ConfigDict(extra="forbid")

    where: str = Field(
        min_length=1,
        max_length=100_000,
        description="One SQL condition over the table's columns (user_id = 42): the rows it is true for go.",
    )
    all: bool = Field(False, description="Allow a condition that names no column (TRUE): every row goes.")
    dry_run: bool = Field(False, description="Only count the rows and files it would touch.")


class DeleteInfo(BaseModel):
    table: str
    where: str
    rows: int = Field(description="Rows deleted (a dry run: that would be).")
    files_removed: int
    files_added: int
    partitions: list[str] = Field(description="The partitions it rewrote.")
    rows_read: int
    files_read: int
    delete: str | None = Field(description="The delete's id (null: a dry run).")
    read_version: int | None = Field(description="The version whose rows it deleted; later rows stay.")
    version: int | None = Field(description="The Delta version of its commit.")
    dry_run: bool
    resumed: bool = Field(description="An earlier delete of the table that had died, finished first.")


class AlteredTable(TableInfo):
    """The answer of ``PATCH /v1/tables/{ns}/{t}``: the table as ``GET`` describes it, and its change."""

    schema_change: SchemaChangeInfo | None = Field(
        None, description="The schema change made (null: only the evolution settings changed)."
    )


class CreateLink(BaseModel):
    """``POST /v1/namespaces/{ns}/links``: link a table of another namespace into ``ns``."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=255, description="The link's local name in the namespace.")
    to: str = Field(min_length=1, max_length=511, description="The source table: NAMESPACE.TABLE.")
    static: bool = Field(
        False,
        description="Static: exactly the partitions listed (``partitions``, ``values``; added and dropped "
        "later with …/partitions). Dynamic (default): every standard partition, as the source rolls.",
    )
    partitions: str | None = Field(
        None,
        max_length=200,
        description="FROM..TO (ISO-8601, TO excluded): dynamic links admit only partitions in it (either "
        "end may be empty); static links list every partition of the source in it (both ends needed).",
    )
    values: list[str] = Field(
        default_factory=list,
        max_length=10_000,
        description="Static links: partition values (ISO-8601, each the start of a source partition).",
    )
    include_streaming: bool = Field(False, description="Also show the source's open streaming partitions.")
    retention: str | None = Field(
        None,
        max_length=100,
        description="Hide partitions whose period ended longer ago than this (30d, 12h, PT6H).",
    )


class LinkPartitions(BaseModel):
    """The partition values to add to or drop from a static link."""

    model_config = ConfigDict(extra="forbid")

    values: list[str] = Field(
        min_length=1, max_length=10_000, description="Partition values, ISO-8601 (2026-11-21T10:00:00Z)."
    )


class NamespaceInfo(BaseModel):
    """A namespace: a virtual warehouse owning tables and links, with isolation and a quota."""

    name: str
    isolated: bool = Field(description="Its queries read only its own tables and its links.")
    quota_bytes: int | None = Field(description="The bytes its tables may hold (null: no quota).")
    description: str
    created_at: str

    @classmethod
    def of(cls, ns: Namespace) -> NamespaceInfo:
        return cls(
            name=ns.name,
            isolated=ns.isolated,
            quota_bytes=ns.quota_bytes,
            description=ns.description,
            created_at=iso(ns.created_at),
        )


class UsageTotals(BaseModel):
    bytes: int
    files: int
    rows: int


class HoldingInfo(BaseModel):
    """What one table (or link) holds (or shows) at one Delta version."""

    name: str
    kind: str = Field(description="main, dead-letter, late, or link")
    version: int = Field(description="The Delta version read (a link: its source's).")
    bytes: int
    standard_bytes: int
    standard_files: int
    standard_rows: int
    streaming_bytes: int
    streaming_files: int
    streaming_rows: int


class OwnedUsage(BaseModel):
    bytes: int = Field(description="Every live file of the namespace's tables (companions included).")
    standard: UsageTotals
    streaming: UsageTotals
    tables: list[HoldingInfo]


class LinkedUsage(BaseModel):
    bytes: int = Field(description="What its links show now: shown, never charged to it.")
    standard: UsageTotals
    streaming: UsageTotals
    links: list[HoldingInfo]


class UsageInfo(BaseModel):
    """A namespace's capacity, read from the Delta logs (``streampart namespace usage --json``)."""

    namespace: str
    quota_bytes: int | None = Field(description="null: no quota.")
    owned: OwnedUsage
    linked: LinkedUsage
    errors: dict[str, str] = Field(description="Links whose source cannot be read, and why.")


class Health(BaseModel):
    status: str
    auth: bool


class ResetTopic(BaseModel):
    """Where a topic's read position moves (``streampart ingest reset --to``)."""

    model_config = ConfigDict(extra="forbid")

    to: str = Field(
        min_length=1,
        max_length=4096,
        description="`earliest`, `latest`, an ISO-8601 time (each partition's first record at or after "
        'it) or JSON offsets `{"0": 42, "1": 7}` (partitions not named stay).',
    )


class IngestJobReport(BaseModel):
    """A Kafka ingest job as it last published itself, with its newest requests."""

    job: str
    updated_at: datetime = Field(description="When the job last published its status (after a batch).")
    status: dict[str, Any] = Field(
        description="`topics`: per topic `state` (reading or paused), `table`, `committed` and `latest` "
        "offsets per partition, `lag_records`, `lag_seconds`, `last_error`; and the job's `routes` (in "
        "words; `route_specs`: each route's topic or pattern, table template and table field, from which "
        "steering is authorised), `dead_letter_table`, `batches`, `refused` tables and `failure`."
    )
    requests: list[IngestRequest] = Field(description="Its newest requests, newest first.")


class IngestRequestInfo(IngestRequest):
    """A request recorded for a job; it applies it before its next batch."""

    job_known: bool = Field(
        description="Whether the job has run against this metastore; if not, the request waits for it."
    )

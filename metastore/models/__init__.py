"""The product's nouns: tables, partitions, chunks and rolls, and their lifecycles.

A package, one module per concept: ``lifecycles`` (the state enums and their allowed
transitions), ``names`` (identifiers, table names), ``periods`` (UTC instants and periods),
``columns`` (a table's columns and schema text), ``evolution`` (schema changes: which types
widen in place, the checks of an ALTER), ``schema_history`` (a table's recorded schema
changes), ``tables`` (TableSpec, Table, modes, kinds, companions), ``records`` (partitions,
chunks, rolls, leases, moves, status rows) and ``tokens`` (the HTTP API's tokens). Almost every
module of streampart uses these nouns, so this ``__init__`` exports them all: import them from
``metastore.models``.
"""

from metastore.models.columns import (
    SQL_TYPES,
    Column,
    check_column_name,
    format_schema,
    parse_schema,
    reserved_refusal,
)
from metastore.models.evolution import (
    SchemaChange,
    SchemaEvolution,
    merge_proposals,
    parse_column_change,
    plan_alter,
    widening_refusal,
)
from metastore.models.ingest_jobs import IngestAction, IngestJobStatus, IngestRequest
from metastore.models.lifecycles import (
    ChunkState,
    DeleteState,
    ExpiryState,
    MoveStep,
    PartitionState,
    RollState,
    SchemaChangeState,
    check_transition,
)
from metastore.models.names import PRIMARY, TableName, check_identifier
from metastore.models.periods import (
    EPOCH,
    MAX_EVENT_TIME,
    MIN_EVENT_TIME,
    iso,
    parse_instant,
    period_start,
    saturating_add,
    utc,
)
from metastore.models.records import (
    Chunk,
    ChunkSummary,
    DaemonBeat,
    Delete,
    Expiry,
    Lease,
    Move,
    Partition,
    Roll,
    RollAttempt,
    RollOutcome,
    StagedFile,
    TableActivity,
)
from metastore.models.schema_history import RecordedSchemaChange, column_changes, describe_changes
from metastore.models.tables import (
    COMPANION_SUFFIX,
    DEFAULT_MAX_NEW_COLUMNS,
    LateDataPolicy,
    Mode,
    Table,
    TableKind,
    TableSpec,
    companion_name,
    default_partition_column,
)
from metastore.models.tokens import ApiToken, Permission, Scope, check_token_name

__all__ = [
    "COMPANION_SUFFIX",
    "DEFAULT_MAX_NEW_COLUMNS",
    "EPOCH",
    "MAX_EVENT_TIME",
    "MIN_EVENT_TIME",
    "PRIMARY",
    "SQL_TYPES",
    "ApiToken",
    "Chunk",
    "ChunkState",
    "ChunkSummary",
    "Column",
    "DaemonBeat",
    "Delete",
    "DeleteState",
    "Expiry",
    "ExpiryState",
    "IngestAction",
    "IngestJobStatus",
    "IngestRequest",
    "LateDataPolicy",
    "Lease",
    "Mode",
    "Move",
    "MoveStep",
    "Partition",
    "PartitionState",
    "Permission",
    "RecordedSchemaChange",
    "Roll",
    "RollAttempt",
    "RollOutcome",
    "RollState",
    "SchemaChange",
    "SchemaChangeState",
    "SchemaEvolution",
    "Scope",
    "StagedFile",
    "Table",
    "TableActivity",
    "TableKind",
    "TableName",
    "TableSpec",
    "check_column_name",
    "check_identifier",
    "check_token_name",
    "check_transition",
    "column_changes",
    "companion_name",
    "default_partition_column",
    "describe_changes",
    "format_schema",
    "iso",
    "merge_proposals",
    "parse_column_change",
    "parse_instant",
    "parse_schema",
    "period_start",
    "plan_alter",
    "reserved_refusal",
    "saturating_add",
    "utc",
    "widening_refusal",
]

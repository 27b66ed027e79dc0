"""What the modules of the chunk protocol share: a commit's answer, a dead letter, a writer's surface.

:class:`Writer` is the part of :class:`~ingest.chunks.writer.ChunkWriter` that the group commit
(``group_commit.py``) and the routing of late rows and dead letters (``late.py``) use: the
table it writes, its metastore and warehouse, and the public steps of the protocol. They take
the writer as this protocol, so neither imports the writer that calls them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from ingest.config import ChunkConfig
from ingest.records import Parsed, RecordValidator
from metastore.catalog import Catalog
from metastore.delta import staging
from metastore.models import Chunk, Column, Table


@dataclass(frozen=True)
class DeadLetter:
    """A bad record on its way to the dead-letter table, with its source position."""

    position: int | None  # line or row of a chunk, or the offset of a Kafka record
    reason: str
    raw: bytes  # exactly as received
    source: str | None = None  # file, URL or topic/partition it came from


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
    # fields the table had no column for that became columns (schema evolution): name → SQL type;
    # known as ignored_fields is (another writer may have added some of them at the same time)
    new_columns: dict[str, str] = field(default_factory=dict)
    # ignored fields that schema evolution could not make columns, and why
    refused_fields: dict[str, str] = field(default_factory=dict)
    # the chunk had committed before this call (another attempt did): an answer to a retry, which
    # counts nothing again; not part of the answer, which is the same either way
    repeated: bool = field(default=False, compare=False)

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
            "new_columns": self.new_columns,
            "refused_fields": self.refused_fields,
        }


class Writer(Protocol):
    """A chunk writer of one table, as the group commit and the late-data routing use it."""

    @property
    def catalog(self) -> Catalog: ...
    @property
    def table(self) -> Table: ...
    @property
    def config(self) -> ChunkConfig: ...
    @property
    def late_rows_to_dead_letter(self) -> bool: ...
    @property
    def store(self) -> Any: ...
    @property
    def warehouse(self) -> Any: ...

    def writer_for(self, table: Table) -> Writer:
        """A writer of ``table`` (a companion of this one's) with this writer's catalog and settings."""
        ...

    def schema_changed(self, columns: Sequence[Column]) -> None:
        """Learn the table's columns after a commit of this writer's brought new ones."""
        ...

    def reserve(self, key: str | None = None) -> Chunk: ...
    def validator(self) -> RecordValidator: ...
    def stage_parsed(self, chunk: Chunk, parsed: Parsed) -> Chunk: ...
    def commit(self, chunk_id: str) -> CommitResult: ...
    def abort(self, chunk_id: str, reason: str) -> Chunk: ...
    def result(self, chunk: Chunk) -> CommitResult: ...


def remove_staged(writer: Writer, chunk: Chunk) -> None:
    """Delete the staged files of ``chunk`` (and their links in partition staging directories)."""
    for f in chunk.files:
        staging.remove(writer.table, f.path)

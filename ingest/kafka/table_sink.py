"""One table of a Kafka ingest job: its chunk of the batch in flight, what the tasks staged for it.

:class:`TableSink` holds a table's :class:`~ingest.chunks.ChunkWriter` across batches and, for the
batch in flight, its chunk (reserved under the batch's idempotency key), the files and bad records
the tasks staged for it, and the fields its records held that it has no column for. The batch
(:mod:`ingest.kafka.batch_sink`) asks each table whether its staging must be redone — the tasks
inferred a new field's type differently, or another writer changed the columns meanwhile — records
the files, and commits. Nothing here starts a Spark job.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pyarrow as pa

from ingest.chunks import ChunkWriter, CommitResult, DeadLetter, time_bounds
from ingest.chunks.evolving import proposal
from ingest.config import ChunkConfig
from ingest.errors import IngestError
from ingest.evolution import NewFields, joined_type
from ingest.kafka.registry import RecordSchemas
from ingest.kafka.staging import StageSpec, stage_records, stage_spec
from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import remove_file
from metastore.models import Chunk, ChunkState, Column, SchemaEvolution, StagedFile, Table, merge_proposals

log = logging.getLogger(__name__)

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A key whose chunk expired or was aborted never landed: the batch takes the next suffix.
MAX_TOKEN_ATTEMPTS = 100
# How many times a table's part of a batch is staged again because its schema changed under it
# (as ChunkWriter.write's retries).
SCHEMA_RETRIES = 3
# Task numbers of the files the driver stages itself (records of a table first seen in the batch):
# above any Spark task's.
DRIVER_TASK = 90_000


def joined_types(table: Table, files: Sequence[StagedFile]) -> tuple[Column, ...] | None:
    """None if the columns of ``files`` (staged by separate tasks) agree; else the new columns with
    their types joined over the tasks, for every task to parse as known columns."""
    brought = proposal(files)
    _, [reason] = merge_proposals(table.columns, [brought], table.partition_column, widen=True)
    if reason is None:
        return None
    known = {c.name for c in table.columns}
    kinds: dict[str, Counter[str]] = {}
    for c in brought:
        if c.name not in known:
            kinds.setdefault(c.name, Counter())[c.type] += 1
    return tuple(Column(name=name, type=joined_type(seen) or "string") for name, seen in kinds.items())


def _from_micros(value: int | None) -> datetime | None:
    return None if value is None else EPOCH + timedelta(microseconds=value)


class TableSink:
    """A table an ingest job writes; see the module docstring."""

    def __init__(
        self,
        catalog: Catalog,
        table: Table,
        fmt: str,
        config: ChunkConfig,
        schemas: RecordSchemas | None = None,
    ) -> None:
        self.catalog = catalog
        self.fmt = fmt
        self.schemas = schemas
        self.config = config
        self.writer = ChunkWriter(catalog, table, config, late_rows_to_dead_letter=True)
        self._ignorable: set[str] = set()  # fields whose names can never be columns (StageSpec)
        if fmt == "csv" and table.schema_evolution is not SchemaEvolution.NONE:
            log.warning(
                "table %s evolves its schema from data, but Kafka CSV records are positional (no header "
                "names their fields): this job adds no columns",
                table.name,
            )
        self._reset(None)

    def _reset(self, chunk: Chunk | None) -> None:
        self.chunk = chunk
        self.added: tuple[Column, ...] = ()
        self.files: list[StagedFile] = []
        self.bad: list[DeadLetter] = []
        self.ignored: Counter[str] = Counter()
        self.records = 0  # records staged (rows and bad ones)
        self.pending: list[pa.RecordBatch] = []  # records the driver stages itself (first seen here)
        self.restages = 0

    @property
    def table(self) -> Table:
        return self.writer.table

    @property
    def name(self) -> str:
        return str(self.table.name)

    # -- the batch's chunk -------------------------------------------------------------------
    def begin(self, key: str) -> Chunk:
        """Reserve (or find) this table's chunk of the batch whose idempotency key is ``key``."""
        for attempt in range(MAX_TOKEN_ATTEMPTS):
            chunk = self.writer.reserve(key if attempt == 0 else f"{key}#{attempt + 1}")
            if chunk.state in (ChunkState.ABORTED, ChunkState.EXPIRED):
                continue  # never landed: take a fresh chunk for this batch
            self._reset(chunk)
            return chunk
        raise IngestError(f"{key}: {MAX_TOKEN_ATTEMPTS} chunks of this batch failed in {self.name}")

    @property
    def committed(self) -> bool:
        return self.chunk is not None and self.chunk.state is ChunkState.COMMITTED

    @property
    def committing(self) -> bool:
        """Whether the chunk's commit began before a crash (its files are recorded: commit it as it is)."""
        return self.chunk is not None and self.chunk.state is ChunkState.COMMITTING

    def spec(self) -> StageSpec:
        """What the tasks need to stage this table's records into its chunk (one clock reading)."""
        assert self.chunk is not None
        table = self.table
        return stage_spec(
            self.catalog.warehouse,
            table,
            self.chunk.id,
            self.fmt,
            self.config.max_value_bytes,
            time_bounds(table, clock.now()),
            self.added,
            frozenset(self._ignorable),
            self.schemas,
        )

    # -- what the tasks staged -------------------------------------------------------------
    def take(self, rows: Iterable[Any]) -> list[DeadLetter]:
        """Take the tasks' rows for this table; returns the bad records that go to the job's dead
        letters (this table has no dead-letter table of its own)."""
        orphans: list[DeadLetter] = []
        for r in (SimpleNamespace(**x) if isinstance(x, dict) else x for x in rows):
            if r.path is not None:
                columns = None if r.columns is None else tuple(Column(**c) for c in json.loads(r.columns))
                self.files.append(
                    StagedFile(
                        path=r.path,
                        rows=r.rows,
                        bytes=r.bytes,
                        period=_from_micros(r.period_us),
                        columns=columns,
                        stats=getattr(r, "stats", None) or "{}",
                    )
                )
                self.records += r.rows
            elif r.reason is not None:
                letter = DeadLetter(r.position, r.reason, bytes(r.raw or b""), r.source)
                self.records += 1
                if self.table.dead_letter:
                    self.bad.append(letter)
                else:
                    orphans.append(
                        DeadLetter(r.position, f"table {self.name}: {r.reason}", letter.raw, r.source)
                    )
            if r.ignored:
                self.ignored.update(json.loads(r.ignored))
        return orphans

    def stage_pending(self, records: Sequence[pa.RecordBatch]) -> pa.RecordBatch:
        """Stage, in this process, records the tasks left to the driver (the table was new to the job)."""
        self.pending = list(records)
        return stage_records(self.spec(), DRIVER_TASK, iter(self.pending))

    def restage_needed(self) -> bool:
        """Whether the tasks must stage this table's records again; if so, what they staged is removed.

        When the tasks inferred a new field's type differently, they stage again with the joined
        types as known columns; when the records bring new fields and another writer changed the
        table's columns since this job read them, they stage again as the table is now.
        """
        table = self.table
        self._learn_ignorable()
        known = {c.name for c in table.columns}
        brings = any(c.name not in known for f in self.files for c in f.columns or ())
        joined = joined_types(table, self.files)
        if not (brings and self.writer.refresh_columns()) and joined is None:
            return False
        self.restages += 1
        if self.restages > SCHEMA_RETRIES:
            raise IngestError(
                f"chunk {self.chunk.id if self.chunk else '?'} of {self.name}: the table's schema changed "
                f"{SCHEMA_RETRIES} times while it was staged"
            )
        self.discard()
        self.added = joined or ()
        return True

    def discard(self) -> None:
        """Remove what the tasks staged (never recorded) and forget it, for another staging."""
        for f in self.files:
            remove_file(self.table, f.path)
        self.files, self.bad, self.ignored, self.records = [], [], Counter(), 0

    def _learn_ignorable(self) -> None:
        """Remember the ignored fields whose names can never be columns (see ``StageSpec.ignorable``)."""
        table = self.table
        if table.schema_evolution is SchemaEvolution.NONE:
            return
        names = NewFields(table.columns, table.partition_column)
        self._ignorable.update(name for name in self.ignored if names.refusal(name) is not None)

    # -- commit ----------------------------------------------------------------------------
    def record(self) -> None:
        """Record the staged files (and bad records) as the chunk's data."""
        assert self.chunk is not None
        self.chunk = self.writer.stage_files(self.chunk, self.files, self.bad)

    def commit(self) -> CommitResult:
        """Commit the chunk (SchemaConflictError: staged before another writer added one of its new
        fields as another type; the chunk was released, nothing of it committed)."""
        assert self.chunk is not None
        result = self.writer.commit(self.chunk.id, owner_is_dead=True)
        self.chunk = self.chunk.model_copy(update={"state": ChunkState.COMMITTED})
        if self.ignored:
            fields = ", ".join(f"{k} ({n} records)" for k, n in sorted(self.ignored.items()))
            log.warning("fields not in table %s were not written: %s", self.name, fields)
        return result

    def conflicted(self) -> None:
        """After a SchemaConflictError: read the columns again, to stage once more."""
        assert self.chunk is not None
        self.writer.refresh_columns()
        self.chunk = self.writer.store.get_chunk(self.chunk.id)
        self.discard()

    def abort(self, reason: str) -> None:
        """Abort the batch's chunk, if it is still reserved (the batch held nothing for the table)."""
        if self.chunk is not None and self.chunk.state is ChunkState.RESERVED:
            self.writer.abort(self.chunk.id, reason)
        self._reset(None)

"""One micro-batch → one chunk per table it touched, each exactly once, and the job's dead letters.

:class:`BatchSink` is the ingest query's ``foreachBatch`` function. For batch ``n`` of the query
whose id is ``q`` (both kept in Spark's checkpoint, so a replay after a restart has the same ones),
every table's chunk has the idempotency key ``kafka:q:n`` in that table:

1. The batch's plan is fixed (:mod:`ingest.kafka.batch_plans`): its routes, and the tables whose
   topics hold records in its offset ranges (and those a field route named lately). If the job's
   dead letters of the batch are committed, the whole batch is: it is done.
2. Each planned table's chunk is reserved (or found: a table whose chunk committed before a crash
   is skipped, its records left alone). A table that refuses — dropped, read-only, not the
   table's primary, a companion — is *refused*: its records go to the job's dead letters.
3. One Spark job reads the batch: each task reads its offset range from Kafka itself (the query's
   source yields the ranges, ``streampart.emit=ranges``), splits its records by table and stages
   each table's part (:mod:`ingest.kafka.route_task`). Records of a table new to the job come back to the
   driver, which reserves that table's chunk and stages them itself. A table whose schema moved
   under its staging is staged again, alone.
4. The tables commit one after another, in name order; a commit refused (the namespace's quota)
   sends the table's records to the job's dead letters (another pass reads them again).
5. Last, the job's dead letters commit: unrouted records, refused tables' records, bad records of
   tables that have no dead-letter table of their own. Their commit marks the batch done.

A crash anywhere replays the batch: the tables that committed are skipped, the others commit, the
dead letters last; a record lands once, in its table or in the dead letters.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ingest.chunks import ChunkWriter, DeadLetter
from ingest.chunks.late import dead_letter_rows
from ingest.config import ChunkConfig
from ingest.errors import IngestError
from ingest.formats import parse_arrow
from ingest.kafka.batch_plans import BatchPlan, fix_plan
from ingest.kafka.registry import RecordSchemas
from ingest.kafka.route_task import ROUTED_SCHEMA, RoutedSpec, route_task
from ingest.kafka.routes import Routes
from ingest.kafka.table_sink import TableSink
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint
from metastore.errors import (
    FederationAccessError,
    IsolationError,
    NotFoundError,
    QuotaExceededError,
    ReadOnlyLinkError,
    SchemaConflictError,
    SecondaryWriteError,
)
from metastore.models import ChunkState, Table, TableKind

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ingest.kafka.options import KafkaSourceOptions

log = logging.getLogger(__name__)

# What makes a table refuse a batch's records: they go to the job's dead letters, the other
# tables go on. (A metastore or store that is down fails the batch instead: it is replayed.)
REFUSALS = (
    NotFoundError,
    FederationAccessError,
    ReadOnlyLinkError,
    SecondaryWriteError,
    IsolationError,
    QuotaExceededError,
)
# A field route's tables stay planned (chunks reserved up front) this many batches after their last records.
FIELD_TABLES_KEPT = 10


def refusal(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def spark_schema() -> Any:
    """:data:`~ingest.kafka.route_task.ROUTED_SCHEMA` as Spark's type."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(ROUTED_SCHEMA)


class JobDeadLetters:
    """The job's dead-letter table: records no table took, with the reason."""

    def __init__(self, catalog: Catalog, table: Table, config: ChunkConfig) -> None:
        self.writer = ChunkWriter(catalog, table, config)

    @property
    def name(self) -> str:
        return str(self.writer.table.name)

    def done(self, key: str) -> bool:
        chunk = self.writer.store.find_chunk_by_key(self.writer.table.id, key)
        return chunk is not None and chunk.state is ChunkState.COMMITTED

    def commit(self, key: str, letters: Sequence[DeadLetter]) -> int:
        """Commit ``letters`` as the batch's dead letters (once per ``key``); how many."""
        writer = self.writer
        chunk = writer.reserve(key)
        if chunk.state is ChunkState.RESERVED:
            rows = dead_letter_rows(key, letters, writer.validator().schema)
            writer.stage_parsed(chunk, parse_arrow(rows, writer.validator()))
        return writer.commit(chunk.id, owner_is_dead=True).rows


def _letter(r: Any) -> DeadLetter:
    return DeadLetter(r.position, r.reason, bytes(r.raw or b""), r.source)


class BatchSink:
    """The ``foreachBatch`` function of a routed ingest; see the module docstring."""

    def __init__(
        self,
        catalog: Catalog,
        routes: Callable[[], Routes],
        dead_letters: JobDeadLetters | None,
        fmt: str,
        checkpoint: str,
        query_id: Callable[[], str],
        config: ChunkConfig,
        topics_with_data: Callable[[int], set[str] | None],
        source: KafkaSourceOptions,
        schemas: RecordSchemas | None = None,
    ) -> None:
        """``source``: the options of the query's source, which yields offset ranges
        (``streampart.emit=ranges``) that the batch's tasks then read themselves."""
        assert source.emit_ranges, "the ingest job's source yields offset ranges"
        self.catalog = catalog
        self.routes = routes
        self.dead = dead_letters
        self.fmt = fmt
        self.checkpoint = checkpoint
        self.query_id = query_id
        self.config = config
        self.topics_with_data = topics_with_data
        self.schemas = schemas
        self.source = source
        self.sinks: dict[str, TableSink] = {}
        self.field_tables: dict[str, int] = {}  # tables a field route named → the batch it last did
        self.refused: dict[str, str] = {}  # the last batch's refused tables → why
        self.last: dict[str, tuple[int, int]] = {}  # the last batch's tables → (rows, bad records)

    # -- planning ----------------------------------------------------------------------------
    def plan(self, batch_id: int) -> BatchPlan:
        routes = self.routes()
        topics = self.topics_with_data(batch_id)
        tables = set()
        if topics is not None:
            tables = {t for t in map(routes.table_of_topic, topics) if t is not None}
        else:  # the batch's ranges are not known: every table a route names by topic alone
            tables = {r.fixed_table for r in routes.routes if r.fixed_table is not None}
        tables |= {t for t, n in self.field_tables.items() if n > batch_id - FIELD_TABLES_KEPT}
        return fix_plan(self.checkpoint, batch_id, BatchPlan(routes, tuple(sorted(tables))))

    def sink(self, name: str) -> TableSink:
        """The table ``name``'s sink (NotFoundError, UserInputError: the table refuses)."""
        sink = self.sinks.get(name)
        if sink is None:
            table = self.catalog.table(name)
            if table.kind is not TableKind.MAIN:
                raise NotFoundError(f"{table.name} is a {table.kind.value} table, not a main table")
            sink = self.sinks[name] = TableSink(self.catalog, table, self.fmt, self.config, self.schemas)
        return sink

    # -- the batch -----------------------------------------------------------------------------
    def __call__(self, df: DataFrame, batch_id: int) -> dict[str | None, tuple[int, int]]:
        """Run the batch; the rows and dead letters committed per table (the job's own: ``None`` key)."""
        started = time.monotonic()
        key = f"kafka:{self.query_id()}:{batch_id}"
        plan = self.plan(batch_id)
        if self.dead is not None and self.dead.done(key):
            log.info("batch %s already committed (replay after restart)", batch_id)
            return {}
        state = _Batch(self, df, batch_id, key, plan)
        counts = state.run()
        if self.dead is None:
            return counts  # the table's own line said it all
        log.info(
            "batch %s → %s table(s): %s rows, %s dead letters in %.2f s",
            batch_id,
            len([t for t in counts if t is not None]),
            sum(r for r, _ in counts.values()),
            sum(b for _, b in counts.values()),
            time.monotonic() - started,
        )
        self.refused = dict(state.refused)
        return counts


class _Batch:
    """One attempt at one batch (see :class:`BatchSink`)."""

    def __init__(self, owner: BatchSink, df: DataFrame, batch_id: int, key: str, plan: BatchPlan) -> None:
        self.owner, self.df, self.batch_id, self.key, self.plan = owner, df, batch_id, key, plan
        self.routes = plan.routes
        self.live: dict[str, TableSink] = {}  # tables staging a chunk in this batch
        self.done: set[str] = set()  # tables whose chunk committed before (a replay)
        self.refused: dict[str, str] = {}
        self.letters: list[DeadLetter] = []  # the job's dead letters
        self.started = time.monotonic()

    def run(self) -> dict[str | None, tuple[int, int]]:
        for name in self.plan.tables:
            self._open(name)
        committing = {name for name, s in self.live.items() if s.committing}
        rows: dict[str | None, list[Any]] = {}
        to_stage = len(committing) < len(self.live)
        if to_stage or self.refused or self.owner.dead is not None or self.routes.fields():
            skip = frozenset(self.done | committing)
            rows = self._pass(RoutedSpec(self.routes, self._specs(self.live), skip, self.refused))
        # else nothing to read again: every table committed, or began to, before a restart
        pending: dict[str, list[Any]] = defaultdict(list)
        for table in rows:
            if table in self.owner.field_tables:
                self.owner.field_tables[table] = self.batch_id
        for table, group in rows.items():
            if table is None:
                self.letters.extend(map(_letter, group))
                continue
            for r in group:
                if r.pending:
                    pending[table].append(r)
            staged = [r for r in group if not r.pending]
            if staged:
                self.letters.extend(self.live[table].take(staged))
        for table, records in pending.items():
            self._stage_new(table, records)
        self._restage()
        counts = self._commit_tables()
        if self.letters:
            if self.owner.dead is None:  # cannot happen: a one-table job's table has its own
                raise IngestError(f"{self.key}: {len(self.letters)} records have no dead-letter table")
            crashpoint("kafka-before-dead-letters")
            counts[None] = (0, self.owner.dead.commit(self.key, self.letters))
        return counts

    def _open(self, name: str) -> TableSink | None:
        try:
            sink = self.owner.sink(name)
            sink.begin(self.key)
        except REFUSALS as exc:
            if self.owner.dead is None:  # a one-table job: nothing else to go on with
                raise
            self.refused[name] = refusal(exc)
            return None
        if sink.committed:
            self.done.add(name)
            return None
        self.live[name] = sink
        return sink

    def _specs(self, sinks: dict[str, TableSink]) -> dict[str, Any]:
        return {name: s.spec() for name, s in sinks.items() if not (s.pending or s.committing)}

    def _pass(self, spec: RoutedSpec) -> dict[str | None, list[Any]]:
        """One Spark job over the batch; its rows by table (None: the job's dead letters)."""
        by_table: dict[str | None, list[Any]] = defaultdict(list)
        for r in self.df.mapInArrow(  # (the batch's rows are offset ranges: each task reads its own)
            route_task(dataclasses.replace(spec, source=self.owner.source)), spark_schema()
        ).collect():
            by_table[r.table].append(r)
        return by_table

    def _stage_new(self, name: str, records: list[Any]) -> None:
        """Stage, here, the records of a table the plan did not reserve (a field route named it)."""
        self.owner.field_tables[name] = self.batch_id
        if name in self.refused or name in self.done:
            return
        sink = self._open(name)
        if sink is None:
            if name in self.refused:
                reason = self.refused[name]
                self.letters.extend(
                    DeadLetter(r.position, f"table {name}: {reason}", bytes(r.raw or b""), r.source)
                    for r in records
                )
            return
        batch = pa.RecordBatch.from_pylist(
            [
                {
                    "value": r.raw,
                    "topic": r.source.rsplit("/", 1)[0],
                    "partition": int(r.source.rsplit("/", 1)[1]),
                    "offset": r.position,
                }
                for r in records
            ],
            schema=pa.schema(
                [
                    ("value", pa.binary()),
                    ("topic", pa.string()),
                    ("partition", pa.int32()),
                    ("offset", pa.int64()),
                ]
            ),
        )
        self.letters.extend(sink.take(sink.stage_pending([batch]).to_pylist()))

    def _restage(self) -> None:
        """Stage again the tables whose schema moved under their staging, until none does."""
        while True:
            again = {name: s for name, s in self.live.items() if s.restage_needed()}
            if not again:
                return
            for s in again.values():
                if s.pending:
                    self.letters.extend(s.take(s.stage_pending(s.pending).to_pylist()))
            spark = {n: s for n, s in again.items() if not s.pending}
            if spark:
                rows = self._pass(RoutedSpec(self.routes, self._specs(spark), others=False))
                for table, group in rows.items():
                    if table is not None:
                        self.letters.extend(self.live[table].take(group))

    def _commit_tables(self) -> dict[str | None, tuple[int, int]]:
        counts: dict[str | None, tuple[int, int]] = {}
        late: dict[str, str] = {}
        for name in sorted(self.live):
            sink = self.live[name]
            if not (sink.records or sink.committing):
                sink.abort("the batch held no records for this table")
                continue
            try:
                result = self._commit(sink)
            except REFUSALS as exc:
                if self.owner.dead is None:
                    raise
                late[name] = refusal(exc)
                continue
            counts[name] = (result.rows, result.dead_letter_rows)
            one_table = self.owner.dead is None  # the line a one-table job always logged
            log.log(
                logging.INFO if one_table else logging.DEBUG,
                "batch %s → chunk %s%s: %s rows, %s dead letters, %s late, version %s in %.2f s",
                self.batch_id,
                result.chunk,
                "" if one_table else f" of {name}",
                result.rows,
                result.dead_letter_rows,
                result.late_rows,
                result.version,
                time.monotonic() - self.started,
            )
            crashpoint("kafka-between-tables")
        if late:  # their records, read again, go to the job's dead letters
            self.refused.update(late)
            rows = self._pass(RoutedSpec(self.routes, refused=late, others=False))
            self.letters.extend(map(_letter, rows.get(None, ())))
        return counts

    def _commit(self, sink: TableSink) -> Any:
        for _ in range(3):
            if not sink.committing:
                sink.record()
                crashpoint("chunk-after-write")
            try:
                return sink.commit()
            except SchemaConflictError:
                sink.conflicted()
                if sink.pending:
                    self.letters.extend(sink.take(sink.stage_pending(sink.pending).to_pylist()))
                else:
                    rows = self._pass(RoutedSpec(self.routes, self._specs({sink.name: sink}), others=False))
                    self.letters.extend(sink.take(rows.get(sink.name, ())))
                self._restage()
        raise IngestError(f"{self.key}: table {sink.name}'s schema changed three times while it committed")

"""The Kafka ingest job: Kafka → Spark Structured Streaming → chunk commits, exactly once.

:class:`KafkaIngestOptions` says what to ingest (the CLI's ``streampart ingest kafka`` flags);
:func:`run_kafka_ingest` runs the query until it stops, :func:`start_kafka_ingest` starts it
and returns it. The records come from the ``streampart-kafka`` source (:mod:`ingest.kafka.source`).

Each micro-batch becomes one chunk of the table, committed once whatever crashes and
replays happen:

1. The driver reserves the chunk under the idempotency key ``kafka:<query id>:<batch id>``. The query id
   lives in the checkpoint, so a batch replayed after a restart finds the same chunk: if it
   is committed, the batch is done and Spark is not even asked to read it again.
2. One Spark job reads the batch's offset ranges (the ``streampart-kafka`` source), and each
   task parses and validates its records and writes its good rows straight to the table's
   staging area (``<chunk>-<task>-<k>.parquet``). Tasks return only file names, row counts
   and the bad records, so the driver never holds the rows.
3. The driver records the files (bad records go to the dead-letter table, by the same chunk)
   and commits the chunk: one Delta transaction, in whichever streaming partition(s) the
   rows belong to (arrival mode: the open one; event-time: each row's own, late rows per the
   table's policy).

A Kafka record maps to exactly one row or one dead-letter entry, and a chunk lands once, so
offsets map to rows one to one.

The tasks' side is :mod:`ingest.kafka.staging` (records → Arrow → Parquet, importing only
pyarrow); after each commit :mod:`ingest.kafka.monitoring` updates the ``/metrics`` port and the
monitoring consumer group. ``should_stop`` (the CLI's SIGTERM) stops the query between batches.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ingest.chunks import ChunkWriter, DeadLetter, time_bounds
from ingest.chunks.evolving import proposal
from ingest.config import ChunkConfig
from ingest.errors import IngestError, IngestQueryError, StopRequestedError
from ingest.evolution import NewFields, joined_type
from ingest.kafka.monitoring import GroupCommitter, IngestMetrics, batch_end_offsets, progress_latest_offsets
from ingest.kafka.options import KafkaSourceOptions, check_offsets_spec, subscribe_options
from ingest.kafka.staging import stage_spec, stage_task
from metastore import clock
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint
from metastore.delta.files import remove_file
from metastore.delta.warehouse import Warehouse
from metastore.durations import Duration
from metastore.errors import NamespaceMovingError, NotFoundError, SchemaConflictError, UserInputError
from metastore.models import (
    ChunkState,
    Column,
    SchemaEvolution,
    StagedFile,
    Table,
    TableKind,
    TableName,
    merge_proposals,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

CHECKPOINTS_DIR = "_checkpoints"
# A key whose chunk expired or was aborted never landed: the batch takes the next suffix.
MAX_TOKEN_ATTEMPTS = 100
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Why 120 s: a batch in flight when the job is told to stop normally ends within a trigger or
# two; one that takes longer (a broker outage being ridden out) is stopped and replayed later.
STOP_GRACE_S = 120.0


class KafkaIngestOptions(BaseModel):
    """One Kafka → table ingest job: what the CLI's flags and a spark-submit script set."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    table: str = Field(description="Target table, NS.TABLE.")
    bootstrap: str = Field(description="Kafka bootstrap servers, HOST:PORT[,HOST:PORT…].")
    topic: str = Field(description="Topic(s) to read, comma-separated.")
    format: Literal["json", "csv"] = Field(
        "json", description="Record format: a JSON object, or one CSV line in the table's column order."
    )
    trigger: Duration = Field(
        timedelta(seconds=5), description="Micro-batch interval (ignored with available_now)."
    )
    available_now: bool = Field(
        False, description="Process what is in the topic at start, in rate-limited batches, then stop."
    )
    checkpoint: str | None = Field(
        None,
        description="Spark checkpoint directory; default <warehouse>/_checkpoints/NS.TABLE/<topic>.",
    )
    max_offsets_per_trigger: int | None = Field(
        None, gt=0, description="Rate limit: at most this many records per micro-batch."
    )
    starting_offsets: str = Field(
        "earliest",
        description="Where a new query starts: earliest, latest, or JSON {topic: {partition: offset}}.",
    )
    fail_on_data_loss: bool = Field(
        True, description="Fail when offsets to read were deleted by retention (false: skip them)."
    )
    source_options: dict[str, str] = Field(
        default_factory=dict, description="More options for the Kafka source (its own names)."
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Serve Prometheus metrics on this port (0: a free one); none: off."
    )
    consumer_group: str | None = Field(
        None,
        description="Kafka consumer group the committed offsets are also written to, for monitoring "
        "(default streampart-NS.TABLE; empty: none).",
    )

    @property
    def group(self) -> str | None:
        """The consumer group offsets are committed to for monitoring, or None."""
        if self.consumer_group is None:
            return f"streampart-{self.table}"
        return self.consumer_group.strip() or None

    @field_validator("table")
    @classmethod
    def _table_name(cls, v: str) -> str:
        TableName.parse(v)
        return v

    @field_validator("starting_offsets")
    @classmethod
    def _offsets(cls, v: str) -> str:
        check_offsets_spec(v)  # the source's own rule for startingOffsets, checked before any query
        return v

    @model_validator(mode="after")
    def _topics(self) -> KafkaIngestOptions:
        if not self.topics:
            raise ValueError("topic: name at least one topic")
        return self

    @model_validator(mode="after")
    def _source_options_valid(self) -> KafkaIngestOptions:
        # in the driver, before Spark starts: the source would find a bad option only inside its
        # Python worker, where PySpark 4.2 loses the error (an UnboundLocalError of its own)
        KafkaSourceOptions.parse(self.source_reader_options())
        return self

    @property
    def topics(self) -> list[str]:
        return [t.strip() for t in self.topic.split(",") if t.strip()]

    def checkpoint_dir(self, warehouse: Warehouse) -> str:
        if self.checkpoint:
            return str(Path(self.checkpoint).resolve())
        name = ",".join(sorted(self.topics))
        if len(name) > 100 or "/" in name:
            name = hashlib.sha256(name.encode()).hexdigest()[:16]
        return str(warehouse.local_dir / CHECKPOINTS_DIR / self.table / name)

    def source_reader_options(self) -> dict[str, str]:
        """The Kafka source's options (``source_options`` win); the source checks them as the query starts."""
        return subscribe_options(
            self.bootstrap,
            self.topics,
            starting_offsets=self.starting_offsets,
            max_offsets_per_trigger=self.max_offsets_per_trigger,
            fail_on_data_loss=self.fail_on_data_loss,
            extra=self.source_options,
        )


# -- executors ------------------------------------------------------------------------------
def _staged_schema() -> Any:
    from pyspark.sql.types import (
        BinaryType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    return StructType(
        [
            StructField("path", StringType()),
            StructField("rows", LongType()),
            StructField("bytes", LongType()),
            # epoch microseconds, not a timestamp: collect() would turn a timestamp into a naive
            # datetime in the driver's local time zone
            StructField("period_us", LongType()),
            StructField("source", StringType()),
            StructField("position", LongType()),
            StructField("reason", StringType()),
            StructField("raw", BinaryType()),
            StructField("columns", StringType()),
            StructField("ignored", StringType()),
        ]
    )


# How many times a micro-batch is staged again because the table's schema changed under it (see
# ChunkSink._stage; as ChunkWriter.write's retries).
_SCHEMA_RETRIES = 3


def _joined_types(table: Table, files: list[StagedFile]) -> tuple[Column, ...] | None:
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


# -- driver ---------------------------------------------------------------------------------
class ChunkSink:
    """The ``foreachBatch`` function: one micro-batch → one chunk, exactly once."""

    def __init__(
        self,
        catalog: Catalog,
        table: Table,
        options: KafkaIngestOptions,
        checkpoint: str,
        config: ChunkConfig | None = None,
    ) -> None:
        self.catalog = catalog
        self.table = table
        self.options = options
        self.checkpoint = checkpoint
        self.config = config or ChunkConfig()
        self.writer = ChunkWriter(catalog, table, self.config, late_rows_to_dead_letter=True)
        if options.format == "csv" and table.schema_evolution is not SchemaEvolution.NONE:
            log.warning(
                "table %s evolves its schema from data, but Kafka CSV records are positional (no header "
                "names their fields): this job adds no columns",
                table.name,
            )
        self._query_id: str | None = None
        self._ignorable: set[str] = set()  # fields whose names can never be columns (StageSpec)
        self.batches = 0
        self._idle = threading.Condition()
        self._in_batch = False
        self.stopping = False  # set by the job's stop: no new batch starts
        self.metrics: IngestMetrics | None = None
        group = options.group
        self.group = GroupCommitter(options.bootstrap, group) if group else None

    def drain(self, timeout: float) -> bool:
        """Start no new batch; wait until none is in flight (at most ``timeout`` s); whether none is."""
        with self._idle:
            self.stopping = True
            return self._idle.wait_for(lambda: not self._in_batch, timeout)

    def query_id(self) -> str:
        # Spark writes <checkpoint>/metadata ({"id": …}) when the query first starts and keeps
        # it across restarts; it is what makes a replayed batch's idempotency key the same.
        if self._query_id is None:
            meta = json.loads((Path(self.checkpoint) / "metadata").read_text())
            self._query_id = str(meta["id"])
        return self._query_id

    def _chunk_for(self, batch_id: int) -> Any:
        base = f"kafka:{self.query_id()}:{batch_id}"
        for attempt in range(MAX_TOKEN_ATTEMPTS):
            key = base if attempt == 0 else f"{base}#{attempt + 1}"
            chunk = self.writer.reserve(key)
            if chunk.state in (ChunkState.ABORTED, ChunkState.EXPIRED):
                continue  # never landed: take a fresh chunk for this batch
            return chunk
        raise IngestError(
            f"batch {batch_id}: {MAX_TOKEN_ATTEMPTS} chunks of this batch failed; see the metastore"
        )

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        with self._idle:
            if self.stopping:  # a stop was asked for: this batch does no Spark work (none to
                # interrupt); it fails, so Spark does not mark it done, and the next run replays it
                raise StopRequestedError(f"batch {batch_id} not started: the job is stopping")
            self._in_batch = True
        try:
            self._run_batch(df, batch_id)
        finally:
            with self._idle:
                self._in_batch = False
                self._idle.notify_all()

    def _run_batch(self, df: DataFrame, batch_id: int) -> None:
        while True:
            try:
                return self._batch(df, batch_id)
            except (NamespaceMovingError, NotFoundError) as exc:
                # The table's namespace is moving to another metastore: wait for the flip, then the
                # batch goes on there (its key finds its chunk, copied with its id and state).
                moved = self.writer.rebind()
                if not moved and not isinstance(exc, NamespaceMovingError):
                    raise
                self.table = self.writer.table
                if not moved:
                    log.warning("batch %s waits for a namespace move: %s", batch_id, exc)
                    time.sleep(getattr(exc, "retry_after", 1))

    def _batch(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        chunk = self._chunk_for(batch_id)
        if chunk.state is ChunkState.COMMITTED:
            log.info("batch %s already committed as chunk %s (replay after restart)", batch_id, chunk.id)
            self._committed(batch_id, 0, 0, time.monotonic() - started)
            return
        ignored: dict[str, int] = {}
        for attempt in range(1, _SCHEMA_RETRIES + 1):
            if chunk.state is ChunkState.RESERVED:
                chunk, ignored = self._stage(df, chunk)
                crashpoint("chunk-after-write")
            try:
                result = self.writer.commit(chunk.id, owner_is_dead=True)
                break
            except SchemaConflictError:
                # staged before another writer added one of its new fields as another type: once
                # more, as the table is now (the chunk was released, nothing of it committed)
                if attempt == _SCHEMA_RETRIES:
                    raise
                self.writer.refresh_columns()
                chunk = self.writer.store.get_chunk(chunk.id)
        self.table = self.writer.table
        if ignored:
            fields = ", ".join(f"{k} ({n} records)" for k, n in sorted(ignored.items()))
            log.warning(
                "batch %s: fields not in table %s were not written: %s", batch_id, self.table.name, fields
            )
        self.batches += 1
        log.info(
            "batch %s → chunk %s: %s rows, %s dead letters, %s late, version %s in %.2f s",
            batch_id,
            result.chunk,
            result.rows,
            result.dead_letter_rows,
            result.late_rows,
            result.version,
            time.monotonic() - started,
        )
        self._committed(batch_id, result.rows, result.dead_letter_rows, time.monotonic() - started)

    def _stage(self, df: DataFrame, chunk: Any) -> tuple[Any, dict[str, int]]:
        """Stage the micro-batch as ``chunk``'s data; the chunk, and the fields its records held that
        the table has no column for (counted).

        On a table whose schema evolves, tasks infer the types of new fields each from its own
        records: when they disagree (one saw only integers, another text), the batch is staged again
        with the joined types (``ingest/evolution.py``) as known columns. When the records bring new
        fields and another writer changed the table's columns since this job read them, it is staged
        again as the table is now (as ``ChunkWriter.parse`` does).
        """
        added: tuple[Column, ...] = ()
        for _ in range(_SCHEMA_RETRIES):
            table = self.writer.table
            spec = stage_spec(
                self.catalog.warehouse,
                table,
                chunk.id,
                self.options.format,
                self.config.max_value_bytes,
                time_bounds(table, clock.now()),
                added,
                frozenset(self._ignorable),
            )
            staged = (
                df.select("value", "topic", "partition", "offset")
                .mapInArrow(stage_task(spec), _staged_schema())
                .collect()
            )
            files = [
                StagedFile(
                    path=r.path,
                    rows=r.rows,
                    bytes=r.bytes,
                    period=_from_micros(r.period_us),
                    columns=None if r.columns is None else tuple(Column(**c) for c in json.loads(r.columns)),
                )
                for r in staged
                if r.path is not None
            ]
            bad = [
                DeadLetter(r.position, r.reason, bytes(r.raw or b""), r.source)
                for r in staged
                if r.path is None and r.reason is not None
            ]
            ignored: Counter[str] = Counter()
            for r in staged:
                if r.ignored:
                    ignored.update(json.loads(r.ignored))
            self._learn_ignorable(table, ignored)
            known = {c.name for c in table.columns}
            brings = any(c.name not in known for f in files for c in f.columns or ())
            joined = _joined_types(table, files)
            if not (brings and self.writer.refresh_columns()) and joined is None:
                return self.writer.stage_files(chunk, files, bad), dict(ignored)
            for f in files:  # staged again: these were never recorded
                remove_file(table, f.path)
            added = joined or ()
        raise IngestError(
            f"chunk {chunk.id}: the table's schema changed {_SCHEMA_RETRIES} times while it was staged"
        )

    def _learn_ignorable(self, table: Table, ignored: Counter[str]) -> None:
        """Remember the ignored fields whose names can never be columns (see ``StageSpec.ignorable``)."""
        if table.schema_evolution is SchemaEvolution.NONE:
            return
        names = NewFields(table.columns, table.partition_column)
        self._ignorable.update(name for name in ignored if names.refusal(name) is not None)

    def _committed(self, batch_id: int, rows: int, dead_letters: int, seconds: float) -> None:
        """Tell the monitoring (metrics, consumer group) that ``batch_id``'s offsets are committed."""
        if self.metrics is None and self.group is None:
            return
        try:
            offsets = batch_end_offsets(self.checkpoint, batch_id)
        except (OSError, ValueError, IndexError) as exc:
            log.warning(
                "batch %s: cannot read its offsets from the checkpoint for monitoring: %s", batch_id, exc
            )
            return
        if self.metrics is not None:
            self.metrics.batch_committed(offsets, rows, dead_letters, seconds)
        if self.group is not None:
            self.group.commit(offsets)


def start_kafka_ingest(
    spark: SparkSession, catalog: Catalog, options: KafkaIngestOptions, config: ChunkConfig | None = None
) -> StreamingQuery:
    """Start the ingest query; returns the running :class:`StreamingQuery`.

    Raises:
        NotFoundError: the table does not exist.
        UserInputError: the table is a companion table, or the options do not fit it.
    """
    return _start(spark, catalog, options, config)[0]


def _start(
    spark: SparkSession, catalog: Catalog, options: KafkaIngestOptions, config: ChunkConfig | None
) -> tuple[StreamingQuery, ChunkSink]:
    from ingest.kafka.source import register

    table = catalog.table(options.table)
    if table.kind is not TableKind.MAIN:
        raise UserInputError(f"{table.name} is a {table.kind.value} table; ingest into its main table")
    if not table.dead_letter:
        raise UserInputError(
            f"table {table.name} has no dead-letter table, so one malformed Kafka record would stop "
            "the stream; create the table with --dead-letter"
        )
    source_format = register(spark)
    checkpoint = options.checkpoint_dir(catalog.warehouse)
    sink = ChunkSink(catalog, table, options, checkpoint, config)
    Path(checkpoint).mkdir(parents=True, exist_ok=True)
    reader = spark.readStream.format(source_format)
    for key, value in options.source_reader_options().items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.queryName(f"streampart-ingest-{table.name}".replace(".", "_"))
        .option("checkpointLocation", checkpoint)
        .foreachBatch(sink)
    )
    if options.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(options.trigger.total_seconds() * 1000)} milliseconds")
    return writer.start(), sink


def _quietly_stop(spark: SparkSession, query: StreamingQuery) -> None:
    """Stop ``query`` with Spark's logging off: a stop interrupts the query's planning thread,
    and Spark logs the ``InterruptedException`` of each interrupted call as an error."""
    jvm_log = spark.sparkContext._jvm.org.apache.logging.log4j  # type: ignore[union-attr]
    level = jvm_log.LogManager.getRootLogger().getLevel().toString()
    spark.sparkContext.setLogLevel("OFF")
    try:
        query.stop()
    finally:
        spark.sparkContext.setLogLevel(level)


_PY_ERROR = re.compile(r"^\s*(?:[\w.]+\.)?([A-Z]\w*(?:Error|Exception)): (.+)$")


def query_failure(exc: BaseException) -> str:
    """The innermost Python error in a failed streaming query's message (Spark wraps it twice)."""
    message = str(exc)
    found = [m for m in map(_PY_ERROR.match, message.splitlines()) if m is not None]
    python_side = [m for m in found if not m.group(1).startswith(("Py4J", "Streaming", "Spark"))]
    if not (python_side or found):
        return message.strip().splitlines()[0] if message.strip() else type(exc).__name__
    best = (python_side or found)[-1]
    return f"{best.group(1)}: {best.group(2)}"


def run_kafka_ingest(
    spark: SparkSession,
    catalog: Catalog,
    options: KafkaIngestOptions,
    config: ChunkConfig | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    poll_seconds: int = 1,
) -> int:
    """Run the ingest query until it finishes (available-now), fails, or ``should_stop()``.

    Returns:
        The number of micro-batches this run committed.

    Raises:
        IngestQueryError: the query failed; the message is the cause (broker down, data loss…).
    """
    from pyspark.errors import StreamingQueryException

    metrics = IngestMetrics(options.table) if options.metrics_port is not None else None
    if metrics is not None:
        try:
            port = metrics.serve(options.metrics_port or 0)
        except OSError as listen_error:
            raise UserInputError(
                f"metrics port {options.metrics_port}: cannot listen there: {listen_error}"
            ) from None
        log.info("metrics of the ingest into %s on http://0.0.0.0:%s/metrics", options.table, port)
    query, sink = _start(spark, catalog, options, config)
    sink.metrics = metrics
    try:
        while not query.awaitTermination(poll_seconds):
            if metrics is not None:
                metrics.latest_offsets(progress_latest_offsets(query.lastProgress))
            if should_stop():
                # Stopping between batches is always safe; mid-batch, the batch is replayed
                # by the next run and lands once (its chunk's idempotency key is in the metastore).
                # So start no new batch (one that begins now fails at once, replayed next run),
                # wait for the batch in flight (stopping mid-batch interrupts its tasks, and
                # Spark logs every interrupted thread), then stop quietly, Spark's logging off
                # from here on.
                spark.sparkContext.setLogLevel("OFF")
                logging.getLogger("py4j").setLevel(logging.CRITICAL)  # a refused batch's traceback
                if not sink.drain(STOP_GRACE_S):
                    log.warning("the batch in flight did not end within %s s: stopping it", STOP_GRACE_S)
                _quietly_stop(spark, query)
                break
        exc = query.exception()
        if exc is not None and not sink.stopping:  # stopping: a batch refused to start (replayed)
            raise IngestQueryError(f"ingest into {options.table} failed: {query_failure(exc)}")
    except StreamingQueryException as exc:
        if not sink.stopping:
            raise IngestQueryError(f"ingest into {options.table} failed: {query_failure(exc)}") from None
    finally:
        if query.isActive:
            query.stop()
        if sink.group is not None:
            sink.group.close()
        if metrics is not None:
            metrics.close()
    return sink.batches

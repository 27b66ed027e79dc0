"""The Kafka ingest job: Kafka → Spark Structured Streaming → chunk commits, exactly once.

:class:`~ingest.kafka.job_options.KafkaIngestOptions` says what to ingest (the CLI's ``streampart
ingest kafka`` flags); :func:`run_kafka_ingest` runs the query until it stops,
:func:`start_kafka_ingest` starts it and returns it. One Spark streaming query reads every routed
topic (the ``streampart-kafka`` source, :mod:`ingest.kafka.source`); each micro-batch becomes one
chunk per table it touched, each under the idempotency key ``kafka:<query id>:<batch id>`` in its
table, committed once whatever crashes and replays happen (:mod:`ingest.kafka.batch_sink`):

1. The batch's plan (routes, tables) is fixed at its first attempt; each table's chunk is reserved
   under the key. The query id lives in the checkpoint, so a batch replayed after a restart finds
   the same chunks: a table whose chunk is committed is done and not written again.
2. One Spark job reads the batch: each task reads its offset range from the brokers, splits its
   records by table, parses and validates them and writes each table's good rows straight to
   that table's staging area. Tasks return only file names, row counts and the bad records, so
   the driver never holds the rows.
3. The driver records each table's files (bad records go to its dead-letter table, by the same
   chunk) and commits its chunk: one Delta transaction, in whichever streaming partition(s) the
   rows belong to (arrival mode: the open one; event-time: each row's own, late rows per the
   table's policy). Records no table takes go to the job's dead-letter table, last.

A Kafka record maps to exactly one row or one dead-letter entry, and a chunk lands once, so
offsets map to rows one to one. The routes may change while the job runs (a routes file, a
pattern matching new topics): the driver rewrites the source's control file
(:mod:`ingest.kafka.control`) between batches. After each commit :mod:`ingest.kafka.monitoring`
updates the ``/metrics`` port and the monitoring consumer group. ``should_stop`` (the CLI's
SIGTERM) stops the query between batches.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ingest.config import ChunkConfig
from ingest.errors import IngestQueryError, StopRequestedError
from ingest.kafka.batch_sink import BatchSink, JobDeadLetters
from ingest.kafka.control import read_skipped, update_control
from ingest.kafka.job_options import KafkaIngestOptions
from ingest.kafka.lag import WaitingSince
from ingest.kafka.monitoring import (
    GroupCommitter,
    IngestMetrics,
    batch_end_offsets,
    batch_offsets,
    last_committed_batch,
    progress_latest_offsets,
)
from ingest.kafka.offsets import OffsetMap, load_from, load_offsets
from ingest.kafka.options import KafkaSourceOptions
from ingest.kafka.routes import RouteError, Routes
from ingest.kafka.steering import Steering
from metastore.catalog import DEAD_LETTER_COLUMNS as DEAD_LETTER_TABLE_COLUMNS
from metastore.catalog import Catalog
from metastore.errors import NamespaceMovingError, NotFoundError, UserInputError
from metastore.models import Table, TableKind, TableName, TableSpec

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)

__all__ = ["KafkaIngestOptions", "run_kafka_ingest", "start_kafka_ingest"]

# Why 120 s: a batch in flight when the job is told to stop normally ends within a trigger or
# two; one that takes longer (a broker outage being ridden out) is stopped and replayed later.
STOP_GRACE_S = 120.0

# Why 5 s: while nothing changes the status is published again this often, so its lag in seconds
# keeps growing on the status page and its time (``at``) shows the job alive; one small metastore
# write per job every few seconds.
STATUS_EVERY_S = 5.0


class RoutesWatch:
    """The job's routes as they are now: a routes file is read again when it changed; a file that
    became invalid keeps the last good routes (logged once). Each change rewrites the source's
    control file, so the query subscribes to new topics without a restart."""

    def __init__(self, options: KafkaIngestOptions, control_file: str) -> None:
        self.options = options
        self.control_file = control_file
        self._stamp: Any = None
        self._routes = options.routes()  # a bad file at start is the caller's error
        self._failing = False
        self._stamp = self._file_stamp()
        self._publish()

    def _file_stamp(self) -> Any:
        path = self.options.routes_file
        if path is None:
            return None
        try:
            st = os.stat(path)
        except OSError:
            return "missing"
        return (st.st_mtime_ns, st.st_size)

    def __call__(self) -> Routes:
        stamp = self._file_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                routes = self.options.routes()
            except RouteError as exc:
                if not self._failing:
                    log.error("routes file changed but cannot be used (%s); the job keeps its routes", exc)
                self._failing = True
            else:
                if self._failing or routes != self._routes:
                    log.info("routes now: %s", routes)
                self._failing = False
                self._routes = routes
                self._publish()
        return self._routes

    def _publish(self) -> None:
        sub = self._routes.subscription()
        update_control(
            self.control_file,
            lambda c: dataclasses.replace(
                c, topics=frozenset(sub["topics"]), pattern=sub["pattern"], _regex=None
            ),
        )


def topics_with_data(checkpoint: str, batch_id: int) -> set[str] | None:
    """The topics whose offsets batch ``batch_id`` moves (Spark's offset log), or None if unknown."""
    try:
        raw = batch_offsets(checkpoint, batch_id)
        start = batch_end_offsets(checkpoint, batch_id - 1) if batch_id > 0 else {}
    except (OSError, ValueError, IndexError):
        return None
    start = {**start, **load_from(raw)}  # a reset: the batch reads from where it moved them
    return {t for (t, p), e in load_offsets(raw).items() if e > start.get((t, p), 0)}


def job_dead_letters(catalog: Catalog, name: str) -> Table:
    """The routed job's dead-letter table, made on first use (the dead-letter columns)."""
    try:
        table = catalog.table(name)
    except NotFoundError:
        parsed = TableName.parse(name)
        spec = TableSpec(
            name=parsed,
            columns=DEAD_LETTER_TABLE_COLUMNS,
            time_column="received_at",
            partition_column="received_period",
            roll_every=timedelta(hours=1),
        )
        table = catalog.create_table(spec)
        log.info("made the job's dead-letter table %s", table.name)
    if [c.name for c in table.columns] != [c.name for c in DEAD_LETTER_TABLE_COLUMNS]:
        raise UserInputError(
            f"table {table.name} cannot take the job's dead letters: its columns are not "
            f"{', '.join(c.name for c in DEAD_LETTER_TABLE_COLUMNS)}"
        )
    return table


class IngestSink:
    """The ``foreachBatch`` function: the batch (:class:`BatchSink`), stopping between batches,
    riding out a namespace move, and the monitoring after each commit."""

    def __init__(
        self, batches: BatchSink, options: KafkaIngestOptions, checkpoint: str, steering: Steering
    ) -> None:
        self.batches_sink = batches
        self.options = options
        self.checkpoint = checkpoint
        self.steering = steering
        self.committed: OffsetMap = {}  # the last committed batch's end offsets
        self.latest: OffsetMap = {}  # the newest offsets the source reported
        self.batches = 0
        self._idle = threading.Condition()
        self._in_batch = False
        self.stopping = False  # set by the job's stop: no new batch starts
        self.metrics: IngestMetrics | None = None
        self.waiting = WaitingSince(
            KafkaSourceOptions.parse(options.source_reader_options(steering.control_file))
        )
        self.published = 0.0  # when the status was last published (time.monotonic())
        group = options.group
        self.group = GroupCommitter(options.bootstrap, group) if group else None

    def drain(self, timeout: float) -> bool:
        """Start no new batch; wait until none is in flight (at most ``timeout`` s); whether none is."""
        with self._idle:
            self.stopping = True
            return self._idle.wait_for(lambda: not self._in_batch, timeout)

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
        started = time.monotonic()
        while True:
            try:
                counts = self.batches_sink(df, batch_id)
                break
            except (NamespaceMovingError, NotFoundError) as exc:
                # A table's namespace is moving to another metastore: wait for the flip, then the
                # batch goes on there (its key finds its chunk, copied with its id and state).
                moved = any(s.writer.rebind() for s in self.batches_sink.sinks.values())
                if not moved and not isinstance(exc, NamespaceMovingError):
                    raise
                if not moved:
                    log.warning("batch %s waits for a namespace move: %s", batch_id, exc)
                    time.sleep(getattr(exc, "retry_after", 1))
        self.batches += 1
        self._committed(batch_id, counts, time.monotonic() - started)

    def _committed(self, batch_id: int, counts: dict[str | None, tuple[int, int]], seconds: float) -> None:
        """Tell the monitoring (status, metrics, consumer group) that ``batch_id``'s offsets are committed."""
        try:
            raw = batch_offsets(self.checkpoint, batch_id)
        except (OSError, ValueError, IndexError) as exc:
            log.warning(
                "batch %s: cannot read its offsets from the checkpoint for monitoring: %s", batch_id, exc
            )
            return
        offsets = load_offsets(raw)
        self._resets_done(batch_id, raw)
        self.committed.update(offsets)
        if self.metrics is not None:
            self.metrics.batch_committed(counts, seconds)
        self.publish()
        if self.metrics is not None:
            self.metrics.skipped(read_skipped(self.options.control_file(self.checkpoint)))
        if self.group is not None:
            self.group.commit(offsets)

    def _resets_done(self, batch_id: int, raw: dict[str, Any]) -> None:
        """Record the resets ``batch_id`` applied (``raw``: its offsets as the source logged them)."""

        def before() -> dict[str, Any]:  # where the batch would have started, from the offset log
            return batch_offsets(self.checkpoint, batch_id - 1) if batch_id > 0 else {}

        with contextlib.suppress(OSError, ValueError, IndexError):
            self.steering.resets_done(raw, before)

    def resume(self) -> None:
        """After a restart: the committed offsets from the checkpoint (so the status's lag is right
        before the first batch), and the resets of the last batch recorded done if the job died
        between that batch's commit and recording them."""
        last = last_committed_batch(self.checkpoint)
        if last is None:
            return
        try:
            raw = batch_offsets(self.checkpoint, last)
        except (OSError, ValueError, IndexError):
            return
        self.committed.update(load_offsets(raw))
        self._resets_done(last, raw)

    def publish(self, failure: str | None = None) -> None:
        """Publish the job's status (:mod:`ingest.kafka.steering`)."""
        # copies (atomic under the GIL): the batch thread and the monitoring loop both publish, and
        # the batch thread adds partitions to ``committed``
        b, committed, latest = self.batches_sink, dict(self.committed), dict(self.latest)
        waiting = self.waiting.of(committed, latest)
        status = self.steering.publish(
            b.routes(), committed, latest, waiting, b.refused, self.batches, failure
        )
        self.published = time.monotonic()
        if self.metrics is not None:
            self.metrics.status(status)


def start_kafka_ingest(
    spark: SparkSession, catalog: Catalog, options: KafkaIngestOptions, config: ChunkConfig | None = None
) -> StreamingQuery:
    """Start the ingest query; returns the running :class:`StreamingQuery`.

    Raises:
        NotFoundError: the table does not exist.
        UserInputError: the table is a companion table, or the options do not fit it.
    """
    return _start(spark, catalog, options, config)[0]


def _check_one_table(catalog: Catalog, name: str, fmt: str = "json") -> None:
    table = catalog.table(name)
    if fmt == "debezium" and (table.keys is None or table.keys.op_column is None):
        raise UserInputError(
            f"--format debezium writes changes: {table.name} must be a keyed table with an op column "
            "(table create … --primary-key COLS --op-column COL)"
        )
    if table.kind is not TableKind.MAIN:
        raise UserInputError(f"{table.name} is a {table.kind.value} table; ingest into its main table")
    if not table.dead_letter:
        raise UserInputError(
            f"table {table.name} has no dead-letter table, so one malformed Kafka record would stop "
            "the stream; create the table with --dead-letter"
        )


def _start(
    spark: SparkSession, catalog: Catalog, options: KafkaIngestOptions, config: ChunkConfig | None
) -> tuple[StreamingQuery, IngestSink]:
    from ingest.kafka.source import register

    config = config or ChunkConfig()
    dead = None
    if options.table is not None:
        _check_one_table(catalog, options.table, options.format)
    else:
        dead = JobDeadLetters(catalog, job_dead_letters(catalog, str(options.dead_letter_table)), config)
    source_format = register(spark)
    checkpoint = options.checkpoint_dir(catalog.warehouse)
    Path(checkpoint).mkdir(parents=True, exist_ok=True)
    control_file = options.control_file(checkpoint)
    routes = RoutesWatch(options, control_file)
    query_id = _QueryId(checkpoint)
    reader_options = options.source_reader_options(control_file)
    batches = BatchSink(
        catalog,
        routes,
        dead,
        options.format,
        checkpoint,
        query_id,
        config,
        lambda batch_id: topics_with_data(checkpoint, batch_id),
        KafkaSourceOptions.parse(reader_options),
        options.record_schemas(),
    )
    sink = IngestSink(
        batches, options, checkpoint, Steering(catalog, options.job, control_file, options.dead_letter_table)
    )
    sink.resume()
    sink.steering.apply(routes())  # requests made while the job was down
    reader = spark.readStream.format(source_format)
    for key, value in reader_options.items():
        reader = reader.option(key, value)
    writer = (
        reader.load()
        .writeStream.queryName(f"streampart-ingest-{options.job}".replace(".", "_"))
        .option("checkpointLocation", checkpoint)
        .foreachBatch(sink)
    )
    if options.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{int(options.trigger.total_seconds() * 1000)} milliseconds")
    return writer.start(), sink


class _QueryId:
    """The query's id: Spark writes ``<checkpoint>/metadata`` (``{"id": …}``) when the query first
    starts and keeps it across restarts; it is what makes a replayed batch's idempotency key the same."""

    def __init__(self, checkpoint: str) -> None:
        self.checkpoint = checkpoint
        self._id: str | None = None

    def __call__(self) -> str:
        if self._id is None:
            self._id = str(json.loads((Path(self.checkpoint) / "metadata").read_text())["id"])
        return self._id


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
    # the source speaks of its own option; the job's user sets the flag
    text = best.group(2).replace(
        "set the source option failOnDataLoss to false", "run the job with --no-fail-on-data-loss"
    )
    return f"{best.group(1)}: {text}"


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

    metrics = None
    if options.metrics_port is not None:
        metrics = IngestMetrics(options.table or str(options.dead_letter_table))
    if metrics is not None:
        try:
            port = metrics.serve(options.metrics_port or 0, options.metrics_host)
        except OSError as listen_error:
            raise UserInputError(
                f"metrics port {options.metrics_host}:{options.metrics_port}: cannot listen there: "
                f"{listen_error}"
            ) from None
        log.info("metrics of the ingest %s on http://%s:%s/metrics", options.job, options.metrics_host, port)
    query, sink = _start(spark, catalog, options, config)
    sink.metrics = metrics
    try:
        while not query.awaitTermination(poll_seconds):
            routes = sink.batches_sink.routes()  # a changed routes file: subscribe before the next trigger
            latest = {**sink.latest, **progress_latest_offsets(query.lastProgress)}
            steered = sink.steering.apply(routes)  # paused or resumed topics: from the next trigger on
            changed = latest != sink.latest  # the lag of a paused topic grows
            sink.latest = latest
            timed = sink.waiting.refresh(dict(sink.committed), latest)  # the time lag's records, first seen
            if steered or changed or timed or time.monotonic() - sink.published >= STATUS_EVERY_S:
                sink.publish()
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
            sink.publish(failure=query_failure(exc))
            raise IngestQueryError(f"ingest {options.job} failed: {query_failure(exc)}")
    except StreamingQueryException as exc:
        if not sink.stopping:
            sink.publish(failure=query_failure(exc))
            raise IngestQueryError(f"ingest {options.job} failed: {query_failure(exc)}") from None
    finally:
        if query.isActive:
            query.stop()
        if sink.group is not None:
            sink.group.close()
        if metrics is not None:
            metrics.close()
        sink.waiting.close()
    return sink.batches

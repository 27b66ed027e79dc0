"""The executors' side of the Kafka source: one offset range read into Arrow record batches.

:func:`read_range` reads records ``[start, end)`` of one topic-partition with a consumer that
uses ``assign`` + ``seek`` (no ``group.id``, no auto commit) and stops exactly at the end
offset. A range always yields the same records, so a batch that Spark replays after a crash
yields the same rows — unless retention deleted them in the meantime: that is data loss,
which :func:`report_data_loss` fails on or logs, per ``failOnDataLoss`` (the driver's
:class:`~ingest.kafka.source.KafkaStreamReader` reports it the same way). An executor that
makes no progress on its range for ``kafkaConsumer.pollTimeoutMs`` fails with
:class:`KafkaReadTimeoutError`.

The rows have the columns of Spark's Kafka source (:data:`SCHEMA`): key, value, topic,
partition, offset, timestamp, timestampType, headers (null when a record has none).

With the source option ``streampart.emit=ranges`` the source's tasks read nothing: each yields its
range as one row (:data:`RANGES_SCHEMA`, :func:`range_batch`), and the query's own Python function
reads it there with :func:`read_ranges` (the ingest job's tasks, ``ingest.kafka.route_task``). Its
records then cross from Python to Spark's JVM and back once less: about a quarter of a batch's read
time on a real broker. A replayed batch reads the same ranges, so the same records, as before.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ingest.errors import KafkaDataLossError, KafkaReadTimeoutError, KafkaSourceError, KafkaUnavailableError
from ingest.kafka.brokers import new_consumer, retriable, with_retries
from ingest.kafka.offsets import tp_name
from ingest.kafka.options import KafkaSourceOptions
from ingest.kafka.planning import KafkaRange

log = logging.getLogger(__name__)

SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
        ),
    ]
)
"""The columns of Spark's Kafka source, which this source yields too."""
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")

RANGES_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("start", LongType()),
        StructField("end", LongType()),
    ]
)
"""A task's offset range as one row: the source's columns with ``streampart.emit=ranges``."""
RANGES_ARROW_SCHEMA = to_arrow_schema(RANGES_SCHEMA, timezone="UTC")

DATA_LOSS_ADVICE = (
    "Some data may have been lost because it is no longer available in Kafka: either it was aged "
    "out by retention or the topic was deleted before all its data was processed. If you do not "
    "want the query to fail in such cases, set the source option failOnDataLoss to false."
)


class _Batch:
    """Columns of up to ``limit`` records, turned into one Arrow record batch."""

    HEADERS = ARROW_SCHEMA.field("headers").type

    def __init__(self, topic: str, partition: int) -> None:
        self.topic, self.partition = topic, partition
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, record: Any) -> None:
        self.keys.append(record.key)
        self.values.append(record.value)
        self.offsets.append(record.offset)
        ts = record.timestamp
        self.timestamps.append(None if ts is None or ts < 0 else int(ts) * 1000)
        self.types.append(int(record.timestamp_type) if record.timestamp_type is not None else -1)
        hs = record.headers
        self.headers.append([{"key": k, "value": v} for k, v in hs] if hs else None)

    def to_arrow(self) -> pa.RecordBatch:
        n = len(self.offsets)
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, pa.binary()),
                pa.array(self.values, pa.binary()),
                pa.array([self.topic] * n, pa.string()),
                pa.array([self.partition] * n, pa.int32()),
                pa.array(self.offsets, pa.int64()),
                pa.array(self.timestamps, pa.timestamp("us", tz="UTC")),
                pa.array(self.types, pa.int32()),
                pa.array(self.headers, self.HEADERS),
            ],
            schema=ARROW_SCHEMA,
        )
        self.__init__(self.topic, self.partition)  # type: ignore[misc]
        return batch


def report_data_loss(opts: KafkaSourceOptions, message: str) -> None:
    """Raise :class:`KafkaDataLossError` for ``message``, or log it when ``failOnDataLoss`` is false."""
    if opts.fail_on_data_loss:
        raise KafkaDataLossError(f"{message}. {DATA_LOSS_ADVICE}")
    log.warning("%s; failOnDataLoss=false, so reading goes on with the next available offset", message)


def read_range(
    rng: KafkaRange,
    opts: KafkaSourceOptions,
    consumer_factory: Callable[[], Any] | None = None,
    batch_rows: int = 10_000,
) -> Iterator[pa.RecordBatch]:
    """Records ``[rng.start, rng.end)`` of one partition as Arrow batches (assign + seek, no group).

    Stops exactly at ``rng.end``. Offsets missing inside the range are fine when the broker
    still holds the offsets before them (compaction, transaction markers); offsets deleted by
    retention, or a partition that ends before ``rng.end``, are data loss (``failOnDataLoss``).
    No progress for ``kafkaConsumer.pollTimeoutMs`` raises :class:`KafkaReadTimeoutError`.
    """
    from kafka import TopicPartition

    if rng.end <= rng.start:
        return
    factory = consumer_factory or (lambda: new_consumer(opts))
    holder: list[Any] = []

    def connect() -> Any:
        consumer = factory()
        holder.append(consumer)
        return consumer

    def drop() -> None:
        while holder:
            with contextlib.suppress(Exception):
                holder.pop().close(autocommit=False)

    where = f"{tp_name((rng.topic, rng.partition))} offsets [{rng.start}, {rng.end})"
    consumer = with_retries(opts, f"connecting to read {where}", connect, drop)
    tp = TopicPartition(rng.topic, rng.partition)
    timeout = int(opts.kafka_config().get("request_timeout_ms", 30_000))
    try:
        yield from _RangeRead(rng, opts, consumer, tp, where, timeout, batch_rows).batches()
    except KafkaSourceError:
        raise
    except Exception as exc:
        if retriable(exc):
            raise KafkaUnavailableError(
                f"reading {where} from Kafka brokers at {opts.bootstrap_servers} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        raise
    finally:
        drop()


class _RangeRead:
    """One range being read by its consumer: the next offset it still needs, whether the consumer
    was just sought there, when the read last progressed, and the batch being filled."""

    def __init__(
        self,
        rng: KafkaRange,
        opts: KafkaSourceOptions,
        consumer: Any,
        tp: Any,
        where: str,
        timeout: int,
        batch_rows: int,
    ) -> None:
        self.rng, self.opts, self.consumer, self.tp = rng, opts, consumer, tp
        self.where, self.timeout, self.batch_rows = where, timeout, batch_rows
        self.expected = rng.start  # next offset this range still needs
        self.fresh_seek = True
        self.last_progress = 0.0
        self.batch = _Batch(rng.topic, rng.partition)

    def batches(self) -> Iterator[pa.RecordBatch]:
        from kafka.errors import OffsetOutOfRangeError

        consumer, tp, end = self.consumer, self.tp, self.rng.end
        consumer.assign([tp])
        consumer.seek(tp, self.rng.start)
        self.last_progress = time.monotonic()
        while self.expected < end:
            try:
                polled = consumer.poll(
                    timeout_ms=500, max_records=max(1, min(self.batch_rows, end - self.expected))
                )
            except OffsetOutOfRangeError:
                if self._seek_after_out_of_range():
                    continue
                break
            progressed = yield from self._take(polled)
            position = consumer.position(tp)
            if position is not None and position > self.expected:
                # Past offsets that hold no record (transaction markers, compacted away).
                self.expected = min(int(position), end)
                progressed = True
            if progressed:
                self.last_progress = time.monotonic()
                continue
            if self._partition_ended_while_stalled():
                break
        if len(self.batch):
            yield self.batch.to_arrow()

    def _seek_after_out_of_range(self) -> bool:
        """After the broker refused the position: report the offsets lost and seek past them;
        whether the range reads on (not if the partition now ends before the next offset)."""
        consumer, tp, where = self.consumer, self.tp, self.where
        earliest = consumer.beginning_offsets([tp], timeout_ms=self.timeout)[tp]
        latest = consumer.end_offsets([tp], timeout_ms=self.timeout)[tp]
        if self.expected < earliest:
            report_data_loss(
                self.opts,
                f"cannot read {where}: offsets [{self.expected}, {min(earliest, self.rng.end)}) "
                f"were deleted (the partition now starts at {earliest})",
            )
            self.expected = earliest
        elif self.expected >= latest:
            report_data_loss(
                self.opts,
                f"cannot read {where}: the partition now ends at {latest}, "
                f"before offset {self.expected} (topic deleted and re-created?)",
            )
            return False
        if self.expected < self.rng.end:
            consumer.seek(tp, self.expected)
            self.fresh_seek = True
        self.last_progress = time.monotonic()
        return True

    def _take(self, polled: dict[Any, Any]) -> Generator[pa.RecordBatch, None, bool]:
        """Add the polled records of the range to the batch, yielding each full batch; whether any was."""
        progressed = False
        for record in polled.get(self.tp, ()):
            if record.offset < self.expected:
                continue
            if record.offset >= self.rng.end:
                break
            if record.offset > self.expected and self.fresh_seek:
                earliest = self.consumer.beginning_offsets([self.tp], timeout_ms=self.timeout)[self.tp]
                if earliest > self.expected:
                    report_data_loss(
                        self.opts,
                        f"while reading {self.where}: offsets [{self.expected}, {record.offset}) "
                        f"were deleted (the partition now starts at {earliest})",
                    )
            self.fresh_seek = False
            self.batch.add(record)
            self.expected = record.offset + 1
            progressed = True
            if len(self.batch) >= self.batch_rows:
                yield self.batch.to_arrow()
        return progressed

    def _partition_ended_while_stalled(self) -> bool:
        """A poll without progress: after ``pollTimeoutMs`` of them, the partition ended before the
        range (data loss: True, the read stops) or :class:`KafkaReadTimeoutError`."""
        opts = self.opts
        if (time.monotonic() - self.last_progress) * 1000 < opts.poll_timeout_ms:
            return False
        latest = self.consumer.end_offsets([self.tp], timeout_ms=self.timeout)[self.tp]
        if latest < self.rng.end and self.expected >= latest:
            report_data_loss(
                opts,
                f"cannot read {self.where}: the partition now ends at {latest} "
                f"(topic deleted and re-created?)",
            )
            return True
        raise KafkaReadTimeoutError(
            f"no progress reading {self.where} from Kafka brokers at {opts.bootstrap_servers} for "
            f"{opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); stopped at offset {self.expected}"
        )


def range_batch(rng: KafkaRange) -> pa.RecordBatch:
    """``rng`` as the one row a task of a ``streampart.emit=ranges`` source yields."""
    return pa.RecordBatch.from_pylist(
        [{"topic": rng.topic, "partition": rng.partition, "start": rng.start, "end": rng.end}],
        schema=RANGES_ARROW_SCHEMA,
    )


def read_ranges(batches: Iterator[pa.RecordBatch], opts: KafkaSourceOptions) -> Iterator[pa.RecordBatch]:
    """The records of the ranges in ``batches`` (rows of :data:`RANGES_SCHEMA`), read here as
    :func:`read_range` reads one, in the source's columns (:data:`SCHEMA`)."""
    for batch in batches:
        columns = [batch.column(name).to_pylist() for name in ("topic", "partition", "start", "end")]
        for topic, partition, start, end in zip(*columns, strict=True):
            yield from read_range(KafkaRange(topic, partition, start, end), opts)

"""Kafka as a Spark source: a Python data source (``pyspark.sql.datasource``) on kafka-python.

Spark's own Kafka connector is a JVM jar that cannot be fetched here; this source takes its
place and follows its contract (option names, columns, offset semantics)::

    from ingest.kafka_source import register
    register(spark)                                   # once per SparkSession
    df = (spark.readStream.format("streampart-kafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "events")              # or subscribePattern
          .option("startingOffsets", "earliest")      # latest | earliest | JSON
          .option("maxOffsetsPerTrigger", 10000)
          .load())
    # columns: key, value, topic, partition, offset, timestamp, timestampType, headers

``spark.read.format("streampart-kafka")`` reads a bounded range the same way (batch). From
Python, ``read_stream(spark, source_options("host:9092", "events", starting_offsets="earliest"))``
validates the options in the driver first (:class:`KafkaConfigError` names the bad one).

How it works
------------
* **Offsets** are a JSON dict ``{"topic": {"partition": next_offset}}`` (partition keys are
  strings, topics and partitions in sorted order). Spark keeps them in the query's checkpoint:
  ``initialOffset`` resolves ``startingOffsets``, ``latestOffset`` asks the brokers for the
  newest offsets (capped by the rate limit, and by the target recorded at the start of a
  ``Trigger.AvailableNow`` run), ``partitions`` cuts ``[start, end)`` per topic-partition into
  tasks. Nothing is committed to Kafka: there is no consumer group at all.
* **Executors** read one range each with a consumer that uses ``assign`` + ``seek`` (no
  ``group.id``, no auto commit) and stop exactly at the end offset. A range always yields the
  same records, so a batch that Spark replays after a crash yields the same rows (unless
  retention deleted them in the meantime: see ``failOnDataLoss``).
* **New partitions** (of subscribed topics, or new topics that match ``subscribePattern``)
  are found by ``latestOffset`` on every trigger and read from their first offset (offset 0;
  the planning never asks the broker, so a replayed batch plans the same ranges).
* **Data loss** — offsets that retention deleted before they were read, a partition whose
  offsets went backwards (topic deleted and re-created) or that disappeared: with
  ``failOnDataLoss=true`` (default) the query fails with :class:`KafkaDataLossError` naming
  the partition and offsets; with ``false`` a warning is logged and reading goes on with the
  next available offset (the same behaviour as Spark's source).
* **Brokers unreachable**: every broker call is retried with exponential backoff a bounded
  number of times, then :class:`KafkaUnavailableError` names the bootstrap servers. An
  executor that makes no progress on its range for ``kafkaConsumer.pollTimeoutMs`` fails
  with :class:`KafkaReadTimeoutError`. Nothing waits forever.

Options (names as in Spark's Kafka source; case-insensitive)
------------------------------------------------------------
=================================  ==========  ==============================================
``kafka.bootstrap.servers``        required    ``host:port[,host:port…]``
``subscribe``                      one of      comma-separated topic list
``subscribePattern``               these two   regular expression, full match on topic names
``startingOffsets``                latest*     ``earliest``, ``latest`` or JSON
                                               ``{"t":{"0":23,"1":-2}}`` (-2 earliest,
                                               -1 latest); JSON must name every partition
                                               of the subscribed topics. (*batch: earliest)
``endingOffsets`` (batch only)     latest      ``latest`` or JSON (-1 latest)
``maxOffsetsPerTrigger``           none        records per micro-batch, spread over the
                                               partitions in proportion to their backlog
``minPartitions``                  none        split ranges so a batch has at least about
                                               this many tasks
``maxRecordsPerPartition``         none        split ranges so no task reads more records
``failOnDataLoss``                 true        see above
``kafkaConsumer.pollTimeoutMs``    60000       executor: max time without progress on a range
``fetchOffset.numRetries``         3           attempts of each broker call (driver and
                                               executor connection set-up)
``fetchOffset.retryIntervalMs``    1000        first backoff; doubles, at most 10 s
``kafka.<consumer config>``        —           passed to kafka-python's KafkaConsumer, dots as
                                               underscores: ``kafka.request.timeout.ms``,
                                               ``kafka.bootstrap.timeout.ms`` (default 10000),
                                               ``kafka.security.protocol``,
                                               ``kafka.isolation.level``, …
=================================  ==========  ==============================================

``kafka.group.id``, ``kafka.enable.auto.commit``, ``kafka.auto.offset.reset`` and the
(de)serializers are rejected, as in Spark: offsets belong to the checkpoint.

The first trigger of a new query always runs a batch (empty if there is no data): that is how
the resolved ``startingOffsets`` get into the checkpoint, so a restart never resolves
``latest`` again (see :meth:`KafkaStreamReader.initialOffset`). Only a crash between the
start of the query and the logging of that first batch's offsets resolves them anew.

Known limits: the ``headers`` column is always present (null when a record has none);
``startingOffsetsByTimestamp``, ``assign`` and ``minOffsetsPerTrigger`` are not supported.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import logging
import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
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

from ingest.errors import (
    KafkaConfigError,
    KafkaDataLossError,
    KafkaReadTimeoutError,
    KafkaSourceError,
    KafkaUnavailableError,
)

log = logging.getLogger(__name__)

NAME = "streampart-kafka"

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
ARROW_SCHEMA = to_arrow_schema(SCHEMA, timezone="UTC")

TP = tuple[str, int]
"""A topic-partition: (topic, partition)."""

OffsetMap = dict[TP, int]
EARLIEST, LATEST = -2, -1
INITIAL_MARKER = "$initial"
"""Key of :meth:`KafkaStreamReader.initialOffset`'s marker ('$' is never part of a topic name)."""


DATA_LOSS_ADVICE = (
    "Some data may have been lost because it is no longer available in Kafka: either it was aged "
    "out by retention or the topic was deleted before all its data was processed. If you do not "
    "want the query to fail in such cases, set the source option failOnDataLoss to false."
)


# --------------------------------------------------------------------------------------------
# Options

_FORBIDDEN = {
    "group.id": "offsets are kept in Spark's checkpoint; the source uses no consumer group",
    "group.instance.id": "the source uses no consumer group",
    "enable.auto.commit": "offsets are kept in Spark's checkpoint; nothing is committed to Kafka",
    "auto.offset.reset": "use the source option startingOffsets",
    "key.deserializer": "keys are always returned as binary; cast or parse them in Spark",
    "value.deserializer": "values are always returned as binary; cast or parse them in Spark",
}


def _consumer_defaults() -> dict[str, Any]:
    from kafka import KafkaConsumer

    return dict(KafkaConsumer.DEFAULT_CONFIG)


@dataclass(frozen=True)
class KafkaSourceOptions:
    """The parsed, validated options of one source (see the module docstring)."""

    bootstrap_servers: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: str = "latest"
    ending_offsets: str = "latest"
    max_offsets_per_trigger: int | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    poll_timeout_ms: int = 60_000
    num_retries: int = 3
    retry_interval_ms: int = 1_000
    consumer_config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, options: Mapping[str, str], *, batch: bool = False) -> KafkaSourceOptions:
        """Parse Spark's (string) options; raises :class:`KafkaConfigError` naming the option."""
        opts = {str(k).lower(): str(v) for k, v in options.items() if v is not None}
        servers = opts.get("kafka.bootstrap.servers", "").strip()
        if not servers:
            raise KafkaConfigError("option kafka.bootstrap.servers is required (host:port[,host:port…])")
        subscribe, pattern = opts.get("subscribe"), opts.get("subscribepattern")
        if "assign" in opts:
            raise KafkaConfigError("option assign is not supported; use subscribe or subscribePattern")
        if (subscribe is None) == (pattern is None):
            raise KafkaConfigError(
                "give exactly one of the options subscribe (topic list) or subscribePattern"
            )
        topics: tuple[str, ...] = ()
        if subscribe is not None:
            topics = tuple(dict.fromkeys(t.strip() for t in subscribe.split(",") if t.strip()))
            if not topics:
                raise KafkaConfigError("option subscribe names no topic")
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise KafkaConfigError(
                    f"option subscribePattern is not a valid regular expression: {exc}"
                ) from None
        starting = opts.get("startingoffsets", "earliest" if batch else "latest").strip()
        ending = opts.get("endingoffsets", "latest").strip()
        if not batch and "endingoffsets" in opts:
            raise KafkaConfigError("option endingOffsets is for batch reads only (spark.read)")
        _check_offsets_spec("startingOffsets", starting, allow_earliest=True)
        _check_offsets_spec("endingOffsets", ending, allow_earliest=False)
        return cls(
            bootstrap_servers=servers,
            topics=topics,
            pattern=pattern,
            starting_offsets=starting,
            ending_offsets=ending,
            max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
            min_partitions=_positive(opts, "minPartitions"),
            max_records_per_partition=_positive(opts, "maxRecordsPerPartition"),
            fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
            poll_timeout_ms=_positive(opts, "kafkaConsumer.pollTimeoutMs") or 60_000,
            num_retries=_positive(opts, "fetchOffset.numRetries") or 3,
            retry_interval_ms=_default(
                _positive(opts, "fetchOffset.retryIntervalMs", allow_zero=True), 1_000
            ),
            consumer_config=_consumer_config(opts),
        )

    def subscribed(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.topics

    def kafka_config(self) -> dict[str, Any]:
        """Keyword arguments for ``kafka.KafkaConsumer``: no group, no commits, no auto reset."""
        config: dict[str, Any] = {
            "bootstrap_servers": [s.strip() for s in self.bootstrap_servers.split(",") if s.strip()],
            "client_id": "streampart-kafka-source",
            "bootstrap_timeout_ms": 10_000,
            "max_poll_records": 5_000,
            "allow_auto_create_topics": False,
        }
        config.update(self.consumer_config)
        config.update(group_id=None, enable_auto_commit=False, auto_offset_reset="none")
        return config


def _positive(opts: Mapping[str, str], name: str, allow_zero: bool = False) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise KafkaConfigError(f"option {name} must be an integer, got {raw!r}") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise KafkaConfigError(f"option {name} must be {'≥ 0' if allow_zero else '> 0'}, got {value}")
    return value


def _default(value: int | None, default: int) -> int:
    return default if value is None else value


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    raw = opts.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise KafkaConfigError(f"option {name} must be true or false, got {raw!r}")


def _consumer_config(opts: Mapping[str, str]) -> dict[str, Any]:
    defaults = _consumer_defaults()
    config: dict[str, Any] = {}
    for key, raw in opts.items():
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers":
            continue
        name = key[len("kafka.") :]
        if name in _FORBIDDEN:
            raise KafkaConfigError(f"option kafka.{name} is not supported: {_FORBIDDEN[name]}")
        arg = name.replace(".", "_")
        if arg not in defaults:
            raise KafkaConfigError(f"option {key}: kafka-python's consumer has no setting {arg}")
        default = defaults[arg]
        try:
            if isinstance(default, bool):
                if raw.strip().lower() not in ("true", "false"):
                    raise ValueError(raw)
                config[arg] = raw.strip().lower() == "true"
            elif isinstance(default, int):
                config[arg] = int(raw)
            elif isinstance(default, float):
                config[arg] = float(raw)
            else:
                config[arg] = raw
        except ValueError:
            raise KafkaConfigError(f"option {key}: invalid value {raw!r}") from None
    return config


def _check_offsets_spec(name: str, spec: str, allow_earliest: bool) -> None:
    if spec in ("latest",) or (allow_earliest and spec == "earliest"):
        return
    try:
        parsed = json.loads(spec)
        if not isinstance(parsed, dict):
            raise ValueError
        for topic, parts in parsed.items():
            if not isinstance(parts, dict):
                raise ValueError
            for p, off in parts.items():
                int(p)
                if not isinstance(off, int) or off < EARLIEST or (off == EARLIEST and not allow_earliest):
                    raise ValueError(f"{topic}/{p}: {off}")
    except ValueError:
        words = "earliest, latest" if allow_earliest else "latest"
        special = "-2 (earliest) or -1 (latest)" if allow_earliest else "-1 (latest)"
        raise KafkaConfigError(
            f'option {name} must be {words} or JSON like {{"topic":{{"0":23}}}} with offsets ≥ 0, '
            f"{special}; got {spec!r}"
        ) from None


# --------------------------------------------------------------------------------------------
# Offsets as Spark stores them


def dump_offsets(offsets: Mapping[TP, int]) -> dict[str, dict[str, int]]:
    """The canonical JSON-able form: topics sorted, partitions sorted numerically.

    Spark compares offsets as JSON text ("no new data" = same text as the start), so the
    order of keys must never depend on how the dict was built.
    """
    out: dict[str, dict[str, int]] = {}
    for topic, partition in sorted(offsets):
        out.setdefault(topic, {})[str(partition)] = int(offsets[(topic, partition)])
    return out


def load_offsets(offsets: Mapping[str, Any] | None) -> OffsetMap:
    result: OffsetMap = {}
    for topic, parts in (offsets or {}).items():
        if topic == INITIAL_MARKER:
            continue
        for partition, offset in parts.items():
            result[(topic, int(partition))] = int(offset)
    return result


def _tp_name(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


# --------------------------------------------------------------------------------------------
# Broker calls with bounded retries

T = TypeVar("T")


def _retriable(exc: BaseException) -> bool:
    from kafka.errors import KafkaError

    if isinstance(exc, KafkaError):
        return bool(getattr(exc, "retriable", False))
    return isinstance(exc, (OSError, TimeoutError))


def with_retries(opts: KafkaSourceOptions, what: str, call: Callable[[], T], reset: Callable[[], None]) -> T:
    """``call()``, retried on transient broker errors with exponential backoff, a bounded number of times.

    ``reset`` runs after each failure (e.g. to drop a broken consumer). The last error becomes
    a :class:`KafkaUnavailableError` that names the bootstrap servers and the time spent.
    """
    attempts = max(1, opts.num_retries)
    delay = opts.retry_interval_ms / 1000
    started = time.monotonic()
    for attempt in range(1, attempts + 1):
        try:
            return call()
        except Exception as exc:
            if not _retriable(exc):
                raise
            reset()
            if attempt == attempts:
                from kafka.errors import KafkaConnectionError, KafkaTimeoutError

                silent = isinstance(exc, (KafkaConnectionError, KafkaTimeoutError, OSError, TimeoutError))
                raise KafkaUnavailableError(
                    f"{what}: Kafka brokers at {opts.bootstrap_servers} (kafka.bootstrap.servers) "
                    f"{'did not answer' if silent else 'kept failing'} after {attempts} attempt(s) in "
                    f"{time.monotonic() - started:.1f} s: {type(exc).__name__}: {exc}"
                ) from exc
            log.warning(
                "%s failed (%s: %s); retry %d/%d in %.1f s",
                what,
                type(exc).__name__,
                exc,
                attempt,
                attempts - 1,
                delay,
            )
            time.sleep(delay)
            delay = min(max(delay * 2, 0.1), 10.0)
    raise AssertionError("unreachable")


def new_consumer(opts: KafkaSourceOptions) -> Any:
    """A kafka-python consumer with no group (used with assign/seek only)."""
    from kafka import KafkaConsumer

    return KafkaConsumer(**opts.kafka_config())


class OffsetClient:
    """Driver-side metadata: which partitions exist and their earliest/latest offsets.

    Holds one consumer (no group, never assigned) and re-creates it after a failure.
    """

    def __init__(self, opts: KafkaSourceOptions) -> None:
        self.opts = opts
        self._consumer: Any = None

    def _get(self) -> Any:
        if self._consumer is None:
            self._consumer = new_consumer(self.opts)
        return self._consumer

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            with contextlib.suppress(Exception):
                consumer.close(autocommit=False)

    def _call(self, what: str, fn: Callable[[Any], T]) -> T:
        return with_retries(self.opts, what, lambda: fn(self._get()), self.close)

    def partitions(self) -> list[TP]:
        """Every partition of the subscribed topics, from fresh metadata, sorted."""

        def discover(consumer: Any) -> list[TP]:
            names = consumer.topics()  # always a metadata round trip: sees new topics/partitions
            found: list[TP] = []
            for topic in sorted(names):
                if self.opts.subscribed(topic):
                    found.extend((topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ()))
            return found

        return self._call("listing partitions", discover)

    def _offsets(self, what: str, tps: Sequence[TP], earliest: bool) -> OffsetMap:
        if not tps:
            return {}
        from kafka import TopicPartition

        timeout = int(self.opts.kafka_config().get("request_timeout_ms", 30_000))

        def fetch(consumer: Any) -> OffsetMap:
            keys = [TopicPartition(t, p) for t, p in tps]
            got = (consumer.beginning_offsets if earliest else consumer.end_offsets)(keys, timeout_ms=timeout)
            return {(k.topic, k.partition): int(v) for k, v in got.items()}

        return self._call(what, fetch)

    def earliest(self, tps: Sequence[TP]) -> OffsetMap:
        return self._offsets("fetching earliest offsets", tps, earliest=True)

    def latest(self, tps: Sequence[TP]) -> OffsetMap:
        return self._offsets("fetching latest offsets", tps, earliest=False)


# --------------------------------------------------------------------------------------------
# Planning: offset ranges → tasks


@dataclass(frozen=True)
class KafkaRange(InputPartition):
    """One task: records ``[start, end)`` of one topic-partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_ranges(
    start: Mapping[TP, int],
    end: Mapping[TP, int],
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[KafkaRange]:
    """Cut each ``[start, end)`` into tasks; a partition missing from ``start`` starts at 0.

    Deterministic (no broker call): replaying a batch plans the same ranges. Empty and
    negative ranges (offsets that went backwards, already reported as data loss) are skipped.
    ``maxRecordsPerPartition`` bounds each task; ``minPartitions`` then splits the larger
    ranges in proportion to their size until there are about that many tasks.
    """
    ranges = [(tp, start.get(tp, 0), end[tp]) for tp in sorted(end)]
    ranges = [(tp, s, e) for tp, s, e in ranges if e > s]
    pieces = [
        max(1, math.ceil((e - s) / max_records_per_partition)) if max_records_per_partition else 1
        for _, s, e in ranges
    ]
    total = sum(e - s for _, s, e in ranges)
    if min_partitions and total and sum(pieces) < min_partitions:
        pieces = [
            max(n, round((e - s) * min_partitions / total))
            for n, (_, s, e) in zip(pieces, ranges, strict=True)
        ]
    out: list[KafkaRange] = []
    for n, ((topic, partition), s, e) in zip(pieces, ranges, strict=True):
        n = max(1, min(n, e - s))
        bounds = [s + (e - s) * i // n for i in range(n + 1)]
        out.extend(KafkaRange(topic, partition, a, b) for a, b in itertools.pairwise(bounds) if b > a)
    return out


def rate_limit(start: Mapping[TP, int], end: Mapping[TP, int], max_rows: int) -> OffsetMap:
    """``end`` cut so that at most ``max_rows`` records are read, spread over the partitions.

    Each partition gets a share in proportion to its backlog (largest remainders first, ties
    in topic-partition order), so a batch never exceeds the limit and always makes progress.
    """
    backlog = {tp: max(0, e - start.get(tp, 0)) for tp, e in end.items()}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    exact = {tp: b * max_rows / total for tp, b in backlog.items()}
    share = {tp: int(x) for tp, x in exact.items()}
    left = max_rows - sum(share.values())
    for tp in sorted(exact, key=lambda k: (-(exact[k] - share[k]), k))[:left]:
        share[tp] += 1
    return {tp: (start.get(tp, 0) + share[tp] if backlog[tp] else e) for tp, e in end.items()}


# --------------------------------------------------------------------------------------------
# Executors: read one range


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


def _data_loss(opts: KafkaSourceOptions, message: str) -> None:
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
    from kafka.errors import OffsetOutOfRangeError

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

    where = f"{_tp_name((rng.topic, rng.partition))} offsets [{rng.start}, {rng.end})"
    consumer = with_retries(opts, f"connecting to read {where}", connect, drop)
    tp = TopicPartition(rng.topic, rng.partition)
    timeout = int(opts.kafka_config().get("request_timeout_ms", 30_000))
    try:
        consumer.assign([tp])
        consumer.seek(tp, rng.start)
        expected = rng.start  # next offset this range still needs
        fresh_seek = True
        last_progress = time.monotonic()
        batch = _Batch(rng.topic, rng.partition)
        while expected < rng.end:
            try:
                polled = consumer.poll(
                    timeout_ms=500, max_records=max(1, min(batch_rows, rng.end - expected))
                )
            except OffsetOutOfRangeError:
                earliest = consumer.beginning_offsets([tp], timeout_ms=timeout)[tp]
                latest = consumer.end_offsets([tp], timeout_ms=timeout)[tp]
                if expected < earliest:
                    _data_loss(
                        opts,
                        f"cannot read {where}: offsets [{expected}, {min(earliest, rng.end)}) "
                        f"were deleted (the partition now starts at {earliest})",
                    )
                    expected = earliest
                elif expected >= latest:
                    _data_loss(
                        opts,
                        f"cannot read {where}: the partition now ends at {latest}, "
                        f"before offset {expected} (topic deleted and re-created?)",
                    )
                    break
                if expected < rng.end:
                    consumer.seek(tp, expected)
                    fresh_seek = True
                last_progress = time.monotonic()
                continue
            progressed = False
            for record in polled.get(tp, ()):
                if record.offset < expected:
                    continue
                if record.offset >= rng.end:
                    break
                if record.offset > expected and fresh_seek:
                    earliest = consumer.beginning_offsets([tp], timeout_ms=timeout)[tp]
                    if earliest > expected:
                        _data_loss(
                            opts,
                            f"while reading {where}: offsets [{expected}, {record.offset}) "
                            f"were deleted (the partition now starts at {earliest})",
                        )
                fresh_seek = False
                batch.add(record)
                expected = record.offset + 1
                progressed = True
                if len(batch) >= batch_rows:
                    yield batch.to_arrow()
            position = consumer.position(tp)
            if position is not None and position > expected:
                # Past offsets that hold no record (transaction markers, compacted away).
                expected = min(int(position), rng.end)
                progressed = True
            if progressed:
                last_progress = time.monotonic()
                continue
            if (time.monotonic() - last_progress) * 1000 >= opts.poll_timeout_ms:
                latest = consumer.end_offsets([tp], timeout_ms=timeout)[tp]
                if latest < rng.end and expected >= latest:
                    _data_loss(
                        opts,
                        f"cannot read {where}: the partition now ends at {latest} "
                        f"(topic deleted and re-created?)",
                    )
                    break
                raise KafkaReadTimeoutError(
                    f"no progress reading {where} from Kafka brokers at {opts.bootstrap_servers} for "
                    f"{opts.poll_timeout_ms} ms (kafkaConsumer.pollTimeoutMs); stopped at offset {expected}"
                )
        if len(batch):
            yield batch.to_arrow()
    except KafkaSourceError:
        raise
    except Exception as exc:
        if _retriable(exc):
            raise KafkaUnavailableError(
                f"reading {where} from Kafka brokers at {opts.bootstrap_servers} failed: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        raise
    finally:
        drop()


# --------------------------------------------------------------------------------------------
# Spark readers


def _check_schema(schema: StructType | None) -> None:
    if schema is not None and schema != SCHEMA:
        raise KafkaConfigError(
            f"the {NAME} source has a fixed schema ({SCHEMA.simpleString()}); do not pass another one"
        )


def resolve_offsets(
    client: OffsetClient, spec: str, tps: Sequence[TP], option: str, earliest_ok: bool = True
) -> OffsetMap:
    """``earliest`` / ``latest`` / JSON resolved to concrete offsets for ``tps``."""
    if spec == "earliest":
        return client.earliest(tps)
    if spec == "latest":
        return client.latest(tps)
    wanted = load_offsets(json.loads(spec))
    opts = client.opts
    stray = sorted(tp for tp in wanted if not opts.subscribed(tp[0]))
    if stray:
        raise KafkaConfigError(
            f"option {option} names topics that are not subscribed: "
            f"{', '.join(sorted({t for t, _ in stray}))}"
        )
    known = set(tps)
    unknown = sorted(tp for tp in wanted if tp not in known)
    if unknown:
        raise KafkaConfigError(
            f"option {option} names partitions that do not exist: {', '.join(map(_tp_name, unknown))}"
        )
    missing = sorted(tp for tp in tps if tp not in wanted)
    if missing:
        raise KafkaConfigError(
            f"option {option} must give an offset for every partition of the subscribed topics "
            f"(-2 earliest, -1 latest); missing: {', '.join(map(_tp_name, missing))}"
        )
    need_earliest = [tp for tp, o in wanted.items() if o == EARLIEST]
    need_latest = [tp for tp, o in wanted.items() if o == LATEST]
    resolved = dict(wanted)
    resolved.update(client.earliest(need_earliest) if earliest_ok else {})
    resolved.update(client.latest(need_latest))
    return resolved


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; see the module docstring. Cheap to build: connects on first use."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        _check_schema(schema)
        self.opts = KafkaSourceOptions.parse(options)
        self._client: OffsetClient | None = None
        self._target: OffsetMap | None = None
        self._last_latest: OffsetMap | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_client"] = None  # connections stay in the process that opened them
        return state

    @property
    def client(self) -> OffsetClient:
        if self._client is None:
            self._client = OffsetClient(self.opts)
        return self._client

    def initialOffset(self) -> dict:
        """``startingOffsets`` resolved, plus a marker that makes the first trigger run a batch.

        Spark logs a batch's end offsets in the checkpoint, never the initial offset, and only
        runs a batch when the end differs from the start. The marker (a key that cannot be a
        topic name) guarantees that difference, so the first trigger always runs a batch —
        empty if there is no data — which pins the resolved starting offsets in the
        checkpoint: a restart then never resolves ``latest`` again and skips records.
        """
        tps = self.client.partitions()
        resolved = resolve_offsets(self.client, self.opts.starting_offsets, tps, "startingOffsets")
        return {INITIAL_MARKER: True, **dump_offsets(resolved)}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.client.partitions()
        self._target = self.client.latest(tps)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = load_offsets(start)
        tps = self.client.partitions()
        latest = self.client.latest(tps)
        earliest = self.client.earliest(tps)
        self._last_latest = dict(latest)
        end: OffsetMap = {}
        effective_start: OffsetMap = {}
        for tp in tps:
            new = tp not in begin
            s = begin.get(tp, 0)
            top = latest[tp]
            if self._target is not None:
                top = min(top, self._target.get(tp, s))
            if new and earliest[tp] > 0:
                _data_loss(self.opts, f"new partition {_tp_name(tp)} starts at offset {earliest[tp]}, not 0")
            if latest[tp] < s:
                _data_loss(self.opts, f"partition {_tp_name(tp)}'s offset went back from {s} to {latest[tp]}")
                end[tp] = latest[tp]  # planned as an empty range; the next batch starts there
                effective_start[tp] = latest[tp]
                continue
            if earliest[tp] > s and not new:
                _data_loss(
                    self.opts,
                    f"offsets [{s}, {earliest[tp]}) of {_tp_name(tp)} were deleted before they were read",
                )
            end[tp] = max(s, top)
            effective_start[tp] = max(s, min(earliest[tp], end[tp]))
        gone = sorted(tp for tp in begin if tp not in end)
        if gone:
            _data_loss(self.opts, f"partitions {', '.join(map(_tp_name, gone))} no longer exist")
        if isinstance(limit, ReadMaxRows):
            capped = rate_limit(effective_start, end, int(limit.max_rows))
            end = {tp: (e if e < begin.get(tp, 0) else capped[tp]) for tp, e in end.items()}
        return dump_offsets(end)

    def reportLatestOffset(self) -> dict | None:
        return dump_offsets(self._last_latest) if self._last_latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return plan_ranges(
            load_offsets(start),
            load_offsets(end),
            self.opts.min_partitions,
            self.opts.max_records_per_partition,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaRange):  # Spark's placeholder for "no partitions"
            return iter(())
        return read_range(partition, self.opts)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class KafkaBatchReader(DataSourceReader):
    """Bounded read of ``[startingOffsets, endingOffsets)`` (defaults: earliest, latest)."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        _check_schema(schema)
        self.opts = KafkaSourceOptions.parse(options, batch=True)

    def partitions(self) -> Sequence[InputPartition]:
        client = OffsetClient(self.opts)
        try:
            tps = client.partitions()
            start = resolve_offsets(client, self.opts.starting_offsets, tps, "startingOffsets")
            end = resolve_offsets(client, self.opts.ending_offsets, tps, "endingOffsets", earliest_ok=False)
        finally:
            client.close()
        return plan_ranges(start, end, self.opts.min_partitions, self.opts.max_records_per_partition)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, KafkaRange):  # Spark's placeholder for "no partitions"
            return iter(())
        return read_range(partition, self.opts)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("streampart-kafka")`` (and ``spark.read``); see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self.options, schema)


def register(spark: Any) -> str:
    """Register the source with ``spark`` (idempotent); returns its format name."""
    spark.dataSource.register(KafkaDataSource)
    return NAME


def source_options(
    bootstrap_servers: str,
    topics: str | Sequence[str],
    *,
    starting_offsets: str = "latest",
    max_offsets_per_trigger: int | None = None,
    fail_on_data_loss: bool = True,
    **extra: Any,
) -> dict[str, str]:
    """The string options of a ``subscribe`` source, validated here, in the driver.

    ``extra`` holds any other option by its Spark name (``minPartitions=4``,
    ``**{"kafka.request.timeout.ms": 5000}``). Raises :class:`KafkaConfigError` (a
    ``UserInputError``) naming the faulty option before any Spark query starts.
    """
    topic_list = topics if isinstance(topics, str) else ",".join(topics)
    options: dict[str, str] = {
        "kafka.bootstrap.servers": bootstrap_servers,
        "subscribe": topic_list,
        "startingOffsets": starting_offsets,
        "failOnDataLoss": "true" if fail_on_data_loss else "false",
    }
    if max_offsets_per_trigger is not None:
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    for key, value in extra.items():
        options[key] = str(value).lower() if isinstance(value, bool) else str(value)
    KafkaSourceOptions.parse(options)
    return options


def read_stream(spark: Any, options: Mapping[str, str]) -> Any:
    """``spark.readStream`` of this source with ``options`` (e.g. from :func:`source_options`)."""
    KafkaSourceOptions.parse(options)
    register(spark)
    reader = spark.readStream.format(NAME)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()

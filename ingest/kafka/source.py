"""Kafka as a Spark source: a Python data source (``pyspark.sql.datasource``) on kafka-python.

Spark's own Kafka connector is a JVM jar that cannot be fetched here; this source takes its
place and follows its contract (option names, columns, offset semantics)::

    from ingest.kafka.source import register
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
validates the options in the driver first (:class:`KafkaConfigError` names the bad one); the
options are listed in :mod:`ingest.kafka.options`.

The package's modules: :mod:`~ingest.kafka.options` (the options), :mod:`~ingest.kafka.offsets`
(offsets as the checkpoint keeps them), :mod:`~ingest.kafka.brokers` (broker calls, the
driver's metadata client), :mod:`~ingest.kafka.planning` (ranges → tasks, rate limit),
:mod:`~ingest.kafka.reader` (executors read one range), this module (the Spark readers).

How it works
------------
* **Offsets** are a JSON dict ``{"topic": {"partition": next_offset}}`` (partition keys are
  strings, topics and partitions in sorted order). Spark keeps them in the query's checkpoint:
  ``initialOffset`` resolves ``startingOffsets``, ``latestOffset`` asks the brokers for the
  newest offsets (capped by the rate limit, and by the target recorded at the start of a
  ``Trigger.AvailableNow`` run), ``partitions`` cuts ``[start, end)`` per topic-partition into
  tasks. The source commits nothing to Kafka and joins no consumer group (the ingest job
  writes its committed offsets to a group for monitoring only: :mod:`ingest.kafka.monitoring`).
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

The first trigger of a new query always runs a batch (empty if there is no data): that is how
the resolved ``startingOffsets`` get into the checkpoint, so a restart never resolves
``latest`` again (see :meth:`KafkaStreamReader.initialOffset`). Only a crash between the
start of the query and the logging of that first batch's offsets resolves them anew.

Known limits: the ``headers`` column is always present (null when a record has none);
``startingOffsetsByTimestamp``, ``assign`` and ``minOffsetsPerTrigger`` are not supported.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from ingest.errors import KafkaConfigError
from ingest.kafka.brokers import OffsetClient
from ingest.kafka.control import add_skipped, read_control
from ingest.kafka.offsets import (
    EARLIEST,
    FROM_KEY,
    INITIAL_MARKER,
    LATEST,
    RESET_KEY,
    TP,
    OffsetMap,
    dump_offsets,
    load_from,
    load_offsets,
    reset_mark,
    tp_name,
)
from ingest.kafka.options import KafkaSourceOptions
from ingest.kafka.planning import KafkaRange, plan_ranges, rate_limit
from ingest.kafka.reader import RANGES_SCHEMA, SCHEMA, range_batch, read_range, report_data_loss

NAME = "streampart-kafka"
"""The format name of the source: ``spark.readStream.format(NAME)`` once :func:`register` ran."""


def _check_schema(schema: StructType | None, opts: KafkaSourceOptions) -> None:
    fixed = _schema(opts)
    if schema is not None and schema != fixed:
        raise KafkaConfigError(
            f"the {NAME} source has a fixed schema ({fixed.simpleString()}); do not pass another one"
        )


def _schema(opts: KafkaSourceOptions) -> StructType:
    return RANGES_SCHEMA if opts.emit_ranges else SCHEMA


def _read(partition: InputPartition, opts: KafkaSourceOptions) -> Iterator[pa.RecordBatch]:
    if not isinstance(partition, KafkaRange):  # Spark's placeholder for "no partitions"
        return iter(())
    if opts.emit_ranges:  # the query's own tasks read it (ingest.kafka.reader.read_ranges)
        return iter((range_batch(partition),))
    return read_range(partition, opts)


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
            f"option {option} names partitions that do not exist: {', '.join(map(tp_name, unknown))}"
        )
    missing = sorted(tp for tp in tps if tp not in wanted)
    if missing:
        raise KafkaConfigError(
            f"option {option} must give an offset for every partition of the subscribed topics "
            f"(-2 earliest, -1 latest); missing: {', '.join(map(tp_name, missing))}"
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
        self.opts = KafkaSourceOptions.parse(options)
        _check_schema(schema, self.opts)
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
        paused = self._paused()
        losses: list[tuple[str, TP, int]] = []  # (what, partition, records skipped)
        for tp in tps:
            if tp[0] in paused:  # its offsets stand still (a new partition waits to be seen)
                if tp in begin:
                    end[tp] = effective_start[tp] = begin[tp]
                continue
            end[tp], effective_start[tp] = self._range(tp, begin, latest[tp], earliest[tp], losses)
        for tp in begin:
            if tp not in end and not self.opts.subscribed(tp[0]):
                end[tp] = effective_start[tp] = begin[tp]  # no longer subscribed: kept, not lost
        gone = sorted(tp for tp in begin if tp not in end)
        losses.extend((f"partition {tp_name(tp)} no longer exists", tp, 0) for tp in gone)
        if losses:
            self._lost(losses)
        moved, mark = self._resets(start, end, paused)
        effective_start.update(moved)
        if isinstance(limit, ReadMaxRows):
            capped = rate_limit(effective_start, end, int(limit.max_rows))
            end = {
                tp: (e if e < begin.get(tp, 0) and tp not in moved else capped[tp]) for tp, e in end.items()
            }
        out: dict[str, Any] = dump_offsets(end)
        if moved:
            out[FROM_KEY] = dump_offsets(moved)
        if mark:
            out[RESET_KEY] = mark
        return out

    def _resets(self, start: dict, end: OffsetMap, paused: frozenset[str]) -> tuple[OffsetMap, int]:
        """The operators' resets not applied yet (the control file's, newer than the start's mark):
        where this batch starts reading their partitions, and the newest reset's id. ``end`` is raised
        to a reset's offsets where they are past it; a paused topic's position moves, nothing is read."""
        mark = reset_mark(start)
        if self.opts.control_file is None:
            return {}, mark
        moved: OffsetMap = {}
        for request, topic, target in read_control(self.opts.control_file).resets:
            if request <= mark:
                continue
            tps = sorted(tp for tp in end if tp[0] == topic)
            for tp, offset in self._resolve(tps, target).items():
                moved[tp] = offset
                end[tp] = offset if topic in paused else max(end[tp], offset)
            mark = request
        return moved, mark

    def _resolve(self, tps: list[TP], target: str) -> OffsetMap:
        """A reset's target as offsets of ``tps``, within what the brokers hold."""
        earliest, latest = self.client.earliest(tps), self.client.latest(tps)
        if target == "earliest":
            wanted = earliest
        elif target == "latest":
            wanted = latest
        elif target.startswith("{"):
            given = {int(p): int(o) for p, o in json.loads(target).items()}
            wanted = {tp: given[tp[1]] for tp in tps if tp[1] in given}
        else:
            when = datetime.fromisoformat(target.replace("Z", "+00:00"))
            wanted = self.client.at_time(tps, int(when.timestamp() * 1000))
        return {tp: min(max(o, earliest[tp]), latest[tp]) for tp, o in wanted.items()}

    def _range(
        self, tp: TP, begin: OffsetMap, latest: int, earliest: int, losses: list[tuple[str, TP, int]]
    ) -> tuple[int, int]:
        """``tp``'s end offset in this batch, and where its reading really starts (past lost offsets)."""
        new = tp not in begin
        s = begin.get(tp, 0)
        top = latest
        if self._target is not None:
            top = min(top, self._target.get(tp, s))
        if new and earliest > 0:
            losses.append((f"new partition {tp_name(tp)} starts at offset {earliest}, not 0", tp, earliest))
        if latest < s and self.client.read_committed and self._stable_behind(tp, s):
            return s, s  # an open transaction: wait for it to end
        if latest < s:
            losses.append((f"partition {tp_name(tp)}'s offset went back from {s} to {latest}", tp, 0))
            return latest, latest  # planned as an empty range; the next batch starts there
        if earliest > s and not new:
            losses.append(
                (
                    f"offsets [{s}, {earliest}) of {tp_name(tp)} were deleted before they were read",
                    tp,
                    earliest - s,
                )
            )
        e = max(s, top)
        return e, max(s, min(earliest, e))

    def _lost(self, losses: list[tuple[str, TP, int]]) -> None:
        """Report every partition's lost offsets at once (failOnDataLoss: one error naming them all);
        when reading goes on, the records skipped are added up in the control file's directory."""
        skipped = sum(n for _, _, n in losses)
        message = "; ".join(what for what, _, _ in losses)
        if skipped:
            message += f" ({skipped} records)"
        if not self.opts.fail_on_data_loss and self.opts.control_file is not None:
            add_skipped(self.opts.control_file, {tp: n for _, tp, n in losses if n})
        report_data_loss(self.opts, message)

    def _stable_behind(self, tp: TP, start: int) -> bool:
        """Whether ``tp``'s last stable offset is behind ``start`` while its records are not: a
        transaction is open (some brokers answer 0 for the stable offset then), nothing was lost."""
        return self.client.high_watermarks([tp])[tp] >= start

    def _paused(self) -> frozenset[str]:
        if self.opts.control_file is None:
            return frozenset()
        return read_control(self.opts.control_file).paused

    def reportLatestOffset(self) -> dict | None:
        return dump_offsets(self._last_latest) if self._last_latest is not None else None

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return plan_ranges(
            {**load_offsets(start), **load_from(end)},  # a reset: from where it moved the position
            load_offsets(end),
            self.opts.min_partitions,
            self.opts.max_records_per_partition,
        )

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.opts)

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, not in Kafka."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class KafkaBatchReader(DataSourceReader):
    """Bounded read of ``[startingOffsets, endingOffsets)`` (defaults: earliest, latest)."""

    def __init__(self, options: Mapping[str, str], schema: StructType | None = None) -> None:
        self.opts = KafkaSourceOptions.parse(options, batch=True)
        _check_schema(schema, self.opts)

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
        return _read(partition, self.opts)


class KafkaDataSource(DataSource):
    """``spark.readStream.format("streampart-kafka")`` (and ``spark.read``); see the module docstring."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> StructType:
        emit = next(
            (str(v).strip().lower() for k, v in self.options.items() if k.lower() == "streampart.emit"), ""
        )
        return RANGES_SCHEMA if emit == "ranges" else SCHEMA  # (a bad value: refused by the reader)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self.options, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(self.options, schema)


def register(spark: Any) -> str:
    """Register the source with ``spark`` (idempotent); returns its format name."""
    spark.dataSource.register(KafkaDataSource)
    return NAME


def read_stream(spark: Any, options: Mapping[str, str]) -> Any:
    """``spark.readStream`` of this source with ``options`` (e.g. built by ``source_options``)."""
    KafkaSourceOptions.parse(options)
    register(spark)
    reader = spark.readStream.format(NAME)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()

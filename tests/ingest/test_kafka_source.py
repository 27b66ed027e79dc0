"""The Kafka source (ingest/kafka/) against a real broker (Tansu, the kafka_broker fixture).

Planning, rate limiting and data-loss decisions are also tested directly on the reader (no
Spark); the Spark tests run streaming queries on the shared session with ``availableNow``
(or a short processing-time trigger) and collect each micro-batch with ``foreachBatch``.
"""

from __future__ import annotations

import itertools
import json
import shutil
import time
import uuid
from collections import namedtuple
from pathlib import Path
from typing import Any

import pytest

from ingest.errors import BrokerError, KafkaConfigError, KafkaDataLossError, KafkaUnavailableError
from ingest.kafka.devbroker import EmbeddedBroker, free_port
from ingest.kafka.offsets import dump_offsets
from ingest.kafka.options import KafkaSourceOptions, source_options
from ingest.kafka.planning import KafkaRange, plan_ranges, rate_limit
from ingest.kafka.reader import RANGES_SCHEMA, SCHEMA, read_range, read_ranges
from ingest.kafka.source import NAME, KafkaStreamReader, read_stream, register
from tests.helpers import wait_for

Row = tuple[str, int, int, bytes | None, bytes | None]  # topic, partition, offset, key, value


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def records(topic: str, n: int, partitions: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "key": f"{topic}/k{i}",
            "value": f"v{i}",
            "partition": i % partitions,
            "headers": [("n", str(i).encode()), ("src", b"test")] if i % 2 == 0 else None,
        }
        for i in range(start, start + n)
    ]


def produce(broker: EmbeddedBroker, topic: str, recs: list[dict[str, Any]]) -> list[Row]:
    """Produce and return the rows the source must yield for them."""
    placed = broker.produce(topic, recs)
    return [
        (topic, p, o, r["key"].encode(), r["value"].encode()) for r, (p, o) in zip(recs, placed, strict=True)
    ]


def options(broker: EmbeddedBroker, **extra: Any) -> dict[str, str]:
    base = {"kafka.bootstrap.servers": broker.bootstrap, "fetchOffset.retryIntervalMs": "100"}
    base.update({k: str(v) for k, v in extra.items()})
    return base


class Collected:
    """What a streaming query's foreachBatch saw: rows and task count per batch id."""

    def __init__(self) -> None:
        self.batches: dict[int, list[Row]] = {}
        self.tasks: dict[int, int] = {}
        self.full: list[Any] = []

    def __call__(self, df: Any, batch_id: int) -> None:
        self.tasks[batch_id] = df.rdd.getNumPartitions()
        rows = df.collect()
        self.full.extend(rows)
        self.batches[batch_id] = [(r.topic, r.partition, r.offset, r.key, r.value) for r in rows]

    def rows(self) -> list[Row]:
        return [row for b in sorted(self.batches) for row in self.batches[b]]


def stream(spark: Any, opts: dict[str, str]) -> Any:
    return read_stream(spark, opts)


def run_available_now(spark: Any, opts: dict[str, str], checkpoint: Path, timeout: float = 120) -> Collected:
    seen = Collected()
    query = (
        stream(spark, opts)
        .writeStream.foreachBatch(seen)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(timeout), "availableNow query did not finish"
    finally:
        query.stop()
    return seen


def key_sorted(rows: list[Row]) -> list[Row]:
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def no_duplicates(rows: list[Row]) -> bool:
    return len({r[:3] for r in rows}) == len(rows)


# --------------------------------------------------------------------------------------------
# Options and planning (no broker)


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "subscribePattern": "t.*"}, "exactly one"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": "soon"}, "startingOffsets"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "-2"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            "maxOffsetsPerTrigger",
        ),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "kafka.no.such.thing": "1"},
            "kafka.no.such.thing",
        ),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "endingOffsets": "latest"}, "batch"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": "t", "streampart.emit": "rows"}, "streampart.emit"),
    ],
)
def test_bad_options_name_the_option(opts: dict[str, str], message: str) -> None:
    with pytest.raises(KafkaConfigError, match=message):
        KafkaSourceOptions.parse(opts)


def test_options_case_insensitive_and_passed_to_the_consumer() -> None:
    opts = KafkaSourceOptions.parse(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "a:1, b:2",
            "Subscribe": "x, y,x",
            "MAXOFFSETSPERTRIGGER": "5",
            "kafka.request.timeout.ms": "2000",
            "kafka.isolation.level": "read_committed",
        }
    )
    assert opts.topics == ("x", "y") and opts.max_offsets_per_trigger == 5
    config = opts.kafka_config()
    assert config["bootstrap_servers"] == ["a:1", "b:2"]
    assert config["request_timeout_ms"] == 2000 and config["isolation_level"] == "read_committed"
    assert config["group_id"] is None and config["enable_auto_commit"] is False


def test_source_options_are_validated_in_the_driver() -> None:
    opts = source_options(
        "h:1", ["a", "b"], starting_offsets="earliest", minPartitions=4, failOnDataLoss=False
    )
    assert opts["subscribe"] == "a,b" and opts["minPartitions"] == "4" and opts["failOnDataLoss"] == "false"
    with pytest.raises(KafkaConfigError, match="maxOffsetsPerTrigger"):
        source_options("h:1", "a", max_offsets_per_trigger=-1)


def test_plan_ranges_split_by_max_records_and_min_partitions() -> None:
    start = {("a", 0): 10, ("a", 1): 0}
    end = {("a", 0): 45, ("a", 1): 5, ("b", 0): 4}  # b-0 is new: starts at 0
    plain = plan_ranges(start, end)
    assert plain == [KafkaRange("a", 0, 10, 45), KafkaRange("a", 1, 0, 5), KafkaRange("b", 0, 0, 4)]

    capped = plan_ranges(start, end, max_records_per_partition=10)
    assert [
        (r.topic, r.partition, r.start, r.end) for r in capped if r.partition == 0 and r.topic == "a"
    ] == [
        ("a", 0, 10, 18),
        ("a", 0, 18, 27),
        ("a", 0, 27, 36),
        ("a", 0, 36, 45),
    ]
    assert max(r.size for r in capped) <= 10

    spread = plan_ranges(start, end, min_partitions=8)
    assert len(spread) >= 8
    for ranges in (capped, spread):  # contiguous, complete, no overlap
        for tp in end:
            pieces = sorted((r.start, r.end) for r in ranges if (r.topic, r.partition) == tp)
            assert pieces[0][0] == start.get(tp, 0) and pieces[-1][1] == end[tp]
            assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))
    assert plan_ranges({("a", 0): 9}, {("a", 0): 3}) == []  # offsets went back: nothing to read


def test_rate_limit_spreads_over_partitions() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 7}
    end = {("t", 0): 90, ("t", 1): 130, ("t", 2): 7}
    capped = rate_limit(start, end, 40)
    assert sum(capped[tp] - start[tp] for tp in start) == 40
    assert capped[("t", 0)] - 0 == 30 and capped[("t", 1)] - 100 == 10 and capped[("t", 2)] == 7
    assert rate_limit(start, end, 1000) == end
    tiny = rate_limit({("t", 0): 0, ("t", 1): 0}, {("t", 0): 5, ("t", 1): 5}, 1)
    assert sum(tiny.values()) == 1  # never above the limit, always progress


# --------------------------------------------------------------------------------------------
# The reader against the broker, without Spark


def test_read_range_stops_exactly_at_the_end(kafka_broker: EmbeddedBroker) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    expected = produce(kafka_broker, topic, records(topic, 12, 1))
    opts = KafkaSourceOptions.parse(options(kafka_broker, subscribe=topic))
    batches = list(read_range(KafkaRange(topic, 0, 3, 9), opts, batch_rows=4))
    rows = [row for b in batches for row in b.to_pylist()]
    assert [r["offset"] for r in rows] == list(range(3, 9))
    assert [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in rows] == expected[3:9]
    assert rows[0]["headers"] is None and rows[1]["headers"] == [
        {"key": "n", "value": b"4"},
        {"key": "src", "value": b"test"},
    ]
    assert all(b.schema.equals(batches[0].schema) for b in batches) and len(batches) == 2


def test_latest_offset_finds_new_partitions_and_starts_them_at_zero(kafka_broker: EmbeddedBroker) -> None:
    # Tansu cannot add partitions to a topic (no CreatePartitions), so a checkpoint that knows
    # only partition 0 stands for "partition 1 appeared since the last batch".
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker, topic, records(topic, 10, 2))
    reader = KafkaStreamReader(options(kafka_broker, subscribe=topic))
    try:
        start = {topic: {"0": 2}}
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end == {topic: {"0": 5, "1": 5}}
        assert list(reader.partitions(start, end)) == [KafkaRange(topic, 0, 2, 5), KafkaRange(topic, 1, 0, 5)]
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # nothing new: same offsets, same JSON
    finally:
        reader.stop()


def test_partitions_are_listed_afresh_except_right_after_a_listing(
    kafka_broker: EmbeddedBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the calls of one trigger share a listing (kafka-python would wait out its metadata backoff)
    from ingest.kafka import brokers

    prefix = topic_name()
    kafka_broker.create_topic(f"{prefix}-a", 1)
    client = brokers.OffsetClient(
        KafkaSourceOptions.parse(options(kafka_broker, subscribePattern=f"{prefix}-.*"))
    )
    try:
        monkeypatch.setattr(brokers, "LISTING_REUSED_S", 600.0)  # "right after", however slow the machine
        assert client.partitions() == [(f"{prefix}-a", 0)]
        kafka_broker.create_topic(f"{prefix}-b", 1)
        assert client.partitions() == [(f"{prefix}-a", 0)]
        monkeypatch.setattr(brokers, "LISTING_REUSED_S", 0.0)  # the window passed: the brokers are asked
        assert client.partitions() == [(f"{prefix}-a", 0), (f"{prefix}-b", 0)]
    finally:
        client.close()


FakeRecord = namedtuple("FakeRecord", "topic partition offset key value timestamp timestamp_type headers")


class RetentionConsumer:
    """A consumer whose partition lost offsets [0, 5) to retention: seeking below 5 is out of range."""

    def __init__(self) -> None:
        self.pos = 0

    def assign(self, tps: list[Any]) -> None:
        self.tp = tps[0]

    def seek(self, tp: Any, offset: int) -> None:
        self.pos = offset

    def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, list[FakeRecord]]:
        from kafka.errors import OffsetOutOfRangeError

        if self.pos < 5:
            raise OffsetOutOfRangeError({self.tp: self.pos})
        out = [FakeRecord("r", 0, o, b"k", b"v%d" % o, 1_700_000_000_000, 0, []) for o in range(self.pos, 10)]
        self.pos = 10
        return {self.tp: out}

    def position(self, tp: Any) -> int:
        return self.pos

    def beginning_offsets(self, tps: list[Any], timeout_ms: int | None = None) -> dict[Any, int]:
        return dict.fromkeys(tps, 5)

    def end_offsets(self, tps: list[Any], timeout_ms: int | None = None) -> dict[Any, int]:
        return dict.fromkeys(tps, 10)

    def close(self, autocommit: bool = False) -> None:
        pass


def test_offsets_deleted_by_retention_fail_or_are_skipped() -> None:
    # Tansu has no retention and no DeleteRecords: a fake consumer stands for a partition
    # whose offsets [0, 5) were aged out, which Kafka answers with OFFSET_OUT_OF_RANGE.
    base = {"kafka.bootstrap.servers": "unused:1", "subscribe": "r"}
    strict = KafkaSourceOptions.parse(base)
    with pytest.raises(KafkaDataLossError, match=r"offsets \[0, 5\) were deleted.*failOnDataLoss"):
        list(read_range(KafkaRange("r", 0, 0, 10), strict, consumer_factory=RetentionConsumer))
    lenient = KafkaSourceOptions.parse({**base, "failOnDataLoss": "false"})
    rows = [
        r
        for b in read_range(KafkaRange("r", 0, 0, 10), lenient, consumer_factory=RetentionConsumer)
        for r in b.to_pylist()
    ]
    assert [r["offset"] for r in rows] == [5, 6, 7, 8, 9]


def test_unreachable_broker_is_a_clear_error_after_bounded_retries() -> None:
    servers = f"127.0.0.1:{free_port()}"  # nothing listens there
    opts = {
        "kafka.bootstrap.servers": servers,
        "subscribe": "x",
        "fetchOffset.numRetries": "2",
        "fetchOffset.retryIntervalMs": "200",
        "kafka.bootstrap.timeout.ms": "500",
    }
    reader = KafkaStreamReader(opts)
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError, match=f"{servers}.*did not answer after 2 attempt"):
        reader.initialOffset()
    assert time.monotonic() - started < 15
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError, match=servers):
        list(read_range(KafkaRange("x", 0, 0, 5), KafkaSourceOptions.parse(opts)))
    assert time.monotonic() - started < 15


# --------------------------------------------------------------------------------------------
# Streaming queries on Spark


@pytest.mark.spark
def test_available_now_reads_every_record_once(
    spark: Any, kafka_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    expected = produce(kafka_broker, topic, records(topic, 30, 3))
    opts = options(kafka_broker, subscribe=topic, startingOffsets="earliest")

    seen = run_available_now(spark, opts, tmp_path / "ck")
    assert key_sorted(seen.rows()) == key_sorted(expected)
    row = next(r for r in seen.full if r.partition == 0 and r.offset == 0)
    assert row.asDict()["headers"] is not None and [(h.key, h.value) for h in row.headers] == [
        ("n", b"0"),
        ("src", b"test"),
    ]
    assert row.timestampType == 0 and row.timestamp is not None
    assert next(r for r in seen.full if r.offset == 0 and r.partition == 1).headers is None

    again = run_available_now(spark, opts, tmp_path / "ck")  # same checkpoint: nothing new
    assert again.rows() == []


@pytest.mark.spark
def test_rate_limit_and_large_ranges_split_into_tasks(
    spark: Any, kafka_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    expected = produce(kafka_broker, topic, records(topic, 40, 2))
    opts = options(
        kafka_broker,
        subscribe=topic,
        startingOffsets="earliest",
        maxOffsetsPerTrigger=16,
        maxRecordsPerPartition=3,
    )
    seen = run_available_now(spark, opts, tmp_path / "ck")
    sizes = [len(seen.batches[b]) for b in sorted(seen.batches)]
    assert sizes == [16, 16, 8]
    assert all(seen.tasks[b] >= 6 for b in sorted(seen.batches)[:2])  # 8 records per partition → 3 tasks
    assert key_sorted(seen.rows()) == key_sorted(expected) and no_duplicates(seen.rows())
    for batch in seen.batches.values():  # each batch reads a contiguous slice of each partition
        for p in (0, 1):
            offsets = sorted(r[2] for r in batch if r[1] == p)
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


@pytest.mark.spark
def test_starting_latest_then_restarts_continue_without_gaps_or_duplicates(
    spark: Any, kafka_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker, topic, records(topic, 10, 2))  # before the query: never read
    opts = options(kafka_broker, subscribe=topic, startingOffsets="latest", maxOffsetsPerTrigger=5)
    ck = tmp_path / "ck"
    assert run_available_now(spark, opts, ck).rows() == []

    second = produce(kafka_broker, topic, records(topic, 12, 2, start=10))
    run2 = run_available_now(spark, opts, ck)
    assert key_sorted(run2.rows()) == key_sorted(second)
    assert len(run2.batches) == 3  # 12 records at most 5 per batch

    # A crash after the last batch's offsets were logged but before it committed: the restart
    # replays that batch, and the replay reads exactly the same records.
    last = max(int(p.name) for p in (ck / "offsets").iterdir() if p.name.isdigit())
    (ck / "commits" / str(last)).unlink()
    (ck / "commits" / f".{last}.crc").unlink(missing_ok=True)
    third = produce(kafka_broker, topic, records(topic, 4, 2, start=22))
    run3 = run_available_now(spark, opts, ck)
    assert run3.batches[last] == run2.batches[last]
    replayed = [r for b, rows in run3.batches.items() if b != last for r in rows]
    assert key_sorted(replayed) == key_sorted(third)
    everything = run2.rows() + replayed
    assert key_sorted(everything) == key_sorted(second + third) and no_duplicates(everything)


@pytest.mark.spark
def test_explicit_json_starting_offsets(spark: Any, kafka_broker: EmbeddedBroker, tmp_path: Path) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    expected = produce(kafka_broker, topic, records(topic, 20, 2))
    start = json.dumps({topic: {"0": 7, "1": -2}})
    seen = run_available_now(
        spark, options(kafka_broker, subscribe=topic, startingOffsets=start), tmp_path / "ck"
    )
    assert key_sorted(seen.rows()) == key_sorted([r for r in expected if r[1] == 1 or r[2] >= 7])

    missing = json.dumps({topic: {"0": 1}})
    with pytest.raises(Exception, match=f"missing: {topic}-1"):
        run_available_now(
            spark, options(kafka_broker, subscribe=topic, startingOffsets=missing), tmp_path / "ck2"
        )


@pytest.mark.spark
def test_new_topic_partitions_are_picked_up_mid_stream(
    spark: Any, kafka_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    prefix = topic_name("np")
    first, later = f"{prefix}-a", f"{prefix}-b"
    kafka_broker.create_topic(first, 1)
    expected = produce(kafka_broker, first, records(first, 3, 1))
    seen = Collected()
    opts = options(kafka_broker, subscribePattern=f"{prefix}-.*", startingOffsets="earliest")
    query = (
        stream(spark, opts)
        .writeStream.foreachBatch(seen)
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    try:

        def has_rows(n: int) -> bool:
            assert query.exception() is None, query.exception()
            return len(seen.rows()) >= n

        wait_for(lambda: has_rows(3), "3 rows", timeout=60, interval=0.2)
        kafka_broker.create_topic(later, 2)  # appears while the query runs
        expected += produce(kafka_broker, later, records(later, 6, 2))
        wait_for(lambda: has_rows(9), "9 rows", timeout=60, interval=0.2)
    finally:
        query.stop()
    assert key_sorted(seen.rows()) == key_sorted(expected)
    assert sorted(r[2] for r in seen.rows() if r[0] == later) == [0, 0, 1, 1, 2, 2]


@pytest.mark.spark
def test_unreachable_broker_fails_the_query_quickly(spark: Any, tmp_path: Path) -> None:
    servers = f"127.0.0.1:{free_port()}"
    opts = {
        "kafka.bootstrap.servers": servers,
        "subscribe": "nowhere",
        "fetchOffset.numRetries": "2",
        "fetchOffset.retryIntervalMs": "200",
        "kafka.bootstrap.timeout.ms": "500",
    }
    started = time.monotonic()
    with pytest.raises(Exception, match=f"Kafka brokers at {servers}"):
        run_available_now(spark, opts, tmp_path / "ck")
    assert time.monotonic() - started < 60


@pytest.mark.spark
def test_fail_on_data_loss_when_a_topic_is_recreated(
    spark: Any, kafka_broker: EmbeddedBroker, tmp_path: Path
) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker, topic, records(topic, 6, 1))
    ck = tmp_path / "ck"
    opts = options(kafka_broker, subscribe=topic, startingOffsets="earliest")
    assert len(run_available_now(spark, opts, ck).rows()) == 6

    kafka_broker.delete_topic(topic)  # offsets start again at 0: the checkpoint's 6 is gone
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker, topic, records(topic, 2, 1, start=100))
    assert kafka_broker.end_offsets(topic) == {0: 2}
    shutil.copytree(ck, tmp_path / "ck2")

    with pytest.raises(Exception, match=r"(?s)offset went back from 6 to 2.*failOnDataLoss"):
        run_available_now(spark, opts, ck)

    lenient = {**opts, "failOnDataLoss": "false"}
    assert run_available_now(spark, lenient, tmp_path / "ck2").rows() == []  # skips to offset 2
    more = produce(kafka_broker, topic, records(topic, 3, 1, start=200))
    assert run_available_now(spark, lenient, tmp_path / "ck2").rows() == more


@pytest.mark.spark
def test_batch_read(spark: Any, kafka_broker: EmbeddedBroker) -> None:
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    expected = produce(kafka_broker, topic, records(topic, 10, 2))
    register(spark)
    reader = spark.read.format(NAME)
    for k, v in options(
        kafka_broker, subscribe=topic, endingOffsets=json.dumps({topic: {"0": 3, "1": -1}})
    ).items():
        reader = reader.option(k, v)
    df = reader.load()
    assert df.schema == SCHEMA
    rows = [(r.topic, r.partition, r.offset, r.key, r.value) for r in df.collect()]
    assert key_sorted(rows) == key_sorted([r for r in expected if r[1] == 1 or r[2] < 3])


def test_a_source_that_emits_ranges_yields_one_row_per_task_and_its_reader_the_same_records(
    spark: Any, kafka_broker: EmbeddedBroker
) -> None:
    """``streampart.emit=ranges``: each task yields its offset range, not its records; read where the
    rows go (as the ingest job's tasks do), the ranges give the very records a records read gives."""
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    expected = produce(kafka_broker, topic, records(topic, 30, 2))
    register(spark)
    opts = options(kafka_broker, subscribe=topic, maxRecordsPerPartition=4, **{"streampart.emit": "ranges"})
    reader = spark.read.format(NAME)
    for k, v in opts.items():
        reader = reader.option(k, v)
    df = reader.load()
    assert df.schema == RANGES_SCHEMA
    ranges = sorted((r.topic, r.partition, r.start, r.end) for r in df.collect())
    assert len(ranges) == 8 and all(end - start <= 4 for _, _, start, end in ranges)  # 15 a partition
    parsed = KafkaSourceOptions.parse(opts, batch=True)

    def read(batches: Any) -> Any:
        for batch in read_ranges(batches, parsed):
            yield batch.select(["topic", "partition", "offset", "key", "value"])

    fields = "topic STRING, partition INT, offset LONG, key BINARY, value BINARY"
    rows = [tuple(r) for r in df.mapInArrow(read, fields).collect()]
    assert key_sorted(rows) == key_sorted(expected) and no_duplicates(rows)


def test_offsets_json_is_canonical() -> None:
    assert list(dump_offsets({("b", 10): 1, ("a", 2): 5, ("b", 9): 0}).items()) == [
        ("a", {"2": 5}),
        ("b", {"9": 0, "10": 1}),
    ]


@pytest.mark.process
def test_embedded_broker_reports_a_failed_start(tmp_path: Path) -> None:
    broker = EmbeddedBroker(binary="/bin/false", log_path=tmp_path / "b.log", ready_timeout=5)
    with pytest.raises(BrokerError, match="exited with code 1"):
        broker.start()
    assert not broker.running
    broker.stop()  # idempotent


def test_embedded_broker_fixture_is_up(kafka_broker: EmbeddedBroker) -> None:
    assert kafka_broker.running and kafka_broker.bootstrap.startswith("127.0.0.1:")
    assert "listening on" in kafka_broker.log_path.read_text()


class FakeOffsets:
    """Stands for the brokers' answers to the driver (the bundled broker has no retention and no
    CreatePartitions): per partition its earliest, its last stable and its newest offset."""

    def __init__(self, parts: dict[tuple[str, int], tuple[int, int, int]]) -> None:
        self.parts = parts
        self.read_committed = True

    def partitions(self) -> list[tuple[str, int]]:
        return sorted(self.parts)

    def earliest(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.parts[tp][0] for tp in tps}

    def latest(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.parts[tp][1] for tp in tps}

    def high_watermarks(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {tp: self.parts[tp][2] for tp in tps}

    def close(self) -> None:
        pass


def planned(
    parts: dict[tuple[str, int], tuple[int, int, int]], start: dict, control: Path, **opts: str
) -> dict:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from ingest.kafka.control import Control, write_control

    write_control(control, Control(topics=frozenset(t for t, _ in parts)))
    reader = KafkaStreamReader(
        {"kafka.bootstrap.servers": "unused:1", "streampart.controlFile": str(control), **opts}
    )
    reader._client = FakeOffsets(parts)  # type: ignore[assignment]
    return reader.latestOffset(start, ReadAllAvailable())


def test_lost_offsets_of_every_partition_are_one_error_and_counted_when_skipped(tmp_path: Path) -> None:
    from ingest.kafka.control import read_skipped

    control = tmp_path / "control.json"
    parts = {("a", 0): (40, 100, 100), ("a", 1): (0, 50, 50), ("b", 0): (7, 9, 9)}
    start = {"a": {"0": 10, "1": 20}, "b": {"0": 5}}
    with pytest.raises(KafkaDataLossError) as caught:
        planned(parts, start, control)
    message = str(caught.value)
    assert "offsets [10, 40) of a-0 were deleted" in message and "offsets [5, 7) of b-0" in message
    assert "(32 records)" in message and "a-1" not in message
    assert read_skipped(str(control)) == {}  # failing: nothing was skipped
    end = planned(parts, start, control, failOnDataLoss="false")
    assert end == {"a": {"0": 100, "1": 50}, "b": {"0": 9}}
    assert read_skipped(str(control)) == {("a", 0): 30, ("b", 0): 2}
    planned(parts, start, control, failOnDataLoss="false")
    assert read_skipped(str(control)) == {("a", 0): 60, ("b", 0): 4}  # running totals


def test_an_open_transaction_holds_its_partition_and_is_no_data_loss(tmp_path: Path) -> None:
    """Under read_committed a batch ends at the last stable offset. A broker that answers a stable
    offset below the batch's start while a transaction is open (Tansu 0.6 answers 0) holds the
    partition where it stands; only the newest offset going back too is data loss."""
    control = tmp_path / "control.json"
    start = {"t": {"0": 12}}
    assert planned({("t", 0): (0, 0, 19)}, start, control) == {"t": {"0": 12}}
    assert planned({("t", 0): (0, 18, 19)}, start, control) == {"t": {"0": 18}}
    with pytest.raises(KafkaDataLossError, match="offset went back from 12 to 3"):
        planned({("t", 0): (0, 3, 3)}, start, control)


def test_a_paused_or_unsubscribed_topic_keeps_its_offsets(tmp_path: Path) -> None:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from ingest.kafka.control import Control, write_control

    control = tmp_path / "control.json"
    write_control(control, Control(topics=frozenset({"a", "b"}), paused=frozenset({"b"})))
    reader = KafkaStreamReader(
        {"kafka.bootstrap.servers": "unused:1", "streampart.controlFile": str(control)}
    )
    parts = {("a", 0): (0, 10, 10), ("b", 0): (0, 10, 10), ("c", 0): (0, 10, 10)}
    fake = FakeOffsets({tp: v for tp, v in parts.items() if tp[0] != "c"})  # c: no longer subscribed
    reader._client = fake  # type: ignore[assignment]
    start = {"a": {"0": 2}, "b": {"0": 3}, "c": {"0": 4}}
    assert reader.latestOffset(start, ReadAllAvailable()) == {"a": {"0": 10}, "b": {"0": 3}, "c": {"0": 4}}
    write_control(control, Control(topics=frozenset({"a", "b"})))  # resumed
    assert reader.latestOffset(start, ReadAllAvailable())["b"] == {"0": 10}


def test_the_consumers_read_committed_records_by_default() -> None:
    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    assert KafkaSourceOptions.parse(base).kafka_config()["isolation_level"] == "read_committed"
    loose = KafkaSourceOptions.parse({**base, "kafka.isolation.level": "read_uncommitted"})
    assert loose.kafka_config()["isolation_level"] == "read_uncommitted"


def test_a_reset_moves_the_batchs_start_once_and_its_mark_is_carried(tmp_path: Path) -> None:
    """A reset in the control file becomes the batch's ``$from`` (in Spark's offset log, so a replay
    reads the same ranges) and its id the ``$reset`` mark every later batch carries: applied once."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from ingest.kafka.control import Control, write_control

    control = tmp_path / "control.json"
    reader = KafkaStreamReader(
        {"kafka.bootstrap.servers": "unused:1", "streampart.controlFile": str(control)}
    )
    fake = FakeOffsets({("a", 0): (5, 40, 40), ("a", 1): (0, 30, 30), ("b", 0): (0, 9, 9)})
    fake.at_time = lambda tps, ms: {tp: 12 for tp in tps}  # type: ignore[attr-defined]
    reader._client = fake  # type: ignore[assignment]
    start = {"a": {"0": 20, "1": 20}, "b": {"0": 9}}
    write_control(control, Control(topics=frozenset({"a", "b"}), resets=((3, "a", "earliest"),)))
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {"a": {"0": 40, "1": 30}, "b": {"0": 9}, "$from": {"a": {"0": 5, "1": 0}}, "$reset": 3}
    assert list(reader.partitions(start, end)) == [KafkaRange("a", 0, 5, 40), KafkaRange("a", 1, 0, 30)]
    again = reader.latestOffset(end, ReadAllAvailable())  # the next batch: applied already, mark carried
    assert again == {"a": {"0": 40, "1": 30}, "b": {"0": 9}, "$reset": 3}
    assert reader.latestOffset(again, ReadAllAvailable()) == again  # nothing new: the same text
    write_control(
        control,
        Control(
            topics=frozenset({"a", "b"}),
            resets=((3, "a", "earliest"), (4, "a", '{"1": 25}'), (5, "b", "2026-11-21T10:00:00+00:00")),
        ),
    )
    end = reader.latestOffset(again, ReadAllAvailable())
    assert end["$from"] == {"a": {"1": 25}, "b": {"0": 9}} and end["$reset"] == 5  # clamped to b's end
    write_control(
        control, Control(topics=frozenset({"a"}), paused=frozenset({"a"}), resets=((6, "a", "latest"),))
    )
    paused = reader.latestOffset({"a": {"0": 20, "1": 20}, "$reset": 5}, ReadAllAvailable())
    assert paused["a"] == {"0": 40, "1": 30} and paused["$from"] == {"a": {"0": 40, "1": 30}}
    assert paused["$reset"] == 6
    ranges = list(reader.partitions({"a": {"0": 20, "1": 20}}, paused))
    assert [r for r in ranges if isinstance(r, KafkaRange) and r.topic == "a"] == []  # moved, nothing read

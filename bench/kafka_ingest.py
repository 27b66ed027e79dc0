"""Benchmark 4: Kafka ingest against a plain PySpark job (kafka-python in mapInArrow → Parquet), cold
end to end (the CLI in a fresh process), and freshness."""

from __future__ import annotations

import functools
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, median, percentile, progress, workdir

NAME = "kafka"
TOPIC = "bench-events"
FRESH_TOPIC = "bench-fresh"
DDL = "id BIGINT, ts TIMESTAMP, user_id BIGINT, level STRING, amount DOUBLE, tags STRING, msg STRING"
RECORD_BYTES = 1024  # target size of one JSON value
FRESH_BATCH = 10  # records per producer send in the freshness run
FRESH_POLL_S = 0.05  # how often the freshness reader looks for a new Delta version
FRESH_WARMUP_S = 3.0  # records produced in the first seconds are not counted


# -- data ----------------------------------------------------------------------------------
_WORDS = ["".join(random.Random(k).choices("abcdefghijklmnopqrstuvwxyz", k=3 + k % 8)) for k in range(500)]
_LEVELS = ["debug", "info", "info", "info", "warn", "error"]


@functools.cache
def _text() -> str:
    """4 MB of random words; each record's msg is a slice of it at a random start (cheap, distinct)."""
    return " ".join(random.Random(3).choices(_WORDS, k=600_000))


def make_value(rng: random.Random, i: int, ts: datetime, size: int = RECORD_BYTES) -> bytes:
    """One JSON record of ``size`` bytes; ``msg`` is random words (compresses like text)."""
    head = {
        "id": i,
        "ts": ts.isoformat(timespec="microseconds").replace("+00:00", "Z"),
        "user_id": rng.randrange(1_000_000),
        "level": rng.choice(_LEVELS),
        "amount": round(rng.uniform(0, 1000), 2),
        "tags": ",".join(rng.choices(_WORDS[:40], k=3)),
    }
    fixed = len(json.dumps({**head, "msg": ""}))
    length = max(0, size - fixed)
    text = _text()
    start = rng.randrange(len(text) - length)
    msg = text[start : start + length]
    return json.dumps({**head, "msg": msg}).encode()


def bulk_produce(broker: Any, topic: str, n: int, partitions: int, seed: int = 7) -> int:
    """Produce ``n`` records round-robin over ``partitions``, fast; returns the payload bytes.

    Tansu under-reports a partition's end offset after a multi-record batch (see
    ``ingest.kafka.devbroker``), so all but the last record of each partition go in large batches, then
    the last ones one per batch, which makes the end offsets exact.
    """
    from kafka import KafkaProducer

    from ingest.kafka.devbroker import producer

    rng = random.Random(seed)
    now = datetime.now(UTC)
    held: list[tuple[int, bytes]] = []
    total = 0
    fast = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        batch_size=1 << 20,
        linger_ms=20,
        acks=1,
        max_request_size=16 << 20,
        client_id="streampart-bench-bulk",
    )
    try:
        with progress() as bar:
            task = bar.add_task(f"producing {n:,} records of ~{RECORD_BYTES} B", total=n)
            for i in range(n):
                value = make_value(rng, i, now)
                total += len(value)
                p = i % partitions
                if i >= n - partitions:
                    held.append((p, value))
                else:
                    fast.send(topic, value=value, partition=p)
                if i % 5000 == 4999:
                    bar.advance(task, 5000)
            fast.flush(timeout=300)
            bar.update(task, completed=n)
    finally:
        fast.close(timeout=10)
    single = producer(broker.bootstrap)
    try:
        for p, value in held:
            single.send(topic, value=value, partition=p)
        single.flush(timeout=60)
    finally:
        single.close(timeout=5)
    ends = broker.end_offsets(topic)
    if sum(ends.values()) != n:
        raise RuntimeError(f"broker reports {sum(ends.values())} records in {topic}, produced {n}: {ends}")
    return total


# -- throughput ----------------------------------------------------------------------------
class ExternalBroker:
    """A broker the benchmark did not start (``--bootstrap``): the calls the benchmark makes of one."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap

    def __enter__(self) -> ExternalBroker:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def create_topic(self, name: str, partitions: int = 1) -> None:
        from ingest.kafka.devbroker import create_topic

        create_topic(self.bootstrap, name, partitions, timeout=30)

    def end_offsets(self, topic: str) -> dict[int, int]:
        from ingest.kafka.devbroker import end_offsets

        return end_offsets(self.bootstrap, topic)


def plain_batches(ends: dict[int, int], max_offsets: int) -> list[list[tuple[int, int, int]]]:
    """The topic ``[0, end)`` per partition cut into batches of at most ``max_offsets`` records,
    spread evenly over the partitions: ``[(partition, start, end), …]`` per batch."""
    starts = dict.fromkeys(ends, 0)
    batches = []
    while any(starts[p] < e for p, e in ends.items()):
        busy = [p for p, e in ends.items() if starts[p] < e]
        share = max(1, max_offsets // len(busy))
        batch = []
        for p in busy:
            stop = min(ends[p], starts[p] + share)
            batch.append((p, starts[p], stop))
            starts[p] = stop
        batches.append(batch)
    return batches


def run_plain(spark: Any, bootstrap: str, topic: str, max_offsets: int, out: Path) -> float:
    """The plain PySpark job: per batch, one task per partition reads its offset range with
    kafka-python inside ``mapInArrow`` (assign + seek, no group), ``from_json`` into the table
    schema, ``write.mode("append").parquet``. No streaming query, no checkpoint, no validation.

    Its consumers read as the streampart source's do: the same consumer settings (the source's own
    ``kafka_config``: fetch sizes, records per poll, isolation level), the same records asked of
    each poll and the same 10,000-record Arrow batches, one consumer per task."""
    from kafka import KafkaConsumer, TopicPartition
    from pyspark.sql import functions as F

    from ingest.kafka.options import KafkaSourceOptions

    config = KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic}, batch=True
    ).kafka_config()

    def read(batches: Any) -> Any:  # nested, so Spark pickles it by value: the worker imports no bench
        import pyarrow as pa
        from kafka import KafkaConsumer, TopicPartition

        for ranges in batches:
            for p, start, end in zip(*(ranges.column(i).to_pylist() for i in range(3)), strict=True):
                consumer = KafkaConsumer(**config)
                tp = TopicPartition(topic, p)
                consumer.assign([tp])
                consumer.seek(tp, start)
                values: list[bytes] = []
                offset = start
                while offset < end:
                    polled = consumer.poll(timeout_ms=500, max_records=max(1, min(10_000, end - offset)))
                    for record in polled.get(tp, ()):
                        if record.offset >= end:
                            break
                        values.append(record.value)
                        offset = record.offset + 1
                    if len(values) >= 10_000 or offset >= end:
                        yield pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])
                        values = []
                consumer.close(autocommit=False)

    t0 = time.perf_counter()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or ())]
        ends = {tp.partition: int(o) for tp, o in consumer.end_offsets(tps).items()}
    finally:
        consumer.close(autocommit=False)
    sc = spark.sparkContext
    for batch in plain_batches(ends, max_offsets):
        (
            sc.parallelize(batch, len(batch))
            .toDF("partition INT, start LONG, end LONG")
            .mapInArrow(read, "value BINARY")
            .select(F.from_json(F.col("value").cast("string"), DDL).alias("r"))
            .select("r.*")
            .write.mode("append")
            .parquet(str(out))
        )
    return time.perf_counter() - t0


def run_cold(catalog: Any, table: str, bootstrap: str, topic: str, max_offsets: int, tmp: Path) -> Cold:
    """``streampart ingest kafka --available-now`` in a fresh process: Python, Spark's JVM, Spark's
    Python workers all start cold. Returns the wall time and the seconds of each batch (from the
    timestamps of the job's per-batch log lines)."""
    cmd = [
        sys.executable,
        "-m",
        "streampart.cli",
        "--warehouse",
        str(catalog.warehouse.root),
        "--metastore",
        str(catalog.store.url),
        "ingest",
        "kafka",
        table,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--available-now",
        "--max-offsets-per-trigger",
        str(max_offsets),
        "--checkpoint",
        str(tmp / "ckpt-cold"),
    ]
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    seconds = time.perf_counter() - t0
    (tmp / "cold.stderr").write_text(proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"cold run exited {proc.returncode}: {proc.stderr[-2000:]}")
    batches = [
        float(m.group(2))
        for m in map(_BATCH_LINE.search, proc.stderr.splitlines())
        if m is not None and int(m.group(1)) > 0
    ]
    return Cold(seconds, batches)


_BATCH_LINE = re.compile(r"batch \d+ → chunk \S+: (\d+) rows.* in (\d+\.\d+) s$")


@dataclass
class Cold:
    seconds: float
    batches: list[float]  # seconds of each batch that read rows, in order, from the job's log


def run_ours(
    spark: Any, catalog: Any, table: str, bootstrap: str, topic: str, max_offsets: int, checkpoint: Path
) -> float:
    from ingest.kafka.job import KafkaIngestOptions, run_kafka_ingest

    opts = KafkaIngestOptions(
        table=table,
        bootstrap=bootstrap,
        topic=topic,
        available_now=True,
        max_offsets_per_trigger=max_offsets,
        checkpoint=str(checkpoint),
    )
    t0 = time.perf_counter()
    run_kafka_ingest(spark, catalog, opts)  # returns as soon as the query ends
    return time.perf_counter() - t0


def create_table(catalog: Any, name: str) -> Any:
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema

    return catalog.create_table(
        TableSpec(
            name=TableName.parse(name),
            columns=parse_schema(DDL),
            time_column="ts",
            mode=Mode.ARRIVAL,
            roll_every=parse_duration("1d"),
            dead_letter=True,
        )
    )


def check_ours(spark: Any, catalog: Any, name: str, n: int) -> str | None:
    """None if the table holds exactly ids 0..n-1 once each and no dead letters, else what is wrong."""
    from pyspark.sql import functions as F

    from metastore.delta.files import live_files
    from metastore.models import TableKind
    from streampart.query import read_table

    table = catalog.table(name)
    row = (
        read_table(spark, catalog, table)
        .agg(
            F.count("*").alias("n"),
            F.countDistinct("id").alias("ids"),
            F.min("id").alias("lo"),
            F.max("id").alias("hi"),
            F.count("ts").alias("ts"),
        )
        .collect()[0]
    )
    dead = sum(
        f.rows for f in live_files(catalog.warehouse.load(catalog.companion(table, TableKind.DEAD_LETTER)))
    )
    if (row["n"], row["ids"], row["lo"], row["hi"], row["ts"], dead) != (n, n, 0, n - 1, n, 0):
        return (
            f"{name}: {row['n']} rows, {row['ids']} distinct ids in [{row['lo']}, {row['hi']}], "
            f"{row['ts']} non-null ts, {dead} dead letters; expected {n} rows, ids 0..{n - 1}"
        )
    return None


def check_plain(spark: Any, out: Path, n: int) -> str | None:
    from pyspark.sql import functions as F

    row = (
        spark.read.parquet(str(out))
        .agg(F.count("*").alias("n"), F.countDistinct("id").alias("ids"), F.count("ts").alias("ts"))
        .collect()[0]
    )
    if (row["n"], row["ids"], row["ts"]) != (n, n, n):
        return f"plain: {row['n']} rows, {row['ids']} distinct ids, {row['ts']} non-null ts; expected {n}"
    return None


# -- freshness -----------------------------------------------------------------------------
@dataclass
class Freshness:
    produced: int = 0
    seen: int = 0
    latencies: list[float] = field(default_factory=list)  # seconds, counted records only
    versions: int = 0
    batches: int = 0
    errors: list[str] = field(default_factory=list)


def _producer_loop(
    broker: Any, topic: str, rate: int, partitions: int, stop: threading.Event, state: Freshness
) -> None:
    """``rate`` records/s in sends of FRESH_BATCH records, each carrying its produce time in ``ts``."""
    from ingest.kafka.devbroker import producer

    rng = random.Random(11)
    prod = producer(broker.bootstrap)  # one record per batch: Tansu's end offsets stay exact
    interval = FRESH_BATCH / rate
    next_at = time.monotonic()
    i = 0
    try:
        while not stop.is_set():
            for _ in range(FRESH_BATCH):
                value = make_value(rng, i, datetime.now(UTC))
                prod.send(topic, value=value, partition=i % partitions)
                i += 1
            state.produced = i
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                stop.wait(delay)
        prod.flush(timeout=30)
    except Exception as exc:  # reported, not raised: the run reports what it measured
        state.errors.append(f"producer: {type(exc).__name__}: {exc}")
    finally:
        prod.close(timeout=5)


def run_freshness(
    spark: Any,
    catalog: Any,
    broker: Any,
    topic: str,
    partitions: int,
    seconds: float,
    rate: int,
    checkpoint: Path,
) -> Freshness:
    """A 1 s trigger stream while a producer sends at a steady rate; a reader polls Delta versions.

    Latency of a record = the moment the reader saw the Delta version holding it (polled every
    FRESH_POLL_S) minus the produce time written into the record.
    """
    import pyarrow.parquet as pq

    from ingest.kafka.job import KafkaIngestOptions, start_kafka_ingest
    from metastore.delta.files import live_files

    broker.create_topic(topic, partitions=partitions)
    name = "bench.kafka_fresh"
    table = create_table(catalog, name)
    opts = KafkaIngestOptions(
        table=name, bootstrap=broker.bootstrap, topic=topic, trigger="1s", checkpoint=str(checkpoint)
    )
    state = Freshness()
    query = start_kafka_ingest(spark, catalog, opts)
    try:
        deadline = time.monotonic() + 120
        while query.lastProgress is None:  # the first (empty) batch pins the starting offsets
            if time.monotonic() > deadline or not query.isActive:
                raise RuntimeError(f"the freshness stream did not start: {query.exception()}")
            time.sleep(0.1)
        stop = threading.Event()
        started = datetime.now(UTC).timestamp()
        thread = threading.Thread(
            target=_producer_loop, args=(broker, topic, rate, partitions, stop, state), daemon=True
        )
        thread.start()
        dt = catalog.warehouse.load(table)
        version = dt.version()
        known: set[str] = set()
        end = time.monotonic() + seconds
        drain_until: float | None = None
        with progress() as bar:
            task = bar.add_task(f"freshness: {rate} records/s, 1 s trigger", total=int(seconds))
            while True:
                now_mono = time.monotonic()
                if drain_until is None and now_mono >= end:
                    stop.set()
                    thread.join(30)
                    drain_until = now_mono + 15  # let the last records land
                if drain_until is not None and (state.seen >= state.produced or now_mono > drain_until):
                    break
                if not query.isActive:
                    state.errors.append(f"stream stopped: {query.exception()}")
                    break
                bar.update(task, completed=min(seconds, seconds - (end - now_mono)))
                time.sleep(FRESH_POLL_S)
                dt.update_incremental()
                if dt.version() == version:
                    continue
                seen_at = datetime.now(UTC).timestamp()
                version = dt.version()
                state.versions += 1
                for f in live_files(dt):
                    if f.path in known:
                        continue
                    known.add(f.path)
                    ts = pq.read_table(Path(table.location) / f.path, columns=["ts"]).column("ts")
                    for t in ts.to_pylist():
                        state.seen += 1
                        produced_at = t.timestamp()
                        if produced_at >= started + FRESH_WARMUP_S:
                            state.latencies.append(seen_at - produced_at)
    finally:
        query.stop()
    state.batches = sum(1 for p in query.recentProgress if getattr(p, "numInputRows", 0))
    return state


# -- the benchmark -------------------------------------------------------------------------
def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from ingest.kafka.devbroker import EmbeddedBroker
    from metastore.catalog import Catalog
    from streampart.query import spark_session

    n = scale["kafka_records"]
    partitions = scale["kafka_partitions"]
    max_offsets = scale["kafka_max_offsets"]
    reps, warm = scale["kafka_reps"], scale["kafka_warmup"]
    fresh_s, fresh_rate = scale["kafka_fresh_seconds"], scale["kafka_fresh_rate"]
    external = scale.get("kafka_bootstrap")
    # topics of their own on an external broker, so that runs never read each other's records
    suffix = f"-{uuid.uuid4().hex[:8]}" if external else ""
    topic, fresh_topic = TOPIC + suffix, FRESH_TOPIC + suffix
    broker_text = (
        f"External Kafka broker at {external} (--bootstrap), topics {topic} and {fresh_topic} created "
        "for this run"
        if external
        else "Embedded Tansu broker (ingest.kafka.devbroker, memory storage)"
    )
    result = BenchResult(
        name=NAME,
        title=f"Kafka ingest of {n:,} JSON records of ~1 KB vs a plain PySpark job; cold; freshness",
        method=[
            f"{broker_text}; topic of {partitions} partitions, {n:,} JSON records of ~{RECORD_BYTES} B "
            "(7 fields, msg = a slice of random words) bulk-produced before any timing.",
            "One SparkSession (streampart.query.spark_session, local[2]) for the warm rounds. Both sides "
            f"read the whole topic in batches of {max_offsets:,} records spread evenly over the partitions.",
            "streampart = run_kafka_ingest (Trigger.AvailableNow, maxOffsetsPerTrigger, fresh checkpoint) "
            "into a fresh arrival-mode table with a dead-letter table: the streampart-kafka source, tasks "
            "parse and validate every value and stage Parquet; the driver commits one chunk per batch "
            "(metastore + Delta transaction).",
            "plain = a plain PySpark job, per batch: one task per partition reads its offset range with "
            "kafka-python inside mapInArrow (assign + seek), from_json into the table schema, "
            "write.mode('append').parquet(dir). No streaming query, checkpoint, validation or commit. "
            "Its consumers read as the source's: the source's own consumer settings (fetch sizes, "
            "records per poll, read_committed), the same records asked of each poll, 10,000-record "
            "Arrow batches, one consumer per task.",
            "Time = wall clock from starting the query (or the first batch) to its end; records/s = "
            "records / time; MB/s = JSON payload bytes (10^6) / time.",
            f"{warm} warm-up round(s) (discarded) and {reps} timed round(s), the two sides alternating "
            "(streampart first in even rounds); medians reported. Each streampart table is checked for "
            "exactly ids 0..N-1 once each and no dead letters; the plain output for N rows, N ids.",
            "Cold = `streampart ingest kafka --available-now` of the same topic into a fresh table, in a "
            "fresh process (Python, Spark's JVM and Python workers all start cold), wall clock of the "
            "process; its batches' seconds come from the job's per-batch log lines.",
            f"Freshness: a fresh table, start_kafka_ingest with trigger=1s; a producer thread sends "
            f"{fresh_rate} records/s ({FRESH_BATCH} per send) for {fresh_s:g} s, each carrying its produce "
            f"time in ts; a reader polls the newest Delta version every {FRESH_POLL_S * 1000:.0f} ms "
            "(DeltaTable.update_incremental) and reads ts of the new files; latency = seen - produced, "
            f"records of the first {FRESH_WARMUP_S:g} s not counted.",
        ],
        baseline=(
            "a plain PySpark job on the same broker, records and SparkSession: kafka-python in mapInArrow "
            "→ from_json → Parquet, alternating rounds with ours (cold and freshness have no baseline)"
        ),
        params={
            "records": n,
            "partitions": partitions,
            "max_offsets_per_trigger": max_offsets,
            "rounds": reps,
            "warmup_rounds": warm,
            "freshness_seconds": fresh_s,
            "freshness_rate": fresh_rate,
            "bootstrap": external or "embedded tansu",
        },
    )
    runs: dict[str, list[float]] = {"streampart": [], "plain": []}
    warmups: dict[str, list[float]] = {"streampart": [], "plain": []}
    with workdir("kafka") as tmp:
        broker: Any = ExternalBroker(external) if external else EmbeddedBroker(log_path=tmp / "tansu.log")
        with broker:
            broker.create_topic(topic, partitions=partitions)
            t0 = time.perf_counter()
            payload = bulk_produce(broker, topic, n, partitions)
            produce_s = time.perf_counter() - t0
            console.print(
                f"  produced {n:,} records, {payload / 1e6:.1f} MB in {produce_s:.1f} s "
                f"({n / produce_s:,.0f} records/s)"
            )
            catalog = Catalog.open(tmp / "warehouse")
            # the cold round first, while nothing of ours runs: its own process, its own JVM
            create_table(catalog, "bench.kafka_cold")
            cold = run_cold(catalog, "bench.kafka_cold", broker.bootstrap, topic, max_offsets, tmp)
            problem = None
            console.print(
                f"  cold (fresh process, CLI): {cold.seconds:6.2f} s  {n / cold.seconds:>9,.0f} records/s; "
                f"batches {', '.join(f'{b:.2f}' for b in cold.batches)} s"
            )
            t0 = time.perf_counter()
            spark = spark_session()
            spark_start = time.perf_counter() - t0
            problem = check_ours(spark, catalog, "bench.kafka_cold", n)
            if problem:
                result.notes.append(f"check failed (cold round): {problem}")
            for i in range(warm + reps):
                sides = ["streampart", "plain"]
                for side in sides if i % 2 == 0 else sides[::-1]:
                    label = "warm-up" if i < warm else "timed"
                    if side == "streampart":
                        name = f"bench.kafka_r{i}"
                        create_table(catalog, name)
                        secs = run_ours(
                            spark, catalog, name, broker.bootstrap, topic, max_offsets, tmp / f"ckpt-ours-{i}"
                        )
                        problem = check_ours(spark, catalog, name, n)
                    else:
                        out = tmp / f"plain-{i}"
                        secs = run_plain(spark, broker.bootstrap, topic, max_offsets, out)
                        problem = check_plain(spark, out, n)
                    if problem:
                        result.notes.append(f"check failed ({label} round {i}): {problem}")
                    (runs if i >= warm else warmups)[side].append(secs)
                    console.print(
                        f"  round {i} ({label}) {side:>10}: {secs:6.2f} s  {n / secs:>9,.0f} records/s  "
                        f"{payload / 1e6 / secs:6.1f} MB/s" + ("  [red]CHECK FAILED[/]" if problem else "")
                    )
            fresh = run_freshness(
                spark, catalog, broker, fresh_topic, partitions, fresh_s, fresh_rate, tmp / "ckpt-fresh"
            )
            catalog.close()

    ours_s, plain_s = median(runs["streampart"]), median(runs["plain"])
    result.metrics += [
        Metric("ingest records/s (warm)", n / ours_s, "records/s", n / plain_s, higher_is_better=True),
        Metric(
            "ingest MB/s (warm)",
            payload / 1e6 / ours_s,
            "MB/s",
            payload / 1e6 / plain_s,
            higher_is_better=True,
        ),
        Metric("ingest wall time (warm)", ours_s, "s", plain_s),
        Metric("cold end to end (fresh process)", cold.seconds, "s"),
        Metric("cold end to end / our warm", cold.seconds / ours_s, "x"),
    ]
    if len(cold.batches) > 1:
        result.metrics.append(
            Metric(
                "cold: first batch / later batches (median)", cold.batches[0] / median(cold.batches[1:]), "x"
            )
        )
    if fresh.latencies:
        result.metrics += [
            Metric("freshness p50 (produce → visible)", percentile(fresh.latencies, 50) * 1000, "ms"),
            Metric("freshness p99 (produce → visible)", percentile(fresh.latencies, 99) * 1000, "ms"),
            Metric("freshness max", max(fresh.latencies) * 1000, "ms"),
        ]
    else:
        result.notes.append("freshness: no record became visible")
    if fresh.seen != fresh.produced:
        result.notes.append(f"freshness: {fresh.produced} records produced, {fresh.seen} visible at the end")
    result.notes += [f"freshness: {e}" for e in fresh.errors]
    # Each round's two sides run back to back, so their ratio is less exposed to the load of
    # other processes drifting over the run than the ratio of the medians.
    paired = [p / o for o, p in zip(runs["streampart"], runs["plain"], strict=True)]
    result.notes.append(
        f"ours / plain (records/s) {plain_s / ours_s:.2f}x (medians); per round "
        f"{', '.join(f'{r:.2f}' for r in paired)}, median {median(paired):.2f}x; goal >= 1.0x. "
        f"Cold end to end {cold.seconds / ours_s:.2f}x our warm wall time; goal <= 2x"
    )
    result.params.update(
        {
            "payload_bytes": payload,
            "produce_seconds": round(produce_s, 3),
            "spark_start_seconds": round(spark_start, 3),
            "rounds_seconds": runs,
            "round_ratios": paired,
            "round_ratio_median": median(paired),
            "warmup_seconds": warmups,
            "cold_seconds": cold.seconds,
            "cold_batch_seconds": cold.batches,
            "freshness_produced": fresh.produced,
            "freshness_visible": fresh.seen,
            "freshness_counted": len(fresh.latencies),
            "freshness_versions": fresh.versions,
            "freshness_batches_with_rows": fresh.batches,
            "freshness_p95_ms": percentile(fresh.latencies, 95) * 1000 if fresh.latencies else None,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "streampart", "plain job", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in result.metrics:
        t.add_row(m.name, fmt(m.value, m.unit), fmt(m.baseline, m.unit), fmt_ratio(m.ratio))
    console.print(t)
    console.print(
        f"  freshness: {fresh.produced:,} records produced, {fresh.seen:,} visible, "
        f"{len(fresh.latencies):,} counted, over {fresh.versions} new Delta versions"
    )
    return result

"""Benchmark 4: Kafka ingest throughput against plain Parquet from the same source, and freshness."""

from __future__ import annotations

import functools
import json
import random
import threading
import time
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
def _source_options(bootstrap: str, max_offsets: int) -> dict[str, str]:
    from ingest.kafka.options import source_options

    return source_options(bootstrap, TOPIC, starting_offsets="earliest", max_offsets_per_trigger=max_offsets)


def run_baseline(spark: Any, bootstrap: str, max_offsets: int, out: Path, checkpoint: Path) -> float:
    """Same source and trigger → foreachBatch: from_json into the table schema → plain Parquet."""
    from pyspark.sql import functions as F

    from ingest.kafka.source import read_stream

    schema = DDL

    def sink(df: Any, batch_id: int) -> None:
        (
            df.select(F.from_json(F.col("value").cast("string"), schema).alias("r"))
            .select("r.*")
            .write.mode("append")
            .parquet(str(out))
        )

    t0 = time.perf_counter()
    query = (
        read_stream(spark, _source_options(bootstrap, max_offsets))
        .writeStream.queryName("bench_kafka_baseline")
        .option("checkpointLocation", str(checkpoint))
        .foreachBatch(sink)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    if query.exception() is not None:
        raise RuntimeError(f"baseline query failed: {query.exception()}")
    return seconds


def run_ours(
    spark: Any, catalog: Any, table: str, bootstrap: str, max_offsets: int, checkpoint: Path
) -> float:
    from ingest.kafka.job import KafkaIngestOptions, run_kafka_ingest

    opts = KafkaIngestOptions(
        table=table,
        bootstrap=bootstrap,
        topic=TOPIC,
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
        f.rows
        for f in catalog.warehouse.live_files(
            catalog.warehouse.load(catalog.companion(table, TableKind.DEAD_LETTER))
        )
    )
    if (row["n"], row["ids"], row["lo"], row["hi"], row["ts"], dead) != (n, n, 0, n - 1, n, 0):
        return (
            f"{name}: {row['n']} rows, {row['ids']} distinct ids in [{row['lo']}, {row['hi']}], "
            f"{row['ts']} non-null ts, {dead} dead letters; expected {n} rows, ids 0..{n - 1}"
        )
    return None


def check_baseline(spark: Any, out: Path, n: int) -> str | None:
    from pyspark.sql import functions as F

    row = (
        spark.read.parquet(str(out))
        .agg(F.count("*").alias("n"), F.countDistinct("id").alias("ids"), F.count("ts").alias("ts"))
        .collect()[0]
    )
    if (row["n"], row["ids"], row["ts"]) != (n, n, n):
        return f"baseline: {row['n']} rows, {row['ids']} distinct ids, {row['ts']} non-null ts; expected {n}"
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


def _producer_loop(broker: Any, rate: int, partitions: int, stop: threading.Event, state: Freshness) -> None:
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
                prod.send(FRESH_TOPIC, value=value, partition=i % partitions)
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
    spark: Any, catalog: Any, broker: Any, partitions: int, seconds: float, rate: int, checkpoint: Path
) -> Freshness:
    """A 1 s trigger stream while a producer sends at a steady rate; a reader polls Delta versions.

    Latency of a record = the moment the reader saw the Delta version holding it (polled every
    FRESH_POLL_S) minus the produce time written into the record.
    """
    import pyarrow.parquet as pq

    from ingest.kafka.job import KafkaIngestOptions, start_kafka_ingest

    broker.create_topic(FRESH_TOPIC, partitions=partitions)
    name = "bench.kafka_fresh"
    table = create_table(catalog, name)
    opts = KafkaIngestOptions(
        table=name, bootstrap=broker.bootstrap, topic=FRESH_TOPIC, trigger="1s", checkpoint=str(checkpoint)
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
            target=_producer_loop, args=(broker, rate, partitions, stop, state), daemon=True
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
                for f in catalog.warehouse.live_files(dt):
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
    result = BenchResult(
        name=NAME,
        title=f"Kafka ingest of {n:,} JSON records of ~1 KB, and freshness at a 1 s trigger",
        method=[
            f"Embedded Tansu broker (ingest.kafka.devbroker, memory storage); topic of {partitions} "
            f"partitions, {n:,} JSON records of ~{RECORD_BYTES} B (7 fields, msg = a slice of random words) "
            "bulk-produced before any timing.",
            "One SparkSession (streampart.query.spark_session, local[2]) for everything. Both sides read "
            "the topic with the streampart-kafka source, Trigger.AvailableNow, "
            f"maxOffsetsPerTrigger={max_offsets:,} (the same micro-batches), from a fresh checkpoint "
            "each round.",
            "streampart = run_kafka_ingest into a fresh arrival-mode table with a dead-letter table: tasks "
            "parse and validate every value (Python) and stage Parquet; the driver commits one chunk per "
            "batch (metastore + Delta transaction).",
            "Time = wall clock from starting the query to its end (query start-up included on both sides); "
            "records/s = records / time; MB/s = JSON payload bytes (10^6) / time.",
            f"{warm} warm-up round(s) (discarded) and {reps} timed round(s), the two sides alternating "
            "(streampart first in even rounds); medians reported. Each timed streampart table is checked "
            "for exactly ids 0..N-1 once each and no dead letters; the baseline's output for N rows, N ids.",
            f"Freshness: a fresh table, start_kafka_ingest with trigger=1s; a producer thread sends "
            f"{fresh_rate} records/s ({FRESH_BATCH} per send) for {fresh_s:g} s, each carrying its produce "
            f"time in ts; a reader polls the newest Delta version every {FRESH_POLL_S * 1000:.0f} ms "
            "(DeltaTable.update_incremental) and reads ts of the new files; latency = seen - produced, "
            f"records of the first {FRESH_WARMUP_S:g} s not counted.",
        ],
        baseline=(
            "the same streampart-kafka stream and trigger in the same session, foreachBatch: "
            "from_json(value) into the table schema, df.write.mode('append').parquet(dir) — no "
            "validation, no dead letters, no chunk commit (freshness has no baseline)"
        ),
        params={
            "records": n,
            "partitions": partitions,
            "max_offsets_per_trigger": max_offsets,
            "rounds": reps,
            "warmup_rounds": warm,
            "freshness_seconds": fresh_s,
            "freshness_rate": fresh_rate,
        },
    )
    runs: dict[str, list[float]] = {"streampart": [], "baseline": []}
    warmups: dict[str, list[float]] = {"streampart": [], "baseline": []}
    with workdir("kafka") as tmp, EmbeddedBroker(log_path=tmp / "tansu.log") as broker:
        broker.create_topic(TOPIC, partitions=partitions)
        t0 = time.perf_counter()
        payload = bulk_produce(broker, TOPIC, n, partitions)
        produce_s = time.perf_counter() - t0
        console.print(
            f"  produced {n:,} records, {payload / 1e6:.1f} MB in {produce_s:.1f} s "
            f"({n / produce_s:,.0f} records/s)"
        )
        t0 = time.perf_counter()
        spark = spark_session()
        spark_start = time.perf_counter() - t0
        catalog = Catalog.open(tmp / "warehouse")
        for i in range(warm + reps):
            sides = ["streampart", "baseline"]
            for side in sides if i % 2 == 0 else sides[::-1]:
                label = "warm-up" if i < warm else "timed"
                if side == "streampart":
                    name = f"bench.kafka_r{i}"
                    create_table(catalog, name)
                    secs = run_ours(
                        spark, catalog, name, broker.bootstrap, max_offsets, tmp / f"ckpt-ours-{i}"
                    )
                    problem = check_ours(spark, catalog, name, n)
                else:
                    out = tmp / f"plain-{i}"
                    secs = run_baseline(spark, broker.bootstrap, max_offsets, out, tmp / f"ckpt-base-{i}")
                    problem = check_baseline(spark, out, n)
                if problem:
                    result.notes.append(f"check failed ({label} round {i}): {problem}")
                (runs if i >= warm else warmups)[side].append(secs)
                console.print(
                    f"  round {i} ({label}) {side:>10}: {secs:6.2f} s  {n / secs:>9,.0f} records/s  "
                    f"{payload / 1e6 / secs:6.1f} MB/s" + ("  [red]CHECK FAILED[/]" if problem else "")
                )
        fresh = run_freshness(spark, catalog, broker, partitions, fresh_s, fresh_rate, tmp / "ckpt-fresh")
        catalog.close()

    ours_s, base_s = median(runs["streampart"]), median(runs["baseline"])
    result.metrics += [
        Metric("ingest records/s", n / ours_s, "records/s", n / base_s, higher_is_better=True),
        Metric("ingest MB/s", payload / 1e6 / ours_s, "MB/s", payload / 1e6 / base_s, higher_is_better=True),
        Metric("ingest wall time", ours_s, "s", base_s),
    ]
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
    ratio = base_s / ours_s
    # Each round's two sides run back to back, so their ratio is less exposed to the load of
    # other processes drifting over the run than the ratio of the medians.
    paired = [b / o for o, b in zip(runs["streampart"], runs["baseline"], strict=True)]
    result.notes.append(
        f"ingest ratio {ratio:.2f}x (medians); per round {', '.join(f'{r:.2f}' for r in paired)}, "
        f"median {median(paired):.2f}x; target >= 0.8x"
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
            "freshness_produced": fresh.produced,
            "freshness_visible": fresh.seen,
            "freshness_counted": len(fresh.latencies),
            "freshness_versions": fresh.versions,
            "freshness_batches_with_rows": fresh.batches,
            "freshness_p95_ms": percentile(fresh.latencies, 95) * 1000 if fresh.latencies else None,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "streampart", "plain Parquet", "ratio"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for m in result.metrics:
        t.add_row(m.name, fmt(m.value, m.unit), fmt(m.baseline, m.unit), fmt_ratio(m.ratio))
    console.print(t)
    console.print(
        f"  freshness: {fresh.produced:,} records produced, {fresh.seen:,} visible, "
        f"{len(fresh.latencies):,} counted, over {fresh.versions} new Delta versions"
    )
    return result

"""Benchmark: Kafka ingest of Avro records against the same records as JSON (issue 29).

The same records, ~1 KB each, go to two topics: as JSON objects, and as Avro datums of one writer
schema (``--format avro --avro-schema``, fastavro's schemaless encoding). Both are ingested by the
same job code in the same SparkSession, in the same batches, into fresh tables of the same columns.
The ratio is Avro's records/s over JSON's: JSON takes the Arrow fast path (Arrow's JSON reader in
C++), Avro goes record by record (fastavro, then the validator).
"""

from __future__ import annotations

import io
import json
import random
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, median, workdir
from bench.kafka_ingest import create_table, make_value

NAME = "kafka_avro"
SCHEMA = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "user_id", "type": "long"},
        {"name": "level", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "tags", "type": "string"},
        {"name": "msg", "type": "string"},
    ],
}


def produce(broker: Any, topic: str, values: list[bytes], partitions: int) -> None:
    """``values`` round-robin over ``partitions``; the last of each partition one per batch (Tansu's
    end offsets are exact only then: ``ingest.kafka.devbroker``)."""
    from kafka import KafkaProducer

    from ingest.kafka.devbroker import producer

    fast = KafkaProducer(
        bootstrap_servers=broker.bootstrap, batch_size=1 << 20, linger_ms=20, max_request_size=16 << 20
    )
    held = []
    for i, value in enumerate(values):
        if i >= len(values) - partitions:
            held.append((i % partitions, value))
        else:
            fast.send(topic, value=value, partition=i % partitions)
    fast.flush(timeout=300)
    fast.close(timeout=10)
    single = producer(broker.bootstrap)
    for p, value in held:
        single.send(topic, value=value, partition=p)
    single.flush(timeout=60)
    single.close(timeout=5)


def run(scale: dict[str, Any]) -> BenchResult:
    import fastavro

    from ingest.kafka.devbroker import EmbeddedBroker
    from ingest.kafka.job import run_kafka_ingest
    from ingest.kafka.job_options import KafkaIngestOptions
    from metastore.catalog import Catalog
    from streampart.query import spark_session

    n, partitions, reps = scale["avro_records"], 4, scale["avro_reps"]
    batch = max(1, n // 4)
    result = BenchResult(
        name=NAME,
        title=f"Kafka ingest of {n:,} Avro records vs the same records as JSON",
        method=[
            f"Embedded Tansu broker; two topics of {partitions} partitions with the same {n:,} records "
            "(7 fields, ~1 KB as JSON): JSON objects in one, Avro datums of one writer schema "
            "(fastavro schemaless, timestamp-micros for ts) in the other; produced before any timing.",
            f"run_kafka_ingest, Trigger.AvailableNow, {batch:,} records a batch, into a fresh table with "
            "the same columns (a dead-letter table each); --format json vs --format avro --avro-schema.",
            f"Same SparkSession (local[2]); one warm-up of each, then {reps} round(s) alternating; medians; "
            "records/s = records / wall time.",
        ],
        baseline="the same records as JSON, same job, session and batches",
        params={"records": n, "partitions": partitions, "batch": batch, "reps": reps},
    )
    rng = random.Random(11)
    now = datetime.now(UTC)
    json_values = [make_value(rng, i, now) for i in range(n)]
    parsed = fastavro.parse_schema(SCHEMA)
    avro_values = []
    for value in json_values:
        record = json.loads(value)
        record["ts"] = datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        avro_values.append(out.getvalue())
    with workdir("avro") as tmp, EmbeddedBroker() as broker:
        schema_file = tmp / "event.avsc"
        schema_file.write_text(json.dumps(SCHEMA))
        catalog = Catalog.open(str(tmp / "wh"))
        suffix = uuid.uuid4().hex[:6]
        topics = {"json": f"j{suffix}", "avro": f"a{suffix}"}
        for fmt_name, values in (("json", json_values), ("avro", avro_values)):
            broker.create_topic(topics[fmt_name], partitions=partitions)
            produce(broker, topics[fmt_name], values, partitions)
        spark = spark_session()

        def ingest(fmt_name: str, k: int) -> float:
            name = f"{fmt_name}{k}.events"
            create_table(catalog, name)
            opts = KafkaIngestOptions(
                table=name,
                bootstrap=broker.bootstrap,
                topic=topics[fmt_name],
                format=fmt_name,
                avro_schema=str(schema_file) if fmt_name == "avro" else None,
                available_now=True,
                max_offsets_per_trigger=batch,
                checkpoint=str(Path(tmp) / f"ck-{fmt_name}{k}"),
            )
            t0 = time.perf_counter()
            run_kafka_ingest(spark, catalog, opts)
            return time.perf_counter() - t0

        console.print("  warm-up")
        ingest("avro", 0), ingest("json", 0)
        times: dict[str, list[float]] = {"avro": [], "json": []}
        for k in range(1, reps + 1):
            for fmt_name in ("avro", "json") if k % 2 else ("json", "avro"):
                times[fmt_name].append(ingest(fmt_name, k))
            console.print(f"  round {k}: avro {times['avro'][-1]:.1f} s, json {times['json'][-1]:.1f} s")
        rows = catalog.store.list_chunks(catalog.table(f"avro{reps}.events").id)
        result.notes.append(f"chunks of the last Avro round: {len(rows)}")
        spark.stop()
    result.metrics.append(
        Metric(
            "records/s", n / median(times["avro"]), "rec/s", n / median(times["json"]), higher_is_better=True
        )
    )
    for m in result.metrics:
        console.print(f"  {m.name}: {fmt(m.value)} {m.unit} vs {fmt(m.baseline)} → {fmt_ratio(m.ratio)}")
    return result

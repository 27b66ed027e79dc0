"""Benchmark: Kafka ingest of Avro, Protobuf and JSON Schema records against the same records as JSON.

The same records, ~1 KB each, go to four topics: as JSON objects; as Avro datums of one writer
schema (``--format avro --avro-schema``, fastavro's schemaless encoding); as Protobuf messages and
as JSON Schema records in the Confluent wire format (``--format protobuf|jsonschema
--schema-registry``, written by confluent-kafka's serializers against its in-memory registry, which
tests/registry.py serves over HTTP: no registry server is installable here). All are ingested by the
same job code in the same SparkSession, in the same batches, into fresh tables of the same columns.
Each ratio is a format's records/s over JSON's: JSON takes the Arrow fast path (Arrow's JSON reader
in C++), the others go record by record (their decoder, then the validator).
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


def event_class() -> Any:
    """``bench.Event``: the records' fields as a Protobuf message (ts a Timestamp), as protoc makes it."""
    from google.protobuf import (
        descriptor_pb2,
        descriptor_pool,
        message_factory,
        timestamp_pb2,  # noqa: F401 (its file in the pool)
    )

    pool = descriptor_pool.Default()
    try:
        return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Event"))
    except KeyError:
        pass
    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="bench/event.proto", package="bench", syntax="proto3")
    proto.dependency.append("google/protobuf/timestamp.proto")
    m = proto.message_type.add(name="Event")
    for number, (name, kind) in enumerate(
        [("id", f.TYPE_INT64), ("ts", f.TYPE_MESSAGE), ("user_id", f.TYPE_INT64), ("level", f.TYPE_STRING),
         ("amount", f.TYPE_DOUBLE), ("tags", f.TYPE_STRING), ("msg", f.TYPE_STRING)],
        start=1,
    ):  # fmt: skip
        typed = {"type_name": ".google.protobuf.Timestamp"} if kind == f.TYPE_MESSAGE else {}
        m.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL, **typed)
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Event"))


JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "ts": {"type": "string", "format": "date-time"},
        "user_id": {"type": "integer"},
        "level": {"type": "string"},
        "amount": {"type": "number"},
        "tags": {"type": "string"},
        "msg": {"type": "string"},
    },
    "required": ["id", "ts"],
}


def encode_all(json_values: list[bytes], registry: Any) -> dict[str, list[bytes]]:
    """The records in each format (the registry's ones registered there)."""
    import fastavro

    parsed = fastavro.parse_schema(SCHEMA)
    event, proto = event_class(), registry.protobuf_serializer(event_class())
    as_json_schema = registry.json_serializer(JSON_SCHEMA)
    out: dict[str, list[bytes]] = {"json": json_values, "avro": [], "protobuf": [], "jsonschema": []}
    for value in json_values:
        record = json.loads(value)
        out["jsonschema"].append(as_json_schema(record, "t"))
        record["ts"] = datetime.fromisoformat(record["ts"].replace("Z", "+00:00"))
        buffer = io.BytesIO()
        fastavro.schemaless_writer(buffer, parsed, record)
        out["avro"].append(buffer.getvalue())
        message = event(**{k: v for k, v in record.items() if k != "ts"})
        message.ts.FromDatetime(record["ts"])
        out["protobuf"].append(proto(message, "t"))
    return out


def run(scale: dict[str, Any]) -> BenchResult:

    from ingest.kafka.devbroker import EmbeddedBroker
    from ingest.kafka.job import run_kafka_ingest
    from ingest.kafka.job_options import KafkaIngestOptions
    from metastore.catalog import Catalog
    from streampart.query import spark_session

    n, partitions, reps = scale["avro_records"], 4, scale["avro_reps"]
    batch = max(1, n // 4)
    result = BenchResult(
        name=NAME,
        title=f"Kafka ingest of {n:,} Avro, Protobuf and JSON Schema records vs the same records as JSON",
        method=[
            f"Embedded Tansu broker; four topics of {partitions} partitions with the same {n:,} records "
            "(7 fields, ~1 KB as JSON): JSON objects; Avro datums of one writer schema (fastavro "
            "schemaless, timestamp-micros for ts); Protobuf messages (ts a Timestamp) and JSON Schema "
            "records in the Confluent wire format, written by confluent-kafka's serializers against "
            "its in-memory registry served over HTTP by tests/registry.py; produced before any timing.",
            f"run_kafka_ingest, Trigger.AvailableNow, {batch:,} records a batch, into a fresh table with "
            "the same columns (a dead-letter table each); --format json vs avro --avro-schema, "
            "protobuf and jsonschema --schema-registry.",
            f"Same SparkSession (local[2]); one warm-up of each, then {reps} round(s) alternating; medians; "
            "records/s = records / wall time.",
        ],
        baseline="the same records as JSON, same job, session and batches",
        params={"records": n, "partitions": partitions, "batch": batch, "reps": reps},
    )
    from tests.registry import TestRegistry

    rng = random.Random(11)
    now = datetime.now(UTC)
    registry = TestRegistry()
    formats = ("avro", "protobuf", "jsonschema", "json")
    with workdir("avro") as tmp, EmbeddedBroker() as broker:
        encoded = encode_all([make_value(rng, i, now) for i in range(n)], registry)
        schema_file = tmp / "event.avsc"
        schema_file.write_text(json.dumps(SCHEMA))
        catalog = Catalog.open(str(tmp / "wh"))
        suffix = uuid.uuid4().hex[:6]
        topics = {f: f"{f}{suffix}" for f in formats}
        for fmt_name, values in encoded.items():
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
                schema_registry=registry.url if fmt_name in ("protobuf", "jsonschema") else None,
                available_now=True,
                max_offsets_per_trigger=batch,
                checkpoint=str(Path(tmp) / f"ck-{fmt_name}{k}"),
            )
            t0 = time.perf_counter()
            run_kafka_ingest(spark, catalog, opts)
            return time.perf_counter() - t0

        console.print("  warm-up")
        for fmt_name in formats:
            ingest(fmt_name, 0)
        times: dict[str, list[float]] = {f: [] for f in formats}
        for k in range(1, reps + 1):
            for fmt_name in formats if k % 2 else tuple(reversed(formats)):
                times[fmt_name].append(ingest(fmt_name, k))
            console.print(f"  round {k}: " + ", ".join(f"{f} {times[f][-1]:.1f} s" for f in formats))
        for fmt_name in formats:
            table = catalog.table(f"{fmt_name}{reps}.events")
            rows = sum(c.rows for c in catalog.store.list_chunks(table.id))
            result.notes.append(f"rows landed by the last {fmt_name} round: {rows:,}")
        spark.stop()
    registry.close()
    for fmt_name in formats[:-1]:
        result.metrics.append(
            Metric(
                f"{fmt_name} records/s",
                n / median(times[fmt_name]),
                "rec/s",
                n / median(times["json"]),
                higher_is_better=True,
            )
        )
    for m in result.metrics:
        console.print(f"  {m.name}: {fmt(m.value)} {m.unit} vs {fmt(m.baseline)} → {fmt_ratio(m.ratio)}")
    return result

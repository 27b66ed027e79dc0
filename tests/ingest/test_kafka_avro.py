"""Kafka records in Avro (a writer schema in a file): decoded exactly, logical types included.

Records are written by fastavro's own writer (as an Avro producer does), read back from the table by
delta-rs, and compared with the values that were written.
"""

from __future__ import annotations

import io
import json
import uuid
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest

from ingest.config import KafkaConfig
from ingest.kafka.avro import AvroDecoder, AvroSchemaError, load_schema_file
from ingest.kafka.job import run_kafka_ingest
from ingest.kafka.job_options import KafkaIngestOptions
from metastore.models import TableKind
from tests.fixtures import make_table
from tests.helpers import delta_rows

SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "placed", "type": {"type": "int", "logicalType": "date"}},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "score", "type": "double"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "ok", "type": "boolean"},
        {"name": "ref", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "at", "type": {"type": "long", "logicalType": "time-micros"}},
        {"name": "extra", "type": "int"},  # no such column: ignored
    ],
}
DDL = (
    "id BIGINT, ts TIMESTAMP, placed DATE, amount DECIMAL(10,2), score DOUBLE, note STRING, ok BOOLEAN, "
    "ref STRING, at STRING"
)


def order(i: int) -> dict[str, Any]:
    return {
        "id": i,
        "ts": datetime(2026, 11, 21, 10, 15, 0, 123456 + i, tzinfo=UTC),
        "placed": date(2026, 11, 1 + i % 20),
        "amount": Decimal(f"{i}.{i % 100:02d}"),
        "score": i / 3,
        "note": None if i % 2 else f"n{i}",
        "ok": i % 3 == 0,
        "ref": uuid.UUID(int=i),
        "at": time(10, 15, i % 60, 5),
        "extra": 7,
    }


def encode(record: dict[str, Any], schema: dict = SCHEMA) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def test_values_decode_to_what_the_validator_takes_exactly(tmp_path: Path) -> None:
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(SCHEMA))
    decoder = AvroDecoder(load_schema_file(path))
    got = decoder.decode(encode(order(3)))
    assert got["ts"] == datetime(2026, 11, 21, 10, 15, 0, 123459, tzinfo=UTC)
    assert got["placed"] == date(2026, 11, 4) and got["amount"] == Decimal("3.03")
    assert got["ref"] == str(uuid.UUID(int=3)) and got["at"] == "10:15:03.000005"
    with pytest.raises(ValueError, match=r"the value ends before the record does \(5 bytes"):
        decoder.decode(encode(order(3))[:5])
    with pytest.raises(ValueError, match="1 bytes left after the record"):
        decoder.decode(encode(order(3)) + b"\x00")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ('"string"', "the top level must be a record schema"),
        ('{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}', "nope"),
    ],
)
def test_a_schema_file_that_cannot_work_is_one_error_naming_it(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "bad.avsc"
    path.write_text(text)
    with pytest.raises(AvroSchemaError, match=f"Avro schema {path}: .*{message}"):
        load_schema_file(path)
    with pytest.raises(ValueError, match=message):
        KafkaIngestOptions(table="ns.t", bootstrap="h:1", topic="t", format="avro", avro_schema=str(path))
    with pytest.raises(ValueError, match="--format avro takes one of --avro-schema FILE"):
        KafkaIngestOptions(table="ns.t", bootstrap="h:1", topic="t", format="avro")


@pytest.mark.spark
def test_avro_records_land_exactly_and_an_undecodable_one_is_a_dead_letter(
    spark, sqlite_catalog, kafka_broker, tmp_path
) -> None:
    u = uuid.uuid4().hex[:8]
    table = make_table(sqlite_catalog, f"av{u}.orders", schema=DDL, dead_letter=True)
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(SCHEMA))
    topic = f"avro-{u}"
    kafka_broker.create_topic(topic, partitions=2)
    records = [order(i) for i in range(20)]
    values: list[dict[str, Any]] = [{"value": encode(r), "partition": r["id"] % 2} for r in records]
    values.append({"value": encode(order(99))[:-3], "partition": 0})  # cut short
    kafka_broker.produce(topic, values)
    opts = KafkaIngestOptions(
        table=str(table.name),
        bootstrap=kafka_broker.bootstrap,
        topic=topic,
        format="avro",
        avro_schema=str(path),
        available_now=True,
        checkpoint=str(tmp_path / "ckpt"),
    )
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    rows = {
        r["id"]: r
        for r in delta_rows(table, columns="id, ts, placed, amount, score, note, ok, ref, at").to_pylist()
    }
    assert sorted(rows) == list(range(20))
    for r in records:
        got = rows[r["id"]]
        assert got["ts"] == r["ts"] and got["placed"] == r["placed"] and got["amount"] == r["amount"]
        assert got["score"] == r["score"] and got["note"] == r["note"] and got["ok"] == r["ok"]
        assert got["ref"] == str(r["ref"]) and got["at"] == r["at"].isoformat()
    dead = delta_rows(
        sqlite_catalog.companion(table, TableKind.DEAD_LETTER), columns="reason, raw"
    ).to_pylist()
    assert len(dead) == 1 and dead[0]["reason"].startswith("invalid Avro: ")
    assert dead[0]["raw"] == encode(order(99))[:-3]


# -- the Confluent wire format, schemas from a registry -----------------------------------------
V1 = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "page", "type": "string"},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "coupon", "type": ["null", "string"], "default": None}]}


def click(i: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": i,
        "ts": datetime(2026, 11, 21, 10, 15, 0, (i % 1000) * 1000, tzinfo=UTC),
        "page": f"/p{i}",
        **extra,
    }


def test_the_wire_format_decodes_with_each_records_schema_version(registry: Any) -> None:
    from ingest.errors import SchemaRegistryUnavailableError
    from ingest.kafka.registry import RegistryDecoder

    v1, v2 = registry.serializer(V1), registry.serializer(V2)
    decoder = RegistryDecoder(registry.url, "avro", ("ingest", "s3cret"), retry_s=0.01)
    assert decoder.decode(v1(click(1), "t")) == click(1)
    assert decoder.decode(v2(click(2, coupon="c2"), "t")) == click(2, coupon="c2")
    with pytest.raises(ValueError, match="schema id 4242 is not in the registry at http"):
        decoder.decode(b"\x00" + (4242).to_bytes(4, "big") + b"\x02")
    with pytest.raises(ValueError, match=r"not in the Confluent wire format .* starts 7b226964"):
        decoder.decode(b'{"id": 1}')
    registry.failures = 2  # an outage of two answers: ridden out
    assert decoder.decode(v2(click(3), "t2")) == click(3, coupon=None)
    wrong = RegistryDecoder(registry.url, "avro", ("ingest", "nope"), retry_s=0.01)
    with pytest.raises(SchemaRegistryUnavailableError, match=r"refused the credentials \(401\)"):
        wrong.decode(b"\x00" + (7).to_bytes(4, "big"))
    registry.failures = 100
    with pytest.raises(
        SchemaRegistryUnavailableError, match=r"did not answer for schema id 9 after 8 attempts \(HTTP 503\)"
    ):
        RegistryDecoder(registry.url, "avro", ("ingest", "s3cret"), retry_s=0.001).decode(
            b"\x00" + (9).to_bytes(4, "big")
        )


def test_registry_credentials_never_go_in_the_url() -> None:
    base = {"table": "ns.t", "bootstrap": "h:1", "topic": "t", "format": "avro"}
    with pytest.raises(ValueError, match="no credentials in the URL"):
        KafkaIngestOptions(**base, schema_registry="http://user:pw@registry:8081")
    with pytest.raises(ValueError, match=r"takes an http\(s\) URL"):
        KafkaIngestOptions(**base, schema_registry="registry:8081")
    kafka = KafkaConfig(schema_registry_user="u", schema_registry_password="pw-s3cret")
    opts = KafkaIngestOptions(**base, schema_registry="http://registry:8081", kafka=kafka)
    assert opts.record_schemas().auth == ("u", "pw-s3cret")  # type: ignore[union-attr]
    assert "pw-s3cret" not in repr(opts.record_schemas()) and "pw-s3cret" not in repr(opts)


@pytest.mark.spark
def test_registry_records_land_and_a_new_version_adds_its_column(
    spark, sqlite_catalog, kafka_broker, registry, tmp_path, monkeypatch
) -> None:
    """Records of two schema versions (the second adds a field) and one of an id the registry lacks,
    while the registry is down for a moment; the credentials come from the settings (the environment)."""
    from streampart.config import load_settings

    monkeypatch.setenv("STREAMPART_KAFKA__SCHEMA_REGISTRY_USER", "ingest")
    monkeypatch.setenv("STREAMPART_KAFKA__SCHEMA_REGISTRY_PASSWORD", "s3cret")
    u = uuid.uuid4().hex[:8]
    table = make_table(
        sqlite_catalog, f"sr{u}.clicks", schema="id BIGINT, ts TIMESTAMP, page STRING", dead_letter=True
    )
    table = sqlite_catalog.schemas.set_evolution(table, "add-columns")
    topic = f"clicks-{u}"
    kafka_broker.create_topic(topic, partitions=2)
    v1, v2 = registry.serializer(V1), registry.serializer(V2)
    values: list[dict[str, Any]] = [{"value": v1(click(i), topic), "partition": i % 2} for i in range(10)]
    values += [{"value": v2(click(i, coupon=f"c{i}"), topic), "partition": i % 2} for i in range(10, 20)]
    unknown = b"\x00" + (4242).to_bytes(4, "big") + b"\x02"
    values.append({"value": unknown, "partition": 0})
    kafka_broker.produce(topic, values)
    registry.failures = 2
    opts = KafkaIngestOptions(
        table=str(table.name),
        bootstrap=kafka_broker.bootstrap,
        topic=topic,
        format="avro",
        schema_registry=registry.url,
        kafka=load_settings().kafka,
        available_now=True,
        checkpoint=str(tmp_path / "ckpt"),
    )
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
    rows = {r["id"]: r for r in delta_rows(table, columns="id, ts, page, coupon").to_pylist()}
    assert sorted(rows) == list(range(20))
    for i in range(20):
        assert rows[i]["ts"] == click(i)["ts"] and rows[i]["page"] == f"/p{i}"
        assert rows[i]["coupon"] == (None if i < 10 else f"c{i}")
    dead = delta_rows(
        sqlite_catalog.companion(table, TableKind.DEAD_LETTER), columns="reason, raw"
    ).to_pylist()
    assert [d["raw"] for d in dead] == [unknown]
    assert dead[0]["reason"] == f"invalid Avro: schema id 4242 is not in the registry at {registry.url}"


def test_a_registry_outage_fails_the_batch_instead_of_dead_lettering_its_records() -> None:
    from ingest.errors import SchemaRegistryUnavailableError
    from ingest.kafka.staging import parse_value
    from ingest.records import RecordValidator
    from metastore.models import Column

    v = RecordValidator([Column(name="id", type="long")], [], 1 << 20)

    def down(value: bytes) -> dict[str, Any]:
        raise SchemaRegistryUnavailableError("the Schema Registry at http://r did not answer")

    def broken(value: bytes) -> dict[str, Any]:
        raise ValueError("the value ends before the record does")

    with pytest.raises(SchemaRegistryUnavailableError):
        parse_value(v, "avro", 0, b"\x00\x00\x00\x00\x01", down)
    assert parse_value(v, "avro", 1, b"\x00", broken) == "invalid Avro: the value ends before the record does"

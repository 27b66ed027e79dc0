"""Kafka records in Protobuf and JSON Schema from a Schema Registry: decoded exactly, bad ones dead letters.

Records are written by confluent-kafka's own ``ProtobufSerializer`` and ``JSONSerializer`` (as a
producer does) against its in-memory registry, which tests/registry.py serves over HTTP (no
registry server is installable here); the table is read back by delta-rs.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from ingest.config import KafkaConfig
from ingest.kafka.job import run_kafka_ingest
from ingest.kafka.job_options import KafkaIngestOptions
from ingest.kafka.registry import RegistryDecoder
from metastore.models import TableKind
from tests.fixtures import make_table
from tests.helpers import delta_rows

TS = datetime(2026, 11, 21, 10, 15, 0, 123456, tzinfo=UTC)


def _message_classes() -> tuple[Any, Any]:
    """``shop.Click`` (the second message of its file, importing a file of its own, Timestamp and
    Confluent's Decimal) and ``shop.Money`` of the imported file, built as protoc's output would be."""
    from confluent_kafka.schema_registry.confluent.type import decimal_pb2  # noqa: F401 (in the pool)
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2  # noqa: F401

    pool = descriptor_pool.Default()
    f = descriptor_pb2.FieldDescriptorProto
    try:
        pool.FindFileByName("shop/click.proto")
    except KeyError:
        common = descriptor_pb2.FileDescriptorProto(name="shop/money.proto", package="shop", syntax="proto3")
        money = common.message_type.add(name="Money")
        money.field.add(name="currency", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
        money.field.add(name="cents", number=2, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
        pool.Add(common)
        click = descriptor_pb2.FileDescriptorProto(name="shop/click.proto", package="shop", syntax="proto3")
        click.dependency.extend(
            ["shop/money.proto", "google/protobuf/timestamp.proto", "confluent/type/decimal.proto"]
        )
        click.message_type.add(name="Other").field.add(
            name="x", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL
        )
        m = click.message_type.add(name="Click")
        kind = m.enum_type.add(name="Kind")
        kind.value.add(name="VIEW", number=0)
        kind.value.add(name="BUY", number=1)
        inner = m.nested_type.add(name="Inner")
        inner.field.add(name="depth", number=1, type=f.TYPE_INT32, label=f.LABEL_OPTIONAL)
        m.oneof_decl.add(name="_coupon")
        for name, number, kind_, type_name, label, extra in (
            ("id", 1, f.TYPE_INT64, "", f.LABEL_OPTIONAL, {}),
            ("ts", 2, f.TYPE_MESSAGE, ".google.protobuf.Timestamp", f.LABEL_OPTIONAL, {}),
            ("page", 3, f.TYPE_STRING, "", f.LABEL_OPTIONAL, {}),
            ("price", 4, f.TYPE_MESSAGE, ".confluent.type.Decimal", f.LABEL_OPTIONAL, {}),
            ("kind", 5, f.TYPE_ENUM, ".shop.Click.Kind", f.LABEL_OPTIONAL, {}),
            ("tags", 6, f.TYPE_STRING, "", f.LABEL_REPEATED, {}),
            ("coupon", 7, f.TYPE_STRING, "", f.LABEL_OPTIONAL, {"oneof_index": 0, "proto3_optional": True}),
            ("inner", 8, f.TYPE_MESSAGE, ".shop.Click.Inner", f.LABEL_OPTIONAL, {}),
            ("paid", 9, f.TYPE_MESSAGE, ".shop.Money", f.LABEL_OPTIONAL, {}),
        ):
            typed = {"type_name": type_name} if type_name else {}
            m.field.add(name=name, number=number, type=kind_, label=label, **typed, **extra)
        pool.Add(click)
    get = message_factory.GetMessageClass
    return get(pool.FindMessageTypeByName("shop.Click")), get(pool.FindMessageTypeByName("shop.Money"))


def _click(cls: Any, i: int, coupon: str | None = None) -> Any:
    from confluent_kafka.schema_registry.common.protobuf import decimal_to_protobuf

    message = cls(id=i, page=f"/p{i}", kind=i % 2, tags=[f"t{i}", "x"])
    message.ts.FromDatetime(TS.replace(microsecond=i))
    message.price.CopyFrom(decimal_to_protobuf(Decimal(f"-{i}.05"), 2))
    message.paid.currency, message.paid.cents = "EUR", 100 * i
    if coupon is not None:
        message.coupon = coupon
    if i % 2:
        message.inner.depth = i
    return message


def test_protobuf_messages_decode_exactly_through_their_registered_descriptors(registry: Any) -> None:
    click, _ = _message_classes()
    serialize = registry.protobuf_serializer(click)
    decoder = RegistryDecoder(registry.url, "protobuf", ("ingest", "s3cret"), retry_s=0.01)
    assert decoder.decode(serialize(_click(click, 3, coupon="c3"), "t")) == {
        "id": 3,
        "ts": TS.replace(microsecond=3),
        "page": "/p3",
        "price": Decimal("-3.05"),
        "kind": "BUY",
        "tags": ["t3", "x"],
        "coupon": "c3",
        "inner": {"depth": 3},
        "paid": {"currency": "EUR", "cents": 300},
    }
    two = decoder.decode(serialize(_click(click, 2), "t"))
    assert two["coupon"] is None and two["inner"] is None and two["kind"] == "VIEW"  # unset: null
    assert any("/subjects/" in r for r in registry.requests)  # the imported file, by its reference
    good = serialize(_click(click, 1), "t")
    with pytest.raises(ValueError, match=r"not a shop\.Click message"):
        decoder.decode(good[:-3] + b"\xff\xff\xff")
    with pytest.raises(ValueError, match=r"has no message at indexes \[7\]"):
        decoder.decode(good[:5] + b"\x02\x0e" + good[7:])  # one index, 7 (zigzag 14)
    avro = registry.serializer({"type": "record", "name": "A", "fields": [{"name": "id", "type": "long"}]})
    with pytest.raises(ValueError, match="is a AVRO schema, not PROTOBUF"):
        decoder.decode(avro({"id": 1}, "t"))


CLICK_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Click",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "ts": {"type": "string", "format": "date-time"},
        "page": {"type": "string"},
        "coupon": {"type": ["string", "null"]},
    },
    "required": ["id", "ts"],
}


def test_json_schema_records_are_validated_against_their_schema(registry: Any) -> None:
    serialize = registry.json_serializer(CLICK_SCHEMA)
    decoder = RegistryDecoder(registry.url, "jsonschema", ("ingest", "s3cret"), retry_s=0.01)
    record = {"id": 1, "ts": "2026-11-21T10:15:00.000001Z", "page": "/p1", "coupon": None}
    value = serialize(record, "t")
    assert decoder.decode(value) == record
    with pytest.raises(ValueError, match=r'does not match schema id .* at id: "x" is not of type "integer"'):
        decoder.decode(value[:5] + json.dumps({**record, "id": "x"}).encode())
    with pytest.raises(ValueError, match="invalid JSON"):
        decoder.decode(value[:5] + b"{nope")


@pytest.mark.spark
def test_protobuf_and_json_schema_records_land_and_bad_ones_are_dead_letters(
    spark, sqlite_catalog, kafka_broker, registry, tmp_path
) -> None:
    u = uuid.uuid4().hex[:8]
    click, _ = _message_classes()
    proto = registry.protobuf_serializer(click)
    as_json = registry.json_serializer(CLICK_SCHEMA)
    cases = {
        "protobuf": (
            "id BIGINT, ts TIMESTAMP, page STRING, price DECIMAL(10,2), kind STRING, coupon STRING",
            [proto(_click(click, i, coupon=f"c{i}" if i % 3 else None), "t") for i in range(12)],
        ),
        "jsonschema": (
            "id BIGINT, ts TIMESTAMP, page STRING, coupon STRING",
            [
                as_json({"id": i, "ts": TS.replace(microsecond=i).isoformat(), "page": f"/p{i}"}, "t")
                for i in range(12)
            ],
        ),
    }
    for fmt, (schema, values) in cases.items():
        table = make_table(sqlite_catalog, f"pb{u}.{fmt}", schema=schema, dead_letter=True)
        topic = f"{fmt}-{u}"
        kafka_broker.create_topic(topic, partitions=1)
        bad = values[0][:5] + b"\x00\xff\xff"  # a known schema id, then garbage
        kafka_broker.produce(topic, [*values, bad])
        opts = KafkaIngestOptions(
            table=str(table.name),
            bootstrap=kafka_broker.bootstrap,
            topic=topic,
            format=fmt,
            schema_registry=registry.url,
            kafka=KafkaConfig(schema_registry_user="ingest", schema_registry_password="s3cret"),
            available_now=True,
            checkpoint=str(tmp_path / f"ckpt-{fmt}"),
        )
        assert run_kafka_ingest(spark, sqlite_catalog, opts) == 1
        rows = {r["id"]: r for r in delta_rows(table, columns="*").to_pylist()}
        assert sorted(rows) == list(range(12)), fmt
        for i, row in rows.items():
            assert row["ts"] == TS.replace(microsecond=i) and row["page"] == f"/p{i}", (fmt, row)
        if fmt == "protobuf":
            assert [rows[i]["price"] for i in range(3)] == [
                Decimal("-0.05"),
                Decimal("-1.05"),
                Decimal("-2.05"),
            ]
            assert [rows[i]["kind"] for i in range(2)] == ["VIEW", "BUY"]
            assert [rows[i]["coupon"] for i in range(3)] == [None, "c1", "c2"]
        dead = delta_rows(
            sqlite_catalog.companion(table, TableKind.DEAD_LETTER), columns="reason, raw"
        ).to_pylist()
        assert [d["raw"] for d in dead] == [bad], fmt
        expected = "invalid Protobuf: " if fmt == "protobuf" else "invalid JSON Schema record: invalid UTF-8"
        assert dead[0]["reason"].startswith(expected), dead

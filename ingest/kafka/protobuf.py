"""Kafka records in Protobuf, their schemas from a Schema Registry (:mod:`ingest.kafka.registry`).

The registry gives a schema as its serialized file descriptor (``?format=serialized``, base64), with
the files it imports as references (subject and version), fetched the same way. The well-known
files a schema may import without a reference — ``google/protobuf/*``, ``google/type/*`` and
Confluent's ``confluent/type/decimal.proto`` — are in every pool. The payload starts with the message
indexes (zigzag varints: how many, then the path to the message among the file's messages and their
nested ones; a lone 0 is the file's first message), then the message's bytes.

A message becomes a dict of its fields by name, which the validator checks against the table's
columns like a JSON object: scalars as they are (64-bit integers exactly), an enum its value's
name, ``google.protobuf.Timestamp`` an aware UTC datetime, ``google.type.Date`` a date,
``confluent.type.Decimal`` a Decimal of its scale, a wrapper (``Int64Value``…) its value, another
message a dict, repeated fields lists, maps dicts. A field with presence (a message, ``optional``, a
oneof member) that is not set is null; a proto3 scalar without presence is its default (0, "").
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import UTC, date
from decimal import Context, Decimal
from typing import Any

_WRAPPERS = {
    f"google.protobuf.{n}Value"
    for n in ("Double", "Float", "Int64", "UInt64", "Int32", "UInt32", "Bool", "String", "Bytes")
}
# exact whatever the unscaled value's width (the default context rounds to 28 digits)
_EXACT = Context(prec=1000, Emax=10**6, Emin=-(10**6))


def protobuf_reader(schema_id: int, schema: Any, registry: Any) -> Callable[[bytes], dict[str, Any]]:
    """A reader of the payloads written with ``schema`` (the registry's schema ``schema_id``, a
    :class:`~ingest.kafka.registry.RegistrySchema`; ``registry`` its
    :class:`~ingest.kafka.registry.SchemaRegistry`, asked for the files it references)."""
    from google.protobuf import descriptor_pool, message_factory

    pool = descriptor_pool.DescriptorPool()
    _well_known(pool)
    added: set[str] = set()
    for name, subject, version in schema.references:
        _add_reference(pool, registry, name, subject, version, added)
    name = f"streampart/registry/{schema_id}.proto"
    proto = _file(schema_id, schema.text, name)
    try:
        pool.Add(proto)
        file = pool.FindFileByName(name)
    except Exception as exc:  # TypeError / KeyError: an import the pool lacks, a bad descriptor
        raise ValueError(f"schema id {schema_id} cannot be loaded: {exc}") from None
    classes: dict[tuple[int, ...], Any] = {}

    def read(payload: bytes) -> dict[str, Any]:
        indexes, at = _message_indexes(payload)
        cls = classes.get(indexes)
        if cls is None:
            desc = _message(file, [m.name for m in proto.message_type], indexes, schema_id)
            cls = classes[indexes] = message_factory.GetMessageClass(desc)
        message = cls()
        try:
            message.ParseFromString(payload[at:])
        except Exception as exc:  # DecodeError, and a few others for garbage
            raise ValueError(f"not a {message.DESCRIPTOR.full_name} message: {exc}") from None
        return _record(message)

    return read


def _file(schema_id: int, text: str, name: str) -> Any:
    from google.protobuf import descriptor_pb2

    try:
        proto = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(text, validate=True))
    except Exception:
        raise ValueError(
            f"schema id {schema_id}: the registry gave no serialized descriptor (it should answer "
            "?format=serialized with one, as Confluent's does)"
        ) from None
    proto.name = name
    return proto


def _add_reference(pool: Any, registry: Any, name: str, subject: str, version: int, added: set[str]) -> None:
    if name in added or _is_well_known(name):
        return
    ref = registry.version(subject, version)
    for inner_name, inner_subject, inner_version in ref.references:
        _add_reference(pool, registry, inner_name, inner_subject, inner_version, added)
    proto = _file(0, ref.text, name)
    pool.Add(proto)
    added.add(name)


def _is_well_known(name: str) -> bool:
    return name.startswith(("google/protobuf/", "google/type/", "confluent/"))


def _well_known(pool: Any) -> None:
    from google.protobuf import (
        any_pb2,
        descriptor_pb2,
        duration_pb2,
        empty_pb2,
        field_mask_pb2,
        struct_pb2,
        timestamp_pb2,
        wrappers_pb2,
    )
    from google.type import date_pb2, datetime_pb2, dayofweek_pb2, latlng_pb2, money_pb2, timeofday_pb2

    for module in (
        any_pb2, descriptor_pb2, duration_pb2, empty_pb2, field_mask_pb2, struct_pb2, timestamp_pb2,
        wrappers_pb2, date_pb2, datetime_pb2, dayofweek_pb2, latlng_pb2, money_pb2, timeofday_pb2,
    ):  # fmt: skip
        pool.AddSerializedFile(module.DESCRIPTOR.serialized_pb)
    pool.Add(_confluent_decimal())


def _confluent_decimal() -> Any:
    """``confluent/type/decimal.proto``: ``message Decimal { bytes value = 1; uint32 precision = 2;
    int32 scale = 3; }`` (the unscaled value big-endian in two's complement)."""
    from google.protobuf import descriptor_pb2

    f = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="confluent/type/decimal.proto", package="confluent.type", syntax="proto3"
    )
    message = proto.message_type.add(name="Decimal")
    for name, number, kind in (
        ("value", 1, f.TYPE_BYTES),
        ("precision", 2, f.TYPE_UINT32),
        ("scale", 3, f.TYPE_INT32),
    ):
        message.field.add(name=name, number=number, type=kind, label=f.LABEL_OPTIONAL, json_name=name)
    return proto


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """A zigzag varint at ``at``: (its value, the next position)."""
    shift = result = 0
    while True:
        if at >= len(data):
            raise ValueError("the message indexes end early (not in the Confluent Protobuf wire format?)")
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
        if shift > 63:
            raise ValueError("a message index is no varint")


def _message_indexes(payload: bytes) -> tuple[tuple[int, ...], int]:
    count, at = _varint(payload, 0)
    if count == 0:
        return (0,), at
    if not 0 < count <= 100:
        raise ValueError(f"{count} message indexes (not in the Confluent Protobuf wire format?)")
    indexes = []
    for _ in range(count):
        index, at = _varint(payload, at)
        indexes.append(index)
    return tuple(indexes), at


def _message(file: Any, names: list[str], indexes: tuple[int, ...], schema_id: int) -> Any:
    """The message the indexes point at: among the file's messages (``names``, in declaration order),
    then among the nested ones of each."""
    found: Any = None
    for index in indexes:
        types = [file.message_types_by_name[n] for n in names] if found is None else list(found.nested_types)
        if not 0 <= index < len(types):
            raise ValueError(f"schema id {schema_id} has no message at indexes {list(indexes)}")
        found = types[index]
    return found


def _record(message: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        repeated = getattr(fd, "is_repeated", None)  # newer protobuf; older ones have only ``label``
        if repeated if repeated is not None else fd.label == fd.LABEL_REPEATED:
            entry = fd.message_type
            if entry is not None and entry.GetOptions().map_entry:
                out[fd.name] = {k: _value(entry.fields_by_name["value"], v) for k, v in value.items()}
            else:
                out[fd.name] = [_value(fd, v) for v in value]
        elif fd.has_presence and not message.HasField(fd.name):
            out[fd.name] = None
        else:
            out[fd.name] = _value(fd, value)
    return out


def _value(fd: Any, value: Any) -> Any:
    if fd.type == fd.TYPE_ENUM:
        known = fd.enum_type.values_by_number.get(value)
        return known.name if known is not None else value
    if fd.type != fd.TYPE_MESSAGE:
        return value
    name = fd.message_type.full_name
    if name == "google.protobuf.Timestamp":
        return value.ToDatetime(tzinfo=UTC)
    if name in _WRAPPERS:
        return value.value
    if name == "google.type.Date":
        return date(value.year, value.month, value.day)
    if name == "confluent.type.Decimal":
        unscaled = int.from_bytes(value.value, "big", signed=True)
        return _EXACT.scaleb(Decimal(unscaled), -value.scale)
    return _record(value)

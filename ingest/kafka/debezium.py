"""Debezium change events as a keyed table's records (``--format debezium``).

A change event (JSON, with or without the JSON converter's ``schema``/``payload`` envelope, or Avro
through the Schema Registry) becomes one record of the table:

- ``op`` ``c`` (create), ``r`` (snapshot read), ``u`` (update): the ``after`` row, an upsert;
- ``op`` ``d`` (delete): the ``before`` row (at least its key: the source table's replica identity
  must include it), a delete;
- ``op`` ``t`` (truncate) is not applied: it would delete every key of the table, which one event in
  a stream cannot do exactly; it is a bad record (the dead-letter table's), naming why;
- a record whose value is null (a Kafka tombstone, sent after a delete for log compaction) is
  skipped: the delete before it carried the change.

The table's op column (it needs one) gets the event's op (mapped to the table's first upsert or
delete value if the table names its ops otherwise). A table whose ``--sequence-by`` column is not
a field of the row takes it from the event's ``source`` block, then from the event itself: ``lsn``
(PostgreSQL), ``pos`` (a MySQL binlog position), ``ts_ms`` — so out-of-order events still resolve to
the newest change. Fields the row holds that the table lacks follow the table's
``--schema-evolution``. Debezium's integer time types (``Timestamp``, ``MicroTimestamp``,
``NanoTimestamp``, ``Date``) are read as the instants they are, by their Connect names: from the JSON
envelope's schema here, from an Avro writer schema's ``connect.name`` as it is decoded
(:func:`connect_times`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from metastore.models import Keys

SKIPPED = "\0skipped"  # parse_value's answer for a record that is no bad record but holds no row

_TIME_TYPES = {
    "io.debezium.time.Timestamp": 1_000,
    "io.debezium.time.MicroTimestamp": 1_000_000,
    "io.debezium.time.NanoTimestamp": 1_000_000_000,
    "org.apache.kafka.connect.data.Timestamp": 1_000,
}
_DATE_TYPES = {"io.debezium.time.Date", "org.apache.kafka.connect.data.Date"}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class NotAChange(ValueError):
    """The event cannot become a record: the reason, for the dead-letter table."""


def change_record(event: Any, keys: Keys, time_column: str | None = None) -> dict[str, Any] | None:
    """The table record of one Debezium ``event`` (a decoded value); None: nothing to apply.

    A delete's ``before`` row holds what the source table's replica identity logs: by default its
    key only. The table's ``time_column`` (never null) is then the change's time: the ``source``
    block's ``ts_ms`` (when the database made it), else the event's (when the connector read it),
    else now.

    Raises:
        NotAChange: naming what is wrong with the event.
    """
    if not isinstance(event, dict):
        raise NotAChange(
            f"a Debezium change event is a JSON object or an Avro record, not {type(event).__name__}"
        )
    schema = None
    if "payload" in event and "schema" in event:  # the JSON converter's envelope
        schema, event = event["schema"], event["payload"]
        if event is None:
            return None
        if not isinstance(event, dict):
            raise NotAChange("the envelope's payload is not an object")
    op = event.get("op")
    if op is None:
        raise NotAChange("not a Debezium change event: it has no 'op'")
    if op == "t":
        raise NotAChange(
            "a truncate event (op 't') is not applied: it would delete every key; delete the rows with "
            "streampart table delete, or recreate the table"
        )
    if op in ("c", "r", "u"):
        side, upsert = "after", True
    elif op == "d":
        side, upsert = "before", False
    else:
        raise NotAChange(f"op {op!r} is none of Debezium's c, r, u, d, t")
    row = event.get(side)
    if not isinstance(row, dict):
        why = " (the source table's replica identity must hold the key)" if side == "before" else ""
        raise NotAChange(f"a change event with op {op!r} has no '{side}' row{why}")
    record = dict(row)
    if schema is not None:
        _read_times(record, _field_schema(schema, side))
    assert keys.op_column is not None
    ops = keys.upsert_ops if upsert else keys.delete_ops
    record[keys.op_column] = op if op in ops else ops[0]
    if not upsert and time_column is not None and record.get(time_column) is None:
        record[time_column] = _change_time(event)
    seq = keys.sequence_by
    if seq is not None and record.get(seq) is None:
        source = event.get("source")
        value = source.get(seq) if isinstance(source, dict) else None
        if value is None:
            value = event.get(seq)
        if value is not None:
            record[seq] = value
    return record


def _change_time(event: dict[str, Any]) -> datetime:
    source = event.get("source")
    for ms in (source.get("ts_ms") if isinstance(source, dict) else None, event.get("ts_ms")):
        if isinstance(ms, int) and not isinstance(ms, bool):
            return _EPOCH + timedelta(milliseconds=ms)
    return datetime.now(UTC)


def _field_schema(schema: Any, name: str) -> dict[str, Any]:
    """The Connect schema of field ``name`` of the envelope's struct (empty if it has none)."""
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and f.get("field") == name:
            return f
    return {}


def _read_times(record: dict[str, Any], schema: dict[str, Any]) -> None:
    """Debezium's integer time values of ``record`` as instants, by their Connect schema's names."""
    for f in schema.get("fields", []):
        name = f.get("field")
        if name in record:
            record[name] = connect_time(f.get("name"), record[name])


def connect_time(kind: str | None, value: Any) -> Any:
    """``value`` as the instant (or date) it is if ``kind`` names a Connect time type and it is an
    integer; else ``value`` itself."""
    if not isinstance(value, int) or isinstance(value, bool):
        return value
    if kind in _TIME_TYPES:
        return _EPOCH + timedelta(microseconds=value * 1_000_000 // _TIME_TYPES[kind])
    if kind in _DATE_TYPES:
        return (_EPOCH + timedelta(days=value)).date()
    return value


def connect_times(schema: Any, named: dict[str, Any] | None = None) -> Callable[[Any], Any] | None:
    """For an Avro schema (its JSON), a function turning the integers of a decoded datum whose type's
    ``connect.name`` is a Connect time type into instants (records, unions and references to named
    records followed); None: the schema has none. ``named``: the records defined so far, by name."""
    named = {} if named is None else named
    if isinstance(schema, str):  # a primitive, or a record defined before
        return named.get(schema)
    if isinstance(schema, list):  # a union: each branch's conversion applies only to its own kind
        branches = [c for c in (connect_times(s, named) for s in schema) if c is not None]
        if not branches:
            return None

        def union(value: Any) -> Any:
            for convert in branches:
                value = convert(value)
            return value

        return union
    if not isinstance(schema, dict):
        return None
    kind = schema.get("connect.name")
    if schema.get("type") in ("int", "long") and (kind in _TIME_TYPES or kind in _DATE_TYPES):
        return lambda value: connect_time(kind, value)
    if schema.get("type") != "record":
        if isinstance(schema.get("type"), dict | list):  # {"type": {...}}: a nested type
            return connect_times(schema["type"], named)
        return None
    fields = [
        (f.get("name"), connect_times(f.get("type"), named))
        for f in schema.get("fields", [])
        if isinstance(f, dict)
    ]
    found = [(name, c) for name, c in fields if c is not None]

    def record(value: Any) -> Any:
        if isinstance(value, dict):
            for name, convert in found:
                if name in value:
                    value[name] = convert(value[name])
        return value

    convert = record if found else None
    name, namespace = schema.get("name"), schema.get("namespace")
    if isinstance(name, str):  # referred to later by its name, or its full name
        named[name] = convert
        if isinstance(namespace, str) and "." not in name:
            named[f"{namespace}.{name}"] = convert
    return convert

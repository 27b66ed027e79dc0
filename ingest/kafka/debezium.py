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
``--schema-evolution``. With the JSON envelope, Debezium's integer time types (``Timestamp``,
``MicroTimestamp``, ``NanoTimestamp``, ``Date``) are read as the instants they are.
"""

from __future__ import annotations

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


def change_record(event: Any, keys: Keys) -> dict[str, Any] | None:
    """The table record of one Debezium ``event`` (a decoded value); None: nothing to apply.

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
    seq = keys.sequence_by
    if seq is not None and record.get(seq) is None:
        source = event.get("source")
        value = source.get(seq) if isinstance(source, dict) else None
        if value is None:
            value = event.get(seq)
        if value is not None:
            record[seq] = value
    return record


def _field_schema(schema: Any, name: str) -> dict[str, Any]:
    """The Connect schema of field ``name`` of the envelope's struct (empty if it has none)."""
    for f in schema.get("fields", []) if isinstance(schema, dict) else []:
        if isinstance(f, dict) and f.get("field") == name:
            return f
    return {}


def _read_times(record: dict[str, Any], schema: dict[str, Any]) -> None:
    """Debezium's integer time values of ``record`` as instants, by their Connect schema's names."""
    for f in schema.get("fields", []):
        name, kind = f.get("field"), f.get("name")
        value = record.get(name)
        if not isinstance(value, int) or isinstance(value, bool):
            continue
        if kind in _TIME_TYPES:
            per_second = _TIME_TYPES[kind]
            record[name] = _EPOCH + timedelta(microseconds=value * 1_000_000 // per_second)
        elif kind in _DATE_TYPES:
            record[name] = (_EPOCH + timedelta(days=value)).date()

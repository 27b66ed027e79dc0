"""Kafka records in Avro: each value one datum in the binary encoding of a writer schema.

Two ways to know the writer schema. A Schema Registry (``--format avro --schema-registry URL``):
each value is in the Confluent wire format, its schema fetched by id (:mod:`ingest.kafka.registry`,
which decodes the datum here).

Plain Avro (``--format avro --avro-schema FILE``): every record of the job was written with the
schema in the file (``.avsc``, a record schema), without a header, as ``fastavro.schemaless_writer``
or Avro's ``BinaryEncoder`` write it. :class:`AvroDecoder` turns a value into a dict of the record's
fields, which the row-wise validator (:class:`ingest.records.RecordValidator`) checks against the
table's columns by name, like a JSON object's. Logical types arrive as Python values the validator
takes exactly: ``timestamp-millis``/``-micros`` an aware UTC datetime (``local-timestamp-*``: taken
as UTC), ``date`` a date, ``decimal`` a Decimal of the schema's scale; ``uuid`` and ``time-*`` become
their ISO text (there is no TIME column type). Integers that Kafka Connect names as times in the
schema (``connect.name``: Debezium's ``MicroTimestamp``, ``Timestamp``, ``Date``…, as its Avro
converter writes them without a logical type) become the instants they are
(:func:`ingest.kafka.debezium.connect_times`). Spark's Python workers decode: fastavro loads only
when a task meets an Avro batch.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from datetime import time
from pathlib import Path
from typing import Any


class AvroSchemaError(ValueError):
    """A schema file that cannot be used; the message names the file and the fault."""


def load_schema_file(path: str | Path) -> str:
    """The schema in ``path`` checked (a record schema fastavro parses), as compact JSON text."""
    import fastavro

    try:
        schema = json.loads(Path(path).read_text())
    except OSError as exc:
        raise AvroSchemaError(f"Avro schema {path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise AvroSchemaError(f"Avro schema {path}: not JSON: {exc}") from None
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise AvroSchemaError(f'Avro schema {path}: the top level must be a record schema ("type": "record")')
    try:
        fastavro.parse_schema(schema)
    except Exception as exc:  # fastavro raises several kinds for a bad schema
        raise AvroSchemaError(f"Avro schema {path}: {exc}") from None
    return json.dumps(schema, separators=(",", ":"))


class AvroDecoder:
    """Decodes values written with one schema (its JSON text)."""

    def __init__(self, schema_text: str) -> None:
        import fastavro

        from ingest.kafka.debezium import connect_times

        self._read = fastavro.schemaless_reader
        raw = json.loads(schema_text)
        self.schema = fastavro.parse_schema(raw)
        self._times = connect_times(raw)

    def decode(self, value: bytes) -> dict[str, Any]:
        """The record ``value`` holds. Raises ValueError saying why it is not one."""
        record = _decode(self._read, self.schema, value)
        return self._times(record) if self._times is not None else record


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID | time):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    return value


def _decode(read: Any, schema: Any, datum: bytes) -> dict[str, Any]:
    buffer = io.BytesIO(datum)
    try:
        record = read(buffer, schema, None)
    except (EOFError, IndexError, struct.error):  # fastavro reads past the end of a short value
        raise ValueError(
            f"the value ends before the record does ({len(datum)} bytes; cut short, or another schema?)"
        ) from None
    except Exception as exc:  # a bad union index, invalid UTF-8…
        raise ValueError(f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__) from None
    left = len(datum) - buffer.tell()
    if left:
        raise ValueError(f"{left} bytes left after the record (another schema?)")
    if not isinstance(record, dict):
        raise ValueError(f"the datum is a {type(record).__name__}, not a record")
    return {k: _plain(v) for k, v in record.items()}

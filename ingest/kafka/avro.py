"""Kafka records in Avro: each value one datum in the binary encoding of a writer schema.

Two ways to know the writer schema. A Schema Registry (``--format avro --schema-registry URL``):
each value is in the Confluent wire format (byte 0, the schema's 4-byte id, the datum), and the
schema of each id is fetched from the registry once per process (:class:`RegistryAvroDecoder`), so
records written with a newer version of the schema decode with it (a field it adds reaches the
validator, which adds the column if the table's schema evolution allows).

Plain Avro (``--format avro --avro-schema FILE``): every record of the job was written with the
schema in the file (``.avsc``, a record schema), without a header, as ``fastavro.schemaless_writer``
or Avro's ``BinaryEncoder`` write it. :class:`AvroDecoder` turns a value into a dict of the record's
fields, which the row-wise validator (:class:`ingest.records.RecordValidator`) checks against the
table's columns by name, like a JSON object's. Logical types arrive as Python values the validator
takes exactly: ``timestamp-millis``/``-micros`` an aware UTC datetime (``local-timestamp-*``: taken
as UTC), ``date`` a date, ``decimal`` a Decimal of the schema's scale; ``uuid`` and ``time-*`` become
their ISO text (there is no TIME column type). Spark's Python workers decode: fastavro loads only
when a task meets an Avro batch.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
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

        self._read = fastavro.schemaless_reader
        self.schema = fastavro.parse_schema(json.loads(schema_text))

    def decode(self, value: bytes) -> dict[str, Any]:
        """The record ``value`` holds. Raises ValueError saying why it is not one."""
        return _decode(self._read, self.schema, value)


def _plain(value: Any) -> Any:
    if isinstance(value, uuid.UUID | time):
        return str(value) if isinstance(value, uuid.UUID) else value.isoformat()
    return value


REGISTRY_RETRIES = 8
MAX_BACKOFF_S = 30.0
MAGIC = 0
_schemas: dict[tuple[str, int], Any] = {}  # (registry URL, schema id) → parsed schema, per process


class RegistryAvroDecoder:
    """Decodes values in the Confluent wire format, their schemas fetched from the registry at ``url``.

    ``auth``: (user, password) for HTTP basic authentication, or None. A schema id the registry does
    not have, or a value not in the wire format, is a ValueError (the record's fault: a dead letter).
    A registry that does not answer is retried like a broker, about a minute and a half (1, 2, 4, 8, 16,
    30, 30 s between attempts), then :class:`~ingest.errors.SchemaRegistryUnavailableError` fails the
    batch, which is replayed later; wrong credentials fail it at once.
    """

    def __init__(self, url: str, auth: tuple[str, str] | None = None, retry_s: float = 1.0) -> None:
        import fastavro

        self.url = url.rstrip("/")
        self.auth = auth
        self.retry_s = retry_s
        self._read = fastavro.schemaless_reader
        self._parse = fastavro.parse_schema

    def decode(self, value: bytes) -> dict[str, Any]:
        if len(value) < 5 or value[0] != MAGIC:
            raise ValueError(
                "not in the Confluent wire format (a 0 byte, then a 4-byte schema id): "
                f"starts {value[:5].hex()}"
            )
        schema_id = int.from_bytes(value[1:5], "big")
        schema = _schemas.get((self.url, schema_id))
        if schema is None:
            schema = _schemas[(self.url, schema_id)] = self._parse(json.loads(self._fetch(schema_id)))
        return _decode(self._read, schema, value[5:])

    def _fetch(self, schema_id: int) -> str:
        import time

        import httpx

        from ingest.errors import SchemaRegistryUnavailableError

        where = f"{self.url}/schemas/ids/{schema_id}"
        delay, problem = self.retry_s, ""
        for attempt in range(REGISTRY_RETRIES):
            try:
                r = httpx.get(where, auth=self.auth, timeout=10.0)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if r.status_code == 404:
                    raise ValueError(f"schema id {schema_id} is not in the registry at {self.url}")
                if r.status_code in (401, 403):
                    raise SchemaRegistryUnavailableError(
                        f"the Schema Registry at {self.url} refused the credentials ({r.status_code}); set "
                        "STREAMPART_SCHEMA_REGISTRY_USER and STREAMPART_SCHEMA_REGISTRY_PASSWORD"
                    )
                if r.status_code < 500:
                    return _avro_schema_of(r, schema_id)
                problem = f"HTTP {r.status_code}"
            if attempt + 1 < REGISTRY_RETRIES:
                time.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
        raise SchemaRegistryUnavailableError(
            f"the Schema Registry at {self.url} did not answer for schema id {schema_id} after "
            f"{REGISTRY_RETRIES} attempts ({problem})"
        )


def _avro_schema_of(response: Any, schema_id: int) -> str:
    response.raise_for_status()
    data = response.json()
    kind = data.get("schemaType") or "AVRO"
    if kind != "AVRO":
        raise ValueError(f"schema id {schema_id} is a {kind} schema, not Avro")
    return str(data["schema"])


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


@dataclass(frozen=True)
class AvroSource:
    """Where a job's Avro writer schemas come from: one schema (its JSON text), or a registry.

    Pickled into the tasks' spec (the registry's credentials with it: never on a command line nor
    in the query plan); ``repr`` leaves the password out.
    """

    schema: str | None = None
    registry: str | None = None
    auth: tuple[str, str] | None = field(default=None, repr=False)

    def decoder(self) -> Callable[[bytes], dict[str, Any]]:
        if self.schema is not None:
            return AvroDecoder(self.schema).decode
        return RegistryAvroDecoder(str(self.registry), self.auth).decode

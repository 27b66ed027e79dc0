"""Records whose writer schemas are in a Confluent-compatible Schema Registry: Avro, Protobuf, JSON Schema.

Each value is in the Confluent wire format: byte 0, the schema's 4-byte id, then the payload (for
Protobuf, first the message indexes: which message of the schema's file it is). A task fetches each
schema id once per process (``GET /schemas/ids/{id}``, Protobuf with ``?format=serialized``: its
file descriptor, and the files it references by subject and version) and keeps a reader for it, so
records written with a newer version of a schema decode with that version: a field it adds reaches
the validator, which adds the column if the table's ``--schema-evolution`` allows.

* **Avro**: the datum, decoded by fastavro (:mod:`ingest.kafka.avro`).
* **JSON Schema**: the JSON text, validated against the schema (jsonschema-rs, whose validator
  is compiled once per schema and checks a record in about a microsecond) as Confluent's
  deserializer does; fields map to columns like a JSON object's (a ``date-time`` string into a
  timestamp column exactly).
* **Protobuf**: the message, decoded with the schema's descriptor (:mod:`ingest.kafka.protobuf`).

A schema id the registry does not have, a schema of another kind than ``--format`` says, a value
not in the wire format or not matching its schema is a ValueError: the record's fault, a dead
letter with the reason. A registry that does not answer is retried like a broker, about a minute
and a half (1, 2, 4, 8, 16, 30, 30 s between attempts), then
:class:`~ingest.errors.SchemaRegistryUnavailableError` fails the batch, which is replayed later;
refused credentials fail it at once.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

REGISTRY_RETRIES = 8
MAX_BACKOFF_S = 30.0
MAGIC = 0
# the formats a registry serves, as --format names them and as the registry's schemaType does
KINDS = {"avro": "AVRO", "protobuf": "PROTOBUF", "jsonschema": "JSON"}
_readers: dict[tuple[str, str, int], Callable[[bytes], dict[str, Any]]] = {}  # per process


@dataclass(frozen=True)
class RegistrySchema:
    """One schema as the registry gives it: its kind, text, and the schemas it references."""

    kind: str
    text: str
    references: tuple[tuple[str, str, int], ...] = ()  # (import name, subject, version)


class SchemaRegistry:
    """Reads schemas from the registry at ``url`` (``auth``: basic-auth user and password, or None)."""

    def __init__(self, url: str, auth: tuple[str, str] | None = None, retry_s: float = 1.0) -> None:
        self.url = url.rstrip("/")
        self.auth = auth
        self.retry_s = retry_s

    def by_id(self, schema_id: int, serialized: bool = False) -> RegistrySchema:
        query = "?format=serialized" if serialized else ""
        return self._schema(f"/schemas/ids/{schema_id}{query}", f"schema id {schema_id}")

    def version(self, subject: str, version: int) -> RegistrySchema:
        """A referenced schema (a Protobuf import), serialized."""
        from urllib.parse import quote

        path = f"/subjects/{quote(subject, safe='')}/versions/{version}?format=serialized"
        return self._schema(path, f"subject {subject} version {version}")

    def _schema(self, path: str, what: str) -> RegistrySchema:
        data = self._get(path, what)
        refs = tuple(
            (str(r["name"]), str(r["subject"]), int(r["version"])) for r in data.get("references") or ()
        )
        return RegistrySchema(str(data.get("schemaType") or "AVRO"), str(data["schema"]), refs)

    def _get(self, path: str, what: str) -> dict[str, Any]:
        import time

        import httpx

        from ingest.errors import SchemaRegistryUnavailableError

        delay, problem = self.retry_s, ""
        for attempt in range(REGISTRY_RETRIES):
            try:
                r = httpx.get(self.url + path, auth=self.auth, timeout=10.0)
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if r.status_code == 404:
                    raise ValueError(f"{what} is not in the registry at {self.url}")
                if r.status_code in (401, 403):
                    raise SchemaRegistryUnavailableError(
                        f"the Schema Registry at {self.url} refused the credentials ({r.status_code}); set "
                        "STREAMPART_KAFKA__SCHEMA_REGISTRY_USER and _PASSWORD (settings [kafka])"
                    )
                if r.status_code < 500:
                    r.raise_for_status()
                    return dict(r.json())
                problem = f"HTTP {r.status_code}"
            if attempt + 1 < REGISTRY_RETRIES:
                time.sleep(delay)
                delay = min(delay * 2, MAX_BACKOFF_S)
        raise SchemaRegistryUnavailableError(
            f"the Schema Registry at {self.url} did not answer for {what} after {REGISTRY_RETRIES} "
            f"attempts ({problem})"
        )


def split_wire(value: bytes) -> tuple[int, bytes]:
    """``(schema id, payload)`` of a value in the Confluent wire format; ValueError if it is not in it."""
    if len(value) < 5 or value[0] != MAGIC:
        raise ValueError(
            f"not in the Confluent wire format (a 0 byte, then a 4-byte schema id): starts {value[:5].hex()}"
        )
    return int.from_bytes(value[1:5], "big"), value[5:]


class RegistryDecoder:
    """Decodes values of one format in the wire format, each schema's reader built once per process."""

    def __init__(self, url: str, fmt: str, auth: tuple[str, str] | None = None, retry_s: float = 1.0) -> None:
        self.registry = SchemaRegistry(url, auth, retry_s)
        self.fmt = fmt
        self.kind = KINDS[fmt]

    def decode(self, value: bytes) -> dict[str, Any]:
        """The record ``value`` holds. Raises ValueError saying why it is not one."""
        schema_id, payload = split_wire(value)
        key = (self.registry.url, self.fmt, schema_id)
        read = _readers.get(key)
        if read is None:
            read = _readers[key] = self._reader(schema_id)
        return read(payload)

    def _reader(self, schema_id: int) -> Callable[[bytes], dict[str, Any]]:
        schema = self.registry.by_id(schema_id, serialized=self.fmt == "protobuf")
        if schema.kind != self.kind:
            raise ValueError(f"schema id {schema_id} is a {schema.kind} schema, not {self.kind}")
        if self.fmt == "avro":
            from ingest.kafka.avro import AvroDecoder

            return AvroDecoder(schema.text).decode
        if self.fmt == "protobuf":
            from ingest.kafka.protobuf import protobuf_reader

            return protobuf_reader(schema_id, schema, self.registry)
        return _json_schema_reader(schema_id, schema.text)


def _json_schema_reader(schema_id: int, text: str) -> Callable[[bytes], dict[str, Any]]:
    import jsonschema_rs

    from ingest.kafka.staging import json_value

    try:
        validator = jsonschema_rs.validator_for(json.loads(text))
    except (ValueError, jsonschema_rs.ValidationError) as exc:
        raise ValueError(
            f"schema id {schema_id} is no valid JSON Schema: {str(exc).splitlines()[0]}"
        ) from None

    def read(payload: bytes) -> dict[str, Any]:
        record = json_value(payload)
        if not validator.is_valid(record):
            error = next(iter(validator.iter_errors(record)))
            where = "/".join(str(p) for p in error.instance_path) or "the record"
            raise ValueError(f"does not match schema id {schema_id} at {where}: {error.message}")
        if not isinstance(record, dict):
            raise ValueError(f"the value is a JSON {type(record).__name__}, not an object")
        return record

    return read


@dataclass(frozen=True)
class RecordSchemas:
    """Where a job's writer schemas come from: an Avro schema (its JSON text), or a registry.

    Pickled into the tasks' spec (the registry's credentials with it: never on a command line nor
    in the query plan); ``repr`` leaves the password out.
    """

    fmt: str = "avro"
    schema: str | None = None
    registry: str | None = None
    auth: tuple[str, str] | None = field(default=None, repr=False)

    def decoder(self) -> Callable[[bytes], dict[str, Any]]:
        if self.schema is not None:
            from ingest.kafka.avro import AvroDecoder

            return AvroDecoder(self.schema).decode
        return RegistryDecoder(str(self.registry), self.fmt, self.auth).decode

"""A Schema Registry for the tests: confluent-kafka's in-memory registry behind the REST call the job makes.

No registry server can be installed here (Confluent's is Java off Maven Central, Karapace is not on
PyPI). So records are serialized by confluent-kafka's own ``AvroSerializer`` against its own
in-memory registry (``MockSchemaRegistryClient``), and this serves that registry's schemas to the
ingest job's Spark tasks (other processes) at ``GET /schemas/ids/{id}`` and ``GET
/subjects/{subject}/versions/{version}`` (a Protobuf file's imports), the calls they make, as
Confluent's server answers them (404 with ``error_code`` 40403 for an unknown id). Protobuf schemas
are stored as confluent-kafka's serializer registers them, serialized descriptors: what Confluent's
server answers to ``?format=serialized``. It can demand
basic authentication and answer 503 for a while (an outage).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote

import pytest


class TestRegistry:
    def __init__(self, user: str | None = None, password: str | None = None) -> None:
        from confluent_kafka.schema_registry._sync.mock_schema_registry_client import MockSchemaRegistryClient

        self.client = MockSchemaRegistryClient({"url": "mock://streampart-tests"})
        self.auth = (
            None if user is None else "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
        )
        self.failures = 0  # answer 503 to this many requests
        self.requests: list[str] = []
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                registry.requests.append(self.path)
                if registry.auth is not None and self.headers.get("Authorization") != registry.auth:
                    return self._answer(401, {"error_code": 40101, "message": "Unauthorized"})
                if registry.failures > 0:
                    registry.failures -= 1
                    return self._answer(503, {"error_code": 50301, "message": "unavailable"})
                parts = [unquote(p) for p in self.path.split("?")[0].strip("/").split("/")]
                try:
                    if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                        schema = registry.client.get_schema(int(parts[2]))
                    elif len(parts) == 4 and parts[0] == "subjects" and parts[2] == "versions":
                        schema = registry.client.get_version(parts[1], int(parts[3])).schema
                    else:
                        return self._answer(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
                except Exception:
                    return self._answer(404, {"error_code": 40403, "message": "Schema not found"})
                references = [
                    {"name": r.name, "subject": r.subject, "version": r.version}
                    for r in schema.references or ()
                ]
                body = {"schema": schema.schema_str, "schemaType": schema.schema_type or "AVRO"}
                return self._answer(200, {**body, **({"references": references} if references else {})})

            def _answer(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def serializer(self, schema: dict[str, Any]) -> Callable[[dict[str, Any], str], bytes]:
        """AvroSerializer of ``schema``, registered on first use: (record, topic) → the value."""
        from confluent_kafka.schema_registry.avro import AvroSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        serialize = AvroSerializer(self.client, json.dumps(schema))
        return lambda record, topic: serialize(record, SerializationContext(topic, MessageField.VALUE))

    def protobuf_serializer(self, message_class: Any) -> Callable[[Any, str], bytes]:
        """ProtobufSerializer of ``message_class`` (its file registered, as a serialized descriptor, on
        first use): (message, topic) → the value."""
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        serialize = ProtobufSerializer(message_class, self.client, {"use.deprecated.format": False})
        return lambda message, topic: serialize(message, SerializationContext(topic, MessageField.VALUE))

    def json_serializer(self, schema: dict[str, Any]) -> Callable[[dict[str, Any], str], bytes]:
        """JSONSerializer of the JSON Schema ``schema`` (it validates each record as it writes it)."""
        from confluent_kafka.schema_registry.json_schema import JSONSerializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        serialize = JSONSerializer(json.dumps(schema), self.client)
        return lambda record, topic: serialize(record, SerializationContext(topic, MessageField.VALUE))

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def registry() -> Iterator[TestRegistry]:
    """A registry demanding basic auth as user ``ingest``, password ``s3cret``."""
    r = TestRegistry(user="ingest", password="s3cret")
    yield r
    r.close()

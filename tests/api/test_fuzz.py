"""Fuzz the API through its OpenAPI description (schemathesis): no input may cause a 5xx.

Runs against the module's live server with an ``admin:*`` token, so requests get past auth
into the routes, and once without a token. Every operation is fuzzed with valid (positive) and
invalid (negative) data; a handful of examples each keeps the whole run well under a minute.
(Driven through Hypothesis directly: schemathesis' pytest plugin does not run under pytest 9.)
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.core.result import Err

from tests.api.fixtures import Server, auth

EXAMPLES = 15


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    return (json.dumps(value) if not isinstance(value, str) else value).encode("utf-8", "surrogatepass")


@schemathesis.serializer("text/csv", "application/vnd.apache.parquet")
def _raw(ctx: Any, value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8", "surrogatepass")


def _fuzz(
    server: Server,
    operation: Any,
    mode: GenerationMode,
    token: str | None,
    sink: list[str],
    path: dict[str, str] | None = None,
) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    calls = 0

    @given(case=operation.as_strategy(generation_mode=mode, path_parameters=path))
    @settings(
        max_examples=EXAMPLES if token else 3,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    def call(case: Any) -> None:
        nonlocal calls
        calls += 1
        response = case.call(base_url=server.url, headers=headers, timeout=30)
        if response.status_code >= 500:
            sink.append(
                f"{case.method} {case.formatted_path} ({mode.value}) -> {response.status_code}: "
                f"{response.text[:300]}\n  {case.as_curl_command()}"
            )

    try:
        call()
    except Unsatisfiable:  # nothing to make invalid (an operation without parameters or body)
        assert mode is GenerationMode.NEGATIVE, operation.label
    return calls


def _open_chunk(server: Server) -> str:
    h = auth(server.admin)
    return str(httpx.post(f"{server.url}/v1/tables/ns/events/chunks", json={}, headers=h).json()["id"])


def test_no_request_makes_a_server_error(server: Server) -> None:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    server_errors: list[str] = []
    calls = 0
    for result in schema.get_all_operations():
        if isinstance(result, Err):  # an operation the schema describes wrongly
            raise result.err()
        operation = result.ok()
        for mode in GenerationMode:
            for token in (server.admin, None):
                calls += _fuzz(server, operation, mode, token, server_errors)
            # again with the names of a real table and chunk, so bodies reach the parsers
            names = {p.name for p in operation.path_parameters}
            real = {"namespace": "ns", "table": "events", "id": _open_chunk(server)}
            if names:
                path = {k: v for k, v in real.items() if k in names}
                calls += _fuzz(server, operation, mode, server.admin, server_errors, path)
    assert calls > 100
    assert not server_errors, "\n".join(server_errors)
    assert "Traceback" not in server.log.read_text()

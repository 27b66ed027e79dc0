"""Numbers out of range in a request are the client's error: 422 naming the field, in one line, and
nothing changes. A real ``streampart serve`` (the module's server) answers.

The numbers of the API's bodies: a table's ``max_new_columns`` (PATCH), a reset's JSON offsets
(partition → offset, inside ``to``), and the numbers inside durations (``retain``, a link's
``retention``).
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.api.fixtures import Server, auth

HUGE = [10**30, -1, 1e300, 2**63, 2.5, True, "7"]


def _alter(server: Server, body: str) -> httpx.Response:
    return httpx.patch(
        f"{server.url}/v1/tables/ns/events",
        content=body,
        headers=auth(server.admin) | {"Content-Type": "application/json"},
    )


def _reset(server: Server, to: str) -> httpx.Response:
    url = f"{server.url}/v1/admin/ingest/jobs/bounds/topics/t/reset"
    return httpx.post(url, json={"to": to}, headers=auth(server.admin))


def _one_line_naming(answer: httpx.Response, field: str) -> dict[str, Any]:
    assert answer.status_code in (400, 422), answer.text
    body = answer.json()
    assert body["field"] == field, body
    assert field in body["message"] and "\n" not in body["message"], body
    assert len(body["message"]) < 300, body
    return body


def _described(server: Server) -> dict[str, Any]:
    answer = httpx.get(f"{server.url}/v1/tables/ns/events", headers=auth(server.admin))
    assert answer.status_code == 200, answer.text
    info: dict[str, Any] = answer.json()
    return info


@pytest.mark.process
@pytest.mark.parametrize("value", [*(json.dumps(v) for v in HUGE), "1e309", "-1e309", "NaN", "Infinity"])
def test_max_new_columns_out_of_range_is_refused_naming_it_and_changes_nothing(
    server: Server, value: str
) -> None:
    before = _described(server)
    answer = _alter(
        server, f'{{"max_new_columns": {value}, "add_columns": ["extra_{abs(hash(value))} INT"]}}'
    )
    _one_line_naming(answer, "max_new_columns")
    assert _described(server) == before  # neither the setting nor the column in the same request


@pytest.mark.process
def test_max_new_columns_within_range_is_set(server: Server) -> None:
    for value in (0, 10_000, 100):
        answer = _alter(server, json.dumps({"max_new_columns": value}))
        assert answer.status_code == 200 and answer.json()["max_new_columns"] == value, answer.text


@pytest.mark.process
@pytest.mark.parametrize(
    "offsets",
    [
        '{"0": 100000000000000000000000000000}',  # past a Kafka offset (64 bits)
        '{"0": -1}',
        '{"0": 1e300}',
        '{"0": 1e309}',  # JSON's infinity
        '{"0": 2.5}',
        '{"0": true}',
        '{"99999999999": 1}',  # past a partition number (32 bits)
        '{"-1": 1}',
        '{"0x1": 1}',
        '{"0": ' + "[" * 2000 + "]" * 2000 + "}",  # deeper than the JSON parser goes
    ],
)
def test_reset_offsets_out_of_range_are_refused_naming_to_and_record_nothing(
    server: Server, offsets: str
) -> None:
    server.catalog.store.publish_ingest_status("bounds", {"topics": {}})  # any job: admin:* steers it
    before = server.catalog.store.ingest_requests("bounds")
    answer = httpx.post(
        f"{server.url}/v1/admin/ingest/jobs/bounds/topics/t/reset",
        json={"to": offsets},
        headers=auth(server.admin),
    )
    body = _one_line_naming(answer, "to")
    assert "offset" in body["message"]
    assert server.catalog.store.ingest_requests("bounds") == before


@pytest.mark.process
def test_reset_offsets_within_range_are_recorded(server: Server) -> None:
    server.catalog.store.publish_ingest_status("bounds", {"topics": {}})
    top = f'{{"2147483647": {2**63 - 1}, "0": 0}}'
    answer = httpx.post(
        f"{server.url}/v1/admin/ingest/jobs/bounds/topics/t/reset",
        json={"to": top},
        headers=auth(server.admin),
    )
    assert answer.status_code == 202 and json.loads(answer.json()["target"]) == json.loads(top), answer.text


@pytest.mark.process
@pytest.mark.parametrize("duration", ["99999999999999999999d", "1e30d", "9" * 400 + "s", "-5d"])
def test_durations_out_of_range_are_refused_naming_the_field(server: Server, duration: str) -> None:
    before = _described(server)
    _one_line_naming(_alter(server, json.dumps({"retain": duration})), "retain")
    assert _described(server) == before
    link = httpx.post(
        f"{server.url}/v1/namespaces/ns/links",
        json={"name": "bounded", "to": "ns.events", "retention": duration},
        headers=auth(server.admin),
    )
    _one_line_naming(link, "retention")

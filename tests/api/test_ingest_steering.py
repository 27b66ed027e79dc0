"""Who may steer a Kafka ingest job over HTTP: decided from the routes the job published, not the
topics it has read.

The jobs publish their status through :class:`ingest.kafka.steering.Steering` as a running job does
(no broker: nothing read yet but what the test says); a real ``streampart serve`` answers. A refused
request records nothing.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import httpx
import pytest

from ingest.kafka.control import Control, write_control
from ingest.kafka.routes import Route, Routes, parse_route_flag
from ingest.kafka.steering import Steering
from tests.api.fixtures import Server, auth

JOBS = "/v1/admin/ingest/jobs"
_NAMES = itertools.count()  # the tokens' names, one each


def _publish(srv: Server, tmp_path: Path, job: str, routes: Routes, read: tuple[str, ...] = ()) -> None:
    """``job``'s status as the job publishes it, having read the topics ``read``."""
    control = str(tmp_path / f"{job}.json")
    write_control(control, Control(topics=frozenset(routes.topics)))
    committed = {(t, 0): 5 for t in read}
    Steering(srv.catalog, job, control, "ops.dead").publish(routes, committed, committed, {}, {}, 1)


@pytest.fixture(scope="module")
def jobs(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Server:
    tmp = tmp_path_factory.mktemp("jobs")
    # the case found: orders go to a, topics matching x-.* to b; only orders read so far
    _publish(
        server, tmp, "j1", Routes((parse_route_flag("orders=a.orders"), Route("b.t", pattern="x-.*"))),
        read=("orders",),
    )  # fmt: skip
    # a table template: each topic's namespace is its own name's
    _publish(server, tmp, "j2", Routes((Route("{topic}", pattern=r"shop\..*"),)), read=("shop.old",))
    # a record's field names the table in a; a record without the field goes to ops.dead
    _publish(server, tmp, "j3", Routes((Route("a.{field}", topic="ev", table_field="kind"),)))
    # the field names the namespace: anything
    _publish(server, tmp, "j4", Routes((Route("{field}.t", topic="ev", table_field="kind"),)))
    # a job of an older version: its status names the tables it read, not its routes
    server.catalog.store.publish_ingest_status("old", {"topics": {"orders": {"table": "a.orders"}}})
    return server


# (scopes, method, path, status): every refusal is 403 naming the scope missing
CASES = [
    # pausing or resetting a topic needs admin where *its* records go, whether read yet or not
    (["admin:a"], "pause", "j1/topics/orders", 202),
    (["admin:a"], "pause", "j1/topics/x-new", 403),  # not read yet, but its route sends it to b
    (["admin:a"], "reset", "j1/topics/x-new", 403),
    (["admin:a"], "resume", "j1/topics/x-new", 403),
    (["admin:b"], "reset", "j1/topics/x-new", 202),
    (["admin:b"], "pause", "j1/topics/orders", 403),
    (["admin:a", "admin:b"], "pause", "j1/topics/nowhere", 403),  # no route takes it: admin:* only
    (["admin:*"], "pause", "j1/topics/nowhere", 202),
    # a template decides each topic's namespace from the topic's own name
    (["admin:shop"], "pause", "j2/topics/shop.new", 202),
    (["admin:shop"], "pause", "j2/topics/other.new", 403),  # no route takes it
    (["admin:shop"], "pause", "j2/topics/shop.x.y", 403),  # no table name: to ops.dead
    (["admin:a"], "pause", "j3/topics/ev", 403),  # records without the field go to ops.dead
    (["admin:a", "admin:ops"], "pause", "j3/topics/ev", 202),
    (["admin:a", "admin:b", "admin:ops"], "pause", "j4/topics/ev", 403),  # any namespace
    (["admin:*"], "pause", "j4/topics/ev", 202),
    (["admin:a"], "pause", "old/topics/orders", 403),  # its routes are not known
    (["admin:a"], "pause", "never-ran/topics/orders", 403),
    # a job's status: admin on every namespace any of its routes can reach
    (["admin:a"], "get", "j1", 403),
    (["admin:a", "admin:b"], "get", "j1", 200),
    (["admin:shop"], "get", "j2", 403),  # its template reaches any namespace
    (["admin:a", "admin:ops"], "get", "j3", 200),
]


@pytest.mark.process
@pytest.mark.parametrize("scopes, action, path, status", CASES)
def test_steering_a_topic_needs_admin_where_the_routes_send_it(
    jobs: Server, scopes: list[str], action: str, path: str, status: int
) -> None:
    token = jobs.token(f"steerer-{next(_NAMES)}", *scopes)
    job = path.split("/")[0]
    before = len(jobs.catalog.store.ingest_requests(job))
    url = f"{jobs.url}{JOBS}/{path}" + ("" if action == "get" else f"/{action}")
    if action == "get":
        answer = httpx.get(url, headers=auth(token))
    else:
        answer = httpx.post(url, headers=auth(token), json={"to": "earliest"} if action == "reset" else None)
    assert answer.status_code == status, answer.text
    made = len(jobs.catalog.store.ingest_requests(job)) - before
    assert made == (1 if status == 202 else 0)
    if status == 403:
        body = answer.json()
        assert body["error"] == "forbidden" and body["field"] == "Authorization"
        assert "lacks the scope admin:" in body["message"] and "\n" not in body["message"]


@pytest.mark.process
def test_the_jobs_listed_are_those_the_token_may_read(jobs: Server) -> None:
    def listed(*scopes: str) -> list[str]:
        token = jobs.token(f"lister-{next(_NAMES)}", *scopes)
        answer = httpx.get(jobs.url + JOBS, headers=auth(token))
        assert answer.status_code == 200, answer.text
        return sorted(j["job"] for j in answer.json())

    assert listed("admin:a") == []
    assert listed("admin:a", "admin:b", "admin:ops") == ["j1", "j3"]
    assert listed("admin:*") == ["j1", "j2", "j3", "j4", "old"]
    refused = httpx.get(f"{jobs.url}{JOBS}/j1", headers=auth(jobs.token("only-a", "admin:a"))).json()
    assert refused["message"] == "token 'only-a' lacks the scope admin:a, admin:b to steer job j1"

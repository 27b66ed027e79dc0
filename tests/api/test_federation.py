"""The HTTP API over a federation (issue 12, part 4): a real ``streampart serve`` process.

- A namespace whose metastore is dead answers 503 ``metastore_down`` with ``Retry-After`` (the
  circuit breaker's remaining window, rounded up) and names the metastore, while a namespace of
  another metastore answers 200; when the metastore is back, the same server answers 200 again.
- A write the access type of the namespace's metastore forbids answers 403 ``federation_access``.
- ``/metrics`` has ``streampart_metastore_up`` per metastore, ``streampart_metastore_call_seconds``
  and ``streampart_route_table_version``.

The dead metastore is a PostgreSQL instance of the test's own (tests/private_pg.py), never the
machine's shared one.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metastore.catalog import Catalog
from tests.api.fixtures import Server, auth
from tests.fixtures import make_table
from tests.helpers import wait_for

# The server re-reads the route table every second; a dead metastore fails fast for 3 s.
FEDERATION_ENV = {
    "STREAMPART_FEDERATION__REFRESH_INTERVAL": "1s",
    "STREAMPART_FEDERATION__HEALTH_INTERVAL": "3s",
}


@pytest.fixture
def fed(tmp_path: Path, private_pg: Any) -> Iterator[tuple[Server, Any]]:
    """A server whose primary (SQLite) holds ``ok.t``; ``gone.t`` lives on ``m_dead`` (private PostgreSQL)."""
    db = f"api_dead_{uuid.uuid4().hex[:8]}"
    srv = Server(
        tmp_path / "wh", f"sqlite:///{tmp_path / 'wh' / '_metastore.sqlite'}", tmp_path, FEDERATION_ENV
    )
    srv.catalog.federation.add("m_dead", private_pg.create_database(db), "read-write-create")
    srv.catalog.namespaces.create("gone", metastore="m_dead")
    make_table(srv.catalog, "ok.t")
    make_table(srv.catalog, "gone.t")
    srv.admin = srv.token("admin", "admin:*")
    srv.start()
    yield srv, private_pg
    srv.close()
    private_pg.start()
    private_pg.drop_database(db)


def _metrics(srv: Server) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{srv.url}/metrics", headers=auth(srv.admin), timeout=30).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_dead_metastore_answers_503_with_retry_after_and_the_others_answer_200(
    fed: tuple[Server, Any],
) -> None:
    srv, pg = fed
    headers = auth(srv.admin)
    with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as http:
        assert http.get("/v1/tables/gone/t").status_code == 200
        pg.stop("immediate")
        waits = []
        for call in (
            lambda: http.get("/v1/tables/gone/t"),
            lambda: http.post("/v1/tables/gone/t/chunks", json={"idempotency_key": "k1"}),
        ):
            down = call()
            assert down.status_code == 503, down.text
            body = down.json()
            assert body["error"] == "metastore_down" and body["metastore"] == "m_dead"
            assert "metastore m_dead" in body["message"]
            waits.append(down.headers["Retry-After"])
            if len(waits) == 1:  # it met the dead server, and that opened the breaker
                assert "is unavailable" in body["message"], body
            else:  # the breaker is open: no connect tried, the message says when again
                assert "is down" in body["message"], body
                assert f"tried again in {waits[1]} s" in body["message"], body
        assert waits[0] == "3", waits  # the breaker's whole window (fail_fast_s = 3)
        ok = http.post("/v1/tables/ok/t/chunks", json={"idempotency_key": "k1"})
        assert ok.status_code == 201, ok.text
        assert http.get("/v1/tables/ok/t").status_code == 200

        samples = wait_for(
            lambda: (
                (m := _metrics(srv)).get(("streampart_metastore_up", (("metastore", "m_dead"),))) == 0 and m
            ),
            "/metrics to report m_dead down",
        )
        assert samples[("streampart_metastore_up", (("metastore", "primary"),))] == 1
        assert samples[("streampart_metastore_call_seconds_count", (("metastore", "primary"),))] > 0
        assert ("streampart_metastore_call_seconds_count", (("metastore", "m_dead"),)) in samples
        assert samples[("streampart_route_table_version", ())] >= 1

        # back on the same port: the same server serves it again, no restart
        pg.start()
        wait_for(lambda: http.get("/v1/tables/gone/t").status_code == 200, "m_dead's namespace to answer")
        opened = http.post("/v1/tables/gone/t/chunks", json={"idempotency_key": "k2"})
        assert opened.status_code == 201, opened.text
        wait_for(
            lambda: _metrics(srv).get(("streampart_metastore_up", (("metastore", "m_dead"),))) == 1,
            "/metrics to report m_dead up",
        )


def test_a_write_its_metastore_does_not_allow_answers_403(fed: tuple[Server, Any], tmp_path: Path) -> None:
    srv, _pg = fed
    theirs = tmp_path / "theirs.sqlite"
    other = Catalog.open(srv.warehouse, f"sqlite:///{theirs}")  # a warehouse another team writes
    try:
        make_table(other, "archive.t")
    finally:
        other.close()
    srv.catalog.federation.add("ro", f"sqlite:///{theirs}", "read-only", routes={})
    srv.catalog.federation.set_route("archive", "ro")
    headers = auth(srv.admin)
    with httpx.Client(base_url=srv.url, headers=headers, timeout=30) as http:
        # the server sees the new metastore and route within its refresh interval
        wait_for(lambda: http.get("/v1/tables/archive/t").status_code == 200, "the route to reach the server")
        refused = http.post("/v1/tables/archive/t/chunks", json={"idempotency_key": "k"})
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "federation_access"
        assert "metastore ro, which is read-only" in refused.json()["message"]

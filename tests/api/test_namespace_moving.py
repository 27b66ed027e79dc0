"""A chunk committed over HTTP while its namespace is fenced for a move: a retriable 503 with
Retry-After (``namespace_moving``), and the same commit succeeds once the fence is lifted."""

from __future__ import annotations

import httpx

from tests.api.fixtures import Server, auth, server  # noqa: F401  (the module's server)
from tests.helpers import all_ids, records


def test_a_commit_to_a_namespace_being_moved_is_a_retriable_503(server: Server) -> None:  # noqa: F811
    table = server.catalog.table("ns.events")
    ids = range(7000, 7010)
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=30) as http:
        chunk = http.post("/v1/tables/ns/events/chunks", json={}).json()
        up = http.put(
            f"/v1/chunks/{chunk['id']}/data",
            content=records(ids),
            headers={"Content-Type": "application/x-ndjson"},
        )
        assert up.status_code == 200, up.text
        server.catalog.store.fence_namespace_for_move("ns", "elsewhere")
        try:
            refused = http.post(f"/v1/chunks/{chunk['id']}/commit")
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"] == "namespace_moving" and refused.headers["Retry-After"] == "1"
            assert "namespace ns is moving to metastore elsewhere" in refused.json()["message"]
        finally:
            server.catalog.store.unfence_namespace("ns")
        done = http.post(f"/v1/chunks/{chunk['id']}/commit")
        assert done.status_code == 200, done.text
    assert sorted(i for i in all_ids(table) if i in ids) == list(ids)

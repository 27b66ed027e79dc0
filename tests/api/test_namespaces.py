"""Namespaces and links over real HTTP, on SQLite and PostgreSQL.

A link ``a.LOCAL → b.t`` is made, read, changed and dropped through ``/v1/namespaces``; a token
``read:a`` reads it without any scope on ``b``; writes through a link are 409 ``read_only_link``;
a commit past a namespace's quota is 413 ``quota_exceeded`` and leaves nothing behind; the
per-namespace gauges of ``/metrics`` agree with the metastore's ledger and the usage call.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metastore.delta.layout import STAGING_DIR, chunk_of_staged
from metastore.models import PartitionState, iso
from metastore.usage import namespace_usage
from scheduler.roll import Roller
from tests.api.fixtures import Server, auth, pg_server
from tests.fixtures import fresh_metastore_url, make_table
from tests.helpers import all_ids, records
from tests.pg import drop_scratch_schema


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from pg_server(tmp_path_factory)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def srv(request: pytest.FixtureRequest) -> Server:
    server: Server = request.getfixturevalue("server" if request.param == "sqlite" else "pg")
    return server


def _admin(s: Server) -> str:
    return s.admin


def _commit(s: Server, table: str, ids: range, token: str | None = None) -> httpx.Response:
    """Open, upload and commit a chunk of ``ids`` into ``table`` (``ns/name``); the commit's answer."""
    with httpx.Client(base_url=s.url, headers=auth(token or _admin(s)), timeout=60) as http:
        opened = http.post(f"/v1/tables/{table}/chunks", json={})
        assert opened.status_code == 201, opened.text
        chunk = opened.json()["id"]
        up = http.put(
            f"/v1/chunks/{chunk}/data", content=records(ids), headers={"Content-Type": "application/x-ndjson"}
        )
        assert up.status_code == 200, up.text
        done = http.post(f"/v1/chunks/{chunk}/commit")
        done.extensions["chunk"] = chunk
        return done


@pytest.fixture(scope="module")
def world(srv: Server) -> dict[str, Any]:
    """``b.t`` with one standard partition (ids 0..9) and an open one (ids 100..104); an empty ``a``."""
    table = make_table(srv.catalog, "b.t")
    srv.catalog.store.create_namespace("a", description="imports")
    make_table(srv.catalog, "a.own")
    assert _commit(srv, "b/t", range(10)).status_code == 200
    Roller(srv.catalog).roll_table(table, force=True)
    assert _commit(srv, "b/t", range(100, 105)).status_code == 200
    parts = srv.catalog.store.list_partitions(table.id)
    standard = [p.value for p in parts if p.state is PartitionState.STANDARD]
    streaming = [p.value for p in parts if p.state is PartitionState.STREAMING]
    assert len(standard) == 1 and len(streaming) == 1, parts
    return {
        "standard": standard[0],
        "streaming": streaming[0],
        "read_a": srv.token("read-a", "read:a"),
        "admin_a": srv.token("admin-a", "admin:a"),
        "linker": srv.token("linker", "admin:a", "read:b"),
        "read_ns": srv.token("read-ns", "read:ns"),
    }


def _get(s: Server, token: str, path: str) -> httpx.Response:
    return httpx.get(s.url + path, headers=auth(token), timeout=60)


def _link(s: Server, token: str, ns: str = "a", **body: Any) -> httpx.Response:
    return httpx.post(f"{s.url}/v1/namespaces/{ns}/links", json=body, headers=auth(token), timeout=60)


def test_a_dynamic_link_shows_the_standard_partitions_of_its_source(
    srv: Server, world: dict[str, Any]
) -> None:
    made = _link(srv, world["linker"], name="dyn", to="b.t")
    assert made.status_code == 201, made.text
    link = made.json()
    assert link["name"] == "a.dyn" and link["source"] == "b.t" and link["mode"] == "dynamic"
    assert not link["dangling"] and link["partitions"] is None

    got = _get(srv, world["read_a"], "/v1/namespaces/a/links/dyn")
    assert got.status_code == 200, got.text
    exposed = got.json()["exposed"]
    assert [p["value"] for p in exposed] == [iso(world["standard"])] and exposed[0]["rows"] == 10
    assert got.json()["version"] >= 2

    table = _get(srv, world["read_a"], "/v1/tables/a/dyn")
    assert table.status_code == 200, table.text
    info = table.json()
    assert info["table"] == "a.dyn" and info["kind"] == "link" and info["link"]["source"] == "b.t"
    assert [p["value"] for p in info["partitions"]] == [iso(world["standard"])]
    listed = _get(srv, world["read_a"], "/v1/namespaces/a/links").json()
    assert "a.dyn" in [x["name"] for x in listed]
    tables = [t["table"] for t in _get(srv, world["read_a"], "/v1/tables").json()]
    assert "a.dyn" in tables and "a.own" in tables and not [t for t in tables if not t.startswith("a.")]


def test_a_read_token_reads_its_namespace_s_links_but_not_their_sources(
    srv: Server, world: dict[str, Any]
) -> None:
    assert _link(srv, world["linker"], name="scoped", to="b.t").status_code == 201
    reader, outsider = world["read_a"], world["read_ns"]
    for path in ("/v1/tables/a/scoped", "/v1/namespaces/a/links/scoped", "/v1/namespaces/a",
                 "/v1/namespaces/a/links", "/v1/namespaces/a/usage"):  # fmt: skip
        assert _get(srv, reader, path).status_code == 200, path
        denied = _get(srv, outsider, path)
        assert denied.status_code == 403 and denied.json()["field"] == "Authorization", (path, denied.text)
    for path in ("/v1/tables/b/t", "/v1/namespaces/b", "/v1/namespaces/b/usage", "/v1/namespaces/b/links"):
        assert _get(srv, reader, path).status_code == 403, path
    assert [n["name"] for n in _get(srv, reader, "/v1/namespaces").json()] == ["a"]
    assert "a" not in [n["name"] for n in _get(srv, outsider, "/v1/namespaces").json()]
    assert not [t for t in _get(srv, outsider, "/v1/tables").json() if t["table"].startswith("a.")]
    info = _get(srv, reader, "/v1/namespaces/a").json()
    assert info["name"] == "a" and info["description"] == "imports" and info["quota_bytes"] is None
    assert info["isolated"] is False and info["created_at"]


def test_making_a_link_needs_admin_on_its_namespace_and_read_on_the_source_s(
    srv: Server, world: dict[str, Any]
) -> None:
    no_source = _link(srv, world["admin_a"], name="sneaky", to="b.t")
    assert no_source.status_code == 403 and "read:b" in no_source.json()["message"], no_source.text
    assert _link(srv, world["read_a"], name="sneaky", to="b.t").status_code == 403
    assert _get(srv, world["read_a"], "/v1/namespaces/a/links/sneaky").status_code == 404
    assert _link(srv, world["linker"], name="perm", to="b.t").status_code == 201
    for method in ("DELETE",):
        r = httpx.request(method, f"{srv.url}/v1/namespaces/a/links/perm", headers=auth(world["read_a"]))
        assert r.status_code == 403, r.text


def _p(world: dict[str, Any], delta: timedelta = timedelta(0)) -> str:
    return iso(world["standard"] + delta)


@pytest.mark.parametrize(
    "body, status, field, says",
    [
        ({"name": "own", "to": "b.t"}, 409, "name", "is a table already"),
        ({"name": "../x", "to": "b.t"}, 400, "name", "path separator"),
        ({"name": "x", "to": "b"}, 400, "to", "NAMESPACE.TABLE"),
        ({"name": "x", "to": "a.own"}, 400, "to", "another namespace"),
        ({"name": "x", "to": "b.nope"}, 404, "to", "does not exist"),
        ({"name": "x", "to": "b.t", "partitions": "2026-11-01"}, 400, "partitions", "FROM..TO"),
        ({"name": "x", "to": "b.t", "partitions": "2026-12-01..2026-11-01"}, 400, "partitions", "empty"),
        ({"name": "x", "to": "b.t", "static": True, "partitions": "2026-11-01.."}, 400, "partitions", "both"),
        ({"name": "x", "to": "b.t", "values": ["2026-11-21T10:00:00Z"]}, 400, "values", "static"),
        ({"name": "x", "to": "b.t", "static": True, "values": ["soon"]}, 400, "values", "ISO-8601"),
        ({"name": "x", "to": "b.t", "static": True, "values": ["2026-11-21T10:30:00Z"]}, 400, "values",
         "did you mean 2026-11-21T10:00:00"),
        ({"name": "x", "to": "b.t", "retention": "forever"}, 400, "retention", "forever"),
        ({"name": "x", "to": "b.t", "colour": "red"}, 422, "colour", "Extra inputs"),
        ({"to": "b.t"}, 422, "name", "required"),
    ],
)  # fmt: skip
def test_bad_link_requests_are_4xx_naming_the_field(
    srv: Server, world: dict[str, Any], body: dict[str, Any], status: int, field: str, says: str
) -> None:
    r = _link(srv, world["linker"], **body)
    assert r.status_code == status, r.text
    assert r.json()["field"] == field and says in r.json()["message"], r.text
    assert _get(srv, world["read_a"], "/v1/namespaces/a/links/x").status_code == 404


def test_links_are_made_only_in_existing_namespaces_with_free_names_to_tables(
    srv: Server, world: dict[str, Any]
) -> None:
    missing = _link(srv, _admin(srv), ns="nowhere", name="x", to="b.t")
    assert missing.status_code == 404 and missing.json()["field"] == "namespace", missing.text
    assert _link(srv, world["linker"], name="taken", to="b.t").status_code == 201
    again = _link(srv, world["linker"], name="taken", to="b.t")
    assert again.status_code == 409 and again.json()["error"] == "already_exists", again.text
    srv.catalog.store.create_namespace("c")
    chain = _link(srv, _admin(srv), ns="c", name="x", to="a.taken")
    assert chain.status_code == 400 and chain.json()["field"] == "to" and "is a link" in chain.text


def test_a_static_link_lists_partitions_added_and_dropped_by_hand(srv: Server, world: dict[str, Any]) -> None:
    made = _link(srv, world["linker"], name="fixed", to="b.t", static=True, values=[_p(world)])
    assert made.status_code == 201, made.text
    assert made.json()["mode"] == "static" and made.json()["partitions"] == [_p(world)]
    exposed = _get(srv, world["read_a"], "/v1/namespaces/a/links/fixed").json()["exposed"]
    assert [p["value"] for p in exposed] == [_p(world)]

    url = f"{srv.url}/v1/namespaces/a/links/fixed/partitions"
    hdr = auth(world["linker"])
    added = httpx.post(url, json={"values": [_p(world, timedelta(hours=-1)), _p(world)]}, headers=hdr)
    assert added.status_code == 200, added.text
    assert added.json()["partitions"] == [_p(world, timedelta(hours=-1)), _p(world)]
    odd = httpx.post(url, json={"values": [_p(world, timedelta(minutes=5))]}, headers=hdr)
    assert odd.status_code == 400 and odd.json()["field"] == "values" and "did you mean" in odd.text
    assert httpx.post(url, json={"values": []}, headers=hdr).status_code == 422
    assert httpx.post(url, json={"values": [_p(world)]}, headers=auth(world["read_a"])).status_code == 403
    assert httpx.post(url, json={"values": [_p(world)]}, headers=auth(world["admin_a"])).status_code == 403

    dropped = httpx.request("DELETE", url, json={"values": [_p(world)]}, headers=hdr)
    assert dropped.status_code == 200 and dropped.json()["partitions"] == [_p(world, timedelta(hours=-1))]
    assert _get(srv, world["read_a"], "/v1/namespaces/a/links/fixed").json()["exposed"] == []

    assert _link(srv, world["linker"], name="follows", to="b.t").status_code == 201
    dyn = httpx.post(f"{srv.url}/v1/namespaces/a/links/follows/partitions", json={"values": [_p(world)]},
                     headers=hdr)  # fmt: skip
    assert dyn.status_code == 400 and "dynamic" in dyn.json()["message"], dyn.text
    table = httpx.post(f"{srv.url}/v1/namespaces/a/links/own/partitions", json={"values": [_p(world)]},
                       headers=hdr)  # fmt: skip
    assert table.status_code == 404 and "is a table, not a link" in table.text


def test_a_link_including_streaming_shows_the_open_partition_and_a_dropped_link_is_gone(
    srv: Server, world: dict[str, Any]
) -> None:
    made = _link(srv, world["linker"], name="live", to="b.t", include_streaming=True, retention="3650d",
                 partitions=f"{_p(world, timedelta(days=-1))}..")  # fmt: skip
    assert made.status_code == 201, made.text
    assert made.json()["include_streaming"] and made.json()["retention"] and made.json()["range"]
    exposed = _get(srv, world["read_a"], "/v1/namespaces/a/links/live").json()["exposed"]
    by_value = {p["value"]: p["rows"] for p in exposed}
    assert by_value == {_p(world): 10, iso(world["streaming"]): 5}

    gone = httpx.delete(f"{srv.url}/v1/namespaces/a/links/live", headers=auth(world["admin_a"]))
    assert gone.status_code == 200 and gone.json()["name"] == "a.live", gone.text
    assert _get(srv, world["read_a"], "/v1/namespaces/a/links/live").status_code == 404
    assert _get(srv, world["read_a"], "/v1/tables/a/live").status_code == 404
    assert sorted(all_ids(srv.catalog.table("b.t"))) == [*range(10), *range(100, 105)]  # the source stays


def test_a_dangling_link_says_so_and_stops_only_its_own_figures(srv: Server, world: dict[str, Any]) -> None:
    doomed = make_table(srv.catalog, "b.doomed")
    assert _link(srv, world["linker"], name="dangles", to="b.doomed").status_code == 201
    srv.catalog.drop_table(doomed, force=True)
    got = _get(srv, world["read_a"], "/v1/namespaces/a/links/dangles")
    assert got.status_code == 200, got.text
    assert got.json()["dangling"] is True and got.json()["exposed"] == [] and got.json()["version"] is None
    described = _get(srv, world["read_a"], "/v1/tables/a/dangles")
    assert described.status_code == 404 and "was dropped" in described.json()["message"], described.text
    usage = _get(srv, world["read_a"], "/v1/namespaces/a/usage").json()
    assert "a.dangles" in usage["errors"] and "a.dangles" not in [x["name"] for x in usage["linked"]["links"]]
    listed = {x["name"]: x["dangling"] for x in _get(srv, world["read_a"], "/v1/namespaces/a/links").json()}
    assert listed["a.dangles"] is True
    assert (
        httpx.delete(f"{srv.url}/v1/namespaces/a/links/dangles", headers=auth(world["admin_a"])).status_code
        == 200
    )


def test_writing_through_a_link_is_a_409_read_only_link(srv: Server, world: dict[str, Any]) -> None:
    assert _link(srv, world["linker"], name="ro", to="b.t").status_code == 201
    hdr = auth(_admin(srv))
    opened = httpx.post(f"{srv.url}/v1/tables/a/ro/chunks", json={}, headers=hdr)
    assert opened.status_code == 409 and opened.json()["error"] == "read_only_link", opened.text
    assert "b.t" in opened.json()["message"]
    events = httpx.post(f"{srv.url}/v1/tables/a/ro/events", json=[{"id": 1, "ts": "2026-11-21T10:00:00Z"}],
                        headers=hdr)  # fmt: skip
    assert events.status_code == 409 and events.json()["error"] == "read_only_link", events.text
    assert sorted(all_ids(srv.catalog.table("b.t"))) == [*range(10), *range(100, 105)]


def test_a_commit_past_the_quota_is_a_413_and_leaves_nothing_behind(
    srv: Server, world: dict[str, Any]
) -> None:
    table = make_table(srv.catalog, "q.t")
    assert _commit(srv, "q/t", range(20)).status_code == 200
    used = srv.catalog.store.committed_bytes("q")
    assert used > 0
    srv.catalog.store.alter_namespace("q", quota_bytes=used + 10)

    refused = _commit(srv, "q/t", range(20, 40))
    assert refused.status_code == 413, refused.text
    body = refused.json()
    assert body["error"] == "quota_exceeded" and str(used + 10) in body["message"], body
    chunk = refused.extensions["chunk"]
    state = _get(srv, _admin(srv), f"/v1/chunks/{chunk}")
    assert state.json()["state"] == "aborted", state.text
    staging = Path(table.location) / STAGING_DIR
    left = [f for f in staging.rglob("*") if f.is_file() and chunk_of_staged(f.name) == chunk]
    assert left == []
    assert sorted(all_ids(table)) == list(range(20))
    assert srv.catalog.store.committed_bytes("q") == used
    metrics = httpx.get(f"{srv.url}/metrics").text
    assert 'streampart_http_chunks_total{outcome="aborted",table="q.t"} 1.0' in metrics

    usage = _get(srv, _admin(srv), "/v1/namespaces/q/usage").json()
    assert usage["quota_bytes"] == used + 10 and usage["owned"]["bytes"] > 0
    assert usage["owned"]["streaming"]["rows"] == 20 and usage["linked"]["bytes"] == 0
    srv.catalog.store.alter_namespace("q", quota_bytes=None)
    assert _commit(srv, "q/t", range(20, 40)).status_code == 200  # no quota: it fits


def test_usage_shows_owned_and_linked_bytes_apart(srv: Server, world: dict[str, Any]) -> None:
    assert _link(srv, world["linker"], name="counted", to="b.t").status_code == 201
    a = _get(srv, world["read_a"], "/v1/namespaces/a/usage")
    assert a.status_code == 200, a.text
    got = a.json()
    assert got["namespace"] == "a" and got["owned"]["bytes"] == 0 and "a.counted" not in got["errors"]
    counted = [x for x in got["linked"]["links"] if x["name"] == "a.counted"]
    assert counted and counted[0]["standard_rows"] == 10 and counted[0]["streaming_rows"] == 0
    b = _get(srv, _admin(srv), "/v1/namespaces/b/usage").json()
    assert b["owned"]["standard"]["rows"] == 10 and b["owned"]["streaming"]["rows"] == 5
    assert counted[0]["bytes"] == b["owned"]["standard"]["bytes"]  # shown in a, charged to b
    missing = _get(srv, _admin(srv), "/v1/namespaces/nowhere/usage")
    assert missing.status_code == 404 and missing.json()["field"] == "namespace"


# -- metrics ---------------------------------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgresql"])
def fresh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server of its own: nothing has scraped its /metrics yet (the figures are cached 30 s)."""
    tmp = tmp_path_factory.mktemp(f"metrics-{request.param}")
    url = fresh_metastore_url(request.param, tmp)
    s = Server(tmp / "warehouse", url, tmp)
    s.admin = s.token("admin", "admin:*")
    yield s
    s.close()
    drop_scratch_schema(url)


def _gauges(s: Server) -> dict[str, dict[str, float]]:
    text = httpx.get(f"{s.url}/metrics", timeout=60).text
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name.startswith("streampart_namespace_"):
            for sample in family.samples:
                out.setdefault(sample.name, {})[sample.labels["namespace"]] = sample.value
    return out


@pytest.mark.process
def test_metrics_have_per_namespace_gauges_of_owned_linked_and_quota_bytes(fresh: Server) -> None:
    src = make_table(fresh.catalog, "b.t")
    fresh.catalog.store.create_namespace("a", quota_bytes=10**9)
    fresh.start()
    assert _commit(fresh, "b/t", range(30)).status_code == 200
    made = _link(fresh, _admin(fresh), name="all", to="b.t", include_streaming=True)
    assert made.status_code == 201, made.text

    g = _gauges(fresh)
    owned_b = fresh.catalog.store.committed_bytes("b")
    assert owned_b > 0
    assert g["streampart_namespace_owned_bytes"] == {"a": 0, "b": owned_b}
    linked = namespace_usage(fresh.catalog, "a").linked_bytes
    assert linked > 0 and g["streampart_namespace_linked_bytes"] == {"a": linked, "b": 0}
    assert g["streampart_namespace_quota_bytes"] == {"a": 10**9}  # b has no quota: no series

    t0 = time.monotonic()
    assert _commit(fresh, "b/t", range(30, 60)).status_code == 200
    again = _gauges(fresh)
    if time.monotonic() - t0 < 25:  # within the cache's 30 s: the same figures, no log replayed
        assert again == g
    assert fresh.catalog.store.committed_bytes("b") > owned_b
    assert sorted(all_ids(src)) == list(range(60))

"""The federation's administration over HTTP, ``/v1/admin/federation/…`` (issue 12, part 3), through a
real ``streampart serve`` on SQLite and PostgreSQL primaries; the federated metastores are SQLite files.

Every route needs ``admin:*``; a change made through the server is in force in it at once (and in
every other process within its refresh interval: tests/test_federation_live.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.fixtures import Server, auth, pg_server
from tests.fixtures import make_table
from tests.helpers import records

BASE = "/v1/admin/federation"


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from pg_server(tmp_path_factory)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def srv(request: pytest.FixtureRequest) -> Server:
    server: Server = request.getfixturevalue("server" if request.param == "sqlite" else "pg")
    return server


def _http(s: Server, token: str | None = None) -> httpx.Client:
    return httpx.Client(base_url=s.url, headers=auth(token or s.admin), timeout=60)


def _commit(http: httpx.Client, table: str, ids: range) -> httpx.Response:
    """Open, upload and commit a chunk into ``table`` (``ns/name``): the first answer not a success."""
    opened = http.post(f"/v1/tables/{table}/chunks", json={})
    if opened.status_code != 201:
        return opened
    chunk = opened.json()["id"]
    up = http.put(
        f"/v1/chunks/{chunk}/data", content=records(ids), headers={"Content-Type": "application/x-ndjson"}
    )
    assert up.status_code == 200, up.text
    return http.post(f"/v1/chunks/{chunk}/commit")


def test_only_a_token_with_admin_on_every_namespace_administers_the_federation(srv: Server) -> None:
    assert httpx.get(f"{srv.url}{BASE}/metastores").status_code == 401
    for scopes in (["admin:ns"], ["read:*", "write:*"]):
        token = srv.token(f"t-{'-'.join(s.replace(':', '_').replace('*', 'all') for s in scopes)}", *scopes)
        with _http(srv, token) as http:
            for method, path, body in [
                ("GET", "/metastores", None),
                ("GET", "/metastores/primary", None),
                ("POST", "/metastores", {"name": "x", "url": "sqlite://", "access": "read-only"}),
                ("PATCH", "/metastores/x", {"access": "read-only"}),
                ("DELETE", "/metastores/x", None),
                ("GET", "/routes", None),
                ("PUT", "/routes/ns", {"metastore": "primary"}),
            ]:
                r = http.request(method, BASE + path, json=body)
                assert r.status_code == 403, (scopes, method, path, r.text)
                assert r.json()["error"] == "forbidden" and "lacks the scope admin:*" in r.json()["message"]
    with _http(srv) as http:
        listed = http.get(f"{BASE}/metastores")
        assert listed.status_code == 200 and listed.json()[0]["metastore"] == "primary"
        assert listed.json()[0]["health"] == "up"


def test_register_describe_alter_route_and_remove_over_http(srv: Server, tmp_path: Path) -> None:
    m1 = f"sqlite:///{tmp_path / 'm1.sqlite'}"
    with _http(srv) as http:
        added = http.post(
            f"{BASE}/metastores",
            json={"name": "m1", "url": m1, "access": "read-write-create", "prefix": "fed_"},
        )
        assert added.status_code == 201, added.text
        assert (added.json()["metastore"], added.json()["prefix"], added.json()["health"]) == (
            "m1",
            "fed_",
            "up",
        )
        listed = {m["metastore"]: m for m in http.get(f"{BASE}/metastores").json()}
        assert set(listed) >= {"primary", "m1"} and listed["m1"]["health"] == "up"
        assert http.get(f"{BASE}/metastores/m1").json()["access"] == "read-write-create"

        srv.catalog.router.refresh(force=True)  # the test's own process: it has not waited its interval
        make_table(srv.catalog, "fed_x.t")
        assert srv.catalog.table("fed_x.t").metastore == "m1"
        # one row per verdict over HTTP: allowed, then refused after the access type changed
        assert _commit(http, "fed_x/t", range(3)).status_code == 200
        altered = http.patch(f"{BASE}/metastores/m1", json={"access": "read-only"})
        assert altered.status_code == 200 and altered.json()["access"] == "read-only", altered.text
        refused = _commit(http, "fed_x/t", range(3, 6))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"] == "federation_access"
        assert (
            refused.json()["message"] == "namespace fed_x is on metastore m1, which is read-only: no writes"
        )
        back = http.patch(
            f"{BASE}/metastores/m1", json={"access": "read-write-whitelist", "writable": ["fed_*"]}
        )
        assert back.json()["writable"] == ["fed_*"]
        assert _commit(http, "fed_x/t", range(3, 6)).status_code == 200

        version = http.get(f"{BASE}/routes").json()["version"]
        routed = http.put(f"{BASE}/routes/fed_y", json={"metastore": "primary"})
        assert routed.status_code == 200, routed.text
        assert routed.json() == {"namespace": "fed_y", "metastore": "primary", "previous": "m1",
                                 "version": version + 1}  # fmt: skip
        assert http.get(f"{BASE}/routes").json()["routes"]["fed_y"] == "primary"

        # a metastore in use is kept; an unused one goes
        in_use = http.delete(f"{BASE}/metastores/m1")
        assert (
            in_use.status_code == 400 and "namespaces fed_x have its prefix fed_" in in_use.json()["message"]
        )
        m2 = f"sqlite:///{tmp_path / 'm2.sqlite'}"
        assert (
            http.post(f"{BASE}/metastores", json={"name": "m2", "url": m2, "access": "read-only"}).status_code
            == 201
        )
        assert http.delete(f"{BASE}/metastores/m2").status_code == 204
        assert "m2" not in {m["metastore"] for m in http.get(f"{BASE}/metastores").json()}
        assert (
            http.patch(f"{BASE}/metastores/m1", json={"prefix": None}).status_code == 400
        )  # fed_x would vanish


RO = "read-only"
NOT_FOUND = (404, "not_found", "metastore nope does not exist")
BAD = (400, "bad_request")


@pytest.mark.parametrize(
    "method, path, body, status, error, says",
    [
        ("GET", "/metastores/nope", None, *NOT_FOUND),
        ("PATCH", "/metastores/nope", {"access": RO}, *NOT_FOUND),
        ("DELETE", "/metastores/nope", None, *NOT_FOUND),
        ("DELETE", "/metastores/primary", None, *BAD, "needs no registration"),
        ("POST", "/metastores", {"name": "m9", "url": "postgresql://postgres@127.0.0.1:1/test", "access": RO},
         *BAD, "metastore m9 is unreachable at"),
        ("POST", "/metastores", {"name": "m9", "url": "postgresql://u:hunter2@127.0.0.1/x", "access": RO},
         *BAD, "in clear text"),
        ("POST", "/metastores", {"name": "primary", "url": "sqlite://", "access": RO},
         *BAD, "needs no registration"),
        ("POST", "/metastores", {"name": "m9", "url": "{tmp}/m9.sqlite", "access": "all"},
         *BAD, "access 'all' is not one of"),
        ("POST", "/metastores", {"name": "mx", "url": "{tmp}/m9.sqlite", "access": RO},
         409, "already_exists", "metastore mx exists already"),
        # the primary holds ns (ns.events): a prefix n would move it
        ("POST", "/metastores", {"name": "m9", "url": "{tmp}/m9.sqlite", "access": RO, "prefix": "n"},
         *BAD, "prefix n collides with namespaces of the primary: ns"),
        ("POST", "/metastores", {"name": "m9", "url": "{tmp}/m9.sqlite", "access": RO, "extra": 1},
         422, "invalid_request", "extra"),
        ("PATCH", "/metastores/mx", {}, *BAD, "nothing to alter for metastore mx"),
        ("PATCH", "/metastores/mx", {"access": "read-write-whitelist"}, *BAD, "give at least one --writable"),
        ("PUT", "/routes/ns", {"metastore": "nope"}, *NOT_FOUND),
        ("PUT", "/routes/bad-name", {"metastore": "primary"}, *BAD, "namespace"),
        # ns holds ns.events in the primary and mx does not have it: the route would hide it
        ("PUT", "/routes/ns", {"metastore": "mx"}, *BAD, "routing it there would hide them"),
    ],
)  # fmt: skip
def test_bad_requests_are_4xx_naming_the_fault_and_change_nothing(
    srv: Server, tmp_path: Path, method: str, path: str, body: dict[str, object] | None, status: int,
    error: str, says: str,
) -> None:  # fmt: skip
    with _http(srv) as http:
        if "mx" not in {m["metastore"] for m in http.get(f"{BASE}/metastores").json()}:
            mx = f"sqlite:///{tmp_path / 'mx.sqlite'}"
            assert (
                http.post(
                    f"{BASE}/metastores", json={"name": "mx", "url": mx, "access": "read-only"}
                ).status_code
                == 201
            )
        if body is not None and isinstance(body.get("url"), str):
            body = {**body, "url": str(body["url"]).replace("{tmp}", f"sqlite:///{tmp_path}")}
        before = http.get(f"{BASE}/routes").json()
        r = http.request(method, BASE + path, json=body)
        assert r.status_code == status, r.text
        assert r.json()["error"] == error and says in r.json()["message"], r.json()
        assert "hunter2" not in r.text
        assert http.get(f"{BASE}/routes").json() == before


def test_the_admin_routes_are_in_the_openapi_document(server: Server) -> None:
    doc = httpx.get(f"{server.url}/openapi.json").json()
    paths = doc["paths"]
    assert set(paths[f"{BASE}/metastores"]) == {"get", "post"}
    assert set(paths[f"{BASE}/metastores/{{name}}"]) == {"get", "patch", "delete"}
    assert set(paths[f"{BASE}/routes/{{namespace}}"]) == {"put"}
    assert paths[f"{BASE}/metastores"]["post"]["tags"] == ["federation"]
    assert "403" in paths[f"{BASE}/metastores"]["post"]["responses"]

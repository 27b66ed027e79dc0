"""Auth (401/403, revocation, --insecure-no-auth) and bad requests: always a 4xx JSON naming the field.

Each bad request is a scenario of its own; after all of them, the table still holds exactly
what was committed before (nothing committed is affected by a client's mistake).
"""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import httpx
import pytest

from tests.api.fixtures import COMMAND, ROOT, Server, auth
from tests.fixtures import make_table
from tests.helpers import all_ids, records, wait_for


@pytest.fixture(scope="module")
def tokens(server: Server) -> dict[str, str]:
    make_table(server.catalog, "other.things")
    return {
        "writer": server.token("writer", "write:ns"),
        "reader": server.token("reader", "read:ns"),
        "ns_admin": server.token("ns-admin", "admin:ns"),
    }


def _open(server: Server, token: str | None, table: str = "ns/events") -> httpx.Response:
    headers = auth(token) if token else {}
    return httpx.post(f"{server.url}/v1/tables/{table}/chunks", json={}, headers=headers)


# -- auth -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "who, method, path, status",
    [
        (None, "POST", "/v1/tables/ns/events/chunks", 401),  # no token
        ("bogus", "POST", "/v1/tables/ns/events/chunks", 401),  # unknown token
        ("reader", "POST", "/v1/tables/ns/events/chunks", 403),  # read scope cannot write
        ("writer", "GET", "/v1/tables/ns/events", 403),  # write does not imply read
        ("writer", "POST", "/v1/tables/other/things/chunks", 403),  # other namespace
        ("reader", "GET", "/v1/tables/other/things", 403),
        ("ns_admin", "GET", "/v1/tables/other/things", 403),
        ("reader", "GET", "/v1/tables/ns/events", 200),
        ("writer", "POST", "/v1/tables/ns/events/chunks", 201),
        ("ns_admin", "GET", "/v1/tables/ns/events", 200),  # admin implies read and write
        ("ns_admin", "POST", "/v1/tables/ns/events/chunks", 201),
        (None, "GET", "/healthz", 200),  # no token needed
        (None, "GET", "/metrics", 200),
        (None, "GET", "/openapi.json", 200),
    ],
)
def test_tokens_and_scopes(
    server: Server, tokens: dict[str, str], who: str | None, method: str, path: str, status: int
) -> None:
    headers = {}
    if who == "bogus":
        headers = auth("spt_not-a-real-token")
    elif who is not None:
        headers = auth(tokens[who])
    r = httpx.request(method, server.url + path, headers=headers, json={} if method == "POST" else None)
    assert r.status_code == status, r.text
    if status in (401, 403):
        assert r.json()["field"] == "Authorization" and r.json()["error"] in ("unauthorized", "forbidden")
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"


def test_table_listing_shows_only_readable_namespaces(server: Server, tokens: dict[str, str]) -> None:
    listed = httpx.get(f"{server.url}/v1/tables", headers=auth(tokens["reader"])).json()
    assert {t["table"].split(".")[0] for t in listed} == {"ns"}
    assert httpx.get(f"{server.url}/v1/tables", headers=auth(tokens["writer"])).json() == []


def test_chunks_of_another_namespace_answer_as_chunks_nobody_made(
    server: Server, tokens: dict[str, str]
) -> None:
    """A token with no scope on a chunk's namespace is told the chunk does not exist, as for an id
    nobody made: a 403 said that the chunk existed, and in which namespace. A token that may see
    the namespace but not do this to it still gets the 403 naming the scope it needs."""
    chunk = _open(server, server.admin, "other/things").json()
    made_up = "00000000-0000-4000-8000-000000000000"
    for method, path in [("PUT", "/data"), ("POST", "/commit"), ("DELETE", ""), ("GET", "")]:
        answers = [
            httpx.request(method, f"{server.url}/v1/chunks/{id_}{path}", headers=auth(tokens["writer"]))
            for id_ in (chunk["id"], made_up)
        ]
        assert [r.status_code for r in answers] == [404, 404], (method, path, answers[0].text)
        assert answers[0].json()["error"] == answers[1].json()["error"] == "not_found"
    mine = _open(server, server.admin, "ns/events").json()
    r = httpx.post(f"{server.url}/v1/chunks/{mine['id']}/commit", headers=auth(tokens["reader"]))
    assert r.status_code == 403 and "write:ns" in r.json()["message"], r.text  # read does not imply write


@pytest.mark.parametrize("who", ["reader", "writer", "ns_admin"])
def test_a_namespace_the_token_may_not_use_answers_alike_whether_its_table_exists(
    server: Server, tokens: dict[str, str], who: str
) -> None:
    """Every route that looks a table up, asked by a token without the scope on its namespace, gives
    one refusal naming that namespace — the same for other.things (it exists), other.nope (it does
    not) and a namespace that does not exist: "does not exist" never tells another namespace's
    tables apart."""

    def calls(namespace: str, name: str) -> list[tuple[str, str, Any]]:
        return [
            ("GET", f"/v1/tables/{namespace}/{name}", None),
            ("POST", f"/v1/tables/{namespace}/{name}/chunks", {}),
            ("POST", f"/v1/tables/{namespace}/{name}/events", [{"id": 1, "ts": "2026-11-21T10:00:00Z"}]),
            ("GET", f"/v1/namespaces/{namespace}/links/{name}", None),
            ("POST", "/v1/namespaces/ns/links", {"name": f"l_{name}", "to": f"{namespace}.{name}"}),
        ]

    def answer(method: str, path: str, body: Any) -> tuple[int, Any]:
        r = httpx.request(method, server.url + path, json=body, headers=auth(tokens[who]))
        return r.status_code, r.json()

    for there, missing, nowhere in zip(
        calls("other", "things"), calls("other", "nope"), calls("nowhere", "things"), strict=True
    ):
        status, said = answer(*there)
        assert status == 403 and said["error"] == "forbidden" and said["field"] == "Authorization", said
        assert answer(*missing) == (status, said), there[1]
        assert ":other " in said["message"] or said["message"].endswith("lacks the scope admin:ns"), said
        elsewhere = answer(*nowhere)
        assert elsewhere[0] == 403, elsewhere
        assert ":nowhere " in elsewhere[1]["message"] or "admin:ns" in said["message"], elsewhere
    assert sorted(all_ids(server.catalog.table("other.things"))) == []  # nothing was written there


def test_a_name_in_another_case_never_tells_another_namespace_s_tables_apart(
    server: Server, tokens: dict[str, str]
) -> None:
    """Names match in any case (as Spark's): a token whose scope is read:OTHER gets, for OTHER.things
    (other.things exists) and OTHER.nope alike, the refusal naming other — never other.things
    itself, nor a "does not exist" that a table of other would not get; a token with read:ns reads
    NS.events."""
    upper = server.token("upper", "read:OTHER", "write:OTHER")
    refusals = []
    requests: list[tuple[str, str, Any]] = [  # method, path after the table, JSON body
        ("GET", "", None),
        ("POST", "/chunks", {}),
        ("POST", "/events", [{"id": 1, "ts": "2026-11-21T10:00:00Z"}]),
    ]
    for name in ("things", "nope", "THINGS"):
        for method, suffix, body in requests:
            r = httpx.request(method, f"{server.url}/v1/tables/OTHER/{name}{suffix}", json=body,
                              headers=auth(upper))  # fmt: skip
            assert r.status_code == 403, (method, name, suffix, r.text)
            refusals.append((method, suffix, r.json()["message"]))
    assert len(set(refusals)) == 3  # one answer per route, whatever the table's name
    assert all(":other (or admin:other)" in message for _, _, message in refusals), refusals
    r = httpx.get(f"{server.url}/v1/tables/NS/events", headers=auth(tokens["reader"]))
    assert r.status_code == 200 and r.json()["table"] == "ns.events", r.text


def test_a_revoked_token_is_refused_and_the_cli_makes_and_revokes_tokens(server: Server) -> None:
    base = [*COMMAND, "--warehouse", str(server.warehouse), "--metastore", server.metastore, "token"]
    run = lambda *a: subprocess.run([*base, *a], capture_output=True, text=True, cwd=ROOT, timeout=60)  # noqa: E731
    made = run("create", "cli-made", "--scope", "write:ns", "--scope", "read:ns", "--json")
    assert made.returncode == 0, made.stderr
    info = json.loads(made.stdout)
    assert info["name"] == "cli-made" and info["token"].startswith("spt_")
    assert info["scopes"] == ["write:ns", "read:ns"]
    assert _open(server, info["token"]).status_code == 201
    listed = run("list", "--json")
    assert info["token"] not in listed.stdout and "cli-made" in listed.stdout
    dup = run("create", "cli-made", "--scope", "write:ns")
    assert dup.returncode == 1 and "exists already" in dup.stderr
    bad = run("create", "x", "--scope", "write:../etc")
    assert bad.returncode == 1 and "path separator" in bad.stderr and "Traceback" not in bad.stderr
    assert run("revoke", "cli-made").returncode == 0
    assert _open(server, info["token"]).status_code == 401  # the test server caches nothing
    gone = run("revoke", "cli-made")
    assert gone.returncode == 1 and "does not exist" in gone.stderr


@pytest.mark.process
def test_a_correct_token_gets_in_at_once_after_many_failed_logins_which_are_slowed(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Failed logins from 127.0.0.1 are each logged once (the address, the token's first characters,
    never the token) and answered late: 0.5 s, 1 s, then the 1.5 s cap. Right after them the correct
    token from the same address gets in at once, on the API and the status page: nothing is ever
    locked out (a lockout let anyone who knew the key lock a token's owner out). A request with no
    token is no failed login."""
    tmp = tmp_path_factory.mktemp("slowed")
    srv = Server(tmp / "wh", f"sqlite:///{tmp / 'wh' / '_metastore.sqlite'}", tmp)
    try:
        make_table(srv.catalog, "ns.events")
        good = srv.token("reader", "read:ns")
        srv.start(STREAMPART_SERVER__LOGIN_DELAY="500ms", STREAMPART_SERVER__LOGIN_DELAY_MAX="1500ms")
        url = f"{srv.url}/v1/tables/ns/events"
        wrong = [f"spt_WRONG{i}" + "x" * 40 for i in range(5)]
        assert httpx.get(url).status_code == 401  # no token: not counted

        def timed(token: str) -> tuple[int, float]:
            started = time.monotonic()
            status = httpx.get(url, headers=auth(token), timeout=30).status_code
            return status, time.monotonic() - started

        failures = [timed(t) for t in wrong]
        assert [status for status, _ in failures] == [401] * 5
        for (_, took), least in zip(failures, [0.5, 1.0, 1.5, 1.5, 1.5], strict=True):
            assert took >= least, failures  # each answer waited at least its delay
        status, took = timed(good)
        assert status == 200 and took < 1.5, took  # at once: no lockout, no delay
        page = httpx.post(f"{srv.url}/ui/login", data={"token": good})  # the status page's login too
        assert page.status_code == 303
        lines = [json.loads(line) for line in srv.log.read_text().splitlines() if line.startswith("{")]
        failed = [e for e in lines if e.get("event") == "login.failed"]
        assert [(e["client"], e["tried"], e["failures"], e["delay_s"]) for e in failed] == [
            ("127.0.0.1", f"spt_WRON… ({len(wrong[0])} characters)", n, delay)
            for n, delay in zip(range(1, 6), [0.5, 1.0, 1.5, 1.5, 1.5], strict=True)
        ]
        assert not any("locked" in str(e.get("event")) for e in lines)
        assert not any(t in srv.log.read_text() for t in wrong) and good not in srv.log.read_text()
    finally:
        srv.close()


@pytest.mark.process
def test_insecure_no_auth_says_so_loudly_and_needs_no_token(tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("insecure")
    srv = Server(tmp / "wh", f"sqlite:///{tmp / 'wh' / '_metastore.sqlite'}", tmp)
    try:
        make_table(srv.catalog, "ns.open")
        srv.start("--insecure-no-auth")
        assert _open(srv, None, "ns/open").status_code == 201
        assert httpx.get(f"{srv.url}/healthz").json() == {"status": "ok", "auth": False}
        log = wait_for(lambda: "AUTHENTICATION IS OFF" in srv.log.read_text() and srv.log.read_text())
        assert '"server.insecure_no_auth"' in log and '"level": "warning"' in log
    finally:
        srv.close()
    assert srv.proc is not None and srv.proc.returncode == 0  # SIGTERM: a clean exit


# -- bad input ------------------------------------------------------------------------------
NDJSON = {"Content-Type": "application/x-ndjson"}


def _scenarios(server: Server) -> list[tuple[str, Any, int, str, str | None]]:
    """(what, request thunk, status, error code, field) — each one a client's mistake."""
    url = server.url
    h = auth(server.admin)

    def chunk() -> str:
        return httpx.post(f"{url}/v1/tables/ns/events/chunks", json={}, headers=h).json()["id"]

    def aborted() -> str:
        cid = chunk()
        httpx.delete(f"{url}/v1/chunks/{cid}", headers=h)
        return cid

    def committed() -> str:
        cid = chunk()
        httpx.put(f"{url}/v1/chunks/{cid}/data", content=records(range(5)), headers={**h, **NDJSON})
        httpx.post(f"{url}/v1/chunks/{cid}/commit", headers=h)
        return cid

    unknown = "00000000-0000-4000-8000-000000000000"
    T, C = f"{url}/v1/tables", f"{url}/v1/chunks"
    JSON = {**h, "Content-Type": "application/json"}
    bad_line = records(range(3)) + b'{"id": 1, "ts": "not a time"}\n'
    return [
        ("unknown table", lambda: httpx.post(f"{T}/ns/nope/chunks", json={}, headers=h),
         404, "not_found", "table"),
        ("unknown namespace on events", lambda: httpx.post(f"{T}/zz/nope/events", json=[], headers=h),
         404, "not_found", "table"),
        ("'..' in a namespace", lambda: httpx.post(f"{T}/a..b/events/chunks", json={}, headers=h),
         400, "bad_request", "namespace"),
        ("a backslash in a table name", lambda: httpx.get(f"{T}/ns/a%5Cb", headers=h),
         400, "bad_request", "table"),
        ("an encoded '/' in a name", lambda: httpx.get(f"{T}/ns/a%2Fb", headers=h),
         404, "not_found", "path"),
        ("'..' in a chunk id", lambda: httpx.post(f"{C}/..x/commit", headers=h),
         400, "bad_request", "id"),
        ("malformed line", lambda: httpx.put(f"{C}/{chunk()}/data", content=bad_line,
                                             headers={**h, **NDJSON}), 400, "malformed_body", "body"),
        ("wrong content type", lambda: httpx.put(f"{C}/{chunk()}/data", content=b"x",
                                                 headers={**h, "Content-Type": "text/html"}),
         415, "unsupported_media_type", "Content-Type"),
        ("events not JSON", lambda: httpx.post(f"{T}/ns/events/events", content=b"[{]",
                                               headers=JSON),
         400, "malformed_body", "body"),
        ("events not an array", lambda: httpx.post(f"{T}/ns/events/events", json={"a": 1}, headers=h),
         400, "malformed_body", "body"),
        ("events as text", lambda: httpx.post(f"{T}/ns/events/events", content=b"[]",
                                              headers={**h, "Content-Type": "text/plain"}),
         415, "unsupported_media_type", "Content-Type"),
        ("a Flume body that is not JSON", lambda: httpx.post(f"{T}/ns/events/events",
                                                             json=[{"body": "{nope"}], headers=h),
         400, "malformed_body", "body[0].body"),
        ("upload over the limit", lambda: httpx.put(f"{C}/{chunk()}/data", content=b"x" * 3000,
                                                    headers={**h, **NDJSON}), 413, "too_large", "body"),
        ("events over the limit", lambda: httpx.post(f"{T}/ns/events/events", content=b" " * 3000,
                                                     headers=JSON),
         413, "too_large", "body"),
        ("commit of an unknown chunk", lambda: httpx.post(f"{C}/{unknown}/commit", headers=h),
         404, "not_found", "id"),
        ("commit of a non-id", lambda: httpx.post(f"{C}/banana/commit", headers=h),
         404, "not_found", "id"),
        ("commit of an aborted chunk", lambda: httpx.post(f"{C}/{aborted()}/commit", headers=h),
         409, "chunk_state", "id"),
        ("upload to a committed chunk", lambda: httpx.put(f"{C}/{committed()}/data",
                                                          content=b"", headers={**h, **NDJSON}),
         409, "chunk_state", "id"),
        ("abort of a committed chunk", lambda: httpx.delete(f"{C}/{committed()}", headers=h),
         409, "chunk_state", "id"),
        ("an idempotency key too long", lambda: httpx.post(f"{T}/ns/events/chunks",
                                                           json={"idempotency_key": "k" * 600}, headers=h),
         422, "invalid_request", "idempotency_key"),
        ("an unknown field", lambda: httpx.post(f"{T}/ns/events/chunks",
                                                json={"idempotency": "k"}, headers=h),
         422, "invalid_request", "idempotency"),
        ("open with a body that is not JSON", lambda: httpx.post(f"{T}/ns/events/chunks",
                                                                 content=b"{", headers=JSON),
         422, "invalid_request", "body"),
        ("an unknown route", lambda: httpx.get(f"{url}/v2/nothing", headers=h), 404, "not_found", "path"),
        ("a wrong method", lambda: httpx.patch(f"{T}", headers=h), 405, "method_not_allowed", "path"),
    ]  # fmt: skip


@pytest.mark.process
def test_every_client_mistake_is_a_4xx_json_naming_the_field(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("limits")
    srv = Server(tmp / "wh", f"sqlite:///{tmp / 'wh' / '_metastore.sqlite'}", tmp)
    try:
        table = make_table(srv.catalog, "ns.events")
        srv.admin = srv.token("admin", "admin:*")
        srv.start(STREAMPART_SERVER__MAX_UPLOAD_BYTES="2000", STREAMPART_SERVER__MAX_EVENTS_BYTES="2000")
        httpx.post(f"{srv.url}/v1/tables/ns/events/events", json=[{"id": 1, "ts": "2026-11-21T10:00:00Z"}],
                   headers=auth(srv.admin))  # fmt: skip
        before = sorted(all_ids(table))
        failures = []
        for what, call, status, code, field in _scenarios(srv):
            r = call()
            body = r.json()
            got = (r.status_code, body.get("error"), body.get("field"))
            if got != (status, code, field) or not body.get("message"):
                failures.append(f"{what}: expected {(status, code, field)}, got {got}: {body}")
        assert not failures, "\n".join(failures)
        # the malformed upload names its line
        h = auth(srv.admin)
        cid = httpx.post(f"{srv.url}/v1/tables/ns/events/chunks", json={}, headers=h).json()["id"]
        r = httpx.put(f"{srv.url}/v1/chunks/{cid}/data", headers={**h, **NDJSON},
                      content=records(range(3)) + b'{"id": 1, "ts": "not a time"}\n')  # fmt: skip
        assert r.json()["line"] == 4 and "line 4: column 'ts'" in r.json()["message"]
        # no client mistake changed what was committed (5 rows per committed() scenario)
        after = sorted(all_ids(table))
        assert after == sorted(before + [i for i in range(5)] * 2)
        assert "Traceback" not in srv.log.read_text()
    finally:
        srv.close()


def test_a_json_body_sent_without_its_content_type_is_told_to_send_it(server: Server) -> None:
    """``curl -X PATCH … -d '{…}'`` sends a form: the answer names the header to add."""
    answer = httpx.patch(
        f"{server.url}/v1/tables/ns/events",
        content=b'{"retain": "30d"}',
        headers={**auth(server.admin), "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 422
    body = answer.json()
    assert body["field"] == "Content-Type" and "Content-Type: application/json" in body["message"]
    assert "application/x-www-form-urlencoded" in body["message"]
    sent = httpx.patch(
        f"{server.url}/v1/tables/ns/events", json={"nonsense": 1}, headers=auth(server.admin)
    )  # JSON, but not what the route takes: the usual answer naming the field
    assert sent.status_code in (400, 422) and sent.json()["field"] != "Content-Type"

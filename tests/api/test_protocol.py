"""The chunk protocol over real HTTP against a running ``streampart serve`` process.

open → upload → commit → visible (read back by delta-rs and by Spark SQL, the path of
``streampart query``); abort → never visible; a retry after a lost response lands once; Flume
and plain JSON events; every upload format; tables in the shape of ``describe --json``.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.client import Client
from ingest.errors import ApiRequestError
from metastore.models import ChunkState
from tests.api.fixtures import COMMAND, ROOT, LossyProxy, Server, auth, committed_counts, pg_server
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, records, wait_for
from tests.helpers import jsonl as jsonl_bytes


@pytest.fixture(scope="module")
def pg(tmp_path_factory: pytest.TempPathFactory):
    yield from pg_server(tmp_path_factory)


def _protocol(srv: Server, table_name: str, ids: range) -> None:
    table = srv.catalog.table(table_name)
    ns, name = table_name.split(".")
    with httpx.Client(base_url=srv.url, headers=auth(srv.admin), timeout=30) as http:
        opened = http.post(f"/v1/tables/{ns}/{name}/chunks", json={})
        assert opened.status_code == 201, opened.text
        chunk = opened.json()
        assert chunk["state"] == "reserved" and chunk["table"] == table_name
        up = http.put(
            f"/v1/chunks/{chunk['id']}/data",
            content=records(ids),
            headers={"Content-Type": "application/x-ndjson"},
        )
        assert up.status_code == 200, up.text
        assert up.json()["rows"] == len(ids)
        assert not set(all_ids(table)) & set(ids)  # uploaded, not committed: invisible
        done = http.post(f"/v1/chunks/{chunk['id']}/commit")
        assert done.status_code == 200, done.text
        result = done.json()
        assert result["chunk"] == chunk["id"] and result["rows"] == len(ids) and result["version"] >= 1
    assert sorted(i for i in all_ids(table) if i in ids) == list(ids)


def test_open_upload_commit_makes_the_chunk_visible_sqlite(server: Server) -> None:
    _protocol(server, "ns.events", range(0, 50))


def test_open_upload_commit_makes_the_chunk_visible_postgresql(pg: Server) -> None:
    _protocol(pg, "ns.events", range(0, 50))


@pytest.mark.spark
def test_an_upload_with_commit_true_stages_and_commits_in_one_request(pg: Server) -> None:
    """``PUT …/data?commit=true`` answers as the commit; the rows are visible (read by delta-rs); a
    retry after a lost answer meets 409 chunk_state and the commit answers with the one that landed;
    a malformed upload so commits nothing and leaves the chunk open."""
    table = pg.catalog.table("ns.events")
    ids = range(7000, 7040)
    with httpx.Client(base_url=pg.url, headers=auth(pg.admin), timeout=30) as http:
        chunk = http.post("/v1/tables/ns/events/chunks", json={}).json()
        url, ndjson = f"/v1/chunks/{chunk['id']}/data", {"Content-Type": "application/x-ndjson"}
        bad = http.put(url, params={"commit": "true"}, content=b'{"id": "x"}\n', headers=ndjson)
        assert bad.status_code == 400 and bad.json()["line"] == 1, bad.text
        assert http.get(f"/v1/chunks/{chunk['id']}").json()["state"] == "reserved"
        done = http.put(url, params={"commit": "true"}, content=records(ids), headers=ndjson)
        assert done.status_code == 200, done.text
        result = done.json()
        assert result["chunk"] == chunk["id"] and result["rows"] == len(ids) and result["version"] >= 1
        again = http.put(url, params={"commit": "true"}, content=records(ids), headers=ndjson)
        assert again.status_code == 409 and again.json()["error"] == "chunk_state", again.text
        assert http.post(f"/v1/chunks/{chunk['id']}/commit").json()["version"] == result["version"]
    assert sorted(i for i in all_ids(table) if i in ids) == list(ids)
    with Client(pg.url, pg.admin) as api:  # the client's write: open, then upload and commit at once
        wrote = api.write("ns.events", records(range(7100, 7110)), idempotency_key="one-request")
        assert api.write("ns.events", records(range(7100, 7110)), idempotency_key="one-request") == wrote
    assert sorted(i for i in all_ids(table) if i >= 7100) == list(range(7100, 7110))


def test_committed_rows_are_what_streampart_query_reads(server: Server, spark) -> None:
    from streampart.query import run_sql

    make_table(server.catalog, "ns.queried")
    with Client(server.url, server.admin) as api:
        api.write("ns.queried", records(range(1000, 1010)))
    rows = run_sql(spark, server.catalog, "SELECT id FROM ns.queried ORDER BY id").collect()
    assert [r.id for r in rows] == list(range(1000, 1010))


def test_an_aborted_chunk_is_never_visible_and_its_files_go(server: Server) -> None:
    table = server.catalog.table("ns.events")
    with Client(server.url, server.admin) as api:
        chunk = api.open_chunk("ns.events")
        api.upload(chunk["id"], records(range(100, 120)))
        staged = server.catalog.store.get_chunk(chunk["id"]).files
        assert staged and all((Path(table.location) / f.path).exists() for f in staged)
        aborted = api.abort(chunk["id"])
        assert aborted["state"] == "aborted"
        assert api.abort(chunk["id"])["state"] == "aborted"  # aborting again is harmless
        with pytest.raises(Exception, match=r"HTTP 409.*aborted"):
            api.commit(chunk["id"])
    assert not set(all_ids(table)) & set(range(100, 120))
    assert not any((Path(table.location) / f.path).exists() for f in staged)


def test_a_commit_whose_response_was_lost_is_retried_by_the_client_and_lands_once(server: Server) -> None:
    table = server.catalog.table("ns.events")
    counted = committed_counts(server)
    proxy = LossyProxy(server.port, b"commit")  # (the write commits with its upload: ?commit=true)
    try:
        with Client(proxy.url, server.admin, backoff=0.05) as api:
            proxy.drop = 1
            result = api.write("ns.events", records(range(200, 230)), idempotency_key="lost-1")
            assert proxy.dropped == 1  # the first commit landed, its answer was lost, the client retried
            again = api.write("ns.events", records(range(200, 230)), idempotency_key="lost-1")
        assert again == result
    finally:
        proxy.close()
    ids = all_ids(table)
    assert sorted(i for i in ids if 200 <= i < 230) == list(range(200, 230)) and not duplicates(ids)
    assert server.catalog.store.get_chunk(result["chunk"]).state is ChunkState.COMMITTED
    # counted once, by the request that committed it; the retries' answers count nothing again
    chunks, rows = committed_counts(server)
    assert (chunks - counted[0], rows - counted[1]) == (1, 30)


def test_client_write_commits_through_a_server_that_predates_commit_true(server: Server) -> None:
    """A server older than ``?commit=true`` ignores it and only stages the upload (the proxy strips
    it from the request line): ``Client.write`` sees a staged chunk, not a commit, and commits it."""
    table = server.catalog.table("ns.events")
    proxy = LossyProxy(server.port, b"-", rewrite=(b"/data?commit=true ", b"/data "))
    try:
        with Client(proxy.url, server.admin) as api:
            result = api.write("ns.events", records(range(9400, 9410)), idempotency_key="older-server")
    finally:
        proxy.close()
    assert result["rows"] == 10 and result["version"] >= 1, result
    assert sorted(i for i in all_ids(table) if 9400 <= i < 9410) == list(range(9400, 9410))


def test_a_commit_request_whose_caller_vanished_lands_and_a_retry_answers_with_it(server: Server) -> None:
    table = server.catalog.table("ns.events")
    with Client(server.url, server.admin) as api:
        chunk = api.open_chunk("ns.events", idempotency_key="vanish-1")
        api.upload(chunk["id"], records(range(300, 310)))
        # send the commit and hang up without reading the answer
        raw = socket.create_connection(("127.0.0.1", server.port))
        raw.sendall(
            f"POST /v1/chunks/{chunk['id']}/commit HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
            f"{server.admin}\r\nContent-Length: 0\r\n\r\n".encode()
        )
        raw.close()
        wait_for(lambda: server.catalog.store.get_chunk(chunk["id"]).state is ChunkState.COMMITTED)
        # the producer retries from the start with the same key: the same chunk, no second copy
        assert api.open_chunk("ns.events", idempotency_key="vanish-1")["id"] == chunk["id"]
        result = api.write("ns.events", records(range(300, 310)), idempotency_key="vanish-1")
        assert result["chunk"] == chunk["id"]
    ids = all_ids(table)
    assert sorted(i for i in ids if 300 <= i < 310) == list(range(300, 310)) and not duplicates(ids)


def test_open_with_the_same_idempotency_key_returns_the_same_chunk(server: Server) -> None:
    with httpx.Client(base_url=server.url, headers=auth(server.admin)) as http:
        first = http.post("/v1/tables/ns/events/chunks", json={"idempotency_key": "same"})
        second = http.post("/v1/tables/ns/events/chunks", json={"idempotency_key": "same"})
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"] and second.json()["idempotency_key"] == "same"


def test_an_idempotency_key_reused_for_other_data_is_a_409_and_adds_nothing(
    server: Server, tmp_path: Path
) -> None:
    table = server.catalog.table("ns.events")
    data = tmp_path / "batch.jsonl"
    data.write_bytes(records(range(9600, 9610)))
    with Client(server.url, server.admin) as api:
        first = api.write("ns.events", data, idempotency_key="reused")
        retry = api.write("ns.events", records(range(9600, 9610)), idempotency_key="reused")
        assert retry == first
        with pytest.raises(ApiRequestError) as refused:
            api.write("ns.events", records(range(9700, 9710)), idempotency_key="reused")
        assert (refused.value.status, refused.value.code) == (409, "idempotency_conflict")
        said = str(refused.value)
        assert "idempotency key 'reused'" in said and "new idempotency key" in said
        events = [{"id": i, "ts": "2026-11-21T10:00:00Z"} for i in range(9800, 9805)]
        api.events("ns.events", events, idempotency_key="ev-reused")
        with pytest.raises(ApiRequestError) as refused:
            api.events("ns.events", events[:2], idempotency_key="ev-reused")
        assert refused.value.code == "idempotency_conflict"
    ids = all_ids(table)
    assert not {i for i in ids if 9700 <= i < 9710} and sorted(i for i in ids if 9800 <= i < 9805) == list(
        range(9800, 9805)
    )


# -- events ---------------------------------------------------------------------------------
def test_flume_events_commit_as_one_chunk_exactly_once_per_key(server: Server) -> None:
    table = server.catalog.table("ns.events")
    events = [
        {"headers": {"host": "a"}, "body": json.dumps({"id": i, "ts": "2026-11-21T10:00:00Z", "msg": "f"})}
        for i in range(400, 420)
    ]
    with Client(server.url, server.admin) as api:
        first = api.events("ns.events", events, idempotency_key="flume-1")
        again = api.events("ns.events", events, idempotency_key="flume-1")
    assert first == again and first["rows"] == 20
    ids = all_ids(table)
    assert sorted(i for i in ids if 400 <= i < 420) == list(range(400, 420)) and not duplicates(ids)


def test_a_plain_json_array_of_records_is_one_chunk(server: Server) -> None:
    table = server.catalog.table("ns.events")
    rows = [{"id": i, "ts": "2026-11-21T10:00:00Z"} for i in range(500, 505)]
    with Client(server.url, server.admin) as api:
        result = api.events("ns.events", rows)
    assert result["rows"] == 5 and len(server.catalog.store.get_chunk(result["chunk"]).files) == 1
    assert sorted(i for i in all_ids(table) if 500 <= i < 505) == list(range(500, 505))


def test_bad_events_go_to_the_dead_letter_table_when_it_has_one(server: Server) -> None:
    make_table(server.catalog, "ns.dl", dead_letter=True)
    events = [{"id": 1, "ts": "2026-11-21T10:00:00Z"}, {"id": "x", "ts": "2026-11-21T10:00:00Z"}]
    with Client(server.url, server.admin) as api:
        result = api.events("ns.dl", events)
    assert (result["rows"], result["dead_letter_rows"]) == (1, 1)
    from tests.helpers import delta_rows

    letters = delta_rows(server.catalog.table("ns.dl__dead_letter"), columns="position, reason, source")
    assert letters.column("position").to_pylist() == [2]
    assert "column 'id'" in letters.column("reason")[0].as_py()


# -- formats --------------------------------------------------------------------------------
def _parquet(ids: range) -> bytes:
    from datetime import UTC, datetime

    buf = io.BytesIO()
    data = pa.table({"id": list(ids), "ts": [datetime(2026, 11, 21, 10, tzinfo=UTC)] * len(ids)})
    pq.write_table(data, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    "fmt, content, ids",
    [
        (
            "csv",
            b'id,ts,msg\n600,2026-11-21T10:00:00Z,a\n601,2026-11-21T10:00:00Z,"multi\nline"\n',
            [600, 601],
        ),
        ("parquet", _parquet(range(610, 615)), list(range(610, 615))),
        ("jsonl", records(range(620, 625)), list(range(620, 625))),
    ],
)
def test_each_upload_format(server: Server, fmt: str, content: bytes, ids: list[int]) -> None:
    with Client(server.url, server.admin) as api:
        result = api.write("ns.events", content, fmt)
    assert result["rows"] == len(ids)
    assert sorted(i for i in all_ids(server.catalog.table("ns.events")) if i in ids) == ids


@pytest.mark.process
def test_large_jsonl_uploads_are_staged_in_batches_and_commit_whole(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tmp = tmp_path_factory.mktemp("batches")
    srv = Server(tmp / "wh", f"sqlite:///{tmp / 'wh' / '_metastore.sqlite'}", tmp)
    try:
        table = make_table(srv.catalog, "ns.big")
        srv.start("--insecure-no-auth", STREAMPART_SERVER__UPLOAD_BATCH_ROWS="1000")
        path = tmp / "big.jsonl"
        path.write_bytes(records(range(4500)))
        with Client(srv.url) as api:
            result = api.write("ns.big", path)  # streamed from the file
        assert result["rows"] == 4500
        assert len(srv.catalog.store.get_chunk(result["chunk"]).files) == 5  # 4 × 1000 + 500
        assert sorted(all_ids(table)) == list(range(4500))
        # a bad line in a later batch is reported with its line number in the whole upload
        bad = records(range(2500)) + b'{"id": "x", "ts": "2026-11-21T10:00:00Z"}\n'
        with Client(srv.url) as api:
            chunk = api.open_chunk("ns.big")
            with pytest.raises(ApiRequestError, match="line 2501: column 'id'") as info:
                api.upload(chunk["id"], bad)
            assert info.value.line == 2501 and info.value.field == "body"
            assert api.chunk(chunk["id"])["state"] == "reserved" and api.chunk(chunk["id"])["rows"] == 0
        assert list((Path(table.location) / "_staging").glob(f"{chunk['id']}*")) == []
    finally:
        srv.close()


# -- reading state --------------------------------------------------------------------------
def test_tables_have_the_shape_of_describe_json(server: Server) -> None:
    with Client(server.url, server.admin) as api:
        one = api.table("ns.events")
        every = api.tables()
    proc = subprocess.run(
        [*COMMAND, "--warehouse", str(server.warehouse), "--metastore", server.metastore,
         "table", "describe", "ns.events", "--json"],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(proc.stdout)
    assert set(one) == set(cli) and one["table"] == cli["table"] and one["schema"] == cli["schema"]
    assert set(one["partitions"][0]) == set(cli["partitions"][0])
    assert "ns.events" in {t["table"] for t in every} and set(every[0]) == set(cli)


def test_health_metrics_openapi_and_docs(server: Server) -> None:
    with httpx.Client(base_url=server.url) as http:
        assert http.get("/healthz").json() == {"status": "ok", "auth": True}
        spec = http.get("/openapi.json").json()
        assert {"/v1/tables/{namespace}/{table}/chunks", "/v1/chunks/{id}/data", "/v1/chunks/{id}/commit",
                "/v1/chunks/{id}", "/v1/tables/{namespace}/{table}/events", "/v1/tables",
                "/v1/tables/{namespace}/{table}", "/healthz"} <= set(spec["paths"])  # fmt: skip
        assert "HTTPBearer" in spec["components"]["securitySchemes"]
        assert "swagger" in http.get("/docs").text.lower()
        metrics = http.get("/metrics").text
    assert 'streampart_http_requests_total{method="GET",route="/healthz",status="200"}' in metrics
    assert "streampart_http_commit_duration_seconds_bucket" in metrics


def test_streampart_write_url_uses_the_api(server: Server, tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(records(range(700, 704)))
    argv = [*COMMAND, "write", "ns.events", str(path), "--url", server.url, "--token", "cli-1", "--json"]
    env = {"STREAMPART_API_TOKEN": server.admin, "PATH": "/usr/bin:/bin"}
    first = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    second = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == json.loads(second.stdout)
    assert set(json.loads(first.stdout)) == {
        "chunk", "table", "partitions", "rows", "version", "dead_letter_rows", "late_rows", "idempotency_key",
        "ignored_fields", "rounded_values", "new_columns", "refused_fields",
    }  # fmt: skip
    ids = all_ids(server.catalog.table("ns.events"))
    assert sorted(i for i in ids if 700 <= i < 704) == list(range(700, 704)) and not duplicates(ids)
    # a user error through the API is one line and exit status 1, as for local writes
    bad = subprocess.run(
        [*COMMAND, "write", "ns.nope", str(path), "--url", server.url],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=60,
    )  # fmt: skip
    assert bad.returncode == 1 and "HTTP 404" in bad.stderr and "ns.nope does not exist" in bad.stderr
    assert "Traceback" not in bad.stderr


def _many_constant_rows(n: int) -> bytes:
    ids, times = pa.array([1] * 100_000, pa.int64()), pa.array([0] * 100_000, pa.timestamp("us"))
    block = pa.table({"id": ids, "ts": times})
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, block.schema) as writer:
        for _ in range(n // 100_000):
            writer.write_table(block)
    return buf.getvalue()


# Inputs that made the server answer 500 (or exhaust its memory): each is a 400 naming the fault.
POISON_UPLOADS = [
    # valid JSON nested 100,000 levels deep (json.loads' RecursionError)
    ("jsonl", b'{"id": 1, "ts": "2026-11-21T10:00:00Z", "msg": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "nested more than 1024 levels"),
    # 6 million rows in a few dozen kilobytes of Parquet: over chunk.max_rows, refused before reading
    ("parquet", _many_constant_rows(6_000_000), "chunk.max_rows"),
]  # fmt: skip


@pytest.mark.parametrize("fmt, content, says", POISON_UPLOADS, ids=[p[0] for p in POISON_UPLOADS])
def test_poison_uploads_are_clear_400s(server: Server, fmt: str, content: bytes, says: str) -> None:
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=60) as http:
        chunk = http.post("/v1/tables/ns/events/chunks", json={}).json()
        up = http.put(f"/v1/chunks/{chunk['id']}/data", content=content, params={"format": fmt})
        assert up.status_code == 400, up.text
        assert up.json()["error"] == "malformed_body" and says in up.json()["message"]
        assert http.get(f"/v1/chunks/{chunk['id']}").json()["state"] == "reserved"  # open for a good upload


def test_made_up_methods_and_paths_add_no_metric_series(server: Server) -> None:
    def series() -> set[str]:
        text = httpx.get(f"{server.url}/metrics").text
        return {line.rsplit(" ", 1)[0] for line in text.splitlines() if line.startswith("streampart_http_")}

    with httpx.Client(base_url=server.url) as http:
        for k in range(40):  # as an anonymous scanner would: no token, odd methods, random paths
            http.request(f"X{k}METHOD", f"/v1/nothing/{k}")
            http.get(f"/v1/chunks/{k}-nope")
        after_some = series()
        for k in range(40, 160):
            http.request(f"X{k}METHOD", f"/v1/nothing/{k}")
            http.get(f"/v1/chunks/{k}-nope")
        after_many = series()
    assert after_many == after_some  # a closed set of labels: more junk, no more series
    assert not any("X1METHOD" in s or "nothing/1" in s for s in after_many)
    assert any('method="other"' in s and 'route="unmatched"' in s for s in after_many)


def test_docs_are_served_without_a_cdn(server: Server) -> None:
    with httpx.Client(base_url=server.url) as http:
        page = http.get("/docs").text
        assert "https://" not in page and "cdn" not in page.lower()
        for asset in ("/docs/static/swagger-ui-bundle.js", "/docs/static/swagger-ui.css"):
            assert asset in page
            got = http.get(asset)
            assert got.status_code == 200 and len(got.content) > 10_000, asset


@pytest.fixture
def guarded(tmp_path: Path):
    """A server whose /metrics wants a token and whose request heads must arrive within 1 s."""
    srv = Server(tmp_path / "wh", f"sqlite:///{tmp_path / 'wh' / '_metastore.sqlite'}", tmp_path)
    make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("admin", "read:ns")
    srv.start(STREAMPART_SERVER__METRICS_REQUIRE_TOKEN="true", STREAMPART_SERVER__HEADER_TIMEOUT="1s")
    yield srv
    srv.close()


@pytest.mark.process
def test_metrics_can_require_a_token(guarded: Server) -> None:
    assert httpx.get(f"{guarded.url}/metrics").status_code == 401
    with_token = httpx.get(f"{guarded.url}/metrics", headers=auth(guarded.admin))
    assert with_token.status_code == 200 and "streampart_http_requests_total" in with_token.text


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes) -> bool:
    """Send ``trickle`` a byte at a time; whether the server closes the connection within ``seconds``."""
    import time

    sock.settimeout(0.2)
    deadline = time.monotonic() + seconds
    for byte in trickle:
        if time.monotonic() > deadline:
            return False
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(1024) == b"":
                return True
        except TimeoutError:
            continue
        except OSError:  # reset by the server
            return True
    return False


@pytest.mark.process
def test_a_request_head_trickled_in_is_cut_off(guarded: Server) -> None:
    host, port = "127.0.0.1", int(guarded.url.rsplit(":", 1)[1])
    slow = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: " + b"a" * 200 + b"\r\n\r\n"
    with socket.create_connection((host, port)) as sock:  # slowloris from the first byte
        assert _closed_within(sock, 6, slow)
    with socket.create_connection((host, port)) as sock:  # one good request, then a trickled one
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"200 OK" in sock.recv(4096)
        assert _closed_within(sock, 6, slow)
    assert httpx.get(f"{guarded.url}/healthz").status_code == 200  # others are served all along


def test_uploads_and_events_report_fields_the_table_lacks(server: Server) -> None:
    rows = [{"id": i, "ts": "2026-11-21T10:00:00Z", "colour": "red"} for i in range(9900, 9903)]
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=30) as http:
        chunk = http.post("/v1/tables/ns/events/chunks", json={}).json()
        up = http.put(f"/v1/chunks/{chunk['id']}/data", content=jsonl_bytes(rows),
                      headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
        assert up.json()["ignored_fields"] == {"colour": 3}
        http.delete(f"/v1/chunks/{chunk['id']}")
        events = http.post("/v1/tables/ns/events/events", json=rows)
        assert events.status_code == 200 and events.json()["ignored_fields"] == {"colour": 3}


def test_events_nested_too_deep_or_with_a_number_too_long_are_400s_naming_the_fault(server: Server) -> None:
    """JSON nested 100,000 deep, or a 5,000-digit integer, in the body or in a Flume event's body
    (and in the body of a chunk's opening): a 400 whose message says which, never a 500 nor a
    traceback in the server's log."""
    ts = '"ts": "2026-11-21T10:00:00Z"'
    deep = "[" * 100_000 + "]" * 100_000
    huge = "9" * 5000
    cases = [
        (deep, "body", "nested more than 1024 levels deep"),
        (f'[{{"id": {huge}, {ts}}}]', "body", "a number of 5000 digits"),
        (json.dumps([{"body": deep}]), "body[0].body", "event 1: body is not JSON: nested more than 1024"),
        (json.dumps([{"body": f'{{"id": {huge}, {ts}}}'}]), "body[0].body", "event 1: body cannot be read: a "
         "number of 5000 digits"),
        (f'[{{"id": 1, {ts}, "msg": {"[" * 1010 + "]" * 1010}}}]', "body[0]", "event 1: nested too deep"),
    ]  # fmt: skip
    table = server.catalog.table("ns.events")
    before, logged = sorted(all_ids(table)), len(server.log.read_text())
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=60) as http:
        for body, field, says in cases:
            r = http.post("/v1/tables/ns/events/events", content=body.encode(),
                          headers={"Content-Type": "application/json"})  # fmt: skip
            assert r.status_code == 400, (says, r.status_code, r.text[:300])
            assert r.json()["error"] == "malformed_body" and r.json()["field"] == field, r.text[:300]
            assert says in r.json()["message"], r.text[:300]
        for body, says in [(deep, "nested too deep"), (f'{{"idempotency_key": {huge}}}', "5000 digits")]:
            r = http.post("/v1/tables/ns/events/chunks", content=body.encode(),
                          headers={"Content-Type": "application/json"})  # fmt: skip
            assert r.status_code == 400 and r.json()["error"] == "malformed_body", r.text[:300]
            assert says in r.json()["message"] and r.json()["field"] == "body", r.text[:300]
    assert sorted(all_ids(table)) == before
    assert "Traceback" not in server.log.read_text()[logged:]


def test_uploads_and_events_report_decimals_they_rounded(server: Server) -> None:
    make_table(server.catalog, "ns.prices", schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2)")
    rows = [{"id": i, "ts": "2026-11-21T10:00:00Z", "amount": a} for i, a in enumerate([9.999, 1.5, "2.345"])]
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=30) as http:
        chunk = http.post("/v1/tables/ns/prices/chunks", json={}).json()
        up = http.put(f"/v1/chunks/{chunk['id']}/data", content=jsonl_bytes(rows),
                      headers={"Content-Type": "application/x-ndjson"})  # fmt: skip
        assert up.status_code == 200 and up.json()["rounded_values"] == {"amount": 2}, up.text
        http.delete(f"/v1/chunks/{chunk['id']}")
        events = http.post("/v1/tables/ns/prices/events", json=rows)
        assert events.status_code == 200 and events.json()["rounded_values"] == {"amount": 2}, events.text
        assert http.post("/v1/tables/ns/prices/events", json=rows[1:2]).json()["rounded_values"] == {}

"""What the HTTP server remembers between requests, and how it learns of changes.

The FastAPI app over a real metastore (SQLite and PostgreSQL), called in process: the tests
count the metastore statements one request makes and move the process's clock
(:func:`metastore.clock.use`) past a TTL instead of sleeping.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from deltalake import DeltaTable
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

from ingest.api.app import create_app
from ingest.api.auth import hash_token, new_token
from ingest.api.config import ServerConfig
from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore import schema as s
from metastore.catalog import Catalog
from metastore.models import Mode, Scope, TableName
from tests.fixtures import make_table

JSONL = {"Content-Type": "application/x-ndjson"}


@pytest.fixture
def moving_clock() -> Iterator[clock.SystemClock]:
    with clock.use(clock.SystemClock()) as c:
        assert isinstance(c, clock.SystemClock)
        yield c


def client(catalog: Catalog, **server: Any) -> tuple[TestClient, dict[str, str]]:
    """The app over ``catalog`` with ``server`` settings, and the headers of a write:ns token."""
    token = new_token()
    catalog.store.create_token(
        f"w{len(catalog.store.list_tokens())}", hash_token(token), [Scope.parse("write:ns")]
    )
    return TestClient(create_app(catalog, ServerConfig(**server))), {"Authorization": f"Bearer {token}"}


def rows(*ids: int, at: datetime | None = None, **extra: Any) -> bytes:
    ts = (at or clock.now()).isoformat()
    return "".join(json.dumps({"id": i, "ts": ts, "msg": "m", **extra}) + "\n" for i in ids).encode()


def write(c: TestClient, h: dict[str, str], body: bytes, table: str = "ns/events") -> Any:
    """Open → upload → commit through the API; the last response."""
    r = c.post(f"/v1/tables/{table}/chunks", headers=h)
    assert r.status_code == 201, r.text
    cid = r.json()["id"]
    r = c.put(f"/v1/chunks/{cid}/data", headers={**h, **JSONL}, content=body)
    if r.status_code != 200:
        return r
    return c.post(f"/v1/chunks/{cid}/commit", headers=h)


def test_a_revoked_token_is_refused_once_the_auth_cache_ttl_has_passed(
    catalog: Catalog, moving_clock: clock.SystemClock
) -> None:
    make_table(catalog)
    c, h = client(catalog, auth_cache_ttl="60s")
    assert c.get("/v1/tables", headers=h).status_code == 200
    name = catalog.store.list_tokens()[0].name
    catalog.store.revoke_token(name)
    # remembered: the revocation has not reached this server yet (at most auth_cache_ttl)
    assert c.get("/v1/tables", headers=h).status_code == 200
    moving_clock.advance(timedelta(seconds=61))
    r = c.get("/v1/tables", headers=h)
    assert r.status_code == 401 and "revoked" in r.json()["message"]


def test_a_dropped_and_recreated_table_is_the_new_table_once_the_ttl_has_passed(
    catalog: Catalog, moving_clock: clock.SystemClock
) -> None:
    table = make_table(catalog)
    c, h = client(catalog, table_cache_ttl="60s")
    assert write(c, h, rows(1)).status_code == 200
    catalog.drop_table(table, force=True)
    # re-created with another column (on SQLite it may even get the old row id back)
    new = make_table(catalog, schema="id BIGINT, ts TIMESTAMP, msg STRING, extra STRING")
    moving_clock.advance(timedelta(seconds=61))
    r = write(c, h, rows(2, extra="x"))
    assert r.status_code == 200, r.text
    assert r.json()["rows"] == 1
    data = DeltaTable(new.location).to_pyarrow_table()
    assert data.column("id").to_pylist() == [2] and data.column("extra").to_pylist() == ["x"]


def test_a_request_that_meets_a_stale_table_looks_it_up_again_at_once(catalog: Catalog) -> None:
    """Within the TTL: the open of a chunk on the dropped table's id fails, and is retried on the new one."""
    table = make_table(catalog)
    c, h = client(catalog, table_cache_ttl="1h")
    assert write(c, h, rows(1)).status_code == 200
    make_table(catalog, "ns.other")  # so the re-created table gets another row id on SQLite too
    catalog.drop_table(table, force=True)
    new = make_table(catalog, schema="id BIGINT, ts TIMESTAMP, msg STRING, extra STRING")
    assert new.id != table.id
    r = write(c, h, rows(2, extra="x"))
    assert r.status_code == 200, r.text
    assert DeltaTable(new.location).to_pyarrow_table().column("extra").to_pylist() == ["x"]
    # dropped for good: a clear 404, not a stale answer
    catalog.drop_table(new, force=True)
    r = c.post("/v1/tables/ns/events/chunks", headers=h)
    assert r.status_code == 404 and "ns.events" in r.json()["message"]


def test_an_altered_table_s_new_setting_is_used_once_the_ttl_has_passed(
    catalog: Catalog, moving_clock: clock.SystemClock
) -> None:
    """A table's setting changed by another process (here max_future, written straight to the
    metastore: no command alters it yet) is what the server applies after the TTL."""
    table = make_table(catalog, mode=Mode.EVENT_TIME, max_future="1d")  # (max-future bounds event time)
    c, h = client(catalog, table_cache_ttl="60s")
    future = clock.now() + timedelta(hours=2)
    assert write(c, h, rows(1, at=future)).status_code == 200
    with catalog.store.engine.begin() as conn:
        conn.execute(sa.update(s.tables).where(s.tables.c.id == table.id).values(max_future_s=60))
    moving_clock.advance(timedelta(seconds=61))
    r = write(c, h, rows(2, at=future + timedelta(seconds=61)))
    assert r.status_code in (400, 422), r.text
    assert "future" in r.json()["message"]


def test_a_commit_request_adds_no_metastore_statement_to_the_commit_itself(catalog: Catalog) -> None:
    """The server's own part of a commit request (its token, chunk and table lookups) is
    remembered: the request runs exactly the statements of ChunkWriter.commit (on SQLite 13, where
    it ran 19 before; the chunk commit path's own statements are another piece of work, so the
    test compares with it rather than with a fixed number)."""
    table = make_table(catalog)
    c, h = client(catalog)
    assert write(c, h, rows(1)).status_code == 200  # the token, the table, the routes: remembered
    catalog.router.refresh_s = 3600  # no periodic route-version read inside a measured call
    seen: list[str] = []

    def count(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    # the commit of a chunk through the API...
    r = c.post("/v1/tables/ns/events/chunks", headers=h)
    cid = r.json()["id"]
    assert c.put(f"/v1/chunks/{cid}/data", headers={**h, **JSONL}, content=rows(2)).status_code == 200
    event.listen(Engine, "before_cursor_execute", count)
    try:
        assert c.post(f"/v1/chunks/{cid}/commit", headers=h).status_code == 200
        by_request = len(seen)
        # ... and the same commit of a chunk staged the same way, called directly
        w = ChunkWriter(catalog, catalog.table(TableName.parse("ns.events")))
        event.remove(Engine, "before_cursor_execute", count)
        chunk = w.reserve()
        w.stage(chunk, rows(3), Format.JSONL)
        seen.clear()
        event.listen(Engine, "before_cursor_execute", count)
        w.commit(chunk.id)
        direct = len(seen)
    finally:
        if event.contains(Engine, "before_cursor_execute", count):
            event.remove(Engine, "before_cursor_execute", count)
    assert by_request == direct, (by_request, direct)
    assert table.id == w.table.id

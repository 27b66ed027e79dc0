"""``PATCH /v1/tables/{ns}/{t}`` (issue 27, plan step 4) on a real server: columns added and widened over
HTTP read back by delta-rs (old rows null, old values exact), the metastore agreeing with the log;
every refusal (a user's mistake, a missing scope, a race with another ALTER) changes nothing."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import httpx
import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta.metadata import schema_at
from metastore.integrity import check_table
from metastore.models import Table, parse_schema
from tests.api.fixtures import Server, auth
from tests.fixtures import make_table
from tests.helpers import jsonl

pytestmark = pytest.mark.process  # a server process of its own

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, qty INT"


def rows(ids: range, **extra: object) -> bytes:
    return jsonl([{"id": i, "ts": "2026-11-21T10:15:00Z", "msg": f"m{i}", "qty": i, **extra} for i in ids])


_made = itertools.count()


def patch(server: Server, table: Table, body: dict[str, Any], token: str | None = None) -> httpx.Response:
    ns, t = table.name.namespace, table.name.table
    return httpx.patch(
        f"{server.url}/v1/tables/{ns}/{t}", json=body, headers=auth(token or server.admin), timeout=60
    )


def table_of(server: Server, name: str) -> Table:
    """A new table ``name<N>`` with SCHEMA and three rows (ids 0..2)."""
    table = make_table(server.catalog, f"{name}{next(_made)}", schema=SCHEMA)
    ChunkWriter(server.catalog, table).write(rows(range(3)), Format.JSONL)
    return table


def unchanged(server: Server, table: Table, version: int) -> None:
    """Nothing changed: not the log, not the metastore's columns, settings or schema history."""
    assert int(DeltaTable(table.location).version()) == version
    now = server.catalog.table(str(table.name))
    assert now.columns == table.columns
    assert (now.schema_evolution, now.max_new_columns) == (table.schema_evolution, table.max_new_columns)
    assert now.retain == table.retain and now.cluster_by == table.cluster_by
    assert server.catalog.home(table).store.schema_changes(table.id) == []


def test_patch_adds_and_widens_and_readers_see_old_rows_null(server: Server) -> None:
    table = table_of(server, "alt.adds")
    body = {"add_columns": ["coupon STRING"], "widen_columns": ["qty BIGINT"],
            "schema_evolution": "add-columns", "max_new_columns": 50}  # fmt: skip
    done = patch(server, table, body)
    assert done.status_code == 200, done.text
    said = done.json()
    assert said["schema_change"]["change"] == "widen qty INT to BIGINT, add coupon STRING"
    assert said["schema_change"]["source"] == "http" and said["schema_change"]["key"]
    assert said["schema"].endswith("qty BIGINT, coupon STRING")
    assert (said["schema_evolution"], said["max_new_columns"]) == ("add-columns", 50)
    assert [c["version"] for c in said["schema_changes"]] == [said["schema_change"]["version"]]
    assert said["version"] == said["schema_change"]["version"]

    table = server.catalog.table(str(table.name))
    assert table.columns == schema_at(Path(table.location))
    assert [(c.name, c.type) for c in table.columns][-2:] == [("qty", "long"), ("coupon", "string")]
    ChunkWriter(server.catalog, table).write(rows(range(3, 5), coupon="SAVE", qty=2**40), Format.JSONL)
    got = DeltaTable(table.location).to_pyarrow_table().sort_by("id").to_pylist()
    assert [r["coupon"] for r in got] == [None, None, None, "SAVE", "SAVE"]
    assert [r["qty"] for r in got] == [0, 1, 2, 2**40, 2**40]
    assert check_table(server.catalog, table) == []
    # GET describes the same
    fetched = httpx.get(
        f"{server.url}/v1/tables/alt/{table.name.table}", headers=auth(server.admin), timeout=60
    ).json()
    assert fetched["schema"] == said["schema"] and fetched["schema_evolution"] == "add-columns"


def test_patch_of_settings_only_makes_no_schema_change(server: Server) -> None:
    table = table_of(server, "alt.settings")
    version = int(DeltaTable(table.location).version())
    done = patch(server, table, {"schema_evolution": "add-and-widen"})
    assert done.status_code == 200, done.text
    assert done.json()["schema_change"] is None and done.json()["schema_evolution"] == "add-and-widen"
    assert int(DeltaTable(table.location).version()) == version


def test_patch_sets_the_retention_and_get_shows_it(server: Server) -> None:
    table = table_of(server, "alt.retained")
    done = patch(server, table, {"retain": "90d"})
    assert done.status_code == 200, done.text
    assert done.json()["retention"]["retain"] == "90d" and done.json()["retention"]["source"] == "table"
    assert server.catalog.table(str(table.name)).retain is not None
    done = patch(server, table, {"retain": "none"})
    assert done.status_code == 200 and done.json()["retention"]["retain"] is None, done.text


def test_patch_sets_and_clears_the_clustering_and_get_shows_it(server: Server) -> None:
    table = table_of(server, "alt.clustered")
    done = patch(server, table, {"cluster_by": "QTY, msg"})
    assert done.status_code == 200 and done.json()["cluster_by"] == ["qty", "msg"], done.text
    assert server.catalog.table(str(table.name)).cluster_by == ("qty", "msg")
    done = patch(server, table, {"cluster_by": "none"})
    assert done.status_code == 200 and done.json()["cluster_by"] == [], done.text


# Each mistake: the status, the field named and what the one-line message says. Nothing changes.
REFUSALS = [
    ({"widen_columns": ["qty SMALLINT"]}, 400, "body", "SMALLINT is narrower than INT"),
    ({"widen_columns": ["msg INT"]}, 400, "body", "STRING to INT changes the kind of the column"),
    ({"add_columns": ["ts_period STRING"]}, 400, "body", "is the partition column's name"),
    ({"add_columns": ["MSG STRING"]}, 400, "body", "only in case"),
    # names Spark's reads give a meaning (any case): one among good ones refuses them all
    ({"add_columns": ["coupon STRING", "_Metadata STRING"]}, 400, "body", "'_Metadata' is reserved"),
    ({"add_columns": ["__sp_file STRING"]}, 400, "body", "'__sp_file' is reserved"),
    ({"add_columns": ["coupon"]}, 400, "add_columns", "add_columns 'coupon'"),
    ({"widen_columns": ["qty BIGINT, n INT"]}, 400, "widen_columns", "give one column"),
    ({"schema_evolution": "sometimes"}, 400, "schema_evolution", "give one of none, add-columns"),
    ({"max_new_columns": -1}, 422, "max_new_columns", "greater than or equal to 0"),
    ({"add_column": ["coupon STRING"]}, 422, "add_column", "Extra inputs are not permitted"),
    ({}, 400, "body", "nothing to change"),
    ({"retain": "30m"}, 400, "retain", "retain 30m is shorter than"),
    ({"retain": "soon"}, 400, "retain", "retain 'soon' is not a duration"),
    ({"cluster_by": "qty, nope"}, 400, "cluster_by", "cluster_by: 'nope' is not a column of the table"),
    ({"cluster_by": ""}, 400, "cluster_by", "give one or more column names"),
    # a bad clustering stops the column change too
    ({"add_columns": ["coupon STRING"], "cluster_by": "qty,qty"}, 400, "cluster_by", "'qty' is named twice"),
    # a bad retention stops the column change too
    ({"add_columns": ["coupon STRING"], "retain": "1m"}, 400, "retain", "shorter than"),
    # a bad setting stops the column change too
    ({"add_columns": ["coupon STRING"], "schema_evolution": "x"}, 400, "schema_evolution", "give one of"),
]


@pytest.mark.parametrize(("body", "status", "field", "error"), REFUSALS)
def test_a_mistake_is_one_error_naming_it_and_changes_nothing(
    server: Server, body: dict[str, Any], status: int, field: str, error: str
) -> None:
    table = table_of(server, "alt.refused")
    version = int(DeltaTable(table.location).version())
    done = patch(server, table, body)
    assert done.status_code == status, done.text
    answer = done.json()
    assert answer["field"] == field and error in answer["message"], answer
    assert "\n" not in answer["message"]
    unchanged(server, table, version)


def test_a_token_without_admin_scope_is_refused_and_changes_nothing(server: Server) -> None:
    table = table_of(server, "alt.scoped")
    version = int(DeltaTable(table.location).version())
    for scopes in (("read:alt",), ("write:alt",), ("admin:other",)):
        token = server.token(f"alt-{scopes[0].replace(':', '-')}", *scopes)
        done = patch(server, table, {"add_columns": ["coupon STRING"]}, token)
        assert done.status_code == 403, (scopes, done.text)
    unchanged(server, table, version)


def test_a_race_with_another_alter_is_409_and_changes_nothing(server: Server) -> None:
    table = table_of(server, "alt.raced")
    version = int(DeltaTable(table.location).version())
    # another ALTER has recorded its change and not yet committed it (it is running)
    store = server.catalog.home(table).store
    after = [*table.columns, *parse_schema("other STRING")]
    store.record_schema_change(table.id, "theirs", table.columns, after, "alter")
    done = patch(server, table, {"add_columns": ["coupon STRING"]})
    assert done.status_code == 409, done.text
    assert done.json()["error"] == "schema_conflict" and "in progress" in done.json()["message"]
    assert int(DeltaTable(table.location).version()) == version
    assert server.catalog.table(str(table.name)).columns == table.columns
    assert [c.key for c in store.schema_changes(table.id)] == ["theirs"]


def test_evolving_tables_take_new_fields_over_the_events_and_chunk_endpoints(server: Server) -> None:
    """Schema evolution from data (issue 27, step 6) over HTTP: an events batch and an uploaded chunk
    bring fields the table lacks; each answer names its new columns, and delta-rs reads them."""
    table = table_of(server, "alt.evolving")
    assert patch(server, table, {"schema_evolution": "add-columns"}).status_code == 200
    ns, t = table.name.namespace, table.name.table
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=60) as http:
        events = http.post(
            f"/v1/tables/{ns}/{t}/events", json=[{"id": 3, "ts": "2026-11-21T10:15:00Z", "coupon": "X"}]
        )
        assert events.status_code == 200, events.text
        assert events.json()["new_columns"] == {"coupon": "STRING"}
        chunk = http.post(f"/v1/tables/{ns}/{t}/chunks", json={}).json()
        upload = http.put(
            f"/v1/chunks/{chunk['id']}/data",
            content=rows(range(4, 6), tier=2),
            headers={"Content-Type": "application/x-ndjson"},
        )
        assert upload.status_code == 200, upload.text
        assert upload.json()["new_columns"] == {"tier": "BIGINT"}
        assert http.post(f"/v1/chunks/{chunk['id']}/commit").status_code == 200
    found = sorted(DeltaTable(table.location).to_pyarrow_table().to_pylist(), key=lambda r: r["id"])
    assert [(r["id"], r["coupon"], r["tier"]) for r in found] == [
        (0, None, None), (1, None, None), (2, None, None), (3, "X", None), (4, None, 2), (5, None, 2),
    ]  # fmt: skip
    stored = server.catalog.table(str(table.name))
    assert stored.columns == schema_at(Path(table.location)) and check_table(server.catalog, stored) == []


def test_a_chunk_uploaded_before_another_writer_added_its_field_as_another_type_is_409_then_lands(
    server: Server,
) -> None:
    """Issue 27: the chunk protocol's commit answers 409 ``schema_conflict`` (nothing committed, the
    chunk open again) for a chunk staged before another writer added one of its new fields as
    another type; uploaded again under its key, it is parsed as the table is now and lands."""
    from ingest.client import Client
    from ingest.errors import ApiRequestError

    table = table_of(server, "alt.clash")
    assert patch(server, table, {"schema_evolution": "add-columns"}).status_code == 200
    name = str(table.name)
    body = rows(range(10, 12), coupon=7)  # coupon as BIGINT
    with Client(server.url, server.admin) as api:
        chunk = api.open_chunk(name, "k-clash")
        api.upload(chunk["id"], body)
        api.write(name, rows(range(20, 21), coupon="text"))  # coupon STRING lands first
        with pytest.raises(ApiRequestError) as refused:
            api.commit(chunk["id"])
        assert (refused.value.status, refused.value.code) == (409, "schema_conflict")
        assert "coupon" in str(refused.value)
        done = api.write(name, body, idempotency_key="k-clash")  # the same key: uploaded again
    assert done["chunk"] == chunk["id"] and done["rows"] == 2
    found = {r["id"]: r["coupon"] for r in DeltaTable(table.location).to_pyarrow_table().to_pylist()}
    assert {i: found[i] for i in (10, 11, 20)} == {10: "7", 11: "7", 20: "text"}


def test_patch_gives_an_empty_table_a_primary_key_and_http_writes_keep_one_row_per_key(
    server: Server,
) -> None:
    """``primary_key`` on an empty table (``--primary-key``'s PATCH); then the events and chunk endpoints
    write versions of keys, and delta-rs reads one row per key once they are rolled. A table with
    rows is refused, naming why, and changes nothing."""
    from scheduler.roll import Roller

    table = make_table(server.catalog, f"alt.keyed{next(_made)}", schema=SCHEMA)
    done = patch(server, table, {"primary_key": "id", "sequence_by": "qty"})
    assert done.status_code == 200, done.text
    assert done.json()["keys"]["columns"] == ["id"] and done.json()["keys"]["sequence_by"] == "qty"
    ns, t = table.name.namespace, table.name.table
    ts = "2026-11-21T10:15:00Z"
    with httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=60) as http:
        events = [{"id": 1, "ts": ts, "msg": "new", "qty": 2}, {"id": 1, "ts": ts, "msg": "old", "qty": 1}]
        assert http.post(f"/v1/tables/{ns}/{t}/events", json=events).status_code == 200
        chunk = http.post(f"/v1/tables/{ns}/{t}/chunks", json={}).json()
        content = jsonl(
            [{"id": 2, "ts": ts, "msg": "b", "qty": 5}, {"id": 1, "ts": ts, "msg": "older", "qty": 0}]
        )
        upload = http.put(
            f"/v1/chunks/{chunk['id']}/data",
            params={"commit": "true"},
            content=content,
            headers={"Content-Type": "application/x-ndjson"},
        )
        assert upload.status_code == 200, upload.text
        null_key = http.post(
            f"/v1/tables/{ns}/{t}/events", json=[{"id": None, "ts": ts, "msg": "x", "qty": 1}]
        )
        assert null_key.status_code == 400 and "'id' is required" in null_key.text, null_key.text
    Roller(server.catalog).roll_table(server.catalog.table(str(table.name)), force=True)
    found = sorted((r["id"], r["msg"]) for r in DeltaTable(table.location).to_pyarrow_table().to_pylist())
    assert found == [(1, "new"), (2, "b")]  # by qty: the first event's version is the newest of key 1

    full = table_of(server, "alt.full")
    version = int(DeltaTable(full.location).version())
    refused = patch(server, full, {"primary_key": "id"})
    assert refused.status_code == 400 and refused.json()["field"] == "primary_key", refused.text
    assert "holds rows" in refused.json()["message"]
    unchanged(server, full, version)
    assert server.catalog.table(str(full.name)).keys is None

"""The Iceberg REST catalog, through a client nobody here wrote: pyiceberg's ``RestCatalog`` (and
polars reading through it), against a real ``streampart serve``.

Every table kind loads and scans to exactly what ``streampart query`` (Spark, in this process, over
its own catalog) answers at the same Delta version — the Iceberg snapshot id. Scopes and revocation
hold on every call; a load racing commits and a roll always sees one whole Delta version.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError, NoSuchTableError, OAuthError

from ingest.api.auth import hash_token, new_token
from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore.models import Scope
from scheduler.roll import Roller
from streampart.query import run_sql
from tests.api.fixtures import auth
from tests.catalogs.helpers import Shop, jsonl, orders, rows_of
from tests.helpers import delta_rows

pytestmark = pytest.mark.timeout(600)


def rest(srv_url: str, token: str, **kw: str) -> RestCatalog:
    return RestCatalog("streampart", uri=f"{srv_url}/iceberg", token=token, **kw)


def spark_rows(spark, shop: Shop, name: str, version: int, columns: list[str]):
    sql = f"SELECT {', '.join(columns)} FROM {name} VERSION AS OF {version}"
    return rows_of(run_sql(spark, shop.server.catalog, sql).toArrow(), columns)


def test_every_kind_of_table_scans_to_what_a_query_answers_at_its_version(spark, shop: Shop) -> None:
    cat = rest(shop.server.url, shop.reader)
    assert cat.list_namespaces() == [("sales",)]
    assert sorted(cat.list_tables("sales")) == [
        ("sales", "accounts"),
        ("sales", "evolved"),
        ("sales", "orders"),
        ("sales", "remote"),
    ]
    for name in ("sales.orders", "sales.evolved", "sales.remote", "sales.accounts"):
        table = cat.load_table(name)
        version = table.metadata.current_snapshot_id
        assert version is not None and version > 0
        columns = [f.name for f in table.schema().fields]
        got = rows_of(table.scan().to_arrow(), columns)
        assert got, name
        if name == "sales.accounts":
            continue  # below: a keyed table shows its resolved rows only
        assert got == spark_rows(spark, shop, name, version, columns), name

    # the evolved table: rows written before the column was added read it as null, the widened one
    # reads as long; each schema change is a schema of the table's metadata
    evolved = cat.load_table("sales.evolved")
    assert [str(f.field_type) for f in evolved.schema().fields] == [
        "long",
        "timestamptz",
        "long",
        "timestamptz",
        "string",
    ]
    assert [f.name for f in evolved.schema().fields][-1] == "extra"
    assert len(evolved.metadata.schemas) == 1  # loaded first at its newest version: one schema so far

    # a link shows the partitions it admits (standard ones): not the source's open chunk
    remote = cat.load_table("sales.remote").scan().to_arrow()
    assert sorted(remote.column("id").to_pylist()) == [0, 1, 2, 3]


def test_a_keyed_table_shows_its_resolved_rows_which_a_query_answered_at_its_roll(spark, shop: Shop) -> None:
    cat = rest(shop.server.url, shop.reader)
    table = cat.load_table("sales.accounts")
    columns = [f.name for f in table.schema().fields]
    got = rows_of(table.scan().to_arrow(), columns)
    store = shop.server.catalog
    t = store.table("sales.accounts")
    [roll] = store.home(t).store.list_rolls(t.id)
    assert roll.sweep_version is not None
    # what the query answered right after the roll: one row per key, 2 updated
    assert got == spark_rows(spark, shop, "sales.accounts", roll.sweep_version, columns)
    by_id = {r[0]: r for r in got}
    assert sorted(by_id) == [0, 1, 2, 3, 4, 5] and by_id[2][2] == 999
    # the open upsert of 3 and delete of 4 are not shown until they roll: now they are in the query
    now = rows_of(
        run_sql(spark, store, f"SELECT {', '.join(columns)} FROM sales.accounts").toArrow(), columns
    )
    assert now != got and 4 not in {r[0] for r in now}


def test_a_filter_skips_files_by_their_statistics_and_answers_as_the_query_does(spark, shop: Shop) -> None:
    table = rest(shop.server.url, shop.reader).load_table("sales.orders")
    version = table.metadata.current_snapshot_id
    assert version is not None
    every = list(table.scan().plan_files())
    picked = list(table.scan(row_filter="id >= 20").plan_files())
    assert 0 < len(picked) < len(every)  # the rolled partition's file holds ids 0..19: skipped
    columns = ["id", "note", "amount"]
    got = rows_of(table.scan(row_filter="id >= 20", selected_fields=tuple(columns)).to_arrow(), columns)
    sql = f"SELECT {', '.join(columns)} FROM sales.orders VERSION AS OF {version} WHERE id >= 20"
    assert got == rows_of(run_sql(spark, shop.server.catalog, sql).toArrow(), columns)
    assert [r[0] for r in got] == [20, 21, 22, 23, 24]


def test_polars_reads_through_the_catalog(shop: Shop) -> None:
    import polars as pl

    table = rest(shop.server.url, shop.reader).load_table("sales.orders")
    version = table.metadata.current_snapshot_id
    frame = pl.scan_iceberg(table).collect().to_arrow()
    # polars' answer against delta-rs reading the same version's log and files
    expected = delta_rows(shop.server.catalog.table("sales.orders"), version, "id, note, qty")
    assert rows_of(frame, ["id", "note", "qty"]) == rows_of(expected, ["id", "note", "qty"])


def test_oauth_client_credentials_give_the_token_and_nothing_else(shop: Shop) -> None:
    cat = RestCatalog("streampart", uri=f"{shop.server.url}/iceberg", credential=f"reader:{shop.reader}")
    assert cat.list_namespaces() == [("sales",)]
    with pytest.raises(OAuthError, match="invalid_client"):
        RestCatalog("streampart", uri=f"{shop.server.url}/iceberg", credential=f"x:{new_token()}")
    answer = httpx.post(
        f"{shop.server.url}/iceberg/v1/oauth/tokens", data={"grant_type": "password", "username": "a"}
    )
    assert answer.status_code == 400 and answer.json()["error"] == "unsupported_grant_type"
    brief = new_token()
    shop.server.catalog.store.create_token(
        "oauth-brief",
        hash_token(brief),
        [Scope.parse("read:sales")],
        expires_at=clock.now() + timedelta(minutes=2),
    )
    granted = httpx.post(
        f"{shop.server.url}/iceberg/v1/oauth/tokens",
        data={"grant_type": "client_credentials", "client_id": "oauth-brief", "client_secret": brief},
    )
    assert granted.status_code == 200 and 100 <= granted.json()["expires_in"] <= 120


def test_a_token_sees_nothing_of_another_namespace_and_a_revoked_one_nothing_at_all(shop: Shop) -> None:
    outsider = rest(shop.server.url, shop.other)
    assert outsider.list_namespaces() == [("other",)]
    assert outsider.list_tables("other") == [("other", "src")]
    for call in (
        lambda: outsider.load_table("sales.orders"),
        lambda: outsider.list_tables("sales"),
        lambda: outsider.load_table("sales.nosuch"),  # 403 before 404: nothing of sales shows
    ):
        with pytest.raises(ForbiddenError):
            call()
    reader = rest(shop.server.url, shop.reader)
    with pytest.raises(NoSuchTableError):
        reader.load_table("sales.nosuch")
    # writes are refused: the catalog is read-only
    answer = httpx.post(
        f"{shop.server.url}/iceberg/v1/namespaces", json={"namespace": ["x"]}, headers=auth(shop.reader)
    )
    assert answer.status_code == 405 and answer.json()["error"]["type"] == "NotAllowedException"

    # revoked: refused on the very next call, though this server remembers other lookups for a minute
    doomed = shop.server.token("doomed", "read:sales")
    cat = rest(shop.server.url, doomed)
    assert cat.list_namespaces() == [("sales",)]
    shop.server.catalog.store.revoke_token("doomed")
    answer = httpx.get(f"{shop.server.url}/iceberg/v1/namespaces", headers=auth(doomed))
    assert answer.status_code == 401 and answer.json()["error"]["type"] == "NotAuthorizedException"


def test_an_expired_token_is_refused(shop: Shop) -> None:
    token = new_token()
    shop.server.catalog.store.create_token(
        "brief", hash_token(token), [Scope.parse("read:sales")], expires_at=clock.now() + timedelta(seconds=2)
    )
    assert httpx.get(f"{shop.server.url}/iceberg/v1/namespaces", headers=auth(token)).status_code == 200
    time.sleep(2.2)
    assert httpx.get(f"{shop.server.url}/iceberg/v1/namespaces", headers=auth(token)).status_code == 401


def test_loads_racing_commits_and_a_roll_each_see_one_whole_version(shop: Shop) -> None:
    """A writer commits chunks and the roll daemon's roll runs while a client loads and scans again and
    again: every scan holds exactly the rows of the Delta version it names (delta-rs reading that
    version's log and files), never a partition half rolled (rows twice, or missing)."""
    store = shop.server.catalog
    from tests.fixtures import make_table

    t = make_table(store, "sales.busy", schema="id BIGINT, ts TIMESTAMP, note STRING")
    w = ChunkWriter(store, t)
    w.write(jsonl([{"id": -1, "ts": "2026-11-21T10:00:00Z", "note": "first"}]), Format.JSONL, key="b0")
    stop = threading.Event()
    failures: list[BaseException] = []

    def write() -> None:
        try:
            k = 0
            while not stop.is_set() and k < 60:
                w.write(orders(range(k * 5, k * 5 + 5)), Format.JSONL, key=f"b{k + 1}")
                if k == 10:
                    Roller(store).roll_table(t, force=True)
                k += 1
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    cat = rest(shop.server.url, shop.reader)
    seen: set[int] = set()
    try:
        while writer.is_alive() or len(seen) < 3:
            table = cat.load_table("sales.busy")
            version = table.metadata.current_snapshot_id
            assert version is not None
            ids = sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist())
            assert len(ids) == len(set(ids)), f"rows twice at version {version}"
            assert ids == sorted(
                delta_rows(store.table("sales.busy"), version, "id").column("id").to_pylist()
            )
            seen.add(version)
            if not writer.is_alive() and len(seen) >= 3:
                break
    finally:
        stop.set()
        writer.join()
    assert not failures, failures
    assert len(seen) >= 3
    [roll] = store.home(t).store.list_rolls(t.id)
    assert roll.sweep_version is not None


def test_catalog_loads_are_counted_in_metrics_and_shown_on_the_status_page(shop: Shop) -> None:
    from scheduler.status_page.render import body

    loaded = rest(shop.server.url, shop.reader).load_table("sales.orders")
    text = httpx.get(f"{shop.server.url}/metrics", headers=auth(shop.server.admin)).text
    assert 'streampart_catalog_loads_total{protocol="iceberg"}' in text
    status = httpx.get(f"{shop.server.url}/ui/status.json", headers=auth(shop.reader)).json()
    [orders_status] = [t for t in status["tables"] if t["table"] == "sales.orders"]
    assert orders_status["iceberg"]["version"] == loaded.metadata.current_snapshot_id
    assert 'data-field="iceberg-version">' in body(status)


def test_snapshots_of_earlier_loads_stay_readable_and_a_schema_change_is_a_new_schema(
    spark, shop: Shop
) -> None:
    """Each load at a new version adds a snapshot (its id the Delta version); the snapshot log holds
    only an unbroken run of versions (a reader's time travel by time never lands on a version that
    was not the table's state then); a column added is a new schema, older snapshots keep theirs."""
    from metastore.models import Column
    from tests.fixtures import make_table

    store = shop.server.catalog
    t = make_table(store, "sales.history", schema="id BIGINT, ts TIMESTAMP")
    w = ChunkWriter(store, t)
    w.write(jsonl([{"id": 1, "ts": "2026-11-21T10:00:00Z"}]), Format.JSONL, key="h1")
    cat = rest(shop.server.url, shop.reader)
    first = cat.load_table("sales.history")
    v1 = first.metadata.current_snapshot_id
    w.write(jsonl([{"id": 2, "ts": "2026-11-21T10:00:00Z"}]), Format.JSONL, key="h2")
    second = cat.load_table("sales.history")
    v2 = second.metadata.current_snapshot_id
    assert v1 is not None and v2 == v1 + 1
    assert [e.snapshot_id for e in second.metadata.snapshot_log] == [v1, v2]  # an unbroken run
    assert second.scan(snapshot_id=v1).to_arrow().column("id").to_pylist() == [1]
    assert second.scan(snapshot_id=v1).to_arrow().column("id").to_pylist() == [
        r["id"] for r in run_sql(spark, store, f"SELECT id FROM sales.history VERSION AS OF {v1}").collect()
    ]

    store.schemas.alter(t, add=[Column(name="extra", type="string")])
    t = store.table("sales.history")
    ChunkWriter(store, t).write(
        jsonl([{"id": 3, "ts": "2026-11-21T10:00:00Z", "extra": "x"}]), Format.JSONL, key="h3"
    )
    third = cat.load_table("sales.history")
    v3 = third.metadata.current_snapshot_id
    assert v3 is not None and v3 > v2 + 1  # the schema change's commit (v2 + 1) was never loaded
    assert [e.snapshot_id for e in third.metadata.snapshot_log] == [v3]  # the run broke: restarted
    assert {s.snapshot_id for s in third.metadata.snapshots} == {v1, v2, v3}
    assert len(third.metadata.schemas) == 2
    old, new = (third.metadata.snapshot_by_id(v) for v in (v2, v3))
    assert old is not None and new is not None and old.schema_id != new.schema_id
    rows = {r["id"]: r["extra"] for r in third.scan().to_arrow().to_pylist()}
    assert rows == {1: None, 2: None, 3: "x"}
    assert sorted(third.scan(snapshot_id=v2).to_arrow().column("id").to_pylist()) == [1, 2]

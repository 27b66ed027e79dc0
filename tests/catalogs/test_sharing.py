"""Delta Sharing, through a client nobody here wrote: the ``delta-sharing`` Python client, run from
its own virtualenv (.venv-sharing: it pins an older pyarrow), against a real ``streampart serve``.

Every shared table loads to exactly what ``streampart query`` answers at the version the server
names; changes are each commit's rows once; scopes, revocation, expiry and forged URLs are refused.
"""

from __future__ import annotations

import io
import json
import string
import subprocess
import threading
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pyarrow.parquet as pq
import pytest

from ingest.api.auth import hash_token, new_token
from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import clock
from metastore.models import Scope, TableName
from scheduler.roll import Roller
from streampart.query import run_sql
from tests.api.fixtures import auth
from tests.catalogs.helpers import Shop, jsonl, orders, rows_of
from tests.fixtures import make_table
from tests.helpers import delta_rows

ROOT = Path(__file__).resolve().parents[2]
CLIENT_PYTHON = ROOT / ".venv-sharing" / "bin" / "python"
CLIENT = Path(__file__).with_name("sharing_client.py")

pytestmark = [pytest.mark.timeout(600), pytest.mark.process]


def write_profile(path: Path, url: str, token: str) -> str:
    path.write_text(
        json.dumps({"shareCredentialsVersion": 1, "endpoint": f"{url}/delta-sharing", "bearerToken": token})
    )
    return str(path)


def client(*steps: dict[str, Any]) -> list[Any]:
    """The answers of the Delta Sharing client to ``steps`` (see tests/catalogs/sharing_client.py)."""
    assert CLIENT_PYTHON.exists(), "the Delta Sharing client's virtualenv is missing: run `make setup`"
    done = subprocess.run(
        [str(CLIENT_PYTHON), str(CLIENT), json.dumps(list(steps))],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    answers: list[Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answers


@pytest.fixture(scope="module")
def shared(shop: Shop, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Share ``partners`` (every table kind of ``sales``, and ``other.src``) and ``secret`` (``other.src``
    only); a profile for each token of the shop."""
    store = shop.server.catalog.primary
    store.create_share("partners")
    for name in ("sales.orders", "sales.evolved", "sales.accounts", "sales.remote", "other.src"):
        store.share_table("partners", TableName.parse(name))
    store.create_share("secret")
    store.share_table("secret", TableName.parse("other.src"))
    tmp = tmp_path_factory.mktemp("profiles")
    yield {
        "reader": write_profile(tmp / "reader.share", shop.server.url, shop.reader),
        "other": write_profile(tmp / "other.share", shop.server.url, shop.other),
        "dir": str(tmp),
    }


def test_a_recipient_lists_only_what_its_scopes_read(shop: Shop, shared: dict[str, str]) -> None:
    reader, other = shared["reader"], shared["other"]
    answers = client(
        {"op": "shares", "profile": reader},
        {"op": "all_tables", "profile": reader},
        {"op": "schemas", "profile": reader, "share": "partners"},
        {"op": "shares", "profile": other},
        {"op": "all_tables", "profile": other},
    )
    assert answers[0] == ["partners"]  # "secret" holds nothing of sales
    assert answers[1] == [f"partners.sales.{t}" for t in ("accounts", "evolved", "orders", "remote")]
    assert answers[2] == ["sales"]
    assert answers[3] == ["partners", "secret"]
    assert answers[4] == ["partners.other.src", "secret.other.src"]


def test_every_shared_table_loads_to_what_a_query_answers_at_its_version(
    spark, shop: Shop, shared: dict[str, str]
) -> None:
    out = Path(shared["dir"])
    steps: list[dict[str, Any]] = []
    names = ("orders", "evolved", "remote", "accounts")
    for name in names:
        steps.append({"op": "version", "profile": shared["reader"], "table": f"partners.sales.{name}"})
        steps.append(
            {
                "op": "load",
                "profile": shared["reader"],
                "table": f"partners.sales.{name}",
                "out": str(out / f"{name}.parquet"),
            }
        )
    answers = client(*steps)
    for i, name in enumerate(names):
        version, loaded = answers[2 * i], answers[2 * i + 1]
        assert isinstance(version, int), version
        assert "error" not in loaded, loaded
        frame = pq.read_table(out / f"{name}.parquet")
        columns = loaded["columns"]
        got = rows_of(frame, columns)
        if name == "accounts":  # resolved rows: what the query answered at the roll
            t = shop.server.catalog.table("sales.accounts")
            [roll] = shop.server.catalog.home(t).store.list_rolls(t.id)
            version = roll.sweep_version
        sql = f"SELECT {', '.join(columns)} FROM sales.{name} VERSION AS OF {version}"
        assert got == rows_of(run_sql(spark, shop.server.catalog, sql).toArrow(), columns), name


def test_time_travel_limit_and_predicate_hints(spark, shop: Shop, shared: dict[str, str]) -> None:
    out = Path(shared["dir"])
    table = "partners.sales.orders"
    hint = {
        "op": "greaterThanOrEqual",
        "children": [
            {"op": "column", "name": "id", "valueType": "long"},
            {"op": "literal", "value": "20", "valueType": "long"},
        ],
    }
    answers = client(
        {
            "op": "load",
            "profile": shared["reader"],
            "table": table,
            "version": 1,
            "out": str(out / "v1.parquet"),
        },
        {
            "op": "load",
            "profile": shared["reader"],
            "table": table,
            "limit": 3,
            "out": str(out / "limit.parquet"),
        },
        {
            "op": "load",
            "profile": shared["reader"],
            "table": table,
            "jsonPredicateHints": json.dumps(hint),
            "out": str(out / "hint.parquet"),
        },
        {
            "op": "load",
            "profile": shared["reader"],
            "table": table,
            "version": 10_000,
            "out": str(out / "x.parquet"),
        },
    )
    assert all("error" not in a for a in answers[:3]), answers
    v1 = rows_of(pq.read_table(out / "v1.parquet"), ["id", "note"])
    assert v1 == rows_of(
        run_sql(spark, shop.server.catalog, "SELECT id, note FROM sales.orders VERSION AS OF 1").toArrow(),
        ["id", "note"],
    )
    assert [r[0] for r in v1] == list(range(10))
    assert len(pq.read_table(out / "limit.parquet")) == 3
    # the rolled partition's file (ids 0..19) is left out by its statistics; the open one holds 20..24
    assert sorted(pq.read_table(out / "hint.parquet").column("id").to_pylist()) == [20, 21, 22, 23, 24]
    assert answers[3]["status"] == 400 and "no version 10000" in answers[3]["error"]


def test_changes_are_each_commits_rows_once_and_rolls_add_none(shop: Shop, shared: dict[str, str]) -> None:
    out = Path(shared["dir"])
    answers = client(
        {
            "op": "changes",
            "profile": shared["reader"],
            "table": "partners.sales.orders",
            "starting_version": 1,
            "out": str(out / "changes.parquet"),
        },
        {
            "op": "changes",
            "profile": shared["reader"],
            "table": "partners.sales.remote",
            "starting_version": 1,
            "out": str(out / "x.parquet"),
        },
        {
            "op": "changes",
            "profile": shared["reader"],
            "table": "partners.sales.accounts",
            "starting_version": 1,
            "out": str(out / "y.parquet"),
        },
    )
    assert "error" not in answers[0], answers[0]
    changes = pq.read_table(out / "changes.parquet").to_pylist()
    assert sorted(r["id"] for r in changes) == list(range(25))  # each row once: the roll moved, added none
    assert {r["_change_type"] for r in changes} == {"insert"}
    by_version: dict[int, list[int]] = {}
    for r in changes:
        by_version.setdefault(r["_commit_version"], []).append(r["id"])
    assert sorted(sorted(v) for v in by_version.values()) == [
        list(range(0, 10)),
        list(range(10, 20)),
        list(range(20, 25)),
    ]
    assert answers[1]["status"] == 400 and "link" in answers[1]["error"]
    assert answers[2]["status"] == 400 and "keyed" in answers[2]["error"]


def query_files(
    url: str, token: str, table: str, body: dict[str, Any] | None = None
) -> tuple[int, list[dict[str, Any]]]:
    answer = httpx.post(
        f"{url}/delta-sharing/shares/partners/schemas/sales/tables/{table}/query",
        json=body or {},
        headers=auth(token),
        timeout=60,
    )
    assert answer.status_code == 200, answer.text
    lines = [json.loads(x) for x in answer.text.splitlines()]
    return int(answer.headers["Delta-Table-Version"]), [x["file"] for x in lines[2:]]


def test_another_namespace_a_revoked_or_expired_token_and_a_forged_url_get_nothing(
    shop: Shop, shared: dict[str, str]
) -> None:
    url = shop.server.url
    base = f"{url}/delta-sharing/shares/partners/schemas/sales/tables/orders"
    # other's token: sales is not there for it
    assert httpx.post(f"{base}/query", json={}, headers=auth(shop.other)).status_code == 404
    assert (
        httpx.get(f"{url}/delta-sharing/shares/secret/all-tables", headers=auth(shop.reader)).status_code
        == 404
    )
    assert httpx.get(f"{url}/delta-sharing/shares", headers={}).json()["errorCode"] == "UNAUTHENTICATED"

    doomed = shop.server.token("sharing-doomed", "read:sales")
    _, files = query_files(url, doomed, "orders")
    file_url = files[0]["url"]
    assert httpx.get(file_url).status_code == 200
    ranged = httpx.get(file_url, headers={"Range": "bytes=0-3"})
    assert ranged.status_code == 206 and ranged.content == b"PAR1"
    # a URL changed by one character, or naming another file, is refused
    _ticket, _, signature = file_url.rsplit("/", 1)[1].partition(".")
    forged = file_url.replace(signature, signature[:-1] + ("A" if signature[-1] != "A" else "B"))
    assert httpx.get(forged).status_code == 403
    # ... as is one whose last character differs only in the bits base64 leaves spare there (it
    # decodes to the same bytes as the original)
    alphabet = string.ascii_uppercase + string.ascii_lowercase + string.digits + "-_"
    spare = alphabet[alphabet.index(signature[-1]) ^ 1]
    assert httpx.get(file_url.replace(signature, signature[:-1] + spare)).status_code == 403
    shop.server.catalog.store.revoke_token("sharing-doomed")
    assert httpx.get(file_url).status_code == 401  # at once: its token is checked on each fetch
    assert httpx.post(f"{base}/query", json={}, headers=auth(doomed)).status_code == 401

    brief = new_token()
    shop.server.catalog.store.create_token(
        "sharing-brief",
        hash_token(brief),
        [Scope.parse("read:sales")],
        expires_at=clock.now() + timedelta(seconds=2),
    )
    assert httpx.get(f"{url}/delta-sharing/shares", headers=auth(brief)).status_code == 200
    import time

    time.sleep(2.2)
    assert httpx.get(f"{url}/delta-sharing/shares", headers=auth(brief)).status_code == 401


def test_queries_racing_commits_and_a_roll_each_answer_one_whole_version(
    shop: Shop, shared: dict[str, str]
) -> None:
    """Every query's files, fetched through their URLs, hold exactly the rows of the version it names
    (delta-rs reading that version): never a partition half rolled."""
    store = shop.server.catalog
    t = make_table(store, "sales.race", schema="id BIGINT, ts TIMESTAMP, note STRING")
    store.primary.share_table("partners", TableName.parse("sales.race"))
    w = ChunkWriter(store, t)
    w.write(jsonl([{"id": -1, "ts": "2026-11-21T10:00:00Z", "note": "first"}]), Format.JSONL, key="r0")
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for k in range(40):
                w.write(orders(range(k * 5, k * 5 + 5)), Format.JSONL, key=f"r{k + 1}")
                if k == 8:
                    Roller(store).roll_table(t, force=True)
        except BaseException as exc:
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    seen: set[int] = set()
    while writer.is_alive() or len(seen) < 2:
        version, files = query_files(shop.server.url, shop.reader, "race")
        ids: list[int] = []
        for f in files:
            ids += pq.read_table(io.BytesIO(httpx.get(f["url"]).content)).column("id").to_pylist()
        assert len(ids) == len(set(ids)), f"rows twice at version {version}"
        assert sorted(ids) == sorted(
            delta_rows(store.table("sales.race"), version, "id").column("id").to_pylist()
        )
        seen.add(version)
    writer.join()
    assert not failures, failures
    assert len(seen) >= 2


def test_sharing_reads_are_counted_in_metrics_and_shares_shown_on_the_status_page(
    shop: Shop, shared: dict[str, str]
) -> None:
    from scheduler.status_page.render import body

    query_files(shop.server.url, shop.reader, "orders")
    text = httpx.get(f"{shop.server.url}/metrics", headers=auth(shop.server.admin)).text
    assert 'streampart_catalog_loads_total{protocol="delta-sharing"}' in text
    assert 'streampart_catalog_file_reads_total{protocol="delta-sharing"}' in text
    status = httpx.get(f"{shop.server.url}/ui/status.json", headers=auth(shop.other)).json()
    assert {s["share"]: s["tables"] for s in status["shares"]} == {
        "partners": ["other.src"],  # only what the token may read
        "secret": ["other.src"],
    }
    assert 'data-share="partners"' in body(status)


def test_a_malformed_query_is_a_400_naming_what_is_wrong(shop: Shop, shared: dict[str, str]) -> None:
    base = f"{shop.server.url}/delta-sharing/shares/partners/schemas/sales/tables/orders"
    for body, field in (
        ({"jsonPredicateHints": 123}, "jsonPredicateHints"),
        ({"jsonPredicateHints": {"op": "and"}}, "jsonPredicateHints"),
        ({"jsonPredicateHints": "[" * 100_000 + "]" * 100_000}, "jsonPredicateHints"),
        ({"version": "1"}, "version"),
        ({"version": 1.5}, "version"),
        ({"version": True}, "version"),
        ({"version": -1}, "version"),
        ({"version": 1, "timestamp": "2026-11-21T10:00:00Z"}, "timestamp"),
        ({"limitHint": -1}, "limitHint"),
        ({"timestamp": 12345}, "timestamp"),
    ):
        answer = httpx.post(f"{base}/query", json=body, headers=auth(shop.reader))
        assert answer.status_code == 400, (body, answer.text)
        assert answer.json()["errorCode"] == "INVALID_PARAMETER_VALUE" and field in answer.json()["message"]
    for raw in (b'{"a":' * 100_000, b"[" * 100_000 + b"]" * 100_000, b'{"version":1e400}', b"not json"):
        answer = httpx.post(f"{base}/query", content=raw, headers=auth(shop.reader))
        assert answer.status_code == 400, (raw[:20], answer.text)
    answer = httpx.get(f"{shop.server.url}/delta-sharing/shares?maxResults=0", headers=auth(shop.reader))
    assert answer.status_code == 400
    _, files = query_files(shop.server.url, shop.reader, "orders", {"limitHint": 0})
    assert files == []


def test_a_file_url_stops_when_its_table_leaves_the_share(shop: Shop, shared: dict[str, str]) -> None:
    store = shop.server.catalog
    t = make_table(store, "sales.brief", schema="id BIGINT, ts TIMESTAMP, note STRING")
    ChunkWriter(store, t).write(
        jsonl([{"id": 1, "ts": "2026-11-21T10:00:00Z", "note": "x"}]), Format.JSONL, key="x"
    )
    store.primary.share_table("partners", TableName.parse("sales.brief"))
    _, files = query_files(shop.server.url, shop.reader, "brief")
    assert httpx.get(files[0]["url"]).status_code == 200
    store.primary.unshare_table("partners", TableName.parse("sales.brief"))
    answer = httpx.get(files[0]["url"])
    assert answer.status_code == 403 and answer.json()["errorCode"] == "PERMISSION_DENIED"

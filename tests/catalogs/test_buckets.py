"""Both catalogs over a warehouse in a bucket (moto's S3 server).

Neither client is given the bucket's credentials: pyiceberg reads through the catalog's remote
signing (each S3 request it sends is signed by the server — a presigned URL, only for reads of files
of a table its token may read), and the Delta Sharing client through the presigned URLs a query
answers. Their rows equal delta-rs' reading the same version with the server's credentials.

(moto's S3 takes any request, signed or not, and its credential-checking mode does not take
presigned URLs at all; so the signatures themselves are not checked here. What is: the clients read
only through URLs the server signed — no credentials, every Iceberg request through the signer — and
the signer refuses everything it must.)
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

import boto3
import httpx
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.links import LinkSpec
from metastore.models import TableName
from scheduler.roll import Roller
from tests.api.fixtures import Server, auth
from tests.catalogs.helpers import jsonl, orders, rows_of
from tests.catalogs.test_sharing import client
from tests.fixtures import make_table
from tests.helpers import delta_file_paths, delta_rows
from tests.s3server import S3Server

pytestmark = [pytest.mark.timeout(600), pytest.mark.process]


@pytest.fixture
def bucket_server(s3_root: str, tmp_path: Path) -> Iterator[Server]:
    srv = Server(s3_root, f"sqlite:///{tmp_path / 'metastore.sqlite'}", tmp_path)  # type: ignore[arg-type]
    o = make_table(
        srv.catalog,
        "sales.orders",
        schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2), note STRING, qty INT",
    )
    w = ChunkWriter(srv.catalog, o)
    w.write(orders(range(0, 10)), Format.JSONL, key="o1")
    Roller(srv.catalog).roll_table(o, force=True)
    w.write(orders(range(10, 15)), Format.JSONL, key="o2")
    s = make_table(srv.catalog, "other.src")
    one = jsonl([{"id": 7, "ts": "2026-11-21T10:00:00Z", "msg": "m"}])
    ChunkWriter(srv.catalog, s).write(one, Format.JSONL, key="s1")
    Roller(srv.catalog).roll_table(s, force=True)
    ChunkWriter(srv.catalog, s).write(
        jsonl([{"id": 8, "ts": "2026-11-21T10:00:00Z", "msg": "open"}]), Format.JSONL, key="s2"
    )
    srv.catalog.links.create(
        LinkSpec(name=TableName.parse("sales.remote"), source=TableName.parse("other.src"))
    )
    srv.catalog.primary.create_share("partners")
    srv.catalog.primary.share_table("partners", TableName.parse("sales.orders"))
    srv.catalog.primary.share_table("partners", TableName.parse("sales.remote"))
    srv.admin = srv.token("admin", "admin:*")
    srv.start()
    yield srv
    srv.close()


def test_clients_without_the_buckets_credentials_read_through_signing(
    bucket_server: Server, s3_server: S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    srv = bucket_server
    reader = srv.token("reader", "read:sales")
    outsider = srv.token("outsider", "read:nothing")
    version = int(srv.catalog.load(srv.catalog.table("sales.orders")).version())
    expected = rows_of(delta_rows(srv.catalog.table("sales.orders"), version, "id, note"), ["id", "note"])
    object_url = next(
        f"{s3_server.endpoint}/{e}"
        for e in [
            srv.catalog.table("sales.orders").location.removeprefix("s3://")
            + "/_delta_log/"
            + f"{0:020d}.json"
        ]
    )
    src = srv.catalog.table("other.src")
    src_files = delta_file_paths(src)
    src_url = f"{s3_server.endpoint}/{src.location.removeprefix('s3://')}/"
    rolled = next(src_url + quote(p) for p in src_files if not p.startswith("_staging/"))
    unrolled = next(src_url + quote(p) for p in src_files if p.startswith("_staging/"))
    expected_remote = [7]  # the link admits standard partitions only: not the open chunk (8)
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(key)  # the clients have no credentials for the bucket

    # Iceberg: every S3 request signed by the catalog
    cat = RestCatalog("streampart", uri=f"{srv.url}/iceberg", token=reader)
    table = cat.load_table("sales.orders")
    assert table.metadata.current_snapshot_id == version
    assert rows_of(table.scan(selected_fields=("id", "note")).to_arrow(), ["id", "note"]) == expected
    remote = cat.load_table("sales.remote").scan().to_arrow()
    assert sorted(remote.column("id").to_pylist()) == expected_remote
    with pytest.raises(ForbiddenError):
        RestCatalog("streampart", uri=f"{srv.url}/iceberg", token=outsider).load_table("sales.orders")
    sign = f"{srv.url}/iceberg/v1/aws/s3/sign"
    asked = {"region": "us-east-1", "uri": object_url, "headers": {}}
    signed = httpx.post(sign, json={**asked, "method": "GET"}, headers=auth(reader))
    assert signed.status_code == 200 and "X-Amz-Signature=" in signed.json()["uri"]
    assert httpx.get(signed.json()["uri"]).status_code == 200
    for who, method, uri in (
        (outsider, "GET", object_url),  # a file of a table it may not read
        (reader, "PUT", object_url),  # a write
        (reader, "DELETE", object_url),
        (reader, "GET", object_url.rsplit("/warehouse/", 1)[0] + "/"),  # a listing of the bucket
        (reader, "GET", object_url.replace("/sales/orders/", "/sales/orders/../../other/src/")),
        (reader, "GET", "http://elsewhere.example/b/k"),
        (reader, "GET", object_url + "%00x"),  # a control character in the key
    ):
        answer = httpx.post(sign, json={**asked, "method": method, "uri": uri}, headers=auth(who))
        assert answer.status_code == 403, (method, uri, answer.text)
    # through the link sales.remote: the source's rolled file, not its open chunk nor its log, nor a
    # file in its partitions' directories no version lists (a roll's output before its commit, say)
    rolled_dir = rolled.rsplit("/", 1)[0]
    open_dir = unrolled.rsplit("/", 1)[0].replace("/_staging/", "/")
    for planted in (f"{rolled_dir}/part-planted.parquet", f"{open_dir}/part-half-rolled.parquet"):
        key = planted.removeprefix(s3_server.endpoint + "/").split("/", 1)[1]
        s3 = boto3.client("s3", endpoint_url=s3_server.endpoint, **s3_server.boto_credentials())
        s3.put_object(
            Bucket=planted.removeprefix(s3_server.endpoint + "/").split("/", 1)[0],
            Key=unquote(key),
            Body=b"x",
        )
        answer = httpx.post(sign, json={**asked, "method": "GET", "uri": planted}, headers=auth(reader))
        assert answer.status_code == 403, planted
    # a chunk's staged file before its commit (here: any file straight under _staging), to its owner too
    staged = f"{s3_server.endpoint}/{src.location.removeprefix('s3://')}/_staging/0b9b7a2c-4c1e-4d3a-9f00-000000000000-0.parquet"
    owner = srv.token("owner", "read:other")
    assert (
        httpx.post(sign, json={**asked, "method": "GET", "uri": staged}, headers=auth(owner)).status_code
        == 403
    )
    assert (
        httpx.post(sign, json={**asked, "method": "GET", "uri": rolled}, headers=auth(owner)).status_code
        == 200
    )
    # through the link sales.remote: the source's rolled file, not its open chunk nor its log
    assert (
        httpx.post(sign, json={**asked, "method": "GET", "uri": rolled}, headers=auth(reader)).status_code
        == 200
    )
    for uri in (unrolled, src_url + f"_delta_log/{0:020d}.json"):
        answer = httpx.post(sign, json={**asked, "method": "GET", "uri": uri}, headers=auth(reader))
        assert answer.status_code == 403, uri
    # every read pyiceberg made went through the signer
    metrics = httpx.get(f"{srv.url}/metrics", headers=auth(srv.admin)).text
    assert float(metrics.split('streampart_catalog_file_reads_total{protocol="iceberg"} ')[1].split()[0]) >= 4

    # Delta Sharing: presigned URLs
    profile = tmp_path / "reader.share"
    profile.write_text(
        json.dumps(
            {"shareCredentialsVersion": 1, "endpoint": f"{srv.url}/delta-sharing", "bearerToken": reader}
        )
    )
    out = tmp_path / "orders.parquet"
    answers = client(
        {"op": "load", "profile": str(profile), "table": "partners.sales.orders", "out": str(out)},
        {
            "op": "load",
            "profile": str(profile),
            "table": "partners.sales.remote",
            "out": str(tmp_path / "r.parquet"),
        },
    )
    assert all("error" not in a for a in answers), answers
    assert rows_of(pq.read_table(out), ["id", "note"]) == expected
    assert sorted(pq.read_table(tmp_path / "r.parquet").column("id").to_pylist()) == expected_remote
    assert "AWS_ACCESS_KEY_ID" not in os.environ  # (the client's process inherits this one's)

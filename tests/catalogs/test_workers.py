"""Both catalogs under ``streampart serve --workers 2`` (a PostgreSQL metastore): no state lives in a
worker. A file URL one worker signed is served by whichever answers its fetch; loads of one version by
either worker answer the same Iceberg metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from pyiceberg.catalog.rest import RestCatalog

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.models import TableName
from tests.api.fixtures import Server
from tests.catalogs.helpers import orders
from tests.catalogs.test_sharing import query_files
from tests.fixtures import fresh_metastore_url, make_table
from tests.pg import drop_scratch_schema

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Server]:
    url = fresh_metastore_url("postgresql", tmp_path)
    srv = Server(tmp_path / "warehouse", url, tmp_path)
    t = make_table(
        srv.catalog,
        "sales.orders",
        schema="id BIGINT, ts TIMESTAMP, amount DECIMAL(10,2), note STRING, qty INT",
    )
    w = ChunkWriter(srv.catalog, t)
    for k in range(3):
        w.write(orders(range(10 * k, 10 * k + 10)), Format.JSONL, key=f"k{k}")
    srv.catalog.primary.create_share("partners")
    srv.catalog.primary.share_table("partners", TableName.parse("sales.orders"))
    srv.start("--workers", "2", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    yield srv
    srv.close()
    drop_scratch_schema(url)


def test_any_worker_answers_what_another_signed_or_wrote(workers: Server, tmp_path: Path) -> None:
    reader = workers.token("reader", "read:sales")
    for _ in range(12):  # each request on a new connection: the kernel spreads them over the workers
        _, files = query_files(workers.url, reader, "orders")
        for f in files:
            assert httpx.get(f["url"]).status_code == 200
    locations = set()
    for _ in range(12):
        table = RestCatalog("streampart", uri=f"{workers.url}/iceberg", token=reader).load_table(
            "sales.orders"
        )
        locations.add(table.metadata_location)
        assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(30))
    assert len(locations) == 1  # one version, one metadata file, whichever worker wrote it first
    counted = {p.name for p in (tmp_path / "metrics").glob("counter_*.db")}
    assert len(counted) == 2, counted  # both workers answered

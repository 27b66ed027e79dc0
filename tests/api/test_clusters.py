"""Writes over HTTP go to a table's primary cluster only (issue 11)."""

from __future__ import annotations

from pathlib import Path

import httpx

from metastore.durations import parse_duration
from metastore.models import TableName, TableSpec, parse_schema
from tests.api.fixtures import Server, auth
from tests.fixtures import add_clusters


def test_a_chunk_opened_for_a_secondary_is_a_409_secondary_cluster(server: Server, tmp_path: Path) -> None:
    add_clusters(server.catalog, tmp_path, "c1", "c2")
    server.catalog.create_table(
        TableSpec(name=TableName.parse("ns.replicated"), columns=parse_schema("id BIGINT, ts TIMESTAMP"),
                  time_column="ts", roll_every=parse_duration("1h"), cluster="c1"),
        replicate_to=["c2"],
    )  # fmt: skip
    hdr = auth(server.admin)
    opened = httpx.post(f"{server.url}/v1/tables/ns/replicated/chunks", json={"cluster": "c2"}, headers=hdr)
    assert opened.status_code == 409 and opened.json()["error"] == "secondary_cluster", opened.text
    assert opened.json()["field"] == "cluster" and "primary cluster c1" in opened.json()["message"]
    ok = httpx.post(f"{server.url}/v1/tables/ns/replicated/chunks", json={"cluster": "c1"}, headers=hdr)
    assert ok.status_code == 201, ok.text
    described = httpx.get(f"{server.url}/v1/tables/ns/replicated", headers=hdr).json()
    assert described["cluster"] == "c1" and [r["cluster"] for r in described["replicas"]] == ["c2"]
    assert [p["clusters"] for p in described["partitions"]] == [["c1"]]  # streaming: the primary only

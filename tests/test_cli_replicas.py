"""Tables on clusters through the CLI and the HTTP API (issue 11): create on a primary with
secondaries, write (only on the primary), roll, replicate by hand, describe, alter; bad input
is one clear error that changes nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metastore.catalog import Catalog
from metastore.errors import StreampartError
from metastore.replicas import replica_table
from streampart.cli import app
from tests.helpers import all_ids, records


def _cli(wh: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--warehouse", str(wh), *args])
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        assert isinstance(exc, StreampartError), exc
        return 1, str(exc)
    return result.exit_code, result.stdout


@pytest.fixture
def wh(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith("STREAMPART_"):
            monkeypatch.delenv(key)
    for name in ("c1", "c2", "c3"):
        (tmp_path / name).mkdir()
        assert _cli(tmp_path / "wh", "cluster", "add", name, "--storage", str(tmp_path / name),
                    "--spark-master", "local[2]")[0] == 0  # fmt: skip
    return tmp_path / "wh"


def test_a_table_on_clusters_from_the_command_line(wh: Path, tmp_path: Path) -> None:
    code, out = _cli(wh, "table", "create", "ns.t", "--schema", "id BIGINT, ts TIMESTAMP, msg STRING",
                     "--time-column", "ts", "--roll-every", "1h", "--cluster", "c1", "--replicate-to", "c2",
                     "--json")  # fmt: skip
    assert code == 0, out
    created = json.loads(out)
    assert created["cluster"] == "c1" and [r["cluster"] for r in created["replicas"]] == ["c2"]
    assert created["location"] == str((tmp_path / "c1").resolve() / "ns" / "t")
    data = tmp_path / "rows.jsonl"
    data.write_bytes(records(range(10)))
    assert _cli(wh, "write", "ns.t", str(data), "--cluster", "c1")[0] == 0  # the primary, by name
    assert _cli(wh, "write", "ns.t", str(data), "--cluster", "c2") == (
        1,
        "ns.t takes writes on its primary cluster c1 only; c2 holds read-only copies of its rolled "
        "partitions: write to c1",
    )
    code, said = _cli(wh, "write", "ns.t", str(data), "--cluster", "nope")
    assert code == 1 and "cluster nope does not exist" in said
    assert _cli(wh, "roll", "ns.t", "--force")[0] == 0
    code, said = _cli(wh, "table", "replicate", "ns.t", "--to", "c1")
    assert code == 1 and "c1 is the primary cluster of ns.t" in said
    code, said = _cli(wh, "table", "replicate", "ns.t", "--to", "c3")
    assert code == 1 and "ns.t has no replica on c3" in said
    code, out = _cli(wh, "table", "replicate", "ns.t", "--to", "c2", "--json")
    assert code == 0, out
    done = json.loads(out)
    assert len(done["copied"]) == 1 and done["copied"][0]["cluster"] == "c2" and done["bytes"] > 0
    code, out = _cli(wh, "table", "replicate", "ns.t")
    assert code == 0 and "every standard partition is on c2 already" in out
    code, out = _cli(wh, "table", "describe", "ns.t", "--json")
    info = json.loads(out)
    assert [p["clusters"] for p in info["partitions"]] == [["c1", "c2"], ["c1"]]
    code, out = _cli(wh, "table", "describe", "ns.t")
    assert "replica on c2" in out and "1 standard partition(s) present, none missing" in out
    # the copy on c2 is a Delta table any reader opens, with the rolled rows
    catalog = Catalog.open(wh)
    try:
        table = catalog.table("ns.t")
        assert sorted(all_ids(replica_table(table, catalog.replicas.get(table, "c2")))) == list(range(10))
    finally:
        catalog.close()
    code, out = _cli(wh, "cluster", "describe", "c2", "--json")
    assert (json.loads(out)["tables"], json.loads(out)["replicas"]) == ([], ["ns.t"])
    code, out = _cli(wh, "table", "list", "--json")
    assert [(r["table"], r["cluster"]) for r in json.loads(out)] == [("ns.t", "c1")]
    code, out = _cli(wh, "table", "alter", "ns.t", "--add-replica", "c3", "--drop-replica", "c2", "--json")
    assert code == 0 and json.loads(out)["replicas"] == ["c3"], out
    assert not (tmp_path / "c2" / "ns" / "t").exists()
    assert _cli(wh, "table", "alter", "ns.t", "--drop-replica", "c2")[1] == (
        "table ns.t has no replica on c2 (its replicas: c3)"
    )
    assert _cli(wh, "table", "alter", "ns.t")[1].startswith("nothing to change")
    code, said = _cli(wh, "cluster", "remove", "c3")
    assert code == 1 and "it holds replicas of ns.t" in said
    assert _cli(wh, "cluster", "remove", "c2")[0] == 0

"""The cluster registry (issue 11, part 1): on SQLite and PostgreSQL, and through the CLI.

A cluster is a storage root plus the Spark master next to it, recorded in the metastore so every
host agrees; ``default`` is the process's own warehouse and needs no row. Bad input — an unknown
cluster, a storage path that does not exist or is not writable, a master that is not one,
removing a cluster in use — is one clear error that changes nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from metastore.catalog import Catalog
from metastore.clusters import DEFAULT_CLUSTER, parse_conf
from metastore.errors import AlreadyExistsError, NotFoundError, StreampartError, UserInputError
from streampart.cli import app
from tests.fixtures import make_table


def test_clusters_are_registered_listed_and_removed(catalog: Catalog, tmp_path: Path) -> None:
    storage = tmp_path / "c1"
    storage.mkdir()
    c1 = catalog.clusters.add("c1", str(storage), "spark://gw1:7077", {"spark.executor.memory": "4g"})
    assert (c1.storage, c1.spark_master, c1.conf) == (
        str(storage.resolve()),
        "spark://gw1:7077",
        {"spark.executor.memory": "4g"},
    )
    assert [c.name for c in catalog.clusters.list()] == [DEFAULT_CLUSTER, "c1"]
    assert catalog.clusters.get(DEFAULT_CLUSTER).storage == str(catalog.warehouse.root)
    with pytest.raises(AlreadyExistsError, match="cluster c1 exists"):
        catalog.clusters.add("c1", str(storage), "spark://gw1:7077")
    catalog.store.remove_cluster("c1")
    with pytest.raises(NotFoundError, match="cluster c1 does not exist"):
        catalog.clusters.get("c1")


def test_a_cluster_in_use_is_not_removed(catalog: Catalog) -> None:
    make_table(catalog, "ns.t")  # on the default cluster, today's only primary
    assert catalog.store.tables_on_cluster(DEFAULT_CLUSTER) == ["ns.t"]
    catalog.store.add_cluster("busy", str(catalog.warehouse.root), "local[2]")
    with catalog.store.tx() as conn:  # a table whose primary is "busy" (table create --cluster comes next)
        from metastore import schema as s

        conn.execute(s.tables.update().values(cluster="busy"))
    with pytest.raises(UserInputError, match=r"cluster busy is in use: tables ns\.t live there"):
        catalog.store.remove_cluster("busy")
    assert [c.name for c in catalog.store.list_clusters()] == ["busy"]


# Each is refused with one error naming the fault, and nothing is registered.
BAD = [
    ({"name": "default"}, "needs no registration"),
    ({"name": "c/1"}, "path separator"),
    ({"name": "c1", "storage": "missing"}, "does not exist: create the directory"),
    ({"name": "c1", "storage": "file"}, "is not a directory"),
    ({"name": "c1", "storage": "/proc"}, "is not writable"),  # no file can be made there, not even by root
    ({"name": "c1", "master": "http://x"}, "is not a Spark master"),
]


@pytest.mark.parametrize("bad, says", BAD, ids=[str(b) for b, _ in BAD])
def test_bad_clusters_are_refused_and_change_nothing(catalog: Catalog, tmp_path: Path, bad, says) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "file").write_text("x")
    with pytest.raises(UserInputError, match=says):
        catalog.clusters.add(
            bad["name"], str(tmp_path / bad.get("storage", "ok")), bad.get("master", "spark://gw:7077")
        )
    assert catalog.store.list_clusters() == []


def test_conf_options() -> None:
    assert parse_conf(["a=1", "b = x=y", "a=2"]) == {"a": "2", "b": "x=y"}
    with pytest.raises(UserInputError, match="KEY=VALUE"):
        parse_conf(["nonsense"])


def _cli(wh: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["--warehouse", str(wh), *args], env=env)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        assert isinstance(exc, StreampartError), exc
        return 1, str(exc)
    return result.exit_code, result.stdout


def test_the_cluster_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("STREAMPART_"):
            monkeypatch.delenv(key)
    wh, storage = tmp_path / "wh", tmp_path / "c1"
    storage.mkdir()
    code, out = _cli(wh, "cluster", "add", "c1", "--storage", str(storage), "--spark-master", "spark://gw:7077",
                     "--conf", "spark.executor.memory=4g", "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["storage"] == str(storage.resolve())
    code, out = _cli(wh, "cluster", "list", "--json")
    assert [c["cluster"] for c in json.loads(out)] == ["default", "c1"]
    # this host reaches c1 through another master (its own config overrides the registry)
    env = {"STREAMPART_CLUSTERS__SPARK_MASTERS__c1": "spark://local-gw:7077"}
    code, out = _cli(wh, "cluster", "describe", "c1", "--json", env=env)
    info = json.loads(out)
    assert (info["spark_master"], info["spark_master_here"]) == ("spark://gw:7077", "spark://local-gw:7077")
    assert info["conf"] == {"spark.executor.memory": "4g"} and info["tables"] == []
    assert _cli(wh, "cluster", "describe", "nope") == (
        1,
        "cluster nope does not exist (streampart cluster list shows the clusters)",
    )
    code, said = _cli(
        wh, "cluster", "add", "c2", "--storage", str(tmp_path / "nowhere"), "--spark-master", "local[2]"
    )
    assert code == 1 and "does not exist" in said
    assert _cli(wh, "cluster", "remove", "c1")[0] == 0
    code, out = _cli(wh, "cluster", "list", "--json")
    assert [c["cluster"] for c in json.loads(out)] == ["default"]

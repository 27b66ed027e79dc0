"""The cluster a statement runs on, end to end (issue 11, item 4): real clusters and real replicas.

Clusters C1, C2, C3 are registered on temporary directories; the seed's tables T11, T12 (C1),
T21 (C2) and T31 (C3) hold rolled partitions, and T11 is replicated to C2 by the replicator the
roll daemon runs. ``streampart query`` runs in process (typer's ``CliRunner``) with the session's
one SparkSession, on SQLite and PostgreSQL metastores.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.layout import partition_dir
from metastore.errors import NotFoundError, TableIntegrityError, UserInputError
from metastore.models import Table
from scheduler.replication import Replicator
from scheduler.roll import Roller
from streampart.cli import app
from streampart.query_cluster import NoClusterError
from tests.fixtures import add_clusters, make_table
from tests.helpers import all_ids, records


def cli(cat: Catalog, *args: str) -> tuple[Any, str]:
    """``streampart query ARGS --json`` in process: its last JSON line and its stderr (errors raise)."""
    result = CliRunner().invoke(
        app, ["--warehouse", str(cat.warehouse.root), "--metastore", cat.store.url, "query", *args, "--json"]
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1]), result.stderr


def explain(cat: Catalog, sql: str, *args: str) -> dict[str, Any]:
    return cli(cat, sql, "--explain", *args)[0]


def _table(cat: Catalog, name: str, cluster: str, replicate_to: tuple[str, ...] = ()) -> Table:
    return make_table(cat, name, cluster=cluster, replicate_to=replicate_to)


def _rolled(cat: Catalog, table: Table, first: int, partitions: int = 2, rows: int = 5) -> None:
    w = ChunkWriter(cat, table)
    for k in range(partitions):
        w.write(records(range(first + k * rows, first + (k + 1) * rows)), Format.JSONL)
        Roller(cat).roll_table(table, force=True)


@pytest.fixture
def seed(catalog: Catalog, tmp_path: Path) -> Catalog:
    """The seed's world: T11, T12 on C1, T21 on C2, T31 on C3; T11 replicated whole to C2."""
    add_clusters(catalog, tmp_path, "C1", "C2", "C3")
    for name, cluster, first in (
        ("ns.t11", "C1", 0),
        ("ns.t12", "C1", 100),
        ("ns.t21", "C2", 200),
        ("ns.t31", "C3", 300),
    ):
        table = _table(catalog, name, cluster, ("C2",) if name == "ns.t11" else ())
        _rolled(catalog, table, first)
    report = Replicator(catalog).replicate(catalog.table("ns.t11"))
    assert len(report.copied) == 2 and not report.failed
    return catalog


COUNTS = "SELECT (SELECT count(*) FROM ns.t11) AS t11, (SELECT count(*) FROM ns.{other}) AS other"


def test_the_seeds_queries_run_where_the_seed_says(spark, seed: Catalog, tmp_path: Path) -> None:
    cat = seed
    assert explain(cat, "SELECT * FROM ns.t11")["cluster"] == "C1"
    assert explain(cat, COUNTS.format(other="t12"))["cluster"] == "C1"
    assert explain(cat, "SELECT * FROM ns.t21")["cluster"] == "C2"
    plan = explain(cat, COUNTS.format(other="t21"))  # T11 join T21: C2, T11 read from its copy there
    assert plan["cluster"] == "C2" and plan["spark_master"] == "local[2]"
    assert "the primary of ns.t21" in plan["reason"] and "(not on C1)" in plan["reason"]
    t11 = next(r for r in plan["reads"] if r["table"] == "ns.t11")
    assert t11["copy"] == "replica" and t11["location"] == str((tmp_path / "C2").resolve() / "ns" / "t11")
    assert t11["partitions"] == 2
    with pytest.raises(NoClusterError, match=r"on C3: ns\.t11 \(primary C1\) has no copy there"):
        explain(cat, COUNTS.format(other="t31"))
    # the query runs there, and reads C2's copy: C1's data files may be gone meanwhile
    primary = Path(cat.table("ns.t11").location)
    aside = tmp_path / "aside"
    shutil.move(primary / partition_dir(cat.table("ns.t11"), _standard(cat, "ns.t11")[0]), aside)
    rows, _ = cli(cat, COUNTS.format(other="t21"))
    assert rows == {"t11": 10, "other": 10}
    with pytest.raises(TableIntegrityError, match=r"missing|cannot be read"):
        cli(cat, "SELECT count(*) AS n FROM ns.t11")  # on C1 it is gone
    shutil.move(aside, primary / partition_dir(cat.table("ns.t11"), _standard(cat, "ns.t11")[0]))
    assert cli(cat, "SELECT count(*) AS n FROM ns.t11")[0] == {"n": 10}


def _standard(cat: Catalog, name: str) -> list[Any]:
    return [p.value for p in cat.store.list_partitions(cat.table(name).id) if p.state.value == "standard"]


def test_insert_and_create_table_as_choose_the_seeds_clusters(spark, seed: Catalog, tmp_path: Path) -> None:
    cat = seed
    # Insert .. T21 select .. from T11: C2, and T21 stays on C2
    got, _ = cli(cat, "INSERT INTO ns.t21 SELECT id, ts, msg FROM ns.t11", "--key", "i")
    assert got["cluster"] == "C2" and got["rows"] == 10 and cat.table("ns.t21").cluster == "C2"
    assert sorted(all_ids(cat.table("ns.t21"))) == [*range(10), *range(200, 210)]
    # Insert .. T13 select .. from T11, T13 new: C1, and T13 is made on C1
    made, _ = cli(cat, "CREATE TABLE ns.t13 AS SELECT id, ts, msg FROM ns.t11", "--key", "c")
    t13 = cat.table("ns.t13")
    assert made["cluster"] == "C1" and t13.cluster == "C1" and made["created"] is True
    assert t13.location == str((tmp_path / "C1").resolve() / "ns" / "t13")
    # … or where it is asked to run: every table it reads is there
    there, _ = cli(cat, "USE CLUSTER C2; CREATE TABLE ns.t22 AS SELECT id, ts, msg FROM ns.t11", "--key", "d")
    assert there["cluster"] == "C2" and cat.table("ns.t22").cluster == "C2"
    # Insert .. T21 select .. from T31: fails, naming what is missing on C2
    with pytest.raises(
        NoClusterError, match=r"writes ns\.t21, so it runs on its primary cluster C2, where ns\.t31"
    ):
        cli(cat, "INSERT INTO ns.t21 SELECT id, ts, msg FROM ns.t31")
    with pytest.raises(NoClusterError, match="whose primary cluster is C2"):
        cli(cat, "INSERT INTO ns.t21 SELECT id, ts, msg FROM ns.t11", "--cluster", "C1")


def test_use_cluster_and_the_cluster_option(spark, seed: Catalog) -> None:
    cat = seed
    assert explain(cat, "USE CLUSTER C2; SELECT * FROM ns.t11")["cluster"] == "C2"
    assert explain(cat, "SELECT * FROM ns.t11", "--cluster", "C2")["cluster"] == "C2"
    assert explain(cat, "USE CLUSTER C2; USE CLUSTER; SELECT * FROM ns.t11")["cluster"] == "C1"
    assert explain(cat, "USE ns; USE CLUSTER C2; SELECT * FROM t11")["cluster"] == "C2"
    assert cli(cat, "USE CLUSTER C2; SELECT count(*) AS n FROM ns.t11")[0] == {"n": 10}
    with pytest.raises(NoClusterError, match=r"cannot run on cluster C3 \(as asked\): ns\.t11"):
        explain(cat, "USE CLUSTER C3; SELECT * FROM ns.t11")
    with pytest.raises(NotFoundError, match="cluster nope"):
        explain(cat, "USE CLUSTER nope; SELECT 1")
    with pytest.raises(UserInputError, match="USE CLUSTER C3 contradicts --cluster C2"):
        explain(cat, "USE CLUSTER C3; SELECT 1", "--cluster", "C2")
    assert explain(cat, "SELECT 1")["cluster"] == "default"


def test_replicated_only_reads_one_consistent_cut_on_a_secondary(spark, seed: Catalog) -> None:
    cat = seed
    t11 = cat.table("ns.t11")
    ChunkWriter(cat, t11).write(records(range(50, 53)), Format.JSONL)  # its streaming partition holds rows
    Roller(cat).roll_table(t11, force=True)  # … rolled, not yet copied …
    ChunkWriter(cat, t11).write(records(range(60, 62)), Format.JSONL)  # … and more streaming rows
    with pytest.raises(NoClusterError) as caught:
        explain(cat, COUNTS.format(other="t21"))
    message = str(caught.value)
    assert "on C1: ns.t21 (primary C2) has no copy there" in message
    assert (
        "on C2: ns.t11 (primary C1): 2 of the 4 partitions read are not copied there (1 not rolled yet"
        in message
    )
    assert "--replicated-only" in message
    # opting in: T11 as of its newest partition on C2 with every one before it, stated
    plan = explain(cat, COUNTS.format(other="t21"), "--replicated-only")
    assert plan["cluster"] == "C2" and "ns.t11 read as replicated there" in plan["reason"]
    (read,) = [r for r in plan["reads"] if r["table"] == "ns.t11"]
    newest = max(_standard(cat, "ns.t11")[:2])
    assert read["cut"] == {"as_of_partition": newest.isoformat().replace("+00:00", "Z"), "not_read": 2}
    rows, said = cli(cat, COUNTS.format(other="t21"), "--replicated-only")
    assert rows == {"t11": 10, "other": 10}
    assert "ns.t11 read on C2 as of partition" in said and "2 newer partition(s) with rows not read" in said
    # a partition copied later moves the cut; on its primary a table is read whole
    Replicator(cat).replicate(t11)
    assert cli(cat, COUNTS.format(other="t21"), "--replicated-only")[0] == {"t11": 13, "other": 10}
    assert cli(cat, "SELECT count(*) AS n FROM ns.t11", "--replicated-only")[0] == {"n": 15}


@pytest.mark.process
def test_no_cluster_is_one_clear_error_from_the_real_command(seed: Catalog) -> None:
    # before Spark starts: the plan needs the metastore and the Delta logs only
    import os
    import subprocess

    from tests.test_cli import COMMAND

    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    proc = subprocess.run(
        [*COMMAND, "--warehouse", str(seed.warehouse.root), "--metastore", seed.store.url, "query",
         COUNTS.format(other="t31")],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    message = " ".join(proc.stderr.split())
    assert proc.returncode == 1 and proc.stdout == "" and "Traceback" not in proc.stderr, proc.stderr
    assert message.startswith("error: no cluster holds every table the statement reads — on C1: ns.t31")
    assert "on C3: ns.t11 (primary C1) has no copy there" in message

"""The same code on a real Spark standalone cluster (issue 11, item 5): Kafka ingest and Spark rolls.

Executors run on the two workers of the session's cluster (``spark_standalone``), in processes
of their own; each job is a ``streampart --spark-master URL …`` process (one SparkSession per
process, and this one's is local). Checked by the same assertions as the local runs: every
Kafka record lands once (tests/ingest/test_kafka_ingest.py), a Spark roll holds exactly the rows
committed and its files get compacted names, and a roller killed mid-compaction leaves nothing
visible and nothing behind once resumed (tests/test_crash.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.delta.layout import partition_dir
from metastore.models import ChunkState, PartitionState, Table
from metastore.replicas import replica_table
from scheduler.compacted_names import compacted_version
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, ids_by_partition, records
from tests.ingest.test_kafka_ingest import event, topic_name
from tests.standalone import StandaloneCluster, cluster_env, free_port

COMMAND = [sys.executable, "-m", "streampart.cli"]
# one-shot rollers here hold a roll for 2 s: a killed one's roll is resumed without waiting 10 min
SHORT_LEASE = {"STREAMPART_ROLL__LEASE": "2s"}
SPARK_ROLL = {"STREAMPART_ROLL__ENGINE": "spark", **SHORT_LEASE}


def streampart(
    catalog: Catalog,
    master: str | None,
    *args: str,
    env: dict[str, str] | None = None,
    crashpoint: str | None = None,
    timeout: float = 300,
) -> subprocess.CompletedProcess[str]:
    """One ``streampart`` process on ``catalog`` whose Spark jobs run on ``master`` (None: spark.master's
    default, ``local[2]``, for the default cluster; a table on a registered cluster uses that one's)."""
    environment = {k: v for k, v in cluster_env().items() if not k.startswith("STREAMPART_")} | (env or {})
    if crashpoint:
        environment["STREAMPART_CRASHPOINT"] = crashpoint
    argv = [*COMMAND, "--warehouse", str(catalog.warehouse.root), "--metastore", catalog.store.url,
            *(["--spark-master", master] if master else []), *args]  # fmt: skip
    return subprocess.run(
        argv, env=environment, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def ok(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args}\nstdout: {proc.stdout}\nstderr: {proc.stderr[-3000:]}"
    return proc


def killed(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == -signal.SIGKILL, f"{proc.args}\nstderr: {proc.stderr[-3000:]}"


def entries(table: Table, value) -> set[str]:
    """The partition directory's entries but its markers, hidden ones included."""
    directory = Path(table.location) / partition_dir(table, value)
    if not directory.is_dir():
        return set()
    return {p.name for p in directory.iterdir() if not p.name.startswith("_")}


def live(catalog: Catalog, table: Table, value) -> set[str]:
    files = live_files(catalog.warehouse.load(table))
    return {f.name for f in files if f.partition == value}


def apps(cluster: StandaloneCluster) -> int:
    """How many applications the master has run: a job that ran here, not locally, adds one."""
    return len([a for a in cluster.applications() if a.get("name") == "streampart"])


def ingest_args(catalog: Catalog, broker, topic: str) -> tuple[str, ...]:
    checkpoint = Path(catalog.warehouse.root).parent / f"ckpt-{topic}"
    return ("ingest", "kafka", "ns.events", "--bootstrap", broker.bootstrap, "--topic", topic,
            "--checkpoint", str(checkpoint), "--available-now",
            "--max-offsets-per-trigger", "250")  # fmt: skip


def assert_landed_once(catalog: Catalog, table: Table, records: int, batches: int) -> None:
    """The local Kafka ingest tests' assertions: every record once, one chunk per batch, none half-way."""
    ids = all_ids(table)
    assert duplicates(ids) == [] and sorted(ids) == list(range(records))
    chunks = catalog.store.list_chunks(table.id, [ChunkState.COMMITTED])
    assert len(chunks) == batches and all((c.idempotency_key or "").startswith("kafka:") for c in chunks)
    states = Counter(c.state for c in catalog.store.list_chunks(table.id))
    assert set(states) <= {ChunkState.COMMITTED, ChunkState.RESERVED}, states


def test_ingest_and_a_spark_roll_on_the_standalone_cluster(
    spark_standalone, sqlite_catalog, kafka_broker, tmp_path
) -> None:
    # The table lives on a registered cluster whose master is the standalone one; the processes
    # get no --spark-master (spark.master stays local[2]): the table's cluster decides.
    cluster, catalog = spark_standalone, sqlite_catalog
    (tmp_path / "c1").mkdir()
    catalog.clusters.add("c1", str(tmp_path / "c1"), cluster.url)
    table = make_table(catalog, dead_letter=True, cluster="c1")
    assert table.location.startswith(str(tmp_path / "c1"))
    value = catalog.store.streaming_partition(table.id).value
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i) for i in range(600)])
    before = apps(cluster)

    ok(streampart(catalog, None, *ingest_args(catalog, kafka_broker, topic)))
    assert_landed_once(catalog, table, records=600, batches=3)  # 600 records at 250 per trigger
    assert apps(cluster) == before + 1  # the driver ran its jobs on the cluster

    # a Spark roll killed after renaming its first compacted file: nothing of it is visible
    killed(streampart(catalog, None, "roll", "ns.events", "--force", env=SPARK_ROLL,
                      crashpoint="roll-spark-mid-rename"))  # fmt: skip
    assert catalog.store.get_partition(table.id, value).state is PartitionState.ROLLING
    left = entries(table, value)
    assert any(n.startswith(".part-") and n.endswith(".spark") for n in left), left  # the attempt's directory
    assert any(compacted_version(n) is not None and not n.startswith(".") for n in left), left  # one renamed
    ids = all_ids(table)
    assert duplicates(ids) == [] and sorted(ids) == list(range(600))
    # the roll resumes once the dead roller's lease lapses, and removes what the dead one wrote
    time.sleep(2.5)
    rolled = ok(streampart(catalog, None, "roll", "ns.events", "--json", env=SPARK_ROLL))
    assert '"resumed": true' in rolled.stdout.replace("\n", ""), rolled.stdout
    assert apps(cluster) == before + 3

    assert sorted(ids_by_partition(table)[value]) == list(range(600))  # rolled rows == rows committed
    assert entries(table, value) == live(catalog, table, value)  # only the commit's files, renamed
    assert all(compacted_version(n) is not None for n in entries(table, value))
    assert pq.read_table(Path(table.location) / partition_dir(table, value)).num_rows == 600
    p = catalog.store.get_partition(table.id, value)
    assert (p.state, p.rows, p.chunks) == (PartitionState.STANDARD, 600, 3)

    # a query of the table runs on its cluster too (the seed's rule: its primary), on the workers
    counted = ok(streampart(catalog, None, "query", "--json",
                            "SELECT count(*) AS n, count(DISTINCT id) AS d FROM ns.events"))  # fmt: skip
    assert '{"n": 600, "d": 600}' in counted.stdout, counted.stdout
    assert apps(cluster) == before + 4

    # and its copy to a secondary, by Spark tasks on the workers (replication engine = spark)
    (tmp_path / "c2").mkdir()
    catalog.clusters.add("c2", str(tmp_path / "c2"), "local[2]")
    replica = catalog.replicas.add(table, "c2")
    spark_copies = {"STREAMPART_SCHEDULER__REPLICATION__ENGINE": "spark",
                    "STREAMPART_SCHEDULER__REPLICATION__SPARK_MIN_BYTES": "0"}  # fmt: skip
    ok(streampart(catalog, None, "table", "replicate", "ns.events", "--json", env=spark_copies))
    assert apps(cluster) == before + 5
    assert sorted(all_ids(replica_table(table, replica))) == list(range(600))
    assert catalog.replicas.present_on(table, "c2") == {value}


@pytest.mark.slow
def test_ingest_on_the_cluster_killed_mid_batch_then_restarted_lands_every_record_once(
    spark_standalone, sqlite_catalog, kafka_broker
) -> None:
    catalog = sqlite_catalog
    table = make_table(catalog, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    kafka_broker.produce(topic, [event(i) for i in range(600)])
    # the driver dies once the executors staged its second batch's files …
    killed(streampart(catalog, spark_standalone.url, *ingest_args(catalog, kafka_broker, topic),
                      crashpoint="chunk-after-write@2"))  # fmt: skip
    assert duplicates(all_ids(table)) == []
    # … and the restarted job replays that batch: every record lands once
    ok(streampart(catalog, spark_standalone.url, *ingest_args(catalog, kafka_broker, topic)))
    assert_landed_once(catalog, table, records=600, batches=3)


@pytest.mark.process
def test_an_unreachable_standalone_master_is_one_clear_error(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog, dead_letter=True)
    ChunkWriter(sqlite_catalog, table).write(records(range(5)), Format.JSONL)
    nowhere = f"spark://127.0.0.1:{free_port()}"
    for args, env in [
        (("roll", "ns.events", "--force"), SPARK_ROLL),
        (("ingest", "kafka", "ns.events", "--bootstrap", "127.0.0.1:9", "--topic", "t"), {}),
    ]:
        proc = streampart(sqlite_catalog, nowhere, *args, env=env, timeout=60)
        message = " ".join(proc.stderr.split())
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert message.startswith(f"error: Spark master {nowhere} is unreachable ("), message
        assert message.count("error:") == 1
    assert sorted(all_ids(table)) == list(range(5))  # nothing changed but the roll's seal
    assert entries(table, sqlite_catalog.store.list_partitions(table.id)[0].value) == set()


# Where a Spark roller on the cluster dies; a resumed roller (the local engine, here) must finish
# that roll once and leave exactly the commit's files (opt-in: each case costs two Spark apps).
SPARK_ROLL_CRASHES = [
    "roll-spark-after-write",  # the Spark job wrote its files into the hidden attempt directory
    "roll-after-compact",  # every file renamed to its compacted name, the sweep not committed
]


@pytest.mark.slow
@pytest.mark.parametrize("point", SPARK_ROLL_CRASHES)
def test_a_spark_roller_killed_mid_compaction_leaves_nothing_visible(
    spark_standalone, sqlite_catalog, point: str
) -> None:
    from scheduler.roll import Roller

    catalog = sqlite_catalog
    table = make_table(catalog)
    value = catalog.store.streaming_partition(table.id).value
    w = ChunkWriter(catalog, table)
    for k in range(4):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    killed(streampart(catalog, spark_standalone.url, "roll", "ns.events", "--force", env=SPARK_ROLL,
                      crashpoint=point))  # fmt: skip
    assert entries(table, value)  # the dead attempt's files are there …
    assert sorted(all_ids(table)) == list(range(40))  # … and invisible
    time.sleep(2.5)
    [result] = Roller(catalog).roll_table(table)
    assert (result.resumed, result.rows) == (True, 40)
    assert sorted(ids_by_partition(table)[value]) == list(range(40))
    assert entries(table, value) == live(catalog, table, value)

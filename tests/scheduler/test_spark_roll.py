"""``roll.engine = spark`` on the shared local Spark session: the local engine's rows, names and cleanup.

The same engine on a real standalone cluster (workers in other processes, a crash mid-compaction)
is in tests/test_standalone.py.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.files import LiveFile, live_files
from metastore.delta.layout import partition_dir
from metastore.errors import UserInputError
from metastore.models import PartitionState, Table
from scheduler.compacted_names import compacted_version
from scheduler.config import RollConfig
from scheduler.errors import RollFailedError
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, checked_stats, ids_by_partition, records

pytestmark = pytest.mark.spark

SPARK = RollConfig(engine="spark")


def on_disk(table: Table, value) -> set[str]:
    """Every entry of the partition's directory but its markers, hidden ones included."""
    directory = Path(table.location) / partition_dir(table, value)
    return {p.name for p in directory.iterdir() if not p.name.startswith("_")}


def live(catalog: Catalog, table: Table, value) -> set[str]:
    return {f.name for f in files(catalog, table) if f.partition == value}


def files(catalog: Catalog, table: Table) -> list[LiveFile]:
    return live_files(catalog.warehouse.load(table))


def test_the_spark_engine_rolls_the_same_rows_into_compacted_names(spark, sqlite_catalog) -> None:
    table = make_table(sqlite_catalog)
    w = ChunkWriter(sqlite_catalog, table)
    value = sqlite_catalog.store.streaming_partition(table.id).value
    for k in range(5):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    before = sorted(all_ids(table))

    [result] = Roller(sqlite_catalog, SPARK, spark=lambda _: spark).roll_table(table, force=True)

    assert (result.chunks, result.rows, result.files_before, result.files_after) == (5, 50, 5, 1)
    assert sorted(ids_by_partition(table)[value]) == before == list(range(50))
    # only the compacted files are left in the directory: Spark's hidden attempt directory is gone
    names = on_disk(table, value)
    assert names == live(sqlite_catalog, table, value)
    assert all(compacted_version(n) is not None and not n.startswith(".") for n in names)
    directory = Path(table.location) / partition_dir(table, value)
    plain = pq.read_table(directory)
    assert sorted(plain.column("id").to_pylist()) == list(range(50))
    # a standard Delta file: timestamps as INT64 microseconds in UTC, as delta-rs writes them
    assert plain.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert plain.column("msg").to_pylist()[:1] != [None]
    # its add carries statistics, from the footer Spark wrote, each checked against the rows
    [stats] = checked_stats(table.location).values()
    assert sorted(stats["minValues"]) == ["id", "msg", "ts"] and stats["minValues"]["id"] == 0
    p = sqlite_catalog.store.get_partition(table.id, value)
    assert (p.state, p.rows, p.chunks, p.files) == (PartitionState.STANDARD, 50, 5, 1)


def test_the_spark_engine_aims_at_the_target_file_size(spark, sqlite_catalog) -> None:
    table = make_table(sqlite_catalog)
    w = ChunkWriter(sqlite_catalog, table)
    for k in range(8):
        w.write(records(range(k * 100, k * 100 + 100)), Format.JSONL)
    chunk_size = max(f.size for f in files(sqlite_catalog, table))
    config = RollConfig(engine="spark", target_file_size=max(1024, chunk_size * 2))
    [r] = Roller(sqlite_catalog, config, spark=lambda _: spark).roll_table(table, force=True)
    assert r.files_before == 8 and 2 <= r.files_after <= 5
    assert sorted(all_ids(table)) == list(range(800))


def test_a_failed_spark_job_leaves_nothing_and_the_roll_resumes(spark, sqlite_catalog) -> None:
    table = make_table(sqlite_catalog)
    w = ChunkWriter(sqlite_catalog, table)
    value = sqlite_catalog.store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    staged = [f for f in files(sqlite_catalog, table) if f.staged]
    damaged = Path(table.location) / staged[1].path
    kept = damaged.with_name("kept")
    shutil.copy(damaged, kept)
    damaged.write_bytes(b"PAR1 not parquet at all PAR1")

    with pytest.raises(RollFailedError, match=r"^compacting partition .* with Spark failed: ") as failed:
        Roller(sqlite_catalog, SPARK, spark=lambda _: spark).roll_table(table, force=True)
    assert "\n" not in str(failed.value)
    assert on_disk(table, value) == set()  # no hidden attempt directory, no compacted file
    assert sqlite_catalog.store.get_partition(table.id, value).state is PartitionState.ROLLING

    shutil.move(kept, damaged)  # the file is restored from a backup: the roll resumes, once
    [r] = Roller(sqlite_catalog, SPARK, spark=lambda _: spark).roll_table(table)
    assert (r.resumed, r.rows) == (True, 30)
    assert sorted(ids_by_partition(table)[value]) == list(range(30))
    assert on_disk(table, value) == live(sqlite_catalog, table, value)


def test_a_roller_needs_a_spark_session_for_the_spark_engine(sqlite_catalog) -> None:
    table = make_table(sqlite_catalog)
    ChunkWriter(sqlite_catalog, table).write(records(range(3)), Format.JSONL)
    with pytest.raises(RollFailedError, match=r"roll\.engine is spark, but this roller was given no Spark"):
        Roller(sqlite_catalog, SPARK).roll_table(table, force=True)


def test_one_process_runs_spark_on_one_master(spark, sqlite_catalog, tmp_path) -> None:
    # getOrCreate() would hand back the running local session for any master: a job meant
    # for a cluster must not quietly run here instead.
    from streampart.cluster_spark import ClusterSpark
    from streampart.config import load_settings

    storage = tmp_path / "c1"
    storage.mkdir()
    sqlite_catalog.clusters.add("c1", str(storage), "spark://127.0.0.1:7077", {})
    settings = load_settings(
        warehouse=sqlite_catalog.warehouse.root, spark={"master": "local[2]", "shuffle_partitions": 2}
    )
    table = make_table(sqlite_catalog)
    on_c1 = table.model_copy(update={"cluster": "c1"})
    assert ClusterSpark(settings, sqlite_catalog)(table) is spark  # the default cluster: spark.master
    with pytest.raises(
        UserInputError, match=r"already runs Spark on local\[2\] and cannot also run on spark://"
    ):
        ClusterSpark(settings, sqlite_catalog)(on_c1)


def test_the_daemon_rolls_with_the_spark_engine_under_continuous_writes(spark, sqlite_catalog) -> None:
    from scheduler.daemon import RollDaemon
    from tests.helpers import wait_for
    from tests.scheduler.helpers import Writer, check_rolled_rows, fast_config, fast_roll_config, standard

    table = make_table(sqlite_catalog, roll_every="2s")
    writer = Writer(sqlite_catalog, table)
    daemon = RollDaemon(
        sqlite_catalog, fast_config(), fast_roll_config(engine="spark"), spark=lambda _: spark
    )
    writer.start()
    daemon.start()
    try:
        wait_for(lambda: len(standard(sqlite_catalog, table)) >= 2, "two rolls by the Spark engine", 120)
    finally:
        daemon.stop()
        writer.stop()
    check_rolled_rows(sqlite_catalog, table, writer.acks)  # each standard partition: its rows, its files
    for p in standard(sqlite_catalog, table):
        assert all(compacted_version(n) is not None for n in on_disk(table, p.value))

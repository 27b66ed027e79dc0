"""``[scheduler.replication] engine = spark`` on the shared local Spark session: Spark tasks copy
a partition's files, each verified as the local engine does; the protocol around them is the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from metastore.delta.layout import partition_dir
from metastore.models import Table
from metastore.replicas import CopyState, replica_table
from scheduler.config import ReplicationConfig
from scheduler.replication import Replicator
from tests.fixtures import add_clusters, make_table
from tests.helpers import all_ids
from tests.scheduler.test_replication import _replica_commits, _rolled

pytestmark = pytest.mark.spark

SPARK = ReplicationConfig(engine="spark", spark_min_bytes=0)


def test_spark_tasks_copy_a_partition_verified_and_committed_once(spark, sqlite_catalog, tmp_path) -> None:
    catalog = sqlite_catalog
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = make_table(catalog, cluster="c1", replicate_to=("c2",))
    ids = _rolled(catalog, table, 2)
    [replica] = catalog.replicas.list(table)
    jobs: list[Table] = []

    def spark_for(t: Table) -> Any:  # the session, counting the Spark jobs asked for
        jobs.append(t)
        return spark

    r = Replicator.configured(catalog, SPARK, spark=spark_for)
    report = r.replicate(table)
    assert len(report.copied) == 2 and len(jobs) == 2 and report.bytes > 0  # one Spark job a partition
    assert sorted(all_ids(replica_table(table, replica))) == ids
    assert set(_replica_commits(replica, table).values()) == {1}
    assert {c.state for c in catalog.store.list_copies(table.id)} == {CopyState.PRESENT}
    assert list(Path(replica.location).rglob(".*.tmp")) == []


def test_a_failing_spark_copy_is_one_error_and_retried(spark, sqlite_catalog, tmp_path) -> None:
    catalog = sqlite_catalog
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = make_table(catalog, cluster="c1", replicate_to=("c2",))
    _rolled(catalog, table, 1)
    [replica] = catalog.replicas.list(table)
    [value] = [p.value for p in catalog.store.list_partitions(table.id) if p.state.value == "standard"]
    blocker = Path(replica.location) / partition_dir(table, value)
    blocker.write_text("not a directory")
    report = Replicator.configured(catalog, SPARK, spark=lambda _: spark).replicate(table)
    assert report.copied == [] and "a Spark task copying to the secondary failed" in str(report.failed[0])
    blocker.unlink()
    again = Replicator.configured(catalog, SPARK, spark=lambda _: spark).replicate(
        table, include_waiting=True
    )
    assert len(again.copied) == 1


def test_small_partitions_stay_local_and_spark_needs_a_session(sqlite_catalog, tmp_path) -> None:
    catalog = sqlite_catalog
    add_clusters(catalog, tmp_path, "c1", "c2")
    table = make_table(catalog, cluster="c1", replicate_to=("c2",))
    _rolled(catalog, table, 1)
    no_spark = Replicator.configured(catalog, ReplicationConfig(engine="spark"))  # 1 GiB threshold
    assert len(no_spark.replicate(table).copied) == 1
    _rolled(catalog, table, 1)
    report = Replicator.configured(catalog, SPARK).replicate(table)
    assert "given no Spark session" in str(report.failed[0])

"""The roll daemon's replication jobs: copies of new standard partitions to secondary clusters.

One job per table (``replicate:<table id>``) copies every pending partition of the table to
each of its secondaries (:class:`scheduler.replication.Replicator`). The daemon starts it right
after each roll of the table; a periodic pass starts it for the rest — replicas added to a
table with history, failed copies whose retry time came, copies a dead leader left. Copies are
claimed fenced by the daemon's leadership and stop at a step boundary on shutdown or when
leadership is lost; their own retry times (doubling, recorded in the metastore) decide when a
failed copy is tried again, so a failing secondary never holds up rolls or other tables.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from metastore import clock
from metastore.catalog import Catalog
from metastore.errors import LeaseLostError, NotFoundError, RetriableError
from metastore.logs import event
from metastore.models import Lease
from scheduler.config import ReplicationConfig
from scheduler.errors import ReplicationAbandonedError
from scheduler.jobs import plan, remove_jobs
from scheduler.metrics import SchedulerMetrics
from scheduler.replica_backlog import backlog
from scheduler.replication import Replicator
from scheduler.spark_compaction import SparkFactory

log = logging.getLogger("streampart.replication")


def replicate_job_id(table_id: int) -> str:
    return f"replicate:{table_id}"


@dataclass
class ReplicationJobs:
    """Replication for one roll daemon (its leader's work)."""

    catalog: Catalog
    config: ReplicationConfig
    scheduler: Any  # the daemon's APScheduler
    metrics: SchedulerMetrics
    owner: str
    lease: timedelta  # the copies' lease (roll.renewed_lease)
    fence: Callable[[], Lease | None]  # the daemon's leadership lease, None while not leader
    should_abandon: Callable[[], bool]
    step_down: Callable[[str], None]
    spark: SparkFactory | None = None  # engine = spark: the Spark session of a table's cluster

    def start_now(self, table_id: int) -> None:
        """Have the table's replication job run now (if the table has secondaries)."""
        if not self.config.enabled or self.fence() is None or not self.catalog.store.list_replicas(table_id):
            return
        plan(
            self.scheduler,
            self.run,
            clock.now(),
            [table_id],
            replicate_job_id(table_id),
            f"replicate table #{table_id}",
        )

    def sweep(self) -> None:
        """The periodic pass: start the job of every table with copies to make now."""
        if self.fence() is None or self.should_abandon():
            return
        replicator = self._replicator()
        by_table: dict[int, list[Any]] = {}
        for replica in self.catalog.store.list_replicas():
            by_table.setdefault(replica.table_id, []).append(replica)
        for table_id, replicas in by_table.items():
            if self.scheduler.get_job(replicate_job_id(table_id)) is not None:
                continue  # planned or running
            try:
                table = self.catalog.store.get_table_by_id(table_id)
            except NotFoundError:
                continue
            if any(replicator.pending(table, r) for r in replicas):
                self.start_now(table_id)

    def run(self, table_id: int) -> None:
        """The job of one table: copy its pending partitions; metrics and events per copy."""
        if self.fence() is None or self.should_abandon():
            return
        try:
            table = self.catalog.store.get_table_by_id(table_id)
        except NotFoundError:
            return
        name = str(table.name)
        try:
            report = self._replicator().replicate(table)
        except ReplicationAbandonedError as exc:
            event(
                log,
                logging.INFO,
                "replica.abandoned",
                "copy stopped; it resumes later",
                table=name,
                reason=str(exc),
            )
            return
        except LeaseLostError as exc:
            self.step_down(str(exc))
            return
        except Exception as exc:  # the metastore unreachable, say: the next pass tries again
            event(
                log,
                logging.WARNING,
                "replica.job_failed",
                f"replication of {name} failed: {exc}",
                table=name,
                exc_info=not isinstance(exc, RetriableError),
            )
            return
        for result in report.copied:
            self.metrics.copies.labels(name, result.cluster, "done").inc()
            self.metrics.copied_bytes.labels(name, result.cluster).inc(result.copied_bytes)
        for failure in report.failed:
            self.metrics.copies.labels(name, failure.cluster, "failed").inc()

    def observe(self) -> None:
        """Refresh the per-replica gauges (lag, missing partitions); the leader's view only."""
        if self.fence() is None:
            self.metrics.set_replicas({})
            return
        now, values = clock.now(), {}
        for table_id in sorted({r.table_id for r in self.catalog.store.list_replicas()}):
            try:
                table = self.catalog.store.get_table_by_id(table_id)
            except NotFoundError:
                continue
            for cluster, (lag, missing) in backlog(self.catalog, table, now).items():
                values[(str(table.name), cluster)] = (lag, missing)
        self.metrics.set_replicas(values)

    def remove(self) -> None:
        """Drop planned replication jobs (leadership lost): running ones stop at their next step."""
        remove_jobs(self.scheduler, "replicate:")

    def _replicator(self) -> Replicator:
        return Replicator.configured(
            self.catalog,
            self.config,
            owner=self.owner,
            lease=self.lease,
            fence=self.fence(),
            should_abandon=self.should_abandon,
            spark=self.spark,
        )

"""The roll daemon: rolls every streaming table on time, one active daemon among many.

HIVE-4196 needs "an active agent running to check when it is time to roll and trigger the
roll"; this is that agent (``streampart scheduler run``). It is built on APScheduler:

- **Leadership.** Every daemon heartbeats a lease in the metastore (:mod:`scheduler.leadership`);
  only the holder rolls. Rolls begin and are claimed fenced by the lease's epoch, and the
  leader renews the leases of the rolls it carries out at every heartbeat, so when it dies its
  rolls lapse and the next leader resumes them within ``roll.renewed_lease``.
- **Rolls.** One job per partition, (re)planned at every ``sync_interval``, retried with
  backoff for its table alone, its outcome recorded (:mod:`scheduler.roll_jobs`); copies to
  secondary clusters likewise, one job per table (:mod:`scheduler.replication_jobs`).
- **Shutdown.** On SIGTERM no new roll starts; a roll in progress may finish within
  ``shutdown_grace``, otherwise it is abandoned at its next step boundary (recorded in the
  metastore, resumed by the next leader). The lease is released and the process exits 0.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler

from ingest.config import ChunkConfig
from metastore import clock
from metastore.catalog import Catalog
from metastore.errors import LeaseLostError, MetastoreUnavailableError, RetriableError, UserInputError
from metastore.logs import event
from metastore.models import Lease, Table, iso
from scheduler.config import RollConfig, SchedulerConfig, check_heartbeat
from scheduler.expiry_jobs import ExpiryJobs
from scheduler.housekeeping import Housekeeper
from scheduler.jobs import JOB
from scheduler.leadership import Leadership
from scheduler.metrics import SchedulerMetrics
from scheduler.replication_jobs import ReplicationJobs
from scheduler.roll import owner_id
from scheduler.roll_jobs import OPENER, RollJobs
from scheduler.spark_compaction import SparkFactory

log = logging.getLogger("streampart.scheduler")

# Why 10 s: after shutdown_grace a roll is asked to stop at its next step boundary; steps are
# one Delta commit or one metastore update each, except compaction, which may take longer.
# Past this the process exits anyway: the roll is then in the same state as after a crash,
# which the roll protocol resumes safely (its lease lapses within roll.renewed_lease).
ABANDON_WAIT = timedelta(seconds=10)


@dataclass
class RollDaemon:
    """The roll daemon of one metastore: ``start``/``stop`` (the CLI runs one per metastore through
    :class:`scheduler.federation_daemons.FederationDaemons`, which handles the signals)."""

    catalog: Catalog
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    roll_config: RollConfig = field(default_factory=RollConfig)
    chunk_config: ChunkConfig = field(default_factory=ChunkConfig)
    owner: str = field(default_factory=owner_id)
    # roll.engine = spark: the Spark session of a table's cluster (see Roller.spark)
    spark: SparkFactory | None = None
    # Which tables of its metastore it rolls (None: all): a metastore with a whitelist lets it
    # write only some namespaces (see scheduler.federation_daemons); asked at every sync, so an
    # access change applies without a restart.
    may_roll: Callable[[Table], bool] | None = None
    # False when a supervisor serves the metrics of several daemons on one port (it sets
    # metrics_port, which the lease's info advertises).
    serve_metrics: bool = True

    def __post_init__(self) -> None:
        try:
            check_heartbeat(self.config, self.roll_config)
        except ValueError as exc:
            raise UserInputError(str(exc)) from None
        self.metrics = SchedulerMetrics()
        self._stopping = threading.Event()
        self._abandon = threading.Event()
        # held by a heartbeat while it runs; stop() takes it to end the heartbeats before it
        # releases the rolls and the lease (a renewal after the release would hold them again)
        self._beat = threading.Lock()
        self._beats_over = False
        self.metrics_port: int | None = None
        self._metrics_server: Any = None
        self.leadership = Leadership(
            self.catalog.store,
            self.config.lease_name,
            self.owner,
            self.config.lease_ttl,
            on_elected=self._on_elected,
            on_deposed=self._on_deposed,
        )
        self.scheduler = BackgroundScheduler(
            timezone=UTC,
            executors={
                # rolls, each table on its own thread so a slow or failing table holds up no other
                "default": ThreadPoolExecutor(self.config.workers),
                # the heartbeat alone: it must never wait behind a long roll or housekeeping run
                "control": ThreadPoolExecutor(1),
                # the beginning of every due roll, at its due time: never behind the pool's rolls
                OPENER: ThreadPoolExecutor(1),
                "maintenance": ThreadPoolExecutor(2),
            },
        )
        self.replication = ReplicationJobs(
            self.catalog,
            self.config.replication,
            self.scheduler,
            self.metrics,
            self.owner,
            self.roll_config.renewed_lease,
            fence=self._fence,
            should_abandon=self._should_abandon,
            step_down=self.leadership.step_down,
            spark=self.spark,
        )
        self.rolls = RollJobs(
            self.catalog,
            self.config,
            self.roll_config,
            self.scheduler,
            self.metrics,
            self.owner,
            fence=self._fence,
            stopping=self._stopping.is_set,
            should_abandon=self._should_abandon,
            step_down=self.leadership.step_down,
            rolled=self.replication.start_now,  # copy the new standard partition to the secondaries
            may_roll=self.may_roll,
            spark=self.spark,
        )
        self.expiry = ExpiryJobs(
            self.catalog,
            self.rolls,
            self.roll_config,
            self.metrics,
            self.owner,
            fence=self._fence,
            stopping=self._stopping.is_set,
            should_abandon=self._should_abandon,
            step_down=self.leadership.step_down,
        )
        self.stuck = False

    # -- life ------------------------------------------------------------------------------
    @property
    def metastore(self) -> str:
        """The name of the metastore it serves (``primary``, or a federated one)."""
        return self.catalog.store.name

    def start(self) -> None:
        """Start serving metrics and the scheduler's jobs (returns at once)."""
        if self.config.metrics and self.serve_metrics:
            host, port = self.config.metrics_host, self.config.metrics_port
            try:
                self._metrics_server = self.metrics.serve(host, port)
            except OSError as exc:
                raise UserInputError(
                    f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); choose another "
                    "port with --metrics-port or scheduler.metrics_port, or --no-metrics"
                ) from None
            self.metrics_port = int(self._metrics_server.server_port)
        host = socket.gethostname()
        self.leadership.info = {
            "host": host,
            "pid": os.getpid(),
            "owner": self.owner,
            "metastore": self.metastore,
            "started_at": iso(clock.now()),
            "metrics": f"http://{host}:{self.metrics_port}/metrics" if self.metrics_port else None,
        }
        self._add_jobs(clock.now())
        self.scheduler.start()
        event(
            log,
            logging.INFO,
            "daemon.started",
            "roll daemon started",
            owner=self.owner,
            lease=self.config.lease_name,
            metrics_port=self.metrics_port,
            metastore=self.catalog.store.label,
            warehouse=str(self.catalog.warehouse.root),
        )

    def _add_jobs(self, now: datetime) -> None:
        """The daemon's periodic jobs: (what, id, executor, every, first run) for each one enabled."""
        c = self.config
        jobs: list[tuple[Any, str, str, timedelta, datetime | None]] = [
            (self._heartbeat, "heartbeat", "control", c.heartbeat, now),
            (self.rolls.sync, "sync", "maintenance", c.sync_interval, None),
            (self._observe, "observe", "maintenance", c.observe_interval, None),
            (self._expire, "expiry", "maintenance", c.expiry_interval, now + c.lease_ttl),
        ]
        if c.housekeeping.enabled:
            jobs.append(
                (self._housekeep, "housekeeping", "maintenance", c.housekeeping.interval, now + c.lease_ttl)
            )
        if c.replication.enabled:
            jobs.append((self.replication.sweep, "replication", "maintenance", c.replication.interval, None))
        for job, job_id, executor, every, first in jobs:
            self.scheduler.add_job(
                self._guard(job),
                "interval",
                id=job_id,
                executor=executor,
                seconds=every.total_seconds(),
                **({"next_run_time": first} if first is not None else {}),
                **JOB,
            )

    def stop(self, grace: timedelta | None = None) -> None:
        """Stop: no new rolls; let a roll in progress finish within ``grace``, else abandon it."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        grace = self.config.shutdown_grace if grace is None else grace
        self.rolls.remove()
        self.replication.remove()  # copies in progress stop at their next step (_should_abandon)
        if not self.rolls.wait_idle(grace):
            event(
                log,
                logging.WARNING,
                "roll.abandoning",
                "abandoning rolls in progress at their next step",
                rolls=self.rolls.running(),
            )
            self._abandon.set()
            self.stuck = not self.rolls.wait_idle(ABANDON_WAIT)
        with self._beat:  # a heartbeat in flight ends first; none renews anything after this
            self._beats_over = True
        if not self.stuck:
            try:  # nobody works on our rolls any more: let the next leader resume them at once
                released = self.catalog.store.release_rolls(self.owner)
                if released:
                    event(log, logging.INFO, "roll.released", "released unfinished rolls", rolls=released)
                # a copy still running fails its next claim or finds its commit taken: both harmless
                copies = self.catalog.store.release_copies(self.owner)
                if copies:
                    event(log, logging.INFO, "replica.released", "released unfinished copies", copies=copies)
            except MetastoreUnavailableError as exc:
                event(log, logging.WARNING, "roll.release_failed", "could not release rolls", error=str(exc))
        self.leadership.release()
        self.metrics.leader.set(0)
        if self.scheduler.running:
            self.scheduler.shutdown(wait=False)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        event(log, logging.INFO, "daemon.stopped", "roll daemon stopped", owner=self.owner, stuck=self.stuck)

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

    def _fence(self) -> Lease | None:
        """The leadership lease that fences rolls and copies, while this daemon leads."""
        return self.leadership.lease

    def _should_abandon(self) -> bool:
        return self._abandon.is_set() or not self.leadership.is_leader

    @staticmethod
    def _guard(job: Any) -> Any:
        """A periodic job that logs its failure and runs again next time (never kills the scheduler)."""

        def run() -> None:
            try:
                job()
            except Exception as exc:
                level = logging.WARNING if isinstance(exc, RetriableError) else logging.ERROR
                event(
                    log,
                    level,
                    "job.failed",
                    f"{job.__name__} failed: {exc}",
                    job=job.__name__,
                    exc_info=not isinstance(exc, RetriableError),
                )

        run.__name__ = job.__name__
        return run

    # -- leadership ------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        with self._beat:
            if not self._beats_over:
                self._beat_once()

    def _beat_once(self) -> None:
        lease = self.leadership.tick(acquire=not self._stopping.is_set())
        if lease is not None:
            try:
                self.catalog.store.renew_roll_and_copy_leases(
                    self.owner, self.roll_config.renewed_lease, fence=lease
                )
            except LeaseLostError as exc:
                self.leadership.step_down(str(exc))
        self.metrics.leader.set(1 if self.leadership.is_leader else 0)
        # last: the status page's list of daemons (leader and standbys) must never delay the lease
        role = "leader" if self.leadership.is_leader else "standby"
        info = {**self.leadership.info, "role": role}
        self.catalog.store.record_heartbeat(self.config.lease_name, self.owner, info)

    def _on_elected(self, lease: Lease) -> None:
        self.metrics.leader.set(1)
        self.metrics.epoch.set(lease.epoch)
        if not self._stopping.is_set():
            # resume interrupted rolls and schedule every table now, not at the next sync
            self.scheduler.modify_job("sync", next_run_time=clock.now())
            self.scheduler.modify_job("observe", next_run_time=clock.now())
            if self.config.replication.enabled:
                self.scheduler.modify_job("replication", next_run_time=clock.now())

    def _on_deposed(self, reason: str) -> None:
        self.metrics.leader.set(0)
        self.rolls.remove()  # rolls in progress stop at their next step (_should_abandon)
        self.replication.remove()  # copies too

    # -- monitoring and housekeeping -------------------------------------------------------
    def _observe(self) -> None:
        """Refresh the per-table and per-replica gauges (the leader's view; standbys export none)."""
        self.rolls.observe()
        self.replication.observe()

    def _expire(self) -> None:
        if self.leadership.is_leader and not self._stopping.is_set():
            self.expiry.sweep()

    def _housekeep(self) -> None:
        if not self.leadership.is_leader or self._stopping.is_set():
            return
        keeper = Housekeeper(self.catalog, self.config.housekeeping, self.chunk_config, self.may_roll)
        report = keeper.run(should_stop=lambda: self._stopping.is_set() or not self.leadership.is_leader)
        m = self.metrics
        outcome = "failed" if report.errors else "ok"
        m.housekeeping.labels(outcome).inc()
        self.catalog.store.record_housekeeping(self.config.lease_name, self.owner, outcome)
        m.files_removed.inc(len(report.files_removed))
        m.chunks_expired.inc(report.expired)
        m.chunks_pruned.inc(report.chunks_pruned)
        m.checkpoints.inc(len(report.checkpoints))
        m.partitions_reclaimed.inc(report.partitions_reclaimed)
        m.files_reclaimed.labels(where="primary").inc(report.deleted_files_reclaimed)
        m.files_reclaimed.labels(where="secondary").inc(report.secondary_files_reclaimed)
        event(
            log,
            logging.WARNING if report.errors else logging.INFO,
            "housekeeping.done",
            "housekeeping pass finished",
            **report.to_json(),
        )

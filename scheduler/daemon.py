"""The roll daemon: rolls every streaming table on time, one active daemon among many.

HIVE-4196 needs "an active agent running to check when it is time to roll and trigger the
roll"; this is that agent (``streampart scheduler run``). It is built on APScheduler:

- **Leadership.** Every daemon heartbeats a lease in the metastore (:mod:`scheduler.leadership`);
  only the holder rolls. Rolls begin and are claimed fenced by the lease's epoch, and the
  leader renews the leases of the rolls it carries out at every heartbeat, so when it dies its
  rolls lapse and the next leader resumes them within ``roll.renewed_lease``.
- **One job per partition.** The job that rolls a partition has the id
  ``roll:<table id>:<partition value>``: re-scheduling it (a retry, a re-read of the table
  list) replaces it rather than adding a second, a per-table lock lets one partition of a
  table roll at a time (concurrent seals of one Delta table would only conflict), and the
  metastore's compare-and-swap on the partition's state decides any remaining race.
- **Sync.** Every ``sync_interval`` (and right after each roll) the table list is read again:
  new tables and partitions get jobs, jobs of dropped tables and of partitions rolled by
  someone else go, unfinished rolls found in the metastore are resumed (at start-up too).
- **Failures.** A failed roll is retried with exponential backoff for its table alone; jobs
  run on a pool of ``workers`` threads, so a failing or slow table never holds up others.
- **Shutdown.** On SIGTERM no new roll starts; a roll in progress may finish within
  ``shutdown_grace``, otherwise it is abandoned at its next step boundary (recorded in the
  metastore, resumed by the next leader). The lease is released and the process exits 0.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.date import DateTrigger

from ingest.config import ChunkConfig
from metastore import clock
from metastore.catalog import Catalog
from metastore.errors import (
    LeaseLostError,
    MetastoreUnavailableError,
    NotFoundError,
    RetriableError,
    UserInputError,
)
from metastore.logs import event
from metastore.models import Lease, Partition, PartitionState, RollOutcome, Table, iso
from scheduler.config import RollConfig, SchedulerConfig, check_heartbeat
from scheduler.errors import RollAbandonedError, RollBusyError
from scheduler.housekeeping import Housekeeper
from scheduler.leadership import Leadership
from scheduler.metrics import SchedulerMetrics
from scheduler.replication_jobs import ReplicationJobs
from scheduler.roll import NEVER, Roller, RollResult, due_time, owner_id
from scheduler.spark_compaction import SparkFactory

log = logging.getLogger("streampart.scheduler")

# Why these job settings (APScheduler's defaults would be wrong for rolls):
# - misfire_grace_time=None: a roll job whose time passed while every worker was busy (or the
#   machine was suspended) must still run, however late; a roll never happens "too late to
#   bother", and a dropped date job would leave its partition open until the next sync.
# - coalesce=True: periodic jobs (heartbeat, sync, housekeeping) that missed several runs run
#   once, not in a burst; a burst of heartbeats or syncs achieves nothing more than one.
# - max_instances=1: one run of a job at a time; together with the job id per partition and
#   the per-table lock, a retry can never overlap the attempt it retries.
_ROLL_JOB = {"misfire_grace_time": None, "coalesce": True, "max_instances": 1}
_PERIODIC_JOB = {"misfire_grace_time": None, "coalesce": True, "max_instances": 1}

# Why 1 s: a roll job that finds its table's lock taken (another partition of the same table
# is rolling) tries again this much later instead of holding a worker thread while it waits.
TABLE_BUSY_RETRY = timedelta(seconds=1)

# Why 10 s: after shutdown_grace a roll is asked to stop at its next step boundary; steps are
# one Delta commit or one metastore update each, except compaction, which may take longer.
# Past this the process exits anyway: the roll is then in the same state as after a crash,
# which the roll protocol resumes safely (its lease lapses within roll.renewed_lease).
ABANDON_WAIT = timedelta(seconds=10)


def roll_job_id(table_id: int, value: datetime) -> str:
    return f"roll:{table_id}:{iso(value)}"


def backoff(config: SchedulerConfig, failures: int) -> timedelta:
    """Delay before retry number ``failures`` (1, 2, …): doubling from retry_base up to retry_max."""
    base = config.retry_base.total_seconds() * 2 ** min(failures - 1, 30)
    delay = min(config.retry_max.total_seconds(), base)
    return timedelta(seconds=delay * (1 + config.retry_jitter * random.random()))


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
            fence=lambda: self.leadership.lease if self.leadership.is_leader else None,
            should_abandon=self._should_abandon,
            step_down=lambda why: self.leadership.step_down(why),
            spark=self.spark,
        )
        self._lock = threading.Lock()
        self._table_locks: dict[int, threading.Lock] = {}
        self._running: set[str] = set()
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, datetime] = {}
        self._known: dict[int, str] = {}
        self._stopping = threading.Event()
        self._abandon = threading.Event()
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
        now = clock.now()
        c = self.config
        self.scheduler.add_job(
            self._guard(self._heartbeat),
            "interval",
            id="heartbeat",
            executor="control",
            seconds=c.heartbeat.total_seconds(),
            next_run_time=now,
            **_PERIODIC_JOB,
        )
        self.scheduler.add_job(
            self._guard(self._sync),
            "interval",
            id="sync",
            executor="maintenance",
            seconds=c.sync_interval.total_seconds(),
            **_PERIODIC_JOB,
        )
        self.scheduler.add_job(
            self._guard(self._observe),
            "interval",
            id="observe",
            executor="maintenance",
            seconds=c.observe_interval.total_seconds(),
            **_PERIODIC_JOB,
        )
        if c.housekeeping.enabled:
            self.scheduler.add_job(
                self._guard(self._housekeep),
                "interval",
                id="housekeeping",
                executor="maintenance",
                seconds=c.housekeeping.interval.total_seconds(),
                next_run_time=now + c.lease_ttl,
                **_PERIODIC_JOB,
            )
        if c.replication.enabled:
            self.scheduler.add_job(
                self._guard(self.replication.sweep),
                "interval",
                id="replication",
                executor="maintenance",
                seconds=c.replication.interval.total_seconds(),
                **_PERIODIC_JOB,
            )
        self.scheduler.start()
        event(
            log,
            logging.INFO,
            "daemon.started",
            "roll daemon started",
            owner=self.owner,
            lease=c.lease_name,
            metrics_port=self.metrics_port,
            metastore=self.catalog.store.label,
            warehouse=str(self.catalog.warehouse.root),
        )

    def stop(self, grace: timedelta | None = None) -> None:
        """Stop: no new rolls; let a roll in progress finish within ``grace``, else abandon it."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        grace = self.config.shutdown_grace if grace is None else grace
        self._remove_roll_jobs()
        self.replication.remove()  # copies in progress stop at their next step (_should_abandon)
        if not self._wait_idle(grace):
            event(
                log,
                logging.WARNING,
                "roll.abandoning",
                "abandoning rolls in progress at their next step",
                rolls=sorted(self._running),
            )
            self._abandon.set()
            self.stuck = not self._wait_idle(ABANDON_WAIT)
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

    def _wait_idle(self, timeout: timedelta) -> bool:
        deadline = clock.monotonic() + timeout.total_seconds()
        while True:
            with self._lock:
                if not self._running:
                    return True
            if clock.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    @property
    def is_leader(self) -> bool:
        return self.leadership.is_leader

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
        lease = self.leadership.tick(acquire=not self._stopping.is_set())
        if lease is not None:
            try:
                self.catalog.store.renew_roll_leases(self.owner, self.roll_config.renewed_lease, fence=lease)
                self.catalog.store.renew_copy_leases(self.owner, self.roll_config.renewed_lease, fence=lease)
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
        self._remove_roll_jobs()  # rolls in progress stop at their next step (_should_abandon)
        self.replication.remove()  # copies too

    # -- scheduling ------------------------------------------------------------------------
    def _remove_roll_jobs(self, table_id: int | None = None) -> None:
        prefix = "roll:" if table_id is None else f"roll:{table_id}:"
        for job in self.scheduler.get_jobs():
            if job.id.startswith(prefix):
                with contextlib.suppress(JobLookupError):  # it ran or was removed meanwhile
                    job.remove()

    def _schedule(self, table_id: int, name: str, value: datetime, at: datetime) -> None:
        """Have the partition's job run at ``at`` (replacing its earlier plan).

        Not while that job runs: a second run of one job would be dropped by APScheduler
        (max_instances=1); the running job plans its own retry once it is done.
        """
        job_id = roll_job_id(table_id, value)
        with self._lock:
            if job_id in self._running or self._stopping.is_set():
                return
        job = self.scheduler.get_job(job_id)
        if (
            job is not None
            and job.next_run_time is not None
            and abs(job.next_run_time - at) < timedelta(milliseconds=1)
        ):
            return
        self.scheduler.add_job(
            self._roll_job,
            DateTrigger(run_date=at, timezone=UTC),
            args=[table_id, value],
            id=job_id,
            name=f"roll {name} {iso(value)}",
            executor="default",
            replace_existing=True,
            **_ROLL_JOB,
        )

    def _sync(self) -> None:
        """Read the table list again and (re)schedule every table's partitions."""
        if not self.leadership.is_leader or self._stopping.is_set():
            return
        tables = [t for t in self.catalog.store.list_tables() if self._rolls(t)]
        current = {t.id: str(t.name) for t in tables}
        for table in tables:
            if table.id not in self._known:
                event(
                    log,
                    logging.INFO,
                    "table.added",
                    "table scheduled",
                    table=str(table.name),
                    mode=table.mode.value,
                    roll_every=table.roll_every.total_seconds(),
                )
            self._try_sync_table(table)
        for table_id, name in self._known.items():
            if table_id not in current:
                event(log, logging.INFO, "table.dropped", "table dropped: no more rolls", table=name)
                self._forget(table_id)
        self._known = current
        for job in self.scheduler.get_jobs():
            if job.id.startswith("roll:") and int(job.id.split(":")[1]) not in current:
                self._remove_roll_jobs(int(job.id.split(":")[1]))

    def _rolls(self, table: Table) -> bool:
        """Whether this daemon rolls ``table``: its namespace lives here (not a move's copy before
        its flip, nor its leftover after), and its metastore's access type lets it be written."""
        if self.catalog.router.metastore_of(table.name.namespace) != self.catalog.store.name:
            return False
        return self.may_roll is None or self.may_roll(table)

    def _try_sync_table(self, table: Table) -> None:
        """:meth:`_sync_table`, a failure logged: one table never stops the others' scheduling."""
        try:
            self._sync_table(table)
        except Exception as exc:
            event(
                log,
                logging.WARNING,
                "table.sync_failed",
                "could not schedule a table",
                table=str(table.name),
                error=str(exc),
            )

    def _sync_table(self, table: Table) -> None:
        store, now = self.catalog.store, clock.now()
        partitions = store.list_partitions(table.id, [PartitionState.STREAMING, PartitionState.ROLLING])
        rolls = {r.partition_id: r for r in store.list_rolls(table.id, unfinished=True)}
        wanted: dict[str, tuple[datetime, datetime]] = {}
        for p in partitions:
            if p.state is PartitionState.ROLLING:
                roll = rolls.get(p.id)
                if roll is None:
                    continue  # finished meanwhile
                lapsed = roll.lease_until is None or roll.lease_until <= now
                at = now if roll.owner == self.owner or lapsed else roll.lease_until
                assert at is not None
            else:
                at = due_time(table, p)
                if at >= NEVER:
                    continue  # nothing to plan (the scheduler cannot hold a job at year 9999)
            retry = self._retry_at.get(table.id)
            if retry is not None and retry > at:
                at = retry
            wanted[roll_job_id(table.id, p.value)] = (p.value, at)
        for job in self.scheduler.get_jobs():
            if job.id.startswith(f"roll:{table.id}:") and job.id not in wanted:
                self._remove_roll_jobs_by_id(job.id)  # rolled by another roller meanwhile
        for value, at in wanted.values():
            self._schedule(table.id, str(table.name), value, at)

    def _remove_roll_jobs_by_id(self, job_id: str) -> None:
        with contextlib.suppress(JobLookupError):
            self.scheduler.remove_job(job_id)

    def _forget(self, table_id: int) -> None:
        self._remove_roll_jobs(table_id)
        with self._lock:
            self._failures.pop(table_id, None)
            self._retry_at.pop(table_id, None)

    def _table_lock(self, table_id: int) -> threading.Lock:
        with self._lock:
            return self._table_locks.setdefault(table_id, threading.Lock())

    # -- rolling ---------------------------------------------------------------------------
    def _roll_job(self, table_id: int, value: datetime) -> None:
        """The job of one partition: roll it (or resume its roll), record the outcome."""
        if not self.leadership.is_leader or self._stopping.is_set():
            return
        job_id = roll_job_id(table_id, value)
        lock = self._table_lock(table_id)
        if not lock.acquire(blocking=False):
            self._schedule(
                table_id, self._known.get(table_id, f"#{table_id}"), value, clock.now() + TABLE_BUSY_RETRY
            )
            return
        with self._lock:
            self._running.add(job_id)
        table: Table | None = None
        again: datetime | None = None
        try:
            table, again = self._roll_one(table_id, value)
        except Exception as exc:  # a bug or an unreachable metastore: logged, retried by sync
            event(log, logging.ERROR, "roll.job_failed", f"roll job failed: {exc}", job=job_id, exc_info=True)
        finally:
            with self._lock:
                self._running.discard(job_id)
            lock.release()
        if again is not None:  # only now: while the job ran, its id was taken (see _schedule)
            self._schedule(table_id, self._known.get(table_id, f"#{table_id}"), value, again)
        elif table is not None and self.leadership.is_leader and not self._stopping.is_set():
            # schedule the partition that opened (arrival mode) without waiting for a sync
            self._try_sync_table(table)

    def _roll_one(self, table_id: int, value: datetime) -> tuple[Table | None, datetime | None]:
        """Roll or resume one partition: the table (to schedule its next partitions) or when to try again."""
        store = self.catalog.store
        try:
            table = store.get_table_by_id(table_id)
        except NotFoundError:
            self._forget(table_id)
            return None, None
        if not self._rolls(table):  # its namespace left the metastore's whitelist since the sync
            self._forget(table_id)
            return None, None
        partition = store.get_partition(table_id, value)
        fence = self.leadership.lease
        if partition is None or partition.state is PartitionState.STANDARD or fence is None:
            return table, None
        roller = Roller(
            self.catalog,
            self.roll_config.renewed(),
            owner=self.owner,
            fence=fence,
            should_abandon=self._should_abandon,
            spark=self.spark,
        )
        started, resumed, roll_id = clock.now(), partition.state is PartitionState.ROLLING, None
        try:
            if resumed:
                roll = next(
                    (
                        r
                        for r in store.list_rolls(table_id, unfinished=True)
                        if r.partition_id == partition.id
                    ),
                    None,
                )
                if roll is None:
                    return table, None  # finished meanwhile
                roll_id = roll.id
                result: RollResult | None = roller.run(table, roll, resumed=True)
            else:
                due = due_time(table, partition)
                if due > started:  # the table's schedule changed since this job was planned
                    return None, due
                result = roller.roll_partition(table, partition, started)
        except RollBusyError:
            roll = self._roll_of(partition)
            at = roll.lease_until if roll is not None and roll.lease_until else clock.now()
            event(
                log,
                logging.INFO,
                "roll.busy",
                "another roller holds this roll; waiting for its lease",
                table=str(table.name),
                partition=iso(value),
                until=at,
            )
            return None, max(at, clock.now()) + timedelta(milliseconds=100)
        except (RollAbandonedError, LeaseLostError) as exc:
            if isinstance(exc, LeaseLostError):
                self.leadership.step_down(str(exc))
            self.metrics.rolls.labels(str(table.name), "abandoned").inc()
            self._record(
                table,
                partition,
                started,
                RollOutcome.ABANDONED,
                fence,
                resumed=resumed,
                roll_id=roll_id or self._roll_id(partition),
                error=str(exc),
            )
            event(
                log,
                logging.WARNING,
                "roll.abandoned",
                "roll abandoned; it resumes from its last step",
                table=str(table.name),
                partition=iso(value),
                reason=str(exc),
            )
            return None, None
        except Exception as exc:
            return None, self._failed(table, partition, started, fence, exc, resumed, roll_id)
        if result is not None:
            self._done(table, partition, result, started, fence)
            self.replication.start_now(table.id)  # copy the new standard partition to the secondaries
        return table, None

    def _roll_of(self, partition: Partition) -> Any:
        rolls = self.catalog.store.list_rolls(partition.table_id, unfinished=True)
        return next((r for r in rolls if r.partition_id == partition.id), None)

    def _roll_id(self, partition: Partition) -> str | None:
        try:
            roll = self._roll_of(partition)
        except Exception:
            return None
        return roll.id if roll is not None else None

    def _done(
        self, table: Table, partition: Partition, result: RollResult, started: datetime, fence: Lease
    ) -> None:
        with self._lock:
            self._failures.pop(table.id, None)
            self._retry_at.pop(table.id, None)
        name = str(table.name)
        self.metrics.rolls.labels(name, "done").inc()
        self.metrics.roll_seconds.labels(name).observe(result.seconds)
        self.metrics.failures.labels(name).set(0)
        self._record(
            table,
            partition,
            started,
            RollOutcome.DONE,
            fence,
            resumed=result.resumed,
            roll_id=result.roll,
            rows=result.rows,
        )
        event(
            log,
            logging.INFO,
            "roll.done",
            "partition rolled",
            table=name,
            partition=result.partition,
            rows=result.rows,
            chunks=result.chunks,
            files_before=result.files_before,
            files_after=result.files_after,
            seconds=result.seconds,
            resumed=result.resumed,
            next_partition=result.next_partition,
            epoch=fence.epoch,
            lag_seconds=round((clock.now() - due_time(table, partition)).total_seconds(), 3),
        )

    def _failed(
        self,
        table: Table,
        partition: Partition,
        started: datetime,
        fence: Lease,
        exc: Exception,
        resumed: bool,
        roll_id: str | None,
    ) -> datetime:
        """Count a failure of the table's rolls and record it; when to try again (backoff)."""
        with self._lock:
            failures = self._failures.get(table.id, 0) + 1
            self._failures[table.id] = failures
            retry_at = clock.now() + backoff(self.config, failures)
            self._retry_at[table.id] = retry_at
        name = str(table.name)
        error = f"{type(exc).__name__}: {exc}"
        self.metrics.rolls.labels(name, "failed").inc()
        self.metrics.failures.labels(name).set(failures)
        try:
            self._record(
                table,
                partition,
                started,
                RollOutcome.FAILED,
                fence,
                resumed=resumed,
                roll_id=roll_id or self._roll_id(partition),
                error=error,
                failures=failures,
                retry_at=retry_at,
            )
        except Exception as record_exc:
            event(
                log,
                logging.WARNING,
                "roll.record_failed",
                "could not record a failed roll",
                error=str(record_exc),
            )
        transient = isinstance(exc, RetriableError)
        event(
            log,
            logging.WARNING if transient else logging.ERROR,
            "roll.failed",
            "roll failed; retrying with backoff",
            table=name,
            partition=iso(partition.value),
            error=error,
            failures=failures,
            retry_at=retry_at,
            transient=transient,
            exc_info=not transient,
        )
        return retry_at

    def _record(
        self,
        table: Table,
        partition: Partition,
        started: datetime,
        outcome: RollOutcome,
        fence: Lease,
        **fields: Any,
    ) -> None:
        self.catalog.store.record_roll_attempt(
            table_id=table.id,
            partition_value=partition.value,
            owner=self.owner,
            epoch=fence.epoch,
            started_at=started,
            finished_at=clock.now(),
            outcome=outcome,
            **fields,
        )

    # -- monitoring and housekeeping -------------------------------------------------------
    def _observe(self) -> None:
        """Refresh the per-table gauges (the leader's view; standbys export none)."""
        if not self.leadership.is_leader:
            self.metrics.set_tables({})
            return
        store, now = self.catalog.store, clock.now()
        counts, pending = store.partition_counts(), store.pending_chunk_counts()
        values: dict[str, dict[str, float]] = {}
        for table in (t for t in store.list_tables() if self._rolls(t)):
            lag = 0.0
            for p in store.list_partitions(table.id, [PartitionState.STREAMING, PartitionState.ROLLING]):
                lag = max(lag, (now - due_time(table, p)).total_seconds())
            by_state = counts.get(table.id, {})
            values[str(table.name)] = {
                "open": by_state.get(PartitionState.STREAMING, 0),
                "rolling": by_state.get(PartitionState.ROLLING, 0),
                "pending": pending.get(table.id, 0),
                "lag": lag,
                "failures": self._failures.get(table.id, 0),
            }
        self.metrics.set_tables(values)
        self.replication.observe()

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
        event(
            log,
            logging.WARNING if report.errors else logging.INFO,
            "housekeeping.done",
            "housekeeping pass finished",
            **report.to_json(),
        )

"""The roll daemon's roll jobs: each streaming partition rolled on time, its outcome recorded.

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
- **Outcomes.** Every attempt (done, failed, abandoned) is recorded in the metastore's roll
  history with the daemon's epoch, counted in the metrics and logged.

Rolls begin and are claimed fenced by the daemon's leadership lease, and stop at a step
boundary on shutdown or when leadership is lost (:class:`scheduler.daemon.RollDaemon`).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from metastore import clock
from metastore.catalog import Catalog
from metastore.errors import LeaseLostError, NotFoundError, RetriableError
from metastore.logs import event
from metastore.models import Lease, Partition, PartitionState, Roll, RollOutcome, Table, iso
from scheduler.config import RollConfig, SchedulerConfig
from scheduler.errors import RollAbandonedError, RollBusyError
from scheduler.jobs import plan, remove_jobs
from scheduler.metrics import SchedulerMetrics
from scheduler.roll import NEVER, Roller, RollResult, due_time
from scheduler.spark_compaction import SparkFactory

log = logging.getLogger("streampart.scheduler")

# The executor of the job that begins every roll due at one instant (``RollJobs.open_due``): a
# thread of its own, so a partition closes on time however many rolls the pool is still carrying.
OPENER = "opener"

# Why 1 s: a roll job that finds its table's lock taken (another partition of the same table
# is rolling) tries again this much later instead of holding a worker thread while it waits.
TABLE_BUSY_RETRY = timedelta(seconds=1)


def roll_job_id(table_id: int, value: datetime) -> str:
    return f"roll:{table_id}:{iso(value)}"


def backoff(config: SchedulerConfig, failures: int) -> timedelta:
    """Delay before retry number ``failures`` (1, 2, …): doubling from retry_base up to retry_max."""
    base = config.retry_base.total_seconds() * 2 ** min(failures - 1, 30)
    delay = min(config.retry_max.total_seconds(), base)
    return timedelta(seconds=delay * (1 + config.retry_jitter * random.random()))


# A streaming partition to begin: its table, itself, and when it is due
_Due = tuple[Table, Partition, datetime]


@dataclass
class _Attempt:
    """One attempt at rolling a partition, as its outcome is recorded."""

    table: Table
    partition: Partition
    fence: Lease
    started: datetime
    resumed: bool
    roll_id: str | None = None  # known once a resumed roll was found


@dataclass
class RollJobs:
    """Rolls for one roll daemon (its leader's work)."""

    catalog: Catalog
    config: SchedulerConfig
    roll_config: RollConfig
    scheduler: Any  # the daemon's APScheduler
    metrics: SchedulerMetrics
    owner: str
    fence: Callable[[], Lease | None]  # the daemon's leadership lease, None while not leader
    stopping: Callable[[], bool]  # the daemon is shutting down: no new roll starts
    should_abandon: Callable[[], bool]
    step_down: Callable[[str], None]
    rolled: Callable[[int], None]  # a partition of the table (its id) became standard
    # Which tables it rolls (None: all); see RollDaemon.may_roll
    may_roll: Callable[[Table], bool] | None = None
    spark: SparkFactory | None = None  # engine = spark: the Spark session of a table's cluster
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _table_locks: dict[int, threading.Lock] = field(default_factory=dict, init=False)
    _running: set[str] = field(default_factory=set, init=False)
    _failures: dict[int, int] = field(default_factory=dict, init=False)
    _retry_at: dict[int, datetime] = field(default_factory=dict, init=False)
    _known: dict[int, str] = field(default_factory=dict, init=False)
    # Streaming partitions by (table id, value): the table, the partition and when it is due, as
    # the last sync found them (open_due begins their rolls at that time)
    _due: dict[tuple[int, datetime], _Due] = field(default_factory=dict, init=False)
    # Rolls open_due began and no job has carried yet: roll id → when it began
    _begun: dict[str, datetime] = field(default_factory=dict, init=False)

    # -- scheduling ------------------------------------------------------------------------
    def sync(self) -> None:
        """Read the table list again and (re)schedule every table's partitions."""
        if self.fence() is None or self.stopping():
            return
        tables = [t for t in self.catalog.store.list_tables() if self.ours(t)]
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
                self.remove(int(job.id.split(":")[1]))

    def ours(self, table: Table) -> bool:
        """Whether this daemon rolls ``table``: its namespace lives here (not a move's copy before
        its flip, nor its leftover after), and its metastore's access type lets it be written."""
        if self.catalog.router.metastore_of(table.name.namespace) != self.catalog.store.name:
            return False
        return self.may_roll is None or self.may_roll(table)

    def remove(self, table_id: int | None = None) -> None:
        """Drop the planned roll jobs (of one table): running ones stop at their next step."""
        remove_jobs(self.scheduler, "roll:" if table_id is None else f"roll:{table_id}:")
        if table_id is None:  # no longer leading (or stopping): the next leader plans its own
            remove_jobs(self.scheduler, "open:")
            with self._lock:
                self._due.clear()
                self._begun.clear()

    def running(self) -> list[str]:
        """The ids of the roll jobs running now."""
        with self._lock:
            return sorted(self._running)

    def wait_idle(self, timeout: timedelta) -> bool:
        """Wait up to ``timeout`` for no roll job to run; whether none does."""
        deadline = clock.monotonic() + timeout.total_seconds()
        while True:
            with self._lock:
                if not self._running:
                    return True
            if clock.monotonic() >= deadline:
                return False
            time.sleep(0.05)

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
        due: dict[tuple[int, datetime], _Due] = {}
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
                due[(table.id, p.value)] = (table, p, at)
            retry = self._retry_at.get(table.id)
            if retry is not None and retry > at:
                at = retry
            wanted[roll_job_id(table.id, p.value)] = (p.value, at)
        # the others were rolled by another roller meanwhile
        remove_jobs(self.scheduler, f"roll:{table.id}:", keep=wanted)
        for value, at in wanted.values():
            self._schedule(table.id, str(table.name), value, at)
        with self._lock:
            for key in [k for k in self._due if k[0] == table.id and k not in due]:
                del self._due[key]
            self._due.update(due)
        for _, _, at in due.values():
            self._plan_opening(at)

    def _plan_opening(self, at: datetime) -> None:
        """Have :meth:`open_due` run at ``at`` (one job for every roll due at that instant)."""
        job_id = f"open:{iso(at)}"
        if self.stopping() or self.scheduler.get_job(job_id) is not None:
            return
        plan(self.scheduler, self.open_due, at, [], job_id, f"begin the rolls due at {iso(at)}", OPENER)

    def open_due(self) -> None:
        """Begin the roll of every streaming partition due by now (step 1 alone: the partition
        closes and, in arrival mode, the next opens; all of them in one metastore transaction, or
        one by one if that failed), so that each begins at its due time however many rolls the pool
        is carrying; each partition's own job carries its roll out when a worker is free
        (:meth:`_roll`)."""
        fence = self.fence()
        if fence is None or self.stopping():
            return
        now = clock.now()
        with self._lock:
            due = [(k, v) for k, v in self._due.items() if v[2] <= now]
            for key, _ in due:
                del self._due[key]
        # every partition due by now, but a failing table's (its own job begins it, after its backoff)
        todo = [
            (table, partition)
            for _, (table, partition, _) in sorted(due, key=lambda item: item[1][2])
            if self._retry_at.get(table.id) is None
        ]
        if not todo or self.fence() is None or self.stopping():
            return
        roller = Roller(self.catalog, self.roll_config.renewed(), owner=self.owner, fence=fence)
        started = time.monotonic()
        try:  # all of them in one metastore transaction
            began = list(zip(todo, roller.begin_due(todo, clock.now()), strict=True))
            event(
                log,
                logging.INFO,
                "roll.due_begun",
                "began the rolls due",
                rolls=sum(1 for _, roll in began if roll is not None),
                seconds=round(time.monotonic() - started, 3),  # until their partitions closed
            )
        except LeaseLostError as exc:
            self.step_down(str(exc))
            return
        except Exception:  # one of them failed the whole transaction: one by one, each on its own
            began = [(item, self._begin_one(roller, *item)) for item in todo]
        with self._lock:
            for _, roll in began:
                if roll is not None:
                    self._begun[roll.id] = roll.started_at

    def _begin_one(self, roller: Roller, table: Table, partition: Partition) -> Roll | None:
        """Begin one due roll on its own; None if another roller has it, or if it failed (then its
        job begins it, and reports what fails)."""
        if self.fence() is None or self.stopping():
            return None
        try:
            return roller.begin(table, partition, clock.now())
        except LeaseLostError as exc:
            self.step_down(str(exc))
        except Exception as exc:
            event(
                log,
                logging.WARNING,
                "roll.begin_failed",
                "could not begin a due roll; its job tries again",
                table=str(table.name),
                partition=iso(partition.value),
                error=str(exc),
            )
        return None

    def _schedule(self, table_id: int, name: str, value: datetime, at: datetime) -> None:
        """Have the partition's job run at ``at`` (replacing its earlier plan).

        Not while that job runs: a second run of one job would be dropped by APScheduler
        (max_instances=1); the running job plans its own retry once it is done.
        """
        job_id = roll_job_id(table_id, value)
        with self._lock:
            if job_id in self._running or self.stopping():
                return
        job = self.scheduler.get_job(job_id)
        if (
            job is not None
            and job.next_run_time is not None
            and abs(job.next_run_time - at) < timedelta(milliseconds=1)
        ):
            return
        plan(self.scheduler, self.run, at, [table_id, value], job_id, f"roll {name} {iso(value)}")

    def _reschedule(self, table_id: int, value: datetime, at: datetime) -> None:
        self._schedule(table_id, self._known.get(table_id, f"#{table_id}"), value, at)

    def _forget(self, table_id: int) -> None:
        self.remove(table_id)
        with self._lock:
            self._failures.pop(table_id, None)
            self._retry_at.pop(table_id, None)
            for key in [k for k in self._due if k[0] == table_id]:
                del self._due[key]

    def table_lock(self, table_id: int) -> threading.Lock:
        with self._lock:
            return self._table_locks.setdefault(table_id, threading.Lock())

    # -- rolling ---------------------------------------------------------------------------
    def run(self, table_id: int, value: datetime) -> None:
        """The job of one partition: roll it (or resume its roll), record the outcome."""
        if self.fence() is None or self.stopping():
            return
        job_id = roll_job_id(table_id, value)
        lock = self.table_lock(table_id)
        if not lock.acquire(blocking=False):
            self._reschedule(table_id, value, clock.now() + TABLE_BUSY_RETRY)
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
            self._reschedule(table_id, value, again)
        elif table is not None and self.fence() is not None and not self.stopping():
            # schedule the partition that opened (arrival mode) without waiting for a sync
            self._try_sync_table(table)

    def _roll_one(self, table_id: int, value: datetime) -> tuple[Table | None, datetime | None]:
        """Roll or resume one partition: the table (to schedule its next partitions) or when to try again."""
        table = self._table(table_id)
        if table is None:
            return None, None
        partition = self.catalog.store.get_partition(table_id, value)
        fence = self.fence()
        if partition is None or partition.state is PartitionState.STANDARD or fence is None:
            return table, None
        with self._lock:
            retry = self._retry_at.get(table_id)
        if retry is not None and retry > clock.now():
            # the table is failing: none of its partitions' jobs runs before its backoff has
            # passed (this one may have been planned before the last failure set it)
            return None, retry
        attempt = _Attempt(
            table, partition, fence, clock.now(), resumed=partition.state is PartitionState.ROLLING
        )
        if not attempt.resumed:
            due = due_time(table, partition)
            if due > attempt.started:  # the table's schedule changed since this job was planned
                return None, due
        try:
            result = self._roll(attempt)
        except RollBusyError:
            return None, self._busy(table, partition)
        except (RollAbandonedError, LeaseLostError) as exc:
            self._abandoned(attempt, exc)
            return None, None
        except Exception as exc:
            return None, self._failed(attempt, exc)
        if result is not None:
            self._done(attempt, result)
            self.rolled(table.id)
        return table, None

    def _table(self, table_id: int) -> Table | None:
        """The table to roll in, or None (its jobs forgotten): dropped, or no longer ours to roll."""
        try:
            table = self.catalog.store.get_table_by_id(table_id)
        except NotFoundError:
            self._forget(table_id)
            return None
        if not self.ours(table):  # its namespace left the metastore's whitelist since the sync
            self._forget(table_id)
            return None
        return table

    def _roll(self, attempt: _Attempt) -> RollResult | None:
        """Roll the partition, or resume its roll (None: it finished meanwhile)."""
        roller = Roller(
            self.catalog,
            self.roll_config.renewed(),
            owner=self.owner,
            fence=attempt.fence,
            should_abandon=self.should_abandon,
            spark=self.spark,
        )
        if not attempt.resumed:
            return roller.roll_partition(attempt.table, attempt.partition, attempt.started)
        roll = self._roll_of(attempt.partition)
        if roll is None:
            return None
        attempt.roll_id = roll.id
        with self._lock:
            begun = self._begun.pop(roll.id, None)
        if begun is not None:  # begun on time by open_due: carried out now, not resumed
            attempt.resumed, attempt.started = False, begun
        return roller.run(attempt.table, roll, resumed=attempt.resumed)

    def _roll_of(self, partition: Partition) -> Roll | None:
        rolls = self.catalog.store.list_rolls(partition.table_id, unfinished=True)
        return next((r for r in rolls if r.partition_id == partition.id), None)

    def _roll_id(self, attempt: _Attempt) -> str | None:
        if attempt.roll_id is not None:
            return attempt.roll_id
        try:
            roll = self._roll_of(attempt.partition)
        except Exception:
            return None
        return roll.id if roll is not None else None

    # -- outcomes --------------------------------------------------------------------------
    def _busy(self, table: Table, partition: Partition) -> datetime:
        """Another roller holds the roll: try again once its lease ends."""
        roll = self._roll_of(partition)
        at = roll.lease_until if roll is not None and roll.lease_until else clock.now()
        event(
            log,
            logging.INFO,
            "roll.busy",
            "another roller holds this roll; waiting for its lease",
            table=str(table.name),
            partition=iso(partition.value),
            until=at,
        )
        return max(at, clock.now()) + timedelta(milliseconds=100)

    def _abandoned(self, attempt: _Attempt, exc: RollAbandonedError | LeaseLostError) -> None:
        """The roll stopped at a step boundary (shutdown, or leadership lost): it resumes from there."""
        if isinstance(exc, LeaseLostError):
            self.step_down(str(exc))
        name = str(attempt.table.name)
        self.metrics.rolls.labels(name, "abandoned").inc()
        self._record(attempt, RollOutcome.ABANDONED, roll_id=self._roll_id(attempt), error=str(exc))
        event(
            log,
            logging.WARNING,
            "roll.abandoned",
            "roll abandoned; it resumes from its last step",
            table=name,
            partition=iso(attempt.partition.value),
            reason=str(exc),
        )

    def _done(self, attempt: _Attempt, result: RollResult) -> None:
        table, partition = attempt.table, attempt.partition
        with self._lock:
            self._failures.pop(table.id, None)
            self._retry_at.pop(table.id, None)
        name = str(table.name)
        self.metrics.rolls.labels(name, "done").inc()
        self.metrics.roll_seconds.labels(name).observe(result.seconds)
        self.metrics.failures.labels(name).set(0)
        self._record(attempt, RollOutcome.DONE, resumed=result.resumed, roll_id=result.roll, rows=result.rows)
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
            epoch=attempt.fence.epoch,
            lag_seconds=round((clock.now() - due_time(table, partition)).total_seconds(), 3),
        )

    def _failed(self, attempt: _Attempt, exc: Exception) -> datetime:
        """Count a failure of the table's rolls and record it; when to try again (backoff)."""
        table = attempt.table
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
                attempt,
                RollOutcome.FAILED,
                roll_id=self._roll_id(attempt),
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
            partition=iso(attempt.partition.value),
            error=error,
            failures=failures,
            retry_at=retry_at,
            transient=transient,
            exc_info=not transient,
        )
        return retry_at

    def _record(self, attempt: _Attempt, outcome: RollOutcome, **fields: Any) -> None:
        fields.setdefault("resumed", attempt.resumed)
        self.catalog.store.record_roll_attempt(
            table_id=attempt.table.id,
            partition_value=attempt.partition.value,
            owner=self.owner,
            epoch=attempt.fence.epoch,
            started_at=attempt.started,
            finished_at=clock.now(),
            outcome=outcome,
            **fields,
        )

    # -- monitoring ------------------------------------------------------------------------
    def observe(self) -> None:
        """Refresh the per-table gauges (the leader's view; standbys export none)."""
        if self.fence() is None:
            self.metrics.set_tables({})
            return
        store, now = self.catalog.store, clock.now()
        counts, pending = store.partition_counts(), store.pending_chunk_counts()
        values: dict[str, dict[str, float]] = {}
        for table in (t for t in store.list_tables() if self.ours(t)):
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

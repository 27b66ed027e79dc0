"""Housekeeping the roll daemon runs (leader only): the metastore and the warehouse stay small.

- expire chunks reserved but never committed (their files go at once: never visible), and
  finish commits whose writer died mid-commit;
- delete files that are in no current Delta snapshot once the retention period has passed:
  chunk files swept into standard partitions by a roll, files of aborted or expired chunks,
  files a crashed writer or compaction left behind. The retention (default 7 days) is longer
  than any query may pin an older snapshot, so no reader ever misses a file;
- checkpoint each table's Delta log, so loading a table reads one Parquet file rather than
  hundreds of commit files, and delete its commit files past the log retention, so the log
  directory every load lists stays small: both on the schedule the table sets
  (``delta.checkpointInterval``, ``delta.logRetentionDuration``: :mod:`metastore.delta.checkpoints`);
- prune the metastore rows of old chunks into per-partition summaries, so the metastore stays
  small at millions of chunks (``describe`` reads partition rows, which stay);
- forget old roll attempt history, and the leases of commit holders that lapsed an hour ago;
- scrub replicas: read back a few present copies on secondaries each pass (those not verified for
  a day, least recently verified first) and compare each file's SHA-256 with the one verified
  when it was copied; a copy that differs is no longer present — queries stop reading it there —
  and the next copy pass copies it again (:func:`scheduler.replica_scrub.scrub`); keep each
  secondary's log like the primary's and delete the files an expiry or a delete made unreachable
  there (:mod:`scheduler.replica_reclaim`).

Each table is handled on its own: a failure is reported for that table and the others go on.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from ingest.commit_holders import PREFIX as HOLDER_PREFIX
from ingest.config import ChunkConfig
from metastore import clock, storage
from metastore.catalog import Catalog
from metastore.delta.checkpoints import MIN_LOG_RETENTION, last_checkpoint_version, log_entries, log_settings
from metastore.delta.files import live_files, remove_file
from metastore.delta.history import oldest_readable_version
from metastore.delta.layout import STAGING_DIR, chunk_of_staged, partition_dir, value_of_dir
from metastore.delta.log import log_dir
from metastore.delta.staging import files as staged_files
from metastore.delta.staging import partition_dirs as staging_partition_dirs
from metastore.durations import format_duration
from metastore.errors import NotFoundError
from metastore.iceberg import clean, view_directories
from metastore.logs import event
from metastore.models import ChunkState, PartitionState, Table
from metastore.replicas import replica_table
from scheduler.config import HousekeepingConfig
from scheduler.replica_reclaim import reclaim_secondary
from scheduler.replica_scrub import scrub

log = logging.getLogger("streampart.scheduler")

_ACTIVE = (ChunkState.RESERVED, ChunkState.COMMITTING)
_ROLLED = (PartitionState.STANDARD, PartitionState.EXPIRING, PartitionState.EXPIRED)

# The replica scrub: each present copy is read back about once a day, a few copies per table per
# pass (a pass every scheduler.housekeeping.interval), so its reads stay a trickle beside copying.
SCRUB_EVERY = timedelta(days=1)
SCRUB_COPIES = 4


@dataclass
class HousekeepingReport:
    expired: int = 0
    recovered: int = 0
    files_removed: list[str] = field(default_factory=list)
    checkpoints: dict[str, int] = field(default_factory=dict)
    log_files_removed: dict[str, int] = field(default_factory=dict)
    chunks_pruned: int = 0
    attempts_pruned: int = 0
    replicas_verified: int = 0  # present copies whose files were read back and compared
    replicas_damaged: list[str] = field(default_factory=list)  # what the scrub found, one line each
    holders_pruned: int = 0  # lapsed commit-holder leases deleted
    requests_pruned: int = 0  # Kafka ingest jobs' requests, applied longer ago than the history kept
    partitions_reclaimed: int = 0  # expired partitions whose files were deleted
    deleted_files_reclaimed: int = 0  # files a delete by predicate (or a keyed roll) replaced, deleted
    secondary_files_reclaimed: int = 0  # files on secondaries no readable version there lists, deleted
    iceberg_files_removed: int = 0  # Iceberg metadata no engine's newest load needs any more
    errors: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**self.__dict__, "files_removed": len(self.files_removed)}


@dataclass
class Housekeeper:
    catalog: Catalog
    config: HousekeepingConfig = field(default_factory=HousekeepingConfig)
    chunk_config: ChunkConfig = field(default_factory=ChunkConfig)
    # Which tables it may touch (None: all): a metastore with a whitelist lets streampart write
    # only some of its namespaces, and expiring chunks, deleting files, checkpointing and pruning
    # are writes (see scheduler.federation_daemons).
    may_touch: Callable[[Table], bool] | None = None

    def run(
        self, now: datetime | None = None, should_stop: Callable[[], bool] | None = None
    ) -> HousekeepingReport:
        """One pass over every table; never raises for one table's trouble (see ``errors``).

        ``should_stop`` is asked between tables (a daemon shutting down stops there).
        """
        from ingest.chunks import expire_chunks, recover_commits

        now = now or clock.now()
        report = HousekeepingReport()
        store = self.catalog.store
        tables = [t for t in store.list_tables() if self.may_touch is None or self.may_touch(t)]
        allowed = None if self.may_touch is None else [t.id for t in tables]
        report.expired = len(expire_chunks(self.catalog, now, allowed))
        try:
            report.recovered = len(recover_commits(self.catalog, self.chunk_config))
        except Exception as exc:  # one stuck commit must not stop the rest of housekeeping
            report.errors["recover_commits"] = f"{type(exc).__name__}: {exc}"
        for table in tables:
            if should_stop is not None and should_stop():
                break
            if self.catalog.router.metastore_of(table.name.namespace) != store.name:
                continue  # a namespace move's copy before its flip, or its leftover after: not its files

            try:
                report.files_removed += self.remove_files(table, now)
                report.partitions_reclaimed += self.reclaim_expired(table, now)
                report.deleted_files_reclaimed += self.reclaim_deleted(table, now)
                version = self.checkpoint(table)
                if version is not None:
                    report.checkpoints[str(table.name)] = version
                gone = self.clean_log(table)
                if gone:
                    report.log_files_removed[str(table.name)] = gone
                report.chunks_pruned += self.prune(table, now)
                report.iceberg_files_removed += self.clean_iceberg(table, now)
                if self.catalog.replicas.list(table):
                    report.secondary_files_reclaimed += self.secondaries(table, now)
                    verified, damaged = scrub(self.catalog, table, now - SCRUB_EVERY, SCRUB_COPIES)
                    report.replicas_verified += verified
                    report.replicas_damaged += [d.error for d in damaged]
            except NotFoundError:
                continue  # dropped meanwhile
            except Exception as exc:
                report.errors[str(table.name)] = f"{type(exc).__name__}: {exc}"
                event(
                    log,
                    logging.WARNING,
                    "housekeeping.table_failed",
                    "housekeeping failed for a table",
                    table=str(table.name),
                    error=str(exc),
                )
        report.attempts_pruned = store.prune_roll_attempts(now - self.config.history_retention)
        report.requests_pruned = store.prune_ingest_requests(now - self.config.history_retention)
        # commit holders' leases (one per process that committed): gone an hour after they lapsed
        report.holders_pruned = store.delete_lapsed_leases(HOLDER_PREFIX, now - timedelta(hours=1))
        return report

    # -- files ---------------------------------------------------------------------------------
    def remove_files(self, table: Table, now: datetime) -> list[str]:
        """Delete the table's files that no current snapshot lists, once past the retention period.

        A staged file is kept while it is live, while its chunk may still commit (reserved or
        committing), while it is younger than the retention period, and — for a committed chunk
        swept by a roll — until the retention period has passed since that roll.
        """
        cutoff = now - self.config.retention
        cutoff_ms = cutoff.timestamp() * 1000
        if not storage.is_dir(storage.join(table.location, STAGING_DIR)):
            return []
        store, wh = self.catalog.store, self.catalog.warehouse
        # chunks that may still commit are listed *before* the snapshot is loaded: a chunk that
        # commits in between is then either still in this list, or its files are in the snapshot
        active = {c.id for c in store.list_chunks(table.id, _ACTIVE)}
        live = {f.path for f in live_files(wh.load(table))}
        swept: dict[datetime, bool] = {}  # partition: its roll is past the retention and the log
        readable = functools.cache(lambda: oldest_readable_version(table))  # listed if needed
        removed = []
        for rel, entry in staged_files(table):
            if rel in live or entry.mtime_ms >= cutoff_ms:
                continue
            chunk_id = chunk_of_staged(entry.name)
            parts = rel.split("/")  # _staging/<name>, or _staging/<pcol>=<value>/<name> once committed
            placed = value_of_dir(table.partition_column, parts[1]) if len(parts) == 3 else None
            if chunk_id in active or not self._chunk_done_with(
                table, chunk_id, placed, cutoff, swept, readable
            ):
                continue
            remove_file(table, rel)
            removed.append(rel)
        if not storage.is_remote(table.location):  # a bucket has no directories to remove
            for directory in staging_partition_dirs(table):
                # a streaming partition's staging directory, emptied: a commit that links into it
                # just as it goes makes it again (metastore/delta/staging.py)
                path = os.path.join(table.location, directory)
                with contextlib.suppress(OSError):
                    if os.stat(path).st_mtime < cutoff.timestamp():
                        os.rmdir(path)  # only if empty
        # temporary files (and Spark attempts' hidden directories) of compactions interrupted by a
        # crash: never part of any snapshot
        prefix = f"{table.partition_column}="
        for top in storage.list_dir(table.location):
            if top.is_dir and top.name.startswith(prefix):
                for entry in storage.list_dir(storage.join(table.location, top.name)):
                    tmp = entry.name.startswith(".") and entry.name.endswith((".tmp", ".spark"))
                    # a bucket's "directory" has no time of its own (0): Spark never writes to one
                    if tmp and 0 < entry.mtime_ms < cutoff_ms:
                        rel = f"{top.name}/{entry.name}"
                        remove_file(table, rel)
                        removed.append(rel)
        if removed:
            event(
                log,
                logging.INFO,
                "housekeeping.files_removed",
                "removed files past retention",
                table=str(table.name),
                files=len(removed),
            )
        return removed

    def _chunk_done_with(
        self,
        table: Table,
        chunk_id: str,
        placed: datetime | None,
        cutoff: datetime,
        swept: dict[datetime, bool],
        readable: Callable[[], int],
    ) -> bool:
        """Whether no reader can want ``chunk_id``'s staged files any more: never visible, or swept by
        rolls that are past the retention (a query pinned before a roll may still read them) and past
        the Delta log (``table read --version``/``VERSION AS OF`` promise every version the log still
        holds, and the versions before a sweep list its files)."""
        store = self.catalog.store
        try:
            chunk = store.get_chunk(chunk_id)
        except NotFoundError:  # a crashed writer's file never recorded, or its row pruned: then
            # the file was committed (``placed`` in its partition's directory) and swept
            values = [placed] if placed is not None else []
        else:
            if chunk.state in _ACTIVE:
                return False
            if chunk.state is not ChunkState.COMMITTED:
                return True  # aborted or expired: never visible to anyone
            values = list(chunk.partitions)
        for value in values:
            if value not in swept:
                swept[value] = self._swept_long_ago(table, value, cutoff, readable)
            if not swept[value]:
                return False
        return True

    def _swept_long_ago(
        self, table: Table, value: datetime, cutoff: datetime, readable: Callable[[], int]
    ) -> bool:
        store = self.catalog.store
        p = store.get_partition(table.id, value)
        if p is None or p.state not in _ROLLED or p.rolled_at is None or p.rolled_at >= cutoff:
            return False  # not swept, or too recently: a pinned snapshot may still list the file
        rolls = [r for r in store.list_rolls(table.id, partition_ids=[p.id]) if r.sweep_version is not None]
        # the versions before the sweep list the file: kept while the log can still load one
        return bool(rolls) and max(r.sweep_version or 0 for r in rolls) <= readable()

    def reclaim_expired(self, table: Table, now: datetime) -> int:
        """Delete the directories of expired partitions once no reader can want them: expired longer
        ago than the retention period (a query pinned before the expiry) and at a version the Delta
        log no longer holds (time travel promises every version it holds); how many."""
        store = self.catalog.store
        cutoff = now - self.config.retention
        due = [
            p
            for p in store.reclaimable(table.id, oldest_readable_version(table))
            if p.expired_at is not None and p.expired_at < cutoff
        ]
        for p in due:
            storage.delete_tree(storage.join(table.location, partition_dir(table, p.value)))
            store.mark_reclaimed(p, now)
        if due:
            event(
                log,
                logging.INFO,
                "housekeeping.partitions_reclaimed",
                "deleted the files of expired partitions",
                table=str(table.name),
                partitions=len(due),
            )
        return len(due)

    def reclaim_deleted(self, table: Table, now: datetime) -> int:
        """Delete the files deletes by predicate replaced — and, on a keyed table, the files of other
        partitions its rolls replaced (older versions of their keys removed) — on the same rule as
        expired partitions' (no readable version lists them, the retention passed since); how many."""
        store = self.catalog.store
        oldest, before = oldest_readable_version(table), now - self.config.retention
        done: list[tuple[tuple[str, ...], Callable[[], None]]] = [
            (d.removed_files, partial(store.mark_delete_reclaimed, d, now))
            for d in store.reclaimable_deletes(table.id, oldest, before)
        ]
        if table.keys is not None:
            done += [
                (r.removed_files, partial(store.mark_roll_reclaimed, r, now))
                for r in store.reclaimable_rolls(table.id, oldest, before)
            ]
        if not done:
            return 0
        live = {f.path for f in live_files(self.catalog.warehouse.load(table))}  # never one listed now
        gone = 0
        for removed, reclaimed in done:
            for path in removed:
                if path not in live:
                    remove_file(table, path)
                    gone += 1
            reclaimed()
        return gone

    def secondaries(self, table: Table, now: datetime) -> int:
        """Each secondary's Delta log kept like the primary's, then the files an expiry or a delete
        made unreachable there deleted (:mod:`scheduler.replica_reclaim`); how many files went."""
        gone = 0
        for replica in self.catalog.replicas.list(table):
            target = replica_table(table, replica)
            if not storage.is_dir(log_dir(target.location)):
                continue  # nothing copied there yet
            self.checkpoint(target)
            self.clean_log(target)
            gone += reclaim_secondary(self.catalog, table, replica, now - self.config.retention)
        return gone

    # -- Delta log -----------------------------------------------------------------------------
    def checkpoint(self, table: Table) -> int | None:
        """Checkpoint the table's Delta log if it grew by its checkpoint interval; the version.

        The interval is the table's ``delta.checkpointInterval`` unless the operator set
        ``checkpoint_every`` for every table (0: never).
        """
        dt = self.catalog.warehouse.load(table)
        every = self.config.checkpoint_every
        if every == "table":
            every = log_settings(dt).checkpoint_interval
        if every <= 0:
            return None
        version = int(dt.version())
        if version - max(last_checkpoint_version(table), 0) < every:
            return None
        dt.create_checkpoint()
        event(
            log,
            logging.INFO,
            "housekeeping.checkpoint",
            "Delta checkpoint written",
            table=str(table.name),
            version=version,
        )
        return version

    def clean_log(self, table: Table) -> int:
        """Delete the table's commit files past its ``delta.logRetentionDuration``; how many went.

        Only those older than the newest checkpoint go (delta-rs' ``cleanup_metadata``), so the
        table loads as before; time travel reaches back as far as the retention.
        """
        dt = self.catalog.warehouse.load(table)
        retention = log_settings(dt).log_retention
        if retention < MIN_LOG_RETENTION:
            raise ValueError(
                f"its delta.logRetentionDuration ({format_duration(retention)}) is below "
                f"{format_duration(MIN_LOG_RETENTION)}; set it with `streampart table alter "
                f"{table.name} --log-retention DURATION`"
            )
        if last_checkpoint_version(table) < 0:
            return 0
        before = log_entries(table.location)
        dt.cleanup_metadata()
        gone = before - log_entries(table.location)
        if gone:
            event(
                log,
                logging.INFO,
                "housekeeping.log_cleaned",
                "Delta commit files past the log retention deleted",
                table=str(table.name),
                files=gone,
            )
        return gone

    # -- metastore -----------------------------------------------------------------------------
    def clean_iceberg(self, table: Table, now: datetime) -> int:
        """Delete the Iceberg metadata of the table (and of its links) that the newest load no longer
        lists, written longer than the retention ago; how many files went."""
        before = now - self.config.retention
        return sum(clean(directory, before) for directory in view_directories(table.location))

    def prune(self, table: Table, now: datetime) -> int:
        """Prune chunk rows of partitions rolled before the chunk retention; returns how many went."""
        before = now - self.config.chunk_retention
        return self.catalog.store.prune_chunks(table.id, before, now=now)

"""Replication: copies of a table's standard partitions on its secondary clusters (HIVE's seed).

A rolled standard partition never changes, so it can be copied once and proven complete. The
copy of one partition to one secondary goes in steps, each safe to crash in and to repeat:

1. **claim** the copy in the metastore under a lease (like a roll; fenced by the roll
   daemon's leadership when the daemon copies), so one copier works on it at a time;
2. **copy** each of the partition's live files to ``<secondary>/<partition dir>/``
   (:func:`scheduler.file_copies.copy_verified`): copied to a hidden ``.<name>.<attempt>.tmp``
   (by the kernel where it can), flushed to disk, then the SHA-256 and size of the source and
   of the copy as read back are compared, and only then is the copy renamed to the source
   file's own name. With ``engine = "spark"``, the files of a large partition are copied so by
   Spark tasks on the table's cluster, in parallel (:mod:`scheduler.spark_replication`).
   A file already there with the right size and checksum (a crashed attempt's) is kept; every
   attempt writes the same bytes under the same names, so a stale copier can never leave
   anything but identical files behind;
3. **commit** the files to the secondary's Delta table in one commit carrying the Delta
   application transaction ``streampart.replica/<partition dir>``: Delta refuses a second
   commit with that id, so a partition enters the secondary's log at most once, and a resumed
   copy finds that commit in the snapshot instead of committing again. If the source gained or
   widened columns the secondary's log lacks, the same commit carries the source's newest schema
   (:mod:`scheduler.replica_schema`), so no file lands before its columns;
4. write the ``_SUCCESS`` marker, then **record** the copy as present in the metastore.

So a Delta reader of the secondary sees a partition wholly or not at all (the seed's rule), and
queries count it as present only after all of that. A failed copy is let go at once with its
error and the time it may be tried again (doubling backoff); copies of other partitions and
clusters go on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from copy import copy as copy_of
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from ingest.commit_holders import commit_holder
from metastore import clock, storage
from metastore.catalog import Catalog
from metastore.crashpoints import crashpoint, pausepoint
from metastore.delta.errors import first_line, storage_error
from metastore.delta.files import (
    LiveFile,
    live_files,
    partition_dir_entries,
    remove_file,
    write_success_marker,
)
from metastore.delta.layout import partition_dir
from metastore.delta.metadata import columns_of
from metastore.delta.stats import ranges_of_adds
from metastore.errors import (
    ConflictError,
    LeaseLostError,
    MetastoreUnavailableError,
    RetriableError,
    StorageError,
    StoreUnavailableError,
    StreampartError,
)
from metastore.links import PartitionRange
from metastore.logs import event
from metastore.models import Column, Lease, Partition, PartitionState, Table, iso
from metastore.replicas import (
    REPLICA_KEY,
    PartitionCopy,
    Replica,
    app_id,
    backoff,
    not_present,
    replica_table,
)
from metastore.storage import faults
from scheduler.config import ReplicationConfig
from scheduler.errors import ReplicationAbandonedError, ReplicationFailedError
from scheduler.file_copies import CopyMismatchError, copy_verified
from scheduler.replica_schema import commit_copy
from scheduler.roll import owner_id
from scheduler.spark_compaction import SparkFactory
from scheduler.spark_replication import copy_with_spark

log = logging.getLogger("streampart.replication")


@dataclass(frozen=True)
class CopyResult:
    """One partition copied (or found copied) to one secondary."""

    table: str
    partition: str
    cluster: str
    files: int
    bytes: int
    copied_bytes: int  # bytes written this time (0 when a crashed attempt had copied them all)
    delta_version: int
    seconds: float
    resumed: bool  # the copy had been begun by an earlier attempt

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class CopyFailure:
    """One copy that failed (recorded in the metastore, retried after its backoff)."""

    cluster: str
    partition: str
    error: str

    def __str__(self) -> str:
        return self.error


@dataclass
class ReplicationReport:
    """What one pass over a table's secondaries did."""

    copied: list[CopyResult] = field(default_factory=list)
    failed: list[CopyFailure] = field(default_factory=list)
    busy: int = 0  # copies another copier holds (or that wait for their retry time)

    @property
    def bytes(self) -> int:
        return sum(c.copied_bytes for c in self.copied)


@dataclass
class Replicator:
    """Copies standard partitions of tables to their secondaries. Safe alongside other copiers."""

    catalog: Catalog
    owner: str = field(default_factory=owner_id)
    # How long a claim lasts without renewal; it is renewed after every file (compacted files are
    # about roll.target_file_size: a second or less of copying each).
    lease: timedelta = timedelta(minutes=10)
    fence: Lease | None = None  # the roll daemon's leadership: copies are claimed only while held
    should_abandon: Callable[[], bool] | None = None
    retry_base: timedelta = timedelta(seconds=10)
    retry_max: timedelta = timedelta(minutes=10)
    # [scheduler.replication] engine = spark: partitions of at least spark_min_bytes are copied by
    # Spark tasks on the table's (primary) cluster; ``spark`` gives its session (see Roller.spark)
    engine: str = "local"
    spark_min_bytes: int = 1024**3
    spark: SparkFactory | None = None

    @classmethod
    def configured(cls, catalog: Catalog, config: ReplicationConfig, **kw: Any) -> Replicator:
        """A copier with the ``[scheduler.replication]`` settings (and ``kw``: owner, lease, …)."""
        return cls(
            catalog,
            retry_base=config.retry_base,
            retry_max=config.retry_max,
            engine=config.engine,
            spark_min_bytes=config.spark_min_bytes,
            **kw,
        )

    # -- what is to do -----------------------------------------------------------------------
    def pending(
        self,
        table: Table,
        replica: Replica,
        within: PartitionRange | None = None,
        now: datetime | None = None,
        include_waiting: bool = False,
    ) -> list[Partition]:
        """Standard partitions of ``table`` not yet present on ``replica``, oldest first.

        Copies that failed and wait for their retry time are left out unless ``include_waiting``.
        """
        now = now or clock.now()
        store = self.catalog.store
        copies = store.list_copies(table.id, replica.cluster)
        retry_at = {c.partition_value: c.retry_at for c in copies}
        out = []
        for p in not_present(store.list_partitions(table.id, [PartitionState.STANDARD]), copies):
            if within is not None and p.value not in within:
                continue
            waits = retry_at.get(p.value)
            if not include_waiting and waits is not None and waits > now:
                continue
            out.append(p)
        return sorted(out, key=lambda p: p.value)

    def replicate(
        self,
        table: Table,
        clusters: Sequence[str] | None = None,
        within: PartitionRange | None = None,
        progress: Callable[[int], None] | None = None,
        include_waiting: bool = False,
    ) -> ReplicationReport:
        """Copy every pending standard partition of ``table`` to its secondaries (or ``clusters``).

        After a failed copy the rest of that cluster waits for the next pass (the cause —
        a full or unmounted disk — is most likely shared); other clusters go on.
        """
        report = ReplicationReport()
        replicas = self.catalog.replicas.list(table)
        if clusters is not None:
            replicas = [self.catalog.replicas.get(table, c) for c in clusters]
        for replica in replicas:
            for partition in self.pending(table, replica, within, include_waiting=include_waiting):
                try:
                    result = self.copy(table, partition, replica, progress)
                except (ReplicationFailedError, StoreUnavailableError) as exc:  # recorded, retried later
                    report.failed.append(CopyFailure(replica.cluster, iso(partition.value), str(exc)))
                    break
                if result is None:
                    report.busy += 1
                else:
                    report.copied.append(result)
        return report

    # -- one copy ----------------------------------------------------------------------------
    def _step(self, name: str) -> None:
        crashpoint(name)
        pausepoint(name)
        if self.should_abandon is not None and self.should_abandon():
            raise ReplicationAbandonedError(f"copy abandoned at step {name}; it resumes from there")

    def _claim(
        self, partition: Partition, replica: Replica, renewing: PartitionCopy | None = None
    ) -> PartitionCopy:
        """Claim the copy, or renew the claim ``renewing`` (refused if a delete rewrote the
        partition since it was taken: the files being copied may be the ones it replaced)."""
        return self.catalog.store.claim_copy(
            partition, replica.cluster, self.owner, self.lease, fence=self.fence, renewing=renewing
        )

    def copy(
        self,
        table: Table,
        partition: Partition,
        replica: Replica,
        progress: Callable[[int], None] | None = None,
    ) -> CopyResult | None:
        """Copy one standard partition to one secondary; ``None`` if another copier holds it
        (or it is present already, or no longer standard).

        Raises:
            ReplicationFailedError: the copy failed (recorded, with its retry time).
            StoreUnavailableError: the store did not serve (recorded, with its retry time).
            ReplicationAbandonedError, LeaseLostError: stopped on request, or leadership lost.
        """
        with commit_holder(self.catalog.store).holding(self.owner):  # renewed while we copy
            return self._copy(table, partition, replica, progress)

    def _copy(
        self, table: Table, partition: Partition, replica: Replica, progress: Callable[[int], None] | None
    ) -> CopyResult | None:
        started, claimed_at = clock.monotonic(), clock.now()
        try:
            copy = self._claim(partition, replica)
        except ConflictError:
            return None
        try:
            resumed = (
                copy.started_at is not None and copy.started_at < claimed_at
            )  # an earlier attempt began it
            return self._carry(table, partition, replica, copy, started, resumed, progress)
        except (ReplicationAbandonedError, LeaseLostError):
            with contextlib.suppress(StreampartError):
                self.catalog.store.release_copy(copy, self.owner)
            raise
        except ConflictError as exc:  # lost the claim to another copier (we were too slow), or dropped,
            # or a delete rewrote the partition meanwhile: let it go, so the next pass copies it again
            with contextlib.suppress(StreampartError):
                self.catalog.store.release_copy(copy, self.owner)
            raise ReplicationAbandonedError(
                f"copy of {iso(partition.value)} to {replica.cluster}: {exc}"
            ) from exc
        except Exception as exc:
            raise self._failed(table, partition, copy, exc) from exc

    def _carry(
        self,
        table: Table,
        partition: Partition,
        replica: Replica,
        copy: PartitionCopy,
        started: float,
        resumed: bool,
        progress: Callable[[int], None] | None,
    ) -> CopyResult:
        """The claimed copy's steps: files copied and committed (or, if committed already, checked
        again), the success marker written, the copy recorded present."""
        target = replica_table(table, replica)
        pdir = partition_dir(table, partition.value)
        self._step("replica-after-claim")
        source = self.catalog.load(table)  # its newest columns go to the secondary with the files
        files = self._source_files(table, partition.value, source)
        secondary = self.catalog.warehouse.load(target)
        attempt = uuid.uuid4().hex[:8]
        have, want = secondary.transaction_version(app_id(pdir)), (copy.generation or 0) + 1
        if have is None or have < want:  # never committed there, or a delete rewrote it since
            copy, digests, written = self._copy_files(
                table, partition, replica, copy, target, files, attempt, progress
            )
            self._step("replica-before-commit")
            if not commit_holder(self.catalog.store).holds(self.owner):
                raise LeaseLostError(
                    f"copy of {iso(partition.value)} to {replica.cluster}: this process stalled past "
                    "its lease, so another copier may have taken the copy over; this one committed nothing"
                )
            ranges = ranges_of_adds(source, [f.path for f in files])  # the same files: the same bounds
            if have is None:
                columns = columns_of(source, str(table.name))
                version = self._commit(target, columns, files, partition.value, pdir, ranges)
            else:
                version = self._recommit(target, files, partition.value, pdir, want, ranges)
            self._step("replica-after-commit")
        else:
            version = self._committed(target, pdir)
            digests, written = {}, 0
            for f in files:  # verified against the source again; a copy that differs is replaced
                _, digests[f.path], copied = self._copy_file(table, target, f, attempt, progress)
                written += copied
        checksum = self._mark_success(table, partition.value, replica, target, files, digests)
        size = sum(f.size for f in files)
        self.catalog.store.finish_copy(
            copy,
            self.owner,
            files=len(files),
            bytes=size,
            checksum=checksum,
            delta_version=version,
            file_digests=digests,
        )
        result = CopyResult(
            table=str(table.name),
            partition=iso(partition.value),
            cluster=replica.cluster,
            files=len(files),
            bytes=size,
            copied_bytes=written,
            delta_version=version,
            seconds=round(clock.monotonic() - started, 3),
            resumed=resumed,
        )
        event(log, logging.INFO, "replica.copied", "partition copied to a secondary", **result.to_json())
        return result

    def _copy_files(
        self,
        table: Table,
        partition: Partition,
        replica: Replica,
        copy: PartitionCopy,
        target: Table,
        files: list[LiveFile],
        attempt: str,
        progress: Callable[[int], None] | None,
    ) -> tuple[PartitionCopy, dict[str, str], int]:
        """Copy the partition's files to the secondary, the claim renewed after each (after the
        one Spark job); the claim, each file's SHA-256 and the bytes written."""
        digests: dict[str, str] = {}
        written = 0
        if self._by_spark(files, table.location, target.location):
            digests, written = self._copy_files_with_spark(table, target, files, attempt, progress)
            self._step("replica-after-file")
            return self._claim(partition, replica, renewing=copy), digests, written
        for f in files:
            _, digests[f.path], copied = self._copy_file(table, target, f, attempt, progress)
            written += copied
            self._step("replica-after-file")
            # renewed: still ours, still the leader's, and still the generation it copies
            copy = self._claim(partition, replica, renewing=copy)
        return copy, digests, written

    def _commit(
        self,
        target: Table,
        columns: Sequence[Column],
        files: list[LiveFile],
        value: datetime,
        pdir: str,
        ranges: Mapping[str, str],
    ) -> int:
        """Commit the copied files to the secondary's Delta log, once per partition, with the source's
        ``columns`` if it lacks them (:mod:`scheduler.replica_schema`); its version."""
        wh = self.catalog.warehouse
        try:
            return commit_copy(
                wh,
                target,
                columns,
                [(f.path, value, f.rows) for f in files],
                {REPLICA_KEY: pdir},
                app_id(pdir),
                ranges,
            )
        except ConflictError:  # another copier's commit of the same partition won the race
            if wh.load(target).transaction_version(app_id(pdir)) is None:
                raise
            return self._committed(target, pdir)

    def _recommit(
        self,
        target: Table,
        files: list[LiveFile],
        value: datetime,
        pdir: str,
        want: int,
        ranges: Mapping[str, str],
    ) -> int:
        """The partition's files as a delete left them, in place of the secondary's older copy: one
        commit swapping the files that differ, its app transaction at version ``want`` (once)."""
        wh = self.catalog.warehouse
        secondary = wh.load(target)
        old = [f for f in live_files(secondary) if f.partition == value]
        known, wanted = {f.path for f in old}, {f.path for f in files}
        removes = [f for f in old if f.path not in wanted]
        adds = [(f.path, value, f.rows) for f in files if f.path not in known]
        try:
            return wh.replace_files(
                secondary,
                target,
                removes,
                adds,
                {REPLICA_KEY: pdir},
                data_change=True,
                txns=[(app_id(pdir), want)],
                ranges=ranges,
            )
        except ConflictError:  # another copier's commit of this generation won the race
            if (wh.load(target).transaction_version(app_id(pdir)) or 0) < want:
                raise
            return self._committed(target, pdir)

    def _mark_success(
        self,
        table: Table,
        value: datetime,
        replica: Replica,
        target: Table,
        files: list[LiveFile],
        digests: dict[str, str],
    ) -> str:
        """Write the partition's ``_SUCCESS`` marker on the secondary (and drop temporaries); its checksum."""
        checksum = partition_checksum(files, digests)
        write_success_marker(
            target,
            value,
            {
                "table": str(table.name),
                "partition": iso(value),
                "cluster": replica.cluster,
                "sha256": checksum,
            },
            rel=partition_dir(table, value),  # the primary's: the copies keep its paths
        )
        self._remove_temporaries(target, value, partition_dir(table, value))
        return checksum

    def _source_files(self, table: Table, value: datetime, source: Any) -> list[LiveFile]:
        files = [f for f in live_files(source) if f.partition == value]
        staged = [f.path for f in files if f.staged]
        if staged:  # a standard partition holds its swept files only; anything else is damage
            raise ReplicationFailedError(
                f"partition {iso(value)} of {table.name} is standard but its Delta log lists staged files "
                f"({', '.join(staged[:3])}); run `streampart check {table.name}`"
            )
        return sorted(files, key=lambda f: f.path)

    def _by_spark(self, files: Sequence[LiveFile], *locations: str) -> bool:
        """Whether Spark tasks copy ``files``: never to or from a bucket (Spark's workers are given no
        store options; the copier's own process copies those)."""
        if self.engine != "spark" or not files or sum(f.size for f in files) < self.spark_min_bytes:
            return False
        if any(storage.is_remote(location) for location in locations):
            return False
        if self.spark is None:
            raise ReplicationFailedError(
                "scheduler.replication.engine is spark, but this copier was given no Spark session"
            )
        return True

    def _copy_files_with_spark(
        self,
        table: Table,
        target: Table,
        files: Sequence[LiveFile],
        attempt: str,
        progress: Callable[[int], None] | None,
    ) -> tuple[dict[str, str], int]:
        """Every file copied by Spark tasks on the table's cluster; digests per path, bytes written."""
        assert self.spark is not None
        jobs = [
            (storage.join(table.location, f.path), storage.join(target.location, f.path), f.size, attempt)
            for f in files
        ]
        results = copy_with_spark(self.spark(table), jobs)
        digests, written = {}, 0
        for f, (_, final, _, _) in zip(files, jobs, strict=True):
            size, digest, copied = results[final]
            digests[f.path], written = digest, written + copied
            if progress is not None:
                progress(size)
        return digests, written

    def _copy_file(
        self, table: Table, target: Table, f: LiveFile, attempt: str, progress: Callable[[int], None] | None
    ) -> tuple[int, str, int]:
        """Copy one file to the secondary, verified; its size, SHA-256 and the bytes written."""
        source = storage.join(table.location, f.path)
        try:
            size, digest, written = copy_verified(
                source, storage.join(target.location, f.path), f.size, attempt
            )
        except CopyMismatchError as exc:
            raise ReplicationFailedError(f"{exc}; run `streampart check {table.name}`") from None
        if progress is not None:
            progress(size)
        return size, digest, written

    def _committed(self, target: Table, pdir: str) -> int:
        version = self.catalog.warehouse.find_commit(target, REPLICA_KEY, pdir, -1)
        if version is None:
            raise ReplicationFailedError(
                f"the Delta log at {target.location} records partition {pdir} as committed "
                "but holds no commit of it; drop the replica and add it again"
            )
        return version

    def _remove_temporaries(self, target: Table, value: datetime, rel: str) -> None:
        """Delete temporary files of dead attempts (a live stale copier's rename then fails: harmless)."""
        for path in partition_dir_entries(target, value, rel=rel):
            name = path.rsplit("/", 1)[-1]
            if name.startswith(".") and name.endswith(".tmp"):
                remove_file(target, path)

    def _failed(
        self, table: Table, partition: Partition, copy: PartitionCopy, exc: Exception
    ) -> StreampartError:
        """Record why the copy failed and let it go, retried after a doubling backoff.

        A store that did not serve (a 503, no answer: ``metastore/storage/faults.py`` decides) fails
        it as a :class:`StoreUnavailableError`, retriable, logged as a warning (an unavailable
        metastore likewise, as a :class:`MetastoreUnavailableError`); any other failure is
        a :class:`ReplicationFailedError`, logged as an error."""
        where = f"copy of {table.name} partition {iso(partition.value)} to {copy.cluster}"
        error: StreampartError
        unavailable = faults.unavailable(exc)
        if isinstance(exc, ReplicationFailedError):
            error = ReplicationFailedError(f"{where} failed: {exc}")
        elif unavailable is not None:
            error = StoreUnavailableError(
                f"{where} failed: {unavailable}",
                store=unavailable.store,
                answered=unavailable.answered,
                retry_after=unavailable.retry_after,
            )
        elif isinstance(exc, MetastoreUnavailableError):  # the metastore did not answer: as the store
            error = copy_of(exc)
            error.args = (f"{where} failed: {exc}",)
        elif isinstance(exc, OSError | StorageError):
            cause = storage_error(exc, where) if isinstance(exc, OSError) else exc
            error = ReplicationFailedError(f"{cause}")
        else:
            error = ReplicationFailedError(f"{where} failed: {type(exc).__name__}: {first_line(exc)}")
        retry_at = clock.now() + backoff(copy.attempts + 1, self.retry_base, self.retry_max)
        with contextlib.suppress(StreampartError):
            self.catalog.store.release_copy(copy, self.owner, error=str(error), retry_at=retry_at)
        transient = isinstance(error, RetriableError)
        event(
            log,
            logging.WARNING if transient else logging.ERROR,
            "replica.failed",
            "copy failed; it is retried with backoff",
            table=str(table.name),
            partition=iso(partition.value),
            cluster=copy.cluster,
            error=str(error),
            retry_at=retry_at,
            transient=transient,
        )
        return error


def partition_checksum(files: Sequence[LiveFile], digests: dict[str, str]) -> str:
    """One SHA-256 over a partition's files: each file's name, size and SHA-256, by name."""
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.path):
        h.update(f"{f.path}\t{f.size}\t{digests[f.path]}\n".encode())
    return h.hexdigest()

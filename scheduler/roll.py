"""Rolling partitions: seal → sweep (compact) → standard partition → completeness marker.

A roll is a small state machine recorded in the metastore (``sp_rolls``):

1. ``begin``: in one metastore transaction the partition goes STREAMING → ROLLING, the next
   streaming partition opens (arrival mode) and the roll is recorded as SEALING.
2. ``seal``: a Delta metadata change; every chunk commit prepared on an older snapshot now
   fails Delta's conflict check and is retried against the next open partition.
3. ``sweep``: the partition's chunk files are compacted into its own directory and swapped in
   with one ``dataChange=false`` commit (remove staged files, add compacted ones), so at every
   Delta version readers see the rows either in the streaming or in the standard partition.
4. ``finish``: ``_SUCCESS`` is written, then (one transaction) the partition becomes STANDARD
   and the roll DONE.

Each step is idempotent and the roll resumes from its recorded step after a crash; a roller
that resumes someone else's roll seals again first, which fences the old holder's sweep.
"""

from __future__ import annotations

import contextlib
import copy
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from ingest.commit_holders import commit_holder, work_owner
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
from metastore.delta.log import SWEEP_KEY
from metastore.delta.metadata import columns_of
from metastore.errors import ConflictError, LeaseLostError, StorageError, StreampartError
from metastore.models import (
    Lease,
    Mode,
    Partition,
    PartitionState,
    Roll,
    RollState,
    Table,
    iso,
    period_start,
    saturating_add,
)
from metastore.progress import Progress
from scheduler.clustering import rows_per_file
from scheduler.compacted_names import compacted_name, compacted_version
from scheduler.config import RollConfig
from scheduler.errors import RollAbandonedError, RollBusyError, RollFailedError
from scheduler.keyed_rolls import KeyedSweep, keyed_sweep, rewritten_by_sweep
from scheduler.local_compaction import CompactedFiles, prefetched
from scheduler.spark_compaction import SparkFactory, compact_with_spark

KEYED_FILE_ROWS = 4 * 1024 * 1024  # a keyed sweep's files: at most this many rows each


@dataclass(frozen=True)
class RollResult:
    table: str
    partition: str
    roll: str
    state: str
    chunks: int
    rows: int
    bytes: int
    files_before: int
    files_after: int
    seconds: float
    next_partition: str | None = None
    resumed: bool = False

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


def owner_id() -> str:
    """A unique owner id for a roller in this process: ``<commit holder id>/<nonce>``
    (:func:`ingest.commit_holders.work_owner`; at most 64 characters, the rolls.owner column's
    width). While a roll runs, the process keeps its commit-holder lease renewed, so another roller
    takes over a roll whose process died seconds after its death, not after the roll's lease."""
    return work_owner()


# The due time of a partition too close to the end of the calendar: it never rolls on time.
NEVER = datetime.max.replace(tzinfo=UTC)


def due_time(table: Table, partition: Partition) -> datetime:
    """When ``partition`` is due to roll: its period's end, plus the lateness in event-time mode.

    Total over every value a partition may hold: one too close to year 9999 (recorded before
    event times were bounded) is due :data:`NEVER`; ``roll --force`` still rolls it.
    """
    end = table.period_end(partition.value)
    return saturating_add(end, table.lateness) if table.mode is Mode.EVENT_TIME else end


def due_partitions(table: Table, streaming: list[Partition], now: datetime, force: bool) -> list[Partition]:
    """The streaming partitions that should roll at ``now``."""
    if force:
        return list(streaming)
    return [p for p in streaming if due_time(table, p) <= now]


def next_partition_value(table: Table, rolled: Partition, now: datetime) -> datetime:
    """Arrival mode: the value of the partition that opens when ``rolled`` closes.

    Normally the start of the current period; after a forced roll within a period, the whole
    second the roll happened in (``13:17:39``, a name a person reads: rows go to an arrival-mode
    partition by when they commit, never by its value), or the very instant if a roll in that
    second took the whole second already, so partition values stay unique and ordered.
    """
    candidate = period_start(now, table.roll_every)
    if candidate <= rolled.value:
        candidate = now.replace(microsecond=0)
        if candidate <= rolled.value:
            candidate = max(now, rolled.value + timedelta(microseconds=1))
    return candidate


@dataclass
class Roller:
    """Rolls partitions of tables in a catalog. One per process; safe alongside other rollers."""

    catalog: Catalog
    config: RollConfig = field(default_factory=RollConfig)
    owner: str = field(default_factory=owner_id)
    # The roll daemon's leadership: rolls begin and are claimed only while it is held.
    fence: Lease | None = None
    # Asked at every step boundary; True stops the roll there (resumable) with RollAbandonedError.
    should_abandon: Callable[[], bool] | None = None
    # roll.engine = spark: the Spark session of a table's cluster (built by the caller, which
    # knows the settings); asked only when a partition is compacted.
    spark: SparkFactory | None = None
    # Told when a partition's compaction begins (its files' bytes) and as each file is rewritten:
    # `streampart roll` draws a bar from it.
    progress: Progress = field(default_factory=Progress)

    def _home(self, table: Table) -> Roller | None:
        """This roller bound to ``table``'s metastore, if that is not the one its catalog is bound to.

        A table's row ids are its metastore's: a roll of a table in a federated metastore must
        read and write that metastore, never the primary (where the same id is another table).
        FederationAccessError if the metastore's access type does not let the table be written.
        """
        home = self.catalog.home(table, write=True)
        return None if home is self.catalog else replace(self, catalog=home)

    def _is_home(self, table: Table) -> bool:
        try:
            return self._home(table) is None
        except StreampartError:  # (its own begin says what)
            return False

    def roll_table(self, table: Table, now: datetime | None = None, force: bool = False) -> list[RollResult]:
        """Resume interrupted rolls of ``table``, then roll every partition due at ``now``."""
        if (home := self._home(table)) is not None:
            return home.roll_table(table, now, force)
        now = now or clock.now()
        store = self.catalog.store
        results = []
        for roll in store.list_rolls(table.id, unfinished=True):
            try:
                results.append(self.run(table, roll, resumed=True))
            except RollBusyError:
                continue
        streaming = store.list_partitions(table.id, [PartitionState.STREAMING])
        for partition in due_partitions(table, streaming, now, force):
            result = self.roll_partition(table, partition, now)
            if result is not None:
                results.append(result)
        return results

    def roll_partition(self, table: Table, partition: Partition, now: datetime) -> RollResult | None:
        """Begin and carry out the roll of one streaming partition; ``None`` if another roller has it."""
        if (home := self._home(table)) is not None:
            return home.roll_partition(table, partition, now)
        with commit_holder(self.catalog.store).holding(self.owner):  # renewed while we roll
            roll = self.begin(table, partition, now)
            if roll is None:
                return None  # another roller began it
            result = self.run(table, roll)
        # the partition begin opened (the same function of the same arguments)
        next_value = next_partition_value(table, partition, now) if table.mode is Mode.ARRIVAL else None
        return RollResult(**{**result.__dict__, "next_partition": iso(next_value) if next_value else None})

    def begin(self, table: Table, partition: Partition, now: datetime) -> Roll | None:
        """Step 1 alone: in one metastore transaction the partition becomes ROLLING and (arrival mode)
        the next one opens, so rows committed from now on go there; the roll, to carry out with
        :meth:`run`, or None if another roller began it. The roll daemon begins every due roll at
        once this way, and carries them out as its workers free up."""
        if (home := self._home(table)) is not None:
            return home.begin(table, partition, now)
        next_value = next_partition_value(table, partition, now) if table.mode is Mode.ARRIVAL else None
        with commit_holder(self.catalog.store).holding(self.owner):
            try:
                return self.catalog.store.begin_roll(
                    partition, next_value, self.owner, self.config.lease, now=now, fence=self.fence
                )
            except ConflictError:  # (a LeaseLostError, not a ConflictError, means we are no longer leader)
                return None

    def begin_due(self, due: Sequence[tuple[Table, Partition]], now: datetime) -> list[Roll | None]:
        """:meth:`begin` of each ``(table, partition)`` in ``due``, those of tables in this roller's
        metastore in one metastore transaction (the rest one by one, in their own). Raises what a
        ``begin`` raises; then none of that transaction's rolls began."""
        mine = [(t, p) for t, p in due if self._is_home(t)]
        began: dict[int, Roll | None] = {}
        if mine:
            items = [
                (p, next_partition_value(t, p, now) if t.mode is Mode.ARRIVAL else None) for t, p in mine
            ]
            with commit_holder(self.catalog.store).holding(self.owner):
                rolls = self.catalog.store.begin_rolls(items, self.owner, self.config.lease, now, self.fence)
            began = {p.id: r for (_, p), r in zip(mine, rolls, strict=True)}
        return [began[p.id] if p.id in began else self.begin(t, p, now) for t, p in due]

    def _step(self, name: str) -> None:
        """A step boundary of the roll: crash points (tests), then stop here if asked to."""
        crashpoint(name)
        pausepoint(name)
        if self.should_abandon is not None and self.should_abandon():
            raise RollAbandonedError(f"roll abandoned at step {name}; it resumes from there")

    def run(self, table: Table, roll: Roll, resumed: bool = False) -> RollResult:
        """Carry ``roll`` from its recorded step to DONE."""
        if (home := self._home(table)) is not None:
            return home.run(table, roll, resumed)
        started = clock.monotonic()
        store = self.catalog.store
        with commit_holder(store).holding(self.owner):  # renewed while we roll
            try:
                roll = store.claim_roll(roll, self.owner, self.config.lease, fence=self.fence)
            except ConflictError as exc:
                raise RollBusyError(str(exc)) from None
            try:
                roll, chunks = self._carry(table, roll)
            except RollAbandonedError:
                raise  # stopped on request: the daemon lets its rolls go as it stops
            except (RollBusyError, ConflictError, LeaseLostError) as exc:
                # another roller has it or moved it on, a commit conflicted (a seal racing a
                # schema change), or leadership is lost: if it is still ours, the next attempt
                # (any roller's) resumes it at once rather than after its lease
                with contextlib.suppress(StreampartError):
                    store.release_roll(roll, self.owner, error=first_line(exc))
                raise
            except Exception as exc:
                raise (self._taken_over(table, roll) or self._failed(table, roll, exc)) from exc
        return RollResult(
            table=str(table.name),
            partition=iso(roll.partition_value),
            roll=roll.id,
            state=roll.state.value,
            chunks=chunks,
            rows=roll.rows or 0,
            bytes=roll.bytes or 0,
            files_before=roll.files_before or 0,
            files_after=roll.files_after or 0,
            seconds=round(clock.monotonic() - started, 3),
            resumed=resumed,
        )

    def _carry(self, table: Table, roll: Roll) -> tuple[Roll, int]:
        """The steps of a claimed roll, from its recorded one; the roll and the chunks it rolled."""
        store, wh = self.catalog.store, self.catalog.warehouse
        self._step("roll-after-begin")
        # The table is loaded once and kept through the roll, brought forward commit by commit: in
        # a bucket each load reads every commit file since the last checkpoint (twice, delta-rs).
        dt = self.catalog.load(table)  # refuse a damaged log before committing anything to it
        # Every run seals afresh (a resumed roll too): that fences the sweep of whoever held
        # this roll before us, and this seal's version is what lets us tell a dead sweep
        # attempt's files from a live one's (see _remove_leftovers).
        self._fenced(table, roll)
        seal_version = wh.seal(table, roll.id, dt=dt)
        if roll.state is RollState.SEALING:
            self._step("roll-after-seal")
            roll = store.advance_roll(roll, RollState.SWEEPING, self.owner, seal_version=seal_version)
        if roll.state is RollState.SWEEPING:
            return self._sweep(table, roll, wh.advance(dt, table, seal_version))
        return roll, self._chunks_rolled(table, roll)

    def _taken_over(self, table: Table, roll: Roll) -> RollBusyError | None:
        """If another roller took the roll over meanwhile (this one stalled past its lease: a frozen
        process, a deposed leader), that is why this one failed, not what it met next (a temporary
        file the other removed, say): it committed nothing since, as its commits are fenced."""
        try:
            now = self.catalog.store.get_roll(roll.id)
        except StreampartError:
            return None  # the metastore is what failed: the failure is reported as it is
        if now.owner == self.owner and now.state is not RollState.DONE:
            return None
        return RollBusyError(
            f"roll {roll.id} of {table.name} partition {iso(roll.partition_value)} was taken over by "
            f"{now.owner} while this roller stalled; this one stopped and committed nothing more"
        )

    def _fenced(self, table: Table, roll: Roll) -> None:
        """Before a Delta commit: this process's lease has been live all along since the roll
        began here, so no other roller can have taken it over meanwhile (a frozen roller that
        wakes commits nothing)."""
        if not commit_holder(self.catalog.store).holds(self.owner):
            raise LeaseLostError(
                f"roll {roll.id} of {table.name}: this process stalled past its lease, so another "
                "roller may have taken the roll over; this one committed nothing more"
            )

    def _failed(self, table: Table, roll: Roll, exc: Exception) -> StreampartError:
        """Record why the roll failed and let it go, so the next attempt (any roller) resumes at once.

        The roll stays at its last recorded step: nothing is lost, and the partition stays
        closed to writes (they go to the next one). Returns the error to raise: the roll's own
        if it is a StreampartError (it says what to do), else one naming the roll and the cause.
        """
        where = f"roll of {table.name} partition {iso(roll.partition_value)}"
        error: StreampartError
        resumes = "; the roll resumes from its last step on the next attempt"
        if isinstance(exc, StorageError):  # a full disk during a seal or a compaction, a store out
            error = copy.copy(exc)  # the same kind, with its fields (the store's address, its answer)
            error.args = (f"{exc}{resumes}",)
        elif isinstance(exc, StreampartError):
            error = exc
        else:
            if isinstance(exc, OSError) or "No space left on device" in str(exc):  # delta-rs says so in text
                cause = storage_error(exc, where)
                error = type(cause)(f"{cause}{resumes}")
            else:
                error = RollFailedError(f"{where} failed: {type(exc).__name__}: {first_line(exc)}{resumes}")
        with contextlib.suppress(StreampartError):  # the metastore may be what failed
            self.catalog.store.release_roll(roll, self.owner, error=str(error))
        return error

    def _sweep(self, table: Table, roll: Roll, dt: Any) -> tuple[Roll, int]:
        """Sweep the sealed partition and finish the roll; returns it and the chunks it rolled.

        ``dt``: the table at this run's seal. No chunk lands in a sealed partition, so its files
        there are the ones to sweep; commits after the seal (other partitions') are the sweep
        commit's to check, as for any commit."""
        store, wh = self.catalog.store, self.catalog.warehouse
        value, seal_version = roll.partition_value, int(dt.version())
        files = [f for f in live_files(dt) if f.partition == value]
        staged = [f for f in files if f.staged]
        rolled = len({f.chunk for f in staged})  # what _chunks_rolled counts, from this snapshot
        pausepoint("roll-sweep-listed")
        self._remove_leftovers(table, roll, seal_version)
        if staged:
            roll = store.record_roll_progress(roll, self.owner, files_before=len(staged))
            self.progress.start(
                f"rolling {table.name} {iso(value)[:19].replace('T', ' ')}",  # short: a bar beside it
                sum(f.size for f in files),
                "bytes",
            )
            keyed = self._keyed_sweep(table, value, dt, roll.id) if table.keys is not None else None
            compacted, ranges = (
                (keyed.compacted, keyed.ranges)
                if keyed is not None
                else self._compact(table, value, files, roll.id, dt)
            )
            written = keyed.written() if keyed is not None else [p for p, _, _ in compacted]
            try:
                self._step("roll-after-compact")
            except RollAbandonedError:
                for path in written:  # never committed: nobody can see them
                    remove_file(table, path)
                raise
            try:
                self._fenced(table, roll)
                info = {SWEEP_KEY: f"{roll.id}/{uuid.uuid4().hex}"}
                if keyed is None:
                    version = wh.replace_files(dt, table, files, compacted, info, ranges=ranges)
                else:  # rows go (older versions, deletes): a change of data
                    removes, adds = [*files, *keyed.removes], [*compacted, *keyed.adds]
                    version = wh.replace_files(
                        dt, table, removes, adds, info, data_change=True, ranges=ranges
                    )
            except ConflictError:
                for path in written:
                    remove_file(table, path)
                raise
            self._step("roll-after-sweep")
            roll = store.record_roll_progress(roll, self.owner, sweep_version=version)
            dt = wh.advance(dt, table, version)
        elif roll.files_before is None:
            roll = store.record_roll_progress(roll, self.owner, files_before=0)
        final = [f for f in live_files(dt) if f.partition == value]
        self._remove_leftovers(table, roll, seal_version)
        rows, size = sum(f.rows for f in final), sum(f.size for f in final)
        write_success_marker(
            table,
            value,
            {
                "table": str(table.name),
                "partition": iso(value),
                "roll": roll.id,
                "rows": rows,
                "files": len(final),
            },
        )
        self._step("roll-before-finish")
        chunks = rolled if staged else self._chunks_rolled(table, roll)
        rewritten, freed, replaced = (
            rewritten_by_sweep(self.catalog, table, roll, self.owner)
            if table.keys is not None
            else ({}, {}, [])
        )
        roll = store.finish_roll(
            roll,
            self.owner,
            chunks=chunks,
            rows=rows,
            bytes=size,
            files=len(final),
            rewritten=rewritten,
            freed=freed,
            removed_files=replaced,
        )
        return roll, chunks

    def _keyed_sweep(self, table: Table, value: datetime, base: Any, roll_id: str) -> KeyedSweep:
        """A keyed table's sweep of ``value`` at the snapshot ``base``, written (not committed):
        ``scheduler/keyed_rolls.py``. Rolled here whatever ``roll.engine`` says."""
        from metastore.delta.stats import key_ranges

        assert table.keys is not None
        attempt = uuid.uuid4().hex[:8]
        base_version, columns = int(base.version()), columns_of(base, f"table {table.name}")
        every = live_files(base)
        file_rows = KEYED_FILE_ROWS
        if table.cluster_by:  # files of about the target size, as an unkeyed clustered table's
            mine = [f for f in every if f.partition == value]
            rows, size = sum(f.rows for f in mine), sum(f.size for f in mine)
            file_rows = min(KEYED_FILE_ROWS, rows_per_file(self.config.target_file_size, rows, size))
        sweep = keyed_sweep(
            table,
            columns,
            base_version,
            value,
            every,
            lambda n: compacted_name(roll_id, base_version, attempt, n),
            file_rows,
            key_ranges(base, table.keys.columns),
        )
        self.progress.advance(sum(f.size for f in every if f.partition == value))
        return sweep

    def _chunks_rolled(self, table: Table, roll: Roll) -> int:
        """How many chunks the roll swept: distinct chunks among the partition's staged files.

        Counted in the seal's snapshot: no chunk lands in a sealed partition and the sweep comes
        after the seal, so that snapshot holds exactly the chunks rolled, however often the roll
        was resumed. A chunk may have several files (one per Spark task that staged it), so
        this is not the number of files.
        """
        if not roll.files_before or roll.seal_version is None:
            return 0
        wh = self.catalog.warehouse
        dt = wh.load(table, roll.seal_version)
        return len({f.chunk for f in live_files(dt) if f.partition == roll.partition_value and f.staged})

    def _remove_leftovers(self, table: Table, roll: Roll, seal_version: int) -> None:
        """Delete the files (and Spark attempts' hidden directories) of sweep attempts that can never
        commit (crashed or fenced ones).

        Never from a snapshot that may be stale: this roller may have stalled for longer than
        its lease (GC, a paused VM, SIGSTOP) while another took the roll over and swept. So a
        file goes only if all of these hold:

        - its name says which Delta version its attempt's snapshot was (:func:`compacted_name`),
          and that version is older than ``seal_version``, the seal this roller committed
          itself: that attempt's sweep commit is based on a snapshot before the seal, so it
          conflicts and can never land. Files of attempts that began after our seal belong to
          a newer roller and are never touched, however stale we are;
        - we still own the roll, checked by renewing our claim in the metastore just before;
        - the newest Delta version does not list it (read after that claim), so a sweep that
          did land keeps its files even if everything above were wrong.
        """
        wh = self.catalog.warehouse
        value = roll.partition_value
        candidates = [
            path
            for path in partition_dir_entries(table, value, directories=True)
            if (v := compacted_version(path.rsplit("/", 1)[-1])) is not None and v < seal_version
        ]
        if table.keys is not None and roll.files_before is not None:
            # a keyed sweep attempt also rewrote files of other standard partitions, into their own
            # directories: its own there are named after this roll (looked for once a sweep began)
            mine = f"part-{roll.id[:8]}-"
            for other in self.catalog.partitions(table, [PartitionState.STANDARD]):
                if other.value == value:
                    continue
                for path in partition_dir_entries(table, other.value):
                    name = path.rsplit("/", 1)[-1]
                    if (
                        name.startswith(mine)
                        and (v := compacted_version(name)) is not None
                        and v < seal_version
                    ):
                        candidates.append(path)
        if not candidates:
            return
        try:
            self.catalog.store.claim_roll(roll, self.owner, self.config.lease, fence=self.fence)
        except ConflictError as exc:
            raise RollBusyError(f"{exc}; leaving its files alone") from None
        live = {f.path for f in live_files(wh.load(table))}
        for path in candidates:
            if path not in live:
                remove_file(table, path)

    def _compact(
        self, table: Table, value: datetime, files: list[LiveFile], roll_id: str, base: Any
    ) -> tuple[list[tuple[str, datetime, int]], dict[str, str]]:
        """Rewrite ``files`` into the partition's directory, toward the target file size; the files
        written (path, value, rows) and their statistics by path.

        ``base`` is the snapshot (a DeltaTable) the sweep commit will be based on: its version
        goes into the file names, and its columns are the compacted files' (a row of a file
        written before a column was added gets a null there, a widened column its wider type;
        a schema change committed after ``base`` is a ``metaData`` commit, which makes the sweep
        commit conflict as a seal does). On any failure (a full disk, say) the files written so
        far are deleted: they were never committed, so nobody can see them. ``roll.engine = spark`` hands the
        work to :func:`compact_with_spark`, which keeps the same names and the same promise — but for a
        table in a bucket, which Spark cannot write without a JVM S3 connector: it rolls here.
        """
        attempt = uuid.uuid4().hex[:8]
        base_version, columns = int(base.version()), columns_of(base, f"table {table.name}")
        if self.config.engine == "spark" and not storage.is_remote(table.location):
            if self.spark is None:
                raise RollFailedError(
                    "roll.engine is spark, but this roller was given no Spark session (Roller(spark=…))"
                )
            done = compact_with_spark(
                self.spark(table), table, columns, value, files, roll_id, base_version, attempt,
                self.config.target_file_size, table.cluster_by,
            )  # fmt: skip
            self.progress.advance(sum(f.size for f in files))  # one Spark job: all at once
            return done
        compacted = CompactedFiles(
            table,
            columns,
            value,
            lambda n: compacted_name(roll_id, base_version, attempt, n),
            self.config.target_file_size,
            table.cluster_by,
            self.config.cluster_memory,
        )
        try:
            for f, content in prefetched(table, sorted(files, key=lambda f: f.path)):
                compacted.add(f, content)
                self.progress.advance(f.size)
            compacted.close()
        except BaseException as exc:
            compacted.discard_open()
            for path, _, _ in compacted.out:
                remove_file(table, path)
            if isinstance(exc, OSError):  # a full disk, say: say so
                raise storage_error(exc, f"compacting partition {iso(value)} of table {table.name}") from exc
            raise
        return compacted.out, compacted.ranges

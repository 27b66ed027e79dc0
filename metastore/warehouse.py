"""The warehouse: where each table's Delta log and data files live, and every Delta commit.

Layout of a table ``ns.t`` (a standard Delta table any Delta reader can open)::

    <warehouse>/ns/t/_delta_log/                 the Delta transaction log
    <warehouse>/ns/t/_staging/<chunk>-<k>.parquet chunk files as staged, before their commit
    <warehouse>/ns/t/_staging/<pcol>=<value>/…    committed chunk files of a streaming partition
    <warehouse>/ns/t/<pcol>=<value>/part-*.parquet a standard partition: exactly its live files
    <warehouse>/ns/t/<pcol>=<value>/_SUCCESS      completeness marker, written after the roll

Names starting with ``_`` are hidden from Hive and Spark Parquet readers, so a plain reader
of the table directory sees standard partitions only, and one pointed at a partition
directory sees exactly that partition's rows. Every file the log lists is under a
``<pcol>=<value>/`` directory naming its partition, as the log's ``partitionValues`` do
(``metastore/partition_names.py``): readers that take the value from the path (polars' native
Delta reader) find it there. A chunk's file is staged before its partition is known (arrival
mode: the partition open when it commits); its commit adds a hard link to it in its partition's
staging directory (``metastore/staging.py``).

The Delta log is the truth about visibility: a chunk is visible iff a commit added its files.
The SQL metastore is the truth about lifecycles and coordinates writers and rollers; where the
two could disagree after a crash, the Delta log decides (see :meth:`Warehouse.find_commit`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from metastore import clock, delta_append
from metastore.errors import (
    CommitStateUnknownError,
    ConflictError,
    StorageError,
    StorageFullError,
    TableIntegrityError,
)
from metastore.models import Column, Table, TableName
from metastore.partition_names import (
    STAGING_DIR,
    parse_partition_value,
    partition_dir,
    partition_value_text,
)

log = logging.getLogger("streampart.warehouse")

SUCCESS_MARKER = "_SUCCESS"
SEAL_PROPERTY = "streampart.seal"
# A chunk commit's commit info: GROUP_KEY (unique per attempt, how the committer finds its own
# commit) and CHUNKS_KEY (the ids of the chunks it adds, comma-separated: a group commit holds
# several). Logs written before group commit name one chunk under CHUNK_KEY: still recognised.
GROUP_KEY = "streampart.group"
CHUNKS_KEY = "streampart.chunks"
CHUNK_KEY = "streampart.chunk"
ROLL_KEY = "streampart.roll"
# A roll's sweep commit names its roll and attempt (``<roll id>/<random>``): scheduler/roll.py.
SWEEP_KEY = "streampart.sweep"

# Why 100: delta-rs retries a commit whose version was taken by a concurrent writer, re-running
# its conflict check each time. Under many concurrent writers (tests run 4+ processes plus a
# roller) a commit may lose that race several times in a row; conflicts that matter (a seal)
# are not retried by delta-rs and reach us at once.
MAX_COMMIT_RETRIES = 100

# A checkpoint every 100 versions: delta-rs' default, which our tables state explicitly.
DEFAULT_CHECKPOINT_INTERVAL = 100


_ARROW: dict[str, pa.DataType] = {
    "boolean": pa.bool_(),
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
}


def arrow_type(delta_type: str) -> pa.DataType:
    if delta_type.startswith("decimal("):
        p, sc = delta_type[len("decimal(") : -1].split(",")
        return pa.decimal128(int(p), int(sc))
    return _ARROW[delta_type]


def data_schema(columns: Sequence[Column]) -> pa.Schema:
    """Arrow schema of the data files (the partition column lives in the Delta log only)."""
    return pa.schema([pa.field(c.name, arrow_type(c.type), nullable=c.nullable) for c in columns])


def table_schema(table: Table) -> pa.Schema:
    """Arrow schema of the whole table: data columns, then the partition column."""
    return data_schema(table.columns).append(
        pa.field(table.partition_column, pa.timestamp("us", tz="UTC"), nullable=False)
    )


@dataclass(frozen=True)
class LiveFile:
    """A data file in one Delta snapshot."""

    path: str  # relative to the table root, as on disk
    partition: datetime
    size: int
    rows: int

    @property
    def staged(self) -> bool:
        return self.path.startswith(STAGING_DIR + "/")

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def chunk(self) -> str | None:
        """The chunk a staged file belongs to (see :func:`chunk_of_staged`)."""
        return chunk_of_staged(self.name) if self.staged else None


# Staged files are named ``<chunk id>-<k>.parquet`` (or ``<chunk id>-<task>-<k>.parquet`` when
# Spark tasks stage them, ``<chunk id>-<attempt>-<batch>-<k>.parquet`` for HTTP uploads), and
# chunk ids are UUIDs in their 36-character text form. Files being written are hidden: a ``.``
# before the same name.
CHUNK_ID_LENGTH = 36


def chunk_of_staged(name: str) -> str:
    """The id of the chunk whose staged (or hidden, half-written) file is named ``name``."""
    return name.removeprefix(".")[:CHUNK_ID_LENGTH]


@dataclass(frozen=True)
class PartitionStats:
    files: int = 0
    staged_files: int = 0
    chunks: int = 0  # distinct chunks among the staged files
    rows: int = 0
    bytes: int = 0


def files_stats(files: Iterable[LiveFile]) -> dict[datetime, PartitionStats]:
    """Per partition, what ``files`` (of one snapshot, or what a link shows of it) hold.

    Plain counters per partition, one PartitionStats each at the end: ``table describe`` runs this
    over every live file, and a streaming partition may hold ten thousand.
    """
    counts: dict[datetime, list[int]] = {}  # files, staged files, rows, bytes
    chunks: dict[datetime, set[str]] = {}
    prefix = STAGING_DIR + "/"
    for f in files:
        acc = counts.get(f.partition)
        if acc is None:
            acc = counts[f.partition] = [0, 0, 0, 0]
            chunks[f.partition] = set()
        acc[0] += 1
        acc[2] += f.rows
        acc[3] += f.size
        if f.path.startswith(prefix):
            acc[1] += 1
            chunks[f.partition].add(chunk_of_staged(f.path[len(prefix) :]))
    return {
        value: PartitionStats(files=n, staged_files=staged, chunks=len(chunks[value]), rows=rows, bytes=size)
        for value, (n, staged, rows, size) in counts.items()
    }


class Warehouse:
    """One warehouse root (a local directory) holding one Delta table per streampart table."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).resolve()
        # per table location: whether commits may be written straight to the log, and how often
        # the log is checkpointed (see commit_files)
        self._plain: dict[str, bool] = {}
        self._checkpoint_every: dict[str, int] = {}
        self._checkpointing: set[str] = set()
        # Commits to one table from threads of this process take turns (see _transact).
        self._commit_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # Spark tasks get a warehouse by pickle; the commit locks stay behind.
        return (Warehouse, (str(self.root),))

    def location(self, name: TableName) -> str:
        return str(self.root / name.namespace / name.table)

    # -- table life ------------------------------------------------------------------------
    def create(self, table: Table) -> None:
        from deltalake import DeltaTable

        location = Path(table.location)
        (location / STAGING_DIR).mkdir(parents=True, exist_ok=True)
        if (location / "_delta_log").is_dir():
            return  # created by an earlier attempt that crashed before the metastore noticed
        DeltaTable.create(
            str(location),
            schema=table_schema(table),
            partition_by=[table.partition_column],
            name=str(table.name),
            description=f"streampart {table.mode.value} table, rolls every {table.roll_every}",
            configuration={"delta.checkpointInterval": str(DEFAULT_CHECKPOINT_INTERVAL)},
        )

    def load(self, table: Table, version: int | None = None) -> Any:
        """A new DeltaTable at ``version`` (default: the newest); the caller owns it.

        Raises:
            TableIntegrityError: the Delta log cannot be read (a gap, a truncated or corrupt
                commit file), naming the table and what to do.
        """
        from deltalake import DeltaTable

        with self._log_errors(table):
            if version is None:
                return DeltaTable(table.location)
            return DeltaTable(table.location, version=version)

    @contextlib.contextmanager
    def _log_errors(self, table: Table) -> Iterator[None]:
        from deltalake.exceptions import DeltaError, TableNotFoundError

        try:
            yield
        except TableNotFoundError:
            raise TableIntegrityError(
                f"table {table.name}: no Delta log at {table.location}/_delta_log; restore the "
                "table's directory from a backup, or drop the table"
            ) from None
        except (DeltaError, OSError) as exc:
            raise TableIntegrityError(
                f"table {table.name}: its Delta log cannot be read ({first_line(exc)}); restore the "
                f"damaged commit file under {table.location}/_delta_log from a backup; "
                "`streampart check` lists every problem"
            ) from None

    def verify_newest(
        self, table: Table, dt: Any, recorded: int, chunks: dict[str, set[str]] | None = None
    ) -> None:
        """Check that ``dt`` (the newest snapshot) holds every commit the metastore recorded.

        ``recorded`` is the newest Delta version the metastore knows a commit at (a chunk, a
        seal, a sweep); ``chunks``, the chunks it recorded committed at that version with the
        names of the files each added (:meth:`commit_mismatch`). A log that ends before it lost
        its newest commit files; one whose commit file at that version is empty, cut short or
        holds no commit, or does not hold those chunks' files, lost that commit's content (or
        the version was taken again by another commit). Either way reading or writing on would
        serve fewer rows than were acknowledged, or reuse a version.

        Raises:
            TableIntegrityError: naming the table, the version and what to do.
        """
        found = int(dt.version())
        if found < recorded:
            raise TableIntegrityError(
                f"table {table.name}: the Delta log ends at version {found}, but the metastore "
                f"recorded a commit at version {recorded}: commit files were lost from "
                f"{table.location}/_delta_log; restore versions {found + 1}..{recorded} from a "
                "backup before reading or writing this table"
            )
        if recorded >= 0 and self.commit_file_damaged(table, recorded):
            raise TableIntegrityError(
                f"table {table.name}: the Delta commit file of version {recorded} is empty, cut "
                f"short or holds no commit ({self.commit_path(table, recorded)}); restore it from a "
                "backup before reading or writing this table"
            )
        mismatch = self.commit_mismatch(table, recorded, chunks) if recorded >= 0 and chunks else None
        if mismatch is not None:
            raise TableIntegrityError(
                f"table {table.name}: {mismatch}; restore it from a backup before reading or writing "
                "this table (`streampart check` lists every problem)"
            )

    def version_at(self, table: Table, at: datetime) -> int | None:
        """The newest version committed at or before ``at`` (None: none that old is in the log).

        From the commit files' own timestamps (delta-rs' ``load_as_version`` answers version 0
        for a time before the table existed). Versions whose commit file is gone (cleaned after
        a checkpoint) cannot be told apart, so they are not candidates.
        """
        log = Path(table.location) / "_delta_log"
        versions = sorted(int(p.stem) for p in log.glob("*.json") if p.stem.isdigit())
        millis = at.timestamp() * 1000
        lo, hi, found = 0, len(versions) - 1, None
        while lo <= hi:  # commit timestamps grow with the version
            mid = (lo + hi) // 2
            info = self.commit_info(table, versions[mid]) or {}
            if float(info.get("timestamp", float("inf"))) <= millis:
                found, lo = versions[mid], mid + 1
            else:
                hi = mid - 1
        return found

    def commit_path(self, table: Table, version: int) -> Path:
        return Path(table.location) / "_delta_log" / f"{version:020d}.json"

    def commit_file_damaged(self, table: Table, version: int) -> bool:
        """Whether the commit file of ``version`` is there but damaged: empty, not JSON lines,
        without commitInfo, or cut short — fewer add and remove actions than its commitInfo
        counts (``streampart.actions``, in every commit streampart writes: a file cut at a line
        boundary still parses).

        A missing file is not "damaged" here: old commit files go once a checkpoint covers them.
        """
        try:
            actions = self.commit_actions(table, version)
        except ValueError:  # truncated or overwritten
            return True
        if actions is None:
            return False
        infos = [a["commitInfo"] for a in actions if "commitInfo" in a]
        if not infos or not isinstance(infos[0], dict):
            return True
        counted = infos[0].get(delta_append.ACTIONS_KEY)
        if counted is None:
            return False
        held = sum(1 for a in actions if "add" in a or "remove" in a)
        return str(held) != str(counted)

    def commit_actions(self, table: Table, version: int) -> list[dict[str, Any]] | None:
        """The actions of ``version``'s commit file (None: the file is gone).

        Raises:
            ValueError: the file is not JSON lines of objects (truncated or overwritten).
        """
        try:
            lines = self.commit_path(table, version).read_bytes().splitlines()
        except FileNotFoundError:
            return None
        actions = [json.loads(line) for line in lines if line.strip()]
        if not all(isinstance(a, dict) for a in actions):
            raise ValueError(f"commit file of version {version} holds something other than actions")
        return actions

    def commit_mismatch(self, table: Table, version: int, chunks: dict[str, set[str]]) -> str | None:
        """What the commit file of ``version`` lacks of what the metastore recorded committed at it.

        ``chunks``: each chunk the metastore holds COMMITTED at ``version``, with the names of the
        data files it added (their last path component). The commit must name every one of them
        in its commitInfo and add all their files; one that does not was cut short, or was
        deleted and its version taken again by another commit. None: it holds them all (or the
        file is gone or unreadable, which other checks report).
        """
        try:
            actions = self.commit_actions(table, version)
        except ValueError:
            return None
        if actions is None:
            return None
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), None)
        named = set(commit_chunks(info)) if isinstance(info, dict) else set()
        added = {
            urllib.parse.unquote(str(a["add"].get("path", ""))).rsplit("/", 1)[-1]
            for a in actions
            if isinstance(a.get("add"), dict)
        }
        path = self.commit_path(table, version)
        for chunk_id, names in sorted(chunks.items()):
            if chunk_id not in named:
                others = ", ".join(sorted(named)[:3]) or "no chunk"
                return (
                    f"the metastore recorded chunk {chunk_id} committed at version {version}, but the "
                    f"commit file of that version ({path}) does not hold it (it adds {others}): the "
                    "commit was lost and its version taken again by another commit"
                )
            lacking = sorted(names - added)
            if lacking:
                more = f" (and {len(lacking) - 1} more)" if len(lacking) > 1 else ""
                return (
                    f"the commit file of version {version} ({path}) lacks file {lacking[0]}{more} of "
                    f"chunk {chunk_id}, which the metastore recorded committed at that version: the "
                    "file was cut short"
                )
        return None

    # -- files -----------------------------------------------------------------------------
    def staging_path(self, prefix: str, k: int) -> str:
        """The path of a chunk's ``k``-th staged file; ``prefix`` starts with the chunk id."""
        return f"{STAGING_DIR}/{prefix}-{k}.parquet"

    def write_parquet(self, table: Table, relative: str, data: pa.Table) -> int:
        """Write ``data`` to ``relative`` atomically (temp file + rename); returns its size.

        Raises:
            StorageFullError: no space left (retriable); StorageError: another I/O failure.
                Either way no file is left behind.
        """
        target = Path(table.location) / relative
        tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex}.tmp")
        with storage_errors(f"writing {relative} of table {table.name}", cleanup=tmp):
            target.parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(data, tmp, compression="snappy")
            os.replace(tmp, target)
            return target.stat().st_size

    def exists(self, table: Table, relative: str) -> bool:
        return (Path(table.location) / relative).is_file()

    def remove_file(self, table: Table, relative: str) -> None:
        """Delete a file, or a directory with everything in it (a Spark sweep attempt's)."""
        path = Path(table.location) / relative
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)

    def live_files(self, dt: Any) -> list[LiveFile]:
        adds = pa.table(dt.get_add_actions(flatten=True))
        if adds.num_rows == 0:
            return []
        pcol = next(c for c in adds.column_names if c.startswith("partition."))
        out = []
        # a snapshot holds few partitions and may hold ten thousand files: parse each value once
        values: dict[Any, datetime] = {}
        unquote = urllib.parse.unquote
        for path, pv, size, rows in zip(
            adds.column("path").to_pylist(),
            adds.column(pcol).to_pylist(),
            adds.column("size_bytes").to_pylist(),
            adds.column("num_records").to_pylist(),
            strict=True,
        ):
            value = values.get(pv)
            if value is None:
                value = values[pv] = parse_partition_value(pv)
            # the log holds URI-encoded paths; ours on disk are the decoded form
            out.append(LiveFile(unquote(path) if "%" in path else path, value, int(size), int(rows or 0)))
        return out

    def partition_stats(self, dt: Any) -> dict[datetime, PartitionStats]:
        return files_stats(self.live_files(dt))

    # -- commits ---------------------------------------------------------------------------
    def _add_action(
        self, table: Table, relative: str, partition: datetime, rows: int, data_change: bool
    ) -> Any:
        from deltalake.transaction import AddAction

        st = (Path(table.location) / relative).stat()
        return AddAction(
            relative,
            st.st_size,
            {table.partition_column: partition_value_text(partition)},
            int(st.st_mtime * 1000),
            data_change,
            json.dumps({"numRecords": rows}),
        )

    def commit_files(
        self,
        table: Table,
        read_version: int,
        files: Iterable[tuple[str, datetime, int]],
        metadata: dict[str, str],
        app_id: str | None = None,
        fence: Callable[[], None] | None = None,
    ) -> int:
        """Append ``(path, partition, rows)`` files in one Delta commit after version ``read_version``.

        Written straight to the log (``metastore/delta_append.py``: the cost of one small file, not of
        the table's size), unless the table's protocol asks more of a writer than an append
        gives: then through delta-rs. With ``app_id``, the commit also records that Delta
        application transaction (``txn``, version 1): a concurrent commit with the same id then
        conflicts, so it lands at most once. ``fence``: called just before the commit is written
        (a writer's check that it may still commit); what it raises stops the commit.

        Returns:
            The version of the new commit.

        Raises:
            ConflictError: a commit since ``read_version`` (a roll's seal) changed the table's
                metadata; read the newest version and decide again.
            CommitStateUnknownError: the commit may have landed (an I/O error): look it up.
            StorageFullError: no space for the commit file; it did not land.
        """
        files = list(files)
        if not self._plain_appends(table):
            dt = self.load(table, read_version)
            actions = [self._add_action(table, p, part, rows, True) for p, part, rows in files]
            counted = {**metadata, delta_append.ACTIONS_KEY: str(len(actions))}
            if fence is not None:
                fence()
            return self._transact(dt, table, actions, counted, "Delta commit", app_id)
        with storage_errors(f"reading the files to commit to {table.name}"):
            entries = []
            for path, part, rows in files:
                st = (Path(table.location) / path).stat()
                entries.append((path, partition_value_text(part), rows, st.st_size, int(st.st_mtime * 1000)))
        body = delta_append.append_actions(
            table.partition_column, entries, metadata, int(time.time() * 1000), app_id
        )
        with self._commit_lock(table):
            if fence is not None:
                fence()
            try:
                with self._commit_errors(table, "Delta commit"):  # an OSError: full, or state unknown
                    version = delta_append.publish(
                        table.location, body, read_version, MAX_COMMIT_RETRIES, app_id
                    )
            except ConflictError as exc:
                self._plain.pop(table.location, None)  # a metadata change: look at the protocol again
                raise ConflictError(f"Delta commit to {table.name} conflicted: {exc}") from None
        self._checkpoint_if_due(table, version)
        return version

    def newest_version(self, table: Table, known: int) -> int | None:
        """The newest version of the table's log, looked for after ``known`` (a version seen in it).

        A few file checks, whatever the table holds. None if ``known`` is gone from the log
        (cleaned up, or the log was lost) or the log's tail is damaged (:meth:`_log_tail_intact`):
        :meth:`load` the table instead, which names the damage.
        """
        newest = delta_append.newest_version(table.location, known)
        if newest is None or not self._log_tail_intact(table, newest):
            return None
        return newest

    def _log_tail_intact(self, table: Table, newest: int) -> bool:
        """Whether the log's commit files since its last checkpoint are all there, the newest whole.

        What :meth:`verify_newest` and a load would find wrong with a log that was damaged under
        a running writer (a deleted, emptied or torn commit file), for the price of a few file
        checks and one small read; when it says no, load the table to have the damage named.
        """
        first = max(last_checkpoint_version(table) + 1, 0)
        if any(not self.commit_path(table, v).is_file() for v in range(first, newest + 1)):
            return False
        return not self.commit_file_damaged(table, newest)

    def _plain_appends(self, table: Table) -> bool:
        """Whether :meth:`commit_files` may write the table's commits itself (learnt once per table)."""
        plain = self._plain.get(table.location)
        if plain is None:
            dt = self.load(table)
            plain = self._plain[table.location] = delta_append.plain_appends(dt)
            every = dt.metadata().configuration.get("delta.checkpointInterval")
            self._checkpoint_every[table.location] = int(every or DEFAULT_CHECKPOINT_INTERVAL)
        return plain

    def _checkpoint_if_due(self, table: Table, version: int) -> None:
        """Checkpoint the log (and clean up expired log files) every ``delta.checkpointInterval``
        versions, as delta-rs does after its own commits; in the background, off the commit path."""
        every = self._checkpoint_every.get(table.location, DEFAULT_CHECKPOINT_INTERVAL)
        if version % every or table.location in self._checkpointing:
            return
        self._checkpointing.add(table.location)

        def run() -> None:
            try:
                dt = self.load(table, version)
                dt.create_checkpoint()
                dt.cleanup_metadata()
            except Exception as exc:  # the next one (or housekeeping) checkpoints instead
                log.warning("checkpoint of %s at version %d failed: %s", table.name, version, first_line(exc))
            finally:
                self._checkpointing.discard(table.location)

        # not a daemon: the interpreter waits for it at exit rather than stop it inside delta-rs
        threading.Thread(target=run, name=f"checkpoint-{table.name}").start()

    def seal(self, table: Table, roll_id: str) -> int:
        """Change the table's metadata so every commit prepared on an older snapshot fails.

        Returns:
            The version of the seal commit.
        """
        from deltalake.transaction import CommitProperties

        dt = self.load(table)
        read_version = int(dt.version())
        metadata = {ROLL_KEY: roll_id, SEAL_PROPERTY: f"{roll_id}/{uuid.uuid4().hex}"}
        with self._commit_errors(table, "seal"):
            dt.alter.set_table_properties(
                {SEAL_PROPERTY: metadata[SEAL_PROPERTY]},
                raise_if_not_exists=False,
                commit_properties=CommitProperties(
                    custom_metadata=metadata, max_commit_retries=MAX_COMMIT_RETRIES
                ),
            )
        return self._committed_version(table, metadata, read_version)

    def replace_files(
        self,
        dt: Any,
        table: Table,
        removes: Sequence[LiveFile],
        adds: Sequence[tuple[str, datetime, int]],
        metadata: dict[str, str],
    ) -> int:
        """Swap files in one commit without changing data (``dataChange=false``): the sweep."""
        from deltalake.transaction import RemoveAction

        now_ms = int(clock.now().timestamp() * 1000)
        actions: list[Any] = [
            RemoveAction(
                f.path,
                False,
                now_ms,
                f.size,
                {table.partition_column: partition_value_text(f.partition)},
            )
            for f in removes
        ]
        actions += [self._add_action(table, p, part, rows, False) for p, part, rows in adds]
        counted = {**metadata, delta_append.ACTIONS_KEY: str(len(actions))}
        return self._transact(dt, table, actions, counted, "sweep commit")

    def _transact(
        self,
        dt: Any,
        table: Table,
        actions: list[Any],
        metadata: dict[str, str],
        what: str,
        app_id: str | None = None,
    ) -> int:
        """Commit ``actions`` on top of ``dt``'s snapshot (errors as :meth:`_commit_errors` says)."""
        from deltalake.transaction import CommitProperties, Transaction

        read_version = int(dt.version())
        # Delta commits are optimistic: concurrent committers race for the next version and
        # the losers re-check and retry. Threads of one process (the HTTP server's request
        # threads) need not race each other; taking turns here leaves delta-rs' retries to
        # commits from other processes. The snapshot is not refreshed inside the lock: it
        # must stay the one taken before the partition states were read (the fencing).
        with self._commit_lock(table), self._commit_errors(table, what):
            dt.create_write_transaction(
                actions,
                "append",
                dt.schema(),
                [table.partition_column],
                commit_properties=CommitProperties(
                    custom_metadata=metadata,
                    max_commit_retries=MAX_COMMIT_RETRIES,
                    app_transactions=[Transaction(app_id, 1)] if app_id is not None else None,
                ),
            )
        return self._committed_version(table, metadata, read_version)

    @contextlib.contextmanager
    def _commit_errors(self, table: Table, what: str) -> Iterator[None]:
        """How a failed Delta commit is reported, decided here once for every commit.

        Raises:
            ConflictError: a concurrent commit conflicted (delta-rs' ``CommitFailedError``); the
                commit did not land: reload, decide again, retry.
            CommitStateUnknownError: an I/O error (delta-rs' ``DeltaError``, an ``OSError``); the
                commit may have landed: look it up before committing again.
            StorageFullError: no space for the commit file; it did not land.

        Anything else (delta-rs' protocol and schema errors, a bug's ``TypeError``) is not
        retried by anyone: it propagates as it is.
        """
        from deltalake.exceptions import (
            CommitFailedError,
            DeltaError,
            DeltaProtocolError,
            SchemaMismatchError,
        )

        try:
            yield
        except CommitFailedError as exc:
            raise ConflictError(f"{what} to {table.name} conflicted: {first_line(exc)}") from exc
        except (DeltaProtocolError, SchemaMismatchError):
            raise
        except (DeltaError, OSError) as exc:
            full = storage_error(exc, f"the {what} to {table.name}")
            if isinstance(full, StorageFullError):  # the commit file could not be written: not landed
                raise full from exc
            raise CommitStateUnknownError(
                f"{what} to {table.name} failed and may have landed: {first_line(exc)}"
            ) from exc

    def _commit_lock(self, table: Table) -> threading.Lock:
        with self._locks_guard:
            return self._commit_locks.setdefault(table.location, threading.Lock())

    def _committed_version(self, table: Table, metadata: dict[str, str], read_version: int) -> int:
        # delta-rs does not report the version it committed; every commit of ours carries a
        # unique key in its commit info, so look it up among the commits after our snapshot.
        # It landed after read_version, so scan forward through the commit files from there:
        # cheaper than reloading the table to learn its newest version.
        key, value = next(iter(metadata.items()))
        version, info = read_version + 1, self.commit_info(table, read_version + 1)
        while info is not None and info.get(key) != value:
            version += 1
            info = self.commit_info(table, version)
        if info is not None:
            return version
        found = self.find_commit(table, key, value, read_version)
        if found is None:
            raise CommitStateUnknownError(
                f"commit {key}={value} to {table.name} returned but is not in the Delta log"
            )
        return found

    def find_commit(self, table: Table, key: str, value: str, since_version: int) -> int | None:
        """The version of the commit after ``since_version`` whose commit info has ``key == value``.

        Reads the commit files themselves: ``_delta_log/<version>.json`` *is* that version by
        the Delta protocol. (delta-rs' ``history()`` numbers its entries by counting from the
        loaded snapshot while reading a re-listed log, so under concurrent commits its version
        numbers can be off by the commits that landed in between.)
        """
        return self._find(table, since_version, lambda info: info.get(key) == value)

    def find_chunk_commit(self, table: Table, chunk_id: str, since_version: int) -> int | None:
        """The version of the commit after ``since_version`` that added chunk ``chunk_id``, if any."""
        return self._find(table, since_version, lambda info: chunk_id in commit_chunks(info))

    def _find(self, table: Table, since_version: int, match: Callable[[dict[str, Any]], bool]) -> int | None:
        latest = int(self.load(table).version())
        for version in range(latest, since_version, -1):
            info = self.commit_info(table, version)
            if info is not None and match(info):
                return version
        return None

    def commit_info(self, table: Table, version: int) -> dict[str, Any] | None:
        """The commitInfo of ``version``'s commit file; None if the file is gone or holds none.

        Raises:
            ValueError: the file is not JSON lines (truncated or overwritten).
        """
        try:
            with self.commit_path(table, version).open() as f:
                for line in f:
                    action = json.loads(line)
                    if "commitInfo" in action:
                        return dict(action["commitInfo"])
        except FileNotFoundError:  # cleaned up after a checkpoint: older than any live commit
            return None
        return None

    def check_files(self, table: Table, files: Iterable[LiveFile]) -> None:
        """Check that every file a snapshot lists is on disk with the size the log recorded.

        A query must never answer from part of a snapshot.

        Raises:
            TableIntegrityError: naming the first missing or truncated file.
        """
        root = table.location
        for f in files:  # plain os.stat: a pin checks every file, and a snapshot may hold 10,000
            try:
                size = os.stat(os.path.join(root, f.path)).st_size
            except FileNotFoundError:
                raise TableIntegrityError(
                    f"table {table.name}: data file {f.path} of the Delta log is missing from "
                    f"{table.location}; restore it from a backup (`streampart check` lists every problem)"
                ) from None
            if size != f.size:
                raise TableIntegrityError(
                    f"table {table.name}: data file {f.path} has {size} bytes, the Delta log says "
                    f"{f.size}; restore it from a backup (`streampart check` lists every problem)"
                )

    def partition_dir_entries(self, table: Table, value: datetime, directories: bool = False) -> list[str]:
        """Every file in a partition's directory but its markers (``_*``): data and hidden temp files.

        ``directories``: directories too (a Spark sweep attempt writes into a hidden one).
        """
        d = Path(table.location) / partition_dir(table, value)
        if not d.is_dir():
            return []
        rel = partition_dir(table, value)
        return sorted(
            f"{rel}/{p.name}"
            for p in d.iterdir()
            if (p.is_file() or (directories and p.is_dir())) and not p.name.startswith("_")
        )

    def write_success_marker(self, table: Table, value: datetime, content: dict[str, Any]) -> None:
        d = Path(table.location) / partition_dir(table, value)
        with storage_errors(f"writing the {SUCCESS_MARKER} marker of table {table.name}"):
            d.mkdir(parents=True, exist_ok=True)
            (d / SUCCESS_MARKER).write_text(json.dumps(content, default=str) + "\n")

    def has_success_marker(self, table: Table, value: datetime) -> bool:
        return (Path(table.location) / partition_dir(table, value) / SUCCESS_MARKER).is_file()


_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT)


def commit_chunks(info: dict[str, Any]) -> list[str]:
    """The ids of the chunks a commit added, from its commit info (none: not a chunk commit)."""
    ids = str(info.get(CHUNKS_KEY) or "").split(",")
    legacy = info.get(CHUNK_KEY)
    return [i for i in ids if i] + ([str(legacy)] if legacy else [])


def storage_error(exc: BaseException, what: str) -> StorageError:
    """The StreampartError that says what an I/O failure while ``what`` means for the user."""
    text = first_line(exc)
    # delta-rs' errors carry no errno: the cause is in a later line of their message
    if getattr(exc, "errno", None) in _OUT_OF_SPACE or "No space left on device" in str(exc):
        return StorageFullError(
            f"no space left on the warehouse's storage while {what}; nothing was committed: free "
            "space, then retry"
        )
    return StorageError(f"storage failed while {what}: {text}")


@contextlib.contextmanager
def storage_errors(what: str, cleanup: Path | None = None) -> Iterator[None]:
    """Turn I/O failures inside into :func:`storage_error`; ``cleanup``: a temp file to delete then."""
    try:
        yield
    except OSError as exc:  # pyarrow's IO errors are OSErrors too
        if cleanup is not None:
            with contextlib.suppress(OSError):
                cleanup.unlink(missing_ok=True)
        raise storage_error(exc, what) from exc


def last_checkpoint_version(table: Table) -> int:
    """The version of the table's newest Delta checkpoint (-1: none yet)."""
    path = Path(table.location) / "_delta_log" / "_last_checkpoint"
    try:
        return int(json.loads(path.read_text())["version"])
    except (FileNotFoundError, KeyError, ValueError):
        return -1


def first_line(exc: BaseException) -> str:
    """The first line of an error's message: delta-rs appends a Rust backtrace to some."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def now_utc() -> datetime:
    return clock.now()

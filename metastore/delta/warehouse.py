"""The warehouse: one root directory of Delta tables, one per streampart table, and every commit to them.

A table's layout is in ``metastore/delta/layout.py``; reading its log in ``log.py``, its files in
``files.py``. Here: creating and opening a table, and committing to it. A chunk commit is
written straight to the log when the table's protocol allows (``append.py``: the cost of one
small file, not of the table's size), through delta-rs otherwise; a roll's seal and sweep go
through delta-rs. Every commit's failure is reported as ``errors.py`` decides, and a commit
that returned is found in the log by the unique key its commitInfo carries.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from metastore import clock, storage
from metastore.delta import append
from metastore.delta.arrow import table_schema
from metastore.delta.checkpoints import (
    CHECKPOINT_INTERVAL,
    DEFAULT_CHECKPOINT_INTERVAL,
    BackgroundCheckpoints,
)
from metastore.delta.errors import commit_errors, log_errors, storage_errors
from metastore.delta.files import LiveFile
from metastore.delta.layout import STAGING_DIR, partition_value_text
from metastore.delta.log import (
    ACTIONS_KEY,
    EXPIRE_KEY,
    ROLL_KEY,
    SCHEMA_KEY,
    SEAL_PROPERTY,
    commit_actions,
    commit_chunks,
    commit_info,
    delta_table,
    newest_version,
)
from metastore.delta.stats import stats_json
from metastore.errors import CommitStateUnknownError, ConflictError, UserInputError
from metastore.models import Column, Table, TableName

# Why 100: delta-rs retries a commit whose version was taken by a concurrent writer, re-running
# its conflict check each time. Under many concurrent writers (tests run 4+ processes plus a
# roller) a commit may lose that race several times in a row; conflicts that matter (a seal)
# are not retried by delta-rs and reach us at once.
MAX_COMMIT_RETRIES = 100


def expiry_app_id(expiry_id: str) -> str:
    """The app transaction of an expiry's removes commit: Delta lands it at most once."""
    return f"streampart.expire/{expiry_id}"


# In a table's Delta configuration: the uid of the streampart table whose log it is.
TABLE_PROPERTY = "streampart.table"

WIDEN_WITH_FEATURES = (
    "table {name} has Delta table features, so its schema changes go through delta-rs, which cannot "
    "widen a column's type (it lacks the typeWidening feature); add a new column instead"
)


class Warehouse:
    """One warehouse root (a local directory, or ``s3://bucket/prefix``) holding one Delta table per
    streampart table."""

    def __init__(self, root: str | Path) -> None:
        self.root = storage.normalize(str(root))
        # per table location: whether commits may be written straight to the log (see commit_files)
        self._plain: dict[str, bool] = {}
        self._checkpoints = BackgroundCheckpoints()
        # Commits to one table from threads of this process take turns (see _transact).
        self._commit_locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        # Spark tasks get a warehouse by pickle; the commit locks stay behind.
        return (Warehouse, (self.root,))

    @property
    def remote(self) -> bool:
        """Whether the warehouse is in a bucket."""
        return storage.is_remote(self.root)

    @property
    def local_dir(self) -> Path:
        """Where this host keeps what belongs to the warehouse but must be on a local disk (a Kafka
        job's Spark checkpoints, a running SQL server's file): the warehouse itself when it is
        local; for a bucket, ``$XDG_STATE_HOME/streampart/<bucket>/<prefix>`` (default
        ``~/.local/state``), made on first use."""
        if not self.remote:
            return Path(self.root)
        state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        where = Path(state) / "streampart" / self.root.removeprefix("s3://")
        where.mkdir(parents=True, exist_ok=True)
        return where

    def location(self, name: TableName) -> str:
        return storage.join(self.root, name.namespace, name.table)

    # -- table life ------------------------------------------------------------------------
    def create(self, table: Table) -> None:
        """Create the table's Delta table at its location, naming the streampart table (its ``uid``)
        in the log's configuration (``streampart.table``).

        Raises:
            UserInputError: the location already holds another table's Delta log (a prefix or
                directory shared with another warehouse, or left over): nothing is changed there.
        """
        from deltalake import DeltaTable

        location = table.location
        if not storage.is_remote(location):
            os.makedirs(storage.join(location, STAGING_DIR), exist_ok=True)
        log = storage.list_dir(storage.join(location, "_delta_log"))
        if any(e.name.endswith(".json") or ".checkpoint." in e.name for e in log):
            self._check_own_log(table)
            return  # created by an earlier attempt that crashed before the metastore noticed
        DeltaTable.create(
            location,
            storage_options=storage.delta_client_options(location),
            schema=table_schema(table),
            partition_by=[table.partition_column],
            name=str(table.name),
            description=f"streampart {table.mode.value} table, rolls every {table.roll_every}",
            configuration={CHECKPOINT_INTERVAL: str(DEFAULT_CHECKPOINT_INTERVAL), TABLE_PROPERTY: table.uid},
            raise_if_key_not_exists=False,  # streampart's own key beside Delta's
        )

    def _check_own_log(self, table: Table) -> None:
        """Refuse a location whose Delta log is not ``table``'s own, made by an earlier attempt."""
        try:
            metadata = delta_table(table.location).metadata()
            owner, name = metadata.configuration.get(TABLE_PROPERTY), metadata.name
        except Exception:
            owner, name = None, None
        if owner != table.uid or not table.uid:
            raise UserInputError(
                f"table {table.name}: {table.location} already holds another table's Delta log"
                f"{f' ({name})' if name else ''}; nothing was changed there: drop that table, or "
                "put this warehouse (or cluster storage) under another prefix"
            )

    def load(self, table: Table, version: int | None = None) -> Any:
        """A new DeltaTable at ``version`` (default: the newest); the caller owns it.

        Raises:
            TableIntegrityError: the Delta log cannot be read (a gap, a truncated or corrupt
                commit file), naming the table and what to do.
        """
        with log_errors(table):
            return delta_table(table.location, version)

    def advance(self, dt: Any, table: Table, version: int) -> Any:
        """``dt`` (a DeltaTable of ``table`` this caller owns) brought forward to ``version``, reading
        only the commits after the one it holds: a listing and each new commit file, not the whole
        log again. Returns ``dt``. Errors as :meth:`load`'s."""
        with log_errors(table):
            if int(dt.version()) != version:
                dt.load_as_version(version)
        return dt

    def _add_action(
        self,
        table: Table,
        relative: str,
        partition: datetime,
        rows: int,
        data_change: bool,
        ranges: Mapping[str, str] | None = None,
    ) -> Any:
        from deltalake.transaction import AddAction

        st = storage.stat(storage.join(table.location, relative))
        return AddAction(
            relative,
            st.size,
            {table.partition_column: partition_value_text(partition)},
            st.mtime_ms,
            data_change,
            stats_json(rows, (ranges or {}).get(relative)),
        )

    def commit_files(
        self,
        table: Table,
        read_version: int,
        files: Iterable[tuple[str, datetime, int]],
        metadata: dict[str, str],
        app_id: str | None = None,
        fence: Callable[[], None] | None = None,
        *,
        schema_change: dict[str, Any] | None = None,
        ranges: Mapping[str, str] | None = None,
        sizes: Mapping[str, int] | None = None,
    ) -> int:
        """Append ``(path, partition, rows)`` files in one Delta commit after version ``read_version``.

        Written straight to the log (``metastore/delta/append.py``: the cost of one small file, not of
        the table's size), unless the table's protocol asks more of a writer than an append
        gives: then through delta-rs. With ``app_id``, the commit also records that Delta
        application transaction (``txn``, version 1): a concurrent commit with the same id then
        conflicts, so it lands at most once. ``fence``: called just before the commit is written
        (a writer's check that it may still commit); what it raises stops the commit.
        ``schema_change``: a ``metaData`` action (``metadata.metadata_action``) committed with the
        files, so they land with the columns they need; only on a table that takes plain appends.
        ``ranges``: the files' columns' statistics, by path (``metastore/delta/stats.py``).
        ``sizes``: the files' sizes in bytes, by path, when the caller knows them (it wrote them):
        a file not there is asked of the store (a HEAD in a bucket).

        Returns:
            The version of the new commit.

        Raises:
            ConflictError: a commit since ``read_version`` (a roll's seal, a schema change) changed
                the table's metadata; read the newest version and decide again.
            CommitStateUnknownError: the commit may have landed (an I/O error): look it up.
            StorageFullError: no space for the commit file; it did not land.
        """
        files = list(files)
        if not self._plain_appends(table):
            if table.keys is not None:  # its adds must carry their arrival, which delta-rs cannot write
                raise UserInputError(
                    f"{table.name} is keyed and its Delta log has table features: streampart cannot "
                    "append to it"
                )
            if schema_change is not None:
                raise ValueError(
                    f"{table.name} has Delta table features: change its schema with commit_schema"
                )
            dt = self.load(table, read_version)
            actions = [self._add_action(table, p, part, rows, True, ranges) for p, part, rows in files]
            counted = {**metadata, ACTIONS_KEY: str(len(actions))}
            if fence is not None:
                fence()
            return self._transact(dt, table, actions, counted, "Delta commit", app_id)
        now_ms = int(time.time() * 1000)
        with storage_errors(f"reading the files to commit to {table.name}"):
            entries = []
            for path, part, rows in files:
                known = (sizes or {}).get(path)
                if known is not None:  # its modification time: now (Delta's vacuum reads it as an age)
                    entries.append((path, partition_value_text(part), rows, known, now_ms))
                    continue
                st = storage.stat(storage.join(table.location, path))
                entries.append((path, partition_value_text(part), rows, st.size, st.mtime_ms))

        def body(version: int) -> bytes:  # a keyed table's adds carry their arrival: the version
            arrival = version if table.keys is not None else None
            return append.append_actions(
                table.partition_column,
                entries,
                metadata,
                now_ms,
                app_id,
                schema_change=schema_change,
                arrival=arrival,
                ranges=ranges,
            )

        with self._commit_lock(table):
            if fence is not None:
                fence()
            try:
                with commit_errors(table, "Delta commit"):  # an OSError: full, or state unknown
                    version = append.publish(table.location, body, read_version, MAX_COMMIT_RETRIES, app_id)
            except ConflictError as exc:
                self._plain.pop(table.location, None)  # a metadata change: look at the protocol again
                raise ConflictError(f"Delta commit to {table.name} conflicted: {exc}") from None
        self._checkpoints.after_commit(table, version, lambda: self.load(table, version))
        return version

    def _plain_appends(self, table: Table) -> bool:
        """Whether :meth:`commit_files` may write the table's commits itself (learnt once per table)."""
        plain = self._plain.get(table.location)
        if plain is None:
            dt = self.load(table)
            plain = self._plain[table.location] = append.plain_appends(dt)
            self._checkpoints.learn(table, dt)
        return plain

    def takes_plain_appends(self, table: Table) -> bool:
        """Whether the table's protocol lets streampart write its commits itself (no table features)."""
        return self._plain_appends(table)

    def commit_schema(
        self,
        table: Table,
        read_version: int,
        action: dict[str, Any],
        added: Sequence[Column],
        widened: Sequence[Column],
        key: str,
    ) -> int:
        """Commit the ``metaData`` ``action`` alone after ``read_version``, its commitInfo naming ``key``
        under ``streampart.schema`` and its operation as Delta's (``ADD COLUMNS``, ``CHANGE COLUMN``
        for ``widened``); the version it became.

        Put-if-absent like every append (``append.publish``): it lands after concurrent appends
        (their files stay valid under a schema that only adds and widens), and conflicts with a
        commit that changed the metadata since (a seal, another schema change). A table with Delta
        table features goes through delta-rs' ``alter.add_columns``, which can only add ``added``.

        Raises:
            ConflictError: a metadata change since ``read_version``; read the log again and re-plan.
            UserInputError: the table has table features and the change widens a column.
            CommitStateUnknownError: the commit may have landed (an I/O error): look it up.
        """
        metadata = {SCHEMA_KEY: key}
        if not self._plain_appends(table):
            if widened:
                raise UserInputError(WIDEN_WITH_FEATURES.format(name=table.name))
            return self._add_columns(table, read_version, added, metadata)
        operation = append.schema_operation(action, [c.name for c in added], [c.name for c in widened])
        body = append.append_actions(
            table.partition_column,
            [],
            metadata,
            int(time.time() * 1000),
            schema_change=action,
            operation=operation,
        )
        with self._commit_lock(table):
            try:
                with commit_errors(table, "schema change"):
                    version = append.publish(table.location, body, read_version, MAX_COMMIT_RETRIES)
            except ConflictError as exc:
                self._plain.pop(table.location, None)
                raise ConflictError(f"schema change of {table.name} conflicted: {exc}") from None
        self._checkpoints.after_commit(table, version, lambda: self.load(table, version))
        return version

    def _add_columns(
        self, table: Table, read_version: int, added: Sequence[Column], metadata: dict[str, str]
    ) -> int:
        from deltalake import Field
        from deltalake.schema import PrimitiveType
        from deltalake.transaction import CommitProperties

        dt = self.load(table, read_version)
        fields = [Field(c.name, PrimitiveType(c.type), nullable=c.nullable) for c in added]
        with commit_errors(table, "schema change"):
            dt.alter.add_columns(
                fields,
                commit_properties=CommitProperties(
                    custom_metadata=metadata, max_commit_retries=MAX_COMMIT_RETRIES
                ),
            )
        return self._committed_version(table, metadata, read_version)

    def seal(self, table: Table, roll_id: str, key: str = ROLL_KEY, dt: Any = None) -> int:
        """Change the table's metadata so every commit prepared on an older snapshot fails; the
        commit names ``roll_id`` under ``key`` (a roll's; a delete's under DELETE_KEY). ``dt``: the
        table as the caller loaded it moments before (else it is loaded here); it holds the seal
        after (delta-rs brings a table it commits a metadata change to up to that commit).

        Returns:
            The version of the seal commit.
        """
        from deltalake.transaction import CommitProperties

        dt = dt if dt is not None else self.load(table)
        read_version = int(dt.version())
        metadata = {key: roll_id, SEAL_PROPERTY: f"{roll_id}/{uuid.uuid4().hex}"}
        with commit_errors(table, "seal"):
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
        data_change: bool = False,
        app_id: str | None = None,
        txns: Sequence[tuple[str, int]] = (),
        ranges: Mapping[str, str] | None = None,
        checked: bool = False,
    ) -> int:
        """Swap files in one commit: without changing data (``dataChange=false``), the sweep; with
        ``data_change``, a delete's rewrite (at most once with its ``app_id``), or a secondary's copy
        of a partition a delete rewrote (``txns``: its app transaction at the copy's generation).
        ``ranges``: the added files' columns' statistics, by path (``metastore/delta/stats.py``).
        ``checked``: refused (ConflictError) if a commit since ``dt``'s snapshot removed one of
        ``removes`` in any way (:meth:`_transact_checked`); a delete's rewrite."""
        from deltalake.transaction import RemoveAction

        now_ms = int(clock.now().timestamp() * 1000)
        actions: list[Any] = [
            RemoveAction(
                f.path,
                data_change,
                now_ms,
                f.size,
                {table.partition_column: partition_value_text(f.partition)},
            )
            for f in removes
        ]
        actions += [self._add_action(table, p, part, rows, data_change, ranges) for p, part, rows in adds]
        counted = {**metadata, ACTIONS_KEY: str(len(actions))}
        what = "delete commit" if data_change else "sweep commit"
        if checked:
            return self._transact_checked(
                dt, table, actions, counted, what, app_id, {f.path for f in removes}
            )
        return self._transact(dt, table, actions, counted, what, app_id, txns)

    def _transact_checked(
        self,
        dt: Any,
        table: Table,
        actions: list[Any],
        metadata: dict[str, str],
        what: str,
        app_id: str | None,
        removed: set[str],
    ) -> int:
        """:meth:`_transact` with the conflict check done here. delta-rs lets a commit remove a file
        that a concurrent commit removed with ``dataChange=false`` (a roll's sweep, which put the
        file's rows into another file): a delete planned before a sweep then committed, and the
        rows it deleted stayed in the sweep's file. So every commit after ``dt``'s snapshot is read
        here: one that removed a file of ``removed``, changed the metadata (a seal) or carries
        ``app_id`` refuses the commit (ConflictError: plan again); else ``dt`` is brought up to it
        and the commit goes to the very next version, with delta-rs' retries off (another commit
        got in first: check that one too)."""
        read = int(dt.version())
        for _ in range(MAX_COMMIT_RETRIES):
            newest = newest_version(table, read)
            if newest is None:
                newest = int(self.load(table).version())
            for version in range(read + 1, newest + 1):
                for action in commit_actions(table, version) or []:
                    gone = unquote(
                        (action.get("remove") or {}).get("path") or ""
                    )  # (the log's are URL-encoded)
                    txn = (action.get("txn") or {}).get("appId")
                    if gone in removed or "metaData" in action or (app_id and txn == app_id):
                        raise ConflictError(
                            f"{what} to {table.name}: version {version} changed what it was planned on"
                        )
            if newest != read:
                with log_errors(table):
                    dt.load_as_version(newest)
                read = newest
            try:
                return self._transact(dt, table, actions, metadata, what, app_id, retries=0)
            except ConflictError:
                continue  # a commit took the next version first
        raise ConflictError(f"{what} to {table.name}: other commits kept taking the next version")

    def remove_partitions(
        self,
        dt: Any,
        table: Table,
        files: Sequence[LiveFile],
        expiry_id: str,
        txns: Sequence[tuple[str, int]] | None = None,
    ) -> int:
        """Remove ``files`` (every live file of the expiring partitions) in one commit with
        ``dataChange=true``, at most once (its app transactions: the expiry's own, or ``txns`` on a
        secondary): the single version at which those partitions leave the table whole. The files
        stay on disk for older versions."""
        from deltalake.transaction import RemoveAction

        now_ms = int(clock.now().timestamp() * 1000)
        actions: list[Any] = [
            RemoveAction(
                f.path, True, now_ms, f.size, {table.partition_column: partition_value_text(f.partition)}
            )
            for f in files
        ]
        metadata = {EXPIRE_KEY: expiry_id, ACTIONS_KEY: str(len(actions))}
        if txns is None:
            return self._transact(dt, table, actions, metadata, "expiry commit", expiry_app_id(expiry_id))
        return self._transact(dt, table, actions, metadata, "expiry commit", txns=txns)

    def _transact(
        self,
        dt: Any,
        table: Table,
        actions: list[Any],
        metadata: dict[str, str],
        what: str,
        app_id: str | None = None,
        txns: Sequence[tuple[str, int]] = (),
        retries: int = MAX_COMMIT_RETRIES,
    ) -> int:
        """Commit ``actions`` on top of ``dt``'s snapshot (errors as ``errors.commit_errors`` says),
        with the app transaction ``app_id`` at version 1 and ``txns`` (id, version) if given;
        ``retries``: delta-rs' (0: only at the version after the snapshot)."""
        from deltalake.transaction import CommitProperties, Transaction

        read_version = int(dt.version())
        # Delta commits are optimistic: concurrent committers race for the next version and
        # the losers re-check and retry. Threads of one process (the HTTP server's request
        # threads) need not race each other; taking turns here leaves delta-rs' retries to
        # commits from other processes. The snapshot is not refreshed inside the lock: it
        # must stay the one taken before the partition states were read (the fencing).
        with self._commit_lock(table), commit_errors(table, what):
            dt.create_write_transaction(
                actions,
                "append",
                dt.schema(),
                [table.partition_column],
                commit_properties=CommitProperties(
                    custom_metadata=metadata,
                    max_commit_retries=retries,
                    app_transactions=[
                        Transaction(a, v) for a, v in [*([(app_id, 1)] if app_id else []), *txns]
                    ]
                    or None,
                ),
            )
        return self._committed_version(table, metadata, read_version)

    def _commit_lock(self, table: Table) -> threading.Lock:
        with self._locks_guard:
            return self._commit_locks.setdefault(table.location, threading.Lock())

    def _committed_version(self, table: Table, metadata: dict[str, str], read_version: int) -> int:
        # delta-rs does not report the version it committed; every commit of ours carries a
        # unique key in its commit info, so look it up among the commits after our snapshot.
        # It landed after read_version, so scan forward through the commit files from there:
        # cheaper than reloading the table to learn its newest version.
        key, value = next(iter(metadata.items()))
        version, info = read_version + 1, commit_info(table, read_version + 1)
        while info is not None and info.get(key) != value:
            version += 1
            info = commit_info(table, version)
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
            info = commit_info(table, version)
            if info is not None and match(info):
                return version
        return None

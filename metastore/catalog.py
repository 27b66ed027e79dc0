"""The catalog: the SQL metastore and the Delta warehouse seen as one.

Every component (chunk writers, rollers, queries, the CLI) works through a :class:`Catalog`,
so table creation, lookup and description have one home.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from metastore.durations import format_duration
from metastore.errors import AlreadyExistsError, TableIntegrityError, UserInputError
from metastore.models import (
    Column,
    LateDataPolicy,
    Mode,
    PartitionState,
    Table,
    TableKind,
    TableName,
    TableSpec,
    iso,
)
from metastore.store import Metastore, default_url
from metastore.warehouse import STAGING_DIR, Warehouse, partition_dir, storage_errors

DEAD_LETTER_COLUMNS = (
    Column(name="chunk", type="string"),
    Column(name="source", type="string"),
    Column(name="position", type="long"),
    Column(name="reason", type="string"),
    Column(name="raw", type="binary"),
    Column(name="received_at", type="timestamp", nullable=False),
)


@dataclass
class Catalog:
    store: Metastore
    warehouse: Warehouse

    @classmethod
    def open(cls, warehouse: str | Path, metastore_url: str | None = None) -> Catalog:
        wh = Warehouse(warehouse)
        with storage_errors(f"opening the warehouse {wh.root} (set --warehouse or STREAMPART_WAREHOUSE)"):
            if wh.root.exists() and not wh.root.is_dir():
                raise NotADirectoryError(20, "it is a file, not a directory", str(wh.root))
            wh.root.mkdir(parents=True, exist_ok=True)
            if not os.access(wh.root, os.W_OK | os.X_OK):
                raise PermissionError(13, "not writable", str(wh.root))
        return cls(Metastore(metastore_url or default_url(wh.root)), wh)

    def close(self) -> None:
        self.store.close()

    # -- tables ----------------------------------------------------------------------------
    def create_table(self, spec: TableSpec) -> Table:
        """Create a streaming table (and its dead-letter / late-data companions)."""
        names = {c.name for c in spec.columns}
        if spec.time_column not in names:
            raise UserInputError(f"time column {spec.time_column!r} is not in the schema")
        time_col = next(c for c in spec.columns if c.name == spec.time_column)
        if time_col.type != "timestamp":
            raise UserInputError(
                f"time column {spec.time_column!r} must be TIMESTAMP, not {time_col.sql_type}"
            )
        if spec.partition_column in names:
            raise UserInputError(
                f"partition column {spec.partition_column!r} clashes with a column of the schema; "
                "choose another with --partition-column"
            )
        if spec.roll_every < timedelta(seconds=1):
            raise UserInputError("roll interval must be at least 1s")
        for what, value in (
            ("roll interval", spec.roll_every),
            ("lateness", spec.lateness),
            ("max-future", spec.max_future),
            ("max-age", spec.max_age),
        ):
            if value is not None and value % timedelta(seconds=1):  # the metastore keeps whole seconds
                raise UserInputError(f"{what} {format_duration(value)} is not a whole number of seconds")
        if spec.mode is Mode.ARRIVAL and spec.lateness:
            raise UserInputError("--lateness applies to event-time tables only")
        if spec.mode is Mode.ARRIVAL and spec.max_age is not None:
            raise UserInputError("--max-age applies to event-time tables only")
        if self._find_created(spec.name) is not None:
            raise AlreadyExistsError(f"table {spec.name} exists already")
        companions: list[TableSpec] = []
        if spec.dead_letter:
            companions.append(
                TableSpec(
                    name=spec.companion(TableKind.DEAD_LETTER),
                    columns=DEAD_LETTER_COLUMNS,
                    time_column="received_at",
                    partition_column="received_period",
                    roll_every=max(spec.roll_every, timedelta(hours=1)),
                    kind=TableKind.DEAD_LETTER,
                    cluster=spec.cluster,
                )
            )
        if spec.mode is Mode.EVENT_TIME and spec.late_data is LateDataPolicy.DIVERT:
            companions.append(
                spec.model_copy(
                    update={
                        "name": spec.companion(TableKind.LATE),
                        "mode": Mode.ARRIVAL,
                        "lateness": timedelta(0),
                        "late_data": LateDataPolicy.REJECT,
                        "dead_letter": False,
                        "kind": TableKind.LATE,
                    }
                )
            )
        for companion in companions:
            if self._find_created(companion.name) is None:
                self._create_one(companion)
        return self._create_one(spec)

    def _find_created(self, name: TableName) -> Table | None:
        """The table ``name`` if its creation finished; the record of one that did not is dropped.

        A table is recorded in the metastore first and its Delta table created second; a process
        that died in between left a record without a log and without commits, so creating the
        table again starts afresh. A table whose log is gone *after* commits is damaged, not
        half-created: that is an error (its records are never dropped here).
        """
        table = self.store.find_table(name)
        if table is None or (Path(table.location) / "_delta_log").is_dir():
            return table
        if self.store.newest_version(table.id) >= 0:  # it had commits: its log was lost, not unborn
            raise TableIntegrityError(
                f"table {name}: no Delta log at {table.location}/_delta_log although commits were "
                "recorded; restore the table's directory from a backup, or drop the table"
            )
        self.store.drop_table(table.id)
        return None

    def _create_one(self, spec: TableSpec) -> Table:
        table = self.store.create_table(spec, self.warehouse.location(spec.name))
        try:
            self.warehouse.create(table)
        except Exception:
            self.store.drop_table(table.id)
            raise
        return table

    def table(self, name: TableName | str) -> Table:
        """The table ``name`` as recorded in the metastore (NotFoundError if there is none)."""
        return self.store.get_table(name)

    def load(self, table: Table, version: int | None = None) -> Any:
        """The table's Delta snapshot to read: ``version``, or the newest — checked against the metastore.

        The metastore is read *before* the log, so every commit it recorded by then must be in
        the log; a log that lacks one was damaged (see :meth:`Warehouse.verify_newest`).

        Raises:
            TableIntegrityError: the log is unreadable, or lost commits the metastore recorded.
        """
        if version is not None:
            return self.warehouse.load(table, version)
        recorded = self.store.newest_version(table.id)
        dt = self.warehouse.load(table)
        self.warehouse.verify_newest(table, dt, recorded)
        return dt

    def drop_table(self, table: Table) -> None:
        """Drop one table: its metastore records, then its directory (Delta log and data)."""
        self.store.drop_table(table.id)
        shutil.rmtree(table.location, ignore_errors=True)

    def companion(self, table: Table, kind: TableKind) -> Table:
        return self.table(table.companion(kind))

    def list_tables(self) -> list[Table]:
        return self.store.list_tables()

    # -- description -----------------------------------------------------------------------
    def describe(self, table: Table) -> dict[str, Any]:
        """The table and its partitions, in the shape of ``streampart table describe --json``."""
        dt = self.load(table)
        live = self.warehouse.partition_stats(dt)
        partitions = []
        for p in self.store.list_partitions(table.id):
            if p.state is PartitionState.STANDARD:
                chunks, rows, size, files = p.chunks or 0, p.rows or 0, p.bytes or 0, p.files or 0
                location = str(Path(table.location) / partition_dir(table, p.value))
            else:
                st = live.get(p.value)
                chunks = st.chunks if st else 0
                rows, size, files = (st.rows, st.bytes, st.files) if st else (0, 0, 0)
                location = str(Path(table.location) / STAGING_DIR)
            partitions.append(
                {
                    "value": iso(p.value),
                    "state": p.state.value,
                    "chunks": chunks,
                    "rows": rows,
                    "bytes": size,
                    "files": files,
                    "location": location,
                }
            )
        return {
            "table": str(table.name),
            "kind": table.kind.value,
            "mode": table.mode.value,
            "roll_every": format_duration(table.roll_every),
            "lateness": format_duration(table.lateness),
            "late_data": table.late_data.value,
            "max_future": format_duration(table.max_future),
            "max_age": format_duration(table.max_age) if table.max_age is not None else None,
            "dead_letter": table.dead_letter,
            "time_column": table.time_column,
            "partition_column": table.partition_column,
            "schema": ", ".join(f"{c.name} {c.sql_type}" for c in table.columns),
            "location": table.location,
            "cluster": table.cluster,
            "version": int(dt.version()),
            "partitions": partitions,
        }

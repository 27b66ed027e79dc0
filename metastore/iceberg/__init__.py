"""streampart's tables as Iceberg tables: metadata that lists the Delta snapshot's own Parquet files.

:func:`iceberg_table` turns one pinned snapshot (:mod:`metastore.snapshots`; a link's view of one, or
the files of a keyed table a reader may see) into Iceberg metadata, written beside the table
(:mod:`metastore.iceberg.metadata`). The schema's field ids and the identity partition are in
:mod:`metastore.iceberg.schema`, the data files' statistics in :mod:`metastore.iceberg.files`.
pyiceberg writes the Avro manifests and validates the metadata: the Iceberg spec's own Python
implementation, so the files are what every Iceberg reader expects, not a hand-made lookalike.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pyiceberg.table.snapshots import Operation

from metastore import clock
from metastore.delta.history import oldest_readable_version
from metastore.delta.log import commit_actions
from metastore.iceberg.metadata import (
    GROUP_PARTITIONS,
    ICEBERG_DIR,
    Loaded,
    Version,
    View,
    clean,
    listed_files,
    materialize,
    newest_loaded,
    view_directories,
)
from metastore.iceberg.schema import from_delta
from metastore.snapshots import Snapshot

__all__ = [
    "ICEBERG_DIR",
    "Loaded",
    "View",
    "clean",
    "iceberg_table",
    "listed_files",
    "newest_loaded",
    "view_directories",
]


def iceberg_table(view: View, snap: Snapshot, properties: dict[str, str] | None = None) -> Loaded:
    """The Iceberg metadata of ``view`` at ``snap`` (its files: what the view shows of that version)."""
    table = snap.table
    # the partition column optional: its values are not in the files, and readers fill in an identity
    # partition's value only for a field that may be missing from a file
    fields = [{**f, "nullable": True} if f["name"] == table.partition_column else f for f in snap.fields()]
    schema = from_delta(fields, table.partition_column, f"table {table.name}")
    actions = commit_actions(table, snap.version) if snap.version > 0 else None
    return materialize(
        view,
        Version(
            snap.version,
            snap.files,
            schema,
            _committed_at(actions),
            _operation(actions),
            dict(properties or {}),
            oldest_readable_version(table),
            table.roll_every * GROUP_PARTITIONS,
        ),
    )


def _committed_at(actions: list[dict[str, Any]] | None) -> datetime:
    """When a version's commit (its ``actions``; None: gone, or the creation) was made."""
    info: dict[str, Any] = next((a["commitInfo"] for a in actions or () if "commitInfo" in a), {})
    if isinstance(info.get("timestamp"), int):
        return datetime.fromtimestamp(info["timestamp"] / 1000, UTC)
    return clock.now()


def _operation(actions: list[dict[str, Any]] | None) -> Operation:
    """What a version (its commit's ``actions``) did to the rows of the one before it: appended,
    replaced files without changing rows (a roll's sweep, a schema change), or anything else."""
    if actions is None:
        return Operation.OVERWRITE
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    changed = [a for a in (*adds, *removes) if a.get("dataChange", True)]
    if not changed:
        return Operation.REPLACE
    if not removes:
        return Operation.APPEND
    return Operation.OVERWRITE

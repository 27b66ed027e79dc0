"""A table's Delta history as streampart reads it: each version's time, operation and what it did.

Read from the commit files themselves (``_delta_log/<version>.json`` *is* that version by the
Delta protocol; see :meth:`Warehouse.find_commit` on why not delta-rs' ``history()``), so no
Spark and no snapshot replay. A chunk commit names its chunks (``streampart.chunks``), a roll's
seal and sweep name the roll (``streampart.roll``, ``streampart.sweep``).

Time travel reaches back as far as the log does: commit files past the table's
``delta.logRetentionDuration`` are deleted once a checkpoint covers them
(:mod:`metastore.delta.checkpoints`), and a version older than the oldest checkpoint left cannot be
loaded. :func:`check_readable` says so in one error, instead of delta-rs' missing-file one.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from metastore import storage
from metastore.delta.log import (
    DELETE_KEY,
    DELETED_KEY,
    EXPIRE_KEY,
    ROLL_KEY,
    SCHEMA_KEY,
    SWEEP_KEY,
    commit_chunks,
    commit_info,
)
from metastore.errors import UserInputError
from metastore.models import Table, iso

__all__ = ["VersionInfo", "check_readable", "commit_time", "history", "oldest_readable_version"]


@dataclass(frozen=True)
class VersionInfo:
    """One version of a table's Delta log."""

    version: int
    timestamp: datetime | None  # the commit's own time (None: its commit file is gone)
    operation: str | None  # Delta's name for it: WRITE, SET TBLPROPERTIES, …
    chunks: tuple[str, ...] = ()  # the chunks a chunk commit added
    roll: str | None = None  # the roll whose seal or sweep this is
    kind: str = "other"  # chunks | seal | sweep | schema | create | other | unavailable
    schema_change: bool = False  # it changed the table's schema (a metaData of streampart's)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "timestamp": iso(self.timestamp) if self.timestamp else None,
            "operation": self.operation,
            "kind": self.kind,
            "chunks": list(self.chunks),
            "roll": self.roll,
            "schema_change": self.schema_change,
        }


def version_info(table: Table, version: int) -> VersionInfo:
    """What the commit file of ``version`` says (kind ``unavailable``: the file is gone)."""
    info = commit_info(table, version)
    if info is None:
        return VersionInfo(version, None, None, kind="unavailable")
    chunks = tuple(commit_chunks(info))
    sweep = info.get(SWEEP_KEY)
    roll = str(info[ROLL_KEY]) if info.get(ROLL_KEY) else (str(sweep).split("/")[0] if sweep else None)
    if chunks:
        kind = "chunks"
    elif info.get(ROLL_KEY) or info.get(DELETE_KEY):
        kind = "seal"
    elif info.get(DELETED_KEY):
        kind = "delete"
    elif info.get(EXPIRE_KEY):
        kind = "expiry"
    elif sweep:
        kind = "sweep"
    elif SCHEMA_KEY in info:
        kind = "schema"
    elif version == 0:
        kind = "create"
    else:
        kind = "other"
    at = _instant(info.get("timestamp"))
    return VersionInfo(version, at, info.get("operation"), chunks, roll, kind, SCHEMA_KEY in info)


def history(table: Table, newest: int, limit: int | None = None) -> list[VersionInfo]:
    """Versions ``newest`` down to the oldest the log still holds, at most ``limit`` of them."""
    oldest = oldest_readable_version(table)
    stop = oldest if limit is None else max(oldest, newest - limit + 1)
    return [version_info(table, v) for v in range(newest, stop - 1, -1)]


def commit_time(table: Table, version: int) -> datetime | None:
    """When ``version`` was committed (None: its commit file is gone, past the log retention)."""
    info = commit_info(table, version)
    return _instant(info.get("timestamp")) if info else None


def oldest_readable_version(table: Table) -> int:
    """The oldest version of ``table`` a reader can still load.

    Version 0 while its commit file is there; otherwise the oldest checkpoint left (every
    commit file after it is kept: only those a checkpoint covers are deleted).
    """
    log = storage.join(table.location, "_delta_log")
    if storage.exists(storage.join(log, f"{0:020d}.json")):
        return 0
    names = [e.name for e in storage.list_dir(log) if not e.is_dir]
    checkpoints = [
        int(n[:20]) for n in names if fnmatch.fnmatchcase(n, "*.checkpoint*.parquet") and n[:20].isdigit()
    ]
    if checkpoints:
        return min(checkpoints)
    commits = [int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()]
    return min(commits, default=0)


def check_readable(table: Table, version: int, newest: int, retention: str | None = None) -> None:
    """Raise one UserInputError if ``version`` of ``table`` is not in its log (in the future, or past
    the log retention); ``retention``: the table's, in words, to name in the message."""
    if version < 0:
        raise UserInputError(f"version must be 0 or more; got {version}")
    if version > newest:
        raise UserInputError(f"{table.name} has no version {version}: its newest is {newest}")
    oldest = oldest_readable_version(table)
    if version < oldest:
        kept = f" (commit files are kept {retention})" if retention else ""
        raise UserInputError(
            f"{table.name} version {version} is older than its Delta log's retention{kept}: the "
            f"oldest version that can be read is {oldest}, the newest {newest}"
        )


def _instant(millis: Any) -> datetime | None:
    if millis is None:
        return None
    return datetime.fromtimestamp(float(millis) / 1000, UTC)

"""What ``streampart table describe --json`` (and ``GET /v1/tables/…``, ``link describe``) shows of a
table or a link: its settings, its partitions with the clusters that hold each, its replicas."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from metastore import clock, storage
from metastore.delta.checkpoints import LogSettings
from metastore.delta.files import LiveFile, files_stats
from metastore.delta.layout import naming_text, partition_dir, partition_label, placement_text, staged_dir
from metastore.durations import format_duration
from metastore.links import Link, LinkMode, Resolved
from metastore.models import Partition, PartitionState, SchemaChange, Table, iso
from metastore.replicas import CopyState, PartitionCopy, Replica, not_present
from metastore.retention import next_expiry


def describe(
    resolved: Resolved,
    version: int,
    files: Sequence[LiveFile],
    partitions_recorded: Sequence[Partition],
    replicas: Sequence[Replica] = (),
    copies: Sequence[PartitionCopy] = (),
    log: LogSettings | None = None,
    schema_changes: Sequence[SchemaChange] = (),
    retention: tuple[timedelta | None, str] = (None, "none"),
) -> dict[str, Any]:
    """A table (or a link) and its partitions, in the shape of ``streampart table describe --json``,
    from what :meth:`Catalog.describe` read: one Delta ``version`` and its live ``files``, the
    metastore's partitions, the table's replicas and their copies, (a table's) Delta log schedule, and
    its recent schema changes, newest first.

    A link shows the partitions it exposes now, read from one version of its source; its
    ``link`` entry says what it points at and which partitions it admits.
    """
    table, link = resolved.table, resolved.link
    if link is not None:
        files = link.filter(list(files), table, clock.now())
    expired = [p for p in partitions_recorded if p.state is PartitionState.EXPIRED]
    kept = [p for p in partitions_recorded if p.state is not PartitionState.EXPIRED]
    partitions, shown = _partitions(resolved, files_stats(files), kept, copies)
    info: dict[str, Any] = {
        "table": str(resolved.name),
        "kind": "link" if link is not None else table.kind.value,
        "mode": table.mode.value,
        "roll_every": format_duration(table.roll_every),
        "lateness": format_duration(table.lateness),
        "late_data": table.late_data.value,
        "max_future": format_duration(table.max_future),
        "max_age": format_duration(table.max_age) if table.max_age is not None else None,
        "dead_letter": table.dead_letter,
        "time_column": table.time_column,
        "partition_column": table.partition_column,
        "partitioned_by": placement_text(table),
        "partition_names": naming_text(table),
        "schema": ", ".join(f"{c.name} {c.sql_type}" for c in table.columns),
        "schema_evolution": table.schema_evolution.value,
        "max_new_columns": table.max_new_columns,
        "keys": None if table.keys is None else table.keys.model_dump(mode="json"),
        "cluster_by": list(table.cluster_by),
        "schema_changes": [
            {"version": c.version, "change": c.change, "source": c.source, "at": iso(c.at)}
            for c in schema_changes
        ],
        "location": table.location,
        "cluster": table.cluster,
        "replicas": [replica_info(r, copies, shown) for r in replicas],
        "version": version,
        "partitions": partitions,
        "retention": retention_info(table, retention, kept, expired),
    }
    if log is not None:
        info["delta_log"] = log.to_json()
    if link is not None:
        info["link"] = link_info(link, dangling=False)  # its source was just read
    return info


def _partitions(
    resolved: Resolved,
    live: dict[datetime, Any],
    partitions_recorded: Sequence[Partition],
    copies: Sequence[PartitionCopy],
) -> tuple[list[dict[str, Any]], list[Partition]]:
    """:func:`describe`'s partition entries (those a link exposes now, for a link), and the
    partitions shown: counts from the metastore for a table's standard partitions, from the live
    files (``live``, by partition value) otherwise."""
    table, link = resolved.table, resolved.link
    partitions: list[dict[str, Any]] = []
    shown: list[Partition] = []
    present: dict[datetime, list[str]] = {}
    for copy in copies:
        if copy.state is CopyState.PRESENT:
            present.setdefault(copy.partition_value, []).append(copy.cluster)
    for p in partitions_recorded:
        if link is not None and p.value not in live:
            continue  # not exposed through the link (now)
        shown.append(p)
        st = live.get(p.value)
        if p.state is PartitionState.STANDARD and link is None:
            chunks, rows, size, files_n = p.chunks or 0, p.rows or 0, p.bytes or 0, p.files or 0
            swept = True
        else:
            chunks = st.chunks if st else 0
            rows, size, files_n = (st.rows, st.bytes, st.files) if st else (0, 0, 0)
            swept = st is not None and st.files > 0 and not st.staged_files  # a link's view of it
        location = storage.join(
            table.location, partition_dir(table, p.value) if swept else staged_dir(table, p.value)
        )
        partitions.append(
            {
                "value": iso(p.value),
                "name": partition_label(p.value),
                "state": p.state.value,
                "chunks": chunks,
                "rows": rows,
                "bytes": size,
                "files": files_n,
                "location": str(location),
                "clusters": [table.cluster, *present.get(p.value, [])],
            }
        )
    return partitions, shown


def retention_info(
    table: Table,
    retention: tuple[timedelta | None, str],
    kept: Sequence[Partition],
    expired: Sequence[Partition],
) -> dict[str, Any]:
    """How long the table keeps its standard partitions (and where that is set), when the next
    expires, and which expired already (they are not listed among its partitions)."""
    retain, source = retention
    upcoming = next_expiry(table, kept, retain)
    last = max((p.expired_at for p in expired if p.expired_at is not None), default=None)
    return {
        "retain": format_duration(retain) if retain is not None else None,
        "source": source,
        "next_expiry": iso(upcoming) if upcoming is not None else None,
        "expired": {
            "partitions": len(expired),
            "oldest": iso(expired[0].value) if expired else None,
            "newest": iso(expired[-1].value) if expired else None,
            "last_at": iso(last) if last is not None else None,
        },
    }


def replica_info(
    replica: Replica, copies: Sequence[PartitionCopy], partitions: Sequence[Partition]
) -> dict[str, Any]:
    """A replica as ``table describe --json`` shows it: where, and which standard partitions are
    present there, missing, or failing (with the last error)."""
    mine = [c for c in copies if c.cluster == replica.cluster]
    missing = not_present(partitions, mine)
    by_value = {c.partition_value: c for c in mine}
    failing = [
        {"partition": iso(p.value), "attempts": c.attempts, "error": c.error}
        for p in missing
        if (c := by_value.get(p.value)) is not None and c.state is CopyState.COPYING and c.error
    ]
    standard = [p for p in partitions if p.state is PartitionState.STANDARD]
    return {
        "cluster": replica.cluster,
        "location": replica.location,
        "added_at": iso(replica.added_at),
        "present": len(standard) - len(missing),
        "missing": [iso(p.value) for p in missing],
        "failing": failing,
    }


def link_info(link: Link, *, dangling: bool) -> dict[str, Any]:
    """A link's own settings, as ``link describe --json`` and ``table describe --json`` show them.

    ``dangling``: its source was dropped, as ``catalog.links.is_dangling`` tells (the link's row
    alone cannot: a source in another metastore has no row id here, dropped or not).
    """
    return {
        "name": str(link.name),
        "source": str(link.source),
        "dangling": dangling,
        "mode": link.mode.value,
        "include_streaming": link.include_streaming,
        "retention": format_duration(link.retention) if link.retention is not None else None,
        "range": str(link.range) if link.range is not None else None,
        "partitions": [iso(v) for v in link.partitions] if link.mode is LinkMode.STATIC else None,
        "admits": link.describe_rule(),
        "created_at": iso(link.created_at),
    }

"""Snapshots: a table pinned at one Delta version, and what a link shows of it.

The rules every read follows, whether Spark runs it (:mod:`streampart.query`), a plain reader
(``streampart table read``) or another engine through a catalog (:mod:`ingest.catalogs`): the
metastore's newest recorded version first, then the log at the newest version or the one asked for
(:meth:`Catalog.load`), then that version's file list, each file checked on disk at the size the log
recorded. The log holds committed chunks only, so a snapshot shows exactly the committed rows; a
link reads its source's snapshot, keeping the partitions it admits. A snapshot's columns are its
version's, from the log (not the metastore's).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import add_actions, check_files, files_of_adds
from metastore.delta.metadata import columns_of
from metastore.links import Resolved
from metastore.models import Column, Table

__all__ = ["Snapshot", "pin", "view_of"]


@dataclass(frozen=True)
class Snapshot:
    """One table pinned at one Delta version: its files and its data columns at that version."""

    table: Table
    version: int
    files: tuple[Any, ...]
    columns: tuple[Column, ...]  # the partition column left out, as in ``Table.columns``
    # every column's place in the log's schema, the partition column's too (first to last)
    order: tuple[str, ...] = ()
    # the files' add actions (metastore.delta.files.add_actions), for their statistics: a Spark read
    # prunes the files by them (metastore.delta.stats.scan_bounds); None: never pruned
    adds: Any = dataclasses.field(default=None, compare=False, repr=False)

    def fields(self) -> list[dict[str, Any]]:
        """Its columns as the log's schema lists them, in order: ``{"name", "type", "nullable"}`` each,
        the partition column (a timestamp, never null) at its place."""
        pcol = self.table.partition_column
        types = {c.name: c for c in self.columns}
        out = []
        for name in self.order or (*types, pcol):
            if name == pcol:
                out.append({"name": name, "type": "timestamp", "nullable": False})
            elif name in types:
                out.append({"name": name, "type": types[name].type, "nullable": types[name].nullable})
        return out


def pin(catalog: Catalog, table: Table, version: int | None = None, *, check: bool = True) -> Snapshot:
    """``table`` at ``version`` (default: the newest), its log and (unless not ``check``) its files
    checked first (a statement read on another cluster checks the copies it reads instead)."""
    dt = catalog.load(table, version)
    adds = add_actions(dt)
    files = tuple(files_of_adds(adds))
    if check:
        check_files(table, files)
    order = tuple(f["name"] for f in json.loads(dt.schema().to_json())["fields"])
    return Snapshot(table, int(dt.version()), files, columns_of(dt, f"table {table.name}"), order, adds)


def view_of(resolved: Resolved, snap: Snapshot) -> Snapshot:
    """What ``resolved`` shows of ``snap`` (a snapshot of its table): all of it, or what its link admits."""
    if resolved.link is None:
        return snap
    admitted = tuple(resolved.link.filter(snap.files, snap.table, clock.now()))
    return dataclasses.replace(snap, files=admitted)

"""What ``streampart check`` asks of finished deletes: that no row a delete should have removed is
still visible.

A finished delete records its predicate, the snapshot it read (``read_version``) and its commit
(``commit_version``). A live file that was in that snapshot and that its commit kept is one the
delete read and judged free of matches: its predicate must match none of its rows. Rows committed
after the snapshot may match (the delete never promised them) and are in newer files, so they are
never named. What this cannot see: a missed row that a later roll's sweep has since moved into a
new file (the sweep's file is newer than the delete's snapshot). It reads the newest
:data:`CHECKED` finished deletes of a table, and only the files that hold a match (one scan of the
predicate's columns on a local disk).
"""

from __future__ import annotations

from typing import Any

from deltalake.exceptions import DeltaError

from ingest.deletes.deleter import where_columns
from ingest.deletes.plan import holding_matches, matching_rows
from ingest.deletes.predicate import parse_predicate
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.errors import StreampartError
from metastore.integrity import Problem
from metastore.models import Delete, DeleteState, Table

CHECKED = 20  # finished deletes read per table, the newest first: each costs two old snapshots' logs
SHOWN = 6  # columns of the row a problem names


def missed_by_deletes(catalog: Catalog, table: Table, newest: int = CHECKED) -> list[Problem]:
    """A problem for each file holding a row that a finished delete of ``table`` should have
    removed, naming one such row."""
    home = catalog.home(table)
    done = [
        d
        for d in home.store.list_deletes(table.id, limit=newest * 2)
        if d.state is DeleteState.DONE and d.read_version is not None and d.commit_version is not None
    ][:newest]
    if not done:
        return []
    try:
        now = live_files(home.warehouse.load(table))
    except (StreampartError, DeltaError, OSError):
        return []  # an unreadable log is check_table's to name
    problems = []
    for d in done:
        problems += _missed(home, table, d, now)
    return problems


def _missed(catalog: Catalog, table: Table, delete: Delete, now: list[Any]) -> list[Problem]:
    try:
        predicate = parse_predicate(delete.predicate, where_columns(table), allow_all=True)
        seen = {f.path for f in live_files(catalog.warehouse.load(table, delete.read_version))}
        kept = {f.path for f in live_files(catalog.warehouse.load(table, delete.commit_version))}
    except (StreampartError, DeltaError, OSError):
        return []  # a column since dropped, or versions no longer in the log: nothing to compare
    files = [
        f
        for f in now
        if f.path in seen
        and f.path in kept
        and f.rows
        and predicate.partition_may_match({table.partition_column: f.partition})
    ]
    hits = holding_matches(table, predicate, files)
    problems = []
    for f in files if hits is None else [f for f in files if f.path in hits]:
        rows = matching_rows(table, predicate, f)
        if not rows.num_rows:
            continue
        names = [*sorted(predicate.columns), *(c for c in rows.column_names if c not in predicate.columns)]
        row = rows.slice(0, 1).select(names[:SHOWN]).to_pylist()[0]
        problems.append(
            Problem(
                str(table.name),
                "delete_missed_rows",
                f"delete {delete.id} (--where {delete.predicate}, read version {delete.read_version}, "
                f"committed at version {delete.commit_version}) finished, but {rows.num_rows} row(s) it "
                f"matches are still visible in {f.path}, such as {_shown(row)}: run the delete again",
                version=delete.commit_version,
                path=f.path,
            )
        )
    return problems


def _shown(row: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}={v}" for k, v in row.items()) + "}"

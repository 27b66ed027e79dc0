"""Schema changes on a table's replicas: the secondary's log gets the columns before any file needs them.

A replica's Delta table is created with the source's columns of that day; the source may then
gain columns and widen others (``catalog.schemas.alter``, evolution from data), and the partitions
rolled afterwards hold files written in the new columns. The copy of a partition therefore commits
the source's schema to the secondary **in the same Delta commit** as the partition's files (the
``metaData`` action after the commitInfo, then the ``txn`` and the ``add``\\ s: ``append_actions``'
``schema_change``) whenever the secondary's columns do not yet cover the source's.

Why in the copy's commit, not in a commit of its own first: one put-if-absent commit file is
atomic, so a SIGKILL anywhere leaves the secondary either as it was (old columns, old partitions:
readable) or with the new columns and the new partition together; the replicator's existing crash
points (``replica-before-commit``, ``replica-after-commit``) and its resume path (the ``txn`` found
in the snapshot) cover it with no new step. Its ``metaData`` conflicts with a concurrent copy commit
of another partition that planned on the older version (as a roll's seal does for appends): that
copy re-reads the secondary and commits again (:func:`commit_copy`), carrying no schema if this one
brought it.

Which schema: the source's **newest** at the time the copy began, not its schema at the version
the partition was swept at. Every schema change is an added nullable column or a safe widening
(``metastore/models/evolution.py``), so the newest describes every file of every partition the
secondary holds or will receive; the secondary's columns only grow, never narrower than its files,
and never ahead of the source's log (they are the source log's own). One comparison decides, with
no need to find the sweep's version, and a secondary that is behind catches up in one commit
instead of one per intermediate schema. A partition copied later than the change but rolled before
it simply reads null in the new columns there, as it does on the primary.

A secondary whose protocol has Delta table features (not written by streampart, which creates
plain tables) cannot take a hand-written ``metaData``: there the schema goes first, in its own
commit through ``Warehouse.commit_schema`` (delta-rs ``add_columns``: it can add but not widen),
which is as safe to crash after — the secondary is readable with the wider schema, and the next
pass finds its columns cover the source's and copies the partition as usual.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from metastore.delta.metadata import columns_of, current_metadata, metadata_action
from metastore.delta.warehouse import Warehouse
from metastore.errors import ConflictError
from metastore.models import Column, Table
from metastore.models.evolution import widening_refusal
from scheduler.errors import ReplicationFailedError

# Why 5: a re-plan is needed only when another copier's commit that changed the secondary's
# metadata (its own schema catch-up) landed between our read and our commit; the second attempt
# reads that commit and carries no schema, so more than two attempts means something else is wrong.
MAX_REPLANS = 5

SCHEMA_KEY_PREFIX = "replica schema of"


def catch_up(replica: Sequence[Column], source: Sequence[Column], where: str) -> tuple[Column, ...] | None:
    """The secondary's data columns after it takes the source's: every column it has, in its order,
    widened to the source's type, then the source's columns it lacks. ``None``: it covers them already.

    Raises:
        ReplicationFailedError: a column of the secondary cannot widen to the source's type (the
            source narrowed or changed a column, which no schema change of streampart does).
    """
    by_name = {c.name: c for c in source}
    out, changed = [], False
    for c in replica:
        s = by_name.get(c.name)
        if s is None or s.type == c.type:
            out.append(c)
            continue
        refusal = widening_refusal(c.type, s.type)
        if refusal is not None:
            raise ReplicationFailedError(
                f"{where}: column {c.name!r} is {c.sql_type} on the secondary but {s.sql_type} on the "
                f"primary ({refusal}); drop the replica and add it again"
            )
        out.append(c.model_copy(update={"type": s.type}))
        changed = True
    known = {c.name for c in replica}
    added = [s for s in source if s.name not in known]
    return tuple(out + added) if changed or added else None


def commit_copy(
    warehouse: Warehouse,
    target: Table,
    source: Sequence[Column],
    files: Sequence[tuple[str, datetime, int]],
    metadata: dict[str, str],
    app_id: str,
    ranges: Mapping[str, str] | None = None,
) -> int:
    """Commit a partition's copied ``files`` to the secondary ``target``, with the source's columns
    ``source`` if its log lacks them (see the module's docstring); the version it became.
    ``ranges``: the files' statistics, by path (as the source's adds give them).

    Re-reads the secondary and tries again when a concurrent commit changed its metadata.

    Raises:
        ConflictError: the partition's ``app_id`` was committed by another copier meanwhile, or the
            secondary's metadata kept changing.
        ReplicationFailedError: the secondary's columns cannot take the source's.
    """
    where = f"replica of {target.name} on {target.cluster}"
    for _ in range(MAX_REPLANS):
        secondary = warehouse.load(target)
        if secondary.transaction_version(app_id) is not None:
            raise ConflictError(f"partition transaction {app_id} is in {target.location}'s log already")
        base = int(secondary.version())
        have = columns_of(secondary, where)
        columns = catch_up(have, source, where)
        change = None
        if columns is not None:
            current = current_metadata(target.location, base)
            change = metadata_action(current, columns, target.partition_column)
            if not warehouse.takes_plain_appends(target):
                _commit_schema_alone(warehouse, target, base, change, have, columns)
                continue  # read again: the files go in the next commit, with no schema
        try:
            return warehouse.commit_files(
                target, base, files, metadata, app_id, schema_change=change, ranges=ranges
            )
        except ConflictError:
            continue
    raise ConflictError(
        f"the Delta log at {target.location} changed its metadata {MAX_REPLANS} times while a copy "
        "committed; it is tried again by the next pass"
    )


def _commit_schema_alone(
    warehouse: Warehouse,
    target: Table,
    base: int,
    action: dict[str, Any],
    have: Sequence[Column],
    columns: Sequence[Column],
) -> None:
    """The schema committed to a secondary with Delta table features on its own, through delta-rs."""
    known = {c.name for c in have}
    added = [c for c in columns if c.name not in known]
    widened = [c for c, h in zip(columns, have, strict=False) if c.type != h.type]
    key = f"{SCHEMA_KEY_PREFIX} {len(columns)} columns after v{base}"
    with contextlib.suppress(ConflictError):  # another copier's commit came first: read again
        warehouse.commit_schema(target, base, action, added, widened, key)

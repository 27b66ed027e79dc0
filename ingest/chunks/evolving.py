"""Schema evolution in the group commit: the columns a group's files bring, committed with the rows.

A chunk parsed for a table whose schema evolves may hold fields the table lacks
(``ingest/evolution.py``); its staged files record their columns (``StagedFile.columns``). When
the group commit plans a Delta commit (``group_commit.py``), :func:`plan_schema` merges the
columns of every member's files into the log's schema at the version the commit is planned on:

- A group whose files bring nothing new costs nothing here: no log read, no statement.
- Columns the log has already (another writer added them) need no change.
- New columns become a ``metaData`` action committed **in the same Delta version as the files**
  (``Warehouse.commit_files(schema_change=…)``): no row lands without its column, no column
  without a row. It is recorded pending in the metastore first (its key in the commitInfo under
  ``streampart.schema``) and finished in the transaction that records the chunks
  (``finish_commits(schema_change=…)``): the metastore's columns are never ahead of the log's.
- A metaData commit conflicts with every append planned on an older version, as a roll's seal
  does: a group that loses to one plans again on the newer schema.
- A member whose files hold a column in a type the log's column cannot describe (parsed before
  another writer added it as another type) fails alone with :class:`SchemaConflictError`, its
  chunk released; written again (the same key), it is parsed as the table is now.
- A member that would take the table past its ``max_new_columns`` fails alone, naming the cap.

The log's schema is kept between groups in the group's context: after the first time only the
commit files since are read (``metadata_after``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ingest.errors import MalformedChunkError
from metastore.delta.metadata import action_columns, metadata_action, metadata_after
from metastore.errors import SchemaConflictError, UserInputError
from metastore.models import Column, SchemaEvolution, merge_proposals
from metastore.store.schema_changes import DATA_SOURCE


@dataclass(frozen=True)
class GroupSchema:
    """The schema change a group's commit carries: its key, ``metaData`` action and columns."""

    key: str
    action: dict[str, Any]
    columns: tuple[Column, ...]


def proposal(files: Sequence[Any]) -> tuple[Column, ...]:
    """The columns of ``files`` (a member's staged files to commit) that hold columns of their own,
    each file's in turn (so a column two files hold in types that do not agree is caught by the
    merge); () for none."""
    return tuple(c for f in files for c in f.columns or ())


def log_schema(
    table: Any, read_version: int, context: dict[str, Any]
) -> tuple[tuple[Column, ...], dict[str, Any]]:
    """The log's data columns and ``metaData`` action at ``read_version`` (kept in ``context``)."""
    known = context.get("schema")
    action = metadata_after(table.location, read_version, known)
    context["schema"] = (read_version, action)
    return action_columns(action, str(table.name)), action


def plan_schema(
    lead: Any,
    proposals: dict[Any, tuple[Column, ...]],
    read_version: int,
    context: dict[str, Any],
    fail: Callable[[Any, Exception], None],
) -> tuple[GroupSchema | None, tuple[Column, ...]]:
    """The schema change the group's commit after ``read_version`` must carry for the members'
    ``proposals`` (None: the log has every column they bring), and the columns after it.

    Members that cannot commit are ``fail``\\ ed (see the module's docstring); the change is
    recorded pending in the metastore under a new key.
    """
    table, store = lead.table, lead.store
    if not lead.warehouse.takes_plain_appends(table):
        error = UserInputError(
            f"{table.name} has Delta table features: its schema does not evolve from data; add its "
            "columns with 'streampart table alter --add-column'; nothing was committed"
        )
        for m in proposals:
            fail(m, error)
        return None, ()
    widen = table.schema_evolution is SchemaEvolution.ADD_AND_WIDEN
    columns, current = log_schema(table, read_version, context)
    members = list(proposals)
    merged, reasons = merge_proposals(columns, [proposals[m] for m in members], table.partition_column, widen)
    refused = [(m, why) for m, why in zip(members, reasons, strict=True) if why is not None]
    if refused:
        for m, why in refused:
            fail(
                m,
                SchemaConflictError(
                    f"chunk {m.item.chunk.id} of {table.name}: {why}: the table's schema changed after "
                    "the chunk was parsed; write it again (the same idempotency key) to parse it as the "
                    "table is now; nothing was committed"
                ),
            )
        kept = [m for m, why in zip(members, reasons, strict=True) if why is None]
        merged, _ = merge_proposals(columns, [proposals[m] for m in kept], table.partition_column, widen)
        members = kept
    if merged == columns or not members:
        return None, columns
    added = len(merged) - len(columns)  # widened columns keep their place: only additions count
    fresh = store.get_table_by_id(table.id)
    before = store.columns_added_by_data(table.id)
    if before + added > fresh.max_new_columns:
        error = MalformedChunkError(
            f"the chunk(s) would add {added} column(s) ({', '.join(c.name for c in merged[len(columns) :])}) "
            f"to {table.name}, which has {before} added by its data already, over its cap of "
            f"{fresh.max_new_columns} (max_new_columns); nothing was committed: raise the cap with "
            "'streampart table alter --max-new-columns' if the columns are wanted"
        )
        for m in members:
            fail(m, error)
        return None, columns
    key = uuid.uuid4().hex
    more = f" and {len(members) - 1} more" if len(members) > 1 else ""
    source = f"{DATA_SOURCE}{members[0].item.chunk.id}{more}"
    store.record_schema_change(table.id, key, columns, merged, source)
    return GroupSchema(key, metadata_action(current, merged, table.partition_column), merged), merged


def schema_change_of(
    lead: Any,
    planned: list[Any],
    read_version: int,
    context: dict[str, Any],
    fail: Callable[[Any, Exception], None],
) -> GroupSchema | None:
    """The schema change a group's commit must carry for the columns its ``planned`` members' files
    bring (None: none; nothing is read for a group that brings none). A member that cannot commit is
    ``fail``\\ ed; each other member bringing columns learns the log's columns after the commit."""
    proposals = {}
    for m in planned:
        columns = proposal([f for f in m.item.chunk.files if f.path not in m.item.diverted])
        if columns:
            proposals[m] = columns
    if not proposals:
        return None
    try:
        change, columns = plan_schema(lead, proposals, read_version, context, fail)
    except SchemaConflictError:  # the metastore is behind the log: an earlier change to finish first
        lead.catalog.schemas.settle(lead.table)
        try:
            change, columns = plan_schema(lead, proposals, read_version, context, fail)
        except SchemaConflictError as exc:  # still behind (streampart check names it): these alone fail
            for m in proposals:
                fail(m, exc)
            return None
    for m in proposals:
        m.item.columns = columns
    return change

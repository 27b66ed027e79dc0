"""A table's schema in its Delta log: the columns at a version, and the ``metaData`` action that changes them.

A schema change is a commit of a new ``metaData`` action and nothing else changes with it: the
action is the current one (table id, format, partition columns, configuration — the roll's
``streampart.seal`` property and the checkpoint settings included —, creation time, name and
description) with a new ``schemaString``. Its fields are the current fields, in their order and
with their metadata, the partition column among them, widened where asked, and then the new
columns at the end: what delta-rs' ``DeltaTable.alter.add_columns`` writes, byte for byte. Every
data file written before stays valid, because only the changes of
``metastore/models/evolution.py`` are made this way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from metastore import storage
from metastore.delta.arrow import arrow_type
from metastore.delta.log import commit_file, delta_table
from metastore.errors import TableIntegrityError, UserInputError
from metastore.models import Column

# Delta's only data file format; delta-rs' Metadata does not expose it because it writes no other.
_FORMAT = {"provider": "parquet", "options": {}}


def _load(table_root: str | Path, version: int | None) -> Any:
    return delta_table(str(table_root), version)


def schema_at(table_root: str | Path, version: int | None = None) -> tuple[Column, ...]:
    """The table's data columns (the partition column left out) at ``version`` (default: the newest).

    Raises:
        TableIntegrityError: a field whose type streampart does not know (a nested type, say).
    """
    return columns_of(_load(table_root, version), str(table_root))


def columns_of(dt: Any, where: str) -> tuple[Column, ...]:
    """The data columns (the partition column left out) of ``dt``, a DeltaTable already loaded at the
    version it reads: a reader pinned at a version reads its files with the columns of then.

    Args:
        where: What the table is, for the error (its location or name).

    Raises:
        TableIntegrityError: a field whose type streampart does not know (a nested type, say).
    """
    partition = set(dt.metadata().partition_columns)
    return _data_columns(json.loads(dt.schema().to_json())["fields"], partition, where)


def action_columns(action: dict[str, Any], where: str) -> tuple[Column, ...]:
    """The data columns (the partition column left out) of a ``metaData`` action.

    Raises:
        TableIntegrityError: a field whose type streampart does not know (a nested type, say).
    """
    fields = json.loads(action["schemaString"])["fields"]
    return _data_columns(fields, set(action.get("partitionColumns") or ()), where)


def _data_columns(fields: list[dict[str, Any]], partition: set[str], where: str) -> tuple[Column, ...]:
    columns = []
    for f in fields:
        if f["name"] in partition:
            continue
        kind = f["type"]
        try:
            if not isinstance(kind, str):
                raise KeyError(kind)
            arrow_type(kind)  # only the types streampart writes
        except (KeyError, ValueError):
            raise TableIntegrityError(
                f"{where}: column {f['name']!r} has type {json.dumps(kind)}, which streampart does not know"
            ) from None
        columns.append(Column(name=f["name"], type=kind, nullable=bool(f["nullable"])))
    return tuple(columns)


def current_metadata(table_root: str | Path, version: int | None = None) -> dict[str, Any]:
    """The ``metaData`` action in force at ``version`` (default: the newest), as the log holds it."""
    dt = _load(table_root, version)
    m = dt.metadata()
    action: dict[str, Any] = {"id": m.id}
    if m.name is not None:
        action["name"] = m.name
    if m.description is not None:
        action["description"] = m.description
    action["format"] = dict(_FORMAT)
    action["schemaString"] = dt.schema().to_json()
    action["partitionColumns"] = list(m.partition_columns)
    if m.created_time is not None:
        action["createdTime"] = m.created_time
    action["configuration"] = dict(m.configuration)
    return action


# How many commit files :func:`metadata_after` reads at most before it loads the table instead.
_MAX_SCAN = 200


def metadata_after(
    table_root: str | Path, version: int, known: tuple[int, dict[str, Any]] | None
) -> dict[str, Any]:
    """The ``metaData`` action in force at ``version``, cheaply when one in force at an earlier
    version is ``known`` (``(version, action)``): only the commit files since are read (a few small
    files, not the table's whole state), and the table is loaded only when they are gone
    (a checkpoint covers them) or too many."""
    if known is not None and 0 <= version - known[0] <= _MAX_SCAN:
        action = known[1]
        for v in range(known[0] + 1, version + 1):
            try:
                body = storage.read_bytes(commit_file(str(table_root), v))
            except FileNotFoundError:
                break
            if b'"metaData"' in body:
                for line in body.splitlines():
                    found = json.loads(line) if line.strip() else {}
                    if "metaData" in found:
                        action = found["metaData"]
        else:
            return action
    return current_metadata(table_root, version)


def metadata_action(
    current: dict[str, Any], columns: Sequence[Column], partition_column: str
) -> dict[str, Any]:
    """The ``metaData`` action that gives the table ``columns``, copied from ``current``.

    ``columns`` are the data columns after the change (from ``plan_alter``): every current data
    column, each with its type or a wider one, then the new ones.

    Raises:
        UserInputError: ``columns`` leave out a current column (a drop) or name the partition column.
    """
    schema = json.loads(current["schemaString"])
    fields: list[dict[str, Any]] = schema["fields"]
    wanted = {c.name: c for c in columns}
    if partition_column in wanted:
        raise UserInputError(f"column {partition_column!r} is the partition column")
    missing = [f["name"] for f in fields if f["name"] != partition_column and f["name"] not in wanted]
    if missing:
        raise UserInputError(f"columns cannot be dropped: {', '.join(missing)}")
    known = {f["name"] for f in fields}
    new_fields = [
        {**f, "type": wanted[f["name"]].type, "nullable": wanted[f["name"]].nullable}
        if f["name"] in wanted
        else f
        for f in fields
    ]
    new_fields += [
        {"name": c.name, "type": c.type, "nullable": c.nullable, "metadata": {}}
        for c in columns
        if c.name not in known
    ]
    new_schema = {**schema, "fields": new_fields}
    return {**current, "schemaString": json.dumps(new_schema, separators=(",", ":"))}

"""A table's recorded schema changes: what each one changed, from which columns to which, and where it stands.

The metastore records a change ``pending`` before its Delta ``metaData`` commit, and marks it
``done`` (at the version that made it) in the transaction that gives the table its new columns
(metastore/store/schemas.py). What changed is derived from the columns before and after, so the
two can never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError
from metastore.models.columns import Column
from metastore.models.evolution import SchemaChange
from metastore.models.lifecycles import SchemaChangeState


def column_changes(before: Sequence[Column], after: Sequence[Column]) -> list[dict[str, str]]:
    """What turns the columns ``before`` into ``after``, one entry per column, in ``after``'s order.

    ``{"op": "add", "column": "coupon", "type": "string"}`` for a new column, ``{"op": "widen",
    "column": "qty", "from": "integer", "type": "long"}`` for a column whose type changed (whether
    that change is allowed is :func:`~metastore.models.widening_refusal`'s question, asked before).

    Raises:
        UserInputError: ``after`` leaves out a column of ``before`` (columns are never dropped),
            changes a column's nullability, or changes nothing.
    """
    old = {c.name: c for c in before}
    missing = [c.name for c in before if c.name not in {a.name for a in after}]
    if missing:
        raise UserInputError(f"a schema change cannot drop columns: {', '.join(missing)}")
    changes: list[dict[str, str]] = []
    for c in after:
        was = old.get(c.name)
        if was is None:
            changes.append({"op": "add", "column": c.name, "type": c.type})
        elif was.nullable != c.nullable:
            raise UserInputError(f"a schema change cannot change whether column {c.name!r} is nullable")
        elif was.type != c.type:
            changes.append({"op": "widen", "column": c.name, "from": was.type, "type": c.type})
    if not changes:
        raise UserInputError("a schema change must add or widen a column")
    return changes


def describe_changes(changes: Sequence[dict[str, Any]]) -> str:
    """``changes`` (of :func:`column_changes`) in words: ``add coupon STRING, widen qty INT to BIGINT``."""

    def sql(delta_type: str) -> str:
        return Column(name="_", type=delta_type).sql_type

    words = []
    for c in changes:
        if c["op"] == "add":
            words.append(f"add {c['column']} {sql(c['type'])}")
        else:
            words.append(f"widen {c['column']} {sql(c['from'])} to {sql(c['type'])}")
    return ", ".join(words)


class RecordedSchemaChange(BaseModel):
    """One schema change of a table as the metastore records it (``sp_schema_changes``)."""

    model_config = ConfigDict(frozen=True)

    id: int
    table_id: int
    key: str  # its idempotency key: recording it again under this key finds it
    version: int | None  # the Delta version that made it (None while pending)
    change: tuple[dict[str, str], ...]  # see column_changes
    before: tuple[Column, ...]  # the table's data columns it started from
    after: tuple[Column, ...]  # … and those it gives the table
    source: str  # who or what made it: "alter", "chunk:<id>", …
    state: SchemaChangeState
    at: datetime  # when it was recorded
    done_at: datetime | None = None

    @property
    def description(self) -> str:
        return describe_changes(self.change)

    def summary(self) -> SchemaChange | None:
        """The change as a table's history shows it (None while pending: no version made it yet)."""
        if self.version is None or self.state is not SchemaChangeState.DONE:
            return None
        return SchemaChange(version=self.version, change=self.description, source=self.source, at=self.at)

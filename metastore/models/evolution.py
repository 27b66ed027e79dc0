"""Schema changes: which column types widen in place, and the checks an ALTER passes before it runs.

A table's schema changes by a Delta ``metaData`` commit alone: no data file is rewritten, so every
file written before the change must still read, exactly, under the new schema, in every reader
streampart promises (delta-rs, polars, DuckDB, pyarrow, Spark). Measured (docs/design/
schema-changes.md): adding a nullable column, widening an integer (byte→short→int→long),
float→double, and a decimal's precision at the same scale all do. A decimal's scale change breaks
polars, and date→timestamp breaks Spark and polars, so both are refused with the alternative (a
new column). Rename and drop are refused elsewhere: they need Delta column mapping.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from metastore.errors import UserInputError
from metastore.models.columns import Column, check_column_name, parse_schema


class SchemaEvolution(StrEnum):
    """What rows that bring fields the table lacks may change in its schema."""

    NONE = "none"
    ADD_COLUMNS = "add-columns"
    ADD_AND_WIDEN = "add-and-widen"


class SchemaChange(BaseModel):
    """One schema change in a table's history: the Delta version that made it, and by whom."""

    model_config = ConfigDict(frozen=True)

    version: int
    change: str
    source: str
    at: datetime


# Each family widens upwards only; a type of one family never becomes a type of another.
_INTEGERS = ("byte", "short", "integer", "long")
_FLOATS = ("float", "double")
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_NEW_COLUMN = "add a new column instead"


def _sql(delta_type: str) -> str:
    return Column(name="_", type=delta_type).sql_type


def _decimal(delta_type: str) -> tuple[int, int] | None:
    m = _DECIMAL.match(delta_type)
    return (int(m.group(1)), int(m.group(2))) if m else None


def widening_refusal(old: str, new: str) -> str | None:
    """Why a column of Delta type ``old`` cannot become ``new`` in place (None: it can).

    Allowed: the same type; byte→short→int→long (any step up); float→double; decimal(p,s)→
    decimal(p',s) with p' >= p and the same scale.
    """
    if old == new:
        return None
    was, becomes = _sql(old), _sql(new)
    for family in (_INTEGERS, _FLOATS):
        if old in family and new in family:
            if family.index(new) > family.index(old):
                return None
            return f"{becomes} is narrower than {was}: values already written may not fit"
    old_dec, new_dec = _decimal(old), _decimal(new)
    if old_dec and new_dec:
        if old_dec[1] != new_dec[1]:
            return f"{was} to {becomes} changes the scale: polars cannot read the old files; {_NEW_COLUMN}"
        if new_dec[0] < old_dec[0]:
            return f"{becomes} is narrower than {was}: values already written may not fit"
        return None
    if old == "date" and new == "timestamp":
        return f"Spark and polars cannot read the old DATE files as TIMESTAMP; {_NEW_COLUMN}"
    return (
        f"{was} to {becomes} changes the kind of the column: only integers, FLOAT to DOUBLE and a "
        f"DECIMAL's precision widen in place; {_NEW_COLUMN}"
    )


def parse_column_change(text: str, what: str) -> Column:
    """One column of ``ALTER`` text, ``"coupon STRING"`` or ``"qty BIGINT"``; ``what`` names the option.

    Raises:
        UserInputError: the text is not one ``NAME TYPE [NOT NULL]``.
    """
    try:
        columns = parse_schema(text)
    except UserInputError as exc:
        raise UserInputError(f"{what} {text!r}: {exc}") from None
    if len(columns) != 1:
        raise UserInputError(f"{what} {text!r}: give one column, 'NAME TYPE'")
    return columns[0]


def _added_problems(
    add: Sequence[Column], existing: dict[str, Column], time_column: str, partition_column: str
) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for c in add:
        key = c.name.lower()
        try:
            check_column_name(c.name, "new column name")
        except UserInputError as exc:
            problems.append(str(exc))
        if key == partition_column.lower():
            problems.append(f"{c.name!r} is the partition column's name")
        elif key == time_column.lower():
            problems.append(f"{c.name!r} is the time column")
        elif key in existing:
            old = existing[key].name
            problems.append(
                f"column {c.name!r} exists already"
                if old == c.name
                else f"{c.name!r} differs from the existing column {old!r} only in case"
            )
        if key in seen:
            problems.append(f"column {c.name!r} is added twice")
        seen.add(key)
        if not c.nullable:
            problems.append(
                f"{c.name!r} cannot be NOT NULL: new columns are nullable: old rows have no value"
            )
    return problems


def _widened_problems(
    widen: Sequence[Column], existing: dict[str, Column], time_column: str, partition_column: str
) -> list[str]:
    problems: list[str] = []
    seen: set[str] = set()
    for c in widen:
        key = c.name.lower()
        if key in seen:
            problems.append(f"column {c.name!r} is widened twice")
        seen.add(key)
        if key == partition_column.lower():
            problems.append(f"{c.name!r} is the partition column: its type cannot change")
            continue
        if key == time_column.lower():
            problems.append(f"{c.name!r} is the time column: its type cannot change")
            continue
        old = existing.get(key)
        if old is None:
            problems.append(f"there is no column {c.name!r} to widen")
            continue
        reason = widening_refusal(old.type, c.type)
        if reason:
            problems.append(f"column {old.name!r}: {reason}")
        if old.nullable and not c.nullable:
            problems.append(f"column {old.name!r} cannot become NOT NULL: old rows may hold nulls")
    return problems


def plan_alter(
    columns: Sequence[Column],
    time_column: str,
    partition_column: str,
    add: Sequence[Column] = (),
    widen: Sequence[Column] = (),
) -> tuple[Column, ...]:
    """The columns after adding ``add`` (at the end) and widening ``widen`` (in place).

    Every problem is found before anything is returned, and all of them are named at once.

    Raises:
        UserInputError: naming every problem (a name taken, even but for case; the time or
            partition column; a column to widen that does not exist; a type that does not
            widen in place; a NOT NULL new column; an invalid name).
    """
    existing = {c.name.lower(): c for c in columns}
    problems = _added_problems(add, existing, time_column, partition_column)
    problems += _widened_problems(widen, existing, time_column, partition_column)
    if not add and not widen:
        problems.append("nothing to change: give a column to add or to widen")
    if problems:
        raise UserInputError("schema change refused: " + "; ".join(problems))
    wider = {c.name.lower(): c for c in widen}
    changed = [
        Column(name=c.name, type=wider[c.name.lower()].type, nullable=c.nullable)
        if c.name.lower() in wider
        else c
        for c in columns
    ]
    return (*changed, *add)


def merge_proposals(
    columns: Sequence[Column],
    proposals: Sequence[Sequence[Column]],
    partition_column: str,
    widen: bool = False,
) -> tuple[tuple[Column, ...], list[str | None]]:
    """The columns after the ``proposals`` (each the data columns of one chunk's files) are added
    to ``columns`` (the log's), and per proposal why it cannot be (None: it can).

    A proposal fits when each of its columns is new (added, nullable, at the end, in the order the
    proposals bring them) or is a column the table has in the same type or a wider one (an older
    file holding a narrower type reads exactly). One that does not fit adds nothing: its chunk's
    values were parsed as another type than the table's column (another writer added it first).
    ``widen`` (``add-and-widen``): a column a proposal holds in a wider type, as
    :func:`widening_refusal` allows, is widened to it.
    """
    merged = list(columns)
    by_name = {c.name: c for c in merged}
    lower = {c.name.lower(): c.name for c in merged}
    reasons: list[str | None] = []
    for proposal in proposals:
        problems: list[str] = []
        additions: dict[str, Column] = {}
        widenings: dict[str, Column] = {}
        for c in proposal:
            have = by_name.get(c.name) or additions.get(c.name)
            if have is not None:
                if widen and have.type != c.type and widening_refusal(have.type, c.type) is None:
                    widenings[c.name] = Column(name=c.name, type=c.type, nullable=have.nullable)
                elif widening_refusal(c.type, have.type) is not None:
                    problems.append(
                        f"column {c.name!r} is {have.sql_type} in the table, and the chunk holds its "
                        f"values as {c.sql_type}"
                    )
            elif c.name.lower() == partition_column.lower():
                problems.append(f"{c.name!r} is the partition column")
            elif c.name.lower() in lower:
                problems.append(f"{c.name!r} differs from column {lower[c.name.lower()]!r} only in case")
            else:
                additions[c.name] = Column(name=c.name, type=c.type)
        if problems:
            reasons.append("; ".join(problems))
            continue
        for c in widenings.values():
            merged = [c if m.name == c.name else m for m in merged]
            by_name[c.name] = c
        for c in additions.values():
            merged.append(c)
            by_name[c.name] = c
            lower[c.name.lower()] = c.name
        reasons.append(None)
    return tuple(merged), reasons

"""``ALTER TABLE`` in ``streampart query``: Spark's syntax for the schema changes streampart makes, run
through ``catalog.schemas.alter`` without starting Spark.

- ``ALTER TABLE ns.t ADD COLUMNS (coupon STRING, n INT)`` (or ``ADD COLUMN c T``): nullable columns
  at the end; rows written before read null.
- ``ALTER TABLE ns.t ALTER COLUMN qty TYPE BIGINT``, or ``CHANGE [COLUMN] qty qty BIGINT``: a widening
  in place (INT to BIGINT, FLOAT to DOUBLE, a DECIMAL's precision).

Renaming and dropping columns (``RENAME COLUMN``, ``DROP COLUMN``, ``REPLACE COLUMNS``) are refused
with the reason: without rewriting files they need Delta column mapping, which hides the columns'
names from plain Parquet readers of the standard partitions' directories. Other ``ALTER TABLE``
changes are refused naming the command that makes them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from metastore.errors import UserInputError
from metastore.models import Column, parse_column_change
from streampart.errors import QueryRefusedError

_ALTER = re.compile(r"\s*ALTER\s+TABLE\b", re.IGNORECASE)

NO_RENAME_OR_DROP = (
    "{what}: columns are never renamed or dropped: without rewriting every file that needs Delta column "
    "mapping, which hides the columns' names from plain Parquet readers of the standard partitions' "
    "directories; add a new column instead (ADD COLUMNS)"
)


@dataclass(frozen=True)
class AlterStatement:
    """An ``ALTER TABLE`` as streampart runs it: the table (as written) and its column changes."""

    table: str  # NAMESPACE.TABLE, or TABLE inside the namespace the statement runs in
    add: tuple[Column, ...]
    widen: tuple[Column, ...]


def is_alter(sql: str) -> bool:
    """Whether ``sql`` (``USE`` statements taken off) is an ``ALTER TABLE``."""
    return _ALTER.match(sql) is not None


def parse_alter(sql: str) -> AlterStatement:
    """The ``ALTER TABLE`` statement ``sql``.

    Raises:
        UserInputError: it does not parse, or a column in it is not ``NAME TYPE``.
        QueryRefusedError: it renames or drops a column, or changes something else than columns.
    """
    import sqlglot
    from sqlglot import exp

    from streampart.query_errors import syntax_error
    from streampart.query_policy import target_name

    try:
        statements = [s for s in sqlglot.parse(sql, read="spark") if s is not None]
    except sqlglot.errors.ParseError as exc:
        raise UserInputError(syntax_error(sql, exc)) from None
    if len(statements) != 1 or not isinstance(statements[0], exp.Alter):
        raise UserInputError("give exactly one SQL statement (USE NAMESPACE; may come before it)")
    tree = statements[0]
    if not isinstance(tree.this, exp.Table):
        raise QueryRefusedError(f"{tree.sql(dialect='spark')}: ALTER TABLE names a table, NAMESPACE.TABLE")
    table = target_name(tree.this)
    add: list[Column] = []
    widen: list[Column] = []
    for action in tree.args.get("actions") or []:
        _action(action, add, widen)
    if not (add or widen):
        raise UserInputError(f"ALTER TABLE {table}: nothing to change")
    return AlterStatement(table, tuple(add), tuple(widen))


def _action(action: Any, add: list[Column], widen: list[Column]) -> None:
    """Sort one action of an ALTER TABLE into ``add`` or ``widen``, or refuse it."""
    from sqlglot import exp

    if isinstance(action, exp.Schema):  # ADD COLUMNS (a T, b T)
        add.extend(_column(c, "ADD COLUMNS") for c in action.expressions)
    elif isinstance(action, exp.ColumnDef):  # ADD COLUMN a T
        add.append(_column(action, "ADD COLUMNS"))
    elif isinstance(action, exp.AlterColumn):
        widen.append(_changed(action))
    elif isinstance(action, exp.RenameColumn):
        raise QueryRefusedError(NO_RENAME_OR_DROP.format(what="RENAME COLUMN"))
    elif isinstance(action, exp.Drop) and str(action.args.get("kind") or "").upper() == "COLUMN":
        raise QueryRefusedError(NO_RENAME_OR_DROP.format(what="DROP COLUMN"))
    elif isinstance(action, exp.ReplaceColumns):
        raise QueryRefusedError(NO_RENAME_OR_DROP.format(what="REPLACE COLUMNS"))
    else:
        words = " ".join(action.sql(dialect="spark").split()[:2])
        raise QueryRefusedError(
            f"ALTER TABLE … {words}: streampart query runs ADD COLUMNS and ALTER COLUMN … TYPE (a "
            "widening); other changes of a table are made with `streampart table alter`"
        )


def _column(node: Any, what: str) -> Column:
    return parse_column_change(node.sql(dialect="spark"), what)


def _changed(action: Any) -> Column:
    """The column an ``ALTER COLUMN c TYPE t`` / ``CHANGE c c t`` widens."""
    name = str(action.this.name)
    rename = action.args.get("rename_to")
    if rename is not None and str(rename.name) != name:
        raise QueryRefusedError(NO_RENAME_OR_DROP.format(what=f"CHANGE COLUMN {name} {rename.name}"))
    dtype = action.args.get("dtype")
    if dtype is None:
        raise QueryRefusedError(
            f"ALTER COLUMN {name}: only a type change that widens the column (ALTER COLUMN {name} TYPE "
            "BIGINT) is made; new columns are nullable and stay so"
        )
    return parse_column_change(f"{name} {dtype.sql(dialect='spark')}", "ALTER COLUMN")

"""Delta Sharing's ``jsonPredicateHints``: which files of a query may hold a matching row.

A hint is a JSON expression (``and``, ``or``, ``not``, ``equal``, ``lessThan``, ``lessThanOrEqual``,
``greaterThan``, ``greaterThanOrEqual``, ``isNull`` over ``column`` and ``literal``). A file is left
out of the answer only when its statistics prove no row of it can match: the partition column's
value (exact) and each column's min, max and null count from the file's Parquet footer. Anything
this does not understand — an unknown operator or type, a column without statistics — keeps the
file: hints only ever make an answer smaller, never wrong (the recipient filters the rows itself).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from metastore.errors import UserInputError


@dataclass(frozen=True)
class FileFacts:
    """What is known of one file: its columns' (min, max) and null counts, and its row count."""

    bounds: dict[str, tuple[Any, Any]]
    nulls: dict[str, int]
    rows: int


def parse_hints(text: str | None) -> dict[str, Any] | None:
    """The hint expression of a query's ``jsonPredicateHints`` (None: none); 400 if it is not JSON."""
    if not text:
        return None
    try:
        found = json.loads(text)
    except ValueError as exc:
        raise UserInputError(f"jsonPredicateHints is not JSON: {exc}") from None
    except RecursionError:
        raise UserInputError("jsonPredicateHints is nested too deep") from None
    return found if isinstance(found, dict) else None


def _literal(node: dict[str, Any]) -> Any:
    value, kind = node.get("value"), str(node.get("valueType", "")).lower()
    if kind in ("int", "long", "short", "byte"):
        return int(value)  # type: ignore[arg-type]
    if kind in ("float", "double"):
        return float(value)  # type: ignore[arg-type]
    if kind in ("bool", "boolean"):
        return str(value).lower() == "true"
    if kind == "date":
        return date.fromisoformat(str(value))
    if kind in ("timestamp", "timestamp_ntz"):
        v = datetime.fromisoformat(str(value).replace("Z", "+00:00").replace(" ", "T"))
        return v if v.tzinfo is not None else v.replace(tzinfo=UTC)
    if kind == "string":
        return str(value)
    raise ValueError(kind)


_COMPARE: dict[str, Callable[[Any, Any, Any], bool]] = {
    "equal": lambda lo, hi, x: lo <= x <= hi,
    "lessthan": lambda lo, hi, x: lo < x,
    "lessthanorequal": lambda lo, hi, x: lo <= x,
    "greaterthan": lambda lo, hi, x: hi > x,
    "greaterthanorequal": lambda lo, hi, x: hi >= x,
}
_FLIPPED = {
    "lessthan": "greaterthan",
    "greaterthan": "lessthan",
    "lessthanorequal": "greaterthanorequal",
    "greaterthanorequal": "lessthanorequal",
}


def may_match(hint: dict[str, Any] | None, facts: FileFacts) -> bool:
    """False only if no row of a file with ``facts`` can satisfy ``hint``."""
    if hint is None:
        return True
    try:
        return _may(hint, facts)
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return True


def _may(node: dict[str, Any], facts: FileFacts) -> bool:
    op = str(node.get("op", "")).lower()
    children = node.get("children") or []
    if op == "and":
        return all(_may(c, facts) for c in children)
    if op == "or":
        return any(_may(c, facts) for c in children)
    if op == "not":
        [child] = children
        if str(child.get("op", "")).lower() == "isnull":
            name = _column(child["children"][0])
            return facts.nulls.get(name, 0) < facts.rows if name in facts.nulls else True
        return True
    if op == "isnull":
        name = _column(children[0])
        return facts.nulls.get(name, 1) > 0
    if op in _COMPARE:
        left, right = children
        flipped = left.get("op") == "literal"
        column, literal = (right, left) if flipped else (left, right)
        name = _column(column)
        if name not in facts.bounds or literal.get("op") != "literal":
            return True
        low, high = facts.bounds[name]
        if low is None or high is None:
            return True
        x = _literal(literal)
        if flipped:  # 5 < col is col > 5
            op = _FLIPPED.get(op, op)
        return _COMPARE[op](low, high, x)
    return True


def _column(node: dict[str, Any]) -> str:
    if node.get("op") != "column":
        raise ValueError("not a column")
    return str(node["name"])

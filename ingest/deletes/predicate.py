"""The predicate of ``streampart delete --where``: one SQL condition, as an Arrow filter of a file's rows.

sqlglot reads it (Spark's dialect) into a ``pyarrow.compute.Expression``; the subset is closed (``_SUBSET``).
Logic is SQL's three-valued one; a row whose condition is NULL is kept, as by Spark's DELETE. Columns
match ignoring case (Spark's default), bare or backquoted; a literal becomes its column's type exactly or
is refused. Timestamps are UTC: one without a zone is UTC, one with an offset converted; a DATE is
midnight UTC.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc
import sqlglot
from sqlglot import exp
from sqlglot.optimizer.simplify import simplify

from metastore.delta.arrow import arrow_type
from metastore.errors import UserInputError
from metastore.models import Column

_SUBSET = (  # what --where accepts, as its refusals say
    "comparisons (= <> != < <= > >=), [NOT] IN (values), [NOT] BETWEEN, IS [NOT] NULL, AND, OR, NOT and "
    "parentheses, over columns and literals (numbers, strings, TRUE, FALSE, TIMESTAMP '…', DATE '…')"
)
_COMPARE: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {exp.EQ: pc.equal, exp.NEQ: pc.not_equal,
    exp.LT: pc.less, exp.LTE: pc.less_equal, exp.GT: pc.greater, exp.GTE: pc.greater_equal}  # fmt: skip
_TIMESTAMPS = (exp.DataType.Type.TIMESTAMP, exp.DataType.Type.TIMESTAMPTZ, exp.DataType.Type.TIMESTAMPLTZ)
EVERY_ROW = 'to delete every row, say so: --all (over HTTP, "all": true)'
_EVERY = f"it names no column, so it matches every row; {EVERY_ROW}"
_LABELS: dict[type[exp.Expr], str] = {exp.Subquery: "a subquery", exp.NullSafeEQ: "<=>",
    exp.Is: "IS other than IS [NOT] NULL", exp.Concat: "adjacent strings (write a quote in one as \\')",
    **dict.fromkeys((exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod, exp.IntDiv), "arithmetic")}  # fmt: skip


class _Literal(NamedTuple):
    kind: str  # number, string, boolean, timestamp, date or null
    value: Any  # Decimal, str, bool, datetime (UTC), date or None
    sql: str


_Conjunct = tuple[tuple[Column, ...], Any]  # an operand of the top-level AND (its columns, its condition)


@dataclass(frozen=True)
class Predicate:
    """A parsed ``--where``: ``matches`` is TRUE exactly for the rows to delete, ``keeps`` for the others
    (neither is ever NULL); ``columns``: those it names, as the table spells them; ``sql``: sqlglot's."""

    text: str
    sql: str
    columns: frozenset[str]
    matches: pc.Expression = field(compare=False)
    keeps: pc.Expression = field(compare=False)
    _conjuncts: tuple[_Conjunct, ...] = field(default=(), repr=False, compare=False)

    def partition_may_match(self, values: Mapping[str, Any]) -> bool:
        """False only when no row of a file or partition where columns hold ``values`` (column name →
        its one value there, a Python value or None) can match: when a conjunct of the top-level AND
        whose columns all have a value is not TRUE for them. Unsure (a value not of its type): True.
        """
        known = (p for p in self._conjuncts if p[0] and all(c.name in values for c in p[0]))
        return all(_true(columns, condition, values) for columns, condition in known)


def parse_predicate(text: str, columns: Sequence[Column], *, allow_all: bool = False) -> Predicate:
    """Read the text of ``--where`` into a :class:`Predicate` over a table of ``columns``.

    Raises:
        UserInputError: the text is empty, not SQL, several statements, outside ``_SUBSET``, names
            an unknown column, holds a literal its column cannot hold, matches no row, or names no
            column (so matches every row) and ``allow_all`` (``--all``) is False.
    """
    try:
        tree = _parse(text)
        sql = tree.sql(dialect="spark", comments=False)
        if tree.find(exp.Column) is None:  # TRUE, 1 = 1, 1 = 0: evaluated by sqlglot
            folded = simplify(tree.copy())
            if not isinstance(folded, exp.Boolean):
                raise _refuse(tree, "it names no column; a condition must test one (--all deletes every row)")
            if not folded.this:
                raise UserInputError(f"--where {sql} matches no row: it names no column and is never true")
            if not allow_all:
                raise _refuse(tree, _EVERY)
            return Predicate(text, sql, frozenset(), pc.scalar(True), pc.scalar(False))
        builder, parts = _Builder(columns), []
        for node in _conjuncts(tree):
            builder.named = {}
            condition = builder.condition(node)
            parts.append((tuple(builder.named.values()), condition))
    except RecursionError:
        raise UserInputError("--where is nested too deeply") from None
    matches = pc.coalesce(functools.reduce(pc.and_kleene, [p[1] for p in parts]), pc.scalar(False))
    named = frozenset(c.name for p in parts for c in p[0])
    return Predicate(text, sql, named, matches, pc.invert(matches), tuple(parts))


def _parse(text: str) -> exp.Expr:
    try:
        statements = [s for s in sqlglot.parse(text, read="spark") if s is not None]
    except sqlglot.errors.SqlglotError as exc:  # its error as one line, without the parser's internals
        first = (getattr(exc, "errors", None) or [{}])[0]
        why = str(first.get("description") or exc).split(". Line ")[0].splitlines()[0]
        why = "this is not valid here" if "<class " in why or "Required keyword" in why else why
        at = f" at line {first.get('line')}, column {first.get('col')} near {first.get('highlight')!r}"
        raise UserInputError(f"--where is not valid SQL{at if first.get('line') else ''}: {why}") from None
    if not statements:
        raise UserInputError("--where is empty: give a condition, such as user_id = 42")
    if len(statements) > 1:
        raise UserInputError(f"--where takes one condition; this text holds {len(statements)} statements")
    if not isinstance(statements[0], exp.Condition):  # SELECT …, DELETE …: a statement, not a condition
        raise _unsupported(statements[0])
    return statements[0]


def _conjuncts(node: exp.Expr) -> list[exp.Expr]:
    node = node.unnest()
    return [*_conjuncts(node.this), *_conjuncts(node.expression)] if isinstance(node, exp.And) else [node]


class _Builder:
    """Builds the Arrow expression of a condition, noting the columns it names in ``named``."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns, self.by_name = tuple(columns), {c.name.lower(): c for c in columns}
        self.named: dict[str, Column] = {}

    def condition(self, node: exp.Expr) -> pc.Expression:
        node = node.unnest()
        if node.args.get("negate") or node.args.get("symmetric"):  # a NOT folded in; BETWEEN SYMMETRIC
            raise _unsupported(node)
        if isinstance(node, exp.And | exp.Or):
            kleene = pc.and_kleene if isinstance(node, exp.And) else pc.or_kleene
            return kleene(self.condition(node.this), self.condition(node.expression))
        if isinstance(node, exp.Not):
            return pc.invert(self.condition(node.this))
        if type(node) in _COMPARE:
            return self._compare(_COMPARE[type(node)], node.this, node.expression, node)
        if isinstance(node, exp.Between):
            low = self._compare(pc.greater_equal, node.this, node.args["low"], node)
            return pc.and_kleene(low, self._compare(pc.less_equal, node.this, node.args["high"], node))
        if isinstance(node, exp.In):
            return self._in(node)
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Null):
            return pc.is_null(pc.field(self._column(node.this, node).name))
        if isinstance(node, exp.Boolean):
            raise _refuse(node, "this part names no column; each part of a condition must test one")
        if isinstance(node, exp.Column):
            column = self._column(node, node)
            if arrow_type(column.type) != pa.bool_():
                raise _refuse(node, f"a {column.sql_type} column is not a condition: compare it with a value")
            return pc.field(column.name)
        raise _unsupported(node)

    def _compare(self, op: Callable[[Any, Any], Any], left: Any, right: Any, node: Any) -> pc.Expression:
        a, b = self._operand(left, node), self._operand(right, node)
        if isinstance(a, Column) and isinstance(b, Column):
            types = arrow_type(a.type), arrow_type(b.type)
            numbers = all(pa.types.is_integer(t) or pa.types.is_floating(t) for t in types)  # Arrow casts
            if types[0] != types[1] and not numbers:
                raise _refuse(node, f"a {a.sql_type} column cannot be compared with a {b.sql_type} column")
            return op(pc.field(a.name), pc.field(b.name))
        if isinstance(a, _Literal) and isinstance(b, _Literal):
            raise _refuse(node, "this part names no column; each part of a condition must test one")
        column, literal = (a, b) if isinstance(a, Column) else (b, a)
        assert isinstance(column, Column) and isinstance(literal, _Literal)
        if literal.kind == "null":
            raise _refuse(node, "a comparison with NULL is never true; test NULL with IS [NOT] NULL")
        scalar, name = pc.scalar(_scalar(column, literal)), pc.field(column.name)
        return op(name, scalar) if column is a else op(scalar, name)

    def _in(self, node: exp.In) -> pc.Expression:
        if node.args.get("query") or node.args.get("unnest") or node.args.get("field"):
            raise _unsupported(node.args.get("query") or node)
        column, literals = self._column(node.this, node), [_literal(v) for v in node.expressions]
        if not literals or any(v is None or v.kind == "null" for v in literals):
            raise _refuse(node, "IN takes a list of one or more literals, none of them NULL")
        scalars = [_scalar(column, v) for v in literals if v is not None]
        values = pa.array([s.as_py() for s in scalars], type=scalars[0].type)
        name = pc.field(column.name)  # is_in is FALSE for a NULL; SQL's IN is NULL (NOT IN keeps it)
        return pc.if_else(pc.is_valid(name), name.isin(values), pa.scalar(None, pa.bool_()))

    def _operand(self, node: exp.Expr, where: exp.Expr) -> Column | _Literal:
        value = None if isinstance(node, exp.Column) else _literal(node)
        return value if value is not None else self._column(node, where)

    def _column(self, node: exp.Expr, where: exp.Expr) -> Column:
        if not isinstance(node, exp.Column):
            raise _unsupported(node) if _literal(node) is None else _refuse(where, "it must test a column")
        column = None if node.table else self.by_name.get(node.name.lower())  # t.c: a column of no table here
        if column is None:
            names = ", ".join(c.name for c in self.columns)
            raise UserInputError(f"--where: the table has no column {_sql(node)!r}; its columns: {names}")
        self.named[column.name] = column
        return column


def _literal(node: exp.Expr) -> _Literal | None:
    """The literal ``node`` is, or None (``TIMESTAMP '…'`` and ``DATE '…'`` are parsed here)."""
    sql, this = _sql(node), node.this
    if isinstance(node, exp.Neg) and isinstance(this, exp.Literal) and not this.is_string:
        return _Literal("number", -_number(this.this), sql)
    if isinstance(node, exp.Literal):
        return _Literal("string", this, sql) if node.is_string else _Literal("number", _number(this), sql)
    if isinstance(node, exp.Boolean | exp.Null):
        return _Literal("boolean" if isinstance(node, exp.Boolean) else "null", this, sql)
    if not (isinstance(node, exp.Cast) and isinstance(this, exp.Literal) and this.is_string):
        return None
    kind = "timestamp" if node.to.is_type(*_TIMESTAMPS) else "date" if node.to.is_type("date") else ""
    try:
        return _Literal(kind, _time(kind, this.this), sql) if kind else None
    except ValueError as exc:
        raise _refuse(node, str(exc)) from None


def _number(text: str) -> Decimal:
    if not re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", text):
        raise ValueError(f"{text!r} is not a number")
    return Decimal(text.strip())


def _time(kind: str, text: str) -> datetime | date:
    """A timestamp (UTC: without a zone it is UTC, with an offset converted) or a date, ISO-written."""
    fraction = re.search(r"\.(\d+)", text)
    if fraction and fraction.group(1)[6:].strip("0"):
        raise ValueError(f"{text!r} is finer than microseconds, the table's precision")
    try:
        value = date.fromisoformat(text.strip()) if kind == "date" else datetime.fromisoformat(text.strip())
    except ValueError:
        form = "YYYY-MM-DD" if kind == "date" else "YYYY-MM-DD[ HH:MM:SS[.ffffff]][+HH:MM]"
        raise ValueError(f"{text!r} is not a {kind}: {form}") from None
    if not isinstance(value, datetime):
        return value
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _coerce(target: pa.DataType, literal: _Literal) -> Any:
    """``literal``'s value as one of ``target``; a ValueError says why it cannot be."""
    kind, value = literal.kind, literal.value
    if (target, kind) in ((pa.string(), "string"), (pa.bool_(), "boolean")):
        return value
    integer, floating = pa.types.is_integer(target), pa.types.is_floating(target)
    if (integer or floating or pa.types.is_decimal(target)) and kind in ("number", "string"):
        number = _number(value) if kind == "string" else value
        if integer and number != number.to_integral_value():
            raise ValueError("it is not a whole number")
        return int(number) if integer else float(number) if floating else number
    if pa.types.is_timestamp(target) and kind in ("string", "timestamp", "date"):
        if kind == "date":
            return datetime.combine(value, time(), UTC)
        return value if kind == "timestamp" else _time("timestamp", value)
    if pa.types.is_date(target) and kind in ("string", "date"):
        return _time("date", value) if kind == "string" else value
    raise ValueError(f"it is a {kind}")


def _scalar(column: Column, literal: _Literal) -> pa.Scalar:
    """``literal`` as a value of ``column``'s type (a FLOAT's as a DOUBLE, as Spark compares them)."""
    target = arrow_type(column.type)
    try:
        value = _coerce(target, literal)
        return pa.scalar(value, type=pa.float64() if pa.types.is_floating(target) else target)
    except (ValueError, OverflowError, pa.ArrowException) as exc:
        overflow = isinstance(exc, pa.ArrowException | OverflowError)  # ArrowInvalid is a ValueError too
        reason = f"it does not fit {column.sql_type}" if overflow else str(exc)
        what = f"column {column.name!r} ({column.sql_type})"
        raise UserInputError(f"--where: {literal.sql} cannot be compared with {what}: {reason}") from None


def _true(columns: tuple[Column, ...], condition: Any, values: Mapping[str, Any]) -> bool:
    """Whether ``condition`` may be TRUE where ``columns`` hold ``values`` (True if they cannot be read)."""
    try:
        row = pa.table({c.name: pa.array([values[c.name]], arrow_type(c.type)) for c in columns})
        return bool(row.filter(pc.coalesce(condition, pc.scalar(False))).num_rows)
    except (ValueError, TypeError, ArithmeticError, pa.ArrowException):
        return True


def _sql(node: exp.Expr) -> str:
    text = node.sql(dialect="spark", comments=False)
    return text if len(text) <= 80 else text[:77] + "…"


def _refuse(node: exp.Expr, why: str) -> UserInputError:
    return UserInputError(f"--where: {_sql(node)}: {why}")


def _unsupported(node: exp.Expr) -> UserInputError:
    label = next((text for kind, text in _LABELS.items() if isinstance(node, kind)), None)
    if label is None and isinstance(node, exp.Func):
        label = f"the function {node.name.upper() if isinstance(node, exp.Anonymous) else node.sql_name()}"
    return _refuse(node, f"{label or node.key.upper()} is not supported; --where accepts {_SUBSET}")

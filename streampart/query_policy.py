"""What a query of ``streampart query`` may touch: streampart snapshots, and nothing else.

Spark SQL can read any file (``text.`/etc/passwd```, ``IDENTIFIER('…')``, ``read_files``),
call any Java method (``reflect``, ``java_method``) and run any program (``TRANSFORM … USING``).
A query here is parsed (sqlglot, Spark dialect) and only the statement regenerated from the
checked tree reaches Spark, so what is checked is what runs:

- every table reference is ``NAMESPACE.TABLE`` of the catalog (rewritten to its pinned
  snapshot), or the name of a common table expression of the same query; one-part names of
  anything else (Spark's temporary views, its local catalog), three-part names and paths are
  refused;
- a table-valued function in ``FROM`` is refused, but for ``range(…)``;
- functions that reach outside the query (``reflect``, ``java_method``, ``try_reflect``,
  ``IDENTIFIER``) and script transforms are refused;
- ``VERSION AS OF n`` reads that Delta version of the table; ``TIMESTAMP AS OF 'time'`` the
  newest version committed at or before that time. Nothing is ignored.

Spark itself runs with ``spark.sql.runSQLOnFiles=false`` as a second fence.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from metastore.errors import UserInputError
from metastore.models import TableName
from streampart.errors import QueryRefusedError

# Functions that reach outside the query: the JVM, or a table named by a string.
REFUSED_FUNCTIONS = frozenset({"REFLECT", "JAVA_METHOD", "TRY_REFLECT", "IDENTIFIER"})
# Table-valued functions a query may use in FROM: they read nothing.
ALLOWED_TABLE_FUNCTIONS = frozenset({"RANGE"})


@dataclass(frozen=True)
class TableRef:
    """A table the query reads, and at which version: the newest (both None), a number or a time."""

    name: str  # NAMESPACE.TABLE
    version: int | None = None
    timestamp: str | None = None

    @property
    def view(self) -> str:
        """The name of the Spark temporary view holding this snapshot."""
        base = view_name(TableName.parse(self.name))
        if self.version is not None:
            return f"{base}__v{self.version}"
        if self.timestamp is not None:
            return f"{base}__t{hashlib.sha256(self.timestamp.encode()).hexdigest()[:12]}"
        return base


def view_name(name: TableName) -> str:
    """The Spark temporary view of a table's newest snapshot: views have one-part names."""
    return f"__sp_{name.namespace}__{name.table}"


def check(tree: Any, tables: set[str]) -> dict[exp.Table, TableRef]:
    """Check ``tree`` against the policy above; the catalog table each table node reads.

    Raises:
        QueryRefusedError: naming the first reference or function that is not allowed.
        UserInputError: a table of the catalog that does not exist.
    """
    if tree.find(exp.QueryTransform) is not None:
        raise QueryRefusedError("TRANSFORM … USING runs a program; queries may not run programs")
    for func in tree.find_all(exp.Func):
        name = _function_name(func)
        if name in REFUSED_FUNCTIONS:
            raise QueryRefusedError(
                f"function {name.lower()}() reaches outside streampart's tables; queries may not use it"
            )
    ctes = {cte.alias_or_name for cte in tree.find_all(exp.CTE)}
    refs: dict[exp.Table, TableRef] = {}
    for node in tree.find_all(exp.Table):
        if not isinstance(node.this, exp.Identifier):
            name = _function_name(node.this) if isinstance(node.this, exp.Func) else node.this.sql()
            if name in ALLOWED_TABLE_FUNCTIONS:
                continue
            raise QueryRefusedError(
                f"{node.this.sql(dialect='spark')} in FROM: queries read streampart tables "
                "(NAMESPACE.TABLE) only, not files or table functions"
            )
        if node.args.get("catalog") is not None:
            raise QueryRefusedError(
                f"{node.sql(dialect='spark')}: queries read streampart tables as NAMESPACE.TABLE, "
                "not through a catalog or a path"
            )
        if not node.db:
            if node.name in ctes:
                continue
            raise QueryRefusedError(
                f"table {node.name!r}: name streampart tables as NAMESPACE.TABLE (one-part names "
                "may only refer to the query's own WITH clauses)"
            )
        qualified = f"{node.db}.{node.name}"
        if qualified not in tables:
            raise UserInputError(f"table {qualified} does not exist")
        refs[node] = _versioned(qualified, node.args.get("version"))
    return refs


def _versioned(name: str, version: exp.Version | None) -> TableRef:
    if version is None:
        return TableRef(name)
    kind = str(version.name).upper()
    value = version.expression
    if kind == "VERSION" and isinstance(value, exp.Literal) and not value.is_string:
        try:
            number = int(value.this)
        except ValueError:
            number = -1
        if number < 0:
            raise UserInputError(f"{name}: VERSION AS OF takes a version number (0, 1, 2, …)")
        return TableRef(name, version=number)
    if kind == "TIMESTAMP" and isinstance(value, exp.Literal) and value.is_string:
        return TableRef(name, timestamp=value.this)
    raise UserInputError(
        f"{name}: use VERSION AS OF <number> or TIMESTAMP AS OF '<ISO-8601 time>' (literals only)"
    )


def _function_name(func: Any) -> str:
    if isinstance(func, exp.Anonymous):
        return str(func.this).upper()
    if isinstance(func, exp.Func):
        return func.sql_name().upper()
    return ""

"""What a statement of ``streampart query`` may touch: streampart snapshots, and nothing else.

Spark SQL can read any file (``text.`/etc/passwd```, ``IDENTIFIER('…')``), call any Java method
(``reflect``, ``java_method``) and run any program (``TRANSFORM … USING``). What a statement may
run is decided by ``Policy`` (``streampart/java/Policy.java``) on the plan Spark's analyzer
resolved, however the statement spelled it. This module reads the statement first (sqlglot, Spark
dialect) for what streampart itself must know before Spark starts:

- the kind of statement: one query, ``INSERT INTO ns.t …`` (its result commits into ``ns.t`` as one
  chunk; columns by position, a column list or ``BY NAME``, as in Spark) or ``CREATE TABLE ns.t
  [TBLPROPERTIES (…)] AS <query>`` (a new streaming table with the result as its first chunk):
  :func:`split_statement`. Every other statement — other DML, other DDL, ``INSERT OVERWRITE``,
  ``CREATE OR REPLACE`` — is refused, naming what to do;
- the tables it reads, to pin them (:func:`check`): ``NAMESPACE.TABLE``, or inside the namespace
  the query runs in ``TABLE`` and ``TABLE@SOURCE_NAMESPACE`` (that namespace's link), resolved by
  :meth:`metastore.catalog.Catalog.resolve` (which keeps an isolated namespace to its own tables
  and links), at the version ``VERSION AS OF n`` / ``TIMESTAMP AS OF 'time'`` names. Paths,
  catalog names and table functions but ``range`` are refused here already, and so are the
  functions that call Java by name and script transforms when sqlglot sees them: earlier, with
  a clearer message — not instead of the check on the analyzed plan.

Spark itself runs with ``spark.sql.runSQLOnFiles=false`` and ``spark.sql.variable.substitute=false``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from metastore.errors import UserInputError
from metastore.models import TableName
from streampart.errors import QueryRefusedError

# Functions that reach outside the query: the JVM, or a table named by a string.
REFUSED_FUNCTIONS = frozenset({"REFLECT", "JAVA_METHOD", "TRY_REFLECT"})
# Table-valued functions a query may use in FROM: they read nothing.
ALLOWED_TABLE_FUNCTIONS = frozenset({"RANGE"})


# Maps a table reference as written (``ns.t``, ``t``, ``t@b``) to the catalog name it reads
# (a table's or a link's ``ns.name``), raising a StreampartError that names the fault.
Resolver = Callable[[str], str]


@dataclass(frozen=True)
class TableRef:
    """A table (or link) the query reads, and at which version: the newest (both None), a number or a time.

    A link's version is its source's: ``VERSION AS OF`` on a link reads that version of the source.
    """

    name: str  # NAMESPACE.TABLE or NAMESPACE.LINK
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


@dataclass(frozen=True)
class Output:
    """The table a statement writes: an existing one (INSERT INTO), or a new one (CREATE TABLE … AS)."""

    name: str  # as written: NAMESPACE.TABLE, or TABLE inside the namespace the query runs in
    create: bool
    properties: tuple[tuple[str, str], ...] = ()  # CREATE TABLE's TBLPROPERTIES, as written
    # INSERT INTO's columns, as Spark matches them: by position (None, the default), to the columns
    # listed (``INSERT INTO t (a, b) …``), or by the result's names (``INSERT INTO t BY NAME …``)
    columns: tuple[str, ...] | None = None
    by_name: bool = False

    @property
    def verb(self) -> str:
        return "CREATE TABLE … AS SELECT" if self.create else "INSERT INTO"


def split_statement(tree: Any) -> tuple[Any, Output | None]:
    """The query a statement runs, and the table it writes (None: it only reads).

    Raises:
        QueryRefusedError: a statement other than a query, ``INSERT INTO … <query>`` or
            ``CREATE TABLE … [TBLPROPERTIES (…)] AS <query>``, naming what to do instead.
    """
    if isinstance(tree, exp.Query):
        return tree, None
    if isinstance(tree, exp.Insert):
        return _insert(tree)
    if isinstance(tree, exp.Create) and str(tree.args.get("kind") or "").upper() == "TABLE":
        return _create(tree)
    raise QueryRefusedError(
        f"{_statement_words(tree)}: only queries (SELECT, WITH …), INSERT INTO … SELECT and CREATE "
        "TABLE … AS SELECT can run through streampart query (tables are made, altered and dropped "
        "with `streampart table …`)"
    )


def _insert(tree: exp.Insert) -> tuple[Any, Output]:
    if tree.args.get("overwrite"):
        raise QueryRefusedError(
            "INSERT OVERWRITE: committed chunks are never replaced; use INSERT INTO (it adds one chunk)"
        )
    target = tree.this
    columns: tuple[str, ...] | None = None
    if isinstance(target, exp.Schema):
        columns = tuple(str(c.name) for c in target.expressions)
        target = target.this
    if (
        not isinstance(target, exp.Table)
        or target.args.get("partition") is not None
        or tree.args.get("partition")
    ):
        raise QueryRefusedError(
            "INSERT INTO … PARTITION: a row's partition follows from the table's time column; drop "
            "the PARTITION clause"
        )
    query = tree.expression
    if not isinstance(query, exp.Query | exp.Values):
        raise QueryRefusedError(f"INSERT INTO {target_name(target)}: insert a query's result or VALUES")
    _with_to_query(tree, query)
    by_name = bool(tree.args.get("by_name"))
    return query, Output(target_name(target), create=False, columns=columns, by_name=by_name)


def _create(tree: exp.Create) -> tuple[Any, Output]:
    target = tree.this
    if isinstance(target, exp.Schema) or not isinstance(tree.expression, exp.Query):
        raise QueryRefusedError(
            "CREATE TABLE without AS SELECT: create a table with `streampart table create`; here a "
            "table is made from a query, CREATE TABLE ns.t [TBLPROPERTIES (…)] AS SELECT …"
        )
    if tree.args.get("replace"):
        raise QueryRefusedError(
            "CREATE OR REPLACE TABLE: tables are never replaced; drop it first (`streampart table drop`)"
        )
    if tree.args.get("exists"):
        raise QueryRefusedError(
            "CREATE TABLE IF NOT EXISTS: to make a retry safe, give the statement an idempotency key "
            "(--idempotency-key): its retry finishes or answers the first run"
        )
    properties: list[tuple[str, str]] = []
    given = tree.args.get("properties")
    for prop in given.expressions if given is not None else []:
        if not (
            isinstance(prop, exp.Property)
            and type(prop) is exp.Property
            and isinstance(prop.this, exp.Literal | exp.Identifier | exp.Var)
            and isinstance(prop.args.get("value"), exp.Literal)
        ):
            raise QueryRefusedError(
                f"CREATE TABLE … {prop.sql(dialect='spark')}: streampart tables take TBLPROPERTIES "
                "('time_column' = 'ts', 'roll_every' = '1h', 'mode' = 'arrival', …) only"
            )
        properties.append((str(prop.this.name), str(prop.args["value"].this)))
    query = tree.expression
    _with_to_query(tree, query)
    return query, Output(target_name(target), create=True, properties=tuple(properties))


def _with_to_query(statement: Any, query: Any) -> None:
    """``WITH a AS (…) INSERT INTO t SELECT … FROM a``: the CTEs belong to the query it runs."""
    outer = statement.args.get("with_")
    if outer is None:
        return
    inner = query.args.get("with_")
    if inner is not None:  # both: the outer ones first, as they are in scope first
        outer.set("expressions", [*outer.expressions, *inner.expressions])
    query.set("with_", outer)


def target_name(node: exp.Table) -> str:
    """The name of the table a statement writes or alters, as written (NAMESPACE.TABLE or TABLE)."""
    if not isinstance(node.this, exp.Identifier) or node.args.get("catalog") is not None:
        raise QueryRefusedError(
            f"{node.sql(dialect='spark')}: a statement writes a streampart table, named NAMESPACE.TABLE"
        )
    return f"{node.db}.{node.name}" if node.db else node.name


def _statement_words(tree: Any) -> str:
    words = tree.sql(dialect="spark").split()
    return " ".join(words[:2]) if words else type(tree).__name__.upper()


@dataclass(frozen=True)
class Read:
    """One table reference of a statement: how Spark's analyzer finds it, and what it reads."""

    key: str  # the name as written (any case) and the version asked for: :func:`read_key`
    ref: TableRef
    alias: str  # the table (or link) as the statement reads it: ``alias.column`` resolves


def read_key(parts: list[str], version: str | None = None, timestamp: str | None = None) -> str:
    """The key of a table reference: its name parts as written, in any case, and the version it reads.

    The same key as ``Statements.key`` in ``streampart/java/Statements.java``, which finds the
    staged snapshot of each reference Spark's analyzer meets.
    """
    key = "\x01".join(p.lower() for p in parts)
    if version is not None:
        return f"{key}\x02v{version}"
    if timestamp is not None:
        return f"{key}\x02t{timestamp}"
    return key


def check(tree: Any, resolve: Resolver) -> list[Read]:
    """Check ``tree`` against the policy above; the catalog table (or link) each reference reads.

    Spark's analyzer resolves the statement itself (over the snapshots staged for these reads),
    and ``Policy`` (``streampart/java/Policy.java``) refuses on the analyzed plan what it may not
    hold, however it was spelled. The refusals here only say so earlier, before Spark starts.

    Raises:
        QueryRefusedError: naming the first reference or function that is not allowed.
        StreampartError: what ``resolve`` raises for a name that is not readable (it does not
            exist, an isolated namespace may not read it, an ambiguous ``t@b``).
    """
    from metastore.errors import StreampartError

    if tree.find(exp.QueryTransform) is not None:
        raise QueryRefusedError("TRANSFORM … USING runs a program; queries may not run programs")
    for func in tree.find_all(exp.Func):
        name = _function_name(func)
        if name in REFUSED_FUNCTIONS:
            raise QueryRefusedError(
                f"function {name.lower()}() calls Java methods by name; queries may not use it"
            )
    ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
    reads: dict[str, Read] = {}
    for node in tree.find_all(exp.Table):
        if node.find_ancestor(exp.Hint) is not None:  # /*+ BROADCAST(c) */ names an alias, not a table
            continue
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
        parts = [node.db, node.name] if node.db else [node.name]
        written = ".".join(parts)
        version = node.args.get("version")
        key = read_key(parts, *_version_text(version))
        if key in reads:
            continue
        if not node.db and node.name.lower() in ctes:
            # the name of a common table expression: Spark reads the CTE where it is in scope, and
            # the table only where it is not (if there is one of that name)
            try:
                resolved = resolve(written)
            except StreampartError:
                continue
        else:
            resolved = resolve(written)
        alias = node.name.split("@")[0] if "@" in node.name else TableName.parse(resolved).table
        reads[key] = Read(key, _versioned(resolved, version), alias)
    return list(reads.values())


def _version_text(version: exp.Version | None) -> tuple[str | None, str | None]:
    """``VERSION AS OF``'s and ``TIMESTAMP AS OF``'s literal as written (the key's part)."""
    if version is None or not isinstance(version.expression, exp.Literal):
        return None, None
    if str(version.name).upper() == "VERSION":
        return str(version.expression.this), None
    return None, str(version.expression.this)


def quote_link_references(sql: str) -> str:
    """``t@b`` written in a query, as the quoted identifier ```t@b``` the parser reads as one name.

    Spark's grammar has no ``@`` in names (sqlglot reads ``t@b`` as a table with a parameter for
    an alias), so adjacent tokens NAME ``@`` NAME, outside strings and comments, become one
    quoted identifier first; :func:`check` then resolves it like any other name.
    """
    from sqlglot.dialects.spark import Spark
    from sqlglot.errors import TokenError
    from sqlglot.tokens import TokenType

    try:
        tokens = Spark().tokenize(sql)
    except TokenError:  # the parser reports it, with its position
        return sql
    names = (TokenType.VAR, TokenType.IDENTIFIER)
    out, last = [], 0
    for a, at_, b in zip(tokens, tokens[1:], tokens[2:], strict=False):
        if (
            a.token_type in names
            and at_.token_type is TokenType.PARAMETER
            and b.token_type in names
            and a.end + 1 == at_.start
            and at_.end + 1 == b.start
            and a.start >= last
        ):
            out.append(sql[last : a.start])
            out.append(f"`{a.text}@{b.text}`")
            last = b.end + 1
    out.append(sql[last:])
    return "".join(out)


def _versioned(name: str, version: exp.Version | None) -> TableRef:
    if version is None:
        return TableRef(name)
    kind = str(version.name).upper()
    value = version.expression
    if kind == "VERSION" and isinstance(value, exp.Literal) and not value.is_string:
        return versioned(name, str(value.this), None)
    if kind == "TIMESTAMP" and isinstance(value, exp.Literal) and value.is_string:
        return versioned(name, None, str(value.this))
    raise UserInputError(
        f"{name}: use VERSION AS OF <number> or TIMESTAMP AS OF '<ISO-8601 time>' (literals only)"
    )


def versioned(name: str, version: str | None, timestamp: str | None) -> TableRef:
    """The reference to ``name`` at ``VERSION AS OF version`` or ``TIMESTAMP AS OF timestamp`` (each as
    written; ``?`` for a timestamp that is no literal), or at the newest version (both None).

    Raises:
        UserInputError: a version that is no number, a timestamp that is no literal.
    """
    if version is not None:
        try:
            number = int(version)
        except ValueError:
            number = -1
        if number < 0:
            raise UserInputError(f"{name}: VERSION AS OF takes a version number (0, 1, 2, …)")
        return TableRef(name, version=number)
    if timestamp is not None and timestamp != "?":
        return TableRef(name, timestamp=timestamp)
    if timestamp is None:
        return TableRef(name)
    raise UserInputError(
        f"{name}: use VERSION AS OF <number> or TIMESTAMP AS OF '<ISO-8601 time>' (literals only)"
    )


def _function_name(func: Any) -> str:
    if isinstance(func, exp.Anonymous):
        return str(func.this).upper()
    if isinstance(func, exp.Func):
        return func.sql_name().upper()
    return ""

"""``SHOW SCHEMAS``, ``SHOW TABLES [IN NS]`` and ``DESCRIBE NS.T`` on the SQL server, from the catalog.

Spark's own answers would list its session catalog, which holds none of streampart's tables;
these list the warehouse's namespaces, tables and links as a client's token may read them (as
``GET /v1/tables`` does), each answered as a query over literal rows. Which statement a client
sent is Spark's parser's reading (``streampart/java/Reading.java``), not this module's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metastore.catalog import Catalog
from metastore.delta.metadata import columns_of
from metastore.links import Reference
from metastore.models import TableName
from metastore.namespaces import check_namespace
from streampart.errors import QueryRefusedError


def schemas(catalog: Catalog, may_read: Callable[[str], bool]) -> str:
    """``SHOW SCHEMAS``: the namespaces holding a table or link the client may read."""
    names = sorted({n for n, _, _ in _readable(catalog, may_read)})
    return _rows(["namespace"], [(n,) for n in names])


def tables(catalog: Catalog, may_read: Callable[[str], bool], within: str | None) -> str:
    """``SHOW TABLES [IN within]``: the tables and links the client may read (of ``within`` only,
    if given: the namespace named, or the session's)."""
    if within is not None:
        within = catalog.namespaces.named(check_namespace(within))
    rows = [r for r in _readable(catalog, may_read) if within is None or r[0] == within]
    return _rows(["namespace", "tableName", "kind"], sorted(rows))


def describe(catalog: Catalog, written: str, namespace: str | None, may_read: Callable[[str], bool]) -> str:
    """``DESCRIBE name``: the columns of the newest version of the table (or a link's source).

    Raises:
        QueryRefusedError: the client may not read the table's namespace.
    """
    refuse_unreadable(catalog, written, namespace, may_read)
    resolved = catalog.resolve(written, namespace)
    ns = resolved.name.namespace
    if not may_read(ns):
        raise QueryRefusedError(f"the token may not read namespace {ns!r} (needs read:{ns})")
    table = resolved.table  # a link's source: a link shows its source's columns
    # the newest version's columns, from the log (what a query reads), not the metastore's
    newest = columns_of(catalog.load(table), f"table {table.name}")
    columns = [(c.name, c.sql_type.lower(), "") for c in newest]
    columns.append((table.partition_column, "timestamp", f"partition ({table.mode.value} mode)"))
    return _rows(["col_name", "data_type", "comment"], columns)


NO_ROWS = "SELECT CAST(NULL AS STRING) AS `result` WHERE false"
"""What a statement that answers no rows (``USE``) runs."""


def refuse_unreadable(
    catalog: Catalog,
    written: str,
    namespace: str | None,
    may_read: Callable[[str], bool],
    who: str = "the token",
) -> None:
    """Refuse ``written`` (a name as a statement wrote it) if it names a namespace the client may not
    read — asked before the name is looked up, so a table there answers alike whether it exists or not.

    Raises:
        QueryRefusedError: naming the namespace and the scope it needs.
    """
    ref = Reference.parse(written)
    asked = ref.namespace or namespace
    if asked is None or ref.via is not None:  # a link of the session's namespace: checked once resolved
        return
    asked = catalog.namespaces.named(asked)
    if not may_read(asked):
        raise QueryRefusedError(f"{who} may not read namespace {asked!r} (needs read:{asked})")


def _readable(catalog: Catalog, may_read: Callable[[str], bool]) -> list[tuple[str, str, str]]:
    out = [
        (t.name.namespace, t.name.table, "table")
        for t in catalog.list_tables().merged()
        if may_read(t.name.namespace)
    ]
    for link in catalog.router.fan_out(lambda store: store.list_links()).merged():
        name: TableName = link.name
        if may_read(name.namespace) and not catalog.links.is_dangling(link):
            out.append((name.namespace, name.table, "link"))
    return out


def _rows(columns: Sequence[str], rows: Sequence[tuple[str, ...]]) -> str:
    """A Spark query of exactly ``rows`` (all STRING) with ``columns`` as names."""
    names = ", ".join(f"`{c}`" for c in columns)
    if not rows:
        nulls = ", ".join(f"CAST(NULL AS STRING) AS `{c}`" for c in columns)
        return f"SELECT {nulls} WHERE false"
    values = ", ".join("(" + ", ".join(_literal(v) for v in row) + ")" for row in rows)
    return f"SELECT * FROM VALUES {values} AS t({names})"


def _literal(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"

"""The catalog's retention settings (``catalog.retention``): a table's ``--retain``, its namespace's
default, and what applies to a table (its companions follow it). The rules are
:mod:`metastore.retention`'s; this module reads and writes them in the right metastore.
"""

from __future__ import annotations

from datetime import timedelta

from metastore.catalog.routing import Routing
from metastore.durations import format_duration
from metastore.errors import UserInputError
from metastore.models import TableKind, TableName, TableSpec
from metastore.models.tables import COMPANION_SUFFIX, Table
from metastore.retention import check_retain, effective_retain, retain_floor


def main_name(table: Table) -> TableName:
    """The main table a companion (``__dead_letter``, ``__late``) belongs to; a main table's own name."""
    if table.kind is TableKind.MAIN:
        return table.name
    suffix = COMPANION_SUFFIX[table.kind]
    return TableName(namespace=table.name.namespace, table=table.name.table.removesuffix(suffix))


class Retention:
    """Retention of a catalog's tables (reached as ``catalog.retention``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def of(self, table: Table) -> tuple[timedelta | None, str]:
        """The retention that applies to ``table`` (None: for ever) and its source (``table``,
        ``namespace``, ``none``); a companion's is its main table's."""
        store = self._routing.home(table).store
        if table.kind is not TableKind.MAIN:
            main = store.find_table(main_name(table))
            if main is not None:
                table = main
        namespace = store.find_namespace(table.name.namespace)
        return effective_retain(table, namespace.default_retain if namespace is not None else None)

    def set(self, table: Table, retain: timedelta | None) -> Table:
        """Set ``table``'s own retention (None: follow its namespace); refused below its floor, or on
        a companion (it follows its main table)."""
        self.check(table, retain)
        return self._routing.home(table, write=True).store.set_retain(table.id, retain)

    def check(self, table: Table, retain: timedelta | None) -> None:
        """Refuse what :meth:`set` refuses, changing nothing."""
        if table.kind is not TableKind.MAIN:
            raise UserInputError(
                f"{table.name} is the {table.kind.value} table of {main_name(table)} and keeps what its "
                f"main table keeps: set --retain on {main_name(table)}"
            )
        check_retain(table, retain)
        if retain is None:
            namespace = self._routing.home(table).store.find_namespace(table.name.namespace)
            check_retain(table, namespace.default_retain if namespace else None, "its namespace's --retain")

    def check_new(self, spec: TableSpec) -> None:
        """Refuse a new table whose retention (its own, else its namespace's) is below its floor."""
        check_retain(spec, spec.retain)
        if spec.retain is None and spec.kind is TableKind.MAIN:
            namespace = self._routing.home(spec.name).store.find_namespace(spec.name.namespace)
            if namespace is not None and namespace.default_retain is not None:
                check_retain(spec, namespace.default_retain, f"namespace {namespace.name}'s --retain")

    def check_default(self, namespace: str, default: timedelta | None) -> None:
        """Refuse a namespace default that would put a table following it below its floor (naming them)."""
        if default is None:
            return
        store = self._routing.home(namespace).store
        tables, _ = store.namespace_members(namespace)
        low = []
        for name in tables:
            table = store.find_table(TableName.parse(name))
            if table is None or table.kind is not TableKind.MAIN or table.retain is not None:
                continue
            if default < retain_floor(table):
                low.append(f"{table.name} (at least {format_duration(retain_floor(table))})")
        if low:
            raise UserInputError(
                f"--retain {format_duration(default)} is shorter than what these tables of {namespace} "
                f"need (they follow the namespace's default): {', '.join(low)}; give them --retain of "
                "their own first, or a longer default"
            )

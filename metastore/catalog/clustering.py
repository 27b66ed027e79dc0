"""The catalog's clustering settings (``catalog.clustering``): the columns a table's rolls order its
partitions' rows by, checked against its columns (:mod:`metastore.models.clustering`) and written in
the table's own metastore.
"""

from __future__ import annotations

from collections.abc import Sequence

from metastore.catalog.routing import Routing
from metastore.models.clustering import check_cluster_by
from metastore.models.tables import Table


class Clustering:
    """Clustering of a catalog's tables (reached as ``catalog.clustering``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def check(self, table: Table, names: Sequence[str], what: str = "--cluster-by") -> tuple[str, ...]:
        """``names`` as ``table`` spells them; UserInputError naming each one it cannot be ordered by."""
        return check_cluster_by(names, table.columns, what)

    def set(self, table: Table, names: Sequence[str], what: str = "--cluster-by") -> Table:
        """Order ``table``'s next rolls by ``names`` (empty: stop clustering); the table as it is now.
        Partitions rolled already keep their files until they roll no more: they are not rewritten."""
        checked = self.check(table, names, what)
        return self._routing.home(table, write=True).store.set_cluster_by(table.id, checked)

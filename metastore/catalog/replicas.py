"""The catalog's replicas (``catalog.replicas``): a table's secondaries on other clusters.

Each verb runs in the metastore of the table it is given (see :meth:`Routing.home`); the types,
copy states and back-off are :mod:`metastore.replicas`, copying partitions to them is the
scheduler's (:mod:`scheduler.replication`).
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime

from metastore import storage
from metastore.catalog.clusters import Clusters
from metastore.catalog.routing import Routing
from metastore.clusters import Cluster
from metastore.delta.metadata import schema_at
from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.models import Partition, Table, TableName
from metastore.replicas import Replica, replica_table


class Replicas:
    """The replicas of a catalog's tables (reached as ``catalog.replicas``)."""

    def __init__(self, routing: Routing, clusters: Clusters) -> None:
        self._routing = routing
        self._clusters = clusters

    def check_secondary(self, name: TableName, primary: Cluster, cluster: str) -> Cluster:
        """The cluster ``cluster``, if a table ``name`` living on ``primary`` may replicate to it.

        Raises:
            UserInputError: it is ``primary``, or shares its storage; NotFoundError: no such cluster.
        """
        if cluster == primary.name:
            raise UserInputError(
                f"{cluster} is the primary cluster of {name}: it holds all the data already; "
                "a replica goes to another cluster"
            )
        secondary = self._clusters.get(cluster)
        if storage.normalize(secondary.storage) == storage.normalize(primary.storage):
            raise UserInputError(
                f"clusters {cluster} and {primary.name} share the storage {secondary.storage}; "
                f"a replica of {name} on {cluster} would be the table itself"
            )
        return secondary

    def check(self, table: Table, cluster: str) -> None:
        """Raise what :meth:`add` would raise for ``cluster``, changing nothing."""
        self.check_secondary(table.name, self._clusters.get(table.cluster), cluster)
        if any(r.cluster == cluster for r in self.list(table)):
            raise AlreadyExistsError(f"table {table.name} replicates to {cluster} already")

    def add(self, table: Table, cluster: str) -> Replica:
        """Make ``cluster`` a secondary of ``table``: an empty Delta table there, recorded.

        The table there has the columns of the source's Delta log now (not those of ``table``, which
        may be an older reading, nor the metastore's, which a crashed schema change may leave behind
        the log): the first copies need no schema change; later ones bring any that come after.

        Its standard partitions are copied there by the roll daemon (or ``table replicate``).

        Raises:
            UserInputError: ``cluster`` is the table's primary, or shares its storage;
                NotFoundError: no such cluster; AlreadyExistsError: it is a replica already.
        """
        store = self._routing.home(table, write=True).store
        self.check(table, cluster)
        location = self._clusters.location(table.name, self._clusters.get(cluster))
        if storage.list_dir(location):
            raise UserInputError(
                f"{location} exists already and is not empty (left by an earlier table of that name?); "
                f"nothing of streampart's refers to it: delete it, then add the replica on {cluster} again"
            )
        try:
            replica = store.add_replica(table.id, cluster, location)
        except AlreadyExistsError:
            raise AlreadyExistsError(f"table {table.name} replicates to {cluster} already") from None
        try:
            columns = schema_at(table.location)
            self._routing.warehouse.create(
                replica_table(table.model_copy(update={"columns": columns}), replica)
            )
        except Exception:
            store.remove_replica(table.id, cluster)
            raise
        return replica

    def drop(self, table: Table, cluster: str) -> Replica:
        """Stop replicating ``table`` to ``cluster``: forget its copies there, then delete them."""
        try:
            replica = self._routing.home(table, write=True).store.remove_replica(table.id, cluster)
        except NotFoundError:
            raise self._none_on(table, cluster) from None
        storage.delete_tree(replica.location)
        return replica

    def list(self, table: Table) -> builtins.list[Replica]:
        """The secondaries of ``table``, by cluster name."""
        return self._routing.home(table).store.list_replicas(table.id)

    def get(self, table: Table, cluster: str) -> Replica:
        """The replica of ``table`` on ``cluster`` (NotFoundError naming the ones it has)."""
        try:
            return self._routing.home(table).store.get_replica(table.id, cluster)
        except NotFoundError:
            raise self._none_on(table, cluster) from None

    def _none_on(self, table: Table, cluster: str) -> NotFoundError:
        replicas = ", ".join(r.cluster for r in self.list(table)) or "none"
        return NotFoundError(f"table {table.name} has no replica on {cluster} (its replicas: {replicas})")

    def present_on(
        self, table: Table, cluster: str, partitions: Sequence[Partition] | None = None
    ) -> set[datetime]:
        """The partition values wholly present on ``cluster``: on the primary every partition,
        on a secondary the standard partitions copied there (none on any other cluster)."""
        store = self._routing.home(table).store
        if cluster == table.cluster:
            parts = partitions if partitions is not None else store.list_partitions(table.id)
            return {p.value for p in parts}
        return store.present_values(table.id, cluster)

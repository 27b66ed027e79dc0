"""The catalog's clusters (``catalog.clusters``): register, look up, list and remove them.

Clusters name no namespace, so they live in the primary metastore; the types and the checks of
their fields are :mod:`metastore.clusters`.
"""

from __future__ import annotations

import builtins

from metastore import storage
from metastore.catalog.routing import Routing
from metastore.clusters import (
    DEFAULT_CLUSTER,
    Cluster,
    check_cluster_name,
    check_spark_master,
    check_storage,
)
from metastore.errors import UserInputError
from metastore.federation import PRIMARY
from metastore.models import TableName
from metastore.router import FanOut


class Clusters:
    """The clusters of a catalog's federation (reached as ``catalog.clusters``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def add(self, name: str, storage: str, spark_master: str, conf: dict[str, str] | None = None) -> Cluster:
        """Register a cluster: its name, an existing writable storage root, a Spark master URL."""
        return self._routing.primary.add_cluster(
            check_cluster_name(name), check_storage(storage), check_spark_master(spark_master), conf
        )

    def get(self, name: str) -> Cluster:
        """The cluster ``name``; ``default`` is this process's warehouse (its master: spark.master)."""
        if name == DEFAULT_CLUSTER:
            return Cluster(name=DEFAULT_CLUSTER, storage=str(self._routing.warehouse.root), spark_master=None)
        return self._routing.primary.get_cluster(name)

    def list(self) -> builtins.list[Cluster]:
        """``default`` first, then every registered cluster by name."""
        return [self.get(DEFAULT_CLUSTER), *self._routing.primary.list_clusters()]

    def location(self, name: TableName, cluster: Cluster) -> str:
        """Where table ``name`` lives on ``cluster``: ``<storage>/<namespace>/<table>``."""
        if cluster.name == DEFAULT_CLUSTER:
            return self._routing.warehouse.location(name)
        return storage.join(cluster.storage, name.namespace, name.table)

    def users(self, name: str) -> FanOut[tuple[builtins.list[str], builtins.list[str]]]:
        """Per metastore: the tables living on cluster ``name``, and those replicating to it."""
        return self._routing.router.fan_out(
            lambda store: (store.tables_on_cluster(name), store.tables_replicated_on(name))
        )

    def remove(self, name: str) -> None:
        """Remove a cluster no table of any metastore uses (the primary checks its own tables in the
        transaction that removes it; the others are asked first)."""
        primary = self._routing.primary
        primary.get_cluster(check_cluster_name(name))  # NotFoundError first
        users = self.users(name)
        for metastore, (tables, replicas) in sorted(users.answers.items()):
            if metastore == PRIMARY:
                continue
            if tables:
                raise UserInputError(
                    f"cluster {name} is in use: tables {', '.join(tables[:5])} live there (in metastore "
                    f"{metastore}); drop or move them first"
                )
            if replicas:
                raise UserInputError(
                    f"cluster {name} is in use: it holds replicas of {', '.join(replicas[:5])} (in metastore "
                    f"{metastore}); drop them first (streampart table alter NS.T --drop-replica {name})"
                )
        if users.missing:
            raise UserInputError(
                f"cluster {name} may be in use in metastores that did not answer "
                f"({', '.join(sorted(users.missing))}); try again when they are back"
            )
        primary.remove_cluster(name)

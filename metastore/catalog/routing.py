"""Where a table or namespace lives: the one routing step every verb of the catalog goes through.

A catalog is *bound* to one metastore, its ``store``: the primary, as opened. Everything that
names a namespace is routed (:class:`~metastore.router.Router`) to the metastore that namespace
lives in, and everything about a table read from a metastore goes back to it (a table carries
its metastore's name; its row ids mean nothing elsewhere): :meth:`Routing.home`. What names no
namespace (clusters, tokens, the registry) lives in the primary, :attr:`Routing.primary`.
Writes check the access type of the namespace's metastore first (``home(…, write=True)``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Self, cast

from metastore.delta.warehouse import Warehouse
from metastore.federation import PRIMARY, may_write
from metastore.models import Table, TableName
from metastore.router import Router
from metastore.store import Metastore


@dataclass
class Routing:
    store: Metastore  # the metastore this catalog is bound to (the primary, unless routed)
    warehouse: Warehouse
    # The secrets federated metastores' URLs name (``[federation] secrets``): see resolve_url.
    secrets: Mapping[str, str] = field(default_factory=dict, repr=False)
    router: Router = field(init=False, repr=False)
    _bound: dict[str, Routing] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.router = Router(self.store, self.secrets)
        self._bound = {PRIMARY: self}

    def close(self) -> None:
        self.router.close()

    @property
    def primary(self) -> Metastore:
        """The primary metastore: clusters, tokens, the registry and routes, leases of no namespace."""
        return self.router.primary

    def on(self, metastore: str) -> Self:
        """This catalog bound to the metastore ``metastore`` (itself, if it is bound there).

        For what runs once per metastore (its daemons, its status); everything else asks
        :meth:`home` for the metastore of what it works on.
        """
        if metastore == self.store.name:
            return self
        store = self.router.store(metastore)
        bound = self._bound.get(metastore)
        if bound is None or bound.store is not store:  # first use, or its connection was reopened
            bound = copy.copy(self)  # shares the warehouse, the router and the bound catalogs
            bound.store = store
            self._bound[metastore] = bound
        return cast(Self, bound)  # a copy of this catalog, of its class

    def home(self, where: Table | TableName | str, *, write: bool = False) -> Self:
        """The catalog bound to the metastore ``where`` lives in.

        Args:
            where: A table: the metastore it was read from (its ids are that one's). A table's
                name or a namespace: the metastore the namespace is routed to.
            write: Check first that that metastore's access type lets the namespace be written.

        Raises:
            FederationAccessError: ``write``, and the metastore is read-only, or the namespace is
                outside its whitelist.
        """
        if isinstance(where, Table):
            metastore, namespace = where.metastore, where.name.namespace
        else:
            namespace = where.namespace if isinstance(where, TableName) else where
            metastore = self.router.metastore_of(namespace)
        if write:
            may_write(self.router.entry(metastore), namespace).check()
        return self.on(metastore)

    def check_creates(self, namespace: str) -> None:
        """Raise FederationAccessError if ``namespace`` is missing here and this metastore creates none."""
        if self.store.name != PRIMARY and self.store.find_namespace(namespace) is None:
            self.router.check_creates(self.store.name, namespace)

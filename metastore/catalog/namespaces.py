"""The catalog's namespaces (``catalog.namespaces``): create, look up, alter, drop, list and move them.

Each verb runs in the metastore the namespace lives in (see :meth:`Routing.home`); the types,
sizes and name checks are :mod:`metastore.namespaces`, moving one between metastores is
:mod:`metastore.moves`.
"""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import Any

from metastore.catalog.federation import FederationAdmin
from metastore.catalog.retention import Retention
from metastore.catalog.routing import Routing
from metastore.errors import AlreadyExistsError, UserInputError
from metastore.moves import NamespaceMover
from metastore.namespaces import Namespace, check_namespace
from metastore.router import FanOut


class Namespaces:
    """The namespaces of a catalog's federation (reached as ``catalog.namespaces``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def create(
        self,
        name: str,
        *,
        metastore: str | None = None,
        isolated: bool = False,
        quota_bytes: int | None = None,
        description: str = "",
        default_retain: timedelta | None = None,
    ) -> Namespace:
        """Create a namespace in its metastore: ``metastore`` (an explicit route, recorded first),
        else the one its name routes to (a prefix, else the primary).

        Raises:
            NotFoundError: no such metastore; FederationAccessError: its access type creates no
                namespace (or not this one); AlreadyExistsError: the namespace exists.
        """
        check_namespace(name)
        router = self._routing.router
        home = router.metastore_of(name) if metastore is None else metastore
        router.check_creates(home, name)
        if metastore is not None:
            current = router.metastore_of(name)
            if current != metastore and self.find(name) is not None:
                raise AlreadyExistsError(f"namespace {name} exists already (in metastore {current})")
            FederationAdmin(router).set_route(name, metastore)
        return self._routing.on(home).store.create_namespace(
            name,
            isolated=isolated,
            quota_bytes=quota_bytes,
            description=description,
            default_retain=default_retain,
        )

    def get(self, name: str) -> Namespace:
        """The namespace ``name``, from its metastore (NotFoundError naming the command that makes it)."""
        return self._routing.home(name).store.get_namespace(name)

    def find(self, name: str) -> Namespace | None:
        """The namespace ``name`` from its metastore, or None if it does not exist."""
        return self._routing.home(name).store.find_namespace(name)

    def alter(self, name: str, **changes: Any) -> Namespace:
        """Change a namespace's isolation, quota, description or default retention (in its metastore;
        a default some table following it could not have is refused, naming the tables)."""
        if changes.get("default_retain") is not None:
            Retention(self._routing).check_default(name, changes["default_retain"])
        return self._routing.home(name, write=True).store.alter_namespace(name, **changes)

    def drop(self, name: str) -> None:
        """Remove an empty namespace from its metastore, then its explicit route from the primary."""
        home = self._routing.home(name, write=True)
        home.store.drop_namespace(name)  # in the primary this drops its route in the same transaction
        if home.store is not self._routing.primary:
            self._routing.primary.remove_route(name)
            self._routing.router.refresh(force=True)

    def list(self) -> FanOut[builtins.list[Namespace]]:
        """Every namespace, each from the metastore it lives in (and which metastores did not answer).

        A namespace is listed from its home only: a copy elsewhere (a move's leftover, a clash
        settled by a route) is not shown twice.
        """
        router = self._routing.router
        found = router.fan_out(lambda store: store.list_namespaces())
        for name, namespaces in found.answers.items():
            found.answers[name] = [n for n in namespaces if router.metastore_of(n.name) == name]
        return found

    def named(self, name: str) -> str:
        """The namespace ``name`` stands for, as Spark matches names: exactly, else in any case if one
        namespace matches so (``name`` itself when none does; UserInputError when several do)."""
        if self.find(name) is not None:
            return name
        matches = {n.name for n in self.list().merged() if n.name.lower() == name.lower()}
        if len(matches) > 1:
            raise UserInputError(
                f"namespace {name!r} is ambiguous: {', '.join(sorted(matches))} differ only by case; "
                "write the name exactly"
            )
        return matches.pop() if matches else name

    def isolated(self, name: str) -> bool:
        """Whether namespace ``name`` exists and reads only its own tables and its links."""
        found = self.find(name)
        return found is not None and found.isolated

    def mover(self, **options: Any) -> NamespaceMover:
        """A :class:`~metastore.moves.NamespaceMover` over this catalog's federation (see its options)."""
        return NamespaceMover(self._routing.router, **options)

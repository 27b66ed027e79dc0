"""The catalog's links (``catalog.links``): create, find the source of, list, change and drop them.

Each verb runs in the metastore the link's namespace lives in, and looks its source up in the
source's (see :meth:`Routing.home`); the types and the rules of a link are :mod:`metastore.links`.
"""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from metastore import description
from metastore.catalog.routing import Routing
from metastore.errors import DanglingLinkError, NotFoundError, UserInputError
from metastore.links import Link, LinkMode, LinkSpec, check_static_values
from metastore.models import Table, TableName, iso
from metastore.router import FanOut
from metastore.store.namespaces import missing_namespace


class Links:
    """The links of a catalog's federation (reached as ``catalog.links``)."""

    def __init__(self, routing: Routing) -> None:
        self._routing = routing

    def create(self, spec: LinkSpec, *, create_namespace: bool = True) -> Link:
        """Link ``spec.source`` (a table of another namespace) into ``spec.name``'s namespace.

        Raises:
            UserInputError: the source is a link, is in the same namespace, or the partitions
                are not the source's; AlreadyExistsError: the local name is taken.
        """
        home = self._routing.home(spec.name, write=True)
        home.check_creates(spec.name.namespace)
        source = self.source_for(spec.name, spec.source)
        if not create_namespace and home.store.find_namespace(spec.name.namespace) is None:
            raise missing_namespace(spec.name.namespace)
        if spec.mode is LinkMode.STATIC:
            values = list(spec.partitions) + (spec.range.values(source) if spec.range else [])
            listed = self.static_values(source, values)
            spec = spec.model_copy(update={"partitions": listed, "range": None})
        elif spec.partitions:
            raise UserInputError("--partition lists the partitions of a static link: add --static")
        return home.store.create_link(spec, source, create_namespace=create_namespace)

    def find(self, name: TableName) -> Link | None:
        """The link ``name`` from its namespace's metastore, or None if there is none."""
        return self._routing.home(name).store.find_link(name)

    def list(self, namespace: str) -> builtins.list[Link]:
        """The links of ``namespace`` (from its metastore)."""
        return self._routing.home(namespace).store.list_links(namespace)

    def to(self, table: Table) -> FanOut[builtins.list[Link]]:
        """The links to ``table`` in every metastore of the federation (and which did not answer)."""
        return self._routing.router.fan_out(lambda store: store.links_to(table))

    def drop(self, link: Link) -> None:
        """Remove a link (its source is untouched)."""
        self._routing.home(link.name, write=True).store.drop_link(link)

    def source(self, link: Link) -> Table:
        """The table a link reads, in whichever metastore its namespace lives (DanglingLinkError if
        it was dropped, even if a table of that name was made since: the uid tells them apart)."""
        if link.source_uid is not None:
            found = self._routing.home(link.source).store.find_table(link.source)
            if found is not None and found.uid == link.source_uid:
                return found
        elif link.source_table_id is not None:  # recorded before uids: source in the link's metastore
            try:
                return self._routing.home(link.name).store.get_table_by_id(link.source_table_id)
            except NotFoundError:
                pass
        raise DanglingLinkError(
            f"link {link.name}: its source {link.source} was dropped; drop the link "
            f"(streampart link drop {link.name})"
        )

    def source_for(self, name: TableName, source: TableName) -> Table:
        """The table a new link ``name`` may point at: ``source``, a table of another namespace.

        Raises:
            UserInputError: ``source`` is in ``name``'s namespace, or is a link (links point at
                tables only, so they form no chains or cycles); NotFoundError: there is no such table.
        """
        if source.namespace == name.namespace:
            raise UserInputError(
                f"{source} is in namespace {name.namespace} already; a link imports a table of another "
                "namespace"
            )
        home = self._routing.home(source).store
        source_link = home.find_link(source)
        if source_link is not None:
            raise UserInputError(
                f"{source} is a link (to {source_link.source}); link to {source_link.source} itself "
                "(links point at tables, never at links, so they form no chains or cycles)"
            )
        return home.get_table(source)

    def is_dangling(self, link: Link) -> bool:
        """Whether ``link``'s source was dropped (looked up in the source's metastore, by uid)."""
        try:
            self.source(link)
        except DanglingLinkError:
            return True
        return False

    def info(self, link: Link) -> dict[str, Any]:
        """``link``'s settings as ``link describe --json`` shows them (see description.link_info)."""
        return description.link_info(link, dangling=self.is_dangling(link))

    def static_values(self, source: Table, values: Sequence[datetime]) -> tuple[datetime, ...]:
        """``values`` checked as partitions a static link of ``source`` may list (see check_static_values)."""
        existing = [p.value for p in self._routing.home(source).store.list_partitions(source.id)]
        return check_static_values(source, values, existing)

    def set_partitions(
        self,
        link: Link,
        add: builtins.list[datetime] | tuple[datetime, ...] = (),
        drop: builtins.list[datetime] | tuple[datetime, ...] = (),
    ) -> Link:
        """Add or drop partitions of a static link (added values must be the source's partitions or
        period starts; dropped ones must be listed: a typo changes nothing, rather than nothing silently)."""
        missing = [iso(v) for v in drop if v not in link.partitions]
        if missing and link.mode is LinkMode.STATIC:
            raise UserInputError(f"link {link.name} does not list {', '.join(missing)}; nothing was changed")
        return self._routing.home(link.name, write=True).store.set_link_partitions(
            link, self.static_values(self.source(link), add), drop
        )

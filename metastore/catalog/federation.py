"""The federation's administration: register, list, probe, alter and remove metastores, route namespaces.

What ``streampart federation …`` (and its HTTP twin) does, over the registry and the route table
in the primary. Routing itself is the :class:`~metastore.router.Router`'s; a catalog reaches
this as ``catalog.federation`` (``catalog.federation.add(…)``, ``.route(…)`` and the like).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from metastore.errors import AlreadyExistsError, MetastoreUnavailableError, UserInputError
from metastore.federation import (
    PRIMARY,
    AccessType,
    FederatedMetastore,
    check_access,
    check_metastore_name,
    check_prefix,
    check_url,
    primary,
    probe,
    resolve_url,
)
from metastore.models import iso
from metastore.namespaces import check_namespace
from metastore.router import Router
from metastore.store import Metastore, normalize_url


def metastore_info(
    metastore: FederatedMetastore, routes: Mapping[str, str], error: str | bool | None = False
) -> dict[str, Any]:
    """A metastore as ``federation … --json`` and ``/v1/admin/federation/…`` show it.

    Args:
        routes: The explicit routes (those naming ``metastore`` are listed).
        error: Its probe's answer: None if it is up, why not if it is down; False: not probed (no
            ``health`` and ``error`` keys then).
    """
    info: dict[str, Any] = {
        "metastore": metastore.name,
        "url": metastore.url,
        "access": metastore.access.value,
        "writable": list(metastore.writable),
        "prefix": metastore.prefix,
        "routes": sorted(ns for ns, target in routes.items() if target == metastore.name),
        "created_at": iso(metastore.created_at) if metastore.created_at else None,
    }
    if error is not False:
        info["health"] = "up" if error is None else "down"
        info["error"] = error
    return info


class FederationAdmin:
    """The registry and routes of the federation a router serves (changes reach it at once)."""

    def __init__(self, router: Router) -> None:
        self.router = router

    @property
    def primary(self) -> Metastore:
        return self.router.primary

    @property
    def secrets(self) -> Mapping[str, str]:
        return self.router.secrets

    def add(
        self,
        name: str,
        url: str,
        access: AccessType | str,
        writable: Sequence[str] = (),
        prefix: str | None = None,
        routes: Mapping[str, str] | None = None,
    ) -> FederatedMetastore:
        """Register a federated metastore: checked, reached, migrated, then recorded in the primary.

        Args:
            url: Its URL, stored as given: a password only as a secret, ``${NAME}``.
            routes: Explicit placements recorded with it, namespace → ``primary`` or ``name``: how a
                namespace present in both the primary and the new metastore is settled.

        Raises:
            UserInputError: a bad name, access, pattern, prefix or URL; a clear-text password;
                an unknown secret; the URL unreachable; namespaces in both metastores not routed;
                AlreadyExistsError: the name is taken. Nothing is recorded then.
        """
        check_metastore_name(name)
        try:
            access = AccessType(access)
        except ValueError:
            raise UserInputError(
                f"access {access!r} is not one of {', '.join(a.value for a in AccessType)}"
            ) from None
        patterns = check_access(access, writable)
        check_prefix(prefix)
        check_url(url)
        routes = dict(routes or {})
        for namespace, target in routes.items():
            check_namespace(namespace)
            if target not in (PRIMARY, name):
                raise UserInputError(
                    f"--route {namespace}={target}: a namespace in both metastores is routed to "
                    f"{PRIMARY} or to {name}"
                )
        if any(m.name == name for m in self.primary.list_metastores()):
            raise AlreadyExistsError(f"metastore {name} exists already")
        real = normalize_url(resolve_url(url, self.secrets))
        self._check_distinct(name, real)
        error = probe(real, new=True)
        if error is not None:
            raise UserInputError(f"metastore {name} is unreachable at {url}: {error}; nothing was recorded")
        new = Metastore(real, migrate=False)
        try:
            clashes = self._clashes(new, routes)
            if clashes:
                first = clashes[0]
                raise UserInputError(
                    f"namespaces {', '.join(clashes)} exist both in the primary and in {name}: one would "
                    f"shadow the other. Route each explicitly, to keep the primary's or to use {name}'s: "
                    f"add --route {first}={PRIMARY} or --route {first}={name} (one per namespace) to "
                    f"`streampart federation add`; nothing was recorded"
                )
            new.migrate()
        finally:
            new.close()
        added = self.primary.add_metastore(name, url, access, patterns, prefix, routes)
        self.router.refresh(force=True)
        return added

    def _check_distinct(self, name: str, real: str) -> None:
        """The new metastore's database is neither the primary's nor a registered one's."""
        if real == self.primary.url:
            raise UserInputError(f"metastore {name}'s URL is the primary's own database: nothing to federate")
        for other in self.primary.list_metastores():
            try:
                same = normalize_url(resolve_url(other.url, self.secrets)) == real
            except UserInputError:
                continue  # its secret is missing here: it cannot be compared, nor reached
            if same:
                raise UserInputError(f"metastore {other.name} has that database already")

    def _clashes(self, new: Metastore, routes: Mapping[str, str]) -> list[str]:
        """Namespaces present in both the primary and ``new`` that no explicit route settles."""
        import sqlalchemy as sa

        with new.read_tx() as conn:
            if not sa.inspect(conn).has_table("sp_namespaces"):
                return []  # an empty database (or one older than namespaces): nothing to clash
        theirs = {n.name for n in new.list_namespaces()}
        routed = {**self.primary.routes(), **routes}
        ours = [n.name for n in self.primary.list_namespaces()]
        return sorted(n for n in ours if n in theirs and n not in routed)

    def get(self, name: str) -> FederatedMetastore:
        """The metastore ``name``; ``primary`` is this process's own (``--metastore``)."""
        if name == PRIMARY:
            return primary(self.primary.safe_url)
        return self.primary.get_metastore(name)

    def list(self) -> list[FederatedMetastore]:
        """``primary`` first, then every registered metastore by name."""
        return [self.get(PRIMARY), *self.primary.list_metastores()]

    def remove(self, name: str) -> None:
        """Remove a metastore from the registry (refused while namespaces are placed there).

        The primary refuses while explicit routes name it; namespaces its prefix placed live in its
        own database, so they are looked up there (refused if it cannot be reached).
        """
        entry = self.router.entry(check_metastore_name(name))
        held = self._placed_by_prefix(entry)
        if held:
            raise UserInputError(
                f"metastore {name} is in use: namespaces {', '.join(held)} have its prefix "
                f"{entry.prefix}; drop them first, or move each elsewhere (streampart namespace move)"
            )
        self.primary.remove_metastore(name)
        self.router.refresh(force=True)

    def _placed_by_prefix(self, entry: FederatedMetastore) -> builtins.list[str]:
        """The namespaces in ``entry``'s database that its prefix places there (no explicit route).

        Raises:
            UserInputError: its database cannot be read now (nothing can be decided about them).
        """
        if not entry.prefix:
            return []
        name, prefix = entry.name, entry.prefix
        routes = self.primary.routes()
        try:
            return [
                n.name
                for n in self.router.store(name).list_namespaces()
                if n.name.startswith(prefix) and n.name not in routes
            ]
        except MetastoreUnavailableError as exc:
            raise UserInputError(
                f"metastore {name} cannot be checked for namespaces its prefix {prefix} placed "
                f"there: {exc}; try again when it answers"
            ) from None

    def alter(
        self,
        name: str,
        *,
        access: AccessType | str | None = None,
        writable: Sequence[str] | None = None,
        prefix: str | None = None,
        no_prefix: bool = False,
    ) -> FederatedMetastore:
        """Change a metastore's access type, whitelist or prefix; every process follows within its
        refresh interval (the route-table version is bumped with the change).

        Args:
            access: The new access type (absent: unchanged).
            writable: The new whitelist, replacing the old one (absent: kept while the access type
                has a whitelist, dropped when it has none).
            prefix: A new prefix, checked for collisions as ``add`` checks one; ``no_prefix``: none.

        Raises:
            NotFoundError: no such metastore. UserInputError: nothing to change; a bad access type,
                pattern or prefix; ``prefix`` with ``no_prefix``; a new prefix overlapping another's
                or claiming namespaces of the primary; the old prefix still placing namespaces
                there that the new one would not (they would vanish from view).
        """
        if name == PRIMARY:
            raise UserInputError(
                f"metastore {PRIMARY} is the one a process starts with (--metastore): it writes and "
                "creates every namespace, and has no access type, whitelist or prefix to alter"
            )
        check_metastore_name(name)
        if prefix is not None and no_prefix:
            raise UserInputError("--prefix sets a prefix and --no-prefix removes it: give one of them")
        if access is None and writable is None and prefix is None and not no_prefix:
            raise UserInputError(
                f"nothing to alter for metastore {name}: give --access, --writable, --prefix or --no-prefix"
            )
        current = self.primary.get_metastore(name)  # NotFoundError for an unknown one
        if access is None:
            new_access = current.access
        else:
            try:
                new_access = AccessType(access)
            except ValueError:
                raise UserInputError(
                    f"access {access!r} is not one of {', '.join(a.value for a in AccessType)}"
                ) from None
        if writable is None:
            writable = current.writable if new_access.whitelisted else ()
        patterns = check_access(new_access, writable)
        new_prefix = None if no_prefix else check_prefix(prefix) if prefix is not None else current.prefix
        if current.prefix and new_prefix != current.prefix:
            left = [
                n for n in self._placed_by_prefix(current) if not (new_prefix and n.startswith(new_prefix))
            ]
            if left:
                then = "without a prefix" if new_prefix is None else f"with the prefix {new_prefix}"
                raise UserInputError(
                    f"metastore {name}'s prefix {current.prefix} places namespaces {', '.join(left)} there; "
                    f"{then} they would route elsewhere and vanish from view. Route each there first "
                    f"(streampart federation route {left[0]} --to {name}), or drop them"
                )
        altered = self.primary.alter_metastore(name, new_access, patterns, new_prefix)
        self.router.refresh(force=True)
        return altered

    def healths(self, metastores: Sequence[FederatedMetastore]) -> builtins.list[str | None]:
        """Each metastore's live probe (as :meth:`health`), all at once: one dead host costs one probe
        timeout, not one each."""
        with ThreadPoolExecutor(max_workers=min(8, len(metastores)) or 1) as pool:
            return list(pool.map(self.health, metastores))

    def listed(self) -> builtins.list[dict[str, Any]]:
        """Every metastore (the primary first) as :func:`metastore_info`, each probed live."""
        metastores, routes = self.list(), self.primary.routes()
        errors = self.healths(metastores)
        return [metastore_info(m, routes, e) for m, e in zip(metastores, errors, strict=True)]

    def described(self, name: str) -> dict[str, Any]:
        """The metastore ``name`` as :func:`metastore_info`, probed live (NotFoundError if unknown)."""
        metastore = self.get(name)
        return metastore_info(metastore, self.primary.routes(), self.health(metastore))

    def health(self, metastore: FederatedMetastore) -> str | None:
        """None if ``metastore`` answers a live probe now (short timeout), else why not."""
        url = self.primary.url if metastore.is_primary else metastore.url
        try:
            real = normalize_url(resolve_url(url, self.secrets))
        except UserInputError as exc:
            return str(exc)
        return probe(real)

    def route(self, namespace: str, metastore: str, *, force: bool = False) -> str:
        """Route ``namespace`` to ``metastore`` (``federation route``); returns where it lived before.

        Data and metadata stay where they are: a route only says where the namespace is looked up.
        So a namespace whose current home holds tables or links, while ``metastore`` does not have
        it, is refused unless ``force`` (it would vanish from view): ``namespace move`` moves it.

        A namespace that ``metastore`` does not have and whose access type would never let it be
        created there (:meth:`Router.check_creates`, the rule ``namespace create`` applies) is
        refused too, ``force`` or not: it could never be created nor written there.

        Raises:
            NotFoundError: no such metastore; UserInputError: as above; FederationAccessError:
                ``metastore`` creates no such namespace.
        """
        check_namespace(namespace)
        self.router.entry(metastore)  # NotFoundError for an unknown one
        current = self.router.metastore_of(namespace)
        if current == metastore:
            if self.primary.routes().get(namespace) != metastore:
                self.set_route(namespace, metastore)  # pin it (a prefix or the default placed it)
            return current
        there = self.router.store(metastore).find_namespace(namespace)
        if there is None and not force:
            tables, links = self.router.store(current).namespace_members(namespace)
            if tables or links:
                raise UserInputError(
                    f"namespace {namespace} lives in metastore {current} with {len(tables)} table(s) and "
                    f"{len(links)} link(s), and {metastore} does not have it: routing it there would hide "
                    f"them. Move it instead (streampart namespace move {namespace} --to {metastore}), or "
                    "add --force"
                )
        if there is None:  # it would have to be made there: as `namespace create` checks
            self.router.check_creates(metastore, namespace)
        self.set_route(namespace, metastore)
        return current

    def set_route(self, namespace: str, metastore: str) -> None:
        """Route ``namespace`` to ``metastore`` explicitly (a new namespace, or a move's flip)."""
        self.primary.set_route(namespace, metastore)
        self.router.refresh(force=True)

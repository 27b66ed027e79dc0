"""The federation's administration: register, list, probe and remove metastores, route namespaces.

What ``streampart federation …`` (and its HTTP twin) does, over the registry and the route table
in the primary. Routing itself is the :class:`~metastore.router.Router`'s; the catalog exposes
these as ``catalog.add_metastore`` and the like.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
from metastore.namespaces import check_namespace
from metastore.router import Router
from metastore.store import Metastore, normalize_url


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
        if entry.prefix:
            routes = self.primary.routes()
            try:
                held = [
                    n.name
                    for n in self.router.store(name).list_namespaces()
                    if n.name.startswith(entry.prefix) and routes.get(n.name, name) == name
                ]
            except MetastoreUnavailableError as exc:
                raise UserInputError(
                    f"metastore {name} cannot be checked for namespaces its prefix {entry.prefix} placed "
                    f"there: {exc}; try again when it answers"
                ) from None
            if held:
                raise UserInputError(
                    f"metastore {name} is in use: namespaces {', '.join(held)} have its prefix "
                    f"{entry.prefix}; drop them first, or move each elsewhere (streampart namespace move)"
                )
        self.primary.remove_metastore(name)
        self.router.refresh(force=True)

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

        Raises:
            NotFoundError: no such metastore; UserInputError: as above.
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
        self.set_route(namespace, metastore)
        return current

    def set_route(self, namespace: str, metastore: str) -> None:
        """Route ``namespace`` to ``metastore`` explicitly (a new namespace, or a move's flip)."""
        self.primary.set_route(namespace, metastore)
        self.router.refresh(force=True)

"""Federation: the registry of federated metastores, explicit routes, the route table's version.

All three live in the primary. Every change of the registry or of the routes bumps the one-row
route-table version in the same transaction, so a process that caches the route table polls a
single number to know when to read it again (and never sees a change without its bump).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.federation import PRIMARY, AccessType, FederatedMetastore
from metastore.namespaces import check_namespace
from metastore.store.engine import Database, _db, _now, _out, locking


def metastore_from_row(row: Any) -> FederatedMetastore:
    m = row._mapping
    return FederatedMetastore(
        name=m["name"],
        url=m["url"],
        access=AccessType(m["access"]),
        writable=tuple(m["writable"] or ()),
        prefix=m["prefix"],
        created_at=_out(m["created_at"]),
    )


def unknown_metastore(name: str) -> NotFoundError:
    return NotFoundError(f"metastore {name} does not exist (streampart federation list shows the metastores)")


def bump_route_version(conn: Connection) -> None:
    """Bump the route table's version, inside the transaction that changes the registry or routes."""
    v = s.route_version.c
    conn.execute(sa.update(s.route_version).where(v.id == 1).values(version=v.version + 1))


def _lock_registry(conn: Connection) -> None:
    """Serialise registry changes (PostgreSQL: the version row; SQLite holds its write lock)."""
    conn.execute(locking(conn, sa.select(s.route_version.c.version).where(s.route_version.c.id == 1)))


def _routes(conn: Connection) -> dict[str, str]:
    r = s.routes.c
    return dict(conn.execute(sa.select(r.namespace, r.metastore).order_by(r.namespace)).all())


def _prefixed(conn: Connection, prefix: str) -> list[str]:
    """The primary's namespaces whose names start with ``prefix``."""
    n = s.namespaces.c
    names = conn.execute(sa.select(n.name).order_by(n.name)).scalars()
    return [x for x in names if x.startswith(prefix)]


class FederationStore(Database):
    """The federation's registry and route table (in the primary)."""

    def add_metastore(
        self,
        name: str,
        url: str,
        access: AccessType,
        writable: Sequence[str] = (),
        prefix: str | None = None,
        routes: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> FederatedMetastore:
        """Record a metastore (the catalog has checked it), with the explicit ``routes`` that came with it.

        Checked here, in the same transaction: its prefix overlaps no other metastore's, and every
        namespace of the primary that the prefix would claim is routed explicitly.

        Raises:
            AlreadyExistsError: a metastore of that name exists; UserInputError: the prefix
                overlaps another's or claims namespaces of the primary (naming them).
        """
        routes = dict(routes or {})
        try:
            with self.tx() as conn:
                _lock_registry(conn)
                if conn.execute(sa.select(s.metastores.c.name).where(s.metastores.c.name == name)).first():
                    raise AlreadyExistsError(f"metastore {name} exists already")
                if prefix is not None:
                    self._check_prefix(conn, name, prefix, routes)
                conn.execute(
                    sa.insert(s.metastores).values(
                        name=name,
                        url=url,
                        access=access.value,
                        writable=list(writable),
                        prefix=prefix,
                        created_at=_db(now or _now()),
                    )
                )
                for namespace, target in routes.items():
                    self._route(conn, namespace, target, now)
                bump_route_version(conn)
        except IntegrityError:
            raise AlreadyExistsError(f"metastore {name} exists already") from None
        return self.get_metastore(name)

    def alter_metastore(
        self, name: str, access: AccessType, writable: Sequence[str], prefix: str | None
    ) -> FederatedMetastore:
        """Change a metastore's access type, whitelist and prefix (the catalog has checked them).

        A new prefix is checked here, in the same transaction, as :meth:`add_metastore` checks one;
        the route-table version is bumped with the change, so every process sees it within its
        refresh interval.

        Raises:
            NotFoundError: no such metastore; UserInputError: the new prefix overlaps another's or
                claims namespaces of the primary (naming them).
        """
        m = s.metastores.c
        with self.tx() as conn:
            _lock_registry(conn)
            row = conn.execute(sa.select(s.metastores).where(m.name == name)).first()
            if row is None:
                raise unknown_metastore(name)
            if prefix is not None and prefix != row._mapping["prefix"]:
                self._check_prefix(conn, name, prefix, {}, hint="alter")
            conn.execute(
                sa.update(s.metastores)
                .where(m.name == name)
                .values(access=access.value, writable=list(writable), prefix=prefix)
            )
            bump_route_version(conn)
        return self.get_metastore(name)

    def _check_prefix(
        self, conn: Connection, name: str, prefix: str, routes: Mapping[str, str], hint: str = "add"
    ) -> None:
        m = s.metastores.c
        others = sa.select(m.name, m.prefix).where(m.prefix.is_not(None), m.name != name)
        for other, theirs in conn.execute(others).all():
            if theirs.startswith(prefix) or prefix.startswith(theirs):
                raise UserInputError(
                    f"prefix {prefix} overlaps the prefix {theirs} of metastore {other}: a namespace "
                    "named with both would have two homes; choose a prefix neither starts the other"
                )
        routed = {**_routes(conn), **routes}
        claimed = [ns for ns in _prefixed(conn, prefix) if ns not in routed]
        if claimed:
            shown = ", ".join(claimed[:10]) + (f" and {len(claimed) - 10} more" if len(claimed) > 10 else "")
            settle = (
                f"--route {claimed[0]}={PRIMARY} (keep it on the primary) to `streampart federation add`"
                if hint == "add"
                else f"streampart federation route {claimed[0]} --to {PRIMARY} first (keeps it there)"
            )
            raise UserInputError(
                f"prefix {prefix} collides with namespaces of the primary: {shown}; the prefix would "
                f"move them to {name}. Choose another prefix, or route each explicitly: {settle}"
            )

    def get_metastore(self, name: str) -> FederatedMetastore:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.metastores).where(s.metastores.c.name == name)).first()
        if row is None:
            raise unknown_metastore(name)
        return metastore_from_row(row)

    def list_metastores(self) -> list[FederatedMetastore]:
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.metastores).order_by(s.metastores.c.name)).all()
        return [metastore_from_row(r) for r in rows]

    def remove_metastore(self, name: str) -> None:
        """Remove a metastore no namespace is placed on: by a route, or by its prefix (in the primary)."""
        with self.tx() as conn:
            _lock_registry(conn)
            row = conn.execute(sa.select(s.metastores).where(s.metastores.c.name == name)).first()
            if row is None:
                raise unknown_metastore(name)
            routes = _routes(conn)
            routed = [ns for ns, target in routes.items() if target == name]
            if routed:
                raise UserInputError(
                    f"metastore {name} is in use: namespaces {', '.join(routed)} are routed there; "
                    "drop them first, or move each elsewhere (streampart namespace move)"
                )
            prefix = metastore_from_row(row).prefix
            prefixed = [ns for ns in _prefixed(conn, prefix) if ns not in routes] if prefix else []
            if prefixed:
                raise UserInputError(
                    f"metastore {name} is in use: namespaces {', '.join(prefixed)} have its prefix {prefix}; "
                    "drop them first, or move each elsewhere (streampart namespace move)"
                )
            conn.execute(sa.delete(s.metastores).where(s.metastores.c.name == name))
            bump_route_version(conn)

    def set_route(self, namespace: str, metastore: str, now: datetime | None = None) -> None:
        """Place ``namespace`` on ``metastore`` (a registered name, or ``primary``) explicitly."""
        check_namespace(namespace)
        with self.tx() as conn:
            _lock_registry(conn)
            self._route(conn, namespace, metastore, now)
            bump_route_version(conn)

    def remove_route(self, namespace: str) -> None:
        """Forget ``namespace``'s explicit route (it was dropped): its name routes by prefix again."""
        with self.tx() as conn:
            _lock_registry(conn)
            if conn.execute(sa.delete(s.routes).where(s.routes.c.namespace == namespace)).rowcount:
                bump_route_version(conn)

    def _route(self, conn: Connection, namespace: str, metastore: str, now: datetime | None) -> None:
        m, r = s.metastores.c, s.routes.c
        known = conn.execute(sa.select(m.name).where(m.name == metastore)).first() is not None
        if metastore != PRIMARY and not known:
            raise unknown_metastore(metastore)
        updated = conn.execute(
            sa.update(s.routes).where(r.namespace == namespace).values(metastore=metastore)
        )
        if updated.rowcount == 0:
            conn.execute(
                sa.insert(s.routes).values(
                    namespace=namespace, metastore=metastore, created_at=_db(now or _now())
                )
            )

    def routes(self) -> dict[str, str]:
        """The explicit routes: namespace → metastore name, by namespace."""
        with self.read_tx() as conn:
            return _routes(conn)

    def route_version(self) -> int:
        """The route table's version: it grows with every change of the registry or the routes."""
        with self.read_tx() as conn:
            return int(conn.execute(sa.select(s.route_version.c.version)).scalar_one())

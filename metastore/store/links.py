"""Links: rows that import another namespace's table, and the partitions static links list.

A link's name shares its namespace's name space with the tables there: both are checked under
the namespace's row lock (see ``namespaces.py``), so no name is ever a table and a link at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.links import Link, LinkMode, LinkSpec, PartitionRange
from metastore.models import Table, TableName
from metastore.store.engine import Database, _db, _now, _out
from metastore.store.namespaces import ensure_namespace, fence_namespace


def link_from_row(row: Any, values: Sequence[datetime]) -> Link:
    m = row._mapping
    start, end = _out(m["range_start"]), _out(m["range_end"])
    return Link(
        id=m["id"],
        name=TableName(namespace=m["namespace"], table=m["name"]),
        source=TableName(namespace=m["source_namespace"], table=m["source_name"]),
        source_table_id=m["source_table_id"],
        source_uid=m["source_uid"],
        mode=LinkMode(m["mode"]),
        include_streaming=bool(m["include_streaming"]),
        retention=None if m["retention_s"] is None else timedelta(seconds=m["retention_s"]),
        range=None if start is None and end is None else PartitionRange(start=start, end=end),
        partitions=tuple(sorted(values)),
        created_at=_out(m["created_at"]),
    )


def table_named(conn: Connection, name: TableName) -> Any:
    return conn.execute(
        sa.select(s.tables.c.id).where(s.tables.c.namespace == name.namespace, s.tables.c.name == name.table)
    ).first()


def link_named(conn: Connection, name: TableName) -> Any:
    return conn.execute(
        sa.select(s.links).where(s.links.c.namespace == name.namespace, s.links.c.name == name.table)
    ).first()


class LinkStore(Database):
    """Links between namespaces."""

    def create_link(
        self,
        spec: LinkSpec,
        source: Table,
        *,
        create_namespace: bool = True,
        now: datetime | None = None,
    ) -> Link:
        """Record a link (the catalog has checked its source, which may live in another metastore).

        Raises:
            AlreadyExistsError: a table or a link of that name exists in the namespace.
        """
        now = now or _now()
        try:
            with self.tx() as conn:
                ensure_namespace(conn, spec.name.namespace, create_namespace, now)
                if table_named(conn, spec.name) is not None:
                    raise AlreadyExistsError(f"{spec.name} is a table already; choose another local name")
                if link_named(conn, spec.name) is not None:
                    raise AlreadyExistsError(f"link {spec.name} exists already")
                result = conn.execute(
                    sa.insert(s.links).values(
                        namespace=spec.name.namespace,
                        name=spec.name.table,
                        source_namespace=spec.source.namespace,
                        source_name=spec.source.table,
                        source_table_id=source.id if source.metastore == self.name else None,
                        source_uid=source.uid or None,
                        mode=spec.mode.value,
                        include_streaming=spec.include_streaming,
                        retention_s=None if spec.retention is None else int(spec.retention.total_seconds()),
                        range_start=_db(spec.range.start) if spec.range else None,
                        range_end=_db(spec.range.end) if spec.range else None,
                        created_at=_db(now),
                    )
                )
                link_id = int(result.inserted_primary_key[0])  # type: ignore[index]
                _insert_values(conn, link_id, spec.partitions)
        except IntegrityError:
            raise AlreadyExistsError(f"link {spec.name} exists already") from None
        return self.get_link(spec.name)

    def get_link(self, name: TableName) -> Link:
        found = self.find_link(name)
        if found is None:
            raise NotFoundError(f"link {name} does not exist")
        return found

    def find_link(self, name: TableName) -> Link | None:
        with self.read_tx() as conn:
            row = link_named(conn, name)
            return None if row is None else self._with_values(conn, [row])[0]

    def list_links(self, namespace: str | None = None) -> list[Link]:
        q = sa.select(s.links)
        if namespace is not None:
            q = q.where(s.links.c.namespace == namespace)
        with self.read_tx() as conn:
            rows = conn.execute(q.order_by(s.links.c.namespace, s.links.c.name)).all()
            return self._with_values(conn, rows)

    def links_to(self, table: Table) -> list[Link]:
        """The links here whose source is ``table`` (which may live in another metastore)."""
        c = s.links.c
        match = c.source_uid == table.uid if table.uid else c.source_table_id == table.id
        if table.metastore == self.name and table.uid:
            match = sa.or_(match, c.source_table_id == table.id)
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.links).where(match).order_by(c.id)).all()
            return self._with_values(conn, rows)

    def links_from(self, namespace: str, source: TableName) -> list[Link]:
        """The links of ``namespace`` whose source is named ``source`` (what ``T@B`` may mean)."""
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(s.links)
                .where(
                    s.links.c.namespace == namespace,
                    s.links.c.source_namespace == source.namespace,
                    s.links.c.source_name == source.table,
                )
                .order_by(s.links.c.name)
            ).all()
            return self._with_values(conn, rows)

    def set_link_partitions(
        self, link: Link, add: Sequence[datetime] = (), drop: Sequence[datetime] = ()
    ) -> Link:
        """Add and drop partitions a static link lists."""
        if link.mode is not LinkMode.STATIC:
            raise UserInputError(
                f"link {link.name} is dynamic: it follows its source's partitions; only a static link "
                "(link create --static) lists partitions by hand"
            )
        with self.tx() as conn:
            fence_namespace(conn, link.name.namespace, share=True)
            if link_named(conn, link.name) is None:
                raise NotFoundError(f"link {link.name} does not exist")
            lp = s.link_partitions.c
            if drop:
                conn.execute(
                    sa.delete(s.link_partitions).where(
                        lp.link_id == link.id, lp.value.in_([_db(v) for v in drop])
                    )
                )
            have = {_out(v) for v in conn.execute(sa.select(lp.value).where(lp.link_id == link.id)).scalars()}
            _insert_values(conn, link.id, [v for v in add if v not in have])
        return self.get_link(link.name)

    def drop_link(self, link: Link) -> None:
        with self.tx() as conn:
            fence_namespace(conn, link.name.namespace, share=True)
            conn.execute(sa.delete(s.link_partitions).where(s.link_partitions.c.link_id == link.id))
            conn.execute(sa.delete(s.links).where(s.links.c.id == link.id))

    @staticmethod
    def _with_values(conn: Connection, rows: Sequence[Any]) -> list[Link]:
        ids = [r.id for r in rows]
        values: dict[int, list[datetime]] = {i: [] for i in ids}
        if ids:
            lp = s.link_partitions.c
            for link_id, value in conn.execute(
                sa.select(lp.link_id, lp.value).where(lp.link_id.in_(ids))
            ).all():
                values[link_id].append(_out(value))  # type: ignore[arg-type]
        return [link_from_row(r, values[r.id]) for r in rows]


def _insert_values(conn: Connection, link_id: int, values: Sequence[datetime]) -> None:
    if values:
        conn.execute(
            sa.insert(s.link_partitions), [{"link_id": link_id, "value": _db(v)} for v in sorted(set(values))]
        )

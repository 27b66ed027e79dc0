"""Delta Sharing's shares (in the primary metastore), and the secrets server processes share."""

from __future__ import annotations

import builtins
import secrets
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.errors import AlreadyExistsError, NotFoundError
from metastore.models import Share, TableName, check_share_name
from metastore.store.engine import Database, _db, _now, _out


def _share(row: Any, tables: builtins.list[TableName]) -> Share:
    m = row._mapping
    return Share(
        id=m["id"],
        name=m["name"],
        comment=m["comment"],
        created_at=_out(m["created_at"]),
        tables=tuple(tables),
    )


class ShareStore(Database):
    """Shares and what they hold; the servers' shared secrets."""

    def create_share(self, name: str, comment: str | None = None, now: datetime | None = None) -> Share:
        """Raises: AlreadyExistsError: a share of that name exists."""
        check_share_name(name)
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.shares).values(name=name, comment=comment, created_at=_db(now or _now()))
                )
                row = conn.execute(sa.select(s.shares).where(s.shares.c.name == name)).one()
        except IntegrityError:
            raise AlreadyExistsError(f"share {name!r} exists already") from None
        return _share(row, [])

    def drop_share(self, name: str) -> None:
        """Raises: NotFoundError: no share has that name."""
        with self.tx() as conn:
            row = conn.execute(sa.select(s.shares.c.id).where(s.shares.c.name == name)).first()
            if row is None:
                raise NotFoundError(f"share {name!r} does not exist")
            conn.execute(sa.delete(s.share_tables).where(s.share_tables.c.share_id == row.id))
            conn.execute(sa.delete(s.shares).where(s.shares.c.id == row.id))

    def share_table(self, name: str, table: TableName, now: datetime | None = None) -> Share:
        """Add ``table`` (a table or a link) to the share ``name``; adding it again changes nothing."""
        with self.tx() as conn:
            row = conn.execute(sa.select(s.shares).where(s.shares.c.name == name)).first()
            if row is None:
                raise NotFoundError(f"share {name!r} does not exist")
            held = conn.execute(
                sa.select(s.share_tables.c.name).where(
                    s.share_tables.c.share_id == row.id,
                    s.share_tables.c.namespace == table.namespace,
                    s.share_tables.c.name == table.table,
                )
            ).first()
            if held is None:
                conn.execute(
                    sa.insert(s.share_tables).values(
                        share_id=row.id,
                        namespace=table.namespace,
                        name=table.table,
                        added_at=_db(now or _now()),
                    )
                )
        return self.get_share(name)

    def unshare_table(self, name: str, table: TableName) -> Share:
        """Raises: NotFoundError: no such share, or it does not hold ``table``."""
        with self.tx() as conn:
            row = conn.execute(sa.select(s.shares.c.id).where(s.shares.c.name == name)).first()
            if row is None:
                raise NotFoundError(f"share {name!r} does not exist")
            gone = conn.execute(
                sa.delete(s.share_tables).where(
                    s.share_tables.c.share_id == row.id,
                    s.share_tables.c.namespace == table.namespace,
                    s.share_tables.c.name == table.table,
                )
            ).rowcount
            if not gone:
                raise NotFoundError(f"share {name!r} does not hold {table}")
        return self.get_share(name)

    def find_share(self, name: str) -> Share | None:
        found = [x for x in self.list_shares() if x.name == name]
        return found[0] if found else None

    def get_share(self, name: str) -> Share:
        """Raises: NotFoundError: no share has that name."""
        found = self.find_share(name)
        if found is None:
            raise NotFoundError(f"share {name!r} does not exist")
        return found

    def list_shares(self) -> builtins.list[Share]:
        """Every share with what it holds, by name."""
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.shares).order_by(s.shares.c.name)).all()
            held = conn.execute(
                sa.select(s.share_tables).order_by(s.share_tables.c.namespace, s.share_tables.c.name)
            ).all()
        tables: dict[int, builtins.list[TableName]] = {}
        for h in held:
            tables.setdefault(h.share_id, []).append(TableName(namespace=h.namespace, table=h.name))
        return [_share(r, tables.get(r.id, [])) for r in rows]

    # -- secrets -------------------------------------------------------------------------------
    def secret(self, name: str) -> str:
        """The secret ``name``: made at random (256 bits) by the first caller, the same for every
        process of this metastore from then on."""
        with self.read_tx() as conn:
            found = conn.execute(sa.select(s.secrets.c.value).where(s.secrets.c.name == name)).scalar()
        if found is not None:
            return str(found)
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.secrets).values(
                        name=name, value=secrets.token_hex(32), created_at=_db(_now())
                    )
                )
        except IntegrityError:
            pass  # another process made it first: theirs stands
        with self.read_tx() as conn:
            return str(
                conn.execute(sa.select(s.secrets.c.value).where(s.secrets.c.name == name)).scalar_one()
            )

"""Clusters: the registry of storage roots and their Spark masters (``default`` needs no row)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError

from metastore import schema as s
from metastore.clusters import Cluster
from metastore.errors import AlreadyExistsError, NotFoundError, UserInputError
from metastore.store.engine import Database, _db, _now, _out


def cluster_from_row(row: Any) -> Cluster:
    m = row._mapping
    return Cluster(
        name=m["name"],
        storage=m["storage"],
        spark_master=m["spark_master"],
        conf=dict(m["conf"] or {}),
        created_at=_out(m["created_at"]),
    )


class ClusterStore(Database):
    """Registered clusters."""

    def add_cluster(
        self,
        name: str,
        storage: str,
        spark_master: str,
        conf: Mapping[str, str] | None = None,
        now: datetime | None = None,
    ) -> Cluster:
        """Record a cluster (the catalog has checked its name, storage and master)."""
        try:
            with self.tx() as conn:
                conn.execute(
                    sa.insert(s.clusters).values(
                        name=name,
                        storage=storage,
                        spark_master=spark_master,
                        conf=dict(conf or {}),
                        created_at=_db(now or _now()),
                    )
                )
        except IntegrityError:
            raise AlreadyExistsError(f"cluster {name} exists already") from None
        return self.get_cluster(name)

    def get_cluster(self, name: str) -> Cluster:
        with self.read_tx() as conn:
            row = conn.execute(sa.select(s.clusters).where(s.clusters.c.name == name)).first()
        if row is None:
            raise NotFoundError(f"cluster {name} does not exist (streampart cluster list shows the clusters)")
        return cluster_from_row(row)

    def list_clusters(self) -> list[Cluster]:
        with self.read_tx() as conn:
            rows = conn.execute(sa.select(s.clusters).order_by(s.clusters.c.name)).all()
        return [cluster_from_row(r) for r in rows]

    def tables_on_cluster(self, name: str) -> list[str]:
        """The tables whose primary cluster is ``name``."""
        t = s.tables.c
        with self.read_tx() as conn:
            rows = conn.execute(
                sa.select(t.namespace, t.name).where(t.cluster == name).order_by(t.namespace, t.name)
            ).all()
        return [f"{ns}.{name}" for ns, name in rows]

    def remove_cluster(self, name: str) -> None:
        """Remove a cluster no table uses, as primary or secondary (checked in the same transaction)."""
        t, r = s.tables.c, s.replicas.c
        with self.tx() as conn:
            if conn.execute(sa.select(s.clusters.c.name).where(s.clusters.c.name == name)).first() is None:
                raise NotFoundError(f"cluster {name} does not exist")
            used = conn.execute(
                sa.select(t.namespace, t.name).where(t.cluster == name).order_by(t.namespace, t.name).limit(5)
            ).all()
            if used:
                names = ", ".join(f"{ns}.{tn}" for ns, tn in used)
                raise UserInputError(
                    f"cluster {name} is in use: tables {names} live there; drop or move them first"
                )
            replicated = conn.execute(
                sa.select(t.namespace, t.name)
                .join(s.replicas, r.table_id == t.id)
                .where(r.cluster == name)
                .order_by(t.namespace, t.name)
                .limit(5)
            ).all()
            if replicated:
                names = ", ".join(f"{ns}.{tn}" for ns, tn in replicated)
                raise UserInputError(
                    f"cluster {name} is in use: it holds replicas of {names}; drop them first "
                    f"(streampart table alter NS.T --drop-replica {name})"
                )
            conn.execute(sa.delete(s.clusters).where(s.clusters.c.name == name))

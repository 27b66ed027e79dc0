"""Namespaces and links: a row per namespace (one for every namespace a table already uses), links
to other namespaces' tables (and the partitions static links list), and the bytes committed into
each streaming partition (the ledger of namespace quotas), filled in for partitions open now.

Plain ADD COLUMN, as in 0004: a batch "move and copy" of sp_partitions would cascade to rolls.

Revision ID: 0005
Revises: 0004
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_namespaces",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("isolated", sa.Boolean, nullable=False),
        sa.Column("quota_bytes", sa.BigInteger),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "sp_links",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(128), sa.ForeignKey("sp_namespaces.name"), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("source_namespace", sa.String(128), nullable=False),
        sa.Column("source_name", sa.String(128), nullable=False),
        sa.Column("source_table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="SET NULL")),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("include_streaming", sa.Boolean, nullable=False),
        sa.Column("retention_s", sa.BigInteger),
        sa.Column("range_start", sa.DateTime),
        sa.Column("range_end", sa.DateTime),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("namespace", "name", name="uq_sp_links_name"),
    )
    op.create_index("ix_sp_links_source", "sp_links", ["source_table_id"])
    op.create_table(
        "sp_link_partitions",
        sa.Column("link_id", sa.Integer, sa.ForeignKey("sp_links.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("value", sa.DateTime, primary_key=True),
    )
    op.add_column(
        "sp_partitions", sa.Column("staged_bytes", sa.BigInteger, nullable=False, server_default="0")
    )
    conn = op.get_bind()
    _namespaces_of_existing_tables(conn)
    _staged_bytes_of_open_partitions(conn)


def _namespaces_of_existing_tables(conn: sa.Connection) -> None:
    tables = sa.table("sp_tables", sa.column("namespace", sa.String), sa.column("created_at", sa.DateTime))
    namespaces = sa.table(
        "sp_namespaces",
        sa.column("name"),
        sa.column("isolated"),
        sa.column("quota_bytes"),
        sa.column("description"),
        sa.column("created_at"),
    )
    rows = conn.execute(
        sa.select(tables.c.namespace, sa.func.min(tables.c.created_at)).group_by(tables.c.namespace)
    ).all()
    for name, created_at in rows:
        conn.execute(
            sa.insert(namespaces).values(
                name=name, isolated=False, quota_bytes=None, description="", created_at=created_at
            )
        )


def _aware(text: str) -> datetime:
    ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _staged_bytes_of_open_partitions(conn: sa.Connection) -> None:
    """Each streaming or rolling partition's bytes: the files committed chunks put there."""
    partitions = sa.table(
        "sp_partitions",
        sa.column("id", sa.Integer),
        sa.column("table_id", sa.Integer),
        sa.column("value", sa.DateTime),
        sa.column("state", sa.String),
        sa.column("staged_bytes", sa.BigInteger),
    )
    chunks = sa.table(
        "sp_chunks",
        sa.column("table_id", sa.Integer),
        sa.column("state", sa.String),
        sa.column("files", sa.JSON),
        sa.column("partitions", sa.JSON),
    )
    open_parts = conn.execute(
        sa.select(partitions.c.id, partitions.c.table_id, partitions.c.value).where(
            partitions.c.state != "standard"
        )
    ).all()
    if not open_parts:
        return
    by_key = {(t, v.replace(tzinfo=UTC)): pid for pid, t, v in open_parts}
    sums: dict[int, int] = {}
    committed = conn.execute(
        sa.select(chunks.c.table_id, chunks.c.files, chunks.c.partitions).where(
            chunks.c.state == "committed", chunks.c.table_id.in_({t for _, t, _ in open_parts})
        )
    ).all()
    for table_id, files, values in committed:
        for value in values or []:
            pid = by_key.get((table_id, _aware(value)))
            if pid is None:
                continue
            # arrival mode: every file went to its one partition; event time: the files of the period
            size = sum(
                int(f["bytes"])
                for f in files
                if f.get("period") is None or _aware(f["period"]) == _aware(value)
            )
            sums[pid] = sums.get(pid, 0) + size
    for pid, size in sums.items():
        conn.execute(sa.update(partitions).where(partitions.c.id == pid).values(staged_bytes=size))


def downgrade() -> None:
    op.execute("ALTER TABLE sp_partitions DROP COLUMN staged_bytes")
    op.drop_table("sp_link_partitions")
    op.drop_index("ix_sp_links_source", table_name="sp_links")
    op.drop_table("sp_links")
    op.drop_table("sp_namespaces")

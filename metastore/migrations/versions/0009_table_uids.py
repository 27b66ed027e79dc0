"""Table uids: a table's identity across the federation, kept when its namespace moves to another
metastore (its row id is not: each metastore numbers its own rows); links name their source by it.

Revision ID: 0009
Revises: 0008
"""

import uuid

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_tables", sa.Column("uid", sa.String(36)))
    op.add_column("sp_links", sa.Column("source_uid", sa.String(36)))
    conn = op.get_bind()
    tables = sa.table("sp_tables", sa.column("id", sa.Integer), sa.column("uid", sa.String))
    links = sa.table("sp_links", sa.column("source_table_id", sa.Integer), sa.column("source_uid", sa.String))
    for (table_id,) in conn.execute(sa.select(tables.c.id)).all():
        uid = str(uuid.uuid4())
        conn.execute(sa.update(tables).where(tables.c.id == table_id).values(uid=uid))
        conn.execute(sa.update(links).where(links.c.source_table_id == table_id).values(source_uid=uid))
    op.create_index("ix_sp_tables_uid", "sp_tables", ["uid"], unique=True)
    op.create_index("ix_sp_links_source_uid", "sp_links", ["source_uid"])


def downgrade() -> None:
    op.drop_index("ix_sp_links_source_uid", "sp_links")
    op.drop_index("ix_sp_tables_uid", "sp_tables")
    op.drop_column("sp_links", "source_uid")
    op.drop_column("sp_tables", "uid")

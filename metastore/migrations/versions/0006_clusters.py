"""Clusters: the registry of named storage roots and their Spark masters. Tables keep their
``cluster`` column (``default``, the process's own warehouse, which needs no row).

Revision ID: 0006
Revises: 0005
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_clusters",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("storage", sa.Text, nullable=False),
        sa.Column("spark_master", sa.Text, nullable=False),
        sa.Column("conf", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sp_clusters")

"""Clustering: the columns a roll orders a table's rolled partitions by (``sp_tables.cluster_by``,
JSON; NULL on a table whose rows stay in arrival order). See metastore/models/clustering.py.

Revision ID: 0020
Revises: 0019
"""

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_tables", sa.Column("cluster_by", sa.JSON))


def downgrade() -> None:
    op.drop_column("sp_tables", "cluster_by")

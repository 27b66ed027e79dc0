"""Replicas: a table's secondary clusters and the copies of its standard partitions there.

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_replicas",
        sa.Column(
            "table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("added_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "sp_partition_copies",
        sa.Column(
            "partition_id",
            sa.Integer,
            sa.ForeignKey("sp_partitions.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("cluster", sa.String(128), primary_key=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("owner", sa.String(256)),
        sa.Column("lease_until", sa.DateTime),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("retry_at", sa.DateTime),
        sa.Column("files", sa.BigInteger),
        sa.Column("bytes", sa.BigInteger),
        sa.Column("checksum", sa.String(64)),
        sa.Column("delta_version", sa.BigInteger),
        sa.Column("started_at", sa.DateTime),
        sa.Column("copied_at", sa.DateTime),
    )
    op.create_index("ix_sp_partition_copies_table", "sp_partition_copies", ["table_id", "cluster"])


def downgrade() -> None:
    op.drop_index("ix_sp_partition_copies_table", "sp_partition_copies")
    op.drop_table("sp_partition_copies")
    op.drop_table("sp_replicas")

"""Initial metastore: tables, partitions, chunks, rolls.

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_tables",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("cluster", sa.String(128), nullable=False),
        sa.Column("location", sa.Text, nullable=False),
        sa.Column("columns", sa.JSON, nullable=False),
        sa.Column("time_column", sa.String(128), nullable=False),
        sa.Column("partition_column", sa.String(128), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("roll_every_s", sa.BigInteger, nullable=False),
        sa.Column("lateness_s", sa.BigInteger, nullable=False),
        sa.Column("late_data", sa.String(16), nullable=False),
        sa.Column("dead_letter", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("namespace", "name", name="uq_sp_tables_name"),
    )
    op.create_table(
        "sp_partitions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("value", sa.DateTime, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("opened_at", sa.DateTime, nullable=False),
        sa.Column("rolled_at", sa.DateTime),
        sa.Column("chunks", sa.BigInteger),
        sa.Column("rows", sa.BigInteger),
        sa.Column("bytes", sa.BigInteger),
        sa.Column("files", sa.BigInteger),
        sa.UniqueConstraint("table_id", "value", name="uq_sp_partitions_value"),
    )
    op.create_index("ix_sp_partitions_state", "sp_partitions", ["table_id", "state"])
    op.create_table(
        "sp_chunks",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("token", sa.String(512)),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        sa.Column("files", sa.JSON, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("committing_since", sa.DateTime),
        sa.Column("attempt", sa.String(36)),
        sa.Column("base_version", sa.BigInteger),
        sa.Column("version", sa.BigInteger),
        sa.Column("partitions", sa.JSON, nullable=False),
        sa.Column("dead_letter_rows", sa.BigInteger, nullable=False),
        sa.Column("late_rows", sa.BigInteger, nullable=False),
        sa.Column("error", sa.Text),
        sa.UniqueConstraint("table_id", "token", name="uq_sp_chunks_token"),
    )
    op.create_index("ix_sp_chunks_state", "sp_chunks", ["state", "expires_at"])
    op.create_table(
        "sp_rolls",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column(
            "partition_id", sa.Integer, sa.ForeignKey("sp_partitions.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime),
        sa.Column("owner", sa.String(64)),
        sa.Column("lease_until", sa.DateTime),
        sa.Column("seal_version", sa.BigInteger),
        sa.Column("sweep_version", sa.BigInteger),
        sa.Column("files_before", sa.BigInteger),
        sa.Column("files_after", sa.BigInteger),
        sa.Column("rows", sa.BigInteger),
        sa.Column("bytes", sa.BigInteger),
        sa.Column("error", sa.Text),
        sa.UniqueConstraint("partition_id", name="uq_sp_rolls_partition"),
    )
    op.create_index("ix_sp_rolls_state", "sp_rolls", ["table_id", "state"])


def downgrade() -> None:
    op.drop_table("sp_rolls")
    op.drop_table("sp_chunks")
    op.drop_table("sp_partitions")
    op.drop_table("sp_tables")

"""Roll daemon: leadership leases, roll attempt history, summaries of pruned chunks.

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_leases",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(128)),
        sa.Column("epoch", sa.BigInteger, nullable=False),
        sa.Column("acquired_at", sa.DateTime),
        sa.Column("renewed_at", sa.DateTime),
        sa.Column("expires_at", sa.DateTime, nullable=False),
        sa.Column("info", sa.JSON, nullable=False),
    )
    op.create_table(
        "sp_roll_attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("partition_value", sa.DateTime),
        sa.Column("roll_id", sa.String(36)),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("epoch", sa.BigInteger),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime, nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("resumed", sa.Boolean, nullable=False),
        sa.Column("rows", sa.BigInteger),
        sa.Column("error", sa.Text),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("retry_at", sa.DateTime),
    )
    op.create_index("ix_sp_roll_attempts_table", "sp_roll_attempts", ["table_id", "id"])
    op.create_table(
        "sp_chunk_summaries",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("partition_value", sa.DateTime),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("chunks", sa.BigInteger, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("bytes", sa.BigInteger, nullable=False),
        sa.Column("dead_letter_rows", sa.BigInteger, nullable=False),
        sa.Column("late_rows", sa.BigInteger, nullable=False),
        sa.Column("first_created_at", sa.DateTime),
        sa.Column("last_created_at", sa.DateTime),
        sa.Column("pruned_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_sp_chunk_summaries_table", "sp_chunk_summaries", ["table_id", "partition_value"])
    op.create_index("ix_sp_chunks_table_created", "sp_chunks", ["table_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_sp_chunks_table_created", table_name="sp_chunks")
    op.drop_table("sp_chunk_summaries")
    op.drop_table("sp_roll_attempts")
    op.drop_table("sp_leases")

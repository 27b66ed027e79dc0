"""Deletes by predicate (issue 30): ``sp_deletes``, one row per ``streampart delete`` (its predicate, who
asked, its steps: PENDING while its rewrite is planned and written, COMMITTED once the Delta commit
that removes the matching rows landed, DONE once the metastore counts the partitions anew), and the
generation of a standard partition and of its copies (a delete makes its copies stale).

Revision ID: 0017
Revises: 0016
"""

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_deletes",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("predicate", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("requested_by", sa.String(256), nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime),
        sa.Column("owner", sa.String(64)),
        sa.Column("lease_until", sa.DateTime),
        sa.Column("seal_version", sa.BigInteger),
        sa.Column("read_version", sa.BigInteger),
        sa.Column("commit_version", sa.BigInteger),
        sa.Column("rows", sa.BigInteger),
        sa.Column("files_removed", sa.BigInteger),
        sa.Column("files_added", sa.BigInteger),
        sa.Column("partitions", sa.JSON),
        sa.Column("removed_files", sa.JSON),
        sa.Column("reclaimed_at", sa.DateTime),
        sa.Column("error", sa.Text),
    )
    op.create_index("ix_sp_deletes_state", "sp_deletes", ["table_id", "state"])
    # a standard partition's generation grows with each delete that rewrites it; a copy on a secondary
    # is of the generation it was claimed at, and becomes present only if that is still the partition's
    op.add_column("sp_partitions", sa.Column("generation", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("sp_partition_copies", sa.Column("generation", sa.BigInteger))


def downgrade() -> None:
    op.drop_column("sp_partition_copies", "generation")
    op.drop_column("sp_partitions", "generation")
    op.drop_index("ix_sp_deletes_state", "sp_deletes")
    op.drop_table("sp_deletes")

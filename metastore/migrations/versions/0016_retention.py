"""Retention (issue 30): a table's ``retain_s`` (NULL: its namespace's ``default_retain_s``; 0:
never), partitions that expired (states EXPIRING and EXPIRED, when, at which Delta version, and when
their files were given back), and the expiry passes (``sp_expiries``: one per table and pass).

Revision ID: 0016
Revises: 0015
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_tables", sa.Column("retain_s", sa.BigInteger))
    op.add_column("sp_namespaces", sa.Column("default_retain_s", sa.BigInteger))
    op.add_column("sp_partitions", sa.Column("expired_at", sa.DateTime))
    op.add_column("sp_partitions", sa.Column("expired_version", sa.BigInteger))
    op.add_column("sp_partitions", sa.Column("reclaimed_at", sa.DateTime))
    op.create_table(
        "sp_expiries",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("partitions", sa.JSON, nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("finished_at", sa.DateTime),
        sa.Column("owner", sa.String(64)),
        sa.Column("lease_until", sa.DateTime),
        sa.Column("commit_version", sa.BigInteger),
        sa.Column("rows", sa.BigInteger),
        sa.Column("bytes", sa.BigInteger),
        sa.Column("files", sa.BigInteger),
        sa.Column("error", sa.Text),
    )
    op.create_index("ix_sp_expiries_state", "sp_expiries", ["table_id", "state"])


def downgrade() -> None:
    op.drop_index("ix_sp_expiries_state", "sp_expiries")
    op.drop_table("sp_expiries")
    for column in ("reclaimed_at", "expired_version", "expired_at"):
        op.drop_column("sp_partitions", column)
    op.drop_column("sp_namespaces", "default_retain_s")
    op.drop_column("sp_tables", "retain_s")

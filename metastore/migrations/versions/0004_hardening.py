"""Hardening: chunks remember a digest of the content committed under their idempotency token;
an index finds a table's newest committed version (the Delta log must reach at least that far);
event-time tables bound how far ahead (max_future, 1 day for existing tables) and how old
(max_age, unbounded) an event may be.

Plain ALTER TABLE ADD/DROP COLUMN on both backends (SQLite ≥ 3.35): a batch "move and copy" of
sp_tables would drop the old table, and with foreign keys on that cascades to every chunk.

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_chunks", sa.Column("content_digest", sa.String(80)))
    op.create_index("ix_sp_chunks_table_version", "sp_chunks", ["table_id", "version"])
    op.add_column(
        "sp_tables", sa.Column("max_future_s", sa.BigInteger, nullable=False, server_default="86400")
    )
    op.add_column("sp_tables", sa.Column("max_age_s", sa.BigInteger))


def downgrade() -> None:
    for table, column in (
        ("sp_tables", "max_age_s"),
        ("sp_tables", "max_future_s"),
        ("sp_chunks", "content_digest"),
    ):
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    op.drop_index("ix_sp_chunks_table_version", table_name="sp_chunks")

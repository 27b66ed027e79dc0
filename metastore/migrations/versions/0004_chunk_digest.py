"""Chunks remember a digest of the content committed under their idempotency token; an index
finds a table's newest committed version (the Delta log must reach at least that far).

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
    with op.batch_alter_table("sp_chunks") as batch:
        batch.add_column(sa.Column("content_digest", sa.String(80)))
    op.create_index("ix_sp_chunks_table_version", "sp_chunks", ["table_id", "version"])


def downgrade() -> None:
    op.drop_index("ix_sp_chunks_table_version", table_name="sp_chunks")
    with op.batch_alter_table("sp_chunks") as batch:
        batch.drop_column("content_digest")

"""HTTP API: bearer tokens (SHA-256 digests only) with per-namespace scopes.

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_tokens",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("scopes", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_sp_tokens_name"),
        sa.UniqueConstraint("token_hash", name="uq_sp_tokens_hash"),
    )


def downgrade() -> None:
    op.drop_table("sp_tokens")

"""Catalogs for other engines: tokens that expire (``sp_tokens.expires_at``; NULL: never), Delta
Sharing's shares and the tables and links each holds (``sp_shares``, ``sp_share_tables``), and the
servers' shared secrets (``sp_secrets``: the key that signs the file URLs a share's queries answer
with, made once and shared by every server process of the metastore).

Revision ID: 0019
Revises: 0018
"""

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_tokens", sa.Column("expires_at", sa.DateTime))
    op.create_table(
        "sp_shares",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("comment", sa.String(1024)),
        sa.Column("created_at", sa.DateTime, nullable=False),
        sa.UniqueConstraint("name", name="uq_sp_shares_name"),
    )
    op.create_table(
        "sp_share_tables",
        sa.Column("share_id", sa.Integer, sa.ForeignKey("sp_shares.id", ondelete="CASCADE"), nullable=False),
        sa.Column("namespace", sa.String(128), nullable=False),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("added_at", sa.DateTime, nullable=False),
        sa.PrimaryKeyConstraint("share_id", "namespace", "name", name="pk_sp_share_tables"),
    )
    op.create_table(
        "sp_secrets",
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("value", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sp_secrets")
    op.drop_table("sp_share_tables")
    op.drop_table("sp_shares")
    op.drop_column("sp_tokens", "expires_at")

"""Namespace moves: a namespace being moved is fenced in its metastore (``moving_to``,
``moving_since``), and each move records its progress in the primary (``sp_moves``), so a move
interrupted at any step resumes or rolls back.

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_namespaces", sa.Column("moving_to", sa.String(128)))
    op.add_column("sp_namespaces", sa.Column("moving_since", sa.DateTime))
    op.create_table(
        "sp_moves",
        sa.Column("namespace", sa.String(128), primary_key=True),
        sa.Column("source", sa.String(128), nullable=False),
        sa.Column("target", sa.String(128), nullable=False),
        sa.Column("step", sa.String(16), nullable=False),
        sa.Column("started_at", sa.DateTime, nullable=False),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("owner", sa.String(256)),
        sa.Column("heartbeat_at", sa.DateTime),
    )


def downgrade() -> None:
    op.drop_table("sp_moves")
    with op.batch_alter_table("sp_namespaces") as batch:
        batch.drop_column("moving_since")
        batch.drop_column("moving_to")

"""The roll daemons' heartbeats and housekeeping runs (``sp_daemons``), and an index on committed
chunks by commit time: what the status page (``/ui``) reads, cheaply, every few seconds.

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_daemons",
        sa.Column("lease", sa.String(128), primary_key=True),
        sa.Column("holder", sa.String(128), primary_key=True),
        sa.Column("heartbeat_at", sa.DateTime, nullable=False),
        sa.Column("info", sa.JSON, nullable=False),
        sa.Column("housekeeping_at", sa.DateTime),
        sa.Column("housekeeping_outcome", sa.String(16)),
    )
    op.create_index("ix_sp_daemons_heartbeat", "sp_daemons", ["heartbeat_at"])
    op.create_index("ix_sp_chunks_table_committed", "sp_chunks", ["table_id", "state", "committing_since"])


def downgrade() -> None:
    op.drop_index("ix_sp_chunks_table_committed", "sp_chunks")
    op.drop_table("sp_daemons")

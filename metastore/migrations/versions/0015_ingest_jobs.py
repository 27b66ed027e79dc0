"""Kafka ingest jobs (issue 29): operators' requests to a running job (``sp_ingest_requests``: pause or
resume a topic, or reset its offsets, and when the job applied it) and each job's published status
(``sp_ingest_jobs``).

Revision ID: 0015
Revises: 0014
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_ingest_requests",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("job", sa.String(128), nullable=False),
        sa.Column("topic", sa.String(256), nullable=False),
        sa.Column("action", sa.String(16), nullable=False),
        sa.Column("target", sa.String(1024)),
        sa.Column("requested_by", sa.String(256), nullable=False),
        sa.Column("requested_at", sa.DateTime, nullable=False),
        sa.Column("done_at", sa.DateTime),
        sa.Column("outcome", sa.String(1024)),
    )
    op.create_index("ix_sp_ingest_requests_job", "sp_ingest_requests", ["job", "done_at"])
    op.create_table(
        "sp_ingest_jobs",
        sa.Column("job", sa.String(128), primary_key=True),
        sa.Column("updated_at", sa.DateTime, nullable=False),
        sa.Column("status", sa.JSON, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sp_ingest_jobs")
    op.drop_index("ix_sp_ingest_requests_job", "sp_ingest_requests")
    op.drop_table("sp_ingest_requests")

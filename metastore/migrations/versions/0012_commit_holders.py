"""The process holding a chunk's commit attempt (``sp_chunks.holder``): a retry that finds the
chunk COMMITTING takes it over as soon as that process is known to be gone (its commit-holder
lease in ``sp_leases`` lapsed), not only after twice ``chunk.commit_timeout``.

Revision ID: 0012
Revises: 0011
"""

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_chunks", sa.Column("holder", sa.String(128)))


def downgrade() -> None:
    with op.batch_alter_table("sp_chunks") as batch:
        batch.drop_column("holder")

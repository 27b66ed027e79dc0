"""Each replica file's SHA-256 as verified when it was copied (``sp_partition_copies.file_digests``,
path → hex digest), and when the copy was last found to match it (``verified_at``): ``streampart
check`` and housekeeping's scrub compare a secondary's files with them.

Revision ID: 0013
Revises: 0012
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_partition_copies", sa.Column("file_digests", sa.JSON))
    op.add_column("sp_partition_copies", sa.Column("verified_at", sa.DateTime))


def downgrade() -> None:
    with op.batch_alter_table("sp_partition_copies") as batch:
        batch.drop_column("verified_at")
        batch.drop_column("file_digests")

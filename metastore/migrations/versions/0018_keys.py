"""Keyed tables: a table's primary key, sequence column and op column (``sp_tables.keys``, JSON;
NULL on a table of appends), and the files of other partitions a keyed table's roll replaced
(``sp_rolls.removed_files``, reclaimed by housekeeping: ``reclaimed_at``). See
metastore/models/keys.py.

Revision ID: 0018
Revises: 0017
"""

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("sp_tables", sa.Column("keys", sa.JSON))
    op.add_column("sp_rolls", sa.Column("removed_files", sa.JSON))
    op.add_column("sp_rolls", sa.Column("reclaimed_at", sa.DateTime))


def downgrade() -> None:
    op.drop_column("sp_rolls", "reclaimed_at")
    op.drop_column("sp_rolls", "removed_files")
    op.drop_column("sp_tables", "keys")

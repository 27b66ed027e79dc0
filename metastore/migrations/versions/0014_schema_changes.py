"""Schema changes (issue 27): what a table's rows may change in its schema (``sp_tables.schema_evolution``,
``none`` for every existing table: today's behaviour), the cap on the columns evolution from data may
add to it (``sp_tables.max_new_columns``), and each table's history of schema changes
(``sp_schema_changes``: pending while its Delta commit is in flight, done at the version that made it).

The two columns are plain ``ADD COLUMN``s with server defaults: a batch copy of ``sp_tables`` on
SQLite would drop and re-create it, and with foreign keys on that cascades into every chunk.

Revision ID: 0014
Revises: 0013
"""

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "sp_tables", sa.Column("schema_evolution", sa.String(16), nullable=False, server_default="none")
    )
    op.add_column("sp_tables", sa.Column("max_new_columns", sa.Integer, nullable=False, server_default="100"))
    op.create_table(
        "sp_schema_changes",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("table_id", sa.Integer, sa.ForeignKey("sp_tables.id", ondelete="CASCADE"), nullable=False),
        sa.Column("key", sa.String(512), nullable=False),
        sa.Column("version", sa.BigInteger),
        sa.Column("change", sa.JSON, nullable=False),
        sa.Column("before", sa.JSON, nullable=False),
        sa.Column("after", sa.JSON, nullable=False),
        sa.Column("source", sa.String(256), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("at", sa.DateTime, nullable=False),
        sa.Column("done_at", sa.DateTime),
        sa.UniqueConstraint("table_id", "key", name="uq_sp_schema_changes_key"),
    )
    op.create_index("ix_sp_schema_changes_state", "sp_schema_changes", ["state", "table_id"])


def downgrade() -> None:
    op.drop_index("ix_sp_schema_changes_state", "sp_schema_changes")
    op.drop_table("sp_schema_changes")
    # plain DROP COLUMNs (SQLite ≥ 3.35), as 0009's downgrade: no batch copy of sp_tables
    op.drop_column("sp_tables", "max_new_columns")
    op.drop_column("sp_tables", "schema_evolution")

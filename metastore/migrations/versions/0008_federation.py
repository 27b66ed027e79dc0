"""Federation: the registry of federated metastores, explicit namespace routes, and the route
table's version (one row, bumped by every change of either).

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sp_metastores",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("access", sa.String(32), nullable=False),
        sa.Column("writable", sa.JSON, nullable=False),
        sa.Column("prefix", sa.String(128)),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_table(
        "sp_routes",
        sa.Column("namespace", sa.String(128), primary_key=True),
        sa.Column("metastore", sa.String(128), nullable=False),
        sa.Column("created_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_sp_routes_metastore", "sp_routes", ["metastore"])
    version = op.create_table(
        "sp_route_version",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("version", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(version, [{"id": 1, "version": 0}])


def downgrade() -> None:
    op.drop_table("sp_route_version")
    op.drop_index("ix_sp_routes_metastore", "sp_routes")
    op.drop_table("sp_routes")
    op.drop_table("sp_metastores")

"""The PostgreSQL set-up of docs/operations.md: an owner role migrates, a runtime role does the rest.

The guide's SQL (below, as there) makes two roles and a database; the owner's first start runs
the migrations; the runtime role, with table privileges only, then writes, rolls, creates tables
and tokens. Started first, before any migration, the runtime role gets one clear error naming what
to do, not a traceback.
"""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.integrity import check_table
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import records
from tests.pg import PG_ADMIN_URL
from tests.test_cli import CREATE, assert_user_error, run

# docs/operations.md, "PostgreSQL": run by an administrator, then (connected to the new database)
# by the owner; $OWNER, $APP and $DB stand for streampart_owner, streampart and streampart there.
CREATE_ROLES = "CREATE ROLE {owner} LOGIN; CREATE ROLE {app} LOGIN; CREATE DATABASE {db} OWNER {owner};"
GRANTS = """
GRANT USAGE ON SCHEMA public TO {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {app};
ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA public
    GRANT USAGE, SELECT ON SEQUENCES TO {app};
"""


def _psql(url: sa.URL, sql: str) -> None:
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    proc = subprocess.run(
        ["psql", libpq, "--quiet", "-v", "ON_ERROR_STOP=1"], input=sql, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.process
def test_the_owner_migrates_and_a_runtime_role_with_table_privileges_runs_the_rest(tmp_path: Path) -> None:
    suffix = uuid.uuid4().hex[:8]
    names = {"owner": f"sp_owner_{suffix}", "app": f"sp_app_{suffix}", "db": f"sp_roles_{suffix}"}
    admin = sa.make_url(PG_ADMIN_URL)
    owner_url = admin.set(username=names["owner"], database=names["db"]).set(drivername="postgresql")
    app_url = admin.set(username=names["app"], database=names["db"]).set(drivername="postgresql")
    warehouse = tmp_path / "warehouse"
    _psql(admin, CREATE_ROLES.format(**names))
    try:
        _psql(owner_url, GRANTS.format(**names))
        app = app_url.render_as_string(hide_password=False)

        # the runtime role first: it may not create the schema — one line says so (a command that
        # only reads does not try: the metastore does not exist yet)
        refused = run(warehouse, "--metastore", app, "table", "create", "shop.x", *CREATE)
        assert_user_error(refused, "may not bring its schema to revision", "owns the schema")
        missing = run(warehouse, "--metastore", app, "table", "list")
        assert_user_error(missing, "does not exist (the database has no streampart schema)")

        Catalog.open(warehouse, owner_url.render_as_string(hide_password=False)).close()  # migrations
        catalog = Catalog.open(warehouse, app)
        try:
            table = make_table(catalog, "shop.orders", dead_letter=True)
            ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL, key="k1")
            [rolled] = Roller(catalog).roll_table(table, force=True)
            assert rolled.rows == 10
            assert check_table(catalog, table) == []
        finally:
            catalog.close()
        listed = run(warehouse, "--metastore", app, "table", "list", "--json").json()
        assert "shop.orders__dead_letter" in str(listed)
        token = run(warehouse, "--metastore", app, "token", "create", "loader", "--scope", "write:shop")
        assert token.returncode == 0, token.stderr
    finally:
        engine = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(sa.text(f"DROP DATABASE IF EXISTS {names['db']} WITH (FORCE)"))
            conn.execute(sa.text(f"DROP ROLE IF EXISTS {names['app']}"))
            conn.execute(sa.text(f"DROP ROLE IF EXISTS {names['owner']}"))
        engine.dispose()

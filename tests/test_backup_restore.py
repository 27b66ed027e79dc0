"""Backup and restore exactly as docs/operations.md tells an operator to (SQLite and PostgreSQL).

The documented procedure: stop writers and rolls, dump the metastore, copy the warehouse; to
restore, put both back, then ``streampart check``. The shell commands below are the ones in the
guide (``$WH``, ``$BACKUP``, ``$METASTORE``, ``$ADMIN`` set as there); a change to one needs a
change to the other. After the restore, ``streampart check`` must pass and delta-rs, a Spark read
and ``table describe`` must show exactly the rows and partitions that were backed up — not the
ones written after the backup — and writes and rolls must carry on from there.
"""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.models import ChunkState, PartitionState
from scheduler.roll import Roller
from streampart.query import read_table
from tests.fixtures import make_table
from tests.helpers import records
from tests.pg import PG_ADMIN_URL
from tests.test_cli import run

# docs/operations.md, "Backup" and "Restore": the same commands, backend by backend.
BACKUP = {
    "postgresql": """
        pg_dump --format=custom --file="$BACKUP/metastore.dump" "$METASTORE"
        rsync -a "$WH/" "$BACKUP/warehouse/"
    """,
    "sqlite": """
        sqlite3 "$WH/_metastore.sqlite" ".backup '$BACKUP/metastore.sqlite'"
        rsync -a --exclude='_metastore.sqlite*' "$WH/" "$BACKUP/warehouse/"
    """,
}
RESTORE = {
    "postgresql": """
        psql "$ADMIN" --quiet -c "CREATE DATABASE $DBNAME"
        pg_restore --no-owner --exit-on-error --dbname="$METASTORE" "$BACKUP/metastore.dump"
        rsync -a --delete "$BACKUP/warehouse/" "$WH/"
    """,
    "sqlite": """
        rsync -a --delete "$BACKUP/warehouse/" "$WH/"
        cp "$BACKUP/metastore.sqlite" "$WH/_metastore.sqlite"
    """,
}


def _libpq(url: sa.URL) -> str:
    """A URL both psql/pg_dump and streampart read (streampart picks its driver itself)."""
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


@pytest.fixture(params=["sqlite", "postgresql"])
def site(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The operator's environment: the warehouse, a backup directory, the metastore's URL."""
    env = {"WH": str(tmp_path / "warehouse"), "BACKUP": str(tmp_path / "backup"), "backend": request.param}
    Path(env["BACKUP"]).mkdir()
    if request.param == "sqlite":
        env["METASTORE"] = f"sqlite:///{tmp_path / 'warehouse' / '_metastore.sqlite'}"
        yield env
        return
    # a database of its own (not a scratch schema), as a deployment has: pg_dump takes it whole
    admin = sa.make_url(PG_ADMIN_URL)
    env |= {"DBNAME": f"sp_backup_{uuid.uuid4().hex[:10]}", "ADMIN": _libpq(admin)}
    env["METASTORE"] = _libpq(admin.set(database=env["DBNAME"]))
    _admin_sql(f"CREATE DATABASE {env['DBNAME']}")
    yield env
    _admin_sql(f"DROP DATABASE IF EXISTS {env['DBNAME']} WITH (FORCE)")


def _admin_sql(sql: str) -> None:
    engine = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            conn.execute(sa.text(sql))
    finally:
        engine.dispose()


def _shell(script: str, env: dict[str, str]) -> None:
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, f"{script}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"


def _ids(location: str) -> list[int]:
    return sorted(DeltaTable(location).to_pyarrow_table(columns=["id"]).column("id").to_pylist())


def test_a_restored_backup_passes_check_and_reads_exactly_the_backed_up_rows(
    site: dict[str, str], spark
) -> None:
    warehouse = Path(site["WH"])
    catalog = Catalog.open(warehouse, site["METASTORE"])
    orders = make_table(catalog, "shop.orders")
    writer = ChunkWriter(catalog, orders)
    writer.write(records(range(0, 10)), Format.JSONL, key="b1")
    writer.write(records(range(10, 20)), Format.JSONL, key="b2")
    Roller(catalog).roll_table(orders, force=True)  # a standard partition …
    b3 = writer.write(records(range(20, 30)), Format.JSONL, key="b3")  # … and a streaming one with a chunk
    open_chunk = writer.stage(writer.reserve("b4"), records(range(30, 40)), Format.JSONL)  # never committed
    backed_up = catalog.describe(orders)
    catalog.close()  # step 1: every writer and roller stopped

    _shell(BACKUP[site["backend"]], site)

    # life goes on after the backup: more commits and a roll, which the restore must undo
    catalog = Catalog.open(warehouse, site["METASTORE"])
    writer = ChunkWriter(catalog, catalog.table("shop.orders"))
    writer.write(records(range(100, 110)), Format.JSONL, key="after-1")
    Roller(catalog).roll_table(catalog.table("shop.orders"), force=True)
    writer.write(records(range(110, 120)), Format.JSONL, key="after-2")
    catalog.close()

    # the disaster: the warehouse and the metastore are lost
    subprocess.run(["rm", "-rf", site["WH"]], check=True)
    if site["backend"] == "postgresql":
        _admin_sql(f"DROP DATABASE {site['DBNAME']} WITH (FORCE)")

    _shell(RESTORE[site["backend"]], site)

    checked = run(warehouse, "--metastore", site["METASTORE"], "check", "--json").json()
    assert checked == {"tables": 1, "errors": 0, "problems": []}

    catalog = Catalog.open(warehouse, site["METASTORE"])
    try:
        orders = catalog.table("shop.orders")
        assert catalog.describe(orders) == backed_up
        assert _ids(orders.location) == list(range(30))  # delta-rs, through the restored log
        got = read_table(spark, catalog, "shop.orders").select("id").collect()
        assert sorted(r.id for r in got) == list(range(30))  # Spark, at the version the metastore pins
        states = [p.state for p in catalog.store.list_partitions(orders.id)]
        assert states == [PartitionState.STANDARD, PartitionState.STREAMING]  # by value: oldest first
        # the chunk that was open at backup time is still open (housekeeping expires it), never visible
        assert catalog.store.get_chunk(open_chunk.id).state == ChunkState.RESERVED

        # and the restored table carries on: a retried key lands once, new data commits, rolls roll
        writer = ChunkWriter(catalog, orders)
        again = writer.write(records(range(20, 30)), Format.JSONL, key="b3")
        assert (again.chunk, again.version) == (b3.chunk, b3.version)
        writer.write(records(range(200, 210)), Format.JSONL, key="restored-1")
        Roller(catalog).roll_table(catalog.table("shop.orders"), force=True)
        assert _ids(orders.location) == [*range(30), *range(200, 210)]
    finally:
        catalog.close()


# The two ways to take the halves of a backup at different moments while writes and rolls go on:
# (the case, which half is taken before the later writes, what check then reports)
MISMATCHES = [
    # the warehouse copied first, the metastore dumped after more commits and a roll: the metastore
    # recorded commits the restored logs lack, so every read of the table is refused
    ("warehouse-older", "warehouse", "log_behind"),
    # the metastore dumped first, the warehouse copied after: the logs hold chunks and a roll the
    # metastore never recorded (reads would serve them, rolls and housekeeping would not know)
    ("metastore-older", "metastore", "log_ahead"),
]


@pytest.mark.process
@pytest.mark.parametrize("case, first, kind", MISMATCHES, ids=[m[0] for m in MISMATCHES])
def test_halves_of_a_backup_taken_at_different_moments_are_named_by_check(
    tmp_path: Path, case: str, first: str, kind: str
) -> None:
    site = {"WH": str(tmp_path / "warehouse"), "BACKUP": str(tmp_path / "backup")}
    Path(site["BACKUP"]).mkdir()
    dump, copy = (line for line in BACKUP["sqlite"].strip().splitlines())
    warehouse = Path(site["WH"])
    catalog = Catalog.open(warehouse)
    orders = make_table(catalog, "shop.orders")
    ChunkWriter(catalog, orders).write(records(range(10)), Format.JSONL, key="b1")
    _shell(copy if first == "warehouse" else dump, site)
    ChunkWriter(catalog, orders).write(records(range(10, 20)), Format.JSONL, key="later")
    Roller(catalog).roll_table(orders, force=True)
    catalog.close()
    _shell(dump if first == "warehouse" else copy, site)

    subprocess.run(["rm", "-rf", site["WH"]], check=True)
    _shell(RESTORE["sqlite"], site)

    checked = run(warehouse, "check", "--json")
    assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr
    problems = {p["kind"]: p["message"] for p in json.loads(checked.stdout)["problems"]}
    assert kind in problems, problems
    assert "backup" in problems[kind]


@pytest.mark.process
def test_the_crash_windows_of_commits_and_rolls_are_not_taken_for_a_log_ahead(tmp_path: Path) -> None:
    """A writer killed after its Delta commit, a roller killed after its sweep: the log is ahead of
    what the metastore recorded, as after every such crash, and check does not call it a mismatch
    (the chunk is COMMITTING, the roll known: housekeeping and the roll's resumption finish them)."""
    warehouse = tmp_path / "warehouse"
    catalog = Catalog.open(warehouse)
    orders = make_table(catalog, "shop.orders")
    ChunkWriter(catalog, orders).write(records(range(10)), Format.JSONL, key="b1")
    catalog.close()
    (tmp_path / "more.jsonl").write_bytes(records(range(10, 20)))
    killed = [
        run(warehouse, "roll", "shop.orders", "--force", env={"STREAMPART_CRASHPOINT": "roll-after-sweep"}),
        run(warehouse, "write", "shop.orders", tmp_path / "more.jsonl", "--key", "b2",
            env={"STREAMPART_CRASHPOINT": "chunk-after-delta-commit"}),
    ]  # fmt: skip
    assert [k.returncode for k in killed] == [-9, -9]
    checked = run(warehouse, "check", "--json").json()
    assert checked["problems"] == []

"""The private PostgreSQL instance of tests and benchmarks (tests/private_pg.py): start, connect,
stop (a dead backend refuses connections at once), start again on the same port with the data."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import OperationalError

from tests.private_pg import PrivatePostgres, StopMode

# Why 3 s: connecting to a closed loopback port is refused at once; a hang (the timeout's doing)
# would mean the server is not really down.
CONNECT_TIMEOUT_S = 3


def _engine(url: str) -> sa.Engine:
    return sa.create_engine(url, connect_args={"connect_timeout": CONNECT_TIMEOUT_S}, poolclass=sa.NullPool)


def _scalar(url: str, sql: str) -> object:
    engine = _engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar()
    finally:
        engine.dispose()


def _database(pg: PrivatePostgres) -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:10]}"
    return name, pg.create_database(name)


def test_private_instance_is_not_the_shared_server(private_pg: PrivatePostgres) -> None:
    assert private_pg.port is not None and private_pg.port != 5432
    assert private_pg.url("x") == f"postgresql+psycopg://postgres@127.0.0.1:{private_pg.port}/x"
    name, url = _database(private_pg)
    assert _scalar(url, "SELECT current_database()") == name
    assert _scalar(url, "SHOW fsync") == "off"
    assert str(_scalar(url, "SHOW unix_socket_directories")).startswith(str(private_pg.home))
    assert _scalar(url, "SELECT current_user") == "postgres"
    private_pg.drop_database(name)


@pytest.mark.parametrize("mode", ["immediate", "fast"])
def test_stopped_refuses_at_once_and_restart_keeps_port_and_data(
    private_pg: PrivatePostgres, mode: StopMode
) -> None:
    _, url = _database(private_pg)
    with _engine(url).begin() as conn:
        conn.execute(sa.text("CREATE TABLE kept (id int)"))
        conn.execute(sa.text("INSERT INTO kept VALUES (1), (2)"))
    port = private_pg.port
    # A connection held open across the stop: its next use fails too (the backend is gone).
    held = _engine(url).connect()

    private_pg.stop(mode)
    assert not private_pg.running
    t0 = time.perf_counter()
    with pytest.raises(OperationalError, match=r"(?i)refused|could not connect"):
        _scalar(url, "SELECT 1")
    assert time.perf_counter() - t0 < CONNECT_TIMEOUT_S - 1, "a stopped server must refuse, not hang"
    with pytest.raises(OperationalError):
        held.execute(sa.text("SELECT 1"))
    held.close()

    private_pg.start()
    assert private_pg.running and private_pg.port == port
    assert _scalar(url, "SELECT count(*) FROM kept") == 2  # committed rows survive even a crash


@pytest.mark.process
def test_restart_and_context_manager_clean_up(tmp_path) -> None:
    """A second instance beside the session's: its own port; leaving ``with`` stops it and removes
    its directory (no postgres process of it is left)."""
    with PrivatePostgres(tmp_path / "pg", settings={"shared_buffers": "16MB"}) as pg:
        port = pg.port
        assert _scalar(pg.url(), "SHOW shared_buffers") == "16MB"
        pg.restart("immediate")
        assert pg.port == port and _scalar(pg.url(), "SELECT 1") == 1
        data = pg.data
    assert not data.exists()
    assert not pg.running
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    assert str(data) not in ps


@pytest.mark.process
def test_watchdog_stops_the_server_when_its_owner_dies(tmp_path) -> None:
    """An owner killed with SIGKILL runs no clean-up of its own: the watchdog stops the server."""
    script = (
        "import sys, time; from tests.private_pg import PrivatePostgres; "
        "pg = PrivatePostgres(None).start(); print(pg.port, pg.home, flush=True); time.sleep(60)"
    )
    owner = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=os.path.dirname(os.path.dirname(__file__)),
    )
    assert owner.stdout is not None
    port, home = owner.stdout.readline().split()
    url = f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    assert _scalar(url, "SELECT 1") == 1
    owner.kill()
    owner.wait()
    deadline = time.monotonic() + 20
    while os.path.exists(home) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not os.path.exists(home)
    with pytest.raises(OperationalError):
        _scalar(url, "SELECT 1")

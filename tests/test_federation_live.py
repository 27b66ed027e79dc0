"""Changes of the federation reach running processes without a restart (issue 12, part 3).

A real ``streampart serve`` and a real ``streampart scheduler run`` (subprocesses, ``[federation]
refresh_interval = 1s``) keep running while the test changes the federation with the CLI:

- a route change (``federation route web --to m1``): the server reads ``web`` from m1;
- a registry change (``federation add m2 --prefix fed_``): the server commits chunks into m2's
  namespaces, and the daemon's housekeeping expires a stale chunk there;
- an access change (``federation alter m2 --access read-only``): the server refuses commits there
  (403 ``federation_access`` naming the rule), and the daemon stops writing there.

Each step polls for the new behaviour with a deadline (generous against a slow machine: the
assertion is that it happens without a restart, not how fast); nothing sleeps as an assertion.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Literal, TypeVar

import httpx
import pytest
from typer.testing import CliRunner

from metastore.catalog import Catalog
from metastore.errors import StreampartError
from metastore.models import ChunkState
from metastore.store import Metastore
from streampart.cli import app
from tests.api.fixtures import Server, auth
from tests.fixtures import make_table
from tests.helpers import ROOT, records
from tests.scheduler.helpers import daemon_env

T = TypeVar("T")
REFRESH = {"STREAMPART_FEDERATION__REFRESH_INTERVAL": "1s"}
DEADLINE_S = 30  # the refresh interval is 1 s; this only bounds a hung test


def _until(what: str, probe: Callable[[], T | Literal[False] | None]) -> T:
    """The first truthy answer of ``probe``, polled until the deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        answer = probe()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {DEADLINE_S}s: {what}")
        time.sleep(0.1)


@pytest.fixture
def processes(metastore_url: str, tmp_path: Path) -> Iterator[tuple[Catalog, Server, subprocess.Popen[str]]]:
    """The test's catalog, a running server and a running roll daemon, all on the same primary."""
    wh = tmp_path / "warehouse"
    catalog = Catalog.open(wh, metastore_url, refresh_s=0)
    catalog.federation.add("m1", f"sqlite:///{tmp_path / 'm1.sqlite'}", "read-write-create")
    make_table(catalog, "ns.events")
    server = Server(wh, metastore_url, tmp_path, env_extra=dict(REFRESH))
    server.admin = server.token("admin", "admin:*")
    server.start()
    env = {**daemon_env(catalog, housekeeping={"enabled": True, "interval": "0.5s"}), **REFRESH}
    log = tmp_path / "daemon.log"
    daemon = _daemon(env, log)
    try:
        yield catalog, server, daemon
    finally:
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
            try:
                daemon.wait(30)
            except subprocess.TimeoutExpired:
                daemon.kill()
        server.close()
        catalog.close()


def _daemon(env: dict[str, str], log: Path) -> subprocess.Popen[str]:
    """``streampart scheduler run`` (as tests.scheduler.helpers.start_daemon, with the federation's env)."""
    return subprocess.Popen(
        [sys.executable, "-m", "streampart.cli", "scheduler", "run"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log.open("w"), text=True,
    )  # fmt: skip


def _cli(catalog: Catalog, *args: str) -> str:
    """A ``streampart`` command in this process, as an operator would type it."""
    url = catalog.primary.url
    result = CliRunner().invoke(app, ["--warehouse", str(catalog.warehouse.root), "--metastore", url, *args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        assert isinstance(result.exception, StreampartError), result.exception
        raise result.exception
    assert result.exit_code == 0, result.stdout
    return result.stdout


def _commit(http: httpx.Client, table: str, ids: range) -> httpx.Response:
    opened = http.post(f"/v1/tables/{table}/chunks", json={})
    if opened.status_code != 201:
        return opened
    chunk = opened.json()["id"]
    up = http.put(
        f"/v1/chunks/{chunk}/data", content=records(ids), headers={"Content-Type": "application/x-ndjson"}
    )
    if up.status_code != 200:
        return up
    return http.post(f"/v1/chunks/{chunk}/commit")


@pytest.mark.process
def test_route_registry_and_access_changes_reach_a_running_server_and_daemon(
    processes: tuple[Catalog, Server, subprocess.Popen[str]], tmp_path: Path
) -> None:
    catalog, server, daemon = processes
    http = httpx.Client(base_url=server.url, headers=auth(server.admin), timeout=30)
    m1 = Metastore(f"sqlite:///{tmp_path / 'm1.sqlite'}")

    # (a) a route change: web is in both the primary and m1, told apart by their descriptions
    catalog.namespaces.create("web", description="in the primary")
    m1.create_namespace("web", description="in m1")
    assert http.get("/v1/namespaces/web").json()["description"] == "in the primary"
    _cli(catalog, "federation", "route", "web", "--to", "m1")
    _until(
        "the server reads web from m1",
        lambda: http.get("/v1/namespaces/web").json()["description"] == "in m1",
    )

    # (b) a registry change: m2 is added with a prefix, and fed_x is made there
    _cli(catalog, "federation", "add", "m2", "--url", f"sqlite:///{tmp_path / 'm2.sqlite'}",
         "--access", "read-write-create", "--prefix", "fed_")  # fmt: skip
    table = make_table(catalog, "fed_x.t")
    assert table.metastore == "m2"
    committed = _until(
        "the server commits into m2",
        lambda: (r := _commit(http, "fed_x/t", range(5))).status_code == 200 and r,
    )
    m2 = catalog.on("m2").store
    assert m2.get_chunk(committed.json()["chunk"]).state is ChunkState.COMMITTED
    # the daemon's housekeeping reaches m2 too: a chunk reserved there and left past its TTL expires
    stale = m2.reserve_chunk(table.id, "stale", timedelta(seconds=1))
    _until(
        "the daemon expires a stale chunk in m2", lambda: m2.get_chunk(stale.id).state is ChunkState.EXPIRED
    )

    # (c) an access change: m2 becomes read-only
    _cli(catalog, "federation", "alter", "m2", "--access", "read-only")
    refused = _until(
        "the server refuses commits into m2",
        lambda: (r := _commit(http, "fed_x/t", range(5, 9))).status_code == 403 and r,
    )
    body = refused.json()
    assert (body["error"], body["message"]) == (
        "federation_access",
        "namespace fed_x is on metastore m2, which is read-only: no writes",
    )
    # the daemon no longer writes m2: a chunk left there stays reserved, while one in the primary,
    # expiring at the same moment (after the daemon has re-read the routes), is expired
    there = m2.reserve_chunk(table.id, "left-in-m2", timedelta(seconds=2))
    ours = catalog.primary.reserve_chunk(
        catalog.table("ns.events").id, "left-in-primary", timedelta(seconds=2)
    )
    _until(
        "the daemon expires a stale chunk in the primary",
        lambda: catalog.primary.get_chunk(ours.id).state is ChunkState.EXPIRED,
    )
    assert m2.get_chunk(there.id).state is ChunkState.RESERVED
    assert (
        daemon.poll() is None and server.proc is not None and server.proc.poll() is None
    )  # nobody restarted
    http.close()
    m1.close()

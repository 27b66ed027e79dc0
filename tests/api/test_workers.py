"""``streampart serve --workers N``: several server processes on one port, a PostgreSQL metastore.

Producers write through a server of two workers; every acknowledged chunk is in the table
exactly once (read back by delta-rs), both workers served, and ``/metrics`` adds up their
counts whichever answers the scrape. A worker killed with SIGKILL is replaced and writes go on;
SIGTERM stops them all and the server exits 0.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from ingest.client import Client
from tests.api.fixtures import Server, auth, committed_counts
from tests.fixtures import fresh_metastore_url, make_table
from tests.helpers import all_ids, duplicates, records, wait_for
from tests.pg import drop_scratch_schema

pytestmark = pytest.mark.process

PRODUCERS, CHUNKS, ROWS = 6, 8, 5


@pytest.fixture
def two_workers(tmp_path: Path) -> Iterator[Server]:
    url = fresh_metastore_url("postgresql", tmp_path)
    srv = Server(tmp_path / "warehouse", url, tmp_path)
    make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("admin", "admin:*")
    srv.start("--workers", "2", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "metrics"))
    yield srv
    srv.close()
    drop_scratch_schema(url)


def _children(pid: int) -> set[int]:
    """The live worker processes of the server ``pid`` (read from /proc; not multiprocessing's
    resource tracker)."""
    out = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            state, parent = stat.rsplit(")", 1)[1].split()[:2]
            if int(parent) == pid and state != "Z" and b"spawn_main" in cmdline:
                out.add(int(entry.name))
    return out


def _accepted(pids: set[int], port: int) -> dict[int, int]:
    """How many established connections to ``port`` each of ``pids`` holds (from /proc: the TCP
    table's sockets of that local port, matched to each process's open sockets)."""
    established: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if int(local.rsplit(":", 1)[1], 16) == port and state == "01":
                established.add(f"socket:[{inode}]")
    out = {}
    for pid in pids:
        fds = Path(f"/proc/{pid}/fd").iterdir()
        out[pid] = sum(1 for fd in fds if os.readlink(fd) in established)
    return out


def _write(srv: Server, producer: int, chunks: int, acked: list[int]) -> None:
    with Client(srv.url, srv.admin, backoff=0.05) as api:
        for k in range(chunks):
            first = (producer * 1000 + k) * ROWS
            api.write("ns.events", records(range(first, first + ROWS)), idempotency_key=f"w{producer}-{k}")
            acked.append(first)


def test_two_workers_share_the_port_and_their_metrics_add_up(two_workers: Server, tmp_path: Path) -> None:
    srv = two_workers
    assert srv.proc is not None
    server = srv.proc.pid
    assert len(_children(server)) == 2  # two workers under the supervisor
    acked: list[int] = []
    threads = [threading.Thread(target=_write, args=(srv, p, CHUNKS, acked)) for p in range(PRODUCERS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(acked) == PRODUCERS * CHUNKS
    ids = all_ids(srv.catalog.table("ns.events"))  # delta-rs, not streampart
    assert not duplicates(ids) and sorted(ids) == sorted(f + i for f in acked for i in range(ROWS))
    # both workers counted requests into the shared directory, and every scrape adds them up
    counted = {p.name for p in (tmp_path / "metrics").glob("counter_*.db")}
    assert len(counted) == 2, counted
    assert [committed_counts(srv)[0] for _ in range(6)] == [PRODUCERS * CHUNKS] * 6

    # clients connecting at once are spread over the workers (each has a socket of its own on the
    # port), not all taken by the first awake: 32 connections made before any is answered, as a
    # pool of keep-alive producers starting together makes them, then one request on each
    burst = [socket.create_connection(("127.0.0.1", srv.port), timeout=30) for _ in range(32)]
    try:
        for c in burst:
            c.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        for c in burst:
            assert c.recv(64).startswith(b"HTTP/1.1 200"), "no answer"
        spread = _accepted(_children(server), srv.port)
        assert sum(spread.values()) == 32 and min(spread.values()) >= 4, spread  # ~16 each
    finally:
        for c in burst:
            c.close()

    # a second server on the port is refused, whether it would share it (workers) or not: nothing
    # of its can take connections meant for this one
    for args in (("--workers", "2"), ()):
        second = Server(srv.warehouse, srv.metastore, tmp_path / f"second{len(args)}")
        second.log_dir.mkdir()
        second.port = srv.port
        second.start(*args, wait=False)
        assert second.proc is not None and second.proc.wait(60) == 1
        assert f"cannot listen on 127.0.0.1:{srv.port}: Address already in use" in second.log.read_text()

    # a worker killed outright is replaced, and writes go on
    victim = min(_children(server))
    os.kill(victim, signal.SIGKILL)
    replaced = wait_for(lambda: len(_children(server) - {victim}) == 2, "a new worker", timeout=60)
    assert replaced
    more: list[int] = []
    _write(srv, PRODUCERS, 4, more)
    assert len(more) == 4
    with httpx.Client(base_url=srv.url, headers=auth(srv.admin)) as http:
        assert http.get("/v1/tables/ns/events").status_code == 200

    workers = _children(server)
    assert srv.stop() == 0
    time.sleep(0.5)
    assert not any(Path(f"/proc/{pid}").exists() for pid in workers), "a worker outlived the server"

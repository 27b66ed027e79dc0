"""``streampart serve --workers N``: several server processes on one port, a PostgreSQL metastore.

Producers write through a server of two workers; every acknowledged chunk is in the table
exactly once (read back by delta-rs), both workers served, and ``/metrics`` adds up their
counts whichever answers the scrape. A worker killed with SIGKILL is replaced and writes go on;
SIGTERM stops them all and the server exits 0.
"""

from __future__ import annotations

import os
import signal
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

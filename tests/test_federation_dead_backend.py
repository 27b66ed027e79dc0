"""A dead metastore stops only its own namespaces (issue 12, part 4 and 5; invariant 12).

A federation of three metastores: the primary (SQLite file or a scratch schema of the shared
PostgreSQL), ``m_dead`` (a PostgreSQL instance of the test's own, never the shared server) and
``m3`` (a SQLite file), a namespace and a table in each. Real writer processes commit chunks to
all three tables and a real ``streampart scheduler run`` rolls them. Then the private PostgreSQL
is stopped (``immediate``: a crash as far as clients can tell):

- the writer of ``m_dead``'s table fails fast, with MetastoreDownError naming ``m_dead``, and
  so does ``streampart write`` (exit 1, one line naming the metastore);
- the other two writers keep committing and the daemon keeps rolling their tables;

and started again (same port): the writer of ``m_dead`` and the daemon's rolls there recover,
with no streampart process restarted. At the end every acknowledged chunk is in its table
exactly once, and every row there is of an acknowledged chunk.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from metastore.catalog import Catalog
from metastore.errors import MetastoreUnavailableError
from metastore.models import PartitionState, Table
from tests.fixtures import make_table
from tests.helpers import ROOT, all_ids, duplicates, records, wait_for
from tests.scheduler.helpers import daemon_env

# Short timings: each process re-reads the route table every second, and a dead metastore's
# calls fail fast for 2 s before one tries it again (so recovery shows within seconds).
FEDERATION_ENV = {
    "STREAMPART_FEDERATION__REFRESH_INTERVAL": "1s",
    "STREAMPART_FEDERATION__HEALTH_INTERVAL": "2s",
}
# Generous deadlines, not timing assertions: on a loaded 2-core machine a cold Python process
# (writer, daemon) takes tens of seconds to import what it needs before its first commit or roll.
STARTUP_S = 240
STEP_S = 90
NAMESPACES = {"ns_p": "primary", "ns_d": "m_dead", "ns_3": "m3"}


# A chunk whose commit the metastore's death interrupted stays COMMITTING there; the writer's
# retry takes it over after twice the commit timeout (the chunk protocol), so keep that short.
class Writer:
    """``python -m tests.workers writer --until STOP``: one JSON line per acknowledgement or failure."""

    def __init__(self, catalog: Catalog, table: str, number: int, stop: Path, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.workers", "writer", "--warehouse", str(catalog.warehouse.root),
             "--metastore", catalog.store.url, "--table", table, "--writer", str(number), "--rows", "5",
             "--interval", "0.2", "--fail-fast", "2", "--commit-timeout", "5", "--until", str(stop)],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=log.open("w"), stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    def lines(self) -> list[dict[str, Any]]:
        text = self.log.read_text() if self.log.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.startswith("{") and line.endswith("}")]

    def acks(self) -> list[dict[str, Any]]:
        return [x for x in self.lines() if "chunk" in x]

    def downs(self) -> list[dict[str, Any]]:
        return [x for x in self.lines() if "down" in x]


def _standard(catalog: Catalog, table: Table) -> int:
    """The table's standard partitions (-1 while its metastore does not answer this process)."""
    try:
        return len(catalog.partitions(table, [PartitionState.STANDARD]))
    except MetastoreUnavailableError:
        return -1


def _committed(writer: Writer, at_least: int) -> Callable[[], bool]:
    """For ``wait_for``: the writer has at least ``at_least`` acknowledged chunks."""
    return lambda: len(writer.acks()) >= at_least


def _rolled(catalog: Catalog, table: Table, at_least: int) -> Callable[[], bool]:
    """For ``wait_for``: the table has at least ``at_least`` standard partitions."""
    return lambda: _standard(catalog, table) >= at_least


def test_a_dead_metastore_stops_only_its_namespaces_and_everything_resumes_when_it_returns(
    catalog: Catalog, private_pg: Any, tmp_path: Path
) -> None:
    dead_db = f"m_dead_{uuid.uuid4().hex[:8]}"
    dead_url = private_pg.create_database(dead_db)
    catalog.federation.add("m_dead", dead_url, "read-write-create")
    catalog.federation.add("m3", f"sqlite:///{tmp_path / 'm3.sqlite'}", "read-write-create")
    tables: dict[str, Table] = {}
    for ns, home in NAMESPACES.items():
        catalog.namespaces.create(ns, metastore=home)
        tables[ns] = make_table(catalog, f"{ns}.t", roll_every="2s")
        assert tables[ns].metastore == home
    stop = tmp_path / "stop-writers"
    env = {**daemon_env(catalog), **FEDERATION_ENV}
    daemon_log = tmp_path / "daemon.log"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "streampart.cli", "scheduler", "run"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=daemon_log.open("w"), text=True,
    )  # fmt: skip
    writers = {
        ns: Writer(catalog, f"{ns}.t", k, stop, tmp_path / f"{ns}.log") for k, ns in enumerate(NAMESPACES)
    }
    try:
        # 1. all up: every table is written and rolled
        for ns, w in writers.items():
            wait_for(_committed(w, 3), f"{ns}'s writer to commit", timeout=STARTUP_S)
            wait_for(_rolled(catalog, tables[ns], 1), f"{ns}.t to roll", timeout=STARTUP_S)

        # 2. m_dead dies: only its namespace fails, fast and clearly; the others go on
        at_stop = {ns: (len(w.acks()), _standard(catalog, tables[ns])) for ns, w in writers.items()}
        private_pg.stop("immediate")
        downs = wait_for(
            lambda: writers["ns_d"].downs(), "ns_d's writer to be told m_dead is down", timeout=STEP_S
        )
        down_acks = len(writers["ns_d"].acks())
        assert {d["metastore"] for d in downs} == {"m_dead"}, downs
        assert all("m_dead" in d["down"] for d in downs), downs
        # once it failed, the circuit breaker answers at once, without trying the database
        wait_for(
            lambda: any("fail fast" in d["down"] for d in writers["ns_d"].downs()),
            "a fail-fast answer",
            timeout=STEP_S,
        )
        cli = subprocess.run(
            [sys.executable, "-m", "streampart.cli", "write", "ns_d.t", str(_chunk_file(tmp_path))],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=STARTUP_S,
        )  # fmt: skip
        assert cli.returncode == 1 and "m_dead" in cli.stderr and "Traceback" not in cli.stderr, cli.stderr
        for ns in ("ns_p", "ns_3"):
            acked, rolled = at_stop[ns]
            wait_for(_committed(writers[ns], acked + 5), f"{ns} to keep committing", timeout=STEP_S)
            wait_for(_rolled(catalog, tables[ns], rolled + 2), f"{ns}.t to keep rolling", timeout=STEP_S)
        # its writer retries the same chunk, never acknowledged while the metastore is down
        assert len(writers["ns_d"].acks()) == down_acks
        assert daemon.poll() is None, daemon_log.read_text()

        # 3. it comes back (same port): its writer and its rolls resume, nothing restarted
        private_pg.start()
        wait_for(_committed(writers["ns_d"], down_acks + 5), "ns_d's writer to recover", timeout=STEP_S)
        rolled_dead = at_stop["ns_d"][1]
        wait_for(_rolled(catalog, tables["ns_d"], rolled_dead + 2), "ns_d.t to roll again", timeout=STEP_S)
        assert daemon.poll() is None and all(w.proc.poll() is None for w in writers.values())
    finally:
        stop.touch()
        for w in writers.values():
            try:
                w.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                w.proc.kill()
        if daemon.poll() is None:
            daemon.send_signal(signal.SIGTERM)
        daemon_status = daemon.wait(timeout=60)
    assert daemon_status == 0, daemon_log.read_text()[-3000:]
    assert all(w.proc.returncode == 0 for w in writers.values()), [
        w.log.read_text()[-2000:] for w in writers.values()
    ]

    # every acknowledged chunk exactly once, and nothing else
    for ns, w in writers.items():
        table = catalog.table(f"{ns}.t")
        ids = all_ids(table)
        assert not duplicates(ids), f"{ns}.t: a row is there twice"
        acked_ids = sorted(i for a in w.acks() for i in range(a["first"], a["first"] + a["rows"]))
        assert sorted(ids) == acked_ids, f"{ns}.t holds other rows than its acknowledged chunks"
        assert len({a["token"] for a in w.acks()}) == len(w.acks()), f"{ns}: a token acknowledged twice"
    catalog.close()
    private_pg.drop_database(dead_db)


def _chunk_file(tmp_path: Path) -> Path:
    path = tmp_path / "one.jsonl"
    path.write_bytes(records(range(9_000_000, 9_000_005)))
    return path

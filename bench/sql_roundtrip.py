"""Benchmark ``jdbc``: a warm ``SELECT count(*)`` through a running ``streampart sql-server``.

Issue 31's goal 5: over PyHive (HiveServer2, what beeline and JDBC speak) a warm ``SELECT
count(*)`` answers in at most 0.5 s, and ``streampart query`` through a running server in at most
1 s end to end (the CLI's start included).

A real ``streampart sql-server`` serves a warehouse with one table of ``jdbc_chunks`` committed
chunks. Measured, after warm-up statements:

- **PyHive, warm**: one connection, ``SELECT count(*) FROM bench.events`` executed and fetched;
  baseline: ``SELECT 1`` on the same connection (the server's floor for a statement: HiveServer2's
  round trips, the statement's gate, Spark's planning of a constant).
- **the CLI**: ``streampart query "SELECT count(*) …"`` as a new process, wall time to its exit;
  baseline: a new Python process that does the same statement with PyHive and nothing else (the
  floor of a new process asking the server).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import (
    TABLE_NAME,
    BenchResult,
    Metric,
    commit_chunks,
    console,
    create_table,
    fmt,
    fmt_ratio,
    median,
    workdir,
)
from bench.http_load import stop_process

NAME = "jdbc"
ROOT = Path(__file__).resolve().parents[1]
STATEMENT = f"SELECT count(*) FROM {TABLE_NAME}"

_THIN_CLIENT = """
import sys
from pyhive import hive
conn = hive.connect(host=sys.argv[1], port=int(sys.argv[2]), username=sys.argv[3], password=sys.argv[4],
                    auth="CUSTOM")
cur = conn.cursor()
cur.execute(sys.argv[5])
print(cur.fetchall()[0][0])
"""


def _env(warehouse: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    return {
        **env,
        "STREAMPART_WAREHOUSE": str(warehouse),
        "STREAMPART_SPARK__SHUFFLE_PARTITIONS": "2",
        "PYTHONPATH": str(ROOT),
    }


def _start(warehouse: Path, env: dict[str, str], log: Path) -> tuple[subprocess.Popen[bytes], Any]:
    from ingest.kafka.devbroker import free_port
    from metastore.delta.warehouse import Warehouse
    from streampart.sql_endpoint import running_server

    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "streampart", "sql-server", "--port", str(port)],
            cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    here = Warehouse(str(warehouse)).local_dir
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streampart sql-server exited: {log.read_text()[-2000:]}")
        info = running_server(here)
        if info is not None:
            return proc, info
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"streampart sql-server did not start: {log.read_text()[-2000:]}")


def _wall(cmd: list[str], env: dict[str, str]) -> tuple[float, str]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} failed: {done.stderr[-2000:]}")
    return took, done.stdout.strip()


def run(scale: dict[str, Any]) -> BenchResult:
    from pyhive import hive

    from ingest.api.auth import hash_token, new_token
    from metastore.catalog import Catalog
    from metastore.models import Scope

    chunks, rows, reps = scale.get("jdbc_chunks", 200), scale["rows"], scale.get("jdbc_reps", 10)
    res = BenchResult(
        name=NAME,
        title="A warm SELECT count(*) through a running SQL server",
        method=[
            f"one table of {chunks:,} committed chunks of {rows} rows (SQLite metastore), served by a "
            "real `streampart sql-server` (local[2])",
            f"after 3 warm-up statements, {reps} rounds each, medians: PyHive on one open connection "
            f"(execute + fetch of `{STATEMENT}`); `streampart query` as a new process (wall time to exit)",
        ],
        baseline=(
            "PyHive: `SELECT 1` on the same connection (the server's floor for a statement). The CLI: a "
            "new Python process that sends the same statement with PyHive and exits (the floor of a new "
            "process asking the server)."
        ),
        params={"chunks": chunks, "rows_per_chunk": rows, "rounds": reps},
    )
    with workdir("jdbc") as tmp:
        warehouse = tmp / "warehouse"
        catalog = Catalog.open(warehouse)
        table = create_table(catalog)
        commit_chunks(catalog, table, chunks, rows, f"committing {chunks:,} chunks")
        token = new_token()
        catalog.store.create_token("bench", hash_token(token), [Scope.parse(f"read:{table.name.namespace}")])
        catalog.close()
        env = _env(warehouse)
        proc, info = _start(warehouse, env, tmp / "sql-server.log")
        try:
            conn = hive.connect(
                host=info.host, port=info.port, username="bench", password=token, auth="CUSTOM"
            )
            cursor = conn.cursor()

            def statement(sql: str) -> tuple[float, Any]:
                t0 = time.perf_counter()
                cursor.execute(sql)
                answer = cursor.fetchall()[0][0]
                return time.perf_counter() - t0, answer

            for _ in range(3):
                statement(STATEMENT)
                statement("SELECT 1")
            counts, ones, cli, thin = [], [], [], []
            expected = chunks * rows
            for _ in range(reps):
                took, n = statement(STATEMENT)
                assert n == expected, f"count(*) answered {n}, not {expected}"
                counts.append(took)
                ones.append(statement("SELECT 1")[0])
            creds = [info.host, str(info.port), "bench", token]
            cli_env = {**env, "STREAMPART_SQL_USER": "bench", "STREAMPART_SQL_TOKEN": token}
            for _ in range(reps):
                took, out = _wall([sys.executable, "-m", "streampart", "query", "--json", STATEMENT], cli_env)
                assert str(expected) in out, out
                cli.append(took)
                took, out = _wall([sys.executable, "-c", _THIN_CLIENT, *creds, STATEMENT], env)
                assert out == str(expected), out
                thin.append(took)
            conn.close()
        finally:
            stop_process(proc)
    res.metrics += [
        Metric("PyHive count(*), warm (goal ≤ 0.5 s)", median(counts), "s", median(ones)),
        Metric("streampart query, new process (goal ≤ 1 s)", median(cli), "s", median(thin)),
    ]
    res.params.update(
        {"pyhive_count_s": counts, "pyhive_select1_s": ones, "cli_s": cli, "thin_client_s": thin}
    )
    for m in res.metrics:
        console.print(
            f"  {m.name}: {fmt(m.value, m.unit)} vs {fmt(m.baseline, m.unit)} ({fmt_ratio(m.ratio)})"
        )
    return res

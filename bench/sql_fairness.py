"""Benchmark ``fairness``: another token's ``count(*)`` while one token's runaway statement runs.

One read token runs ``SELECT count(*) FROM range(1000000000) x CROSS JOIN range(1000000000) y``
through a real ``streampart sql-server`` — tasks that each run for ever, on every core. Measured:
a second token's ``SELECT count(*)`` over a small table, on a new connection, while the runaway
runs; baseline: the same statement on the idle server just before. The goal: it answers within
30 s on the 2-core machine (it waited for the runaway's ``statement_timeout`` before statements
got a slot back from long tasks).
"""

from __future__ import annotations

import threading
import time
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
from bench.sql_roundtrip import _env, _start

NAME = "fairness"
RUNAWAY = "SELECT count(*) FROM range(1000000000) x CROSS JOIN range(1000000000) y"
STATEMENT = f"SELECT count(*) FROM {TABLE_NAME}"


def run(scale: dict[str, Any]) -> BenchResult:
    from pyhive import hive

    from ingest.api.auth import hash_token, new_token
    from metastore.catalog import Catalog
    from metastore.models import Scope

    reps = scale.get("fairness_reps", 3)
    res = BenchResult(
        name=NAME,
        title="Another token's count(*) while a runaway statement holds every core",
        method=[
            "a real `streampart sql-server` (local[2], statement_timeout 10 min) serving a table of 5 chunks",
            f"token A runs `{RUNAWAY}`; after 5 s, token B opens a connection and runs `{STATEMENT}`, "
            f"{reps} times in a row (wall time: connect, execute, fetch); medians",
        ],
        baseline="the same statement of token B, on a new connection, on the idle server just before",
        params={"rounds": reps, "runaway": RUNAWAY},
    )
    with workdir("fairness") as tmp:
        warehouse = tmp / "warehouse"
        catalog = Catalog.open(warehouse)
        table = create_table(catalog)
        commit_chunks(catalog, table, 5, scale["rows"], "committing 5 chunks")
        ns = table.name.namespace
        tokens = {name: new_token() for name in ("a", "b")}
        for name, token in tokens.items():
            catalog.store.create_token(name, hash_token(token), [Scope.parse(f"read:{ns}")])
        catalog.close()
        proc, info = _start(warehouse, _env(warehouse), tmp / "sql-server.log")

        def connect(name: str) -> Any:
            return hive.connect(
                host=info.host, port=info.port, username=name, password=tokens[name], auth="CUSTOM"
            )

        def timed() -> float:
            t0 = time.perf_counter()
            conn = connect("b")
            try:
                cursor = conn.cursor()
                cursor.execute(STATEMENT)
                cursor.fetchall()
            finally:
                conn.close()
            return time.perf_counter() - t0

        try:
            for _ in range(3):  # warm: JIT, the first pins
                timed()
            idle = [timed() for _ in range(reps)]
            runaway = connect("a")
            cursor = runaway.cursor()
            thread = threading.Thread(target=lambda: _quietly(cursor.execute, RUNAWAY), daemon=True)
            thread.start()
            time.sleep(5)  # its tasks hold every core
            busy = [timed() for _ in range(reps)]
            still_running = thread.is_alive()
        finally:
            stop_process(proc)
    res.metrics += [
        Metric("token B's count(*) during the runaway (goal ≤ 30 s)", median(busy), "s", median(idle))
    ]
    res.params.update({"idle_s": idle, "busy_s": busy, "runaway_still_running": still_running})
    for m in res.metrics:
        console.print(
            f"  {m.name}: {fmt(m.value, m.unit)} vs {fmt(m.baseline, m.unit)} idle ({fmt_ratio(m.ratio)})"
        )
    console.print(f"  each: {', '.join(f'{t:.1f} s' for t in busy)}; the runaway still ran: {still_running}")
    return res


def _quietly(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except Exception:  # the runaway ends when the server stops: its error is expected
        return

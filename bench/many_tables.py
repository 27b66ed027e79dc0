"""Benchmark ``tables``: many tables, each fed by its own producer, through one server while rolls run.

Issue 31's goal 2: 100 tables, each receiving 1 chunk/s from its own producer (a thread with its
own ``ingest.client.Client``, writing with ``Client.write``: open, then upload and commit in one
request), for 5 minutes through one ``streampart serve``, with a real ``streampart scheduler run``
rolling every table every ``tables_roll_every``. Every acknowledged chunk must be in its table
exactly once (read back with delta-rs); the write call's p99 at most 1 s; every roll begun within
one heartbeat of its partition's due time.

A producer that falls behind its schedule writes its next chunk at once (never two at a time), so
the commits/s reached against the offered rate shows the ceiling: where they part, the machine
is past it. The server's CPU (from ``/proc``) says what bounds it.

The baseline, measured in the same run for 30 s (half before the load, half after): one bare
``deltalake.write_deltalake(mode="append")`` loop of the same 100-row batches into one plain
table (``bench/http_load.py``'s).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import (
    BenchResult,
    Metric,
    console,
    drop_pg_schema,
    fresh_metastore_url,
    percentile,
    pg_url_safe,
    postgres_problem,
    workdir,
)
from bench.http_load import (
    ROWS,
    bare_appender,
    json_records,
    merged,
    start_daemon,
    start_server,
    stop_process,
)

NAME = "tables"
HEARTBEAT_S = 5.0  # the roll daemon's default heartbeat (scheduler.heartbeat)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _server_cpu(pid: int) -> float:
    """CPU seconds of the server ``pid`` and of its worker processes (its children)."""
    total = _cpu_seconds(pid)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if parent == pid:
                total += _cpu_seconds(int(entry.name))
    return total


def _load(
    tmp: Path,
    metastore: str | None,
    tables: int,
    rate: float,
    seconds: float,
    roll_every: str,
    workers: tuple[int, int] = (1, 4),
) -> dict[str, Any]:
    """The load, its verification and the rolls' lateness, as a summary. ``workers``: the server's
    processes (``serve --workers``) and the roll daemon's threads (``scheduler.workers``)."""
    from deltalake import DeltaTable

    from ingest.api.auth import hash_token, new_token
    from ingest.client import Client
    from metastore.catalog import Catalog
    from metastore.durations import parse_duration
    from metastore.models import Mode, Scope, TableName, TableSpec, parse_schema
    from scheduler.roll import due_time

    warehouse = tmp / "warehouse"
    catalog = Catalog.open(warehouse, metastore)
    columns = parse_schema("id BIGINT, ts TIMESTAMP, msg STRING")
    made = [
        catalog.create_table(
            TableSpec(
                name=TableName.parse(f"many.t{i:03d}"),
                columns=columns,
                time_column="ts",
                mode=Mode.ARRIVAL,
                roll_every=parse_duration(roll_every),
            )
        )
        for i in range(tables)
    ]
    token = new_token()
    catalog.store.create_token("bench", hash_token(token), [Scope.parse("write:many")])
    server, url = start_server(warehouse, metastore, tmp / "server.log", workers[0])
    daemon = start_daemon(warehouse, metastore, tmp / "daemon.log", workers[1])
    acked: list[tuple[int, int]] = []  # (table, first id)
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    period = 1.0 / rate
    start_at = time.monotonic() + 1.0
    stop_at = start_at + seconds
    cpu0 = _server_cpu(server.pid)

    def producer(t: int) -> None:
        name = str(made[t].name)
        with Client(url, token, backoff=0.05, max_backoff=1.0) as api:
            k = 0
            next_at = start_at + period * t / tables  # spread the producers over the period
            while True:
                now = time.monotonic()
                if next_at >= stop_at:
                    return
                if next_at > now:
                    time.sleep(next_at - now)
                first = t * 1_000_000_000 + k * ROWS
                t0 = time.perf_counter()
                try:
                    api.write(name, json_records(first, ROWS), idempotency_key=f"t{t}-{k}")
                except Exception as exc:  # reported, and fails the verification
                    with lock:
                        errors.append(f"{name} chunk {k}: {type(exc).__name__}: {exc}")
                else:
                    with lock:
                        latencies.append(time.perf_counter() - t0)
                        acked.append((t, first))
                k += 1
                next_at = max(next_at + period, time.monotonic())  # behind: the next one at once

    threads = [threading.Thread(target=producer, args=(t,), daemon=True) for t in range(tables)]
    try:
        for th in threads:
            th.start()
        for th in threads:
            th.join(seconds + 300)
        elapsed = time.monotonic() - start_at
        cpu = (_server_cpu(server.pid) - cpu0) / elapsed
    finally:
        stop_process(daemon)
        stop_process(server)
    # -- verify with delta-rs; the rolls' lateness from the metastore ----------------------------
    missing = duplicated = 0
    by_table: dict[int, list[int]] = {}
    for t, first in acked:
        by_table.setdefault(t, []).append(first)
    lateness: list[float] = []
    for t, table in enumerate(made):
        ids = Counter(DeltaTable(table.location).to_pyarrow_table(columns=["id"]).column("id").to_pylist())
        duplicated += sum(1 for n in ids.values() if n > 1)
        missing += sum(1 for first in by_table.get(t, []) for i in range(ROWS) if first + i not in ids)
        for roll in catalog.store.list_rolls(table.id, limit=10_000):
            partition = catalog.store.get_partition(table.id, roll.partition_value)
            assert partition is not None
            lateness.append((roll.started_at - due_time(table, partition)).total_seconds())
    catalog.close()
    # how long the daemon's transactions that began the due rolls took (its partitions closed then)
    begins = [
        float(e["seconds"])
        for line in (tmp / "daemon.log").read_text().splitlines()
        if line.startswith("{") and (e := json.loads(line)).get("event") == "roll.due_begun"
    ]
    ms = [x * 1000 for x in latencies] or [0.0]
    return {
        "tables": tables,
        "offered_chunks_per_s": round(tables * rate, 1),
        "seconds": round(elapsed, 1),
        "commits": len(acked),
        "commits_per_s": round(len(acked) / elapsed, 1),
        "write_p50_ms": round(percentile(ms, 50), 1),
        "write_p99_ms": round(percentile(ms, 99), 1),
        "server_cpu_cores": round(cpu, 2),
        "rolls": len(lateness),
        "roll_start_late_p50_s": round(percentile(lateness, 50), 2) if lateness else None,
        "roll_start_late_max_s": round(max(lateness), 2) if lateness else None,
        "rolls_late_over_heartbeat": sum(1 for x in lateness if x > HEARTBEAT_S),
        "begin_transaction_max_s": round(max(begins), 2) if begins else None,
        "missing_rows": missing,
        "duplicate_ids": duplicated,
        "errors": errors[:5],
        "verified": not (missing or duplicated or errors),
    }


def run(scale: dict[str, Any]) -> BenchResult:
    tables = scale.get("tables_count", 100)
    rate = scale.get("tables_rate", 1.0)
    seconds = scale.get("tables_seconds", 300)
    roll_every = scale.get("tables_roll_every", "1m")
    workers = (scale.get("tables_server_workers", 1), scale.get("tables_roll_workers", 4))
    problem = postgres_problem()
    backend = "postgresql" if problem is None else "sqlite"
    res = BenchResult(
        name=NAME,
        title=f"{tables} tables × {rate:g} chunk/s each through one server while rolls run",
        method=[
            f"{tables} arrival-mode tables rolling every {roll_every}; a producer thread per table (its own "
            f"ingest.client.Client) writes a {ROWS}-row chunk every {1 / rate:g} s with Client.write, for "
            f"{seconds} s; one `streampart serve --workers {workers[0]}`, one `streampart scheduler run` "
            f"(scheduler.workers = {workers[1]})",
            f"metastore: {backend}" + (f" ({pg_url_safe()})" if backend == "postgresql" else f" ({problem})"),
            "write latency: Client.write as the producer sees it (open, then upload with ?commit=true)",
            "a roll's lateness: its start minus its partition's due time (scheduler.roll.due_time); "
            f"on time: within one heartbeat ({HEARTBEAT_S:g} s); the daemon begins the rolls due at one "
            "instant in one metastore transaction, whose length (until their partitions closed) it logs",
            "verified with delta-rs: every acknowledged chunk's rows in its table exactly once",
        ],
        baseline=(
            "one bare deltalake.write_deltalake(mode='append') loop of the same batches into one plain "
            "table for 30 s in all, half before the load and half after (bench/http_load.py's)"
        ),
        params={
            "tables": tables,
            "rate": rate,
            "seconds": seconds,
            "roll_every": roll_every,
            "backend": backend,
            "server_workers": workers[0],
            "roll_workers": workers[1],
        },
    )
    with workdir("tables") as tmp:
        before = bare_appender(tmp / "bare", 15)
        url = fresh_metastore_url(backend, tmp)
        try:
            s = _load(tmp, url, tables, rate, seconds, roll_every, workers)
        finally:
            drop_pg_schema(url)
        b = merged(before, bare_appender(tmp / "bare", 15)).summary()
    console.print(f"  {json.dumps(s)}")
    console.print(f"  bare appender: {json.dumps(b)}")
    res.params["result"], res.params["bare_appender"] = s, b
    res.metrics += [
        Metric("commits", s["commits_per_s"], "commits/s", b["commits_per_s"], higher_is_better=True),
        Metric("offered", s["offered_chunks_per_s"], "chunks/s"),
        Metric("write p50", s["write_p50_ms"], "ms"),
        Metric("write p99 (goal ≤ 1,000 ms)", s["write_p99_ms"], "ms"),
        Metric("server CPU", s["server_cpu_cores"], "cores"),
        Metric("rolls late by more than a heartbeat", s["rolls_late_over_heartbeat"], "rolls"),
        Metric("longest transaction beginning the due rolls", s["begin_transaction_max_s"] or 0.0, "s"),
    ]
    kept_up = s["commits_per_s"] >= 0.95 * s["offered_chunks_per_s"]
    met = kept_up and s["write_p99_ms"] <= 1000 and s["rolls_late_over_heartbeat"] == 0
    res.notes.append(
        f"{'kept up with' if kept_up else 'fell behind'} the offered {s['offered_chunks_per_s']} chunks/s "
        f"({s['commits_per_s']} committed/s), write p99 {s['write_p99_ms']} ms, "
        f"{s['rolls_late_over_heartbeat']} of {s['rolls']} rolls late by more than a heartbeat: goal "
        f"{'met' if met else 'NOT met'}"
    )
    if not s["verified"]:
        res.notes.append(f"VERIFICATION FAILED: {json.dumps(s)}")
    return res

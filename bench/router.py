"""Benchmark: chunk commit latency through the federation's router vs directly (issue 12).

The same table in the same PostgreSQL database is written two ways, in the same run, interleaved
in blocks so that drift of the machine's load hits both alike:

- **through the router**: a catalog opened on the primary (another PostgreSQL database) with the
  table's database registered as federated metastore ``m1`` (its prefix places ``fed_bench`` there):
  every call is routed (route-table version polled every ``refresh_s``, the access type checked);
- **directly**: a catalog opened on that database as its own primary (no registry, no routing).

Each timed operation is one chunk: reserve → stage → commit (``ChunkWriter.write_table``, one
writer). The ratio is the router's cost; it should be close to 1.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import (
    BenchResult,
    Metric,
    console,
    create_table,
    drop_pg_schema,
    fmt,
    fmt_ratio,
    fresh_metastore_url,
    percentile,
    pg_url_safe,
    postgres_problem,
    progress,
    sample_data,
    workdir,
)

NAME = "router"
TABLE = "fed_bench.events"
BLOCK = 10  # commits per path before switching to the other


def run(scale: dict[str, Any]) -> BenchResult:
    from ingest.chunks import ChunkWriter
    from metastore.catalog import Catalog

    n, warmup, rows = scale["router_commits"], scale["router_warmup"], scale["rows"]
    problem = postgres_problem()
    backend = "sqlite" if problem else "postgresql"
    result = BenchResult(
        name=NAME,
        title=f"Chunk commit latency through the router vs directly ({backend}, 1 writer)",
        method=[
            f"One table ({TABLE}) in one {backend} metastore database M, {n} chunks of {rows} rows each way, "
            f"after {warmup} warm-up chunks each; the two ways alternate in blocks of {BLOCK} chunks.",
            "Through the router: Catalog.open(warehouse, P) on a primary P (another database) where M is "
            "registered as metastore m1 (read-write-create, prefix fed_); the table is looked up and written "
            "through P's catalog (routing, access check, route-version polling every 5 s).",
            "Directly: Catalog.open(warehouse, M), M as its own primary.",
            "Each timed operation: ChunkWriter.write_table (reserve → stage Parquet → commit: one Delta "
            "commit and the metastore's commit transaction), wall clock (time.perf_counter); p50 and p99.",
        ],
        baseline="the same chunk commits into the same table and database, directly (no router)",
        params={"commits": n, "warmup": warmup, "rows_per_chunk": rows, "backend": backend, "block": BLOCK},
    )
    if problem:
        result.notes.append(
            f"PostgreSQL at {pg_url_safe()} is unusable ({problem}): measured on SQLite files"
        )
    with workdir("router") as tmp:
        primary_url = fresh_metastore_url(backend, tmp) or f"sqlite:///{tmp / 'primary.sqlite'}"
        m_url = fresh_metastore_url(backend, tmp) or f"sqlite:///{tmp / 'm1.sqlite'}"
        routed = direct = None
        try:
            routed = Catalog.open(tmp / "warehouse", primary_url)
            routed.federation.add("m1", m_url, "read-write-create", prefix="fed_")
            table = create_table(routed, TABLE)
            if table.metastore != "m1":
                result.notes.append(f"check failed: the table landed in {table.metastore}, not m1")
            direct = Catalog.open(tmp / "warehouse", m_url)
            writers = {
                "router": ChunkWriter(routed, routed.table(TABLE)),
                "direct": ChunkWriter(direct, direct.table(TABLE)),
            }
            latencies: dict[str, list[float]] = {"router": [], "direct": []}
            count = 0

            def commit(way: str) -> float:
                nonlocal count
                data = sample_data(table, rows, first_id=count * rows)
                count += 1
                t0 = time.perf_counter()
                writers[way].write_table(data)
                return time.perf_counter() - t0

            for way in writers:
                for _ in range(warmup):
                    commit(way)
            with progress() as bar:
                task = bar.add_task(f"committing {n} chunks each way", total=2 * n)
                while len(latencies["direct"]) < n:
                    for way in ("router", "direct"):
                        for _ in range(min(BLOCK, n - len(latencies[way]))):
                            latencies[way].append(commit(way))
                            bar.advance(task)
            committed = direct.store.list_chunks(direct.table(TABLE).id)
            if len(committed) != count:
                result.notes.append(f"check failed: {len(committed)} chunks in M, {count} committed")
        finally:
            for catalog in (routed, direct):
                if catalog is not None:
                    catalog.close()
            if backend == "postgresql":
                drop_pg_schema(primary_url)
                drop_pg_schema(m_url)
    ms = {way: [x * 1000 for x in values] for way, values in latencies.items()}
    for q in (50, 99):
        result.metrics.append(
            Metric(f"commit p{q}", percentile(ms["router"], q), "ms", percentile(ms["direct"], q))
        )
    for m in result.metrics:
        console.print(
            f"  {m.name}: through the router {fmt(m.value, 'ms')}, directly {fmt(m.baseline, 'ms')}, "
            f"ratio {fmt_ratio(m.ratio)}"
        )
    return result

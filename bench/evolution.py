"""Benchmark: what schema evolution from data costs a chunk commit (issue 27).

Three tables in one SQLite metastore, written by one writer in the same run, interleaved in blocks
so that drift of the machine's load hits each alike; every chunk is ``rows`` JSON lines committed
with ``ChunkWriter.write`` (parse → stage → commit). Two comparisons, each of like with like:

- **A plain chunk, evolution on or off**: the same chunks into a table whose schema does not evolve
  (``none``, the baseline) and into one with ``add-columns`` (records with no new field), both of
  the same three columns: what having evolution on costs a chunk that changes nothing (the aim:
  nothing).
- **A chunk that adds a column, against a plain chunk into the same table**: a table with
  ``add-columns`` takes, in turn, a chunk whose records bring one new field (a new column: its
  ``metaData`` in the same Delta version as its rows) and a chunk that brings none (the baseline).
  Both meet the table at the same width, which grows by one column per evolving chunk (the parser's
  cost grows with a table's width whatever evolution does). The aim: at most 2×.

Besides latency, the metastore statements each commit runs are counted (SQLAlchemy's
``before_cursor_execute``): a plain chunk must run exactly as many on an evolving table.
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, median, percentile, progress, workdir

NAME = "evolution"
BLOCK = 10  # commits per way before switching to the next
# way → (table, whether its chunks bring a new field)
WAYS = {
    "plain": ("bench.t0", False),
    "plain, evolving table": ("bench.t1", False),
    "adds a column": ("bench.t2", True),
    "plain into the same table": ("bench.t2", False),
}
BASELINE = {"plain, evolving table": "plain", "adds a column": "plain into the same table"}


def _content(rows: int, first: int, field: str | None) -> bytes:
    ts = "2026-11-27T10:00:00Z"
    extra = {field: 1} if field else {}
    return "".join(
        json.dumps({"id": i, "ts": ts, "msg": f"event {i:08d}", **extra}) + "\n"
        for i in range(first, first + rows)
    ).encode()


def run(scale: dict[str, Any]) -> BenchResult:
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.catalog import Catalog
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema

    n, warmup, rows = scale["evolution_commits"], scale["warmup"], scale["rows"]
    result = BenchResult(
        name=NAME,
        title="Chunk commit latency with schema evolution from data (sqlite, 1 writer)",
        method=[
            f"One SQLite metastore, {n} chunks of {rows} JSON lines each way after {warmup} warm-up chunks, "
            f"the ways taking turns in blocks of {BLOCK} chunks (the two ways into the evolving table "
            "alternating chunk by chunk, so both meet it at the same width).",
            "plain: a table with schema evolution none (3 columns). plain, evolving table: a table with "
            "add-columns, records with no new field (3 columns). adds a column: a table with add-columns, "
            "every chunk's records bring one new field (a new column per commit, its metaData in the same "
            "Delta version as the rows). plain into the same table: chunks with no new field into that "
            "table, at the same width.",
            "Each timed operation: ChunkWriter.write (parse → stage Parquet → commit), wall clock "
            "(time.perf_counter); p50 and p99. Statements: SQLAlchemy before_cursor_execute events "
            "during the operation, median per commit.",
        ],
        baseline="a plain chunk into a table whose schema does not evolve; for a chunk adding a column, "
        "a plain chunk into the same table at the same width",
        params={"commits": n, "warmup": warmup, "rows_per_chunk": rows, "block": BLOCK},
    )
    statements = 0

    def count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    with workdir("evolution") as tmp:
        catalog = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'metastore.sqlite'}")
        try:
            writers = {}
            for k, name in enumerate(sorted({t for t, _ in WAYS.values()})):
                table = catalog.create_table(
                    TableSpec(
                        name=TableName.parse(name),
                        columns=parse_schema("id BIGINT, ts TIMESTAMP, msg STRING"),
                        time_column="ts",
                        mode=Mode.ARRIVAL,
                        roll_every=parse_duration("1d"),
                        schema_evolution="none" if k == 0 else "add-columns",
                        max_new_columns=n + warmup + 1,
                    )
                )
                writers[name] = ChunkWriter(catalog, table)
            latencies: dict[str, list[float]] = {way: [] for way in WAYS}
            counts: dict[str, list[int]] = {way: [] for way in WAYS}
            made = 0

            def commit(way: str) -> tuple[float, int]:
                nonlocal made, statements
                name, brings = WAYS[way]
                content = _content(rows, made * rows, f"f{made}" if brings else None)
                made += 1
                statements = 0
                t0 = time.perf_counter()
                writers[name].write(content, Format.JSONL)
                return time.perf_counter() - t0, statements

            def block(ways: tuple[str, ...], times: int) -> None:
                for _ in range(times):
                    for way in ways:
                        seconds, ran = commit(way)
                        latencies[way].append(seconds)
                        counts[way].append(ran)
                        bar.advance(task)

            sa.event.listen(Engine, "before_cursor_execute", count)
            try:
                for way in WAYS:
                    for _ in range(warmup):
                        commit(way)
                with progress() as bar:
                    task = bar.add_task(f"committing {n} chunks each way", total=len(WAYS) * n)
                    while len(latencies["plain"]) < n:
                        times = min(BLOCK, n - len(latencies["plain"]))
                        block(("plain",), times)
                        block(("plain, evolving table",), times)
                        block(("adds a column", "plain into the same table"), times)
            finally:
                sa.event.remove(Engine, "before_cursor_execute", count)
            evolving = catalog.table("bench.t2")
            if len(evolving.columns) != 3 + n + warmup:
                result.notes.append(
                    f"check failed: the evolving table has {len(evolving.columns)} columns, "
                    f"not {3 + n + warmup}"
                )
        finally:
            catalog.close()
    ms = {way: [x * 1000 for x in values] for way, values in latencies.items()}
    for way, base in BASELINE.items():
        for q in (50, 99):
            result.metrics.append(
                Metric(f"{way}: commit p{q}", percentile(ms[way], q), "ms", percentile(ms[base], q))
            )
        result.metrics.append(
            Metric(f"{way}: statements per commit", median(counts[way]), "", median(counts[base]))
        )
    for m in result.metrics:
        console.print(
            f"  {m.name}: {fmt(m.value, m.unit)}, baseline {fmt(m.baseline, m.unit)}, "
            f"ratio {fmt_ratio(m.ratio)}"
        )
    return result

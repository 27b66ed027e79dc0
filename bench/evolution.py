"""Benchmark: what schema evolution from data costs a chunk commit (issue 27).

Three tables in one SQLite metastore, written by one writer in the same run, interleaved in blocks
so that drift of the machine's load hits each alike; every chunk is ``rows`` JSON lines committed
with ``ChunkWriter.write`` (parse → stage → commit):

- **plain**: a table whose schema does not evolve (``none``): the baseline;
- **plain, evolving table**: a table with ``add-columns`` whose records bring no new field: what
  having evolution on costs a chunk that changes nothing (the aim: nothing);
- **evolving**: a table with ``add-columns`` whose every chunk brings one new field, so every
  commit adds a column (its ``metaData`` in the same Delta version as its rows): the aim is at
  most 2× a plain commit.

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
WAYS = ("plain", "plain, evolving table", "evolving")


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
            f"Three tables in one SQLite metastore, {n} chunks of {rows} JSON lines into each after {warmup} "
            f"warm-up chunks, the tables taking turns in blocks of {BLOCK} chunks.",
            "plain: schema evolution none. plain, evolving table: add-columns, records with no new field. "
            "evolving: add-columns, every chunk's records bring one new field (a new column per commit, "
            "its metaData in the same Delta version as the rows).",
            "Each timed operation: ChunkWriter.write (parse → stage Parquet → commit), wall clock "
            "(time.perf_counter); p50 and p99. Statements: SQLAlchemy before_cursor_execute events "
            "during the operation, median per commit.",
        ],
        baseline="the same chunks committed into the table whose schema does not evolve",
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
            for k, way in enumerate(WAYS):
                table = catalog.create_table(
                    TableSpec(
                        name=TableName.parse(f"bench.t{k}"),
                        columns=parse_schema("id BIGINT, ts TIMESTAMP, msg STRING"),
                        time_column="ts",
                        mode=Mode.ARRIVAL,
                        roll_every=parse_duration("1d"),
                        schema_evolution="none" if way == "plain" else "add-columns",
                        max_new_columns=n + warmup + 1,
                    )
                )
                writers[way] = ChunkWriter(catalog, table)
            latencies: dict[str, list[float]] = {way: [] for way in WAYS}
            counts: dict[str, list[int]] = {way: [] for way in WAYS}
            made = 0

            def commit(way: str) -> tuple[float, int]:
                nonlocal made, statements
                field = f"f{made}" if way == "evolving" else None
                content = _content(rows, made * rows, field)
                made += 1
                statements = 0
                t0 = time.perf_counter()
                writers[way].write(content, Format.JSONL)
                return time.perf_counter() - t0, statements

            sa.event.listen(Engine, "before_cursor_execute", count)
            try:
                for way in WAYS:
                    for _ in range(warmup):
                        commit(way)
                with progress() as bar:
                    task = bar.add_task(f"committing {n} chunks into each table", total=len(WAYS) * n)
                    while len(latencies[WAYS[-1]]) < n:
                        for way in WAYS:
                            for _ in range(min(BLOCK, n - len(latencies[way]))):
                                seconds, ran = commit(way)
                                latencies[way].append(seconds)
                                counts[way].append(ran)
                                bar.advance(task)
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
    for way in WAYS[1:]:
        for q in (50, 99):
            result.metrics.append(
                Metric(f"{way}: commit p{q}", percentile(ms[way], q), "ms", percentile(ms["plain"], q))
            )
        result.metrics.append(
            Metric(f"{way}: statements per commit", median(counts[way]), "", median(counts["plain"]))
        )
    for m in result.metrics:
        console.print(
            f"  {m.name}: {fmt(m.value, m.unit)}, plain {fmt(m.baseline, m.unit)}, ratio {fmt_ratio(m.ratio)}"
        )
    return result

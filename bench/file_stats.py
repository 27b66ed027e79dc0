"""Benchmark: the column statistics every add carries (``metastore/delta/stats.py``) — what they cost a
chunk commit, and how many files a reader opens with them.

- **Write cost**: chunk commits of 100 rows (six columns: integer, timestamp, string, double,
  boolean, date) into one table on the local disk, SQLite metastore, one process, taking turns
  commit by commit with the baseline so the machine's drift falls on both sides alike.
- **Baseline**: the same commits, in the same process and turns, with the writer's gathering of
  statistics replaced by none (its adds then carry ``numRecords`` only, as before statistics).
- **Reads**: the table's chunk files as delta-rs' pyarrow dataset sees them (``to_pyarrow_dataset``),
  and the fragments a point lookup on ``id`` keeps (``get_fragments(filter=…)``), against the same
  lookup over a table whose adds carry none (every file kept).
"""

from __future__ import annotations

import json
import time
from typing import Any

from bench.common import BenchResult, Metric, console, create_table, fmt, percentile, workdir

NAME = "stats"
SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, score DOUBLE, ok BOOLEAN, day DATE"


def _chunk(k: int, rows: int) -> bytes:
    return "\n".join(
        json.dumps(
            {
                "id": k * rows + i,
                "ts": f"2026-11-21T10:{i % 60:02d}:00Z",
                "msg": f"m{i}",
                "score": i / 3,
                "ok": i % 2 == 0,
                "day": "2026-11-21",
            }
        )
        for i in range(rows)
    ).encode()


def _none(data: Any, columns: Any) -> str:
    """The writer's gathering of statistics, made to gather none (the baseline's adds)."""
    return "{}"


def run(scale: dict[str, Any]) -> BenchResult:
    import deltalake
    import pyarrow.dataset as ds

    import ingest.chunks.writer as writer_module
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.catalog import Catalog

    rows, n, warmup = scale["rows"], scale["stats_commits"], scale["warmup"]
    result = BenchResult(
        name=NAME,
        title="Column statistics in every add: a chunk commit's cost, and the files a lookup opens",
        method=[
            f"Write: {n} chunk commits of {rows} rows (six columns) into one table on the local disk, "
            f"SQLite metastore, after {warmup} warm-up commits; with and without statistics taking "
            "turns commit by commit in one process; ChunkWriter.write wall clock, p50 and p99.",
            "Reads: delta-rs' pyarrow dataset of the table's chunk files; the fragments a point "
            "lookup on id keeps (get_fragments with the filter), with statistics and without.",
        ],
        baseline="the same commits in the same process and turns, without statistics (numRecords only)",
        params={"commits": n, "rows": rows},
    )
    gather = writer_module.ranges_stats
    with workdir("stats") as tmp:
        catalog = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'metastore.sqlite'}")
        try:
            sides = ("with", "without")
            tables = {side: create_table(catalog, f"bench.stats_{side}", SCHEMA) for side in sides}
            writers = {side: ChunkWriter(catalog, t) for side, t in tables.items()}
            latencies: dict[str, list[float]] = {"with": [], "without": []}
            for k in range(warmup + n):
                for side in ("with", "without") if k % 2 == 0 else ("without", "with"):
                    writer_module.ranges_stats = gather if side == "with" else _none
                    started = time.perf_counter()
                    writers[side].write(_chunk(k, rows), Format.JSONL)
                    if k >= warmup:
                        latencies[side].append(time.perf_counter() - started)
        finally:
            writer_module.ranges_stats = gather
            catalog.close()
        for q in (50, 99):
            ours, base = percentile(latencies["with"], q), percentile(latencies["without"], q)
            result.metrics.append(Metric(f"chunk commit p{q}", ours * 1000, "ms", base * 1000))
        probe = (n // 2) * rows + 7  # an id in one chunk's file
        opened = {}
        for side, t in tables.items():
            dataset = deltalake.DeltaTable(t.location).to_pyarrow_dataset()
            total = len(list(dataset.get_fragments()))
            opened[side] = len(list(dataset.get_fragments(filter=ds.field("id") == probe)))
            assert dataset.to_table(filter=ds.field("id") == probe).num_rows == 1, side
        lookup = Metric("files a point lookup opens", opened["with"], "files", opened["without"])
        result.metrics.append(lookup)
        result.notes.append(f"the table holds {total} chunk files; the lookup's answer checked on both sides")
    console.print(
        f"  commit p50 {fmt(result.metrics[0].value)} ms with statistics, {fmt(result.metrics[0].baseline)} "
        f"without; a lookup opens {opened['with']} of {total} files"
    )
    return result

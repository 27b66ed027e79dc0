"""Benchmark: rolling a large partition with the local engine vs the Spark engine on a standalone cluster.

``roll.engine = spark`` exists for partitions too big for one process. This measures both engines
on the same data: two tables get the same staged chunk files (a 2 GB partition by default), one
is rolled by ``streampart roll`` with the local engine, the other by ``streampart roll`` with
``roll.engine = spark`` on a Spark standalone cluster (a master and two workers of 1 core and
1 GiB, started here from pyspark's own classes, as the tests start theirs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, create_table, fmt, fmt_ratio, progress, workdir

NAME = "spark_roll"
# Why 32 MiB (8 MiB quick) chunks: Kafka micro-batches and HTTP uploads of a busy table stage
# files of this order; a 2 GB partition is then 64 chunks, as an hour of such a table might be.
CHUNK_BYTES = {"default": 32 * 1024 * 1024, "quick": 8 * 1024 * 1024}
# Random hex text: snappy cannot shrink it, so the bytes on disk are what the scale says.
MSG_CHARS = 96


def chunk_data(table: Any, rows: int, first_id: int, msg: Any) -> Any:
    """One chunk's rows in the table's exact Arrow schema; ``msg`` is reused (random, incompressible)."""
    from datetime import UTC, datetime

    import pyarrow as pa

    from metastore.delta.arrow import data_schema

    now = datetime.now(UTC)
    return pa.table(
        {"id": pa.array(range(first_id, first_id + rows), pa.int64()), "ts": [now] * rows, "msg": msg},
        schema=data_schema(table.columns),
    )


def random_messages(rows: int) -> Any:
    import pyarrow as pa

    raw = os.urandom(rows * MSG_CHARS // 2).hex()
    return pa.array([raw[i * MSG_CHARS : (i + 1) * MSG_CHARS] for i in range(rows)], pa.string())


def roll_cli(
    warehouse: Path, table: str, env: dict[str, str], master: str | None
) -> tuple[dict[str, Any], float]:
    """``streampart roll TABLE --force --json`` in its own process: its one roll, the process's seconds."""
    argv = [sys.executable, "-m", "streampart.cli", "--warehouse", str(warehouse)]
    argv += ["--spark-master", master] if master else []
    argv += ["roll", table, "--force", "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=3600, stdin=subprocess.DEVNULL
    )
    seconds = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed: {proc.stderr[-2000:]}")
    [rolled] = json.loads(proc.stdout)["rolled"]
    return rolled, seconds


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from ingest.chunks import ChunkWriter
    from metastore.catalog import Catalog
    from metastore.delta.files import live_files
    from tests.standalone import WORKER_CORES, WORKER_MEMORY, StandaloneCluster, cluster_env

    total = scale["spark_roll_bytes"]
    chunk_bytes = CHUNK_BYTES["quick" if total < 1024**3 else "default"]
    chunks = max(1, total // chunk_bytes)
    rows = chunk_bytes // (MSG_CHARS + 8)  # msg, plus id (ts is one value: encoded in almost nothing)
    result = BenchResult(
        name=NAME,
        title=f"Roll of a {total / 1024**3:.2f} GiB partition: local engine vs Spark engine (standalone)",
        method=[
            f"Two fresh arrival-mode tables on one SQLite metastore each get the same {chunks} chunks of "
            f"{rows:,} rows (id, ts, {MSG_CHARS} random hex characters: incompressible), one real chunk "
            "commit each (ChunkWriter.write_table): one streaming partition of staged files per table.",
            "A Spark standalone cluster is started (tests/standalone.py: a master and 2 workers of "
            f"{WORKER_CORES} core / {WORKER_MEMORY}, pyspark's spark-class) and waited for before timing.",
            "Each table is rolled by `streampart roll TABLE --force --json` in its own process: the local "
            "engine (pyarrow, streaming record batches), then roll.engine = spark with --spark-master on the "
            "cluster. Timed: the process's wall clock (time.perf_counter; includes Python and, for Spark, "
            "the driver's start and executor launch) and RollResult.seconds (the roll itself).",
            "Rows of both rolled partitions are checked against what was committed.",
        ],
        baseline="the local engine (roll.engine = local, the default) on the same staged files, same run",
        params={"partition_bytes": total, "chunks": chunks, "rows_per_chunk": rows},
    )
    with workdir("spark-roll") as tmp:
        warehouse = tmp / "warehouse"
        catalog = Catalog.open(warehouse)
        tables = {engine: create_table(catalog, f"bench.{engine}_engine") for engine in ("local", "spark")}
        msg = random_messages(rows)
        build0 = time.perf_counter()
        with progress() as bar:
            label = f"staging {chunks} chunks of {chunk_bytes >> 20} MiB into two tables"
            task = bar.add_task(label, total=chunks)
            writers = {e: ChunkWriter(catalog, t) for e, t in tables.items()}
            for k in range(chunks):
                for engine, table in tables.items():
                    writers[engine].write_table(chunk_data(table, rows, k * rows, msg))
                bar.advance(task)
        build_s = time.perf_counter() - build0
        staged = {e: sum(f.size for f in live_files(catalog.warehouse.load(t))) for e, t in tables.items()}
        catalog.close()
        console.print(f"  staged {staged['local'] / 1024**3:.2f} GiB per table in {build_s:.1f} s")

        env = {k: v for k, v in cluster_env().items() if not k.startswith("STREAMPART_")}
        local, local_wall = roll_cli(warehouse, "bench.local_engine", env, None)
        cluster = StandaloneCluster(tmp / "spark-standalone")
        t0 = time.perf_counter()
        cluster.start()
        cluster_s = time.perf_counter() - t0
        try:
            spark, spark_wall = roll_cli(
                warehouse, "bench.spark_engine", {**env, "STREAMPART_ROLL__ENGINE": "spark"}, cluster.url
            )
        finally:
            cluster.stop()
    expected = chunks * rows
    for engine, r in (("local", local), ("spark", spark)):
        if r["rows"] != expected or r["files_before"] != chunks:
            result.notes.append(
                f"check failed: the {engine} engine rolled {r['files_before']} files / {r['rows']} rows, "
                f"expected {chunks} / {expected}"
            )
    result.metrics += [
        Metric("roll (RollResult.seconds)", spark["seconds"], "s", local["seconds"]),
        Metric("roll process wall clock", spark_wall, "s", local_wall),
        Metric(
            "rows/s (RollResult)",
            spark["rows"] / spark["seconds"],
            "rows/s",
            local["rows"] / local["seconds"],
            higher_is_better=True,
        ),
        Metric("files after roll", spark["files_after"], "files", local["files_after"]),
        Metric("rows rolled", spark["rows"], "rows", local["rows"]),
    ]
    result.params.update(
        {
            "staged_bytes": staged,
            "build_seconds": round(build_s, 3),
            "cluster_start_seconds": round(cluster_s, 3),
            "local": local,
            "spark": spark,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("metric", "spark engine", "local engine", "spark / local"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    t.add_row("roll (RollResult.seconds)", fmt(spark["seconds"], "s"), fmt(local["seconds"], "s"),
              fmt_ratio(spark["seconds"] / local["seconds"]))  # fmt: skip
    t.add_row("process wall clock", fmt(spark_wall, "s"), fmt(local_wall, "s"),
              fmt_ratio(spark_wall / local_wall))  # fmt: skip
    t.add_row("files before → after", f"{spark['files_before']} → {spark['files_after']}",
              f"{local['files_before']} → {local['files_after']}", "")  # fmt: skip
    t.add_row("rows", f"{spark['rows']:,}", f"{local['rows']:,}", "")
    console.print(t)
    console.print(
        f"  staged {staged['local'] / 1024**3:.2f} GiB per table; the cluster started in {cluster_s:.1f} s "
        "(not timed above)"
    )
    return result

"""Benchmark: clustering at roll (``--cluster-by``) — the files a point lookup on the clustered column
opens over many rolled partitions, its time, and what clustering costs the rolls.

- **Tables**: two event-time tables of hourly partitions, the same rows in both (``id``, ``ts``,
  ``user_id`` uniform over 1M values, ``amount``), on the local disk, SQLite metastore: one made with
  ``--cluster-by user_id``, the other without (the baseline).
- **Rows**: ``chunks`` chunk commits, each holding ``rows`` rows of every one of ``partitions`` hours,
  so every partition gets one file per chunk. Then every partition is rolled (``Roller.roll_table``,
  forced), on both tables, with the target file size set to the smallest chunk file: each
  rolled partition then holds about ``chunks`` files, as a partition of that many times 128 MiB
  would at the default target.
- **Lookups**: delta-rs' pyarrow dataset (``to_pyarrow_dataset``), a reader nobody here wrote, for
  ``user_id = v`` over the whole table: the fragments it keeps (``get_fragments(filter=…)``) and the
  time of ``to_table(filter=…)``, median over ``probes`` values; each answer checked against the
  baseline's.
"""

from __future__ import annotations

import random
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, median, workdir

NAME = "cluster"


def _chunk(k: int, partitions: int, rows: int, start: datetime, schema: Any) -> Any:
    import pyarrow as pa

    rng = random.Random(k)
    n = partitions * rows
    return pa.table(
        {
            "id": pa.array(range(k * n, (k + 1) * n), pa.int64()),
            "ts": pa.array([start + timedelta(hours=i // rows, seconds=i % rows) for i in range(n)]),
            "user_id": pa.array([rng.randrange(1_000_000) for _ in range(n)], pa.int64()),
            "amount": pa.array([rng.random() * 100 for _ in range(n)], pa.float64()),
        }
    ).cast(schema)


def run(scale: dict[str, Any]) -> BenchResult:
    import deltalake
    import pyarrow.dataset as ds

    from ingest.chunks import ChunkWriter
    from metastore.catalog import Catalog
    from metastore.delta.arrow import data_schema
    from metastore.delta.files import live_files
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema
    from scheduler.config import RollConfig
    from scheduler.roll import Roller

    partitions, chunks = scale["cluster_partitions"], scale["cluster_chunks"]
    rows, probes = scale["cluster_rows"], scale["cluster_probes"]
    result = BenchResult(
        name=NAME,
        title=f"Clustering at roll: a point lookup over {partitions:,} rolled partitions",
        method=[
            f"Two event-time tables of hourly partitions, the same rows: {chunks} chunk commits of "
            f"{rows} rows in each of {partitions:,} hours ({partitions * rows * chunks:,} rows); user_id "
            "uniform over 1M values. One table --cluster-by user_id, the other not.",
            "Every partition rolled (forced), target file size = the smallest chunk file, so each "
            f"partition holds about {chunks} files on both sides.",
            f"Lookups: delta-rs' pyarrow dataset, user_id = v over the whole table, {probes} values: the "
            "files it keeps (get_fragments with the filter) and to_table(filter) wall clock, median.",
        ],
        baseline="the same rows, rolled the same way, without clustering",
        params={"partitions": partitions, "chunks": chunks, "rows": rows},
    )
    start = (datetime.now(UTC) - timedelta(hours=partitions + 48)).replace(minute=0, second=0, microsecond=0)
    with workdir("cluster") as tmp:
        catalog = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'metastore.sqlite'}")
        try:
            tables = {}
            for side, cluster_by in (("clustered", ("user_id",)), ("plain", ())):
                tables[side] = catalog.create_table(
                    TableSpec(
                        name=TableName.parse(f"bench.{side}"),
                        columns=parse_schema("id BIGINT, ts TIMESTAMP, user_id BIGINT, amount DOUBLE"),
                        time_column="ts",
                        mode=Mode.EVENT_TIME,
                        roll_every=parse_duration("1h"),
                        cluster_by=cluster_by,
                    )
                )
            schema = data_schema(tables["plain"].columns)
            console.print(f"  writing {chunks} chunks of {partitions * rows:,} rows into both tables …")
            for k in range(chunks):
                data = _chunk(k, partitions, rows, start, schema)
                for table in tables.values():
                    ChunkWriter(catalog, table).write_table(data)
            staged = live_files(catalog.warehouse.load(tables["plain"]))
            # the smallest chunk file: the plain roll then makes a file of each (it finishes a file
            # once its sources reach the target), the clustered one cuts as many
            target = max(1024, min(f.size for f in staged))
            rolled: dict[str, float] = {}
            for side, table in tables.items():
                console.print(f"  rolling {partitions:,} partitions of {side} …")
                t0 = time.perf_counter()
                Roller(catalog, RollConfig(target_file_size=target)).roll_table(table, force=True)
                rolled[side] = time.perf_counter() - t0
            files = {side: len(live_files(catalog.warehouse.load(t))) for side, t in tables.items()}
            values = random.Random(0).sample(range(1_000_000), probes)
            opened: dict[str, list[int]] = {side: [] for side in tables}
            took: dict[str, list[float]] = {side: [] for side in tables}
            for v in values:
                answers = {}
                for side, table in tables.items():
                    dataset = deltalake.DeltaTable(table.location).to_pyarrow_dataset()
                    where = ds.field("user_id") == v
                    t0 = time.perf_counter()
                    found = dataset.to_table(filter=where)
                    took[side].append(time.perf_counter() - t0)
                    opened[side].append(len(list(dataset.get_fragments(filter=where))))
                    answers[side] = sorted(found.column("id").to_pylist())
                assert answers["clustered"] == answers["plain"], v
        finally:
            catalog.close()
    ms = {side: median(took[side]) * 1000 for side in took}
    result.metrics += [
        Metric("files a point lookup opens", median(opened["clustered"]), "files", median(opened["plain"])),
        Metric("point lookup (to_table)", ms["clustered"], "ms", ms["plain"]),
        Metric(f"roll of {partitions:,} partitions", rolled["clustered"], "s", rolled["plain"]),
    ]
    result.notes.append(
        f"files after the rolls: {files['clustered']:,} clustered, {files['plain']:,} plain; "
        f"lookups answered alike on both sides ({len(values)} values)"
    )
    console.print(
        f"  a lookup opens {fmt(median(opened['clustered']))} of {files['clustered']:,} files clustered, "
        f"{fmt(median(opened['plain']))} of {files['plain']:,} plain"
    )
    return result

"""Benchmark: a warehouse in a bucket beside one on the local disk (issue 28).

The bucket is moto's S3 server on localhost (``tests/s3server.py``, reached directly, not through
the tests' fault proxy): a Python server that serves a request at a time, with no network between
it and us. So the ratios say what the object protocol costs (requests instead of file calls, no
hard links: a server-side copy per placed file, an upload per compacted file), plus that server's
own per-request time; a real S3 adds 10-30 ms of network per request, a MinIO on the LAN a few.
Both warehouses share nothing but the machine: each has its own SQLite metastore.

- **Commit latency**: ``rows`` JSON lines per chunk, ``ChunkWriter.write`` (parse → stage → commit),
  the two warehouses taking turns in blocks; p50 and p99, the local disk the baseline.
- **Roll time**: each table's partition of those chunks rolled (seal, compact, sweep, marker).
- **Requests**: what one chunk commit and one roll of 6 chunks ask of the store, counted by method
  at the tests' fault proxy (a bucket of its own, reached through it; nothing armed). The local disk
  has no requests to compare with: the figures stand against the goals (a commit in 4 requests or
  fewer, a roll of 6 chunks in 20 or fewer).
- **Scan speed**: a table of ``scan_rows`` rows in ``scan_chunks`` chunks, rolled, read whole by
  Spark (``read_table``: every column, summed, so neither side skips data): in a bucket through
  Spark's Python workers (``streampart/bucket_reads.py``), locally by Spark's Parquet reader. Rows
  per second, the local read the baseline (the aim: at least 0.8×). And pyarrow alone reading the
  same files, to show the store's own share.
"""

from __future__ import annotations

import time
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, median, percentile, progress, workdir

NAME = "objects"
BLOCK = 10
WHERE = ("local disk", "bucket")


def _content(rows: int, first: int) -> bytes:
    import json

    ts = "2026-11-27T10:00:00Z"
    return "".join(
        json.dumps({"id": i, "ts": ts, "msg": f"event {i:08d}"}) + "\n" for i in range(first, first + rows)
    ).encode()


def run(scale: dict[str, Any]) -> BenchResult:
    import os

    from metastore import storage
    from metastore.catalog import Catalog
    from tests.s3server import S3Server

    n, warmup, rows = scale["objects_commits"], scale["warmup"], scale["rows"]
    scan_rows, scan_chunks, reps = (
        scale["objects_scan_rows"],
        scale["objects_scan_chunks"],
        scale["objects_reps"],
    )
    result = BenchResult(
        name=NAME,
        title="A warehouse in a bucket (moto's S3 server on localhost) beside one on the local disk",
        method=[
            f"Commit: {n} chunks of {rows} JSON lines into each warehouse after {warmup} warm-up chunks, "
            f"in turns of {BLOCK}; ChunkWriter.write wall clock, p50 and p99.",
            "Roll: the partition of those chunks rolled once in each (Roller.roll_table, force).",
            f"Scan: {scan_rows:,} rows in {scan_chunks} chunks, rolled, then read whole by Spark "
            f"(local[2]) {reps} times each way after one warm-up read: sum over every column; rows/s "
            "of the median. pyarrow: the same files read whole by pyarrow, through the storage API.",
            "Each warehouse has its own SQLite metastore on the local disk.",
        ],
        baseline="the same operation on a warehouse on the local disk",
        params={"commits": n, "rows_per_chunk": rows, "scan_rows": scan_rows, "scan_chunks": scan_chunks},
    )
    with workdir("objects") as tmp:
        server = S3Server(tmp).start()
        saved = {k: os.environ.get(k) for k in server.env()}
        os.environ.update(server.env())
        os.environ["AWS_ENDPOINT_URL"] = server.direct_endpoint  # not through the fault proxy
        catalogs: dict[str, Catalog] = {}
        try:
            bucket = server.create_bucket()
            catalogs["local disk"] = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'local.sqlite'}")
            catalogs["bucket"] = Catalog.open(
                f"s3://{bucket}/warehouse", f"sqlite:///{tmp / 'bucket.sqlite'}"
            )
            _commits_and_rolls(result, catalogs, n, warmup, rows)
            _scans(result, catalogs, scan_rows, scan_chunks, reps)
            _requests(result, server, tmp, rows)
            result.notes.append(
                f"bucket: {storage.current().where()} (moto {_moto_version()}); "
                "reads and writes go through obstore"
            )
        finally:
            for catalog in catalogs.values():
                catalog.close()
            server.stop()
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
    for m in result.metrics:
        baseline = fmt(m.baseline, m.unit)
        console.print(f"  {m.name}: {fmt(m.value, m.unit)}, baseline {baseline}, ratio {fmt_ratio(m.ratio)}")
    return result


def _moto_version() -> str:
    import moto

    return str(moto.__version__)


def _table(catalog: Any, name: str) -> Any:
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema

    return catalog.create_table(
        TableSpec(
            name=TableName.parse(name),
            columns=parse_schema("id BIGINT, ts TIMESTAMP, msg STRING"),
            time_column="ts",
            mode=Mode.ARRIVAL,
            roll_every=parse_duration("1d"),
        )
    )


def _commits_and_rolls(result: BenchResult, catalogs: dict[str, Any], n: int, warmup: int, rows: int) -> None:
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from scheduler.roll import Roller

    tables = {where: _table(catalogs[where], "bench.commits") for where in WHERE}
    writers = {where: ChunkWriter(catalogs[where], tables[where]) for where in WHERE}
    made = 0

    def commit(where: str) -> float:
        nonlocal made
        content = _content(rows, made * rows)
        made += 1
        t0 = time.perf_counter()
        writers[where].write(content, Format.JSONL)
        return time.perf_counter() - t0

    latencies: dict[str, list[float]] = {where: [] for where in WHERE}
    for where in WHERE:
        for _ in range(warmup):
            commit(where)
    with progress() as bar:
        task = bar.add_task(f"committing {n} chunks into each warehouse", total=2 * n)
        while len(latencies["bucket"]) < n:
            for where in WHERE:
                for _ in range(min(BLOCK, n - len(latencies[where]))):
                    latencies[where].append(commit(where) * 1000)
                    bar.advance(task)
    for q in (50, 99):
        result.metrics.append(
            Metric(
                f"chunk commit p{q}",
                percentile(latencies["bucket"], q),
                "ms",
                percentile(latencies["local disk"], q),
            )
        )
    rolls = {}
    for where in WHERE:
        t0 = time.perf_counter()
        [done] = Roller(catalogs[where]).roll_table(tables[where], force=True)
        rolls[where] = time.perf_counter() - t0
        if done.rows != (n + warmup) * rows:
            result.notes.append(f"check failed: the {where} roll rolled {done.rows} rows")
    result.metrics.append(Metric(f"roll of {n + warmup} chunks", rolls["bucket"], "s", rolls["local disk"]))


def _requests(result: BenchResult, server: Any, tmp: Any, rows: int) -> None:
    """Requests of one chunk commit (after three, so the table is warm) and of a roll of 6 chunks."""
    import os
    from collections import Counter

    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.catalog import Catalog
    from scheduler.roll import Roller

    direct = os.environ["AWS_ENDPOINT_URL"]
    os.environ["AWS_ENDPOINT_URL"] = server.proxy.url
    catalog = Catalog.open(f"s3://{server.create_bucket()}/warehouse", f"sqlite:///{tmp / 'counted.sqlite'}")
    try:
        commits, rolled = _table(catalog, "bench.counted"), _table(catalog, "bench.rolled")
        writer, roll_writer = ChunkWriter(catalog, commits), ChunkWriter(catalog, rolled)
        for k in range(3):
            writer.write(_content(rows, k * rows), Format.JSONL)
        for k in range(6):
            roll_writer.write(_content(rows, k * rows), Format.JSONL)

        def counted(what: str, goal: int, step: Any) -> None:
            before = len(server.proxy.requests)
            step()
            methods = Counter(method for method, _ in server.proxy.requests[before:])
            total = sum(methods.values())
            result.metrics.append(Metric(f"requests: {what}", total, "requests"))
            by = ", ".join(f"{m} {k}" for m, k in sorted(methods.items()))
            result.notes.append(f"requests of {what}: {total} ({by}); goal {goal} or fewer")

        counted("one chunk commit", 4, lambda: writer.write(_content(rows, 3 * rows), Format.JSONL))
        counted("a roll of 6 chunks", 20, lambda: Roller(catalog).roll_table(rolled, force=True))
    finally:
        catalog.close()
        os.environ["AWS_ENDPOINT_URL"] = direct


def _scans(result: BenchResult, catalogs: dict[str, Any], scan_rows: int, chunks: int, reps: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.chunks import ChunkWriter
    from ingest.records import Parsed
    from metastore import storage
    from metastore.delta.files import live_files
    from scheduler.roll import Roller
    from streampart.config import SparkConfig
    from streampart.query import read_table, spark_session

    per = scan_rows // chunks
    tables = {}
    for where in WHERE:
        table = tables[where] = _table(catalogs[where], "bench.scan")
        writer = ChunkWriter(catalogs[where], table)
        for k in range(chunks):
            ids = pa.array(range(k * per, (k + 1) * per), pa.int64())
            data = pa.table(
                {
                    "id": ids,
                    "ts": pa.array([1_795_800_000_000_000] * per, pa.timestamp("us", tz="UTC")),
                    "msg": pa.array(
                        [f"event {i:08d} of the scan benchmark" for i in range(k * per, (k + 1) * per)]
                    ),
                }
            )
            chunk = writer.stage_parsed(writer.reserve(), Parsed(data, []))
            writer.commit(chunk.id)
        Roller(catalogs[where]).roll_table(table, force=True)
    spark = spark_session(SparkConfig(master="local[2]", shuffle_partitions=2))
    seconds: dict[str, float] = {}
    arrow: dict[str, float] = {}
    for where in WHERE:
        catalog, table = catalogs[where], tables[where]

        def scan() -> int:
            frame = read_table(spark, catalog, table)  # noqa: B023 - called within the loop
            row = frame.selectExpr("count(*) AS n", "sum(id)", "sum(length(msg))", "max(ts)").collect()[0]
            return int(row["n"])

        scan()  # warm-up: Python workers started, classes loaded
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            found = scan()
            times.append(time.perf_counter() - t0)
            if found != per * chunks:
                result.notes.append(f"check failed: the {where} scan read {found} rows")
        seconds[where] = median(times)
        files = live_files(catalog.warehouse.load(table))
        t0 = time.perf_counter()
        for f in files:
            with storage.open_input(storage.join(table.location, f.path)) as handle:
                pq.read_table(handle)
        arrow[where] = time.perf_counter() - t0
    spark.stop()
    total = per * chunks
    result.metrics.append(
        Metric(
            "Spark scan, every column",
            total / seconds["bucket"],
            "rows/s",
            total / seconds["local disk"],
            higher_is_better=True,
        )
    )
    result.metrics.append(
        Metric(
            "pyarrow read of the files", total / arrow["bucket"], "rows/s", total / arrow["local disk"], True
        )
    )

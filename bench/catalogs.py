"""Benchmark: what other engines pay to read a table through the catalogs, against reading it by path.

One event-time table: ``catalogs_partitions`` hourly standard partitions (one compacted file each,
``catalogs_rows`` rows per partition), and an open streaming partition of ``catalogs_chunks``
chunks. Everything runs in this process (the Iceberg metadata by :func:`metastore.iceberg.iceberg_table`
as the server's load does, Delta Sharing's query through the app in-process, no network):

- **Iceberg load, new version**: one chunk commits, then the table is loaded (pin the version, write
  the manifests that changed, the manifest list and the metadata). Baseline: what an engine reading
  the table by path does first — delta-rs loads the log and lists the version's files.
- **Iceberg load, same version**: a second engine loads the version already loaded (one small
  file read). Same baseline.
- **Iceberg scan**: pyiceberg reads the whole table through the loaded metadata; baseline pyarrow
  reading the same version's files (by delta-rs' list) into one table.
- **Iceberg filtered scan**: ``id`` in one partition's range; pyiceberg plans by the manifests'
  bounds (files read reported). Baseline: pyarrow's dataset over every file with the same filter.
- **Delta Sharing query**: ``POST …/query`` answering the file list with URLs. Baseline: delta-rs'
  load and file list.

Median of ``catalogs_reps``; the rows each side read are checked equal.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, hourly_table, median, workdir

NAME = "catalogs"
START = datetime(2026, 1, 1, tzinfo=UTC)


def _rows(partitions: int, per: int) -> bytes:
    out = []
    for h in range(partitions):
        ts = (START + timedelta(hours=h, minutes=30)).isoformat()
        out += [json.dumps({"id": h * per + k, "ts": ts, "user_id": k % 97}) for k in range(per)]
    return ("\n".join(out) + "\n").encode()


def _build(tmp: Path, partitions: int, per: int, chunks: int) -> Any:
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format

    catalog, table = hourly_table(tmp, _rows(partitions, per), partitions, START)
    w = ChunkWriter(catalog, table)
    late = (datetime.now(UTC)).isoformat()
    base = partitions * per
    for c in range(chunks):
        ids = range(base + c * 10, base + c * 10 + 10)
        w.write(
            ("\n".join(json.dumps({"id": i, "ts": late, "user_id": 1}) for i in ids) + "\n").encode(),
            Format.JSONL,
        )
    return catalog, table


def _delta_rs(table: Any) -> tuple[float, list[str]]:
    from deltalake import DeltaTable

    t0 = time.perf_counter()
    dt = DeltaTable(table.location)
    files = [u.removeprefix("file://") for u in dt.file_uris()]
    return time.perf_counter() - t0, files


def run(scale: dict[str, Any]) -> BenchResult:
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq
    from fastapi.testclient import TestClient
    from pyiceberg.table import StaticTable

    from ingest.api.app import create_app
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.iceberg import View, iceberg_table
    from metastore.models import TableName
    from metastore.snapshots import pin

    partitions, per, chunks, reps = (
        scale["catalogs_partitions"], scale["catalogs_rows"], scale["catalogs_chunks"], scale["catalogs_reps"]
    )  # fmt: skip
    result = BenchResult(
        name=NAME,
        title=f"Reading through the catalogs ({partitions} standard partitions + {chunks} open chunks)",
        method=[
            f"An event-time table of {partitions} hourly standard partitions ({per} rows, one file each) and "
            f"an open partition of {chunks} chunks; sqlite metastore, local warehouse, all in this process.",
            "Iceberg load (new version: after one more chunk; same version: again), against delta-rs loading "
            "the log and listing the files. Scans: pyiceberg against pyarrow reading delta-rs' file list. "
            "Delta Sharing: the query answering URLs (in-process app), against delta-rs' load and list. "
            "Median of the reps; rows checked equal.",
        ],
        baseline="delta-rs (load, file list) and pyarrow (read those files)",
        params={"partitions": partitions, "rows_per_partition": per, "chunks": chunks, "reps": reps},
    )
    result.notes.append(f"load average at start: {os.getloadavg()[0]:.1f}")
    with workdir("catalogs") as tmp:
        catalog, table = _build(tmp, partitions, per, chunks)
        view = View(str(table.name), table.location, table.uid)
        writer = ChunkWriter(catalog, table)
        first, again, base = [], [], []
        loaded = None
        for k in range(reps):
            now = datetime.now(UTC).isoformat()
            writer.write(f'{{"id": {-1 - k}, "ts": "{now}", "user_id": 2}}\n'.encode(), Format.JSONL)
            t0 = time.perf_counter()
            loaded = iceberg_table(view, pin(catalog, table))
            first.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            iceberg_table(view, pin(catalog, table))
            again.append(time.perf_counter() - t0)
            base.append(_delta_rs(table)[0])
        assert loaded is not None
        result.metrics.append(Metric("Iceberg load, new version", median(first), "s", median(base)))
        result.metrics.append(Metric("Iceberg load, same version", median(again), "s", median(base)))

        static = StaticTable.from_metadata(loaded.location)
        scans, reads, rows_i, rows_p = [], [], 0, 0
        _, files = _delta_rs(table)
        for _ in range(reps):
            t0 = time.perf_counter()
            rows_i = static.scan(selected_fields=("id", "user_id")).to_arrow().num_rows
            scans.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rows_p = sum(pq.read_table(f, columns=["id", "user_id"]).num_rows for f in files)
            reads.append(time.perf_counter() - t0)
        if rows_i != rows_p:
            result.notes.append(f"check failed: pyiceberg read {rows_i} rows, pyarrow {rows_p}")
        result.metrics.append(Metric("Iceberg scan, whole table", median(scans), "s", median(reads)))

        low, high = per * (partitions // 2), per * (partitions // 2) + per - 1
        filtered, floor = [], []
        planned = 0
        for _ in range(reps):
            t0 = time.perf_counter()
            scan = static.scan(row_filter=f"id >= {low} and id <= {high}", selected_fields=("id",))
            planned = len(list(scan.plan_files()))
            got = scan.to_arrow().num_rows
            filtered.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            expr = (ds.field("id") >= low) & (ds.field("id") <= high)
            want = ds.dataset(files, format="parquet").to_table(columns=["id"], filter=expr).num_rows
            floor.append(time.perf_counter() - t0)
            if got != want:
                result.notes.append(f"check failed: filtered scan {got} rows, pyarrow {want}")
        result.metrics.append(
            Metric("Iceberg filtered scan (one partition's ids)", median(filtered), "s", median(floor))
        )
        result.notes.append(
            f"filtered scan: {planned} of {len(files)} files read (the rest skipped by bounds)"
        )

        catalog.primary.create_share("bench")
        catalog.primary.share_table("bench", TableName.parse("bench.clicks"))
        client = TestClient(create_app(catalog, auth=False))
        queries = []
        for _ in range(reps):
            t0 = time.perf_counter()
            answer = client.post("/delta-sharing/shares/bench/schemas/bench/tables/clicks/query", json={})
            queries.append(time.perf_counter() - t0)
            listed = len(answer.text.splitlines()) - 2
            if answer.status_code != 200 or listed != len(files):
                result.notes.append(f"check failed: the query answered {answer.status_code}, {listed} files")
        result.metrics.append(
            Metric("Delta Sharing query (file list with URLs)", median(queries), "s", median(base))
        )
        result.notes.append(
            f"{len(files)} files; spread of new-version loads: {statistics.pstdev(first):.3f} s"
        )
        catalog.close()
    result.notes.append(f"load average at end: {os.getloadavg()[0]:.1f}")
    for m in result.metrics:
        shown = f"{fmt(m.value, m.unit)}, baseline {fmt(m.baseline, m.unit)}, ratio {fmt_ratio(m.ratio)}"
        console.print(f"  {m.name}: {shown}")
    return result

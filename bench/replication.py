"""Benchmark 7: copying a rolled partition to a secondary cluster, against a plain file copy."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, median, workdir

NAME = "replication"

# Why random text: compression would make the partition's bytes on disk (what is copied) a
# small fraction of what was written; random hex keeps the files as large as their data.
ROW_BYTES = 1000


def _partition(catalog: Any, table: Any, size: int) -> Any:
    """Write about ``size`` bytes into the table and roll it: the standard partition to copy."""
    import pyarrow as pa

    from ingest.chunks import ChunkWriter
    from metastore.delta.arrow import data_schema
    from scheduler.roll import Roller

    rows_per_chunk = 64 * 1024 * 1024 // ROW_BYTES
    chunks = max(1, size // (rows_per_chunk * ROW_BYTES))
    w = ChunkWriter(catalog, table)
    now = pa.scalar(time.time_ns() // 1000, pa.timestamp("us", tz="UTC"))
    for k in range(chunks):
        msg = [os.urandom(ROW_BYTES // 2).hex() for _ in range(rows_per_chunk)]
        data = pa.table(
            {
                "id": pa.array(range(k * rows_per_chunk, (k + 1) * rows_per_chunk), pa.int64()),
                "ts": pa.array([now.value] * rows_per_chunk, pa.timestamp("us", tz="UTC")),
                "msg": pa.array(msg, pa.string()),
            },
            schema=data_schema(table.columns),
        )
        w.write_table(data)
    [rolled] = Roller(catalog).roll_table(table, force=True)
    return rolled


def _plain_copy(paths: list[Path], out: Path, fsync: bool) -> float:
    out.mkdir(parents=True)
    t0 = time.perf_counter()
    for p in paths:
        target = out / p.name
        shutil.copyfile(p, target)
        if fsync:
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    return time.perf_counter() - t0


def run(scale: dict[str, Any]) -> BenchResult:
    from rich.table import Table as RichTable

    from metastore.catalog import Catalog
    from metastore.delta.files import live_files
    from metastore.durations import parse_duration
    from metastore.models import PartitionState, TableName, TableSpec, parse_schema
    from scheduler.replication import Replicator

    size, reps = scale["replication_bytes"], scale["replication_reps"]
    result = BenchResult(
        name=NAME,
        title=f"Copy of a {size / 2**20:,.0f} MiB standard partition to a secondary cluster",
        method=[
            "Two clusters on this machine's disk (c1 primary, c2 secondary: two directories of one file "
            "system). A table on c1 gets ~64 MiB chunks of random text, rolled into one standard partition "
            "(files of roll.target_file_size, 128 MiB).",
            "Timed: Replicator.copy of that partition to c2, wall clock: claim (metastore), each file read "
            "once while hashed (SHA-256) and written, fsync, read back and hashed again, renamed; one Delta "
            "commit on c2 with the partition's application transaction; _SUCCESS; recorded present. "
            f"Median of {reps}; between runs the replica is dropped (files deleted) and added again. "
            "Before every timed run (ours and the baselines') os.sync() writes dirty pages back.",
            "Both sides read the source from the page cache (it was just written), as a copy right after "
            "a roll does.",
        ],
        baseline=(
            "shutil.copyfile of the same files into a fresh directory (no checksum, no metastore, no Delta), "
            "with and without an fsync of each copy; median of the same number of runs."
        ),
        params={"bytes": size, "reps": reps},
    )
    with workdir("replication") as tmp:
        for name in ("c1", "c2"):
            (tmp / name).mkdir()
        catalog = Catalog.open(tmp / "warehouse")
        for name in ("c1", "c2"):
            catalog.clusters.add(name, str(tmp / name), "local[2]")
        table = catalog.create_table(
            TableSpec(
                name=TableName.parse("bench.copies"),
                columns=parse_schema("id BIGINT, ts TIMESTAMP, msg STRING"),
                time_column="ts",
                roll_every=parse_duration("1d"),
                cluster="c1",
            ),
            replicate_to=["c2"],
        )
        t0 = time.perf_counter()
        rolled = _partition(catalog, table, size)
        build_s = time.perf_counter() - t0
        [partition] = catalog.store.list_partitions(table.id, [PartitionState.STANDARD])
        files = [f for f in live_files(catalog.load(table)) if f.partition == partition.value]
        paths = [Path(table.location) / f.path for f in files]
        total = sum(f.size for f in files)
        ours, plain, synced = [], [], []
        for i in range(reps):
            replica = catalog.replicas.get(table, "c2")
            os.sync()  # every run starts with no dirty pages to write back (the build left many)
            t0 = time.perf_counter()
            copied = Replicator(catalog).copy(table, partition, replica)
            ours.append(time.perf_counter() - t0)
            if copied is None or copied.bytes != total:
                result.notes.append(f"run {i}: the copy did not copy the partition ({copied})")
            catalog.replicas.drop(table, "c2")
            catalog.replicas.add(table, "c2")
            os.sync()
            plain.append(_plain_copy(paths, tmp / f"plain-{i}", fsync=False))
            os.sync()
            synced.append(_plain_copy(paths, tmp / f"synced-{i}", fsync=True))
            shutil.rmtree(tmp / f"plain-{i}")
            shutil.rmtree(tmp / f"synced-{i}")
        catalog.close()
    mib = total / 2**20
    ours_s, plain_s, synced_s = median(ours), median(plain), median(synced)
    result.metrics += [
        Metric("copy MB/s vs plain copy", mib / ours_s, "MiB/s", mib / plain_s, higher_is_better=True),
        Metric(
            "copy MB/s vs plain copy + fsync", mib / ours_s, "MiB/s", mib / synced_s, higher_is_better=True
        ),
        Metric("partition size", mib, "MiB"),
        Metric("files", len(files), "files"),
    ]
    result.params.update(
        {
            "build_seconds": round(build_s, 3),
            "roll": rolled.to_json(),
            "ours_s": ours,
            "plain_s": plain,
            "plain_fsync_s": synced,
        }
    )
    t = RichTable(title=result.title, title_justify="left")
    for col in ("", "seconds", "MiB/s", "streampart / it"):
        t.add_column(col, justify="left" if not col else "right")
    t.add_row("streampart copy (verified, committed)", fmt(ours_s, "s"), f"{mib / ours_s:,.0f}", "")
    t.add_row("plain copy", fmt(plain_s, "s"), f"{mib / plain_s:,.0f}", fmt_ratio(plain_s / ours_s))
    t.add_row(
        "plain copy + fsync", fmt(synced_s, "s"), f"{mib / synced_s:,.0f}", fmt_ratio(synced_s / ours_s)
    )
    console.print(t)
    console.print(
        f"  {len(files)} file(s), {mib:,.0f} MiB; building and rolling the partition took {build_s:.1f} s"
    )
    return result

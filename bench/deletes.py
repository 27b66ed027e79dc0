"""Benchmark: a delete by predicate (issue 30) against delta-rs' own DELETE on the same files.

One event-time table of ``deletes_partitions`` hourly standard partitions (one compacted file each,
``deletes_rows`` rows per partition), built once: one chunk spanning every hour, then rolled. Two
keys: ``user_id = 7`` is in every partition (every file is rewritten), ``user_id = 100000`` in 10
partitions only. Each rep restores the table (its directory and the metastore file) from a copy
taken after the build, so every delete meets the same files.

- **ours**: ``Deleter.delete`` (the CLI's and the API's path): begin, seal, read the candidate
  files, rewrite those with a match, one Delta commit, count the partitions anew.
- **delta-rs**: ``DeltaTable.delete(predicate)`` on a byte-identical copy of the table's directory
  (same files and log; no metastore).
- **pyarrow floor** (key in every partition): read every file, filter, write it back: the I/O and
  Parquet work any delete has to do, nothing else.

Alternating sides, median of ``deletes_reps``. Also the metastore statements of our delete
(SQLAlchemy ``before_cursor_execute``) and the load average at start and end.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.common import BenchResult, Metric, console, fmt, fmt_ratio, hourly_table, median, workdir

NAME = "deletes"
START = datetime(2026, 1, 1, tzinfo=UTC)
KEYS = {"every partition": "user_id = 7", "10 partitions": "user_id = 100000"}


def _rows(partitions: int, per: int) -> bytes:
    out = []
    for h in range(partitions):
        ts = (START + timedelta(hours=h, minutes=30)).isoformat()
        for k in range(per):
            user = 100000 if (k == 0 and h % (partitions // 10 or 1) == 0) else k
            out.append(json.dumps({"id": h * per + k, "ts": ts, "user_id": user}))
    return ("\n".join(out) + "\n").encode()


def _build(tmp: Path, partitions: int, per: int) -> Any:
    catalog, table = hourly_table(tmp, _rows(partitions, per), partitions, START)
    catalog.close()
    return table


def _restore(tmp: Path) -> None:
    shutil.rmtree(tmp / "warehouse")
    shutil.copytree(tmp / "saved" / "warehouse", tmp / "warehouse")
    shutil.copy(tmp / "saved" / "metastore.sqlite", tmp / "metastore.sqlite")


def _ours(tmp: Path, where: str) -> tuple[float, int, int]:
    import sqlalchemy as sa
    from sqlalchemy.engine import Engine

    from ingest.deletes.deleter import Deleter
    from metastore.catalog import Catalog

    statements = 0

    def count(*_: Any) -> None:
        nonlocal statements
        statements += 1

    catalog = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'metastore.sqlite'}")
    try:
        table = catalog.table("bench.clicks")
        sa.event.listen(Engine, "before_cursor_execute", count)
        try:
            t0 = time.perf_counter()
            [done] = Deleter(catalog).delete(table, where)
            seconds = time.perf_counter() - t0
        finally:
            sa.event.remove(Engine, "before_cursor_execute", count)
    finally:
        catalog.close()
    return seconds, done.rows, statements


def _delta_rs(tmp: Path, where: str) -> tuple[float, int]:
    from deltalake import DeltaTable

    copy = tmp / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(tmp / "saved" / "warehouse" / "bench" / "clicks", copy)
    t0 = time.perf_counter()
    metrics = DeltaTable(str(copy)).delete(where)
    return time.perf_counter() - t0, int(metrics.get("num_deleted_rows", -1))


def _floor(tmp: Path) -> float:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    copy = tmp / "copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(tmp / "saved" / "warehouse" / "bench" / "clicks", copy)
    paths = [u.removeprefix("file://") for u in DeltaTable(str(copy)).file_uris()]
    t0 = time.perf_counter()
    for k, path in enumerate(paths):
        data = pq.read_table(path)
        kept = data.filter(pc.not_equal(data.column("user_id"), 7))
        pq.write_table(kept, str(Path(path).with_name(f"floor-{k}.parquet")), compression="snappy")
    return time.perf_counter() - t0


def run(scale: dict[str, Any]) -> BenchResult:
    partitions, per, reps = scale["deletes_partitions"], scale["deletes_rows"], scale["deletes_reps"]
    result = BenchResult(
        name=NAME,
        title=f"Delete of one key across {partitions} standard partitions (sqlite metastore)",
        method=[
            f"An event-time table of {partitions} hourly standard partitions, one compacted file of {per} "
            "rows each, built once and restored before every rep (directory and metastore file).",
            "ours: Deleter.delete (begin, seal, read, rewrite, one commit, count anew), wall clock. "
            "delta-rs: DeltaTable.delete(predicate) on a byte-identical copy of the table's directory. "
            "pyarrow floor: read, filter and write every file. Sides alternate; median of the reps.",
        ],
        baseline="delta-rs DeltaTable.delete on the same files",
        params={"partitions": partitions, "rows_per_partition": per, "reps": reps},
    )
    result.notes.append(f"load average at start: {os.getloadavg()[0]:.1f}")
    with workdir("deletes") as tmp:
        _build(tmp, partitions, per)
        (tmp / "saved").mkdir()
        shutil.copytree(tmp / "warehouse", tmp / "saved" / "warehouse")
        shutil.copy(tmp / "metastore.sqlite", tmp / "saved" / "metastore.sqlite")
        for case, where in KEYS.items():
            ours, theirs, statements, floors = [], [], [], []
            for _ in range(reps):
                _restore(tmp)
                seconds, rows, ran = _ours(tmp, where)
                ours.append(seconds)
                statements.append(ran)
                seconds_rs, rows_rs = _delta_rs(tmp, where)
                theirs.append(seconds_rs)
                if rows != rows_rs:
                    result.notes.append(f"check failed ({case}): we deleted {rows} rows, delta-rs {rows_rs}")
                if case == "every partition":
                    floors.append(_floor(tmp))
            result.metrics.append(Metric(f"{case}: delete", median(ours), "s", median(theirs)))
            result.metrics.append(Metric(f"{case}: metastore statements", median(statements), ""))
            if floors:
                result.metrics.append(Metric(f"{case}: pyarrow floor", median(floors), "s", median(theirs)))
            result.notes.append(f"{case}: {rows} rows deleted by each side")
    result.notes.append(f"load average at end: {os.getloadavg()[0]:.1f}")
    for m in result.metrics:
        console.print(
            f"  {m.name}: {fmt(m.value, m.unit)}, baseline {fmt(m.baseline, m.unit)}, "
            f"ratio {fmt_ratio(m.ratio)}"
        )
    return result

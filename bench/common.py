"""What every benchmark shares: results, statistics, metastore backends, tables and data."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _console() -> Console:
    """Rich console; when the output is not a terminal (a log file), wide enough for the tables."""
    plain = Console(highlight=False)
    if plain.is_terminal or "COLUMNS" in os.environ:
        return plain
    return Console(highlight=False, width=150)


console = _console()

# The PostgreSQL metastore: each run works in a schema of its own, dropped afterwards
# (tests/pg.py, shared with the tests).
PG_ADMIN_URL = os.environ.get(
    "STREAMPART_BENCH_PG",
    os.environ.get("STREAMPART_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test"),
)

TABLE_NAME = "bench.events"
TABLE_DDL = "id BIGINT, ts TIMESTAMP, msg STRING"


# -- results -------------------------------------------------------------------------------
@dataclass
class Metric:
    """One measured figure and, when there is one, the same figure for the baseline."""

    name: str
    value: float
    unit: str
    baseline: float | None = None
    higher_is_better: bool = False  # rates (rows/s, commits/s) versus durations

    @property
    def ratio(self) -> float | None:
        """Ours divided by the baseline's (for durations > 1 means slower, for rates < 1 does)."""
        if self.baseline is None or self.baseline == 0:
            return None
        return self.value / self.baseline

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "higher_is_better": self.higher_is_better,
        }


@dataclass
class BenchResult:
    name: str
    title: str
    method: list[str]  # how it was measured, one line per point
    baseline: str  # what the baseline is
    params: dict[str, Any]
    metrics: list[Metric] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "method": self.method,
            "baseline": self.baseline,
            "params": self.params,
            "metrics": [m.to_json() for m in self.metrics],
            "notes": self.notes,
            "seconds": round(self.seconds, 3),
        }


# -- statistics ----------------------------------------------------------------------------
def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50)


def fmt(value: float | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if unit == "ms":
        text = f"{value:.2f}" if value < 100 else f"{value:.0f}"
    elif unit == "s":
        text = f"{value:.3f}" if value < 10 else f"{value:.1f}"
    elif unit in ("rows", "files", "chunks", "commits"):
        text = f"{value:,.0f}"
    elif unit.endswith("/s"):
        text = f"{value:,.0f}" if value >= 100 else f"{value:.1f}"
    else:
        text = f"{value:g}"
    return f"{text} {unit}".strip()


def fmt_ratio(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


# -- metastores ----------------------------------------------------------------------------
def postgres_problem() -> str | None:
    """Why the PostgreSQL metastore cannot be used, or None if it can."""
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(PG_ADMIN_URL, connect_args={"connect_timeout": 3})
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))
        engine.dispose()
    except Exception as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    return None


def pg_url_safe() -> str:
    import sqlalchemy as sa

    return sa.engine.make_url(PG_ADMIN_URL).render_as_string(hide_password=True)


def fresh_metastore_url(backend: str, workdir: Path) -> str | None:
    """An empty metastore: None for SQLite (the default, inside the warehouse) or a new PG schema."""
    from tests.pg import scratch_schema_url

    return None if backend == "sqlite" else scratch_schema_url("sp_bench", PG_ADMIN_URL)


def drop_pg_schema(url: str | None) -> None:
    from tests.pg import drop_scratch_schema

    drop_scratch_schema(url, PG_ADMIN_URL)


# -- chunk history -------------------------------------------------------------------------
# One committed chunk of a past day per generated row, in the shape ChunkWriter records them
# (one staged file, its partition, a content digest, an idempotency key), made by the database
# itself (INSERT … SELECT over a generated series): millions of rows in seconds, where a row per
# statement would take hours. Their Delta version is 0, the table's first: a higher one would make
# the next commit refuse the table's log as behind the metastore (metastore.delta.log.verify_newest,
# before a commit), which is right, since no such commits exist.
_HISTORY_PG = """
INSERT INTO sp_chunks (id, table_id, token, state, created_at, expires_at, files, rows, bytes,
                       committing_since, attempt, base_version, version, partitions,
                       dead_letter_rows, late_rows, error, content_digest)
SELECT gen_random_uuid()::text,
       (:table_ids)[1 + g % cardinality(CAST(:table_ids AS int[]))],
       'preload-' || g,
       'committed',
       ts, ts + interval '1 hour',
       json_build_array(json_build_object(
           'path', '_staging/' || md5(g::text) || '-0.parquet', 'rows', 100, 'bytes', 2277,
           'period', NULL, 'stats', '{}')),
       100, 2277, ts, gen_random_uuid()::text, 0, 0,
       json_build_array(to_char(date_trunc('hour', ts), 'YYYY-MM-DD"T"HH24:MI:SS"+00:00"')),
       0, 0, NULL, 'sha256:' || encode(sha256(convert_to(g::text, 'UTF8')), 'hex')
FROM (SELECT g, CAST(:now AS timestamp) - g * CAST(:step AS interval) AS ts
      FROM generate_series(CAST(:first AS bigint), CAST(:last AS bigint)) AS g) AS history
"""
# The same rows on SQLite (SQLAlchemy keeps its DateTime as 'YYYY-MM-DD HH:MM:SS.ffffff' text).
_HISTORY_SQLITE = """
WITH RECURSIVE series(g) AS (SELECT :first UNION ALL SELECT g + 1 FROM series WHERE g < :last),
history(g, ts) AS (
    SELECT g, datetime(:now, '-' || CAST(g * :step AS INTEGER) || ' seconds') FROM series)
INSERT INTO sp_chunks (id, table_id, token, state, created_at, expires_at, files, rows, bytes,
                       committing_since, attempt, base_version, version, partitions,
                       dead_letter_rows, late_rows, error, content_digest)
SELECT lower(hex(randomblob(16))),
       json_extract(:table_ids, '$[' || (g % json_array_length(:table_ids)) || ']'),
       'preload-' || g,
       'committed',
       ts || '.000000', datetime(ts, '+1 hour') || '.000000',
       json_array(json_object(
           'path', '_staging/' || lower(hex(randomblob(16))) || '-0.parquet', 'rows', 100,
           'bytes', 2277, 'period', NULL, 'stats', '{}')),
       100, 2277, ts || '.000000', lower(hex(randomblob(16))), 0, 0,
       json_array(strftime('%Y-%m-%dT%H:00:00+00:00', ts)),
       0, 0, NULL, 'sha256:' || lower(hex(randomblob(32)))
FROM history
"""


def insert_chunk_history(
    conn: Any, rows: int, table_ids: Sequence[int], history: timedelta, first: int = 1
) -> None:
    """Insert ``rows`` committed chunk rows of the past ``history`` into ``sp_chunks``, in one statement.

    Spread round-robin over ``table_ids`` and evenly over time (the newest an hour ago). ``first``
    numbers the first row (idempotency keys ``preload-<n>``), so several calls add to one history.
    ``conn``: a SQLAlchemy connection in a transaction, SQLite or PostgreSQL.
    """
    import json

    import sqlalchemy as sa

    if rows <= 0:
        return
    now = datetime.now(UTC).replace(tzinfo=None) - timedelta(hours=1)
    last = first + rows - 1
    step = history / max(last, 1)
    if conn.dialect.name == "postgresql":
        params: dict[str, Any] = {"table_ids": list(table_ids), "now": now, "step": step}
        conn.execute(sa.text(_HISTORY_PG), {**params, "first": first, "last": last})
    else:
        params = {"table_ids": json.dumps(list(table_ids)), "now": now.isoformat(sep=" ")}
        conn.execute(
            sa.text(_HISTORY_SQLITE), {**params, "step": step.total_seconds(), "first": first, "last": last}
        )


@contextmanager
def workdir(prefix: str) -> Iterator[Path]:
    """A scratch directory (under $STREAMPART_BENCH_TMP or the system's), removed afterwards."""
    base = os.environ.get("STREAMPART_BENCH_TMP")
    path = Path(tempfile.mkdtemp(prefix=f"streampart-bench-{prefix}-", dir=base))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# -- tables and data -----------------------------------------------------------------------
def create_table(catalog: Any, name: str = TABLE_NAME, schema: str = TABLE_DDL) -> Any:
    """An arrival-mode table (HIVE-4196 style): every chunk lands in the one open partition."""
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema

    return catalog.create_table(
        TableSpec(
            name=TableName.parse(name),
            columns=parse_schema(schema),
            time_column="ts",
            mode=Mode.ARRIVAL,
            roll_every=parse_duration("1d"),
        )
    )


def hourly_table(tmp: Path, rows: bytes, partitions: int, start: datetime) -> tuple[Any, Any]:
    """``bench.clicks`` (``id, ts, user_id``), an event-time table of hourly partitions in a SQLite
    metastore under ``tmp``: ``rows`` (JSON lines, hours from ``start``) written as one chunk, then every
    partition rolled (one compacted file each). The catalog (open) and the table."""
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.catalog import Catalog
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema
    from scheduler.roll import Roller

    catalog = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'metastore.sqlite'}")
    table = catalog.create_table(
        TableSpec(
            name=TableName.parse("bench.clicks"),
            columns=parse_schema("id BIGINT, ts TIMESTAMP, user_id BIGINT"),
            time_column="ts",
            mode=Mode.EVENT_TIME,
            roll_every=parse_duration("1h"),
        )
    )
    ChunkWriter(catalog, table).write(rows, Format.JSONL)
    Roller(catalog).roll_table(table, now=start + timedelta(hours=partitions + 1))
    return catalog, table


def sample_data(table: Any, rows: int, first_id: int = 0) -> Any:
    """``rows`` rows in the table's exact Arrow schema (so write_table skips re-validation)."""
    import pyarrow as pa

    from metastore.delta.arrow import data_schema

    now = datetime.now(UTC)
    return pa.table(
        {
            "id": list(range(first_id, first_id + rows)),
            "ts": [now] * rows,
            "msg": [f"event {i:08d} from the benchmark" for i in range(first_id, first_id + rows)],
        },
        schema=data_schema(table.columns),
    )


def progress() -> Progress:
    return Progress(
        TextColumn("  {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    )


def commit_chunks(catalog: Any, table: Any, n: int, rows: int, label: str) -> tuple[float, list[float]]:
    """Commit ``n`` chunks of ``rows`` rows, one real chunk commit each; returns (seconds, latencies)."""
    import time

    from ingest.chunks import ChunkWriter

    writer = ChunkWriter(catalog, table)
    latencies: list[float] = []
    started = time.perf_counter()
    with progress() as bar:
        task = bar.add_task(label, total=n)
        for i in range(n):
            data = sample_data(table, rows, first_id=i * rows)
            t0 = time.perf_counter()
            writer.write_table(data)
            latencies.append(time.perf_counter() - t0)
            bar.advance(task)
    return time.perf_counter() - started, latencies


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``fn()`` and the seconds it took."""
    t0 = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0


def warm_spark(spark: Any, tmp: Path) -> Any:
    """Start Spark and load its Parquet read path once (classes, codecs) on a tiny file."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    path = tmp / "spark-warmup.parquet"
    pq.write_table(pa.table({"id": list(range(1000))}), path)
    spark.read.parquet(str(path)).agg(F.sum("id")).collect()
    return spark


def collect_results(results: Any, procs: Sequence[Any], refresh: Callable[[], None]) -> list[dict[str, Any]]:
    """One result from each of ``procs`` (writer processes putting a dict on the ``results`` queue),
    calling ``refresh`` (a progress bar's) while they run; then the processes joined.

    Raises:
        RuntimeError: a writer reported an error, or died without a result.
    """
    import queue

    collected: list[dict[str, Any]] = []
    while len(collected) < len(procs):
        try:
            collected.append(results.get(timeout=0.2))
        except queue.Empty:
            if not any(p.is_alive() for p in procs) and results.empty():
                break
        refresh()
    refresh()
    for p in procs:
        p.join(timeout=30)
    errors = [r["error"] for r in collected if r.get("error")]
    if errors or len(collected) < len(procs):
        raise RuntimeError("writers failed:\n" + ("\n".join(errors) or "a writer died without a word"))
    return collected

"""What every benchmark shares: results, statistics, metastore backends, tables and data."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
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
def create_table(catalog: Any, name: str = TABLE_NAME) -> Any:
    """An arrival-mode table (HIVE-4196 style): every chunk lands in the one open partition."""
    from metastore.durations import parse_duration
    from metastore.models import Mode, TableName, TableSpec, parse_schema

    return catalog.create_table(
        TableSpec(
            name=TableName.parse(name),
            columns=parse_schema(TABLE_DDL),
            time_column="ts",
            mode=Mode.ARRIVAL,
            roll_every=parse_duration("1d"),
        )
    )


def sample_data(table: Any, rows: int, first_id: int = 0) -> Any:
    """``rows`` rows in the table's exact Arrow schema (so write_table skips re-validation)."""
    import pyarrow as pa

    from metastore.warehouse import data_schema

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

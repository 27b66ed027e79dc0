"""A Spark read of a snapshot scans only the files whose statistics can match the filters Spark pushes
to it (``streampart/java/Pruning.java``): each answer compared with DuckDB's over the same Parquet
files the log lists (an engine that prunes nothing of ours), and the files Spark read counted from
its own scan metrics."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import duckdb
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.models import Table
from scheduler.roll import Roller
from streampart.query import read_table
from tests.fixtures import make_table
from tests.helpers import jsonl, live_adds

pytestmark = pytest.mark.spark

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, score DOUBLE, day DATE, ok BOOLEAN, qty INT"
T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
CHUNKS, ROWS = 10, 20


def chunk(k: int) -> bytes:
    """Chunk ``k``: ids ``20k … 20k+19``, a minute of timestamps of its own, its own day."""
    out = []
    for i in range(k * ROWS, (k + 1) * ROWS):
        out.append(
            {
                "id": i,
                "ts": (T0 + timedelta(minutes=k, seconds=i % ROWS)).isoformat(),
                "msg": f"m{i:04d}" if i % 7 else None,
                "score": i / 4 if i % 5 else None,
                "day": (date(2026, 1, 1) + timedelta(days=k)).isoformat(),
                "ok": i % 2 == 0,
                "qty": i,
            }
        )
    return jsonl(out)


def files_read(frame: Any) -> int:
    """Rows collected, then the files Spark's scan of the table read (its numFiles metric): of a
    frame run once (run again, its scan reports none)."""
    frame.collect()
    counts: list[int] = []

    def walk(plan: Any) -> None:
        name = plan.getClass().getSimpleName()
        if name == "AdaptiveSparkPlanExec":
            walk(plan.finalPhysicalPlan())
            return
        if name == "FileSourceScanExec":
            counts.append(int(plan.metrics().apply("numFiles").value()))
        children = plan.children().iterator()
        while children.hasNext():
            walk(children.next())

    walk(frame._jdf.queryExecution().executedPlan())
    assert len(counts) == 1, counts
    return counts[0]


def duckdb_ids(table: Table, where: str) -> list[int]:
    files = [str(Path(table.location, unquote(p))) for p in live_adds(table.location)]
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    rows = con.execute(f"SELECT id FROM read_parquet({files!r}) WHERE {where}").fetchall()
    return sorted(r[0] for r in rows)


# each filter, and how many of the chunks' files at most Spark reads for it (None: any)
FILTERS: list[tuple[str, int | None]] = [
    ("id = 55", 1),
    ("id < 30", 2),
    ("30 > id", 2),
    ("id >= 181", 1),
    ("id in (3, 77, 199)", 3),
    ("id = 5 or id = 95", 2),
    ("id between 40 and 59 and msg like 'm%'", 1),
    ("ts >= timestamp '2026-11-21 10:09:00'", 1),
    ("ts < timestamp '2026-11-21 10:01:00'", 1),
    ("msg = 'm0050'", 1),
    ("msg > 'm0180'", 1),
    ("day = date '2026-01-04'", 1),
    ("qty = 61", 1),
    ("score = 0.75", 1),
    ("score > 45.1", 2),
    ("msg is null", None),
    ("msg is not null", None),
    ("ok = true", None),  # booleans carry no range: nothing pruned, answers alike
    ("cast(id as int) = 5", None),  # a function of a column: nothing pruned
    ("id = 1000", 0),
]


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Any:
    tmp = tmp_path_factory.mktemp("pruning")
    catalog = Catalog.open(tmp / "warehouse", f"sqlite:///{tmp / 'metastore.sqlite'}")
    chunks = make_table(catalog, "ns.chunks", schema=SCHEMA)
    rolled = make_table(catalog, "ns.rolled", schema=SCHEMA, cluster_by=("id",))
    for table in (chunks, rolled):
        w = ChunkWriter(catalog, table)
        for k in range(CHUNKS):
            w.write(chunk(k), Format.JSONL)
    from scheduler.config import RollConfig

    Roller(catalog, RollConfig(target_file_size=1024)).roll_table(rolled, force=True)
    yield catalog, chunks, rolled
    catalog.close()


@pytest.mark.parametrize(("where", "most"), FILTERS)
def test_a_filter_reads_only_the_files_that_may_match_and_answers_alike(spark, tables, where, most) -> None:
    catalog, chunks, rolled = tables
    for table in (chunks, rolled):
        ours = sorted(r["id"] for r in read_table(spark, catalog, table).filter(where).select("id").collect())
        assert ours == duckdb_ids(table, where), (table.name, where)
        # a frame of its own: a frame run again reports the files of its first run no more
        read = files_read(read_table(spark, catalog, table).filter(where).select("id"))
        total = len(live_adds(table.location))
        if table is chunks and most is not None:
            assert min(most, 1) <= read <= most, (where, read)
        if most is None:
            assert read <= total and (read == total or where.startswith("msg")), (where, read, total)


def test_no_filter_reads_every_file_and_a_sql_statement_prunes_as_a_frame(spark, tables) -> None:
    from streampart.query import run_sql

    catalog, chunks, _ = tables
    assert files_read(read_table(spark, catalog, chunks).select("id")) == CHUNKS
    answer = run_sql(spark, catalog, "SELECT count(*) AS n FROM ns.chunks WHERE id BETWEEN 20 AND 39")
    assert [r["n"] for r in answer.collect()] == [20]

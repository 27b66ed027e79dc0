"""The demo's Kafka part, in process (the whole ``streampart demo`` is ``make demo``'s job)."""

from __future__ import annotations

import io

from rich.console import Console

from metastore.catalog import Catalog
from metastore.models import TableKind
from streampart.config import Settings
from streampart.demo import KAFKA_DEMO, run_kafka_demo
from tests.helpers import Recorder, all_ids, delta_rows


def _run(spark, catalog: Catalog) -> str:
    out = io.StringIO()
    run_kafka_demo(Settings(warehouse=catalog.warehouse.root), catalog, Console(file=out, width=300), spark)
    return out.getvalue()


def test_kafka_demo_lands_good_records_once_and_bad_ones_in_the_dead_letter_table(
    spark, sqlite_catalog
) -> None:
    text = _run(spark, sqlite_catalog)

    assert f"SELECT count(*) FROM {KAFKA_DEMO} → 298" in text, text
    assert "0 new batches, count(*) → 298" in text, text
    assert text.count("12. dead letter:") == 2, text
    table = sqlite_catalog.table(KAFKA_DEMO)
    assert sorted(all_ids(table)) == list(range(298))
    dead = delta_rows(sqlite_catalog.companion(table, TableKind.DEAD_LETTER), columns="source, reason")
    assert sorted(dead.column("source").to_pylist()) == ["demo-clicks/1", "demo-clicks/2"]

    # a second demo starts afresh (its broker is new and empty) and lands the same once more
    text = _run(spark, sqlite_catalog)
    assert f"SELECT count(*) FROM {KAFKA_DEMO} → 298" in text, text
    assert sorted(all_ids(sqlite_catalog.table(KAFKA_DEMO))) == list(range(298))


def test_links_demo_reads_the_rolled_partition_through_an_isolated_namespace(spark, sqlite_catalog) -> None:
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.durations import parse_duration
    from metastore.models import TableSpec, parse_schema
    from scheduler.roll import Roller
    from streampart.demo import DEMO, REPORTS, run_links_demo
    from tests.helpers import records

    spec = TableSpec(name=DEMO, columns=parse_schema("id BIGINT, ts TIMESTAMP, msg STRING"), time_column="ts",
                     roll_every=parse_duration("1h"))  # fmt: skip
    table = sqlite_catalog.create_table(spec)
    w = ChunkWriter(sqlite_catalog, table)
    w.write(records(range(10)), Format.JSONL, key="a")
    Roller(sqlite_catalog).roll_table(table, force=True)
    w.write(records(range(10, 13)), Format.JSONL, key="b")
    for _ in range(2):  # a second demo finds its link and namespace and makes them again
        out = io.StringIO()
        run_links_demo(sqlite_catalog, Console(file=out, width=300), spark)
        text = out.getvalue()
        assert (
            f"in {REPORTS}: SELECT count(*) FROM events → 10 (the rolled partition; demo.events holds 13"
            in text
        )
        assert f"namespace {REPORTS} is isolated" in text and "reads 0 B" not in text, text


def test_the_whole_demo_runs(spark, tmp_path) -> None:
    """``make demo``'s job, in process on the shared Spark session: every step, to the end."""
    from streampart.demo import DEMO_PARTS, run_demo

    catalog = Catalog.open(tmp_path / "wh")
    out = io.StringIO()
    progress = Recorder()
    try:
        run_demo(
            Settings(warehouse=catalog.warehouse.root),
            catalog,
            Console(file=out, width=300),
            progress=progress,
        )
    finally:
        catalog.close()
    text = out.getvalue()
    # its bar: one piece of work, a part at a time, each part once
    assert progress.started == [("streampart demo", len(DEMO_PARTS), "parts")]
    assert progress.advanced == [[1] * len(DEMO_PARTS)]
    assert "3. retried chunk 1 with the same idempotency key: same chunk" in text, text
    assert "17. usage: demo owns" in text and "sees 2000 rows" in text and "done in" in text, text


def test_clusters_demo_copies_a_rolled_partition_to_dc2_and_runs_twice(sqlite_catalog) -> None:
    from streampart.demo import run_clusters_demo

    for _ in range(2):  # a second demo finds its clusters and makes its table again
        out = io.StringIO()
        run_clusters_demo(sqlite_catalog, Console(file=out, width=300))
        text = out.getvalue()
        assert "sees 2000 rows" in text and "20. a write aimed at dc2 is refused" in text, text

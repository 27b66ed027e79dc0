"""The demo's Kafka part, in process (the whole ``streampart demo`` is ``make demo``'s job)."""

from __future__ import annotations

import io

from rich.console import Console

from metastore.catalog import Catalog
from metastore.models import TableKind
from streampart.config import Settings
from streampart.demo import KAFKA_DEMO, run_kafka_demo
from tests.helpers import all_ids, delta_rows


def _run(spark, catalog: Catalog) -> str:  # type: ignore[no-untyped-def]
    out = io.StringIO()
    run_kafka_demo(Settings(warehouse=catalog.warehouse.root), catalog, Console(file=out, width=300), spark)
    return out.getvalue()


def test_kafka_demo_lands_good_records_once_and_bad_ones_in_the_dead_letter_table(
    spark, sqlite_catalog
) -> None:  # type: ignore[no-untyped-def]
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

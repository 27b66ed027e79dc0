"""``streampart demo``: the product in two minutes on embedded defaults."""

from __future__ import annotations

import json
import random
import shutil
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.table import Table as RichTable

from ingest.chunks import ChunkWriter
from ingest.errors import IdempotencyConflictError
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.durations import parse_duration
from metastore.models import Table, TableKind, TableName, TableSpec, companion_name, iso, parse_schema
from metastore.progress import Progress
from scheduler.roll import Roller

DEMO = TableName(namespace="demo", table="events")
KAFKA_DEMO = TableName(namespace="demo", table="clicks")
KAFKA_TOPIC = "demo-clicks"
REPORTS = "reports"  # the namespace that links demo.events (steps 15–17)
CLUSTERS_DEMO = TableName(namespace="demo", table="orders")  # on cluster dc1, replicated to dc2 (18–20)


def _records(start_id: int, n: int, now: datetime) -> bytes:
    levels = ["info", "warn", "error"]
    lines = [
        json.dumps(
            {
                "id": start_id + i,
                "ts": (now - timedelta(seconds=random.randint(0, 600))).isoformat(),
                "level": random.choice(levels),
                "msg": f"event {start_id + i}",
            }
        )
        for i in range(n)
    ]
    return ("\n".join(lines) + "\n").encode()


def _partitions(console: Console, catalog: Catalog, name: TableName) -> None:
    info = catalog.describe(catalog.table(name))
    grid = RichTable("partition", "state", "chunks", "rows", "files", title=f"{name} partitions")
    for p in info["partitions"]:
        grid.add_row(p["value"], p["state"], str(p["chunks"]), str(p["rows"]), str(p["files"]))
    console.print(grid)


def _drop(catalog: Catalog, name: TableName) -> None:
    """Drop a demo table and its dead-letter table, if they exist (and the demo's links to them)."""
    for each in (name, companion_name(name, TableKind.DEAD_LETTER)):
        existing = catalog.find_table(each)
        if existing is not None:
            for link in catalog.links.to(existing).merged():
                catalog.home(link.name.namespace).store.drop_link(link)
            catalog.drop_table(existing)


def run_links_demo(catalog: Catalog, console: Console, spark: Any) -> None:
    """Namespaces and links: an isolated namespace imports demo.events through a link, no copy."""
    from metastore.errors import IsolationError
    from metastore.links import LinkSpec
    from metastore.namespaces import format_size
    from metastore.usage import namespace_usage
    from streampart.query import run_sql

    link_name = TableName(namespace=REPORTS, table="events")
    found = catalog.links.find(link_name)
    if found is not None:
        catalog.links.drop(found)
    if catalog.namespaces.find(REPORTS) is None:
        catalog.namespaces.create(REPORTS, isolated=True, description="the reporting team (demo)")
    catalog.links.create(LinkSpec(name=link_name, source=DEMO))
    console.print(
        f"15. namespace {REPORTS} (isolated) links {DEMO} as {link_name}: a dynamic link, which shows "
        "each partition of demo.events from the roll that makes it standard; nothing is copied"
    )
    n = run_sql(spark, catalog, "SELECT count(*) AS n FROM events", namespace=REPORTS).collect()[0]["n"]
    total = run_sql(spark, catalog, f"SELECT count(*) AS n FROM {DEMO}").collect()[0]["n"]
    console.print(
        f"16. in {REPORTS}: SELECT count(*) FROM events → {n} (the rolled partition; {DEMO} holds {total} "
        "with its streaming partition)"
    )
    try:
        run_sql(spark, catalog, f"SELECT count(*) FROM {DEMO}", namespace=REPORTS)
    except IsolationError as exc:
        console.print(f"    and {REPORTS} may not name {DEMO} directly: {exc}")
    owner, reader = namespace_usage(catalog, DEMO.namespace), namespace_usage(catalog, REPORTS)
    console.print(
        f"17. usage: {DEMO.namespace} owns {format_size(owner.owned_bytes)}; {REPORTS} owns "
        f"{format_size(reader.owned_bytes)} and reads {format_size(reader.linked_bytes)} through its link "
        "(charged once, to its owner)"
    )


def run_clusters_demo(catalog: Catalog, console: Console) -> None:
    """Clusters: a table on dc1 whose rolled partitions are copied, verified, to dc2."""
    from metastore.errors import SecondaryWriteError
    from metastore.replicas import replica_table
    from scheduler.replication import Replicator

    _drop(catalog, CLUSTERS_DEMO)
    registered = {c.name for c in catalog.clusters.list()}
    for name in ("dc1", "dc2"):  # two storage roots (in a deployment: two data centres' file systems)
        storage = catalog.warehouse.local_dir / "_demo_clusters" / name
        storage.mkdir(parents=True, exist_ok=True)
        if name not in registered:
            catalog.clusters.add(name, str(storage), "local[2]")
    table = catalog.create_table(
        TableSpec(
            name=CLUSTERS_DEMO,
            columns=parse_schema("id BIGINT, ts TIMESTAMP, level STRING, msg STRING"),
            time_column="ts",
            roll_every=parse_duration("1h"),
            cluster="dc1",
        ),
        replicate_to=["dc2"],
    )
    console.print(
        f"18. clusters dc1 and dc2; {CLUSTERS_DEMO} lives on dc1 (its primary) and replicates to dc2"
    )
    writer = ChunkWriter(catalog, table)
    writer.write(_records(0, 2000, datetime.now(UTC)), Format.JSONL, key="orders-0")
    Roller(catalog).roll_table(table, force=True)
    [copied] = Replicator(catalog).replicate(table).copied
    rows = replica_table(table, catalog.replicas.get(table, "dc2"))
    from deltalake import DeltaTable

    on_dc2 = DeltaTable(rows.location).to_pyarrow_table(columns=["id"]).num_rows
    console.print(
        f"19. rolled it and copied partition {copied.partition} to dc2: {copied.files} file(s), "
        f"{copied.bytes} bytes, checked by size and SHA-256, then one Delta commit there; any Delta reader "
        f"of {rows.location} sees {on_dc2} rows"
    )
    try:
        catalog.table(CLUSTERS_DEMO, cluster="dc2")
    except SecondaryWriteError as exc:
        console.print(f"20. a write aimed at dc2 is refused: {exc}")


def _clicks(n: int, now: datetime) -> list[dict[str, Any]]:
    pages = ["/", "/cart", "/search", "/item/42", "/checkout"]
    return [
        {
            "value": json.dumps(
                {
                    "id": i,
                    "ts": (now - timedelta(seconds=random.randint(0, 300))).isoformat(),
                    "user": f"u{random.randint(1, 50)}",
                    "page": random.choice(pages),
                }
            ),
            "partition": i % 3,
        }
        for i in range(n)
    ]


def run_kafka_demo(settings: Any, catalog: Catalog, console: Console, spark: Any) -> None:
    """The Kafka path: embedded broker → ``run_kafka_ingest`` (available now) → query, twice."""
    from ingest.errors import BrokerError
    from ingest.kafka.devbroker import EmbeddedBroker, tansu_binary
    from ingest.kafka.job import KafkaIngestOptions, run_kafka_ingest
    from streampart.query import run_sql

    started = time.monotonic()
    console.rule("[bold]Kafka → table, exactly once")
    try:
        tansu_binary()
    except BrokerError as exc:
        console.print(f"[yellow]skipping the Kafka part: {exc}[/]")
        return
    # The embedded broker keeps its topics in memory, so this part always starts afresh.
    _drop(catalog, KAFKA_DEMO)
    catalog.create_table(
        TableSpec(
            name=KAFKA_DEMO,
            columns=parse_schema("id BIGINT, ts TIMESTAMP, user STRING, page STRING"),
            time_column="ts",
            roll_every=parse_duration("1h"),
            dead_letter=True,
        )
    )
    options = KafkaIngestOptions(
        table=str(KAFKA_DEMO),
        bootstrap="127.0.0.1:9092",  # replaced below by the broker's port
        topic=KAFKA_TOPIC,
        available_now=True,
        max_offsets_per_trigger=150,
    )
    shutil.rmtree(options.checkpoint_dir(catalog.warehouse), ignore_errors=True)
    with EmbeddedBroker() as broker:
        options = options.model_copy(update={"bootstrap": broker.bootstrap})
        console.print(f"9. started a Kafka-compatible broker (Tansu) on {broker.bootstrap}")
        broker.create_topic(KAFKA_TOPIC, partitions=3)
        records = _clicks(298, datetime.now(UTC))
        records.insert(100, {"value": b'{"id": 1000, "ts": "2026-01-01T00:00:00Z", "user": ', "partition": 1})
        records.insert(200, {"value": json.dumps({"id": "x", "ts": "later"}), "partition": 2})
        broker.produce(KAFKA_TOPIC, records)
        console.print(
            f"10. produced {len(records)} JSON records to topic {KAFKA_TOPIC} (3 partitions), "
            "2 of them malformed"
        )
        console.print(
            f"11. run_kafka_ingest, as `streampart ingest kafka {KAFKA_DEMO} --bootstrap {broker.bootstrap} "
            f"--topic {KAFKA_TOPIC} --available-now --max-offsets-per-trigger 150` does:"
        )
        batches = run_kafka_ingest(spark, catalog, options, settings.chunk)
        count = run_sql(spark, catalog, f"SELECT count(*) AS n FROM {KAFKA_DEMO}").collect()[0]["n"]
        console.print(
            f"    {batches} micro-batches → {batches} chunks; SELECT count(*) FROM {KAFKA_DEMO} → {count}"
        )
        dead = run_sql(
            spark, catalog, f"SELECT source, position, reason FROM {KAFKA_DEMO}__dead_letter ORDER BY source"
        ).collect()
        for row in dead:
            console.print(f"12. dead letter: {row['source']} offset {row['position']}: {row['reason']}")
        again = run_kafka_ingest(spark, catalog, options, settings.chunk)
        count_again = run_sql(spark, catalog, f"SELECT count(*) AS n FROM {KAFKA_DEMO}").collect()[0]["n"]
        console.print(
            f"13. ran the same job again from its checkpoint: {again} new batches, count(*) → {count_again}"
        )
    console.print(f"14. stopped the broker (the Kafka part took {time.monotonic() - started:.1f}s)")


# The demo's parts, as its progress bar counts them (Spark's start and the Kafka part take longest).
DEMO_PARTS = ("chunks", "Spark", "roll", "queries", "Kafka", "links", "clusters")


def run_demo(
    settings: Any, catalog: Catalog, console: Console, fresh: bool = True, progress: Progress | None = None
) -> None:
    """Run the demo, printing what happens to ``console``; ``progress`` is told as each part ends."""
    from streampart.query import spark_session

    progress = progress or Progress()
    progress.start("streampart demo", len(DEMO_PARTS), "parts")
    started = time.monotonic()
    console.rule("[bold]streampart demo")
    console.print(f"warehouse {catalog.warehouse.root}, metastore {catalog.store.safe_url}")
    table = _demo_table(catalog, console, fresh)
    writer = ChunkWriter(catalog, table, settings.chunk)
    now = datetime.now(UTC)
    _write_chunks(catalog, console, writer, now)

    progress.advance()
    console.print("5. starting Spark to query the streaming partition …")
    spark = spark_session(settings.spark)
    _count_events(catalog, console, spark)

    progress.advance()
    _roll(settings, catalog, console, table, spark)
    progress.advance()
    _write_after_the_roll(catalog, console, writer, now, spark)
    progress.advance()
    run_kafka_demo(settings, catalog, console, spark)
    progress.advance()
    run_links_demo(catalog, console, spark)
    progress.advance()
    run_clusters_demo(catalog, console)
    progress.advance()
    console.rule(f"done in {time.monotonic() - started:.1f}s")
    console.print("Try: streampart table describe demo.events", highlight=False)
    console.print(
        '     streampart query "SELECT level, count(*) FROM demo.events GROUP BY level"', highlight=False
    )
    console.print(
        f'     streampart query "SELECT page, count(*) FROM {KAFKA_DEMO} GROUP BY page"', highlight=False
    )


def _demo_table(catalog: Catalog, console: Console, fresh: bool) -> Table:
    """Step 1: demo.events, made anew (``fresh``) or found from an earlier run."""
    if fresh:
        _drop(catalog, DEMO)
    if catalog.find_table(DEMO) is None:
        catalog.create_table(
            TableSpec(
                name=DEMO,
                columns=parse_schema("id BIGINT, ts TIMESTAMP, level STRING, msg STRING"),
                time_column="ts",
                roll_every=parse_duration("1h"),
                dead_letter=True,
            )
        )
    table = catalog.table(DEMO)
    console.print(f"1. created {DEMO}: arrival mode, rolls every hour, bad records to {DEMO}__dead_letter")
    return table


def _write_chunks(catalog: Catalog, console: Console, writer: ChunkWriter, now: datetime) -> None:
    """Steps 2–4: chunks committed once each, a retry, a conflicting key, a malformed record."""
    chunks = [_records(k * 1000, 1000, now) for k in range(5)]
    for k, content in enumerate(chunks):
        r = writer.write(content, Format.JSONL, key=f"demo-{k}")
        console.print(f"2. committed chunk {k + 1}/5: {r.rows} rows at Delta version {r.version}")
    again = writer.write(chunks[0], Format.JSONL, key="demo-0")  # a retry sends the same bytes
    console.print(
        f"3. retried chunk 1 with the same idempotency key: same chunk {again.chunk[:8]}…, nothing added"
    )
    try:
        writer.write(_records(9000, 10, now), Format.JSONL, key="demo-0")
    except IdempotencyConflictError:
        console.print("   the same key with other data is refused (a conflict), never silently dropped")
    bad = writer.write(
        b'{"id": 5000, "ts": "2026-01-01T00:00:00Z"}\n{"id": "x", "ts": "soon"}\n', Format.JSONL
    )
    console.print(
        f"4. a chunk with a malformed record: {bad.rows} row committed, "
        f"{bad.dead_letter_rows} sent to the dead-letter table"
    )
    _partitions(console, catalog, DEMO)


def _count_events(catalog: Catalog, console: Console, spark: Any) -> None:
    from streampart.query import run_sql

    count = run_sql(spark, catalog, "SELECT count(*) AS n FROM demo.events").collect()[0]["n"]
    console.print(f"   SELECT count(*) FROM demo.events → {count}")


def _roll(settings: Any, catalog: Catalog, console: Console, table: Table, spark: Any) -> None:
    """Step 6: the streaming partition rolls into a standard one (forced: it is not due yet)."""
    rolled = Roller(catalog, settings.roll, spark=lambda _: spark).roll_table(table, force=True)
    for roll in rolled:
        console.print(
            f"6. rolled partition {roll.partition}: {roll.chunks} chunks → {roll.files_after} file(s), "
            f"{roll.rows} rows, {roll.seconds:.2f}s; next streaming partition {roll.next_partition}"
        )


def _write_after_the_roll(
    catalog: Catalog, console: Console, writer: ChunkWriter, now: datetime, spark: Any
) -> None:
    """Steps 7–8: chunks into the new streaming partition, a query over both, the dead letters."""
    from streampart.query import from_spark, run_sql

    for k in range(5, 7):
        r = writer.write(_records(k * 1000, 500, now), Format.JSONL, key=f"demo-{k}")
        console.print(
            f"7. committed chunk into the new streaming partition: {r.rows} rows → {r.partitions[0]}"
        )
    _partitions(console, catalog, DEMO)

    result = run_sql(
        spark,
        catalog,
        "SELECT ts_period, count(*) AS rows, count(DISTINCT id) AS ids FROM demo.events "
        "GROUP BY ts_period ORDER BY ts_period",
    ).collect()
    grid = RichTable(
        "ts_period", "rows", "distinct ids", title="SELECT ts_period, count(*) … GROUP BY ts_period"
    )
    for row in result:
        grid.add_row(iso(from_spark(row["ts_period"])), str(row["rows"]), str(row["ids"]))
    console.print(grid)
    dead = run_sql(spark, catalog, "SELECT position, reason FROM demo.events__dead_letter").collect()
    for row in dead:
        console.print(f"8. dead letter: record {row['position']}: {row['reason']}")

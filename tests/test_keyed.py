"""Keyed tables: one current row per key, exact at every version, across rolls and partitions.

The truth is computed here, in plain Python, from the change log the test wrote: each key's newest
version by its sequence value (tables with ``--sequence-by``), then by the order the test committed
it (one writer committing in turn: commit order is write order). streampart's answers — ``table
read`` without Spark, SQL through Spark, and after the rolls delta-rs and polars reading the Delta
table as plain readers — are compared with it.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from ingest.chunks import ChunkWriter
from ingest.errors import MalformedChunkError
from ingest.formats import Format
from metastore.delta.checkpoints import set_log_settings
from metastore.durations import parse_duration
from metastore.errors import UserInputError
from metastore.integrity import check_table
from metastore.models import ChunkState, Keys, Mode, TableName, TableSpec, parse_schema
from metastore.snapshots import pin
from scheduler.config import HousekeepingConfig
from scheduler.housekeeping import Housekeeper
from scheduler.roll import Roller
from streampart.snapshots import read_batches
from tests.fixtures import add_clusters, make_table

SCHEMA = "id BIGINT, ts TIMESTAMP, v BIGINT, op STRING, lsn BIGINT"

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)


def keyed_table(
    catalog: Any,
    name: str = "ns.kv",
    sequence: bool = False,
    mode: Mode = Mode.ARRIVAL,
    dead_letter: bool = False,
) -> Any:
    return make_table(
        catalog,
        name,
        mode=mode,
        schema=SCHEMA,
        max_future="3650d",
        dead_letter=dead_letter,
        keys=Keys(columns=("id",), sequence_by="lsn" if sequence else None, op_column="op"),
    )


class Truth:
    """Each key's newest version, applied in the test's commit order."""

    def __init__(self, sequence: bool) -> None:
        self.sequence = sequence
        self.rows: dict[int, tuple[tuple[int, int], dict[str, Any]]] = {}
        self.order = 0

    def apply(self, records: list[dict[str, Any]]) -> None:
        for r in records:
            self.order += 1
            rank = (r["lsn"] if self.sequence else 0, self.order)
            old = self.rows.get(r["id"])
            if old is None or rank > old[0]:
                self.rows[r["id"]] = (rank, r)

    def live(self) -> dict[int, tuple[int, str]]:
        return {k: (r["v"], r["op"]) for k, (_, r) in self.rows.items() if r["op"] != "d"}


def jsonl(records: list[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def shown(rows: list[dict[str, Any]]) -> dict[int, tuple[int, str]]:
    out: dict[int, tuple[int, str]] = {}
    for r in rows:
        assert r["id"] not in out, f"key {r['id']} shown twice"
        out[r["id"]] = (r["v"], r["op"])
    return out


def read_now(catalog: Any, table: Any) -> dict[int, tuple[int, str]]:
    snap = pin(catalog, table)
    return shown([row for b in read_batches(snap) for row in b.to_pylist()])


def change_log(rng: random.Random, steps: int, keys: int) -> list[list[dict[str, Any]]]:
    chunks = []
    for _ in range(steps):
        chunk = []
        for _ in range(rng.randint(1, 6)):
            k = rng.randrange(keys)
            chunk.append(
                {
                    "id": k,
                    "ts": (T0 + timedelta(minutes=rng.randrange(300))).isoformat(),
                    "v": rng.randrange(1000),
                    "op": rng.choice(["c", "u", "u", "r", "d"]),
                    "lsn": rng.randrange(50),  # out of order, with ties
                }
            )
        chunks.append(chunk)
    return chunks


@pytest.mark.parametrize("sequence", [False, True], ids=["arrival", "sequence-by"])
def test_random_change_logs_read_exactly_at_every_step_and_plainly_after_the_rolls(
    storage_catalog, sequence: bool
) -> None:
    import deltalake
    import polars as pl

    from metastore import storage

    catalog = storage_catalog  # a local disk on both metastores, and a bucket
    table = keyed_table(catalog, sequence=sequence)
    writer = ChunkWriter(catalog, table)
    truth = Truth(sequence)
    rng = random.Random(7 if sequence else 11)
    steps = 20 if storage.is_remote(table.location) else 40  # a bucket's requests are slow
    for step, chunk in enumerate(change_log(rng, steps, 12)):
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
        assert read_now(catalog, table) == truth.live(), f"after chunk {step}"
        if rng.random() < 0.25:  # a roll: a key's versions now sit in several partitions
            Roller(catalog).roll_table(table, force=True)
            assert read_now(catalog, table) == truth.live(), f"after the roll at chunk {step}"
    Roller(catalog).roll_table(table, force=True)
    assert read_now(catalog, table) == truth.live()
    # every partition rolled: plain readers of the Delta table see one row per live key
    options = storage.delta_options(table.location)
    dt = deltalake.DeltaTable(table.location, storage_options=options)
    assert shown(dt.to_pyarrow_table().to_pylist()) == truth.live()
    frame = pl.read_delta(table.location, storage_options=options)
    assert shown(frame.to_dicts()) == truth.live()
    assert [p for p in check_table(catalog, table) if p.severity == "error"] == []


def test_a_key_deleted_in_a_later_partition_is_gone_from_the_earlier_one_after_its_roll(catalog) -> None:
    import deltalake

    table = keyed_table(catalog)
    writer = ChunkWriter(catalog, table)
    writer.write(
        jsonl([{"id": k, "ts": T0.isoformat(), "v": k, "op": "c", "lsn": 0} for k in range(5)]),
        Format.JSONL,
    )
    Roller(catalog).roll_table(table, force=True)
    writer.write(
        jsonl(
            [
                {"id": 1, "ts": T0.isoformat(), "op": "d", "lsn": 1},
                {"id": 2, "ts": T0.isoformat(), "v": 20, "op": "u", "lsn": 1},
            ]
        ),
        Format.JSONL,
    )
    assert read_now(catalog, table) == {0: (0, "c"), 2: (20, "u"), 3: (3, "c"), 4: (4, "c")}
    [result] = Roller(catalog).roll_table(table, force=True)
    rows = deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()
    assert shown(rows) == {0: (0, "c"), 2: (20, "u"), 3: (3, "c"), 4: (4, "c")}
    parts = {p.value: p for p in catalog.partitions(table)}
    first = min(parts)
    assert parts[first].rows == 3, "the first partition is counted anew without its two older versions"
    assert result.rows == 1, "the rolled partition keeps the upsert, not the delete"
    # the first partition's replaced file stays for older versions (time travel), known as replaced
    assert check_table(catalog, table) == []
    [roll] = [r for r in catalog.store.list_rolls(table.id) if r.id == result.roll]
    [replaced] = roll.removed_files
    assert (Path(table.location) / replaced).exists()
    assert roll.sweep_version is not None
    before = pin(catalog, table, roll.sweep_version - 1)  # time travel: as before this roll
    assert shown([r for b in read_batches(before) for r in b.to_pylist()]) == {
        0: (0, "c"),
        2: (20, "u"),
        3: (3, "c"),
        4: (4, "c"),
    }
    # housekeeping deletes it once no readable version lists it and the grace passed
    assert roll.finished_at is not None
    later = roll.finished_at + timedelta(hours=2)
    assert (
        Housekeeper(catalog, HousekeepingConfig(retention="1h")).run(now=later).deleted_files_reclaimed == 0
    )
    set_log_settings(catalog.load(table), log_retention=timedelta(hours=1))
    old = time.time() - 7200
    for path in (Path(table.location) / "_delta_log").iterdir():
        os.utime(path, (old, old))
    keeper = Housekeeper(catalog, HousekeepingConfig(retention="1h", checkpoint_every=1))
    gone = keeper.run(now=later).deleted_files_reclaimed + keeper.run(now=later).deleted_files_reclaimed
    assert gone >= 1 and not (Path(table.location) / replaced).exists()
    assert check_table(catalog, table) == []


def test_bad_op_values_and_declarations_are_refused_naming_what_is_wrong(catalog) -> None:
    table = keyed_table(catalog)
    writer = ChunkWriter(catalog, table)
    with pytest.raises(MalformedChunkError, match=r"record 1: column 'op': 'x' is neither an upsert"):
        writer.write(jsonl([{"id": 1, "ts": T0.isoformat(), "v": 1, "op": "x", "lsn": 0}]), Format.JSONL)
    assert read_now(catalog, table) == {}
    with pytest.raises(MalformedChunkError, match="'id' is required"):
        writer.write(jsonl([{"ts": T0.isoformat(), "v": 1, "op": "c", "lsn": 0}]), Format.JSONL)

    def spec(**keys: Any) -> TableSpec:
        return TableSpec(
            name=TableName.parse("ns.bad"),
            columns=parse_schema("id DOUBLE, k BIGINT, ts TIMESTAMP, op BIGINT"),
            time_column="ts",
            roll_every=timedelta(hours=1),
            keys=Keys(**keys),
        )

    for keys, message in (
        ({"columns": ("id",)}, "is DOUBLE: a key may not be"),
        ({"columns": ("nope",)}, "'nope' is not a column of the table"),
        ({"columns": ("k",), "sequence_by": "k"}, "is a primary key column"),
        ({"columns": ("k",), "op_column": "op"}, "must be a STRING column"),
        ({"columns": ("k",), "delete_ops": ("x",)}, "need --op-column"),
    ):
        with pytest.raises(UserInputError, match=message):
            catalog.create_table(spec(**keys))


@pytest.mark.spark
def test_sql_reads_the_newest_version_of_each_key_before_and_after_a_roll(storage_catalog, spark) -> None:
    from streampart.query import run_sql

    catalog = (
        storage_catalog  # a local disk on both metastores, and a bucket (Spark's Python workers read it)
    )

    table = keyed_table(catalog, sequence=True)
    writer = ChunkWriter(catalog, table)
    truth = Truth(True)
    rng = random.Random(3)

    def sql() -> dict[int, tuple[int, str]]:
        return shown([r.asDict() for r in run_sql(spark, catalog, "SELECT id, v, op FROM ns.kv").collect()])

    log = change_log(rng, 12, 8)
    for chunk in log[:6]:
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
    assert sql() == truth.live()
    Roller(catalog).roll_table(table, force=True)
    assert sql() == truth.live()  # resolved rows only
    for chunk in log[6:]:
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
    assert sql() == truth.live()  # resolved rows merged with newer and older versions
    count = run_sql(spark, catalog, "SELECT count(*) AS n FROM ns.kv").collect()[0]["n"]
    assert count == len(truth.live())


@pytest.mark.spark
def test_create_table_as_declares_a_key_and_insert_into_upserts(catalog, spark) -> None:
    from tests.test_query_writes import query, selected

    source = keyed_table(catalog, "ns.src")
    rows = [{"id": k % 3, "ts": T0.isoformat(), "v": k, "op": "c", "lsn": k} for k in range(6)]
    ChunkWriter(catalog, source).write(jsonl(rows), Format.JSONL)
    query(
        catalog,
        "CREATE TABLE ns.copy TBLPROPERTIES ('primary_key' = 'id', 'sequence_by' = 'lsn', "
        "'op_column' = 'op') AS SELECT id, ts, v, op, lsn FROM ns.src",
    )
    copy = catalog.table("ns.copy")
    assert copy.keys == Keys(columns=("id",), sequence_by="lsn", op_column="op")
    assert not next(c for c in copy.columns if c.name == "id").nullable
    # an INSERT INTO is a chunk of versions like any other: upserts and a delete
    query(
        catalog,
        "INSERT INTO ns.copy SELECT id, ts, v + 100 AS v, CASE WHEN id = 0 THEN 'd' ELSE 'u' END AS op, "
        "lsn + 10 AS lsn FROM ns.src WHERE id < 2",
    )
    got = {r["id"]: (r["v"], r["op"]) for r in selected(catalog, "SELECT id, v, op FROM ns.copy")}
    assert got == {1: (104, "u"), 2: (5, "c")}
    # a table ordered by arrival, rolled, then updated and deleted: merged on read in Spark
    Roller(catalog).roll_table(source, force=True)
    later = [{"id": 0, "ts": T0.isoformat(), "v": 50, "op": "u", "lsn": 0},
             {"id": 1, "ts": T0.isoformat(), "v": 0, "op": "d", "lsn": 0},
             {"id": 7, "ts": T0.isoformat(), "v": 70, "op": "c", "lsn": 0}]  # fmt: skip
    ChunkWriter(catalog, source).write(jsonl(later), Format.JSONL)
    got = {r["id"]: r["v"] for r in selected(catalog, "SELECT id, v FROM ns.src")}
    assert got == {0: 50, 2: 5, 7: 70}
    with pytest.raises(UserInputError, match="TBLPROPERTIES 'op_column' applies to keyed tables only"):
        query(
            catalog, "CREATE TABLE ns.bad TBLPROPERTIES ('op_column' = 'op') AS SELECT id, ts, op FROM ns.src"
        )


@pytest.mark.spark
def test_a_kafka_topic_of_changes_lands_one_row_per_key(spark, sqlite_catalog, kafka_broker) -> None:
    import deltalake

    from ingest.kafka.job import run_kafka_ingest
    from tests.ingest.test_kafka_ingest import options, topic_name

    table = keyed_table(sqlite_catalog, "ns.events", sequence=True, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    rng = random.Random(5)
    records = [
        {
            "id": rng.randrange(40),
            "ts": T0.isoformat(),
            "v": n,
            "op": rng.choice(["c", "u", "u", "d"]),
            "lsn": rng.randrange(10_000) * 1000 + n,  # unique, out of order across partitions
        }
        for n in range(900)
    ]
    kafka_broker.produce(topic, [{"value": json.dumps(r), "partition": n % 3} for n, r in enumerate(records)])
    truth = Truth(True)
    truth.apply(records)  # unique sequence values: the order of arrival does not matter
    opts = options(sqlite_catalog, kafka_broker, topic, max_offsets_per_trigger=200)
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 5
    assert read_now(sqlite_catalog, table) == truth.live()
    Roller(sqlite_catalog).roll_table(table, force=True)
    assert shown(deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.live()
    assert run_kafka_ingest(spark, sqlite_catalog, opts) == 0  # replays add nothing
    assert read_now(sqlite_catalog, table) == truth.live()


def test_a_record_whose_op_is_neither_goes_to_the_dead_letter_table_the_rest_commit(catalog) -> None:
    table = keyed_table(catalog, dead_letter=True)
    ok = {"id": 1, "ts": T0.isoformat(), "v": 1, "op": "c", "lsn": 0}
    ChunkWriter(catalog, table).write(jsonl([ok, {**ok, "id": 2, "op": "upsert"}]), Format.JSONL)
    assert read_now(catalog, table) == {1: (1, "c")}
    letters = [
        r for b in read_batches(pin(catalog, catalog.table("ns.kv__dead_letter"))) for r in b.to_pylist()
    ]
    assert [r["reason"] for r in letters] == [
        "column 'op': 'upsert' is neither an upsert (c, r, u, INSERT, UPDATE) nor a delete (d, DELETE)"
    ]


def debezium_event(rng: random.Random, n: int, envelope: bool) -> dict[str, Any]:
    """A PostgreSQL connector's change event of row ``id`` (its LSN unique, out of order)."""
    k = rng.randrange(30)
    op = rng.choice(["c", "u", "u", "r", "d"])
    at = T0 + timedelta(seconds=n)
    # without the envelope's schema a time is a ZonedTimestamp (ISO text); with it, MicroTimestamp
    row = {"id": k, "ts": int(at.timestamp() * 1_000_000) if envelope else at.isoformat(), "v": n}
    # a delete's before row: the whole row (REPLICA IDENTITY FULL), or, as PostgreSQL logs by default,
    # the key only (its time column is then the change's time, source.ts_ms)
    before = ({"id": k} if n % 3 == 0 and not envelope else row) if op == "d" else None
    ms = int(at.timestamp() * 1000)
    payload = {
        "before": before,
        "after": None if op == "d" else row,
        "op": op,
        "source": {"connector": "postgresql", "lsn": rng.randrange(10_000) * 1000 + n, "ts_ms": ms},
        "ts_ms": ms + 5,
    }
    if not envelope:
        return payload
    micro = "io.debezium.time.MicroTimestamp"
    fields = [
        {"field": "id", "type": "int64"},
        {"field": "ts", "type": "int64", "name": micro},
        {"field": "v", "type": "int64"},
    ]
    side = {"type": "struct", "fields": fields, "optional": True}
    schema = {"type": "struct", "fields": [{"field": "before", **side}, {"field": "after", **side}]}
    return {"schema": schema, "payload": payload}


@pytest.mark.spark
def test_debezium_change_events_land_as_their_newest_row_per_key(spark, sqlite_catalog, kafka_broker) -> None:
    import deltalake

    from ingest.kafka.job import run_kafka_ingest
    from tests.ingest.test_kafka_ingest import options, topic_name

    table = keyed_table(sqlite_catalog, "ns.events", sequence=True, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=2)
    rng = random.Random(9)
    events = [debezium_event(rng, n, envelope=n % 2 == 0) for n in range(400)]
    values: list[str | None] = [json.dumps(e) for e in events]
    truth = Truth(True)
    for e in events:
        p = e.get("payload", e)
        row = p["after"] if p["op"] != "d" else p["before"]
        truth.apply([{"id": row["id"], "v": row.get("v"), "op": p["op"], "lsn": p["source"]["lsn"]}])
    truncate = json.dumps({"op": "t", "before": None, "after": None, "source": {"lsn": 1}})
    values += [None, truncate]  # a tombstone (skipped) and a truncate (refused)
    kafka_broker.produce(topic, [{"key": "k", "value": v, "partition": n % 2} for n, v in enumerate(values)])
    opts = options(sqlite_catalog, kafka_broker, topic, format="debezium", max_offsets_per_trigger=150)
    run_kafka_ingest(spark, sqlite_catalog, opts)
    assert read_now(sqlite_catalog, table) == truth.live()
    first = min(r["ts"] for r in read_batches_rows(sqlite_catalog, table))
    assert first >= T0  # Debezium's MicroTimestamp read as the instant it is
    letters = read_batches_rows(sqlite_catalog, sqlite_catalog.table("ns.events__dead_letter"))
    assert [r["reason"][:38] for r in letters] == ["a truncate event (op 't') is not appli"]
    Roller(sqlite_catalog).roll_table(table, force=True)
    assert shown(deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.live()
    make_table(sqlite_catalog, "ns.other", dead_letter=True)  # a table of appends
    with pytest.raises(UserInputError, match="must be a keyed table with an op column"):
        run_kafka_ingest(spark, sqlite_catalog, options(sqlite_catalog, kafka_broker, topic, table="ns.other",
                                                        format="debezium"))  # fmt: skip


def debezium_avro_schema() -> dict[str, Any]:
    """A PostgreSQL connector's value schema as the AvroConverter registers it (``Envelope``); the
    row's ``ts`` a long named by Connect as Debezium's ``MicroTimestamp`` (no logical type)."""
    ts = {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}
    value = {
        "type": "record",
        "name": "Value",
        "namespace": "pg.public.events",
        "fields": [{"name": "id", "type": "long"}, {"name": "ts", "type": ts}, {"name": "v", "type": "long"}],
    }
    source = {
        "type": "record",
        "name": "Source",
        "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "connector", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "lsn", "type": ["null", "long"], "default": None},
        ],
    }
    return {
        "type": "record",
        "name": "Envelope",
        "namespace": "pg.public.events",
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
        ],
    }


@pytest.mark.spark
def test_debezium_avro_change_events_through_the_registry_land_as_one_row_per_key(
    spark, sqlite_catalog, kafka_broker, registry
) -> None:
    """Change events in the Confluent wire format (magic byte, schema id, Avro body), their schema
    served by the registry: updates, deletes (``before`` only) and LSNs out of order for the same
    keys, a tombstone after each delete (skipped); each key shows its change of the highest LSN."""
    import deltalake

    from ingest.config import KafkaConfig
    from ingest.kafka.job import run_kafka_ingest
    from tests.ingest.test_kafka_ingest import options, topic_name

    table = keyed_table(sqlite_catalog, "ns.events", sequence=True, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=2)
    serialize = registry.serializer(debezium_avro_schema())
    rng = random.Random(13)
    truth, arrival = Truth(True), Truth(False)
    records: list[dict[str, Any]] = []
    for n in range(300):
        event = debezium_event(rng, n, envelope=True)["payload"]  # ts: MicroTimestamp, an int
        row = event["after"] if event["op"] != "d" else event["before"]
        key = json.dumps({"id": row["id"]})
        value = serialize(event, topic)
        assert value[0] == 0 and len(value) > 5  # the wire format: magic byte, schema id, the datum
        records.append({"key": key, "value": value, "partition": row["id"] % 2})
        if event["op"] == "d":  # Debezium's tombstone, for log compaction: skipped
            records.append({"key": key, "value": None, "partition": row["id"] % 2})
        change = {"id": row["id"], "v": row["v"], "op": event["op"], "lsn": event["source"]["lsn"]}
        truth.apply([change])
        arrival.apply([change])
    assert arrival.live() != truth.live()  # the LSNs, not the order produced, decide
    assert sum(r["value"] is None for r in records) > 20
    kafka_broker.produce(topic, records)
    kafka = KafkaConfig(schema_registry_user="ingest", schema_registry_password="s3cret")
    opts = options(sqlite_catalog, kafka_broker, topic, format="debezium", schema_registry=registry.url,
                   kafka=kafka, max_offsets_per_trigger=120)  # fmt: skip
    run_kafka_ingest(spark, sqlite_catalog, opts)
    assert any(p.startswith("/schemas/ids/") for p in registry.requests)  # decoded by the registry's schema
    assert read_now(sqlite_catalog, table) == truth.live()
    rows = read_batches_rows(sqlite_catalog, table)
    assert all(r["ts"] == T0 + timedelta(seconds=r["v"]) for r in rows)  # the micros read as the instant
    assert read_batches_rows(sqlite_catalog, sqlite_catalog.table("ns.events__dead_letter")) == []
    Roller(sqlite_catalog).roll_table(table, force=True)
    assert shown(deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.live()
    assert read_now(sqlite_catalog, table) == truth.live()


def read_batches_rows(catalog: Any, table: Any) -> list[dict[str, Any]]:
    return [r for b in read_batches(pin(catalog, table)) for r in b.to_pylist()]


# Where the Debezium ingest process dies, then restarts (the crash points of the Kafka ingest's
# test: COMMITTING recorded but no Delta commit; the Delta commit landed but the metastore not told),
# and SIGKILLs at random instants from outside
DEBEZIUM_KILLS = ("chunk-before-delta-commit@2", "chunk-after-delta-commit@2", "random", "random")


@pytest.mark.spark
def test_a_debezium_topic_ingested_under_kills_lands_every_change_once(
    sqlite_catalog, kafka_broker, tmp_path
) -> None:
    """A PostgreSQL connector's topic (keyed by the row's key, a tombstone after each delete, the
    LSN rising event by event) produced while `streampart ingest kafka --format debezium` is killed
    again and again: after a final drain each key shows its newest change, never an older one, never
    twice, and nothing produced is missing; a plain reader after the roll sees the same."""
    import deltalake

    from tests.ingest.test_kafka_ingest import ingest_cmd, run_until_killed, topic_name

    table = keyed_table(sqlite_catalog, "ns.events", sequence=True, dead_letter=True)
    topic = topic_name()
    kafka_broker.create_topic(topic, partitions=3)
    checkpoint = tmp_path / "checkpoint"
    truth = Truth(True)
    versions: dict[int, int] = {}  # v (the event's number) → its key: what a row may show
    stop = threading.Event()
    failed: list[BaseException] = []

    def produce() -> None:
        rng, n = random.Random(17), 0
        try:
            while not stop.is_set():
                events, records = [], []
                for _ in range(15):
                    e = debezium_event(rng, n, envelope=n % 2 == 0)
                    p = e.get("payload", e)
                    p["source"]["lsn"] = 1_000 + n  # the WAL's position: rising with each change
                    row = p["after"] if p["op"] != "d" else p["before"]
                    # keys live a while (about ten changes each) and are then left: every batch holds
                    # some key's last change, so a batch lost shows as a key stale or missing
                    row["id"] = n // 10 + row["id"] % 20
                    key = json.dumps({"id": row["id"]})
                    records.append({"key": key, "value": json.dumps(e), "partition": row["id"] % 3})
                    if p["op"] == "d":  # Debezium's tombstone, for log compaction: skipped
                        records.append({"key": key, "value": None, "partition": row["id"] % 3})
                    events.append({"id": row["id"], "v": row.get("v"), "op": p["op"], "lsn": 1_000 + n})
                    versions[n] = row["id"]
                    n += 1
                kafka_broker.produce(topic, records)
                truth.apply(events)
                stop.wait(0.25)
        except BaseException as exc:  # the test fails on it below (the truth would be wrong)
            failed.append(exc)

    cmd = ingest_cmd(
        sqlite_catalog,
        kafka_broker.bootstrap,
        topic,
        checkpoint,
        "--format",
        "debezium",
        "--trigger",
        "1s",
        "--max-offsets-per-trigger",
        "120",
    )
    producer = threading.Thread(target=produce)
    producer.start()
    rng = random.Random(4197)
    try:
        for kill in DEBEZIUM_KILLS:
            proc, err = run_until_killed(cmd, {**os.environ}, kill, sqlite_catalog, table, rng)
            assert proc.returncode == -signal.SIGKILL, (kill, err.decode()[-2000:])
            # what is committed so far: one row per key (read_now refuses a key shown twice), each
            # one a version that was produced for its key
            for k, (v, _) in read_now(sqlite_catalog, table).items():
                assert versions.get(v) == k, (kill, k, v)
    finally:
        stop.set()
        producer.join()
    assert not failed, failed
    assert len(versions) >= 300, len(versions)  # changes arrived all the while
    final = subprocess.run(
        ingest_cmd(sqlite_catalog, kafka_broker.bootstrap, topic, checkpoint, "--format", "debezium",
                   "--available-now"),
        capture_output=True,
        timeout=300,
    )  # fmt: skip
    assert final.returncode == 0, final.stderr.decode()[-2000:]
    assert read_now(sqlite_catalog, table) == truth.live()
    # not rolled yet, the Delta table holds the versions as committed (a chunk stages a key's newest
    # of its batch only): a batch committed twice would hold its versions twice
    raw = Counter(deltalake.DeltaTable(table.location).to_pyarrow_table().column("v").to_pylist())
    # (a delete whose before row is its key only has no v: nothing to tell its copies apart by)
    assert [v for v, times in raw.items() if v is not None and (times > 1 or v not in versions)] == []
    states = Counter(c.state for c in sqlite_catalog.store.list_chunks(table.id))
    assert set(states) <= {ChunkState.COMMITTED, ChunkState.RESERVED}, states  # none left COMMITTING
    assert read_batches_rows(sqlite_catalog, sqlite_catalog.table("ns.events__dead_letter")) == []
    Roller(sqlite_catalog).roll_table(table, force=True)
    assert shown(deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.live()
    assert read_now(sqlite_catalog, table) == truth.live()


def test_a_delete_by_predicate_deletes_the_keys_whose_current_row_matches(catalog) -> None:
    from ingest.deletes.deleter import Deleter

    table = keyed_table(catalog, sequence=True)
    writer = ChunkWriter(catalog, table)
    truth = Truth(True)
    old = [{"id": k, "ts": T0.isoformat(), "v": 100 + k, "op": "c", "lsn": 1} for k in range(6)]
    new = [{"id": k, "ts": T0.isoformat(), "v": k, "op": "u", "lsn": 2} for k in range(4)]
    for chunk in (old, new):
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
    Roller(catalog).roll_table(table, force=True)
    writer.write(jsonl(new[:2]), Format.JSONL)  # newer versions again, unrolled: merged on read
    truth.apply(new[:2])
    # current rows: v 0..3 and 104, 105; v < 2 matches keys 0 and 1 only — never their older v 100, 101
    [result] = Deleter(catalog).delete(table, "v < 2")
    assert result.rows == 2
    truth.apply([{**r, "op": "d", "lsn": 2} for r in new[:2]])
    assert (
        read_now(catalog, table) == truth.live() == {2: (2, "u"), 3: (3, "u"), 4: (104, "c"), 5: (105, "c")}
    )
    late = {"id": 0, "ts": T0.isoformat(), "v": 7, "op": "u", "lsn": 3}  # newer than the delete: stands
    writer.write(jsonl([late]), Format.JSONL)
    truth.apply([late])
    Roller(catalog).roll_table(table, force=True)
    assert read_now(catalog, table) == truth.live()
    assert Deleter(catalog).delete(table, "v > 1000")[0].rows == 0
    with pytest.raises(UserInputError, match="matches every row"):
        Deleter(catalog).delete(table, "v >= 0")


def test_links_time_travel_and_retention_answer_one_row_per_key(catalog) -> None:
    from metastore.links import LinkSpec
    from metastore.snapshots import view_of
    from scheduler.expiry import Expirer

    table = keyed_table(catalog, sequence=True)
    catalog.links.create(
        LinkSpec(name=TableName.parse("mirror.kv"), source=table.name, include_streaming=True)
    )
    writer = ChunkWriter(catalog, table)
    truth = Truth(True)
    rng = random.Random(21)
    at: dict[int, dict[int, tuple[int, str]]] = {}  # version → the truth then
    for step, chunk in enumerate(change_log(rng, 16, 10)):
        version = writer.write(jsonl(chunk), Format.JSONL).version
        truth.apply(chunk)
        assert version is not None
        at[version] = truth.live()
        if step % 5 == 4:
            Roller(catalog).roll_table(table, force=True)
    for version, expected in at.items():  # time travel: each version as it was
        assert shown(read_batches_rows_at(catalog, table, version)) == expected, f"version {version}"
    resolved = catalog.resolve("mirror.kv")
    linked = view_of(resolved, pin(catalog, resolved.table))
    assert shown([r for b in read_batches(linked) for r in b.to_pylist()]) == truth.live()
    # retention: the standard partitions go; a key whose newest version was there is gone with them
    # (an older version of it in the open partition, arrived late, does not take its place); one
    # whose newest version is in the open partition stays
    streaming = catalog.store.streaming_partition(table.id).value
    rows = read_batches_rows(catalog, table)
    stays = {r["id"] for r in rows if r[table.partition_column] == streaming}
    table = catalog.store.set_retain(table.id, timedelta(hours=1))
    Expirer(catalog).expire_table(table, now=datetime.now(UTC) + timedelta(days=3))
    assert read_now(catalog, table) == {k: v for k, v in truth.live().items() if k in stays}
    late = {"id": next(iter(set(truth.live()) - stays)), "ts": T0.isoformat(), "v": 1, "op": "u", "lsn": -1}
    writer.write(jsonl([late]), Format.JSONL)  # older than its expired version: still gone
    assert read_now(catalog, table) == {k: v for k, v in truth.live().items() if k in stays}


def read_batches_rows_at(catalog: Any, table: Any, version: int) -> list[dict[str, Any]]:
    return [r for b in read_batches(pin(catalog, table, version)) for r in b.to_pylist()]


def test_a_keyed_roll_rewriting_standard_partitions_reaches_the_secondaries(catalog, tmp_path) -> None:
    """The partitions a keyed roll rewrote (older versions removed) go stale on the secondaries at
    once, and the next copy pass replaces them: a plain reader of the copy sees one row per key."""
    import deltalake

    from metastore.replicas import CopyState, replica_table
    from scheduler.replication import Replicator

    add_clusters(catalog, tmp_path, "c1", "c2")
    table = catalog.create_table(
        TableSpec(
            name=TableName.parse("ns.kv"),
            columns=parse_schema(SCHEMA),
            time_column="ts",
            roll_every=parse_duration("1h"),
            cluster="c1",
            keys=Keys(columns=("id",), op_column="op"),
        ),
        replicate_to=("c2",),
    )
    writer = ChunkWriter(catalog, table)
    truth = Truth(False)
    first = [{"id": k, "ts": T0.isoformat(), "v": k, "op": "c", "lsn": 0} for k in range(6)]
    second = [{"id": k, "ts": T0.isoformat(), "v": 10 + k, "op": "u", "lsn": 0} for k in range(3)]
    for chunk in (first, second):
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
        Roller(catalog).roll_table(table, force=True)
    # the second roll removed keys 0-2's older versions from the first partition before its copy
    Replicator(catalog).replicate(table)
    writer.write(jsonl([{"id": 5, "ts": T0.isoformat(), "v": 0, "op": "d", "lsn": 0}]), Format.JSONL)
    truth.apply([{"id": 5, "ts": T0.isoformat(), "v": 0, "op": "d", "lsn": 0}])
    Roller(catalog).roll_table(table, force=True)  # rewrites the first partition again: its copy goes stale
    assert CopyState.STALE in {c.state for c in catalog.store.list_copies(table.id, "c2")}
    report = Replicator(catalog).replicate(table)
    assert not report.failed
    [replica] = catalog.replicas.list(table)
    copy = replica_table(table, replica)
    assert shown(deltalake.DeltaTable(copy.location).to_pyarrow_table().to_pylist()) == truth.live()
    assert {c.state for c in catalog.store.list_copies(table.id, "c2")} == {CopyState.PRESENT}


def test_a_keyed_table_dropped_and_made_again_under_its_name_reads_its_own_arrivals(catalog) -> None:
    for v in (10, 20):  # the same paths, a new table: what this process read of the old one is not it
        table = keyed_table(catalog)
        writer = ChunkWriter(catalog, table)
        for n in range(2):
            writer.write(
                jsonl([{"id": 1, "ts": T0.isoformat(), "v": v + n, "op": "u", "lsn": 0}]), Format.JSONL
            )
            assert read_now(catalog, table) == {1: (v + n, "u")}
        Roller(catalog).roll_table(table, force=True)
        assert read_now(catalog, table) == {1: (v + 1, "u")}
        catalog.drop_table(table)


def test_a_keyed_roll_reads_only_the_files_whose_key_ranges_may_hold_its_keys(catalog, monkeypatch) -> None:
    """Chunk commits and rolls record each file's key range in its add (Delta ``stats``); a roll looks
    for older versions of its keys only in the files whose range takes one, and stays exact."""
    import deltalake
    import pyarrow as pa

    from scheduler import keyed_rolls

    table = keyed_table(catalog)
    writer = ChunkWriter(catalog, table)
    truth = Truth(False)
    for p in range(6):  # partition p holds keys 10p .. 10p+9
        chunk = [{"id": 10 * p + k, "ts": T0.isoformat(), "v": p, "op": "c", "lsn": 0} for k in range(10)]
        writer.write(jsonl(chunk), Format.JSONL)
        truth.apply(chunk)
        Roller(catalog).roll_table(table, force=True)
    adds = pa.table(deltalake.DeltaTable(table.location).get_add_actions(flatten=True))
    ranges = set(zip(adds.column("min.id").to_pylist(), adds.column("max.id").to_pylist(), strict=True))
    assert ranges == {(10 * p, 10 * p + 9) for p in range(6)}
    read: list[str] = []
    real = keyed_rolls._read

    def counted(table: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(f.path)
        return real(table, f, *args, **kwargs)

    monkeypatch.setattr(keyed_rolls, "_read", counted)
    update = [{"id": k, "ts": T0.isoformat(), "v": 100 + k, "op": "u", "lsn": 0} for k in (21, 27, 105)]
    writer.write(jsonl(update), Format.JSONL)
    truth.apply(update)
    Roller(catalog).roll_table(table, force=True)
    others = [p for p in read if not p.startswith("_staging/")]
    # partition 2's file twice (its keys read, then rewritten without keys 21 and 27); no other file
    assert len(set(others)) == 1 and len(others) == 2, read
    assert shown(deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()) == truth.live()


def test_a_keyed_table_evolves_its_schema_from_data_and_keeps_one_row_per_key(catalog) -> None:
    """Versions bringing a field the table lacks add its column (schema evolution from data); versions
    before it read null there, and each key still shows its newest version only."""
    import deltalake

    table = keyed_table(catalog, sequence=True)
    catalog.schemas.set_evolution(table, "add-columns")
    writer = ChunkWriter(catalog, catalog.table("ns.kv"))
    first = [{"id": k, "ts": T0.isoformat(), "v": k, "op": "c", "lsn": 1} for k in range(4)]
    writer.write(jsonl(first), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    later = [
        {"id": k, "ts": T0.isoformat(), "v": 10 + k, "op": "u", "lsn": 2, "tier": "gold"} for k in (1, 2)
    ]
    result = writer.write(jsonl(later), Format.JSONL)
    assert result.new_columns == {"tier": "STRING"}
    table = catalog.table("ns.kv")
    expected = {0: (0, None), 1: (11, "gold"), 2: (12, "gold"), 3: (3, None)}
    rows = [r for b in read_batches(pin(catalog, table)) for r in b.to_pylist()]
    assert {r["id"]: (r["v"], r["tier"]) for r in rows} == expected and len(rows) == 4
    Roller(catalog).roll_table(table, force=True)
    plain = deltalake.DeltaTable(table.location).to_pyarrow_table().to_pylist()
    assert {r["id"]: (r["v"], r["tier"]) for r in plain} == expected and len(plain) == 4

"""Names a Spark read gives a meaning (``_metadata``, ``_tmp_metadata_…``, ``__sp_…``) are no columns.

Refused, naming the column and why, by ``table create``, ``table alter --add-column`` (and SQL's
``ALTER TABLE``), ``CREATE TABLE … AS`` and schema evolution from data (a refused field, its rows
committed without it). A table whose Delta log holds such columns already — written here by delta-rs
straight into the log, past streampart's checks, as a producer's fields could before they were
refused — still reads, in Spark, through ``streampart query`` and through a link to it, with the rows
delta-rs reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.schema import PrimitiveType
from typer.testing import CliRunner

from ingest.chunks import ChunkWriter
from ingest.errors import MalformedChunkError
from ingest.formats import Format
from metastore import storage
from metastore.catalog import Catalog
from metastore.delta.metadata import schema_at
from metastore.errors import UserInputError
from metastore.links import LinkSpec
from metastore.models import Column, Table, TableName, TableSpec, parse_schema, reserved_refusal
from tests.fixtures import make_table
from tests.helpers import jsonl, records
from tests.test_cli import CREATE, assert_user_error, run

TS = "2026-11-21T10:15:00Z"


# -- the rule --------------------------------------------------------------------------------------
# name → whether a column may take it (Spark matches names without regard to case)
NAMES = [
    ("_metadata", False),  # Spark's file-source metadata column
    ("_METADATA", False),
    ("_Metadata", False),
    ("_tmp_metadata_row_index", False),  # Spark's Parquet reader: "a reserved column name"
    ("_TMP_METADATA_anything", False),
    ("__sp_file", False),  # streampart's own read columns (and views)
    ("__SP_path", False),
    ("__sp_", False),
    ("metadata", True),
    ("_metadata_2", True),
    ("file_name", True),  # a field of _metadata, not a top-level name
    ("_sp_file", True),
    ("__sp", True),
    ("_rescued_data", True),  # Databricks Auto Loader's, not Spark's: nothing here gives it a meaning
    ("_corrupt_record", True),  # only Spark's JSON and CSV readers use it; tables are read as Parquet
]


@pytest.mark.parametrize(("name", "allowed"), NAMES)
def test_names_spark_or_streampart_reads_give_a_meaning_are_reserved(name: str, allowed: bool) -> None:
    why = reserved_refusal(name)
    assert (why is None) == allowed, why
    if why is not None:
        assert "choose another name" in why and ("Spark" in why or "streampart" in why)


# -- refused where a column is made ------------------------------------------------------------------
def spec(schema: str, partition_column: str = "") -> TableSpec:
    return TableSpec(
        name=TableName.parse("ns.r"),
        columns=parse_schema(schema),
        time_column="ts",
        partition_column=partition_column,
        roll_every=timedelta(hours=1),
    )


@pytest.mark.parametrize(
    ("schema", "partition_column", "says"),
    [
        (
            "id BIGINT, ts TIMESTAMP, _metadata STRING",
            "",
            "column '_metadata' is reserved: Spark's file sources",
        ),
        ("id BIGINT, ts TIMESTAMP, __SP_file STRING", "", "column '__SP_file' is reserved: streampart"),
        ("id BIGINT, ts TIMESTAMP, _tmp_metadata_row_index BIGINT", "", "Spark's Parquet reader"),
        ("id BIGINT, ts TIMESTAMP", "__sp_task", "partition column '__sp_task' is reserved"),
    ],
)
def test_create_refuses_a_reserved_name_and_makes_nothing(
    catalog: Catalog, schema: str, partition_column: str, says: str
) -> None:
    with pytest.raises(UserInputError) as caught:
        catalog.create_table(spec(schema, partition_column))
    assert says in str(caught.value) and "\n" not in str(caught.value)
    assert catalog.store.find_table(TableName.parse("ns.r")) is None


def test_alter_refuses_a_reserved_name_and_changes_nothing(catalog: Catalog) -> None:
    table = make_table(catalog)
    ChunkWriter(catalog, table).write(records(range(3)), Format.JSONL)
    version = int(DeltaTable(table.location).version())
    for name in ("_metadata", "__sp_file", "_Tmp_Metadata_Row_Index"):
        with pytest.raises(UserInputError) as caught:
            catalog.schemas.alter(table.name, add=[Column(name=name, type="string")])
        assert f"new column name {name!r} is reserved" in str(caught.value)
    # one reserved name among good ones refuses the whole change
    with pytest.raises(UserInputError):
        catalog.schemas.alter(
            table.name, add=[Column(name="ok", type="string"), Column(name="_metadata", type="string")]
        )
    assert int(DeltaTable(table.location).version()) == version
    assert [c.name for c in schema_at(Path(table.location))] == ["id", "ts", "msg"]
    assert catalog.table("ns.events").columns == table.columns


def _content(fmt: Format, rows: list[dict[str, Any]]) -> bytes:
    if fmt is Format.JSONL:
        return jsonl(rows)
    data = pa.Table.from_pylist(rows)
    sink = pa.BufferOutputStream()
    if fmt is Format.CSV:
        pacsv.write_csv(data, sink)
    else:
        pq.write_table(
            data.set_column(1, "ts", pa.array([datetime(2026, 11, 21, 10, 15, tzinfo=UTC)] * len(rows))), sink
        )
    return sink.getvalue().to_pybytes()


EVOLVING_ROWS = [
    {
        "id": i,
        "ts": TS,
        "msg": f"m{i}",
        "_metadata": "x",
        "__sp_file": "y",
        "_TMP_METADATA_ROW_INDEX": 7,
        "ok": i,
    }
    for i in range(3)
]
RESERVED_FIELDS = {"_metadata", "__sp_file", "_TMP_METADATA_ROW_INDEX"}


@pytest.mark.parametrize("fmt", [Format.JSONL, Format.PARQUET])
def test_evolution_from_data_refuses_reserved_fields_and_commits_the_rows_without_them(
    catalog: Catalog, fmt: Format
) -> None:
    """As for any field that cannot be a column: ignored, counted, with the reason; ``ok`` is added."""
    table = catalog.schemas.set_evolution(make_table(catalog), "add-columns")
    result = ChunkWriter(catalog, table).write(_content(fmt, EVOLVING_ROWS), fmt)
    assert set(result.new_columns) == {"ok"}
    assert set(result.refused_fields) == RESERVED_FIELDS
    for name, why in result.refused_fields.items():
        assert why.startswith("a reserved name: ") and "choose another name" in why, (name, why)
    assert result.ignored_fields == dict.fromkeys(RESERVED_FIELDS, 3)
    assert [c.name for c in schema_at(Path(table.location))] == ["id", "ts", "msg", "ok"]
    data = DeltaTable(table.location).to_pyarrow_table()
    assert sorted(data.column("id").to_pylist()) == [0, 1, 2]  # every row landed, without the fields


def test_kafka_staging_on_an_evolving_table_stages_no_reserved_field_as_a_column(sqlite_catalog) -> None:
    """A Kafka task's staging (the row-wise path, where new fields' types are inferred) makes no
    column of a reserved field: it counts it with the ignored fields, as the chunk writer does."""
    from ingest.kafka.staging import stage_records, stage_spec

    table = sqlite_catalog.schemas.set_evolution(make_table(sqlite_catalog), "add-columns")
    values = [json.dumps(r).encode() for r in EVOLVING_ROWS]
    batch = pa.RecordBatch.from_pydict(
        {
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * 3),
            "partition": pa.array([0] * 3, pa.int32()),
            "offset": pa.array(range(3), pa.int64()),
        }
    )
    spec = stage_spec(sqlite_catalog.warehouse, table, "c1", "json", 1 << 20, None)
    out = stage_records(spec, 0, iter([batch])).to_pylist()
    [staged] = [r for r in out if r["path"] is not None]
    assert [c["name"] for c in json.loads(staged["columns"])] == ["id", "ts", "msg", "ok"]
    assert pq.read_table(Path(table.location) / staged["path"]).column_names == ["id", "ts", "msg", "ok"]
    ignored = [json.loads(r["ignored"]) for r in out if r["ignored"] is not None]
    assert ignored == [dict.fromkeys(RESERVED_FIELDS, 3)]


def test_a_csv_header_naming_a_reserved_field_fails_the_chunk_naming_it(catalog: Catalog) -> None:
    """A CSV header that names a field that cannot be a column fails the chunk (as a bad name does)."""
    table = catalog.schemas.set_evolution(make_table(catalog), "add-columns")
    ChunkWriter(catalog, table).write(records(range(2)), Format.JSONL)
    version = int(DeltaTable(table.location).version())
    with pytest.raises(MalformedChunkError) as caught:
        ChunkWriter(catalog, table).write(_content(Format.CSV, EVOLVING_ROWS), Format.CSV)
    said = str(caught.value)
    assert "\n" not in said and all(f"{name!r}: a reserved name" in said for name in RESERVED_FIELDS), said
    assert int(DeltaTable(table.location).version()) == version  # nothing committed, nothing lost
    assert sorted(DeltaTable(table.location).to_pyarrow_table().column("id").to_pylist()) == [0, 1]


@pytest.mark.process
def test_the_cli_refuses_reserved_names_in_one_line_and_keeps_the_table(tmp_path: Path) -> None:
    warehouse = tmp_path / "warehouse"
    made = run(warehouse, "table", "create", "ns.t", *CREATE, "--json")
    assert made.returncode == 0, made.stderr
    refused = run(
        warehouse, "table", "create", "ns.u", "--schema", "id BIGINT, ts TIMESTAMP, _metadata STRING",
        "--time-column", "ts", "--roll-every", "1h",
    )  # fmt: skip
    assert_user_error(refused, "column '_metadata' is reserved", "Spark's file sources")
    refused = run(warehouse, "table", "alter", "ns.t", "--add-column", "__sp_file STRING")
    assert_user_error(refused, "'__sp_file' is reserved", "streampart")
    described = run(warehouse, "table", "describe", "ns.t", "--json").json()
    assert "__sp_file" not in json.dumps(described)
    assert run(warehouse, "table", "describe", "ns.u", "--json").returncode == 1


# -- statements through streampart query ---------------------------------------------------------------
def query(cat: Catalog, sql: str) -> list[dict[str, Any]]:
    """``streampart query SQL --json`` in process (it uses the session's Spark): its rows; a
    StreampartError raises."""
    from streampart.cli import app

    result = CliRunner().invoke(
        app, ["--warehouse", str(cat.warehouse.root), "--metastore", cat.store.url, "query", sql, "--json"]
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


@pytest.mark.spark
def test_create_table_as_and_alter_table_statements_refuse_reserved_names(
    spark, sqlite_catalog: Catalog
) -> None:
    cat = sqlite_catalog
    table = make_table(cat, "ns.src")
    ChunkWriter(cat, table).write(records(range(3)), Format.JSONL)
    for sql, says in [
        (
            "CREATE TABLE ns.x AS SELECT id, ts, msg AS _metadata FROM ns.src",
            "column '_metadata', a reserved name",
        ),
        (
            "CREATE TABLE ns.x AS SELECT id, ts, msg AS __SP_file FROM ns.src",
            "column '__SP_file', a reserved name",
        ),
        ("ALTER TABLE ns.src ADD COLUMNS (_metadata STRING)", "'_metadata' is reserved"),
        ("ALTER TABLE ns.src ADD COLUMN __sp_file STRING", "'__sp_file' is reserved"),
    ]:
        with pytest.raises(UserInputError) as caught:
            query(cat, sql)
        assert says in str(caught.value), (sql, str(caught.value))
    assert cat.store.find_table(TableName.parse("ns.x")) is None
    assert [c.name for c in schema_at(Path(table.location))] == ["id", "ts", "msg"]
    # INSERT … BY NAME into an evolving table, whose new result columns become the table's: refused
    # too, before anything is written
    cat.schemas.set_evolution(table, "add-columns")
    version = int(DeltaTable(table.location).version())
    with pytest.raises(UserInputError) as caught:
        query(cat, "INSERT INTO ns.src BY NAME SELECT id + 10 AS id, ts, msg, msg AS _metadata FROM ns.src")
    assert "column '_metadata', a reserved name" in str(caught.value)
    assert int(DeltaTable(table.location).version()) == version
    assert [c.name for c in schema_at(Path(table.location))] == ["id", "ts", "msg"]


# -- a table whose log holds such columns already still reads ---------------------------------------------
# Added to the log by delta-rs, past streampart's checks; __SP_FILE_ also takes the name the read
# would join on next (its join column must differ from every column but for case).
HELD = {"_metadata": "string", "__sp_file": "string", "__SP_FILE_": "long", "_tmp_metadata_row_index": "long"}


@pytest.fixture(params=["local", pytest.param("bucket", marks=pytest.mark.process)])
def held(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Catalog, Table]]:
    """``ns.events``: ids 0–2 written by streampart; the HELD columns added to its log and ids 3–5
    holding them appended by delta-rs; ids 6–7 written by streampart again (they read those as null).
    And ``other.l``, a link to it."""
    root = request.getfixturevalue("s3_root") if request.param == "bucket" else str(tmp_path / "warehouse")
    cat = Catalog.open(root, f"sqlite:///{tmp_path / 'metastore.sqlite'}")
    table = make_table(cat)
    ChunkWriter(cat, table).write(records(range(3)), Format.JSONL)
    options = storage.delta_options(table.location)
    dt = DeltaTable(table.location, storage_options=options)
    dt.alter.add_columns([Field(n, PrimitiveType(t), nullable=True) for n, t in HELD.items()])
    before = dt.to_pyarrow_table()
    partition = before.column(table.partition_column)[0]
    rows = {
        "id": pa.array([3, 4, 5], pa.int64()),
        "ts": pa.array([datetime(2026, 11, 21, 10, 15, tzinfo=UTC)] * 3, pa.timestamp("us", "UTC")),
        "msg": pa.array(["m3", "m4", "m5"]),
        "_metadata": pa.array(["a", "b", None]),
        "__sp_file": pa.array(["f3", None, "f5"]),
        "__SP_FILE_": pa.array([30, 40, 50], pa.int64()),
        "_tmp_metadata_row_index": pa.array([300, 400, 500], pa.int64()),
        table.partition_column: pa.repeat(partition, 3),
    }
    schema = pa.schema(DeltaTable(table.location, storage_options=options).schema().to_arrow())
    write_deltalake(
        table.location,
        pa.table({f.name: rows[f.name].cast(f.type) for f in schema}, schema=schema),
        mode="append",
        storage_options=options,
    )
    ChunkWriter(cat, table).write(records(range(6, 8)), Format.JSONL)
    cat.links.create(LinkSpec(name=TableName.parse("other.l"), source=table.name, include_streaming=True))
    yield cat, table
    cat.close()


def delta_rs_rows(table: Table) -> list[tuple[Any, ...]]:
    """The table's rows as delta-rs reads them: id, the HELD columns, the partition value (UTC)."""
    data = DeltaTable(
        table.location, storage_options=storage.delta_options(table.location)
    ).to_pyarrow_table()
    assert set(HELD) <= set(data.column_names)
    return sorted(
        (r["id"], *(r[n] for n in HELD), r[table.partition_column].astimezone(UTC)) for r in data.to_pylist()
    )


def spark_rows(frame: Any, table: Table) -> list[tuple[Any, ...]]:
    from streampart.query import from_spark

    return sorted(
        (r["id"], *(r[n] for n in HELD), from_spark(r[table.partition_column])) for r in frame.collect()
    )


@pytest.mark.spark
def test_a_table_whose_log_holds_reserved_columns_reads_as_delta_rs_reads_it(spark, held) -> None:
    from streampart.query import read_table, run_sql

    cat, table = held
    want = delta_rs_rows(table)
    assert [r[0] for r in want] == list(range(8)) and want[3][1:5] == ("a", "f3", 30, 300)
    frame = read_table(spark, cat, "ns.events")
    assert frame.columns == ["id", "ts", "msg", *HELD, table.partition_column]
    assert spark_rows(frame, table) == want
    assert spark_rows(run_sql(spark, cat, "SELECT * FROM ns.events"), table) == want
    assert spark_rows(run_sql(spark, cat, "SELECT * FROM other.l"), table) == want  # a link to it
    picked = run_sql(spark, cat, "SELECT id, _metadata, __sp_file FROM ns.events WHERE _metadata = 'b'")
    assert [tuple(r) for r in picked.collect()] == [(4, "b", None)]


@pytest.mark.spark
def test_streampart_query_reads_a_table_whose_log_holds_reserved_columns(spark, held) -> None:
    cat, table = held
    got = query(cat, "SELECT id, _metadata, __sp_file, __SP_FILE_ FROM ns.events ORDER BY id")
    want = [(r[0], r[1], r[2], r[3]) for r in delta_rs_rows(table)]
    assert [(r["id"], r["_metadata"], r["__sp_file"], r["__SP_FILE_"]) for r in got] == want

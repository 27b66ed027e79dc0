"""Every streampart reader on the schema of the version it pinned (issue 27, plan step 3).

The schema is changed the way a user of another engine changes it: delta-rs'
``DeltaTable.alter.add_columns`` adds a column, a hand-written ``metaData`` commit widens types
(delta-rs cannot), and files carrying the new column or the wider type are appended with
hand-written commits in streampart's own append format. streampart's writers stay on the
metastore's columns, so a chunk committed afterwards lacks the new column. Every answer is
compared with delta-rs, polars and DuckDB (``union_by_name``) over the same version, never with
streampart's own code path.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, Field, write_deltalake
from deltalake.schema import PrimitiveType

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta import append
from metastore.delta.arrow import data_schema
from metastore.delta.files import live_files
from metastore.delta.layout import partition_dir, partition_value_text, staged_dir
from metastore.delta.metadata import current_metadata, metadata_action, schema_at
from metastore.models import Table, parse_column_change, parse_schema, plan_alter
from metastore.snapshots import pin
from scheduler.config import RollConfig
from scheduler.roll import Roller
from streampart.query import run_sql
from streampart.snapshots import read_batches
from streampart.sql_catalog import describe
from tests.fixtures import make_table
from tests.helpers import jsonl, records
from tests.test_cli_chunks import Env, env  # noqa: F401  (the fixture)

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, qty INT, amount DECIMAL(5,2)"
TS = "2026-11-21T10:15:00Z"
TS_US = 1_795_256_100_000_000  # TS in microseconds
NAMES = ["id", "qty", "amount", "coupon"]  # what the answers are compared on (coupon: when present)
OLD_TYPES = {"qty": pa.int32(), "amount": pa.decimal128(5, 2)}
NEW_TYPES = {"qty": pa.int64(), "amount": pa.decimal128(9, 2), "coupon": pa.string()}
# every committed row at the newest version: (id, qty, amount, coupon)
NEWEST = [
    (1, -(2**31), Decimal("-999.99"), None),  # a chunk before any change
    (2, 2**31 - 1, Decimal("999.99"), None),
    (3, 5, Decimal("1.50"), "X"),  # another engine's file with the added column
    (4, -(2**63), Decimal("-9999999.99"), "Y"),  # one in the widened types
    (5, 7, Decimal("0.25"), None),  # a chunk written on the metastore's (old) columns afterwards
]


@dataclass(frozen=True)
class Evolved:
    """A table whose schema changed twice, and the versions around the changes."""

    table: Table
    before: int  # the newest version before any change: the old columns
    added: int  # coupon added, qty and amount not yet widened
    newest: int


def _foreign_file(catalog: Catalog, table: Table, data: pa.Table, key: str) -> int:
    """``data`` committed as one file into the streaming partition, as another engine's writer would."""
    root = Path(table.location)
    part = catalog.store.streaming_partition(table.id).value
    path = f"{staged_dir(table, part)}/{key}.parquet"  # where polars finds the partition value
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, root / path)
    st = (root / path).stat()
    entry = (path, partition_value_text(part), data.num_rows, st.st_size, int(st.st_mtime * 1000))
    body = append.append_actions(table.partition_column, [entry], {"k": key}, int(time.time() * 1000))
    return append.publish(table.location, body, int(DeltaTable(str(root)).version()), 5)


def _widen(table: Table, *changes: str) -> int:
    """A ``metaData``-only commit widening ``changes`` (delta-rs has no command for it)."""
    root = Path(table.location)
    widen = [parse_column_change(c, "--widen-column") for c in changes]
    columns = plan_alter(schema_at(root), table.time_column, table.partition_column, widen=widen)
    action = metadata_action(current_metadata(root), columns, table.partition_column)
    info = {"timestamp": int(time.time() * 1000), "operation": "CHANGE COLUMN", "operationParameters": {}}
    body = "".join(json.dumps(a) + "\n" for a in ({"commitInfo": info}, {"metaData": action}))
    return append.publish(table.location, body.encode(), int(DeltaTable(str(root)).version()), 5)


def _file(rows: list[tuple[Any, ...]], types: dict[str, pa.DataType]) -> pa.Table:
    """A data file's rows (id, qty, amount, coupon) in ``types``."""
    fields = [("id", pa.int64()), ("ts", pa.timestamp("us", tz="UTC")), ("msg", pa.string())]
    fields += [(n, types[n]) for n in ("qty", "amount", "coupon")]
    columns = {
        "id": [r[0] for r in rows],
        "ts": [TS_US] * len(rows),
        "msg": [f"m{r[0]}" for r in rows],
        "qty": [r[1] for r in rows],
        "amount": [r[2] for r in rows],
        "coupon": [r[3] for r in rows],
    }
    return pa.table(columns, schema=pa.schema(fields))


def _chunk(catalog: Catalog, table: Table, rows: list[tuple[Any, ...]]) -> int:
    records = [{"id": i, "ts": TS, "msg": f"m{i}", "qty": q, "amount": str(a)} for i, q, a, _ in rows]
    ChunkWriter(catalog, table).write(jsonl(records), Format.JSONL)
    return int(DeltaTable(table.location).version())


def evolved_table(catalog: Catalog, name: str = "ns.t") -> Evolved:
    table = make_table(catalog, name, schema=SCHEMA)
    before = _chunk(catalog, table, NEWEST[:2])
    DeltaTable(table.location).alter.add_columns(Field("coupon", PrimitiveType("string"), nullable=True))
    added = _foreign_file(catalog, table, _file(NEWEST[2:3], {**OLD_TYPES, "coupon": pa.string()}), "x")
    _widen(table, "qty BIGINT", "amount DECIMAL(9,2)")
    _foreign_file(catalog, table, _file(NEWEST[3:4], NEW_TYPES), "y")
    newest = _chunk(catalog, table, NEWEST[4:])
    assert (before, added, newest) == (1, 3, 6)
    return Evolved(table, before, added, newest)


def _rows(data: pa.Table | pl.DataFrame) -> list[tuple[Any, ...]]:
    if isinstance(data, pl.DataFrame):
        data = data.to_arrow()
    names = [n for n in NAMES if n in data.column_names]
    return sorted(zip(*(data.column(n).to_pylist() for n in names), strict=True))


def by_delta_rs(table: Table, version: int) -> pa.Table:
    return DeltaTable(table.location, version=version).to_pyarrow_table()


def by_polars(table: Table, version: int) -> list[tuple[Any, ...]]:
    return _rows(pl.read_delta(table.location, version=version))


def by_duckdb(table: Table, version: int) -> tuple[list[str], list[tuple[Any, ...]]]:
    """DuckDB over the version's files, by name: its column names and rows (id, qty, amount, coupon)."""
    files = [u.removeprefix("file://") for u in DeltaTable(table.location, version=version).file_uris()]
    with duckdb.connect() as con:
        rel = con.execute("SELECT * FROM read_parquet($files, union_by_name = true)", {"files": files})
        names = [d[0] for d in rel.description]
        got = [dict(zip(names, r, strict=True)) for r in rel.fetchall()]
    wanted = [n for n in NAMES if n in names]
    return names, sorted(tuple(r[n] for n in wanted) for r in got)


def _ours(catalog: Catalog, table: Table, version: int | None) -> pa.Table:
    return pa.Table.from_batches(list(read_batches(pin(catalog, table, version))))


def test_table_read_shows_each_version_in_its_own_columns(env: Env) -> None:  # noqa: F811
    catalog = env.catalog
    e = evolved_table(catalog)
    table = e.table
    expected = {v: _rows(by_delta_rs(table, v)) for v in (e.before, e.added, e.newest)}
    assert expected[e.newest] == NEWEST  # the independent readers agree with what was written
    for v in (e.before, e.added, e.newest):
        assert by_polars(table, v) == expected[v]
        assert by_duckdb(table, v)[1] == expected[v]

    newest = _ours(catalog, table, None)
    assert newest.schema == data_schema(schema_at(Path(table.location))).append(
        pa.field("ts_period", pa.timestamp("us", tz="UTC"), nullable=False)
    )
    assert newest.schema.field("qty").type == pa.int64() and "coupon" in newest.column_names
    assert _rows(newest) == NEWEST
    # time travel: the columns and types of then, not today's
    old = _ours(catalog, table, e.before)
    assert old.column_names == ["id", "ts", "msg", "qty", "amount", "ts_period"]
    assert old.schema.field("qty").type == pa.int32()
    assert _rows(old) == expected[e.before]
    added = _ours(catalog, table, e.added)
    assert [added.schema.field(n).type for n in ("qty", "amount", "coupon")] == [
        pa.int32(),
        pa.decimal128(5, 2),
        pa.string(),
    ]
    assert _rows(added) == expected[e.added]
    assert pin(catalog, table, e.before).columns == parse_schema(SCHEMA) == table.columns

    # the CLI: every row, with the columns of the version read
    code, out = env.cli("table", "read", "ns.t", "--json")
    assert code == 0, out
    lines = [json.loads(line) for line in out.splitlines()]
    assert list(lines[0]) == ["id", "ts", "msg", "qty", "amount", "coupon", "ts_period"]
    assert sorted((r["id"], r["qty"], r["coupon"]) for r in lines) == [(r[0], r[1], r[3]) for r in NEWEST]
    code, out = env.cli("table", "read", "ns.t", "--version", str(e.before), "--json")
    assert code == 0, out
    assert {tuple(json.loads(line)) for line in out.splitlines()} == {
        ("id", "ts", "msg", "qty", "amount", "ts_period")
    }
    code, out = env.cli("table", "read", "ns.t", "--version", str(e.before))  # the text grid
    assert code == 0 and "coupon" not in out, out


def test_describe_on_the_sql_server_lists_the_log_s_columns(catalog: Catalog) -> None:
    e = evolved_table(catalog)
    sql = describe(catalog, "ns.t", None, lambda _: True)
    assert "('qty', 'bigint', '')" in sql and "('amount', 'decimal(9,2)', '')" in sql
    assert sql.index("('amount'") < sql.index("('coupon', 'string', '')") < sql.index("('ts_period'")
    assert e.table.columns == parse_schema(SCHEMA)  # the metastore still has the old ones


@pytest.mark.parametrize("engine", ["local", pytest.param("spark", marks=pytest.mark.spark)])
def test_the_roll_keeps_every_row_in_the_newest_columns(
    request: pytest.FixtureRequest, sqlite_catalog: Catalog, engine: str
) -> None:
    catalog = sqlite_catalog
    e = evolved_table(catalog)
    table = e.table
    value = catalog.store.streaming_partition(table.id).value
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    roller = Roller(catalog, RollConfig(engine=engine), spark=(lambda _: spark) if spark else None)
    [result] = roller.roll_table(table, force=True)
    assert (result.rows, result.files_before, result.files_after) == (5, 4, 1)

    # the standard partition read as plain Parquet, by pyarrow and by DuckDB without union_by_name
    directory = Path(table.location) / partition_dir(table, value)
    plain = pq.read_table(directory)
    assert plain.schema.field("qty").type == pa.int64()
    assert plain.schema.field("amount").type == pa.decimal128(9, 2)
    assert plain.schema.field("coupon").type == pa.string()
    assert _rows(plain) == NEWEST
    with duckdb.connect() as con:
        got = con.execute(f"SELECT id, qty, amount, coupon FROM read_parquet('{directory}/*.parquet')")
        assert sorted(got.fetchall()) == NEWEST
    # and through the log, by the independent readers and by streampart
    newest = int(DeltaTable(table.location).version())
    assert all(not f.staged for f in live_files(catalog.warehouse.load(table)))
    assert _rows(by_delta_rs(table, newest)) == NEWEST == by_polars(table, newest)
    assert _rows(_ours(catalog, table, None)) == NEWEST


def test_a_polars_frame_appended_by_delta_rs_with_a_new_column_reads_and_rolls(
    sqlite_catalog: Catalog,
) -> None:
    """delta-rs' own schema merge on append: the new column and its file in one commit, the file
    holding its strings as ``string_view`` (polars' layout), outside ``_staging``."""
    catalog = sqlite_catalog
    table = make_table(catalog, "ns.t")
    ChunkWriter(catalog, table).write(records(range(3)), Format.JSONL)
    part = catalog.store.streaming_partition(table.id).value
    utc = pl.Datetime("us", "UTC")
    frame = pl.DataFrame({"id": [10], "ts": [part], "msg": ["x"], "ts_period": [part], "coupon": ["C"]})
    frame = frame.with_columns(pl.col("ts").cast(utc), pl.col("ts_period").cast(utc))
    write_deltalake(table.location, frame, mode="append", schema_mode="merge")
    newest = int(DeltaTable(table.location).version())
    expected = [(0, None), (1, None), (2, None), (10, "C")]

    def ours() -> list[tuple[Any, ...]]:
        data = _ours(catalog, table, None)
        return sorted(zip(data.column("id").to_pylist(), data.column("coupon").to_pylist(), strict=True))

    got = by_delta_rs(table, newest)
    assert (
        sorted(zip(got.column("id").to_pylist(), got.column("coupon").to_pylist(), strict=True)) == expected
    )
    assert ours() == expected
    [result] = Roller(catalog).roll_table(table, force=True)
    assert result.rows == 4
    # the compacted file (delta-rs wrote its own into the directory the roll writes to: it stays
    # there, out of the log, and a plain-Parquet read of the directory sees its row twice)
    [compacted] = [f for f in live_files(catalog.warehouse.load(table)) if f.partition == part]
    plain = pq.read_table(Path(table.location) / compacted.path)
    assert plain.schema.field("coupon").type == pa.string()
    assert (
        sorted(zip(plain.column("id").to_pylist(), plain.column("coupon").to_pylist(), strict=True))
        == expected
    )
    assert ours() == expected
    rolled = pl.read_delta(table.location).sort("id")
    assert list(zip(rolled["id"].to_list(), rolled["coupon"].to_list(), strict=True)) == expected


@pytest.mark.spark
def test_spark_queries_read_each_version_in_its_own_columns(spark: Any, sqlite_catalog: Catalog) -> None:
    catalog = sqlite_catalog
    e = evolved_table(catalog)
    table = e.table

    def rows(sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
        df = run_sql(spark, catalog, sql)
        return df.columns, sorted(tuple(r) for r in df.collect())

    names, got = rows("SELECT id, qty, amount, coupon FROM ns.t")
    assert got == _rows(by_delta_rs(table, e.newest)) == NEWEST
    df = run_sql(spark, catalog, "SELECT * FROM ns.t")
    assert [f.dataType.simpleString() for f in df.schema.fields] == [
        "bigint", "timestamp", "string", "bigint", "decimal(9,2)", "string", "timestamp",
    ]  # fmt: skip
    # time travel: the columns of then; coupon did not exist
    names, got = rows(f"SELECT * FROM ns.t VERSION AS OF {e.before}")
    assert names == ["id", "ts", "msg", "qty", "amount", "ts_period"]
    assert [(r[0], r[3], r[4]) for r in got] == _rows(by_delta_rs(table, e.before))
    duck_names, duck = by_duckdb(table, e.added)
    assert "coupon" in duck_names
    names, got = rows(f"SELECT id, qty, amount, coupon FROM ns.t VERSION AS OF {e.added}")
    assert got == duck == by_polars(table, e.added)
    # aggregates over old and new files, exact in the widened types
    sql = "SELECT min(qty) AS lo, max(qty) AS hi, sum(amount) AS total FROM ns.t"
    agg = run_sql(spark, catalog, sql).collect()[0]
    assert (agg["lo"], agg["hi"], agg["total"]) == (-(2**63), 2**31 - 1, sum(r[2] for r in NEWEST))

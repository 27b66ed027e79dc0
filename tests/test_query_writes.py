"""``streampart query`` writing: INSERT INTO … SELECT and CREATE TABLE … AS SELECT (issue 11, item 4).

In process through typer's ``CliRunner`` with the session's one SparkSession (``spark``: the
command's own ``spark_session`` finds it), on SQLite and PostgreSQL metastores (``catalog``).
Each result is checked with delta-rs on the table's directory (an independent reader), and
against the metastore's chunk records: one chunk per idempotency key, whatever the retries.
"""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ingest.chunks import ChunkWriter
from ingest.errors import IdempotencyConflictError
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.errors import (
    AlreadyExistsError,
    IsolationError,
    NotFoundError,
    ReadOnlyLinkError,
    UserInputError,
)
from metastore.links import LinkSpec
from metastore.models import ChunkState, Mode, TableName
from streampart.cli import app
from streampart.errors import QueryRefusedError
from tests.fixtures import make_table
from tests.helpers import ROOT, all_ids, delta_rows, records
from tests.test_cli import COMMAND


def query(cat: Catalog, sql: str, *args: str) -> dict[str, Any]:
    """``streampart query SQL --json ARGS`` in process: its one JSON result (a StreampartError raises)."""
    result = CliRunner().invoke(
        app,
        ["--warehouse", str(cat.warehouse.root), "--metastore", cat.store.url, "query", sql, "--json", *args],
    )
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout.splitlines()[-1])


def selected(cat: Catalog, sql: str) -> list[dict[str, Any]]:
    """``streampart query SQL --json`` (a SELECT) in process: its rows, one JSON object each."""
    got = CliRunner().invoke(
        app, ["--warehouse", str(cat.warehouse.root), "--metastore", cat.store.url, "query", sql, "--json"]
    )
    assert got.exit_code == 0, got.output
    return [json.loads(line) for line in got.stdout.splitlines() if line.startswith("{")]


def chunks_of(cat: Catalog, name: str) -> list[Any]:
    return [c for c in cat.store.list_chunks(cat.table(name).id) if c.state is ChunkState.COMMITTED]


@pytest.fixture
def source(catalog: Catalog) -> Catalog:
    """``ns.src`` holding ids 0–9, and an empty ``ns.dst`` of the same schema."""
    ChunkWriter(catalog, make_table(catalog, "ns.src")).write(records(range(10)), Format.JSONL)
    make_table(catalog, "ns.dst")
    return catalog


def test_insert_into_commits_the_result_once_per_key(spark, source: Catalog) -> None:
    cat = source
    sql = "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src WHERE id < 5"
    first = query(cat, sql, "--idempotency-key", "k1")
    dst = cat.table("ns.dst")
    assert first["table"] == "ns.dst" and first["rows"] == 5 and first["idempotency_key"] == "k1"
    assert first["version"] == 1 and first["created"] is False and first["cluster"] == "default"
    assert sorted(all_ids(dst)) == [0, 1, 2, 3, 4]
    # the same statement and key (any alias of the option): the first run's answer, nothing added
    assert query(cat, sql, "--key", "k1") == first
    assert query(cat, sql, "--token", "k1") == first
    assert sorted(all_ids(dst)) == [0, 1, 2, 3, 4] and len(chunks_of(cat, "ns.dst")) == 1
    # the same key, another result: the chunk protocol's conflict, nothing written
    with pytest.raises(IdempotencyConflictError, match=r"idempotency key 'k1' of table ns\.dst was used"):
        query(cat, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src WHERE id >= 5", "--key", "k1")
    assert sorted(all_ids(dst)) == [0, 1, 2, 3, 4]
    # without a key: each run is a chunk of its own, under a key of its own
    a = query(cat, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src WHERE id >= 8")
    b = query(cat, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src WHERE id >= 8")
    assert a["chunk"] != b["chunk"] and a["idempotency_key"] != b["idempotency_key"]
    assert sorted(all_ids(dst)) == [0, 1, 2, 3, 4, 8, 8, 9, 9] and len(chunks_of(cat, "ns.dst")) == 3


def test_a_retry_recognises_the_same_rows_in_another_order(spark, source: Catalog) -> None:
    # Spark hands rows over in whatever order its tasks finish; the chunk is the same rows
    cat = source
    up = query(cat, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src ORDER BY id", "--key", "k")
    down = query(cat, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src ORDER BY id DESC", "--key", "k")
    assert up == down and sorted(all_ids(cat.table("ns.dst"))) == list(range(10))


def test_insert_matches_columns_as_spark_does_and_names_what_does_not_fit(spark, source: Catalog) -> None:
    cat = source
    # by position (Spark's and Hive's INSERT INTO): the result's names do not matter
    got = query(cat, "INSERT INTO ns.dst SELECT id + 10000, ts, upper(msg) FROM ns.src WHERE id = 1")
    assert got["rows"] == 1 and all_ids(cat.table("ns.dst")) == [10001]
    # a column list: the result's columns are those, in that order; the ones left out are NULL
    query(cat, "INSERT INTO ns.dst (ts, id) SELECT ts, id + 200 FROM ns.src WHERE id = 2")
    # BY NAME: by the result's own names, in any order and case
    query(cat, "INSERT INTO NS.Dst BY NAME SELECT msg, TS, id + 100 AS id FROM ns.src WHERE id = 1")
    assert all_ids(cat.table("ns.dst")) == [101, 202, 10001]
    rows = {r["id"]: r["msg"] for r in delta_rows(cat.table("ns.dst"), columns="id, msg").to_pylist()}
    assert rows[202] is None and rows[10001] == "M1", rows
    bad = [
        ("SELECT id, ts FROM ns.src", "the query's result has 2 column(s) and the table 3"),
        ("SELECT id, ts, msg, 1 AS extra FROM ns.src", "has 4 column(s) and the table 3"),
        ("SELECT CAST(id AS STRING), ts, msg FROM ns.src", "its column id is STRING, the table's is BIGINT"),
        ("SELECT * FROM ns.src", "SELECT * EXCEPT (ts_period)"),
        ("SELECT id, ts, array(1) FROM ns.src", "column msg of the query's result is ARRAY<INT>"),
        ("(id, ts) SELECT id FROM ns.src", "the query's result has 1 column(s) for 2 listed"),
        ("(id, nope) SELECT id, ts FROM ns.src", "it has no column nope"),
        ("BY NAME SELECT id, ts, msg, 1 AS extra FROM ns.src", "it has no column extra"),
        ("BY NAME SELECT id, ts, msg AS id FROM ns.src", "column id is given twice"),
    ]
    for select, says in bad:
        with pytest.raises(UserInputError, match=None) as caught:
            query(cat, f"INSERT INTO ns.dst {select}")
        assert says in str(caught.value), (select, str(caught.value))
    assert all_ids(cat.table("ns.dst")) == [101, 202, 10001]  # nothing of any of them was written


def test_insert_goes_through_the_chunk_protocol(spark, catalog: Catalog) -> None:
    # an event-time table: rows go to their own partitions, late rows follow the table's policy
    make_table(catalog, "ns.src")
    ChunkWriter(catalog, catalog.table("ns.src")).write(
        records(range(3), "2026-11-21T10:15:00Z") + records(range(3, 5), "2026-11-21T12:15:00Z"), Format.JSONL
    )
    make_table(catalog, "ns.ev", mode=Mode.EVENT_TIME, roll_every="1h", max_age="1000d")
    got = query(catalog, "INSERT INTO ns.ev SELECT id, ts, msg FROM ns.src", "--key", "ev")
    assert got["partitions"] == ["2026-11-21T10:00:00Z", "2026-11-21T12:00:00Z"] and got["rows"] == 5


def test_create_table_as_select_makes_a_streaming_table_once_per_key(spark, source: Catalog) -> None:
    cat = source
    sql = "CREATE TABLE ns.copy AS SELECT id * 2 AS id, msg, ts FROM ns.src WHERE id < 4"
    first = query(cat, sql, "--key", "c1")
    copy = cat.table("ns.copy")
    assert first["created"] is True and first["rows"] == 4 and first["table"] == "ns.copy"
    # defaults: the first TIMESTAMP column, hourly, arrival mode; the result's own schema
    assert (copy.time_column, copy.roll_every.total_seconds(), copy.mode) == ("ts", 3600, Mode.ARRIVAL)
    assert [(c.name, c.type) for c in copy.columns] == [
        ("id", "long"),
        ("msg", "string"),
        ("ts", "timestamp"),
    ]
    assert sorted(all_ids(copy)) == [0, 2, 4, 6]
    assert query(cat, sql, "--key", "c1") == first  # a retry after success: the same answer
    assert len(chunks_of(cat, "ns.copy")) == 1 and sorted(all_ids(copy)) == [0, 2, 4, 6]
    with pytest.raises(IdempotencyConflictError):
        query(cat, "CREATE TABLE ns.copy AS SELECT id, msg, ts FROM ns.src", "--key", "c1")
    # another statement (another key, or none) may not take the name
    with pytest.raises(AlreadyExistsError, match=r"table ns\.copy exists already: INSERT INTO it"):
        query(cat, sql, "--key", "c2")
    with pytest.raises(AlreadyExistsError, match="exists already"):
        query(cat, "CREATE TABLE ns.src AS SELECT id, msg, ts FROM ns.src")
    assert sorted(all_ids(copy)) == [0, 2, 4, 6]


def test_create_table_as_takes_table_properties(spark, source: Catalog) -> None:
    cat = source
    query(
        cat,
        "CREATE TABLE ns.ev TBLPROPERTIES ('time_column' = 'at', 'roll_every' = '15m', "
        "'mode' = 'event-time', 'max_age' = '1000d', 'dead_letter' = 'true', 'cluster_by' = 'ID') "
        "AS SELECT id, ts AS at, ts AS also FROM ns.src",
    )
    ev = cat.table("ns.ev")
    assert ev.cluster_by == ("id",)
    assert (ev.time_column, ev.roll_every.total_seconds(), ev.mode, ev.dead_letter) == (
        "at",
        900,
        Mode.EVENT_TIME,
        True,
    )
    assert ev.partition_column == "at_period" and cat.table("ns.ev__dead_letter").dead_letter is False
    bad = [
        ("CREATE TABLE ns.x TBLPROPERTIES ('colour' = 'red') AS SELECT ts FROM ns.src", UserInputError,
         "unknown table property 'colour'; known: time_column, roll_every"),
        ("CREATE TABLE ns.x TBLPROPERTIES ('mode' = 'fast') AS SELECT ts FROM ns.src", UserInputError,
         "TBLPROPERTIES 'mode' must be one of arrival, event-time"),
        ("CREATE TABLE ns.x TBLPROPERTIES ('roll_every' = 'soon') AS SELECT ts FROM ns.src", UserInputError,
         "TBLPROPERTIES 'roll_every'"),
        ("CREATE TABLE ns.x TBLPROPERTIES ('cluster_by' = 'nope') AS SELECT ts FROM ns.src", UserInputError,
         "TBLPROPERTIES 'cluster_by': 'nope' is not a column"),
        ("CREATE TABLE ns.x TBLPROPERTIES ('primary_key' = 'id', 'history' = 'yes') AS SELECT id, ts "
         "FROM ns.src", UserInputError, "TBLPROPERTIES 'history' is true or false, not 'yes'"),
        ("CREATE TABLE ns.x AS SELECT id FROM ns.src", UserInputError, "no TIMESTAMP column"),
        ("CREATE TABLE ns.x AS SELECT * FROM ns.src", UserInputError, "SELECT * EXCEPT (ts_period)"),
        ("CREATE TABLE ns.x TBLPROPERTIES ('time_column' = 'id') AS SELECT id, ts FROM ns.src",
         UserInputError, "must be TIMESTAMP"),
        ("CREATE TABLE ns.x USING parquet AS SELECT ts FROM ns.src", QueryRefusedError, "TBLPROPERTIES"),
        ("CREATE TABLE ns.x (ts TIMESTAMP)", QueryRefusedError, "streampart table create"),
        ("CREATE OR REPLACE TABLE ns.src AS SELECT ts FROM ns.src", QueryRefusedError, "never replaced"),
        ("CREATE TABLE IF NOT EXISTS ns.x AS SELECT ts FROM ns.src", QueryRefusedError, "idempotency key"),
    ]  # fmt: skip
    for sql, error, says in bad:
        with pytest.raises(error) as caught:
            query(cat, sql)
        assert says in str(caught.value), (sql, str(caught.value))
    assert cat.store.find_table(TableName.parse("ns.x")) is None  # nothing was made by any of them


def test_other_statements_stay_refused(spark, source: Catalog) -> None:
    refused = [
        ("INSERT OVERWRITE ns.dst SELECT id, ts, msg FROM ns.src", "INSERT OVERWRITE"),
        ("DELETE FROM ns.dst", "only queries"),
        ("DROP TABLE ns.dst", "only queries"),
        ("UPDATE ns.dst SET msg = 'x'", "only queries"),
        ("INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src; SELECT 1", "exactly one SQL statement"),
    ]
    # VALUES inserts by position too, as in Spark
    got = query(source, "INSERT INTO ns.dst VALUES (7, TIMESTAMP'2026-11-21 10:00:00', 'a')")
    assert got["rows"] == 1 and 7 in all_ids(source.table("ns.dst"))
    for sql, says in refused:
        with pytest.raises(UserInputError) as caught:
            query(source, sql)
        assert says in str(caught.value), (sql, str(caught.value))
    with pytest.raises(UserInputError, match="this statement only reads"):
        query(source, "SELECT 1", "--key", "k")


def test_writes_follow_the_rules_of_links_companions_and_isolation(spark, catalog: Catalog) -> None:
    make_table(catalog, "b.t")
    ChunkWriter(catalog, catalog.table("b.t")).write(records(range(3)), Format.JSONL)
    catalog.links.create(
        LinkSpec(name=TableName.parse("a.l"), source=TableName.parse("b.t"), include_streaming=True)
    )
    make_table(catalog, "a.own", dead_letter=True)
    with pytest.raises(ReadOnlyLinkError, match=r"a\.l is a link"):
        query(catalog, "INSERT INTO a.l SELECT id, ts, msg FROM b.t")
    with pytest.raises(ReadOnlyLinkError, match="links are read-only"):
        query(catalog, "INSERT INTO t@b SELECT id, ts, msg FROM b.t", "--namespace", "a")
    with pytest.raises(NotFoundError, match=r"ns\.nope does not exist"):
        query(catalog, "INSERT INTO ns.nope SELECT id, ts, msg FROM b.t")
    # inside a namespace, T names its own table; an isolated namespace writes only its own
    got = query(catalog, "USE a; INSERT INTO own SELECT id, ts, msg FROM l")
    assert got["table"] == "a.own" and got["rows"] == 3
    _isolate(catalog, "a")
    with pytest.raises(
        IsolationError, match="namespace a is isolated: its statements write its own tables only"
    ):
        query(catalog, "INSERT INTO b.t SELECT id, ts, msg FROM l", "--namespace", "a")
    with pytest.raises(IsolationError, match="namespace a is isolated"):
        query(catalog, "CREATE TABLE b.new AS SELECT id, ts FROM l", "--namespace", "a")
    made = query(catalog, "CREATE TABLE mine AS SELECT id, ts FROM l", "--namespace", "a")
    assert made["table"] == "a.mine"
    # a companion table is a table: written as `streampart write` writes it
    assert query(catalog, "INSERT INTO a.own SELECT id, ts, msg FROM a.own")["table"] == "a.own"


def _isolate(catalog: Catalog, namespace: str) -> None:
    from typer.testing import CliRunner as Runner

    result = Runner().invoke(
        app,
        ["--warehouse", str(catalog.warehouse.root), "--metastore", catalog.store.url, "namespace", "alter",
         namespace, "--isolated"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output


def test_an_empty_result_commits_nothing(spark, source: Catalog) -> None:
    got = query(source, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src WHERE id < 0", "--key", "e")
    assert got["chunk"] == "" and got["rows"] == 0 and chunks_of(source, "ns.dst") == []
    # CREATE TABLE … AS over an empty result makes the table without rows, once per key
    sql = "CREATE TABLE ns.none AS SELECT id, ts FROM ns.src WHERE id < 0"
    made = query(source, sql, "--key", "n")
    assert made["created"] is True and made["rows"] == 0 and all_ids(source.table("ns.none")) == []
    assert query(source, sql, "--key", "n") == made
    with pytest.raises(IdempotencyConflictError, match="from an empty result"):
        query(source, "CREATE TABLE ns.none AS SELECT id, ts FROM ns.src", "--key", "n")


# Where a `streampart query "CREATE TABLE … AS SELECT …" --key K` process dies, what it leaves,
# and what its retry (same statement, same key) must do: finish, with the rows exactly once.
CTAS_CRASHES = [
    # recorded in the metastore (with its first chunk reserved), no Delta log: the retry drops
    # the half-made record and makes the table afresh
    "table-before-log",
    # table and Delta log made, first chunk reserved, nothing staged: the retry finds its own
    # chunk (the key proves the table is this statement's) and commits the result
    "ctas-after-create",
    # the result committed to the Delta log, the metastore not told: the retry finds the commit
    # once the dead attempt may be taken over, and adds nothing
    "chunk-after-delta-commit",
]


@pytest.mark.parametrize("point", CTAS_CRASHES)
def test_create_table_as_killed_at_each_step_then_retried_lands_once(
    spark, source: Catalog, point: str
) -> None:
    import os

    from metastore import clock

    cat = source
    sql = "CREATE TABLE ns.made AS SELECT id, msg, ts FROM ns.src"
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    proc = subprocess.run(
        [*COMMAND, "--warehouse", str(cat.warehouse.root), "--metastore", cat.store.url, "query", sql,
         "--key", "K", "--json"],
        env={**env, "STREAMPART_CRASHPOINT": point, "PYTHONPATH": str(ROOT)},
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert proc.stdout == ""  # nothing was acknowledged
    made = cat.store.find_table(TableName.parse("ns.made"))
    assert made is not None  # the record (and the first chunk under K) came first
    chunk = cat.store.find_chunk_by_key(made.id, "K")
    assert chunk is not None
    log = Path(made.location) / "_delta_log"
    if point == "table-before-log":
        assert not log.exists()
    elif point == "ctas-after-create":
        assert chunk.state is ChunkState.RESERVED and all_ids(made) == []
    else:
        assert chunk.state is ChunkState.COMMITTING and sorted(all_ids(made)) == list(range(10))
    # another statement may not take the half-made table …
    if point != "table-before-log":
        with pytest.raises(AlreadyExistsError):
            query(cat, sql, "--key", "other")
    # … its own retry finishes it (past the dead attempt's takeover deadline, where it matters)
    with clock.use(clock.SystemClock(offset=2 * cat_commit_timeout())):
        got = query(cat, sql, "--key", "K")
    table = cat.table("ns.made")
    assert got["created"] is True and got["rows"] == 10
    assert sorted(all_ids(table)) == list(range(10))  # exactly once
    assert [c.idempotency_key for c in chunks_of(cat, "ns.made")] == ["K"]
    assert query(cat, sql, "--key", "K") == got


def cat_commit_timeout() -> Any:
    from ingest.config import ChunkConfig

    return ChunkConfig().commit_timeout


def test_a_writing_statement_is_split_into_its_query_and_its_output(sqlite_catalog: Catalog) -> None:
    from streampart.query import catalog_resolver, prepare, rewrite

    make_table(sqlite_catalog, "ns.src")
    resolve = catalog_resolver(sqlite_catalog)
    got = prepare(
        "WITH a AS (SELECT * FROM ns.src) INSERT INTO ns.dst WITH b AS (SELECT 1 AS x) SELECT * FROM a, b",
        resolve,
    )
    assert got.output is not None and (got.output.name, got.output.create) == ("ns.dst", False)
    assert got.text.startswith("WITH a AS (SELECT * FROM ns.src) INSERT INTO")  # Spark reads it as written
    assert [r.name for r in got.refs] == ["ns.src"]  # the table written is not read
    got = prepare("CREATE TABLE dst TBLPROPERTIES ('mode' = 'arrival') AS SELECT ts FROM ns.src", resolve)
    assert got.output is not None and got.output.properties == (("mode", "arrival"),) and got.output.create
    with pytest.raises(UserInputError, match="writes a table"):
        rewrite("INSERT INTO ns.dst SELECT * FROM ns.src", resolve)  # the read-only entry point


def test_insert_by_name_brings_new_columns_to_an_evolving_table(spark, source: Catalog) -> None:
    """Schema evolution from data (issue 27) through INSERT: a BY NAME result's columns the table
    lacks become columns, in its types; a wider type widens under add-and-widen; CTAS takes the
    settings as TBLPROPERTIES."""
    cat = source
    cat.schemas.set_evolution("ns.dst", "add-and-widen")
    query(cat, "INSERT INTO ns.dst SELECT id, ts, msg FROM ns.src WHERE id = 0")
    got = query(
        cat,
        "INSERT INTO ns.dst BY NAME SELECT id, ts, 'c' || id AS coupon, CAST(id AS INT) AS n "
        "FROM ns.src WHERE id = 1",
    )
    assert got["rows"] == 1
    dst = cat.table("ns.dst")
    assert [(c.name, c.type) for c in dst.columns][3:] == [("coupon", "string"), ("n", "integer")]
    query(
        cat,
        "INSERT INTO ns.dst BY NAME SELECT id, ts, CAST(id AS BIGINT) * 10000000000 AS n "
        "FROM ns.src WHERE id = 2",
    )
    assert cat.table("ns.dst").columns[-1].type == "long"
    found = {
        r["id"]: (r["coupon"], r["n"])
        for r in delta_rows(cat.table("ns.dst"), columns="id, coupon, n").to_pylist()
    }
    assert found == {0: (None, None), 1: ("c1", 1), 2: (None, 20_000_000_000)}
    with pytest.raises(UserInputError, match="BY NAME … match otherwise, and bring new columns"):
        query(cat, "INSERT INTO ns.dst SELECT id, ts, msg, 1, 2, 3 FROM ns.src")
    made = query(
        cat,
        "CREATE TABLE ns.made TBLPROPERTIES ('schema_evolution' = 'add-columns', 'max_new_columns' = '5') "
        "AS SELECT id, ts FROM ns.src",
    )
    assert made["created"] is True
    table = cat.table("ns.made")
    assert table.schema_evolution.value == "add-columns" and table.max_new_columns == 5


def test_a_select_after_an_alter_in_sql_reads_the_new_column_and_the_widened_type(
    spark, source: Catalog
) -> None:
    """Issue 27: ALTER TABLE in ``streampart query`` (no Spark), then a SELECT through Spark: old rows
    read NULL in the new column, the new row its value."""
    cat = source
    query(cat, "ALTER TABLE ns.src ADD COLUMNS (coupon STRING)")
    ChunkWriter(cat, cat.table("ns.src")).write(
        b'{"id": 100, "ts": "2026-11-21T10:15:00Z", "msg": "m", "coupon": "X"}\n', Format.JSONL
    )
    rows = selected(cat, "SELECT id, coupon FROM ns.src WHERE id IN (1, 100) ORDER BY id")
    assert rows == [{"id": 1, "coupon": None}, {"id": 100, "coupon": "X"}]


def test_a_link_shows_the_columns_its_sources_data_added(spark, catalog: Catalog) -> None:
    """Issue 27: a link reads its source's snapshot, so columns the source's data added since the link
    was made show through it (old rows NULL)."""
    source = catalog.schemas.set_evolution(make_table(catalog, "b.t"), "add-columns")
    ChunkWriter(catalog, source).write(records(range(2)), Format.JSONL)
    catalog.links.create(
        LinkSpec(name=TableName.parse("a.l"), source=TableName.parse("b.t"), include_streaming=True)
    )
    ChunkWriter(catalog, source).write(
        b'{"id": 7, "ts": "2026-11-21T10:15:00Z", "msg": "m", "coupon": "X"}\n', Format.JSONL
    )
    rows = selected(catalog, "SELECT id, coupon FROM a.l ORDER BY id")
    assert rows == [{"id": 0, "coupon": None}, {"id": 1, "coupon": None}, {"id": 7, "coupon": "X"}]

"""Snapshot reads through Spark (invariant 3) and agreement with an independent Delta reader."""

from __future__ import annotations

import re

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.errors import NotFoundError, StreampartError, UserInputError
from scheduler.roll import Roller
from streampart.errors import QueryError
from streampart.query import Resolver, catalog_resolver, read_table, rewrite, run_sql
from tests.fixtures import make_table
from tests.helpers import delta_rows, records


def test_a_pinned_snapshot_never_changes_while_commits_and_rolls_happen(spark, sqlite_catalog) -> None:
    cat = sqlite_catalog
    table = make_table(cat)
    w = ChunkWriter(cat, table)
    w.write(records(range(20)), Format.JSONL)
    pinned = read_table(spark, cat, table)  # one query's view of the table
    before = sorted(r["id"] for r in pinned.collect())
    w.write(records(range(20, 30)), Format.JSONL)
    Roller(cat).roll_table(table, force=True)  # the files it read were swept (still on disk)
    w.write(records(range(30, 35)), Format.JSONL)
    assert sorted(r["id"] for r in pinned.collect()) == before == list(range(20))
    # a self-join of the pinned frame reads the same rows on both sides
    assert pinned.alias("a").join(pinned.alias("b"), "id").count() == 20
    fresh = read_table(spark, cat, table)
    assert fresh.count() == 35
    # earlier versions stay readable (time travel by version)
    assert read_table(spark, cat, table, version=1).count() == 20


def test_streampart_query_agrees_with_an_independent_reader(spark, sqlite_catalog) -> None:
    cat = sqlite_catalog
    table = make_table(cat)
    w = ChunkWriter(cat, table)
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    Roller(cat).roll_table(table, force=True)
    w.write(records(range(100, 104)), Format.JSONL)
    ours = run_sql(spark, cat, "SELECT id, ts_period FROM ns.events").collect()
    theirs = delta_rows(table).to_pylist()  # delta-rs' own engine on the table directory
    assert sorted((r["id"], r["ts_period"].replace(tzinfo=None)) for r in ours) == sorted(
        (r["id"], r["ts_period"].replace(tzinfo=None)) for r in theirs
    )
    grouped = run_sql(
        spark, cat, "SELECT e.ts_period, count(*) AS n FROM ns.events AS e GROUP BY e.ts_period ORDER BY 1"
    ).collect()
    assert [r["n"] for r in grouped] == [30, 4]


@pytest.fixture
def resolve(sqlite_catalog) -> Resolver:
    """How a query outside any namespace resolves names, in a catalog holding ns.t and ns.u."""
    make_table(sqlite_catalog, "ns.t")
    make_table(sqlite_catalog, "ns.u")
    return catalog_resolver(sqlite_catalog)


def test_sql_names_are_checked_and_read_as_written(resolve: Resolver) -> None:
    sql, used = rewrite("SELECT count(*) FROM ns.t JOIN ns.u ON ns.t.id = u.id", resolve)
    assert {r.name for r in used} == {"ns.t", "ns.u"}
    assert sql == "SELECT count(*) FROM ns.t JOIN ns.u ON ns.t.id = u.id"  # Spark reads it as written
    with pytest.raises(NotFoundError, match=r"ns\.nope does not exist"):
        rewrite("SELECT * FROM ns.nope", resolve)
    with pytest.raises(UserInputError, match="Syntax error at or near 'SELEC'"):
        rewrite("SELEC * FROM", resolve)
    with pytest.raises(UserInputError, match="only queries"):
        rewrite("DROP TABLE ns.t", resolve)
    for setting in ("SET spark.sql.runSQLOnFiles=true", "set x = 1 / 2", "RESET"):
        with pytest.raises(UserInputError, match="may not change them") as refused:
            rewrite(setting, resolve)
        assert "Required keyword" not in str(refused.value)


def test_a_syntax_error_names_the_token_and_points_at_it(resolve: Resolver) -> None:
    with pytest.raises(UserInputError) as failed:
        rewrite("SELECT count(*) FROM ns.t WHERE id = = 3", resolve)
    message = str(failed.value)
    assert "line 1, column" in message and "near '='" in message, message
    shown, caret = message.splitlines()[1:3]
    assert shown.strip() == "SELECT count(*) FROM ns.t WHERE id = = 3"
    assert caret.strip() == "^" and shown.index("= =") + 2 == caret.index("^"), message


# A statement that begins with a word no Spark statement begins with: sqlglot reads it as a column
# and stops further on (``SELEC 1`` at ``1``); Spark's grammar stops at the word, and so does the
# message — as the SQL server words Spark's (tests/test_sql_server.py).
MISPLACED_FIRST_WORDS = [
    ("SELEC 1", "'SELEC' (line 1, column 1)", "SELEC 1", "^^^^^"),
    ("SELEC * FROM ns.t", "'SELEC' (line 1, column 1)", "SELEC * FROM ns.t", "^^^^^"),
    # after a comment, on the statement's second line
    (
        "-- the count\n  selec count(*) FROM ns.t",
        "'selec' (line 2, column 3)",
        "  selec count(*) FROM ns.t",
        "  ^^^^^",
    ),
    ("1 +", "'1' (line 1, column 1)", "1 +", "^"),
]


@pytest.mark.parametrize(
    "sql, near, shown, caret", MISPLACED_FIRST_WORDS, ids=[c[0] for c in MISPLACED_FIRST_WORDS]
)
def test_a_statement_that_begins_with_no_statement_word_is_wrong_at_that_word(
    sql: str, near: str, shown: str, caret: str, resolve: Resolver
) -> None:
    with pytest.raises(UserInputError) as failed:
        rewrite(sql, resolve)
    assert str(failed.value) == (
        f"query failed: [PARSE_SYNTAX_ERROR] Syntax error at or near {near}\n  {shown}\n  {caret}"
    )


# What a query may not touch (issue 14, item 9): each refused before Spark sees it, one message.
REFUSED_QUERIES = [
    # any file, through a path table, Spark's IDENTIFIER() or a table function
    ("SELECT * FROM text.`/etc/passwd`", "contains a path separator"),
    ("SELECT * FROM IDENTIFIER('text.`/etc/passwd`')", "not files or table functions"),
    ("SELECT * FROM read_files('/etc')", "not files or table functions"),
    ("SELECT * FROM parquet.`/tmp/x`", "contains a path separator"),
    # the JVM
    ("SELECT reflect('org.apache.hadoop.fs.FileUtil', 'chmod', '/tmp', '777')", "reflect() calls Java"),
    ("SELECT java_method('java.lang.System', 'getenv', 'HOME')", "java_method() calls Java"),
    ("SELECT id FROM ns.t WHERE try_reflect('java.lang.System', 'exit', 1) IS NULL", "try_reflect()"),
    # a program
    ("SELECT TRANSFORM(id) USING 'cat /etc/passwd' FROM ns.t", "TRANSFORM"),
    # Spark's own catalog and temporary views, by one- or three-part names
    ("SELECT * FROM spark_catalog.default.x", "not through a catalog"),
    ("SELECT * FROM __sp_ns__t", "name streampart tables as NAMESPACE.TABLE"),
    # time travel it cannot honour is refused, never ignored
    ("SELECT * FROM ns.t VERSION AS OF 'x'", "VERSION AS OF <number>"),
]


@pytest.mark.parametrize("sql, says", REFUSED_QUERIES, ids=[q[0][:40] for q in REFUSED_QUERIES])
def test_queries_may_touch_streampart_snapshots_only(sql: str, says: str, resolve: Resolver) -> None:
    with pytest.raises(StreampartError, match=re.escape(says)) as refused:
        rewrite(sql, resolve)
    assert "\n" not in str(refused.value)


def test_ctes_and_range_are_allowed(resolve: Resolver) -> None:
    _, used = rewrite(
        "WITH c AS (SELECT id FROM ns.t) SELECT * FROM c JOIN range(3) r ON c.id = r.id", resolve
    )
    assert {r.name for r in used} == {"ns.t"}


def test_version_and_timestamp_as_of_read_that_version(spark, sqlite_catalog) -> None:
    import time
    from datetime import UTC, datetime

    from metastore.models import iso

    table = make_table(sqlite_catalog)
    w = ChunkWriter(sqlite_catalog, table)
    w.write(records(range(10)), Format.JSONL)  # version 1
    time.sleep(1.1)  # commit timestamps are milliseconds: make "between" unambiguous
    between = iso(datetime.now(UTC))
    time.sleep(1.1)
    w.write(records(range(10, 15)), Format.JSONL)  # version 2

    def count(sql: str) -> int:
        return run_sql(spark, sqlite_catalog, sql).collect()[0]["n"]

    assert count("SELECT count(*) AS n FROM ns.events") == 15
    assert count("SELECT count(*) AS n FROM ns.events VERSION AS OF 1") == 10
    assert count(f"SELECT count(*) AS n FROM ns.events TIMESTAMP AS OF '{between}'") == 10
    # both in one query: each reference reads its own snapshot
    assert (
        count(
            "SELECT (SELECT count(*) FROM ns.events) - (SELECT count(*) FROM ns.events VERSION AS OF 1) AS n"
        )
        == 5
    )
    with pytest.raises(UserInputError, match="has no version 7: its newest is 2"):
        run_sql(spark, sqlite_catalog, "SELECT * FROM ns.events VERSION AS OF 7")
    with pytest.raises(UserInputError, match="no version committed at or before 2001-01-01"):
        run_sql(spark, sqlite_catalog, "SELECT * FROM ns.events TIMESTAMP AS OF '2001-01-01T00:00:00Z'")


def test_spark_itself_refuses_sql_on_files(spark, tmp_path) -> None:
    from pyspark.errors import PySparkException

    with pytest.raises(PySparkException):  # a second fence, behind the query policy
        spark.sql(f"SELECT * FROM text.`{tmp_path}`").collect()


def test_spark_errors_become_one_clear_message(spark, sqlite_catalog) -> None:
    make_table(sqlite_catalog)
    with pytest.raises(QueryError, match="no_such_column"):
        run_sql(spark, sqlite_catalog, "SELECT no_such_column FROM ns.events")


def test_a_data_file_damaged_in_place_fails_the_query_naming_the_file(spark, sqlite_catalog) -> None:
    from pathlib import Path

    from streampart.query_errors import spark_errors

    table = make_table(sqlite_catalog, "ns.garbled")
    ChunkWriter(sqlite_catalog, table).write(records(range(10)), Format.JSONL)
    [staged] = (Path(table.location) / "_staging").rglob("*.parquet")
    staged.write_bytes(b"\0" * staged.stat().st_size)  # same size: only reading it can tell
    df = run_sql(spark, sqlite_catalog, "SELECT count(*) AS n FROM ns.garbled")
    with pytest.raises(QueryError, match=staged.name) as failed, spark_errors():
        df.collect()
    assert "\n" not in str(failed.value)


def test_registered_views_stay_pinned_until_registered_again(spark, sqlite_catalog) -> None:
    from streampart.query import register_views

    table = make_table(sqlite_catalog)
    w = ChunkWriter(sqlite_catalog, table)
    w.write(records(range(10)), Format.JSONL)
    views = register_views(spark, sqlite_catalog)
    view, version = views["ns.events"]
    assert set(views) == {"ns.events"} and version == 1
    w.write(records(range(10, 15)), Format.JSONL)
    Roller(sqlite_catalog).roll_table(table, force=True)
    assert spark.sql(f"SELECT count(*) AS n FROM {view}").first()["n"] == 10  # still the pinned snapshot
    register_views(spark, sqlite_catalog, {"ns.events"})
    assert spark.sql(f"SELECT count(*) AS n FROM {view}").first()["n"] == 15


def test_tables_of_several_metastores_are_never_taken_for_one_another(spark, tmp_path) -> None:
    """Issue 25: row ids repeat across metastores; snapshots were keyed by them (12/12/12 for 12/4/2)."""
    from metastore.catalog import Catalog
    from streampart.query_plan import plan, run
    from streampart.query_writes import WriteResult

    cat = Catalog.open(tmp_path / "warehouse", f"sqlite:///{tmp_path / 'primary.sqlite'}")
    for name in ("m1", "m2"):
        cat.federation.add(name, f"sqlite:///{tmp_path / name}.sqlite", "read-write-create")
    cat.federation.set_route("sales", "m1")
    cat.federation.set_route("sales_eu", "m2")
    counts = {"shop.orders": 12, "sales.orders": 4, "sales_eu.orders": 2}
    for name, n in counts.items():
        table = make_table(cat, name)
        ChunkWriter(cat, table).write(records(range(n)), Format.JSONL)
    ids = {cat.table(name).id for name in counts}
    assert ids == {1}, ids  # the first table of each metastore: the same row id everywhere
    sql = (
        "SELECT (SELECT count(*) FROM shop.orders) AS a, (SELECT count(*) FROM sales.orders) AS b, "
        "(SELECT count(*) FROM sales_eu.orders) AS c"
    )
    [row] = run_sql(spark, cat, sql).collect()
    assert (row["a"], row["b"], row["c"]) == (12, 4, 2)
    rows = run(spark, cat, plan(cat, sql))  # the CLI's planner (copies, cluster choice)
    assert not isinstance(rows, WriteResult)  # a query: its rows
    [row] = rows.collect()
    assert (row["a"], row["b"], row["c"]) == (12, 4, 2)
    joined = "SELECT count(*) AS n FROM shop.orders s JOIN sales.orders o USING (id)"
    assert run_sql(spark, cat, joined).collect()[0]["n"] == 4
    cat.close()

"""What a statement may run is decided on what Spark's analyzer resolved, not on how it was spelled.

``streampart/java/Policy.java`` checks every analyzed statement of ``streampart query``, INSERT and
CTAS, ``run_sql`` and the SQL server. These tests hand Spark statements directly (past the early
sqlglot checks of :mod:`streampart.query_policy`), so each refusal here is the analyzed plan's.
"""

from __future__ import annotations

import re

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.errors import UserInputError
from streampart.errors import QueryRefusedError
from streampart.query import Prepared, pin_snapshots, run_sql, statement_frame
from streampart.query_policy import Read, TableRef, read_key
from tests.fixtures import make_table
from tests.helpers import records

pytestmark = pytest.mark.spark

JVM = "'java.lang.System', 'getProperty', 'user.name'"

# Each spelling of a call that runs Java code (or reads outside the statement's snapshots).
REFUSED = [
    (f"SELECT reflect({JVM})", "calls Java methods by name"),
    (f"SELECT `REFLECT`({JVM})", "calls Java methods by name"),
    (f"SELECT `reflect`({JVM}) FROM ns.t", "calls Java methods by name"),
    (f"SELECT ReFlEcT({JVM})", "calls Java methods by name"),
    (f"SELECT system.builtin.reflect({JVM})", "calls Java methods by name"),
    (f"SELECT IDENTIFIER('reflect')({JVM})", "calls Java methods by name"),
    (f"SELECT IDENTIFIER('java_method')({JVM})", "calls Java methods by name"),
    (f"SELECT java_method({JVM})", "calls Java methods by name"),
    (f"SELECT `java_method`({JVM})", "calls Java methods by name"),
    (f"SELECT try_reflect({JVM})", "calls Java methods by name"),
    (
        f"SELECT left(reflect({JVM}), 2)",
        "calls Java methods by name",
    ),  # inside a function that Spark rewrites
    (f"SELECT transform(array(1), x -> java_method({JVM}))", "calls Java methods by name"),  # a lambda
    (
        f"SELECT id FROM ns.t WHERE id = (SELECT length(reflect({JVM})))",
        "calls Java methods by name",
    ),  # a subquery
    (f"WITH c AS (SELECT reflect({JVM}) AS r) SELECT * FROM c", "calls Java methods by name"),  # a CTE
    (f"SELECT * FROM ns.t WHERE EXISTS (SELECT reflect({JVM}))", "calls Java methods by name"),
    (f"SELECT max(reflect({JVM})) OVER () FROM ns.t", "calls Java methods by name"),  # a window
    ("SELECT TRANSFORM(id) USING 'id' AS (o STRING) FROM ns.t", "ScriptTransformation"),
    ("SELECT * FROM parquet.`/tmp`", "queries read streampart tables"),
    ("SELECT * FROM IDENTIFIER('ns.other')", "written directly in the statement"),
    ("SELECT * FROM spark_catalog.default.x", "queries read streampart tables"),
]


@pytest.fixture
def ns_t(sqlite_catalog):
    table = make_table(sqlite_catalog, "ns.t")
    ChunkWriter(sqlite_catalog, table).write(records(range(5)), Format.JSONL)
    return sqlite_catalog


def _staged(catalog, text: str) -> Prepared:
    """``text`` as Spark will read it, with ns.t staged (as if the early checks had passed)."""
    return Prepared(text, (Read(read_key(["ns", "t"]), TableRef("ns.t"), "t"),), None)


@pytest.mark.parametrize("sql, says", REFUSED, ids=[q[0][:50] for q in REFUSED])
def test_the_analyzed_plan_decides_what_may_run(spark, ns_t, sql: str, says: str) -> None:
    prepared = _staged(ns_t, sql)
    snapshots = {ref: snap for ref, (_, snap) in pin_snapshots(ns_t, prepared.refs).items()}
    with pytest.raises(QueryRefusedError, match=re.escape(says)) as refused:
        statement_frame(spark, prepared, snapshots).collect()
    assert "\n" not in str(refused.value)


def test_every_spelling_is_refused_through_run_sql_too(spark, ns_t) -> None:
    for sql, _ in REFUSED:  # (IDENTIFIER('f')(…) is refused as a syntax error before Spark starts)
        with pytest.raises(UserInputError) as refused:
            run_sql(spark, ns_t, sql)
        assert "sqlglot" not in str(refused.value) and "<class" not in str(refused.value)


def test_a_registered_temporary_view_is_not_a_way_around(spark, ns_t) -> None:
    spark.range(3).createOrReplaceTempView("sneaky")
    prepared = _staged(ns_t, "SELECT * FROM sneaky")
    snapshots = {ref: snap for ref, (_, snap) in pin_snapshots(ns_t, prepared.refs).items()}
    with pytest.raises(QueryRefusedError, match="View"):
        statement_frame(spark, prepared, snapshots)


def test_variables_are_never_substituted(spark, ns_t) -> None:
    # ${…} is text: Spark would substitute it after the statement was checked
    [row] = run_sql(spark, ns_t, "SELECT '${env:HOME}' AS home, '${system:user.name}' AS user").collect()
    assert (row["home"], row["user"]) == ("${env:HOME}", "${system:user.name}")


def test_builtin_functions_and_syntax_run(spark, ns_t) -> None:
    [row] = run_sql(
        spark,
        ns_t,
        "SELECT count(*) AS n, sum(id) FILTER (WHERE id > 1) AS s, max(upper(msg)) AS m, "
        "min(transform(array(id), x -> x + 1)[0]) AS f, min(ts + INTERVAL 1 HOUR) IS NOT NULL AS t, "
        "max(CASE WHEN id IN (SELECT id FROM ns.t WHERE id < 2) THEN 1 ELSE 0 END) AS c FROM ns.t",
    ).collect()
    assert (row["n"], row["s"], row["m"], row["f"], row["t"], row["c"]) == (5, 9, "M4", 1, True, 1)

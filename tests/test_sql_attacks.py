"""Issue 44's tests: ``streampart sql-server`` attacked through a stock client, and a property test.

One real server process per module serves a warehouse with namespace ``a`` (table ``a.t``, three
Delta versions) and namespace ``b`` (``b.t``, rows holding a random marker, and a link
``b.mirror`` to ``a.t``); every statement comes from PyHive (``hive.connect(…, auth="CUSTOM")``)
as a token that may read ``a`` only.

- **The corpus** (:data:`CORPUS`): hand-written hostile statements grouped by class, and more made
  by a seeded generator that puts lexer tricks around hostile payloads (:func:`generated`), all
  sent on one connection; hostile connection settings (:data:`CONFIGURATIONS`), each on a
  connection of its own. Each must be refused with one line (an ``OperationalError`` whose
  ``errorMessage`` has no newline and whose ``infoMessages`` hold at most one entry) that tells
  nothing of b's rows, the server's environment, the server's user or its Java stack; and must
  change nothing: the watched file (the server's user's, mode 0644) keeps its mode and text, the
  canary directory is never made, and ``b.t`` and ``a.t`` (read by delta-rs) keep their rows and
  versions. Statements whose Spark reading is harmless though another reader would see an attack
  in them (:data:`ANSWERED`) must answer exactly what that harmless reading answers; they run
  between the others, showing the session goes on after refusals.
- **The property** (:func:`test_what_an_accepted_statement_reads_is_exactly_the_staged_snapshots`):
  statements from a small grammar over ``a.t`` and ``b.t`` with lexer noise between the tokens;
  a refusal is one line, and an accepted statement answers what plain Spark answers over exactly
  the rows delta-rs reads from ``a.t`` at the versions named, with ``b.t`` not registered there:
  a statement that read ``b.t``, a file or anything else would fail or differ in the oracle.

Strings in the corpus name the module's paths by placeholders (``<watched>``, ``<canary>``,
``<b>`` and ``<a>``: b's and a's table directories), filled in when a case runs.
"""

from __future__ import annotations

import os
import random
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ingest.api.auth import hash_token, new_token
from metastore.catalog import Catalog
from metastore.links import LinkSpec
from metastore.models import Scope, TableName
from streampart.sql_endpoint import LOCAL_USER, ServerInfo
from tests.fixtures import make_table
from tests.helpers import ROOT, jsonl, sql_server

pytestmark = pytest.mark.spark  # every test here talks to one `streampart sql-server` (Spark)

USER = "reader"  # the token's name: it may read namespace a only
SECRET_VARIABLE = "SP_TEST_SECRET"  # in the server's environment (not STREAMPART_: the config refuses those)
A_ROWS = 8  # a.t's rows at its newest version (2): 5 at version 1, 3 more at version 2

JVM = "'java.lang.System', 'getProperty', 'user.name'"
GETENV = f"'java.lang.System', 'getenv', '{SECRET_VARIABLE}'"
CHMOD = "'org.apache.hadoop.fs.FileUtil', 'chmod', '<watched>', '777'"  # a static method taking strings
MKDIR = "'java.io.File', 'createTempFile', 'x', 'y', '<canary>'"
XXE = '<!DOCTYPE a [<!ENTITY e SYSTEM "file://<watched>">]><a>&e;</a>'


# -- the hand-written corpus -----------------------------------------------------------------------

# Every spelling of a function that calls Java methods by name, and what it would call.
_REFLECT = [
    f"reflect({JVM})", f"REFLECT({JVM})", f"Reflect({JVM})", f"`reflect`({JVM})", f"`REFLECT`({JVM})",
    f"java_method({JVM})", f"JAVA_METHOD({JVM})", f"`java_method`({JVM})", f"try_reflect({JVM})",
    f"TRY_REFLECT({JVM})", f"`try_reflect`({JVM})", f"system.builtin.reflect({JVM})",
    f"SYSTEM.BUILTIN.REFLECT({JVM})", f"`system`.`builtin`.`reflect`({JVM})", f"builtin.reflect({JVM})",
    f"system.builtin.java_method({JVM})", f"system.builtin.try_reflect({JVM})",
    f"spark_catalog.default.reflect({JVM})", f"session.reflect({JVM})", f"system.session.reflect({JVM})",
    f"IDENTIFIER('reflect')({JVM})", f"IDENTIFIER('system.builtin.reflect')({JVM})",
    f"IDENTIFIER('JAVA_METHOD')({JVM})", f"reflect({GETENV})", f"java_method({GETENV})",
    f"try_reflect({GETENV})", f"reflect({CHMOD})", f"java_method({CHMOD})", f"try_reflect({CHMOD})",
    f"reflect({MKDIR})", "reflect('java.lang.Thread', 'sleep', 1L)",
    "reflect('java.lang.System', 'getProperty', 'java.class.path')",
    "reflect('java.lang.System', 'setProperty', 'user.dir', '/')", "reflect('java.util.UUID', 'randomUUID')",
    "java_method('java.lang.Math', 'abs', -1)", "reflect('java.lang.Integer', 'parseInt', '1')",
]  # fmt: skip

# Where in a query such a call can stand ({f}: the call).
_PLACES = [
    "SELECT {f} FROM a.t", "SELECT id FROM a.t WHERE {f} IS NOT NULL",
    "SELECT transform(array(1), x -> {f})", "SELECT filter(array('a'), x -> {f} = x)",
    "SELECT aggregate(array(1), '', (acc, x) -> {f})", "SELECT zip_with(array(1), array(2), (x, y) -> {f})",
    "SELECT map_filter(map(1, 2), (k, v) -> {f} = '')", "SELECT reduce(array(1), '', (s, x) -> {f})",
    "SELECT (SELECT {f})", "SELECT id FROM a.t WHERE id IN (SELECT length({f}))",
    "SELECT EXISTS (SELECT {f})",
    "WITH c AS (SELECT {f} AS v) SELECT * FROM c", "WITH c AS (SELECT id FROM a.t) SELECT {f} FROM c, a.t",
    "SELECT /*+ REPARTITION({f}) */ * FROM a.t", "SELECT /*+ REBALANCE({f}) */ * FROM a.t",
    "SELECT /*+ REPARTITION_BY_RANGE({f}) */ * FROM a.t", "SELECT id FROM a.t ORDER BY {f}",
    "SELECT id FROM a.t SORT BY {f}", "SELECT id FROM a.t DISTRIBUTE BY {f}",
    "SELECT id FROM a.t CLUSTER BY {f}", "SELECT max(id) FROM a.t GROUP BY {f}",
    "SELECT count(*) FROM a.t HAVING max({f}) IS NOT NULL",
    "SELECT row_number() OVER (PARTITION BY {f} ORDER BY id) FROM a.t",
    "SELECT id, x FROM a.t LATERAL VIEW explode(array({f})) v AS x",
    "SELECT id, x FROM a.t LATERAL VIEW OUTER explode(array({f})) v AS x",
    "SELECT * FROM a.t, LATERAL (SELECT {f} AS x)",
    "SELECT * FROM a.t x JOIN LATERAL (SELECT {f} AS r) ON true",
    "SELECT * FROM VALUES ({f}) AS v(x)", "SELECT CASE WHEN id > 0 THEN {f} END FROM a.t",
    "SELECT if(true, {f}, '')", "SELECT coalesce(NULL, {f})", "SELECT named_struct('x', {f})",
    "SELECT try_to_number({f}, '999')", "SELECT * FROM a.t PIVOT (max({f}) FOR id IN (1))",
    "SELECT * FROM range(1) WHERE {f} <> ''", "FROM a.t |> SELECT {f}",
    "SELECT * FROM a.t |> WHERE {f} IS NULL", "SELECT * FROM explode(array({f}))",
    "SELECT * FROM stack(1, {f})", "SELECT * FROM inline(array(struct({f})))",
    "SELECT id FROM a.t QUALIFY {f} IS NOT NULL", "SELECT {f} FROM a.t WINDOW w AS (PARTITION BY id)",
    "SELECT id FROM a.t LIMIT length({f})", "SELECT * FROM a.t x JOIN a.t y ON {f} = ''",
    "SELECT 1 UNION ALL SELECT length({f})", "SELECT max_by(id, {f}) FROM a.t", "SELECT map({f}, 1)",
    "SELECT struct({f}).col1", "SELECT x FROM (SELECT {f} AS x)", "SELECT assert_true({f} IS NULL)",
    "SELECT raise_error({f})", "SELECT url_decode({f})", "SELECT * FROM a.t WHERE msg LIKE {f}",
    "SELECT * FROM a.t TABLESAMPLE (1 ROWS) WHERE {f} = ''",
]  # fmt: skip

# Spellings of namespace b's table, and ways to reach namespace b or Spark's own catalog.
_B_NAMES = [
    "b.t", "B.t", "b.T", "B.T", "`b`.t", "`b`.`t`", "`B`.`T`", "b.`t`", "b /**/ . /**/ t", "b\n.\nt",
    "spark_catalog.b.t", "SPARK_CATALOG.B.T", "`spark_catalog`.`b`.`t`", "`spark_catalog.b`.t",
    "b.t@a", "b.t@b", "a.t@b", "`b`.`t@a`", "a.`t@b`", "`t@b`", "`b.t`", "`B.T`", "`b`.`t.x`",
    "b.t VERSION AS OF 0", "b.t VERSION AS OF 1", "b.t TIMESTAMP AS OF '2020-01-01'",
    "b.t FOR SYSTEM_VERSION AS OF 1", "b.t FOR SYSTEM_TIME AS OF '2030-01-01'",
    "b.t TIMESTAMP AS OF current_timestamp()", "`b`.`t@v0`", "b.`t@v1`", "b.t AS a", "b.t t",
    "b.t AS t(i, x, y, z)", "b.mirror", "B.MIRROR", "`b`.`mirror`", "b.mirror VERSION AS OF 1",
    "global_temp.t", "default.t", "b.t.x", "cat.b.t", "b.nope", "nope.t", "_staging.t", "`b`.`_staging`",
    "b.`_delta_log`", "`a/../b`.t", "`a`.`../b/t`", "`b `.t", "` b`.t", "`b`` `.t", "`b\n`.t", "`b\x00`.t",
    "IDENTIFIER('b.t')", "IDENTIFIER('B.T')", "IDENTIFIER('`b`.`t`')", "IDENTIFIER('b').t",
    "IDENTIFIER('b').IDENTIFIER('t')", "IDENTIFIER('spark_catalog.b.t')", "IDENTIFIER('\\u0062.t')",
    "IDENTIFIER('\\x62.t')", "IDENTIFIER(U&'\\0062.t')", "IDENTIFIER(r'b.t')", "IDENTIFIER('b' '.t')",
    "IDENTIFIER('b' || '.t')", "IDENTIFIER(concat('b', '.', 't'))", "IDENTIFIER('b.mirror')",
    "\uff42.t", "b\uff0et",
]  # fmt: skip

CORPUS: dict[str, list[str]] = {
    # Lexer differentials: where another reader would split, end a comment or a string otherwise
    # than Spark's lexer, the hostile part is live in Spark's reading (the ones where it is not
    # are in ANSWERED).
    "lexer": [
        "SELECT count(*) FROM a.t -- \\\n; SELECT 1\nUNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t -- x\rUNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t -- x\r\nUNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t --\\\r\nUNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t -- \\\r\nUNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t -- \\\n\\\n x\nUNION ALL SELECT count(*) FROM b.t",
        "-- \\\n\nSELECT * FROM b.t",
        "/**/ -- \\\nSELECT 1 /* '\nBEGIN SELECT 1; SELECT reflect(" + JVM + "); END -- ' */",
        "/* /* */ */ SELECT * FROM b.t",
        "/* /* */ SELECT 1 */ SELECT * FROM b.t",
        "/*/**/*/ SELECT * FROM b.t",
        "SELECT * FROM /* */ b /* */ . /* */ t",
        "SELECT * FROM b/**/./**/t",
        "SELECT * FROM b.t /*",
        "SELECT * FROM b.t /* /* */",
        "SELECT count(*) FROM a.t /* /* */ UNION ALL SELECT count(*) FROM b.t",
        "SELECT * FROM a.t /* ",
        "/* ' */ SELECT * FROM b.t /* ' */",
        "SELECT 'x\\\\' AS s, * FROM b.t -- '",
        'SELECT "x" AS s, * FROM b.t',
        'SELECT * FROM "b"."t"',
        'SELECT * FROM b."t"',
        'SELECT * FROM U&"b".t',
        "SELECT U&'\\0062' AS s, * FROM b.t",
        "SELECT '\\u0027' AS s, * FROM b.t",
        "SELECT /*+ COALESCE(1) */ * FROM b.t",
        "SELECT /*+ BROADCAST(x) */ * FROM a.t x JOIN b.t y USING (id)",
        "SELECT /*+ */ * FROM b.t",
        "SELECT /*+ REPARTITION(1) */ * FROM a.t /*+ x */ UNION ALL SELECT * FROM b.t",
        "/*+ REPARTITION(1) */ SELECT * FROM b.t",
        "SELECT * FROM `/tmp`",
        "SELECT * FROM `<b>`",
        "SELECT * FROM `a.t`",
        "SELECT * FROM `a`.`t.x`",
        "SELECT '\U0001f600' AS e, * FROM b.t",
        "SELECT '\U0001f600\U0001f600\U0001f600\U0001f600' AS e FROM a.t x JOIN b.t y ON true",
        "SELECT '\U0001f600' AS e; SELECT * FROM b.t",
        "SELECT '\U0001d518' AS e, * FROM b.t@a",
        "USE a; SELECT '\U0001f600\U0001f600' AS e, * FROM t@b",
        "/* \U0001f600 */ SELECT reflect(" + JVM + ")",
        "SELECT '\U0001f600' AS e, reflect(" + JVM + ")",
        "SELECT '\ua66e\U0001f600\ua66e' AS e FROM a.t WHERE id IN (SELECT id FROM b.t)",
        "SELECT `\U0001f600` FROM b.t",
        "SELECT count(*) FROM a.t\u2028UNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t\u00a0UNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t\u3000UNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t\fUNION ALL SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t\vUNION ALL SELECT count(*) FROM b.t",
        "SELECT\tcount(*)\tFROM\tb.t",
        "SELECT\rcount(*)\rFROM\rb.t",
        "\ufeffSELECT * FROM b.t",
        "SELECT * FROM b.t\x00",
        "SELECT * FROM b.t -- \\",
    ],
    # SQL scripts and what only scripts have: compound statements, variables, EXECUTE IMMEDIATE
    "scripts": [
        "BEGIN SELECT * FROM b.t; END",
        "BEGIN SELECT 1; END",
        "BEGIN SELECT reflect(" + JVM + "); END",
        "begin select * from b.t; end",
        "lbl: BEGIN SELECT * FROM b.t; END lbl",
        "BEGIN DECLARE x INT DEFAULT 1; SELECT * FROM b.t; END",
        "BEGIN DECLARE x STRING; SET x = (SELECT max(msg) FROM b.t); SELECT x; END",
        "BEGIN IF 1 = 1 THEN SELECT * FROM b.t; END IF; END",
        "BEGIN WHILE false DO SELECT 1; END WHILE; SELECT * FROM b.t; END",
        "BEGIN FOR r AS SELECT * FROM b.t DO SELECT r.msg; END FOR; END",
        "BEGIN LOOP SELECT * FROM b.t; LEAVE; END LOOP; END",
        "BEGIN REPEAT SELECT 1; UNTIL true END REPEAT; END",
        "BEGIN CASE WHEN true THEN SELECT * FROM b.t; END CASE; END",
        "BEGIN EXECUTE IMMEDIATE 'SELECT * FROM b.t'; END",
        "BEGIN DECLARE EXIT HANDLER FOR SQLEXCEPTION SELECT 1; SELECT * FROM b.t; END",
        "BEGIN BEGIN SELECT * FROM b.t; END; END",
        "BEGIN SELECT 1; END; SELECT 1",
        "BEGIN SELECT TRANSFORM(1) USING 'id' AS (o STRING); END",
        "BEGIN INSERT OVERWRITE DIRECTORY '<canary>' SELECT 1; END",
        "DECLARE x INT",
        "DECLARE OR REPLACE VARIABLE x STRING DEFAULT (SELECT max(msg) FROM b.t)",
        "DECLARE VARIABLE v STRING DEFAULT reflect(" + JVM + ")",
        "SET VAR x = 1",
        "SET VARIABLE x = (SELECT max(msg) FROM b.t)",
        "DROP TEMPORARY VARIABLE x",
        "EXECUTE IMMEDIATE 'SELECT * FROM b.t'",
        "EXECUTE IMMEDIATE 'SELECT 1'",
        "EXECUTE IMMEDIATE 'SELECT reflect(' || '''java.lang.System'', ''getProperty'', ''user.name'')'",
        "EXECUTE IMMEDIATE 'SELECT ?' USING 1",
        "EXECUTE IMMEDIATE 'SELECT * FROM b.t' INTO x",
        "CALL system.x()",
    ],
    # Several statements in one: only leading USE statements may come before the one that runs
    "multi_statements": [
        "SELECT 1; SELECT * FROM b.t",
        "SELECT count(*) FROM a.t; SELECT count(*) FROM b.t",
        "SELECT count(*) FROM a.t;SELECT count(*) FROM a.t",
        "USE a; SELECT * FROM b.t",
        "USE b; SELECT 1",
        "USE B; SELECT 1",
        "USE `b`; SELECT 1",
        "USE a; USE b; SELECT count(*) FROM t",
        "USE a.b; SELECT 1",
        "USE spark_catalog.b; SELECT 1",
        "USE NAMESPACE b; SELECT 1",
        "USE DATABASE b; SELECT 1",
        "USE SCHEMA b; SELECT 1",
        "USE b",
        "USE spark_catalog",
        "USE CATALOG spark_catalog",
        "USE global_temp",
        "USE evil.APP",
        "USE a; SET spark.sql.runSQLOnFiles=true; SELECT 1",
        "SET spark.sql.runSQLOnFiles=true; SELECT * FROM parquet.`<b>`",
        "SELECT 1;; SELECT * FROM b.t",
        "; SELECT * FROM b.t",
        "SELECT 1 ; ; DROP TABLE b.t",
        "SELECT ';' AS s; SELECT * FROM b.t",
        "SELECT `;` FROM a.t; SELECT * FROM b.t",
        "SELECT 1 /* ; */ ; SELECT * FROM b.t",
        "USE a; SHOW TABLES; SELECT 1",
        "SHOW SCHEMAS; SELECT 1",
        "DESCRIBE a.t; SELECT * FROM b.t",
        "SELECT count(*) FROM a.t; INSERT INTO a.t SELECT * EXCEPT (ts_period) FROM a.t",
    ],
    # Commands: settings, caches, repairs, loads, views, databases, Spark's own catalog
    "commands": [
        "SET spark.sql.runSQLOnFiles=true",
        "SET spark.sql.variable.substitute=true",
        "SET spark.sql.catalog.evil=org.apache.spark.sql.execution.datasources.v2.jdbc.JDBCTableCatalog",
        "SET spark.sql.catalog.evil.url=jdbc:derby:<canary>;create=true",
        "SET",
        "SET -v",
        "SET spark.sql.warehouse.dir",
        "SET x = 1",
        "set spark.sql.ansi.enabled = false",
        "SET TIME ZONE 'UTC'",
        "SET TIME ZONE LOCAL",
        "RESET",
        "RESET spark.sql.runSQLOnFiles",
        "CACHE TABLE b.t",
        "CACHE LAZY TABLE c AS SELECT * FROM b.t",
        "CACHE TABLE c AS SELECT * FROM a.t",
        "CACHE TABLE c OPTIONS ('storageLevel' 'DISK_ONLY') SELECT * FROM b.t",
        "UNCACHE TABLE a.t",
        "CLEAR CACHE",
        "REFRESH TABLE b.t",
        "REFRESH '<b>'",
        "REFRESH FUNCTION reflect",
        "MSCK REPAIR TABLE b.t",
        "REPAIR TABLE b.t SYNC PARTITIONS",
        "LOAD DATA LOCAL INPATH '<watched>' INTO TABLE b.t",
        "LOAD DATA INPATH '<watched>' OVERWRITE INTO TABLE a.t",
        "ANALYZE TABLE b.t COMPUTE STATISTICS",
        "ANALYZE TABLES IN b COMPUTE STATISTICS",
        "SHOW FUNCTIONS",
        "SHOW SYSTEM FUNCTIONS LIKE 'refl*'",
        "SHOW USER FUNCTIONS",
        "SHOW CATALOGS",
        "SHOW VIEWS",
        "SHOW CURRENT NAMESPACE",
        "CREATE DATABASE x",
        "CREATE DATABASE x LOCATION '<canary>'",
        "CREATE SCHEMA IF NOT EXISTS y LOCATION 'file://<canary>'",
        "DROP DATABASE b CASCADE",
        "DROP SCHEMA a",
        "ALTER DATABASE b SET DBPROPERTIES ('x'='y')",
        "ALTER DATABASE a SET LOCATION '<canary>'",
        "CREATE VIEW v AS SELECT * FROM b.t",
        "CREATE VIEW a.v AS SELECT * FROM a.t",
        "CREATE TEMPORARY VIEW v AS SELECT * FROM b.t",
        "CREATE TEMP VIEW v AS SELECT * FROM a.t",
        "CREATE OR REPLACE TEMPORARY VIEW v AS SELECT 1",
        "CREATE GLOBAL TEMPORARY VIEW g AS SELECT * FROM b.t",
        "DROP VIEW v",
        "ALTER VIEW v AS SELECT * FROM b.t",
        "KILL QUERY 'x'",
        "SHOW QUERIES",
        "SELECT * FROM evil.APP.x",
    ],
    # Resources: jars, files and archives added to the server
    "resources": [
        "ADD JAR '<canary>/x.jar'",
        "ADD JAR <canary>/x.jar",
        "ADD JARS '<canary>/x.jar'",
        "add jar 'file://<canary>/x.jar'",
        "ADD JAR 'ivy://org.example:evil:1.0'",
        "ADD FILE '<watched>'",
        "ADD FILES '<watched>'",
        "ADD FILE '<canary>'",
        "ADD ARCHIVE '<canary>/x.zip'",
        "ADD ARCHIVES '<canary>/x.tar.gz'",
        "LIST JAR",
        "LIST FILE",
        "LIST ARCHIVES",
        "LIST FILE '<watched>'",
    ],
    # File sources: paths, formats, temporary views over files, read_files, IDENTIFIER, options
    "file_sources": [
        "SELECT * FROM parquet.`<b>`",
        "SELECT * FROM parquet.`<b>/_staging`",
        "SELECT * FROM PARQUET.`<b>`",
        "SELECT * FROM `parquet`.`<b>`",
        "SELECT * FROM delta.`<b>`",
        "SELECT * FROM json.`<b>/_delta_log`",
        "SELECT * FROM text.`<b>/_delta_log`",
        "SELECT * FROM text.`<watched>`",
        "SELECT * FROM text.`/etc/passwd`",
        "SELECT * FROM csv.`/etc/passwd`",
        "SELECT * FROM json.`/etc/passwd`",
        "SELECT * FROM binaryFile.`<b>`",
        "SELECT * FROM orc.`<b>`",
        "SELECT * FROM avro.`<b>`",
        "SELECT * FROM xml.`<watched>`",
        "SELECT * FROM parquet.`file://<b>`",
        "SELECT * FROM parquet.`<a>/../../b/t`",
        "SELECT * FROM a.t UNION ALL SELECT * FROM parquet.`<b>`",
        "SELECT * FROM a.t WHERE id IN (SELECT id FROM parquet.`<b>`)",
        "WITH x AS (SELECT * FROM parquet.`<b>`) SELECT * FROM x",
        "WITH x AS (SELECT * FROM parquet.`<b>`) SELECT * FROM x, a.t",
        "SELECT * FROM range(1) JOIN json.`/etc/passwd`",
        "CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '<b>')",
        "CREATE TEMPORARY VIEW v USING text OPTIONS (path '<watched>')",
        "CREATE TEMPORARY TABLE v USING parquet OPTIONS (path '<b>')",
        "CREATE OR REPLACE TEMPORARY VIEW v USING "
        "org.apache.spark.sql.execution.datasources.parquet.ParquetFileFormat OPTIONS (path '<b>')",
        "CREATE TEMPORARY VIEW v USING jdbc OPTIONS (url 'jdbc:derby:<canary>;create=true', dbtable 'x')",
        "CREATE TABLE x USING parquet LOCATION '<b>'",
        "CREATE TABLE x USING parquet LOCATION '<canary>'",
        "CREATE EXTERNAL TABLE x (id INT) LOCATION '<canary>'",
        "SELECT * FROM read_files('<b>')",
        "SELECT * FROM read_files('<b>', format => 'parquet')",
        "SELECT * FROM READ_FILES('<watched>')",
        "SELECT * FROM `read_files`('<b>')",
        "SELECT * FROM system.builtin.read_files('<b>')",
        "WITH x AS (SELECT * FROM read_files('<b>')) SELECT * FROM x, a.t",
        "SELECT * FROM IDENTIFIER('parquet.`<b>`')",
        "SELECT * FROM IDENTIFIER('text.`<watched>`')",
        "SELECT * FROM IDENTIFIER('global_temp.t')",
        "SELECT * FROM a.t WITH ('path' = '<b>')",
        "SELECT * FROM a.t WITH (path = '<b>')",
        "SELECT * FROM a.t WITH ('versionAsOf' = '0')",
        "SELECT * FROM a.t WITH ('basePath' = '<b>')",
        "WITH x AS (SELECT * FROM a.t WITH ('path' = '<b>')) SELECT * FROM x",
        "SELECT * FROM b.t WITH ('x' = 'y')",
        "SELECT * FROM STREAM a.t",
        "SELECT * FROM STREAM(b.t)",
        "SELECT * FROM sql_keywords()",
        "SELECT * FROM collations()",
        "SELECT * FROM explode(array((SELECT max(msg) FROM b.t)))",
        "SELECT * FROM range((SELECT count(*) FROM b.t))",
        "SELECT * FROM explode(TABLE(b.t))",
        "SELECT * FROM stack(1, TABLE(b.t))",
        "SELECT * FROM inline(TABLE(SELECT id FROM b.t) PARTITION BY id)",
    ],
    # Functions that reach Java, programs or files: every spelling, in every place of a query
    "functions": [f"SELECT {r}" for r in _REFLECT]
    + [p.format(f=f"reflect({CHMOD})") for p in _PLACES]
    + [
        # XML parsers that load the DTD a DOCTYPE names: any address, any file (stdin froze tasks)
        f"SELECT xpath_string('{XXE}', 'a')",
        "SELECT xpath_string('<!DOCTYPE r SYSTEM \"file:///proc/self/fd/0\"><r>x</r>', '/r')",
        "SELECT xpath('<!DOCTYPE r SYSTEM \"http://127.0.0.1:9/x.dtd\"><r>x</r>', '/r')",
        "SELECT xpath_int('<a>1</a>', '/a')",
        "SELECT xpath_long('<a>1</a>', 'a')",
        "SELECT xpath_boolean('<a><b>1</b></a>', 'a/b')",
        "SELECT `XPATH_STRING`('<a>b</a>', 'a')",
        "SELECT count(xpath_string(concat('<r>', id, '</r>'), '/r')) FROM a.t",
        # the server's file paths
        "SELECT input_file_name() FROM a.t",
        "SELECT input_file_block_start() FROM a.t",
        "SELECT TRANSFORM(1) USING 'id' AS (o STRING)",
        "SELECT TRANSFORM(id) USING 'id' FROM a.t",
        "SELECT TRANSFORM(id) USING 'chmod 777 <watched>' FROM a.t",
        "SELECT TRANSFORM(id) USING 'mkdir <canary>' AS (o STRING) FROM a.t",
        "SELECT TRANSFORM(*) USING 'cat /etc/passwd' FROM a.t",
        "SELECT TRANSFORM(id) ROW FORMAT DELIMITED USING '/bin/sh -c id' FROM a.t",
        "SELECT TRANSFORM(id) USING 'python3 -c \"import os; os.mkdir(\\'<canary>\\')\"' FROM a.t",
        "FROM a.t SELECT TRANSFORM(id) USING 'id'",
        "FROM a.t MAP id USING 'id'",
        "FROM a.t REDUCE id USING 'id'",
        "SELECT * FROM (SELECT TRANSFORM(id) USING 'id' AS (o STRING) FROM a.t)",
        "WITH x AS (SELECT TRANSFORM(1) USING 'id' AS (o STRING)) SELECT * FROM x",
        "SELECT id FROM a.t WHERE id IN (SELECT TRANSFORM(1) USING 'id' AS (o INT))",
        "SELECT from_protobuf(X'00', 'M', '<watched>')",
        "SELECT to_protobuf(struct(1), 'M', '<watched>')",
        "SELECT from_avro(X'00', '{\"type\":\"int\"}')",
        "SELECT raise_error((SELECT max(msg) FROM b.t))",
        "WITH c AS (SELECT reflect(" + JVM + ") AS r) SELECT count(*) FROM a.t",
        "SELECT hive_hash(1) FROM b.t",
    ],
    # User-defined functions: Hive UDF classes, jars, SQL and Python functions
    "udfs": [
        "CREATE TEMPORARY FUNCTION r AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
        "CREATE TEMPORARY FUNCTION r AS 'org.apache.hadoop.hive.ql.udf.UDFReflect'",
        "CREATE FUNCTION r AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
        "CREATE FUNCTION a.r AS 'org.apache.hadoop.hive.ql.udf.generic.GenericUDFReflect'",
        "CREATE FUNCTION r AS 'x.Y' USING JAR '<canary>/x.jar'",
        "CREATE TEMPORARY FUNCTION r AS 'x.Y' USING JAR 'file://<canary>/x.jar'",
        "CREATE TEMPORARY FUNCTION r AS 'x.Y' USING FILE '<watched>'",
        "CREATE OR REPLACE TEMPORARY FUNCTION r AS 'x.Y' USING ARCHIVE '<canary>/x.zip'",
        "CREATE TEMPORARY FUNCTION f() RETURNS STRING RETURN reflect(" + JVM + ")",
        "CREATE TEMPORARY FUNCTION f() RETURNS STRING RETURN (SELECT max(msg) FROM b.t)",
        "CREATE TEMPORARY FUNCTION f() RETURNS TABLE (id BIGINT) RETURN SELECT id FROM b.t",
        "CREATE FUNCTION f(x INT) RETURNS INT RETURN x + 1",
        "CREATE OR REPLACE FUNCTION a.f() RETURNS STRING RETURN 'x'",
        "CREATE FUNCTION f() RETURNS STRING LANGUAGE PYTHON AS $$ import os; return os.getcwd() $$",
        "DROP FUNCTION r",
        "DROP TEMPORARY FUNCTION IF EXISTS r",
        "DESCRIBE FUNCTION reflect",
        "DESCRIBE FUNCTION EXTENDED java_method",
        "SELECT r('java.lang.System', 'getProperty', 'user.name')",
        "SELECT a.r(1)",
        "SELECT spark_catalog.a.f()",
        "SELECT * FROM f()",
    ],
    # Namespace b (and other namespaces) by every spelling, and in every place of a query
    "namespace_b": [f"SELECT * FROM {n}" for n in _B_NAMES]
    + [
        "USE b; USE a; SELECT count(*) FROM t",  # every leading USE is checked, not only the last
        "USE a; USE b; SELECT 1",
        "TABLE b.t",
        "TABLE b.mirror",
        "FROM b.t SELECT *",
        "FROM b.t |> SELECT *",
        "FROM b.t |> WHERE true",
        "VALUES ((SELECT max(msg) FROM b.t))",
        "SELECT (SELECT max(msg) FROM b.t)",
        "SELECT * FROM a.t WHERE id IN (SELECT id FROM b.t)",
        "SELECT * FROM a.t WHERE EXISTS (SELECT * FROM b.t)",
        "SELECT * FROM a.t JOIN b.t USING (id)",
        "SELECT * FROM a.t UNION SELECT * FROM b.t",
        "SELECT * FROM a.t INTERSECT SELECT * FROM b.t",
        "SELECT * FROM a.t EXCEPT SELECT * FROM b.t",
        "SELECT * FROM a.t, LATERAL (SELECT * FROM b.t)",
        "SELECT * FROM b.t TABLESAMPLE (50 PERCENT)",
        "SELECT * FROM a.t TIMESTAMP AS OF (SELECT max(ts) FROM b.t)",
        "WITH t AS (SELECT * FROM b.t) SELECT * FROM t",
        "WITH b AS (SELECT * FROM a.t) SELECT * FROM b.t",
        "WITH a AS (SELECT * FROM b.t) SELECT * FROM a",
        "WITH t AS (SELECT 1 AS id) SELECT * FROM t, b.t",
        "WITH `b.t` AS (SELECT 1 AS id) SELECT * FROM b.t",
        "WITH t AS (SELECT * FROM a.t) SELECT * FROM (WITH t AS (SELECT * FROM b.t) SELECT * FROM t)",
        "WITH c AS (SELECT * FROM b.t) SELECT * FROM c, a.t",
        "WITH t AS (SELECT * FROM b.t) SELECT count(*) FROM a.t",
        "WITH c AS (SELECT 1 AS id), d AS (SELECT * FROM c JOIN b.t USING (id)) SELECT count(*) FROM c",
        "USE a; WITH t AS (SELECT * FROM b.t) SELECT * FROM t",
        "WITH RECURSIVE r AS (SELECT id FROM b.t UNION ALL SELECT id + 1 FROM r WHERE id < 0) "
        "SELECT * FROM r",
        "SELECT * FROM (WITH t AS (SELECT 1 AS id) SELECT * FROM t) x, t",
        "USE a; SELECT * FROM (WITH t AS (SELECT * FROM b.t) SELECT * FROM t) x, t",
        "USE a; WITH x AS (SELECT 1) SELECT * FROM t@b",
        "USE a; SELECT * FROM t@b",
        "USE a; SELECT * FROM `t@b`",
        "USE a; SELECT * FROM t @ b",
        "USE a; SELECT * FROM mirror@b",
        "USE b; SELECT * FROM mirror",
        "SELECT max(msg) FROM b.t GROUP BY id",
        "SELECT * FROM a.t x FULL OUTER JOIN b.t y ON x.id = y.id",
        "SELECT * FROM b.t PIVOT (max(msg) FOR id IN (1000))",
        "SELECT * FROM b.t UNPIVOT (v FOR k IN (msg))",
        "SELECT * FROM a.t WHERE msg = (SELECT max(msg) FROM b.t WHERE id > 0)",
        "SELECT id FROM a.t ORDER BY (SELECT max(id) FROM b.t)",
        "SELECT transform(array(1), x -> (SELECT max(id) FROM b.t))",
        "SELECT * FROM b.t LIMIT 0",
        "SELECT * FROM b.t WHERE false",
        "SELECT b.t.msg FROM a.t",
    ],
    # Statements that write, drop or alter, tables or directories
    "writes": [
        "INSERT INTO a.t SELECT * EXCEPT (ts_period) FROM a.t",
        "INSERT INTO b.t SELECT * EXCEPT (ts_period) FROM a.t",
        "INSERT INTO b.t VALUES (1, current_timestamp(), 'x')",
        "INSERT OVERWRITE a.t SELECT * FROM a.t",
        "INSERT OVERWRITE TABLE b.t SELECT * FROM a.t WHERE false",
        "INSERT INTO b.t REPLACE WHERE id > 0 SELECT * FROM a.t",
        "INSERT INTO a.t BY NAME SELECT 1 AS id",
        "WITH x AS (SELECT * FROM a.t) INSERT INTO b.t SELECT * FROM x",
        "FROM a.t INSERT INTO b.t SELECT * INSERT INTO a.t SELECT *",
        "CREATE TABLE a.x AS SELECT * FROM a.t",
        "CREATE TABLE x AS SELECT * FROM b.t",
        "CREATE TABLE b.x (id INT)",
        "CREATE TABLE x LIKE b.t",
        "CREATE OR REPLACE TABLE b.t (id INT)",
        "REPLACE TABLE b.t AS SELECT 1 AS id",
        "DROP TABLE b.t",
        "DROP TABLE IF EXISTS a.t",
        "DROP TABLE `b`.`t` PURGE",
        "ALTER TABLE b.t RENAME TO b.u",
        "ALTER TABLE b.t ADD COLUMNS (c STRING)",
        "ALTER TABLE b.t DROP COLUMN msg",
        "ALTER TABLE b.t SET LOCATION '<canary>'",
        "ALTER TABLE b.t SET TBLPROPERTIES ('x' = 'y')",
        "ALTER TABLE b.t ADD PARTITION (ts_period = '2020-01-01')",
        "ALTER TABLE a.t ALTER COLUMN msg COMMENT 'x'",
        "TRUNCATE TABLE b.t",
        "TRUNCATE TABLE a.t",
        "DELETE FROM b.t",
        "DELETE FROM b.t WHERE id > 0",
        "DELETE FROM a.t WHERE true",
        "UPDATE b.t SET msg = 'x'",
        "UPDATE a.t SET msg = 'x' WHERE id = 0",
        "MERGE INTO b.t USING a.t ON b.t.id = a.t.id WHEN MATCHED THEN DELETE",
        "MERGE INTO b.t t USING (SELECT 1 AS id) s ON t.id = s.id WHEN NOT MATCHED THEN INSERT *",
        "MERGE INTO a.t USING b.t ON true WHEN MATCHED THEN UPDATE SET *",
        "INSERT OVERWRITE DIRECTORY '<canary>' SELECT * FROM a.t",
        "INSERT OVERWRITE DIRECTORY '<canary>' USING parquet SELECT * FROM b.t",
        "INSERT OVERWRITE LOCAL DIRECTORY '<canary>' SELECT 1",
        "INSERT OVERWRITE LOCAL DIRECTORY '<canary>' ROW FORMAT DELIMITED SELECT 1",
        "INSERT OVERWRITE DIRECTORY USING json OPTIONS (path '<canary>') SELECT 1",
        "INSERT INTO parquet.`<b>` SELECT * FROM a.t",
        "INSERT OVERWRITE parquet.`<canary>` SELECT 1",
        "COMMENT ON TABLE b.t IS 'x'",
        "COMMENT ON NAMESPACE b IS 'x'",
        "CREATE INDEX i ON b.t (id)",
        "CONVERT TO DELTA parquet.`<b>`",
        "VACUUM b.t",
        "OPTIMIZE b.t",
        "RESTORE TABLE b.t TO VERSION AS OF 0",
        "CREATE TABLE x SHALLOW CLONE b.t",
    ],
    # EXPLAIN of anything: a command, and it would print plans
    "explain": [
        "EXPLAIN SELECT * FROM b.t",
        "EXPLAIN SELECT * FROM a.t",
        "EXPLAIN EXTENDED SELECT * FROM b.t",
        "EXPLAIN CODEGEN SELECT * FROM a.t",
        "EXPLAIN COST SELECT * FROM b.t",
        "EXPLAIN FORMATTED SELECT * FROM a.t",
        "explain select count(*) from a.t",
        "EXPLAIN SELECT reflect(" + JVM + ")",
        "EXPLAIN INSERT INTO b.t SELECT * FROM a.t",
        "EXPLAIN SELECT * FROM parquet.`<b>`",
        "EXPLAIN ANALYZE SELECT * FROM a.t",
        "EXPLAIN LOGICAL SELECT * FROM a.t",
    ],
    # DESCRIBE of b, by every spelling
    "describe_b": [
        "DESCRIBE b.t",
        "DESC B.T",
        "DESCRIBE TABLE b.t",
        "DESCRIBE EXTENDED b.t",
        "DESCRIBE FORMATTED b.t",
        "DESCRIBE b.t id",
        "DESC `b`.`t`",
        "DESCRIBE b.mirror",
        "DESCRIBE SCHEMA b",
        "DESCRIBE DATABASE EXTENDED b",
        "DESCRIBE NAMESPACE a",
        "DESCRIBE spark_catalog.b.t",
        "DESCRIBE b.t@a",
        "DESCRIBE QUERY SELECT * FROM b.t",
        "DESCRIBE SELECT * FROM b.t",
        "DESCRIBE TABLE EXTENDED b.t AS JSON",
        "DESC b.nope",
        "DESCRIBE b.`t`",
        "DESCRIBE b.t PARTITION (ts_period = '2026-01-01')",
        "USE a; DESCRIBE b.t",
        "DESCRIBE `b.t`",
        "DESCRIBE parquet.`<b>`",
        "DESCRIBE IDENTIFIER('b.t')",
        "DESCRIBE global_temp.t",
        "DESC b.T.id",
    ],
    # SHOW of b's tables and what SHOW lists only with options (plain SHOW TABLES IN b: ANSWERED)
    "show_b": [
        "SHOW TABLE EXTENDED IN b LIKE '*'",
        "SHOW VIEWS IN b",
        "SHOW COLUMNS IN b.t",
        "SHOW COLUMNS FROM t IN b",
        "SHOW CREATE TABLE b.t",
        "SHOW CREATE TABLE b.t AS SERDE",
        "SHOW TBLPROPERTIES b.t",
        "SHOW PARTITIONS b.t",
        "SHOW TABLES IN b LIKE '*'",
        "SHOW TABLES LIKE 't'",
        "SHOW SCHEMAS LIKE 'b'",
        "SHOW DATABASES LIKE '*'",
        "SHOW NAMESPACES IN spark_catalog",
        "SHOW TABLES IN spark_catalog.b",
        "SHOW TABLES IN b.t",
        "SHOW TABLE EXTENDED LIKE 't' PARTITION (ts_period = '2026-01-01')",
        "SHOW TABLES IN b; SELECT 1",
    ],
    # Parameter markers and variables: the statement is checked as written, nothing substituted
    "parameters": [
        "SELECT ?",
        "SELECT :x",
        "SELECT * FROM b.t WHERE id = ?",
        "SELECT * FROM IDENTIFIER(:t)",
        "SELECT * FROM IDENTIFIER(?)",
        "SELECT * FROM a.t WHERE id = :id",
        "SELECT * FROM a.t LIMIT ?",
        "EXECUTE IMMEDIATE 'SELECT * FROM IDENTIFIER(?)' USING 'b.t'",
        "SELECT ${x}",
        "SELECT * FROM ${t}",
        "SELECT * FROM ${hivevar:t}",
        f"SELECT ${{env:{SECRET_VARIABLE}}}",
        "SELECT * FROM b.t WHERE '${env:HOME}' <> ''",
        "SELECT ${system:user.name}",
        "SELECT * FROM a.t WHERE id = ${hiveconf:x}",
        "SELECT * FROM IDENTIFIER(session.x)",
        "SELECT * FROM IDENTIFIER(system.session.x)",
    ],
}

# Statements that Spark reads as harmless (though another reader would see an attack in some of
# them), with what they answer: a refusal is allowed too, in one line, but no other answer. They
# run between the hostile ones, on the same connection: the session goes on after refusals.
ANSWERED: list[tuple[str, list[tuple[Any, ...]]]] = [
    ("SELECT count(*) FROM a.t", [(A_ROWS,)]),
    # Spark continues a `--` comment over a backslash-newline, and over `\\` + newline
    ("SELECT count(*) FROM a.t -- \\\nUNION ALL SELECT count(*) FROM b.t", [(A_ROWS,)]),
    ("SELECT count(*) FROM a.t -- \\\\\nUNION ALL SELECT count(*) FROM b.t", [(A_ROWS,)]),
    ("SELECT 1 -- \\\n; SELECT count(*) FROM b.t", [(1,)]),
    # bracketed comments nest in Spark's lexer: the outer one ends at the last `*/`
    ("SELECT count(*) FROM a.t /* /* */ UNION ALL SELECT count(*) FROM b.t */", [(A_ROWS,)]),
    ("SELECT count(*) FROM a.t /* */ -- */ UNION ALL SELECT count(*) FROM b.t", [(A_ROWS,)]),
    # quotes inside comments, and comment marks inside strings, are not what they look like
    ("SELECT count(*) AS n FROM a.t -- ' UNION ALL SELECT count(*) FROM b.t -- '", [(A_ROWS,)]),
    ("SELECT count(*) FROM a.t WHERE '\\' UNION ALL SELECT count(*) FROM b.t --' <> ''", [(A_ROWS,)]),
    ('SELECT count(*) FROM a.t WHERE "x" <> "b.t"', [(A_ROWS,)]),
    ("SELECT count(*) FROM `a`.`t` WHERE '\U0001f600' <> '; SELECT * FROM b.t'", [(A_ROWS,)]),
    ("SELECT /*+ BROADCAST(b.t) */ count(*) FROM a.t", [(A_ROWS,)]),
    ("SELECT count(*) FROM a.t;;;", [(A_ROWS,)]),
    # a table read inside a WITH clause's definition is staged as any other (version 1: 5 rows)
    ("WITH c AS (SELECT * FROM a.t VERSION AS OF 1) SELECT count(*) FROM c", [(5,)]),
    ("SELECT count(*) FROM a.t -- \\", [(A_ROWS,)]),
    # ${…} is text, never substituted
    (f"SELECT '${{env:{SECRET_VARIABLE}}}'", [(f"${{env:{SECRET_VARIABLE}}}",)]),
    (f"SELECT count(*) FROM a.t WHERE msg = '${{env:{SECRET_VARIABLE}}}'", [(0,)]),
    # from_xml's parser loads no external entity: the watched file is not read
    (f"SELECT from_xml('{XXE.replace('&e;', '<b>&e;</b>')}', 'b STRING')", [('{"b":null}',)]),
    # listings hold only what the token may read; a namespace it may not read lists nothing
    ("SHOW SCHEMAS", [("a",)]),
    ("SHOW TABLES", [("a", "t", "table")]),
    ("SHOW TABLES IN b", []),
    ("SHOW TABLES FROM `B`", []),
    ("USE a; SHOW TABLES", [("a", "t", "table")]),
    ("SELECT count(*) FROM a.t", [(A_ROWS,)]),
]


# -- the generated corpus --------------------------------------------------------------------------

# Hostile payloads, tokens separated by single spaces ({b}: a spelling of b's table; {r}: a call
# of a function that calls Java): hostile in any reading that keeps their tokens.
_PAYLOADS = [
    "SELECT * FROM {b}",
    "SELECT count(*) FROM a.t UNION ALL SELECT count(*) FROM {b}",
    "SELECT id FROM a.t WHERE id IN ( SELECT id FROM {b} )",
    "SELECT x.id FROM a.t x JOIN {b} y ON x.id = y.id",
    "SELECT * FROM a.t WHERE EXISTS ( SELECT 1 FROM {b} )",
    "WITH t AS ( SELECT * FROM {b} ) SELECT * FROM t",
    "SELECT {r}",
    "SELECT id FROM a.t ORDER BY {r}",
    "SELECT transform( array(1), x -> {r} )",
    "SELECT /*+ REPARTITION( {r} ) */ id FROM a.t",
    "SELECT 1 ; SELECT * FROM {b}",
    "BEGIN SELECT {r} ; END",
    "SELECT TRANSFORM( id ) USING 'id' FROM a.t",
    "INSERT INTO {b} SELECT * FROM a.t",
    "DROP TABLE {b}",
    "SELECT * FROM parquet.`<b>`",
    "CREATE TEMPORARY VIEW v USING parquet OPTIONS ( path '<b>' )",
    "INSERT OVERWRITE DIRECTORY '<canary>' SELECT 1",
    "EXPLAIN SELECT * FROM {b}",
    "DESCRIBE {b}",
    "SET spark.sql.runSQLOnFiles=true",
    "ADD JAR '<canary>/x.jar'",
    "USE b ; SELECT 1",
    "SELECT * FROM read_files( '<b>' )",
]
_B_SPELLINGS = ["b.t", "B.T", "`b`.`t`", "b.`t`", "`B`.t", "spark_catalog.b.t", "b . t", "b.mirror"]
_R_SPELLINGS = [
    f"reflect({CHMOD})", f"`REFLECT`({CHMOD})", f"java_method({GETENV})", f"Try_Reflect({JVM})",
    f"system.builtin.reflect({MKDIR})", f"IDENTIFIER('reflect')({JVM})",
]  # fmt: skip
# What may stand between two tokens: Spark reads each as a separator, other readers may not
_NOISE = [
    " ", "  ", "\t", "\n", "\r", "\r\n", "\f", "/**/", " /* c */ ", " /* /* nested */ */ ", " /* ' */ ",
    ' /* " */ ', " /* ; */ ", " /* \U0001f600 */ ", " -- c\n", " -- c\r", " -- c\r\n", " -- c \\\n more\n",
    " --\\\n\\\n x\n", " -- ' ; SELECT 1\n", " -- */\n", " /* -- */ ",
]  # fmt: skip
_WRAPPERS = [
    "{}", "{} ;", "{};;", " ; {}", "/* ' */ {}", "{} -- '", "-- c\r{}", "/* /* */ */ {}", "{} /* ; */",
    "{} -- \\", "/*/**/*/{}", "-- \\\n\n{}", "\n\n{}\n\n", "{} /* */ ;",
]  # fmt: skip


def generated(count: int = 200, seed: int = 44) -> list[str]:
    """``count`` distinct statements, each a hostile payload with lexer noise between its tokens,
    keywords in random case and a random wrapper; deterministic for a ``seed``."""
    rng = random.Random(seed)
    out: dict[str, None] = {}
    while len(out) < count:
        payload = rng.choice(_PAYLOADS).format(b=rng.choice(_B_SPELLINGS), r=rng.choice(_R_SPELLINGS))
        tokens = [_random_case(rng, t) for t in payload.split(" ")]
        text = tokens[0] + "".join(rng.choice(_NOISE) + t for t in tokens[1:])
        out.setdefault(rng.choice(_WRAPPERS).format(text), None)
    return list(out)


def _random_case(rng: random.Random, token: str) -> str:
    if not token.isalpha() or rng.random() < 0.5:
        return token
    return "".join(c.upper() if rng.random() < 0.5 else c.lower() for c in token)


GENERATED = [s for s in generated() if not any(s in stmts for stmts in CORPUS.values())]


# -- connection settings -----------------------------------------------------------------------------

CONFIGURATIONS: list[dict[str, str]] = [
    # use:database checked as USE: b by every spelling, and what is no namespace name
    {"use:database": "b"}, {"use:database": "B"}, {"use:database": "`b`"}, {"use:database": "`B`"},
    {"use:database": "spark_catalog.b"}, {"use:database": "spark_catalog.a"}, {"use:database": "a.b"},
    {"use:database": "`a.b`"}, {"use:database": "`a`.`b`"}, {"use:database": "evil.APP"},
    {"use:database": f"${{env:{SECRET_VARIABLE}}}"}, {"use:database": f"`${{env:{SECRET_VARIABLE}}}`"},
    {"use:database": "${system:user.name}"}, {"use:database": "a; SELECT 1"},
    {"use:database": "a;DROP TABLE b.t"}, {"use:database": ""}, {"use:database": " "}, {"use:database": "zz"},
    {"use:database": "global_temp"}, {"use:database": "b@a"}, {"use:database": "`b\n`"},
    {"use:database": "a\x00"}, {"use:database": "\U0001f600"}, {"use:database": "_staging"},
    {"use:database": "spark_catalog"}, {"use:database": "`b`;"}, {"use:database": "b -- a"},
    # settings, variables and catalogs: refused whole, whatever they are
    {"set:hiveconf:spark.sql.runSQLOnFiles": "true"}, {"set:hiveconf:spark.sql.variable.substitute": "true"},
    {
        "set:hiveconf:spark.sql.catalog.evil": "org.apache.spark.sql.execution.datasources.v2.jdbc."
        "JDBCTableCatalog",
        "set:hiveconf:spark.sql.catalog.evil.url": "jdbc:derby:<canary>;create=true",
        "use:database": "evil.APP",
    },
    {"set:hiveconf:spark.sql.catalog.spark_catalog": "org.apache.spark.sql.execution.datasources.v2.jdbc."
     "JDBCTableCatalog"},
    {"set:hiveconf:spark.sql.defaultCatalog": "evil"}, {"set:hiveconf:spark.sql.extensions": "x"},
    {"set:hiveconf:spark.sql.ansi.enabled": "false"}, {"set:hivevar:x": "b.t"},
    {"set:hivevar:t": "b.t", "use:database": "a"}, {"set:system:user.name": "x"}, {"set:env:X": "y"},
    {"set:hiveconf:hive.server2.proxy.user": "root"}, {"hive.server2.proxy.user": USER},
    {"USE:database": "a"}, {"use:Database": "a"}, {"use:database ": "a"},
    {"set:hiveconf:HIVE.server2.thrift.resultset.default.fetch.size": "1000"},
    {"set:hiveconf:hive.server2.thrift.resultset.default.fetch.size ": "1000"},
    {"set:hiveconf:hive.server2.thrift.resultset.default.fetch.size": "1000", "use:database": "b"},
    {"set:hiveconf:hive.server2.thrift.resultset.default.fetch.size": "1000",
     "set:hiveconf:spark.sql.runSQLOnFiles": "true"},
    {"set:hiveconf:spark.sql.warehouse.dir": "<canary>"},
    {"set:hiveconf:hive.metastore.warehouse.dir": "<canary>"},
    {"set:hiveconf:spark.sql.legacy.setCommandRejectsSparkCoreConfs": "false"},
    {"set:hiveconf:spark.sql.thriftserver.scheduler.pool": "x"}, {"set:hiveconf:mapred.job.queue.name": "x"},
    {"set:hiveconf:spark.sql.session.timeZone": f"${{env:{SECRET_VARIABLE}}}"},
    {"x": "y"}, {"": ""}, {"set:": ""}, {"set:hiveconf:": "x"}, {"use:catalog": "evil"},
    {"use:database": "a", "x": "1"}, {"kyuubi.engine.share.level": "USER"},
    {"hive.server2.thrift.resultset.default.fetch.size": "1000"}, {"set:hiveconf:hive.exec.pre.hooks": "x"},
    {"set:hiveconf:spark.hadoop.fs.file.impl": "x"}, {"set:hiveconf:spark.sql.sources.default": "text"},
    # a proxy user other than the login: Hive's Thrift service checks it itself, and answered
    # with its Java stack (16 infoMessages) at 65cc6b8
    {"hive.server2.proxy.user": "root"}, {"hive.server2.proxy.user": LOCAL_USER},
    {"hive.server2.proxy.user": "b", "use:database": "a"},
]  # fmt: skip

# Connection settings Spark reads as harmless (namespace a): the session opens. (PyHive sends
# USE `default` once it is open, so what use:database chose does not outlive the connect.)
OPENED = [
    {"use:database": "a"},
    {"use:database": "A -- b"},
    {"use:database": "/* b */ a"},
    {"use:database": "`a`", "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size": "1000"},
]


# -- the server ------------------------------------------------------------------------------------


@dataclass
class Attacked:
    """The served warehouse and what the corpus must leave as it is, or never see."""

    catalog: Catalog
    info: ServerInfo
    token: str
    paths: dict[str, str]  # placeholder → path
    watched: Path
    canary: Path
    b_rows: Any  # b.t's rows read by delta-rs before any attack
    versions: dict[str, int] = field(default_factory=dict)  # table → Delta version before any attack
    never_told: dict[str, str] = field(default_factory=dict)  # what no error may contain → why

    def fill(self, text: str) -> str:
        for placeholder, path in self.paths.items():
            text = text.replace(placeholder, path)
        return text

    def connect(self, configuration: dict[str, str] | None = None) -> Any:
        from pyhive import hive

        return hive.connect(
            host=self.info.host,
            port=self.info.port,
            username=USER,
            password=self.token,
            auth="CUSTOM",
            configuration={k: self.fill(v) for k, v in configuration.items()} if configuration else None,
        )


def _rows(ids: range, ts: str, msg: str) -> bytes:
    return jsonl([{"id": i, "ts": ts, "msg": msg.format(i)} for i in ids])


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Attacked]:
    """``a.t``: version 0 empty, 1 with ids 0–4, 2 with ids 5–7; ``b.t``: ids 0–2, each message
    holding a random marker; ``b.mirror``: a link to ``a.t``; a token ``reader`` with ``read:a``;
    served by ``streampart sql-server`` with a random secret in its environment."""
    from deltalake import DeltaTable

    from ingest.chunks import ChunkWriter
    from ingest.formats import Format

    root = tmp_path_factory.mktemp("attacks")
    warehouse = root / "warehouse"
    catalog = Catalog.open(warehouse)
    a, b = make_table(catalog, "a.t"), make_table(catalog, "b.t")
    marker, env_secret = f"bsecret{secrets.token_hex(6)}", secrets.token_hex(12)
    ChunkWriter(catalog, a).write(_rows(range(5), "2026-11-21T10:15:00Z", "a{}"), Format.JSONL, key="a1")
    ChunkWriter(catalog, a).write(_rows(range(5, 8), "2026-11-21T11:15:00Z", "a{}"), Format.JSONL, key="a2")
    ChunkWriter(catalog, b).write(
        _rows(range(3), "2026-11-21T10:15:00Z", marker + "-{}"), Format.JSONL, key="b"
    )
    catalog.links.create(LinkSpec(name=TableName.parse("b.mirror"), source=TableName.parse("a.t")))
    token = new_token()
    catalog.store.create_token(USER, hash_token(token), [Scope.parse("read:a")])
    watched, canary = root / "watched", root / "canary"
    watched.write_text("watched\n")
    watched.chmod(0o644)
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env.update(
        {
            "STREAMPART_WAREHOUSE": str(warehouse),
            "STREAMPART_SPARK__SHUFFLE_PARTITIONS": "2",
            "STREAMPART_SPARK__DRIVER_MEMORY": "1g",
            "PYTHONPATH": str(ROOT),
            SECRET_VARIABLE: env_secret,
        }
    )
    try:
        with sql_server(warehouse, env, root / "server.log", timeout=240) as info:
            yield Attacked(
                catalog=catalog,
                info=info,
                token=token,
                paths={
                    "<watched>": str(watched),
                    "<canary>": str(canary),
                    "<b>": b.location,
                    "<a>": a.location,
                },
                watched=watched,
                canary=canary,
                b_rows=DeltaTable(b.location).to_pyarrow_table(),
                versions={t.location: DeltaTable(t.location).version() for t in (a, b)},
                never_told={
                    marker: "b's rows",
                    env_secret: "the server's environment",
                    info.secret: "the server's own secret",
                    token: "the token",
                    "uid=": "a program's output",
                    "\tat ": "a Java stack",
                    ".java:": "a Java stack",
                    "== SQL ==": "the statement echoed with a plan",
                    "Relation [": "a plan",
                    "+- ": "a plan",
                    "__sp_": "the snapshot frame's columns",
                },
            )
    finally:
        catalog.close()


def _cursor_of(attacked: Attacked) -> Iterator[Any]:
    """A cursor of a new connection, closed after."""
    conn = attacked.connect()
    try:
        yield conn.cursor()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def cursor(attacked: Attacked) -> Iterator[Any]:
    """One connection for every statement of the corpus."""
    yield from _cursor_of(attacked)


def _status(exc: Exception) -> Any:
    return exc.args[0].status


def _assert_one_line(attacked: Attacked, status: Any, what: str, sent: str | None = None) -> None:
    """A refusal as a client should see it: one line, telling nothing it should not — but for a
    syntax error in the statement ``sent``, whose line is followed by a line of that statement (the
    client's own text, as sent) and a caret line under where Spark's parser stopped."""
    message, info = status.errorMessage or "", list(status.infoMessages or [])
    assert message.strip(), f"{what}: refused without a reason"
    lines = message.split("\n")
    echoed = lines[1].removeprefix("  ").removeprefix("…").removesuffix("…") if len(lines) == 3 else ""
    picture = (
        len(lines) == 3
        and sent is not None
        and echoed in sent
        and lines[2].strip(" \t") == "^" * (len(lines[2].strip(" \t")) or 1)
    )
    if not picture:
        assert "\n" not in message, f"{what}: the refusal is several lines: {message!r}"
    assert len(info) <= 1, f"{what}: the refusal carries {len(info)} info messages: {info[:3]!r}"
    told = " ".join([message, *info])
    if picture:
        told = told.replace(echoed, "")  # the client's own text, told back to it
    for secret, why in attacked.never_told.items():
        assert secret not in told, f"{what}: the refusal tells {why}: {told[:300]!r}"


def _refused(attacked: Attacked, cursor: Any, statement: str) -> None:
    from pyhive.exc import OperationalError

    what = f"statement {statement!r}"
    try:
        cursor.execute(attacked.fill(statement))
        rows = cursor.fetchall()
    except OperationalError as exc:
        _assert_one_line(attacked, _status(exc), what, attacked.fill(statement))
        return
    pytest.fail(f"{what} was not refused: it answered {rows[:5]!r}")


def _cases(classes: dict[str, list[str]]) -> list[Any]:
    return [
        pytest.param(s, id=f"{name}-{i:03d}") for name, stmts in classes.items() for i, s in enumerate(stmts)
    ]


# -- the corpus ------------------------------------------------------------------------------------


def test_the_corpus_is_large_and_every_class_has_cases() -> None:
    sizes = {name: len(stmts) for name, stmts in CORPUS.items()}
    sizes["generated"] = len(GENERATED)
    sizes["configurations"] = len(CONFIGURATIONS)
    assert all(sizes.values()), sizes
    hostile = {s for stmts in CORPUS.values() for s in stmts} | set(GENERATED)
    assert len(hostile) + len(CONFIGURATIONS) >= 300, sizes
    assert sum(sizes.values()) == len(hostile) + len(CONFIGURATIONS), "a case is in the corpus twice"


@pytest.mark.parametrize("statement", _cases(CORPUS))
def test_a_hostile_statement_is_refused_in_one_line(attacked: Attacked, cursor: Any, statement: str) -> None:
    _refused(attacked, cursor, statement)


@pytest.mark.parametrize("statement", _cases({"generated": GENERATED}))
def test_a_generated_hostile_statement_is_refused_in_one_line(
    attacked: Attacked, cursor: Any, statement: str
) -> None:
    _refused(attacked, cursor, statement)


@pytest.mark.parametrize(
    "statement,expected", ANSWERED, ids=[f"answered-{i:03d}" for i in range(len(ANSWERED))]
)
def test_a_statement_spark_reads_as_harmless_answers_as_that_reading(
    attacked: Attacked, cursor: Any, statement: str, expected: list[tuple[Any, ...]]
) -> None:
    from pyhive.exc import OperationalError

    try:
        cursor.execute(attacked.fill(statement))
        rows = cursor.fetchall()
    except OperationalError as exc:
        _assert_one_line(attacked, _status(exc), f"statement {statement!r}", attacked.fill(statement))
        return
    assert [tuple(r) for r in rows] == expected, f"statement {statement!r} answered {rows[:5]!r}"


@pytest.mark.parametrize(
    "configuration", CONFIGURATIONS, ids=[f"configuration-{i:03d}" for i in range(len(CONFIGURATIONS))]
)
def test_a_hostile_connection_setting_is_refused_in_one_line(
    attacked: Attacked, configuration: dict[str, str]
) -> None:
    from pyhive.exc import OperationalError

    what = f"connection settings {configuration!r}"
    try:
        conn = attacked.connect(configuration)
    except OperationalError as exc:
        _assert_one_line(attacked, _status(exc), what)
        return
    conn.close()
    pytest.fail(f"{what} were not refused: a session opened")


@pytest.mark.parametrize("configuration", OPENED, ids=[f"opened-{i}" for i in range(len(OPENED))])
def test_a_harmless_connection_setting_opens_a_session(
    attacked: Attacked, configuration: dict[str, str]
) -> None:
    conn = attacked.connect(configuration)
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT count(*) FROM a.t")
        assert cursor.fetchall() == [(A_ROWS,)], configuration
    finally:
        conn.close()


def test_the_corpus_changed_nothing(attacked: Attacked, cursor: Any) -> None:
    """After every case above (pytest runs a module's tests in order): the watched file, the canary
    directory and both tables are as they were, and the session still answers."""
    from deltalake import DeltaTable

    assert stat.S_IMODE(attacked.watched.stat().st_mode) == 0o644, "the watched file's mode changed"
    assert attacked.watched.read_text() == "watched\n", "the watched file changed"
    assert not attacked.canary.exists(), f"the canary {attacked.canary} was made"
    assert not list(attacked.canary.parent.glob("canary*")), "something was made beside the canary"
    for location, version in attacked.versions.items():
        assert DeltaTable(location).version() == version, f"{location} got a new version"
    b = DeltaTable(attacked.paths["<b>"]).to_pyarrow_table()
    assert b.sort_by("id").equals(attacked.b_rows.sort_by("id")), "b.t's rows changed"
    cursor.execute("SELECT count(*) FROM a.t")
    assert cursor.fetchall() == [(A_ROWS,)]


# -- the property: what an accepted statement reads is exactly the staged snapshots ----------------

_A_NAMES = ["a.t", "A.T", "`a`.`t`", "a.`t`", "`A`.t"]
_A_SHORT = ["t", "T", "`t`"]  # after USE a
_B_READS = ["b.t", "B.t", "`b`.`t`", "b.T", "b.mirror"]
_VERSIONS = (0, 1, 2)  # a.t's versions
# Between two tokens: mostly a space; comments, a `--` comment continued over a backslash-newline
# (naming b.t: text Spark never reads), carriage returns
_SEPARATORS = [" "] * 8 + [
    "\n", "\r", "\r\n", "\t", "/**/", " /* c */ ", " /* /* n */ */ ", " /* b.t ; */ ", " -- c\n",
    " -- c \\\n SELECT * FROM b.t\n", " -- ; b.t\r",
]  # fmt: skip
_ENDINGS = ["", ";", " ;", ";;", " ; /* */ ;", " -- end", "\n;\n"]

Token = tuple[str, str]  # (what the server is sent, what the oracle runs)


@dataclass(frozen=True)
class Drawn:
    """A statement for the server and its copy for the oracle: the same tokens and noise, but for
    ``a.t VERSION AS OF n``, which the oracle reads as its table ``a.t__vN``."""

    use: bool  # the statement begins with `USE a;` (the oracle runs USE a first)
    server: str
    oracle: str

    def __repr__(self) -> str:
        return f"Drawn(server={self.server!r})"


def _plain(*words: str) -> list[Token]:
    return [(w, w) for w in words]


@st.composite
def _table(draw: st.DrawFn, use: bool) -> list[Token]:
    if draw(st.integers(0, 3)) == 0:  # namespace b: the oracle has no such table
        name = draw(st.sampled_from(_B_READS))
        if draw(st.booleans()):
            v = str(draw(st.sampled_from(_VERSIONS)))
            return [(name, f"{name}__v{v}"), ("VERSION", ""), ("AS", ""), ("OF", ""), (v, "")]
        return _plain(name)
    name = draw(st.sampled_from(_A_NAMES + (_A_SHORT if use else [])))
    if draw(st.integers(0, 2)) == 0:
        v = str(draw(st.sampled_from(_VERSIONS)))
        return [(name, f"a.`t__v{v}`"), ("VERSION", ""), ("AS", ""), ("OF", ""), (v, "")]
    return _plain(name)


@st.composite
def _filter(draw: st.DrawFn, use: bool) -> list[Token]:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        return _plain("WHERE", "id", draw(st.sampled_from([">", "<=", "<>"])), str(draw(st.integers(-1, 8))))
    if kind == 1:
        return _plain("WHERE", "msg", "LIKE", draw(st.sampled_from(["'a%'", "'%1'", "'b%'"])))
    if kind == 2:
        return [*_plain("WHERE", "id", "IN", "(", "SELECT", "id", "FROM"), *draw(_table(use)), *_plain(")")]
    if kind == 3:
        return [*_plain("WHERE", "EXISTS", "(", "SELECT", "1", "FROM"), *draw(_table(use)), *_plain(")")]
    if kind == 4:
        return [
            *_plain("WHERE", "id", "=", "(", "SELECT", "max(id)", "FROM"),
            *draw(_table(use)),
            *_plain(")"),
        ]
    return []


@st.composite
def _core(draw: st.DrawFn, use: bool, depth: int) -> list[Token]:
    """A query whose columns are (id, msg)."""
    if depth > 0 and draw(st.integers(0, 3)) == 0:
        source = [
            *_plain("("),
            *draw(_query(use, depth - 1)),
            *_plain(")", draw(st.sampled_from(["s", "u"]))),
        ]
    else:
        source = draw(_table(use))
    return [*_plain("SELECT", "id", ",", "msg", "FROM"), *source, *draw(_filter(use))]


@st.composite
def _query(draw: st.DrawFn, use: bool, depth: int) -> list[Token]:
    kind = draw(st.integers(0, 7))
    if kind in (0, 1):
        return draw(_core(use, depth))
    if kind == 2:  # a set operation
        op = draw(st.sampled_from([("UNION", "ALL"), ("UNION",), ("INTERSECT",), ("EXCEPT",)]))
        return [*draw(_core(use, depth)), *_plain(*op), *draw(_core(use, depth))]
    if kind == 3:  # a join
        left, right = draw(_table(use)), draw(_table(use))
        return [*_plain("SELECT", "x.id", ",", "y.msg", "FROM"), *left, *_plain("x", "JOIN"), *right,
                *_plain("y", "ON", "x.id", "=", "y.id")]  # fmt: skip
    if kind == 4:  # a common table expression, named like the table or not
        name = draw(st.sampled_from(["c", "t", "T"]))
        return [*_plain("WITH", name, "AS", "("), *draw(_core(use, depth)), *_plain(")", "SELECT", "id", ",",
                "msg", "FROM", name), *draw(_filter(use))]  # fmt: skip
    if kind == 5:  # a CTE named like the table, over no table
        return _plain("WITH", "t", "AS", "(", "SELECT", "7", "AS", "id", ",", "'c'", "AS", "msg", ")",
                      "SELECT", "id", ",", "msg", "FROM", "t")  # fmt: skip
    if kind == 6:  # a subquery in FROM
        return [*_plain("SELECT", "id", ",", "msg", "FROM", "("), *draw(_core(use, depth)), *_plain(")", "z")]
    return [*draw(_core(use, depth)), *_plain("UNION", "ALL"), *draw(_core(use, depth))]


@st.composite
def statements(draw: st.DrawFn) -> Drawn:
    use = draw(st.booleans())
    tokens = draw(_query(use, 1))
    if draw(st.booleans()):  # an aggregate over it
        shape = draw(st.sampled_from([("count(*)", ",", "sum(id)"), ("max(msg)", ",", "count(DISTINCT id)")]))
        tokens = [*_plain("SELECT", *shape, "FROM", "("), *tokens, *_plain(")", "q")]
    server, oracle = [tokens[0][0]], [tokens[0][1]]
    for said, run in tokens[1:]:
        gap = draw(st.sampled_from(_SEPARATORS))
        server.append(gap + said)
        oracle.append(gap + run)
    ending = draw(st.sampled_from(_ENDINGS))
    use_first = ""  # the oracle runs USE a itself
    if use:
        gaps = [draw(st.sampled_from(_SEPARATORS)) for _ in range(3)]
        use_first = f"USE{gaps[0]}a{gaps[1]};{gaps[2]}"
    return Drawn(use, use_first + "".join(server) + ending, "".join(oracle) + ending)


@dataclass
class PlainSpark:
    """Plain Spark over delta-rs' reads of a.t (each version as ``a.t__vN``); b is not registered."""

    session: Any
    version: int  # a.t's newest version, which a.t names

    def run(self, drawn: Drawn) -> tuple[list[str], list[tuple[Any, ...]]]:
        from tests.differential.oracle import spark_rows

        self.session.sql(f"USE {'a' if drawn.use else 'default'}")
        return spark_rows(self.session.sql(drawn.oracle))


@pytest.fixture(scope="module")
def plain_spark(
    attacked: Attacked, spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[PlainSpark]:
    """Spark's session catalog is shared by every session of this process: database ``a`` exists
    only while this module's property test runs (as in tests/differential/oracle.py)."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    root = tmp_path_factory.mktemp("plain-spark")
    location = attacked.paths["<a>"]
    newest = DeltaTable(location).version()
    assert newest == max(_VERSIONS)
    session = spark.newSession()
    session.sql(f"CREATE DATABASE a LOCATION '{root / 'a.db'}'")
    try:
        for version in (None, *_VERSIONS):
            dt = DeltaTable(location, version=version) if version is not None else DeltaTable(location)
            rows = dt.to_pyarrow_table()
            partitions = list(dt.metadata().partition_columns)
            rows = rows.select([c for c in rows.column_names if c not in partitions] + partitions)
            name = "t" if version is None else f"t__v{version}"
            (root / name).mkdir()
            pq.write_table(rows, root / name / "part-00000.parquet")
            session.sql(f"CREATE TABLE a.`{name}` USING parquet LOCATION '{root / name}'")
        yield PlainSpark(session, newest)
    finally:
        session.sql("USE default")
        session.sql("DROP DATABASE IF EXISTS a CASCADE")


_OUTCOMES: list[str] = []  # "accepted" or "refused", per example the property test ran


@pytest.fixture(scope="module")
def property_cursor(attacked: Attacked) -> Iterator[Any]:
    """A connection of its own: the corpus's may have changed its session (a USE, say)."""
    yield from _cursor_of(attacked)


@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,  # the same 60 statements on every run (CI is reproducible)
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn=statements())
def test_what_an_accepted_statement_reads_is_exactly_the_staged_snapshots(
    attacked: Attacked, property_cursor: Any, plain_spark: PlainSpark, drawn: Drawn
) -> None:
    """A refusal is one line; an accepted statement answers what plain Spark answers over exactly
    the rows delta-rs reads of a.t at the versions it names, where b.t does not exist: had the
    server read b.t, a file or anything but the staged snapshots, the answers would differ (or the
    oracle fail)."""
    from pyhive.exc import OperationalError

    from tests.differential.oracle import Answer, answer, difference, normalise

    try:
        property_cursor.execute(drawn.server)
        rows = property_cursor.fetchall()
    except OperationalError as exc:
        _assert_one_line(attacked, _status(exc), f"statement {drawn.server!r}", drawn.server)
        _OUTCOMES.append("refused")
        event("refused")  # --hypothesis-show-statistics counts them
        return
    _OUTCOMES.append("accepted")
    event("accepted")
    columns = [d[0] for d in property_cursor.description or []]
    ours = Answer(columns, [tuple(normalise(v) for v in r) for r in rows], None, 0.0)
    truth = answer(lambda: plain_spark.run(drawn))
    assert difference(ours, truth, names=False) is None, (
        f"statement {drawn.server!r} (the oracle's: {drawn.oracle!r}): {difference(ours, truth, names=False)}"
    )


def test_the_property_test_saw_both_answers_and_refusals() -> None:
    """Neither side of the property is vacuous: the grammar makes statements the server accepts
    (over a.t only) and statements it refuses (b.t among them)."""
    accepted, refused = _OUTCOMES.count("accepted"), _OUTCOMES.count("refused")
    assert accepted >= 10 and refused >= 10, (accepted, refused)


def test_a_table_read_only_inside_a_common_table_expression_is_answered(cursor: Any) -> None:
    """At 65cc6b8 this was refused: Reading visited a plan's children and subqueries, not a WITH
    clause's definitions, so their tables were never staged."""
    cursor.execute("WITH c AS (SELECT * FROM a.t) SELECT count(*) FROM c")
    assert cursor.fetchall() == [(A_ROWS,)]

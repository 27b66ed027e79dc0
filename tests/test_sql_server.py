"""``streampart sql-server``: a real server process, real HiveServer2 clients (PyHive, beeline).

One server per module (it costs a JVM): it serves a warehouse whose tables the tests write and
roll from other processes, and every answer is checked against delta-rs reading the table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark
import pytest

from ingest.api.auth import hash_token, new_token
from metastore.catalog import Catalog
from metastore.links import LinkSpec
from metastore.models import Scope, TableName
from streampart.sql_client import Connection, Target
from streampart.sql_endpoint import LOCAL_USER, ServerInfo
from tests.fixtures import make_table
from tests.helpers import ROOT, all_ids, records, sql_server, wait_for, worker_call
from tests.private_pg import free_port
from tests.test_keyed import jsonl, keyed_table

pytestmark = pytest.mark.spark  # every test here starts `streampart sql-server` (Spark) or its CLI client

PYSPARK_BIN = Path(pyspark.__file__).parent / "bin"


@dataclass
class Served:
    catalog: Catalog
    info: ServerInfo
    env: dict[str, str]
    tokens: dict[str, str]  # name → token
    # what logins with a valid token were told while the server started (see _Logins)
    refused_while_starting: list[str] = field(default_factory=list)

    def connect(self, user: str, password: str | None = None) -> Connection:
        return Connection(Target(self.info.host, self.info.port, user, password or self.tokens[user]))


_PEOPLE = [
    {"id": 1, "ts": "2026-11-21T10:00:00Z", "v": 10, "op": "c", "lsn": 1},
    {"id": 2, "ts": "2026-11-21T10:00:00Z", "v": 20, "op": "c", "lsn": 2},
    {"id": 1, "ts": "2026-11-21T10:00:00Z", "v": 11, "op": "u", "lsn": 3},
    {"id": 2, "ts": "2026-11-21T10:00:00Z", "v": 0, "op": "d", "lsn": 4},
    {"id": 1, "ts": "2026-11-21T10:00:00Z", "v": 9, "op": "u", "lsn": 2},  # older: arrives late, loses
    {"id": 3, "ts": "2026-11-21T10:00:00Z", "v": 30, "op": "c", "lsn": 5},
]


def _token(catalog: Catalog, name: str, *scopes: str) -> str:
    token = new_token()
    catalog.store.create_token(name, hash_token(token), [Scope.parse(s) for s in scopes])
    return token


def _cli_env(warehouse: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    return {
        **env,
        "STREAMPART_WAREHOUSE": str(warehouse),
        "STREAMPART_SPARK__SHUFFLE_PARTITIONS": "2",
        "STREAMPART_SPARK__DRIVER_MEMORY": "1g",
        "PYTHONPATH": str(ROOT),
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A warehouse with shop.events (rolls every 2 s), a link mirror.events to it (streaming partitions
    too), shop.quiet and hr.pay, served by
    ``streampart sql-server`` (freshness 1 s) on a free loopback port."""
    root = tmp_path_factory.mktemp("sqlserver")
    warehouse = root / "warehouse"
    catalog = Catalog.open(warehouse)
    make_table(catalog, "shop.events", roll_every="2s")
    quiet = make_table(catalog, "shop.quiet")
    make_table(catalog, "hr.pay")
    catalog.links.create(
        LinkSpec(
            name=TableName.parse("mirror.events"),
            source=TableName.parse("shop.events"),
            include_streaming=True,
        )
    )
    from ingest.chunks import ChunkWriter
    from ingest.config import ChunkConfig
    from ingest.formats import Format

    ChunkWriter(catalog, quiet, ChunkConfig()).write(records(range(5)), Format.JSONL, key="q0")
    people = keyed_table(catalog, "hr.people", sequence=True)  # one row per key, merged on read
    ChunkWriter(catalog, people).write(jsonl(_PEOPLE[:3]), Format.JSONL)
    tokens = {
        "analyst": _token(catalog, "analyst", "read:shop", "read:mirror"),
        "hr": _token(catalog, "hr", "read:hr"),
        "writer": _token(catalog, "writer", "write:shop"),
    }
    env = {
        **_cli_env(warehouse),
        "STREAMPART_SQLSERVER__FRESHNESS": "1s",
        # failed logins answered after 0.1 s, doubled per recent failure up to 1 s
        "STREAMPART_SERVER__LOGIN_DELAY": "100ms",
        "STREAMPART_SERVER__LOGIN_DELAY_MAX": "1s",
    }
    port = free_port()
    logins = _Logins(Target("127.0.0.1", port, "analyst", tokens["analyst"]))  # from the start
    try:
        with sql_server(warehouse, env, root / "server.log", timeout=180, port=port) as info:
            logins.stop()
            yield Served(catalog, info, env, tokens, logins.refused)
    finally:
        logins.stop()
        catalog.close()
    assert not (warehouse / ".sql-server.json").exists(), "the server left its file behind"


class _Logins:
    """Logins with a valid token, one after another from before the server starts listening until
    it is up: what each was told, but for "nothing listens" (it was not listening yet)."""

    def __init__(self, target: Target) -> None:
        import threading

        from streampart.sql_client import SqlServerUnavailableError

        self.refused: list[str] = []
        self._stop = threading.Event()

        def run() -> None:
            while not self._stop.wait(0.02):
                try:
                    Connection(target).close()
                except SqlServerUnavailableError as exc:
                    if "nothing listens" not in str(exc):
                        self.refused.append(f"{type(exc).__name__}: {exc}")
                except Exception as exc:
                    self.refused.append(f"{type(exc).__name__}: {exc}")

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _versions_of(table, answers_from: int) -> Iterator[tuple[int, list[int]]]:
    """Each version of ``table`` from the newest back to ``answers_from``, with its ids (delta-rs):
    an answer is at most the freshness old, so its version is found a few steps back."""
    from deltalake import DeltaTable

    newest = DeltaTable(table.location).version()
    for v in range(newest, answers_from - 1, -1):
        yield v, sorted(all_ids(table, v))


def test_every_answer_is_one_snapshot_while_writers_commit_and_partitions_roll(
    served: Served, tmp_path: Path
) -> None:
    """PyHive queries as a token with read:shop and read:mirror while a writer process commits and
    a roller process force-rolls every second: each answer is exactly the rows of one Delta version
    as delta-rs reads it (no row twice across a roll, none missing), the link in the same statement
    reads that same version, versions never go back, and the last commit is seen once the writers
    stop (freshness 1 s)."""
    table = served.catalog.table("shop.events")
    stop = tmp_path / "stop"
    common: dict[str, Any] = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE}
    writer = subprocess.Popen(
        **worker_call(
            served.catalog, table, "writer", "--rows", "5", "--until", str(stop), "--interval", "0.2"
        ),
        **common,
    )
    roller = subprocess.Popen(
        **worker_call(
            served.catalog, table, "roller", "--force", "--interval", "1", "--count", "1000",
            "--until", str(stop),
        ),
        **common,
    )  # fmt: skip
    matched: list[int] = []
    swept = 0
    try:
        with served.connect("analyst") as conn:
            while len(set(matched)) < 4 or swept < 2:
                assert writer.poll() is None and roller.poll() is None, "a worker stopped early"
                _, rows = conn.execute(
                    "SELECT 'table' AS side, id FROM shop.events "
                    "UNION ALL SELECT 'link', id FROM mirror.events"
                )
                sides: dict[str, list[int]] = {"table": [], "link": []}
                for side, i in rows:
                    sides[side].append(i)
                answer = sorted(sides["table"])
                assert len(set(answer)) == len(answer), "a row was read twice"
                assert sorted(sides["link"]) == answer, "the link was read at another version than its source"
                version = next(
                    (v for v, ids in _versions_of(table, matched[-1] if matched else 0) if ids == answer),
                    None,
                )
                assert version is not None, f"no version of shop.events holds exactly {len(answer)} rows read"
                matched.append(version)
                swept = sum(r.sweep_version is not None for r in served.catalog.store.list_rolls(table.id))
    finally:
        stop.touch()
        for proc in (writer, roller):
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
    assert matched == sorted(matched), "an answer went back to an older version"
    final = sorted(all_ids(table))
    with served.connect("analyst") as conn:
        wait_for(
            lambda: sorted(r[0] for r in conn.execute("SELECT id FROM shop.events")[1]) == final,
            "the last commit to be visible",
            timeout=30,
        )


def test_logins_scopes_and_statements_that_do_not_only_read_are_refused(served: Served) -> None:
    with pytest.raises(Exception, match="refused the login"):
        served.connect("analyst", "spt_not-a-token")
    with pytest.raises(Exception, match="refused the login"):
        served.connect("hr", served.tokens["analyst"])  # a token logs in under its own name only
    with served.connect("analyst") as conn:
        cases = {
            "SELECT * FROM hr.pay": "token 'analyst' may not read namespace 'hr' (needs read:hr)",
            "SELECT id FROM shop.events JOIN hr.pay USING (id)": "may not read namespace 'hr'",
            "INSERT INTO shop.quiet SELECT * EXCEPT (ts_period) FROM shop.quiet": "INSERT INTO: the SQL "
            "server only reads (SELECT, WITH …); INSERT INTO, CREATE TABLE … AS and ALTER TABLE … ADD "
            "COLUMNS run with `streampart query`",
            "ALTER TABLE shop.quiet ADD COLUMNS (c STRING)": "ALTER TABLE: the SQL server only reads",
            "ALTER TABLE shop.quiet DROP COLUMN msg": "ALTER TABLE: the SQL server only reads",
            "DROP TABLE shop.quiet": "DROP TABLE: the SQL server only reads",
            "CREATE TABLE shop.x AS SELECT 1 AS id": "CREATE TABLE: the SQL server only reads",
            "INSERT OVERWRITE shop.quiet SELECT * FROM shop.quiet": "INSERT OVERWRITE: the SQL server only",
            "SELECT * FROM parquet.`/etc`": "parquet./etc: queries read streampart tables",
            "SELECT * FROM global_temp.x": "global_temp",
            "SET spark.sql.runSQLOnFiles=true": "the SQL server only reads",
        }
        for statement, message in cases.items():
            with pytest.raises(Exception, match=message.replace("(", r"\(").replace(")", r"\)")):
                conn.execute(statement)
        # listings show what the token may read, from the catalog (Spark's catalog has none of it)
        assert list(conn.execute("SHOW SCHEMAS")[1]) == [("mirror",), ("shop",)]
        assert list(conn.execute("SHOW TABLES")[1]) == [
            ("mirror", "events", "link"),
            ("shop", "events", "table"),
            ("shop", "quiet", "table"),
        ]
        assert [r[:2] for r in conn.execute("DESCRIBE shop.quiet")[1]] == [
            ("id", "bigint"), ("ts", "timestamp"), ("msg", "string"), ("ts_period", "timestamp"),
        ]  # fmt: skip
        with pytest.raises(Exception, match="may not read namespace 'hr'"):
            conn.execute("DESCRIBE hr.pay")
        # the session goes on after a refusal; USE makes its tables readable by their short name
        list(conn.execute("USE shop")[1])
        assert list(conn.execute("SELECT count(*) FROM quiet")[1]) == [(5,)]
        shop = [("shop", "events", "table"), ("shop", "quiet", "table")]
        assert list(conn.execute("SHOW TABLES")[1]) == shop  # in the namespace of the USE
    with served.connect("hr") as conn:
        assert list(conn.execute("SELECT count(*) FROM hr.pay")[1]) == [(0,)]
    with served.connect("analyst") as conn:
        # a namespace the token may not read answers alike whether the table exists or not
        for missing in ("SELECT * FROM hr.nope", "SELECT * FROM HR.pay", "DESCRIBE hr.nope"):
            with pytest.raises(Exception, match="may not read namespace 'hr'"):
                conn.execute(missing)
    # a write token reads nothing (read:shop is not implied by write:shop)
    with served.connect("writer") as conn, pytest.raises(Exception, match="may not read namespace 'shop'"):
        conn.execute("SELECT * FROM shop.quiet")
    served.catalog.store.revoke_token("hr")
    with pytest.raises(Exception, match="refused the login"):
        served.connect("hr")


def test_beeline_from_the_pyspark_wheel_reads_a_table(served: Served) -> None:
    """beeline reads as analyst; its HiveServer2 metadata call (``!tables``) lists the snapshot view
    of its own statement only, not the one another session made of hr.pay."""
    local = Target(served.info.host, served.info.port, LOCAL_USER, served.info.secret)
    with Connection(local) as conn:
        assert list(conn.execute("SELECT count(*) FROM hr.pay")[1]) == [(0,)]
    done = subprocess.run(
        [
            str(PYSPARK_BIN / "beeline"),
            "-u",
            f"jdbc:hive2://{served.info.address}/shop",  # use:database=shop, checked as USE
            "-n",
            "analyst",
            "-p",
            served.tokens["analyst"],
            "--outputformat=csv2",
            "-e",
            "SELECT count(*) AS n, sum(id) AS s FROM quiet;",
            "-e",
            "!tables",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "SPARK_HOME"},
    )
    assert done.returncode == 0, done.stderr
    assert "n,s\n5,10\n" in done.stdout, done.stdout
    listed = done.stdout.split("n,s\n5,10\n", 1)[1]
    assert "hr" not in listed and "quiet" not in listed, listed  # Spark's catalog holds none of them


def _beeline(served: Served, user: str, password: str, *statements: str) -> subprocess.CompletedProcess[str]:
    """beeline (the Hive JDBC driver, from the pyspark wheel) as ``user``, running ``statements``."""
    url = f"jdbc:hive2://{served.info.address}/"
    return subprocess.run(
        [str(PYSPARK_BIN / "beeline"), "-u", url, "-n", user, "-p", password]
        + [arg for statement in statements for arg in ("-e", statement)],
        capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if k != "SPARK_HOME"},
    )  # fmt: skip


def test_a_syntax_error_points_at_the_token_spark_stopped_at_in_every_client(served: Served) -> None:
    """``SELEC 1`` was told with a caret under ``1`` (``streampart query`` without a server: sqlglot
    reads ``SELEC`` as a column and stops at ``1``), or with no picture at all (the SQL server: its
    first line only, and through beeline the refusal's Java class before it). Every client is now
    told Spark's line, where the token is in the text it sent (line and column from 1), and that
    line with a caret under the token."""
    from streampart.errors import QueryError

    selec = "[PARSE_SYNTAX_ERROR] Syntax error at or near 'SELEC' (line 1, column 1)\n  SELEC 1\n  ^^^^^"
    typed = "  SELECT count(*) FROM events@shop WHERE id = = 1"  # line 2, after a USE and a link
    second = typed.index("= =") + 2
    cases = {
        "SELEC 1": selec,
        "USE mirror;\n" + typed: (
            f"[PARSE_SYNTAX_ERROR] Syntax error at or near '=' (line 2, column {second + 1})\n"
            f"  {typed}\n  {' ' * second}^"
        ),
        "SELECT (1": "[PARSE_SYNTAX_ERROR] Syntax error at or near end of input (line 1, column 10)\n"
        "  SELECT (1\n           ^",
    }
    with served.connect("analyst") as conn:
        for statement, told in cases.items():
            with pytest.raises(QueryError) as failed:
                conn.execute(statement)
            assert str(failed.value) == f"query failed: {told}", (statement, str(failed.value))
        # a long line is shown around its caret, not whole
        long = "SELECT " + ", ".join(str(i) for i in range(300)) + " = = 1"
        with pytest.raises(QueryError) as failed:
            conn.execute(long)
        _, shown, caret = str(failed.value).splitlines()
        assert len(shown) < 110 and shown.startswith("  …"), shown
        assert shown[caret.index("^")] == "=" and shown[caret.index("^") - 2 :].startswith("= = 1"), (
            shown,
            caret,
        )
    # beeline: the same lines (its statements run asynchronously, answered by the operation's status)
    done = _beeline(served, "analyst", served.tokens["analyst"], "SELEC 1")
    assert f"Error: {selec} (state=42601,code=0)" in done.stdout + done.stderr, done.stdout + done.stderr
    assert "Refused" not in done.stdout + done.stderr
    # streampart query, through the server and in its own process (sqlglot, before Spark starts)
    for args in ([], ["--no-server"]):
        cli = subprocess.run(
            [sys.executable, "-m", "streampart", "query", *args, "SELEC 1"],
            capture_output=True, text=True, env=served.env, cwd=ROOT, timeout=120,
        )  # fmt: skip
        assert cli.returncode == 1 and cli.stderr == f"error: query failed: {selec}\n", (args, cli.stderr)


def test_a_refused_login_is_told_why_in_the_clients_own_error(served: Served) -> None:
    """Every refused login read "Error validating the login" (Hive's PLAIN SASL server keeps the
    reason for its log), after beeline's "Unknown HS2 problem". Now the client's error carries the
    server's line, which tells a wrong token nothing it may not learn: an unknown, a revoked and
    an expired token are told alike, as the HTTP API answers them."""
    from datetime import UTC, datetime, timedelta

    from metastore.errors import UserInputError

    live = _token(served.catalog, "owner", "read:shop")
    revoked = _token(served.catalog, "gone", "read:shop")
    served.catalog.store.revoke_token("gone")
    expired = new_token()
    past = datetime.now(UTC) - timedelta(hours=2)
    served.catalog.store.create_token(
        "old", hash_token(expired), [Scope.parse("read:shop")], now=past, expires_at=past + timedelta(hours=1)
    )
    nobody = "unknown, revoked or expired token"
    cases = [
        ("owner", "spt_not-a-token", f"{nobody} (user 'owner')"),
        ("gone", revoked, f"{nobody} (user 'gone')"),
        ("old", expired, f"{nobody} (user 'old')"),
        ("someone", live, "the token's name is 'owner': log in with it as user (user 'someone')"),
        (LOCAL_USER, "not-the-secret", f"wrong password for the local user (user {LOCAL_USER!r})"),
        ("x" * 500, "spt_x", f"{nobody} (user '{'x' * 64}…')"),
    ]
    for user, password, why in cases:  # PyHive
        with pytest.raises(UserInputError) as refused:
            Connection(Target(served.info.host, served.info.port, user, password))
        assert str(refused.value) == f"the SQL server at {served.info.address} refused the login: {why}"
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=2) as pool:  # beeline (the Hive JDBC driver)
        told = list(
            pool.map(lambda up: _beeline(served, *up, "SELECT 1"), [("owner", "spt_x"), ("old", expired)])
        )
    for user, done in zip(["owner", "old"], told, strict=True):
        out = done.stdout + done.stderr
        assert (
            done.returncode != 0 and f"Peer indicated failure: login refused: {nobody} (user '{user}')" in out
        ), out
        assert "Error validating the login" not in out and expired not in out
    with served.connect("owner", live) as conn:  # and the right token still gets in
        assert list(conn.execute("SELECT count(*) FROM shop.quiet")[1]) == [(5,)]


def test_streampart_query_and_sql_go_to_the_running_server(served: Served) -> None:
    """With a server running, ``streampart query`` answers through it: here its own Spark could
    not even start (its master is unreachable). The JSON is what a local query prints."""
    env = {**served.env, "STREAMPART_SPARK__MASTER": "spark://127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-m", "streampart", "query", "--json", "SELECT * FROM shop.quiet ORDER BY id"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert rows == [
        {"id": i, "ts": "2026-11-21T10:15:00Z", "msg": f"m{i}", "ts_period": rows[0]["ts_period"]}
        for i in range(5)
    ]
    assert rows[0]["ts_period"].endswith("Z")
    shell = subprocess.run(
        [sys.executable, "-m", "streampart", "sql"],
        input="USE shop\nSELECT count(*) AS n FROM quiet;\nSELECT nope FROM quiet\nSELECT 41 + 1 AS x\n",
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=120,
    )
    assert shell.returncode == 0, shell.stderr
    assert "│ 5 │" in shell.stdout and "│ 42 │" in shell.stdout, shell.stdout
    assert "error: query failed:" in shell.stderr and "`nope`" in shell.stderr, shell.stderr
    assert "Traceback" not in shell.stderr
    # a statement that writes runs in the process (here: it cannot, its Spark master is down)
    wrote = subprocess.run(
        [sys.executable, "-m", "streampart", "query",
         "INSERT INTO shop.quiet SELECT * EXCEPT (ts_period) FROM shop.quiet"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert wrote.returncode == 1 and "spark://127.0.0.1:9" in wrote.stderr, wrote.stderr


def test_explicit_credentials_win_at_this_hosts_server_and_nothing_listening_is_one_line(
    served: Served,
) -> None:
    """``query --server`` naming this host's own server with STREAMPART_SQL_USER/TOKEN set logs in
    as that token, not with the host's secret: its scopes hold and a wrong token is refused; an
    address where nothing listens is one line saying so."""
    from concurrent.futures import ThreadPoolExecutor

    def query(sql: str, server: str, **creds: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "streampart", "query", "--server", server, "--json", sql],
            capture_output=True, text=True, env={**served.env, **creds}, cwd=ROOT, timeout=120,
        )  # fmt: skip

    here, nowhere = served.info.address, f"127.0.0.1:{free_port()}"
    count = "SELECT count(*) AS n FROM shop.quiet"
    # a token of its own: an earlier test of the module revokes "hr"
    as_hr = {
        "STREAMPART_SQL_USER": "hr_reader",
        "STREAMPART_SQL_TOKEN": _token(served.catalog, "hr_reader", "read:hr"),
    }
    as_analyst = {"STREAMPART_SQL_USER": "analyst", "STREAMPART_SQL_TOKEN": served.tokens["analyst"]}
    wrong = {"STREAMPART_SQL_USER": "analyst", "STREAMPART_SQL_TOKEN": "spt_wrong"}
    with ThreadPoolExecutor(max_workers=2) as pool:
        hr, analyst, refused, dead = pool.map(
            lambda a: query(*a[:2], **a[2]),
            [(count, here, as_hr), (count, here, as_analyst), (count, here, wrong), (count, nowhere, as_hr)],
        )
    assert hr.returncode == 1 and hr.stdout == "" and "shop" in hr.stderr, (hr.stdout, hr.stderr)
    assert analyst.returncode == 0 and json.loads(analyst.stdout) == {"n": 5}, analyst.stderr
    assert refused.returncode == 1 and refused.stdout == "", refused.stderr
    assert "refused the login: unknown, revoked or expired token (user 'analyst')" in refused.stderr, (
        refused.stderr
    )
    assert dead.returncode == 1, dead.stderr
    assert dead.stderr.startswith(f"error: nothing listens at {nowhere}"), dead.stderr
    assert len(dead.stderr.strip().splitlines()) == 1, dead.stderr
    for done in (hr, refused, dead):
        assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_query_json_is_the_same_with_and_without_the_server(served: Served) -> None:
    statement = (
        "SELECT *, CAST(id AS DECIMAL(10, 2)) AS d, DATE'2026-11-21' AS day FROM shop.quiet ORDER BY id"
    )
    out = {}
    for how in ("--no-server", "--json"):
        args = ["--json", "--no-server"] if how == "--no-server" else ["--json"]
        done = subprocess.run(
            [sys.executable, "-m", "streampart", "query", *args, statement],
            capture_output=True,
            text=True,
            env=served.env,
            cwd=ROOT,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        out[how] = done.stdout
    assert out["--no-server"] == out["--json"]


def test_without_a_server_sql_says_how_to_start_one_and_a_taken_port_is_one_error(tmp_path: Path) -> None:
    import socket

    env = _cli_env(tmp_path / "warehouse")
    Catalog.open(tmp_path / "warehouse").close()  # sql-server serves only a warehouse that exists
    shell = subprocess.run(
        [sys.executable, "-m", "streampart", "sql", "-e", "SELECT 1"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert shell.returncode == 1
    assert shell.stderr.strip().startswith("error: no SQL server serves this warehouse: start one with"), (
        shell.stderr
    )
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "streampart", "sql-server", "--port", str(port)],
            capture_output=True, text=True, env=env, cwd=ROOT, timeout=120,
        )  # fmt: skip
    assert done.returncode == 1
    assert f"error: the SQL server cannot listen on 127.0.0.1:{port}" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "warehouse" / ".sql-server.json").exists()


JVM = "'java.lang.System', 'getProperty', 'user.name'"


def test_what_a_statement_runs_is_decided_on_what_spark_resolved(served: Served) -> None:
    """A read token ran Java code (`REFLECT`(…)) and programs (${x} substituted after the check,
    with variables from the connection's settings); every spelling is refused now."""
    refused = [
        f"SELECT `REFLECT`({JVM})",
        f"SELECT `reflect`({JVM}) FROM shop.quiet",
        f"SELECT system.builtin.java_method({JVM})",
        f"SELECT transform(array(1), x -> try_reflect({JVM}))",
        f"SELECT id FROM shop.quiet WHERE id = (SELECT length(reflect({JVM})))",
        "SELECT TRANSFORM(1) USING 'id' AS (o STRING)",
    ]
    with served.connect("analyst") as conn:
        for statement in refused:
            with pytest.raises(Exception, match=r"queries may not") as failed:
                conn.execute(statement)
            assert (
                "uid=" not in str(failed.value)
                and "Exception:" not in str(failed.value).split("errorMessage")[-1]
            )
        # ${…} is text, never substituted: the environment and variables stay the server's own
        [(home,)] = conn.execute("SELECT '${env:HOME}'")[1]
        assert home == "${env:HOME}"


def test_no_function_fetches_a_document_or_shows_a_path(served: Served) -> None:
    """Spark's xpath functions loaded the DTD a document's DOCTYPE named — from any address (the
    server fetched it) or any file (a read of the server's own stdin froze both task threads for
    good); ``input_file_name()`` showed where the warehouse is. They are refused, and the JVM's XML
    parsers (``from_xml``'s too) load no external DTD at all."""
    import http.server
    import threading

    fetched: list[str] = []

    class Recorder(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            fetched.append(self.path)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b'<!ENTITY g "fetched">')

        def log_message(self, *args: Any) -> None:
            pass

    listener = http.server.HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=listener.serve_forever, daemon=True).start()
    dtd = f"http://127.0.0.1:{listener.server_address[1]}"
    try:
        with served.connect("analyst") as conn:
            for function in ("xpath_string", "xpath", "xpath_int", "xpath_boolean"):
                doc = f'<!DOCTYPE r SYSTEM "{dtd}/{function}.dtd"><r>&g;</r>'
                with pytest.raises(Exception, match=rf"function {function}\(\) parses XML"):
                    conn.execute(f"SELECT {function}('{doc}', '/r')")
            with pytest.raises(Exception, match="shows where the server keeps"):
                conn.execute("SELECT input_file_name() FROM shop.quiet")
            doc = f'<!DOCTYPE r SYSTEM "{dtd}/from_xml.dtd"><r><b>x</b></r>'
            [(parsed,)] = conn.execute(f"SELECT from_xml('{doc}', 'b STRING')")[1]
            assert parsed == '{"b":"x"}'
    finally:
        listener.shutdown()
    assert fetched == []


def test_a_statement_is_what_spark_reads_it_as_and_only_one_query_runs(served: Served) -> None:
    """A second parser (sqlglot) once decided what a statement read: where it lexed the text
    otherwise than Spark (a ``--`` comment that Spark continues over a backslash-newline), Spark ran
    a SQL script whose statements after the first were never checked. Now Spark's own lexer and
    parser read the statement, and a script, several statements or a command are refused whole."""
    script = "/**/ -- \\\nSELECT 1 /* '\nBEGIN SELECT 1; SELECT reflect(" + JVM + "); END -- ' */"
    cases = {
        script: "Syntax error",
        "BEGIN SELECT count(*) FROM hr.pay; END": "Syntax error",
        "SELECT 1; SELECT count(*) FROM hr.pay": "give one statement at a time",
        "EXPLAIN SELECT * FROM hr.pay": "the SQL server only reads",
        "CREATE TEMPORARY VIEW v USING parquet OPTIONS (path '/etc')": "the SQL server only reads",
        "INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT 1": "the SQL server only reads",
        "CREATE DATABASE x": "the SQL server only reads",
        "SELECT * FROM IDENTIFIER('hr.pay')": "may not read namespace 'hr'",
        "SELECT * FROM `hr.pay`": "not files or other names",
        "SELECT * FROM shop.quiet WITH ('path' = '/etc')": "without options",
        "SELECT * FROM read_files('/etc/passwd')": "not files or other table functions",
        "SELECT * FROM spark_catalog.shop.quiet": "not through a catalog",
        # 0.7 MB, 100,000 OR terms: its analysis once ran the server out of memory after minutes
        "SELECT count(*) FROM shop.quiet WHERE " + " OR ".join(f"id = {i}" for i in range(100_000)): (
            "more than 50,000 expressions"
        ),
    }
    with served.connect("analyst") as conn:
        for statement, message in cases.items():
            with pytest.raises(Exception, match=message) as failed:
                conn.execute(statement)
            told = str(failed.value).splitlines()
            # one line; a syntax error's is followed by the client's line and a caret line under it
            assert len(told) == 1 or (
                len(told) == 3 and "Syntax error" in told[0] and told[2].strip("^ ") == ""
            ), told
            assert "uid=" not in str(failed.value), statement[:100]
        # Spark continues the comment over the backslash-newline: one query, reading no table
        assert list(conn.execute("SELECT 1 -- \\\n; SELECT count(*) FROM hr.pay")[1]) == [(1,)]
        # the session goes on; a link written t@b is read as Spark's lexer finds it
        assert list(conn.execute("USE mirror; SELECT count(*) FROM events@shop WHERE false")[1]) == [(0,)]


def _open(served: Served, user: str, configuration: dict[str, str], database: str = "default") -> Any:
    """A PyHive connection (which runs ``USE `database``` once the session is open)."""
    from pyhive import hive

    return hive.connect(
        host=served.info.host,
        port=served.info.port,
        username=user,
        password=served.tokens[user],
        auth="CUSTOM",
        configuration=configuration,
        database=database,
    )


def test_nothing_a_client_sends_when_it_connects_reaches_spark(served: Served) -> None:
    """Connection settings are refused whole, in one line, and no session opens: they once became
    the session's Spark settings (variable substitution, catalogs) and ran ``use:database`` before
    the session was bound to its token. ``use:database`` is checked as ``USE`` is, once it is."""
    from pyhive.exc import OperationalError

    for configuration in (
        {"set:hiveconf:spark.sql.runSQLOnFiles": "true"},
        {"set:hiveconf:spark.sql.variable.substitute": "true", "use:database": "`${env:HOME}`"},
        {"set:hivevar:x": "TRANSFORM(1) USING 'id' AS (o STRING)"},
        {
            "set:hiveconf:spark.sql.catalog.evil": "org.apache.spark.sql.execution.datasources.v2.jdbc."
            "JDBCTableCatalog",
            "use:database": "evil.APP",
        },
        {"hive.server2.proxy.user": "root"},
    ):
        with pytest.raises(OperationalError) as refused:
            _open(served, "analyst", configuration)
        status = refused.value.args[0].status
        assert "is not accepted" in status.errorMessage, status
        assert len(status.infoMessages) == 1, status.infoMessages  # one line, no server stack
    for database, message in (
        ("hr", "may not read namespace 'hr'"),
        ("`${env:HOME}`", "is not a valid name"),
        ("evil.APP", "give one namespace name"),
    ):
        with pytest.raises(OperationalError, match=message.replace("(", r"\(")) as refused:
            _open(served, "analyst", {"use:database": database})
        assert len(refused.value.args[0].status.infoMessages) == 1
    # what the Hive JDBC driver sends on every connect: its fetch size (dropped) and a database
    # (beeline's test reads by a short name after it); PyHive then runs USE `shop` itself
    conn = _open(
        served,
        "analyst",
        {"use:database": "shop", "set:hiveconf:hive.server2.thrift.resultset.default.fetch.size": "1000"},
        database="shop",
    )
    try:
        cursor = conn.cursor()
        cursor.execute("SELECT count(*) FROM quiet")  # the namespace of use:database
        assert cursor.fetchall() == [(5,)]
        cursor.execute("SELECT '${env:HOME}' AS x")  # ${…} is text, never substituted
        assert cursor.fetchall() == [("${env:HOME}",)]
    finally:
        conn.close()


def test_a_session_keeps_the_token_it_logged_in_with(served: Served) -> None:
    """A token revoked and made again under the same name is another token: the old session ends."""
    catalog = served.catalog
    old = _token(catalog, "rotating", "read:shop")
    with Connection(Target(served.info.host, served.info.port, "rotating", old)) as conn:
        assert list(conn.execute("SELECT count(*) FROM shop.quiet")[1]) == [(5,)]
        catalog.store.revoke_token("rotating")
        _token(catalog, "rotating", "read:shop", "read:hr")
        wait_for(lambda: _refused(conn, "SELECT count(*) FROM hr.pay"), timeout=30)


def _refused(conn: Connection, statement: str) -> bool:
    try:
        conn.execute(statement)
    except Exception as exc:  # the old session neither reads hr (the new token may) nor anything
        return "revoked" in str(exc)
    return False


def test_names_resolve_as_spark_resolves_them(served: Served) -> None:
    """Any case; a table read several times in subqueries, CTEs and set operations."""
    with served.connect("analyst") as conn:
        for statement in (
            "SELECT count(*) FROM SHOP.Quiet",
            "SELECT count(*) FROM shop.quiet WHERE id IN (SELECT id FROM shop.quiet)",
            "WITH c AS (SELECT id FROM shop.quiet) SELECT count(*) FROM c JOIN shop.quiet USING (id)",
            "SELECT count(*) FROM (SELECT id FROM shop.quiet UNION ALL "
            "SELECT id FROM shop.quiet WHERE id < 0)",
            "SELECT (SELECT count(*) FROM shop.quiet) + (SELECT count(*) FROM shop.quiet) - 5",
        ):
            assert list(conn.execute(statement)[1]) == [(5,)], statement


@pytest.fixture
def impatient(tmp_path: Path) -> Iterator[Served]:
    """A server of its own with a 45 s ``statement_timeout``, serving shop.quiet (5 rows) to two
    tokens: the module's server keeps the default timeout, which a cold server's first statements
    under load (~30 s) never reach."""
    warehouse = tmp_path / "warehouse"
    catalog = Catalog.open(warehouse)
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format

    ChunkWriter(catalog, make_table(catalog, "shop.quiet")).write(records(range(5)), Format.JSONL, key="q0")
    env = {
        **_cli_env(warehouse),
        "STREAMPART_SQLSERVER__STATEMENT_TIMEOUT": "45s",
        "STREAMPART_SQLSERVER__SESSIONS_PER_TOKEN": "3",
    }
    tokens = {name: _token(catalog, name, "read:shop") for name in ("analyst", "hostile")}
    try:
        with sql_server(warehouse, env, tmp_path / "server.log", timeout=180) as info:
            yield Served(catalog, info, env, tokens)
    finally:
        catalog.close()


def test_what_one_token_takes_is_bounded(impatient: Served) -> None:
    """One read token's statement held both cores until its timeout (a cross join of two ranges,
    whose tasks each run for ever): another token's ``count(*)`` waited the whole time, and a task
    that ran out of memory took the server down.

    Now each token's statements run in a pool of their own and a stage left waiting behind
    another statement's long tasks gets a slot back (one of them is stopped and run again later):
    the other token's statement answers while the heavy one still runs, and the heavy one is
    cancelled at ``statement_timeout``. A task running out of memory fails its statement only; a
    token's sessions are capped.
    """
    import time
    from concurrent.futures import ThreadPoolExecutor

    runaway = "SELECT count(*) FROM range(1000000000) x CROSS JOIN range(1000000000) y"
    quiet = "SELECT count(*) FROM shop.quiet"

    def warmed() -> bool:  # a cold server's first statements are slow (JIT, first pins): cancelled
        with impatient.connect("analyst") as warm:  # past the timeout under load, then answered
            try:
                return list(warm.execute(quiet)[1]) == [(5,)]
            except Exception as exc:
                assert "statement timeout" in str(exc), exc
                return False

    wait_for(warmed, "a first statement within the timeout", timeout=150)
    with ThreadPoolExecutor(max_workers=1) as pool, impatient.connect("hostile") as heavy:
        running = pool.submit(lambda: list(heavy.execute(runaway)[1]))
        time.sleep(5)  # its tasks hold both cores now
        with impatient.connect("analyst") as light:
            assert list(light.execute(quiet)[1]) == [(5,)]
        assert not running.done(), running.exception()  # answered while the heavy one still ran
        with pytest.raises(Exception, match="ran past the SQL server's statement timeout") as cancelled:
            running.result(timeout=180)
    assert "\tat " not in str(cancelled.value)
    log = (Path(impatient.env["STREAMPART_WAREHOUSE"]).parent / "server.log").read_text()
    assert "stopped, to be run again later" in log  # a slot was taken back for the light statement
    # a task's OutOfMemoryError fails its statement, in one line; the server answers on
    with impatient.connect("hostile") as conn:
        with pytest.raises(Exception, match=r"OutOfMemoryError|Java heap space") as failed:
            list(
                conn.execute(
                    "SELECT count(*) FROM (SELECT explode(sequence(1, id * 2000000000)) FROM range(1, 2))"
                )[1]
            )
        assert "\n" not in str(failed.value)
        assert list(conn.execute(quiet)[1]) == [(5,)]
    with impatient.connect("analyst") as conn:
        assert list(conn.execute(quiet)[1]) == [(5,)]
    # three sessions per token here: a fourth is refused, and another token still gets in
    opened = [impatient.connect("hostile") for _ in range(3)]
    try:
        with pytest.raises(Exception, match="sessions open already"):
            impatient.connect("hostile")
        with impatient.connect("analyst") as conn:
            assert list(conn.execute(quiet)[1]) == [(5,)]
    finally:
        for conn in opened:
            conn.close()


def test_failed_logins_are_slowed_and_logged_and_never_lock_the_right_token_out(served: Served) -> None:
    """Failed logins locked a user name out, so anyone who knew a token's name locked its owner out;
    now each failure is logged once and answered after a delay, and the right token always gets in."""
    import time

    token = _token(served.catalog, "guessed", "read:shop")
    for n in range(12):
        started = time.monotonic()
        with pytest.raises(Exception, match="refused the login"):
            Connection(Target(served.info.host, served.info.port, "guessed", "spt_guess"))
        if n >= 4:  # 0.1 s doubled per failure, up to the 1 s cap: slowed
            assert time.monotonic() - started >= 0.9
    started = time.monotonic()
    with Connection(Target(served.info.host, served.info.port, "guessed", token)) as conn:
        assert list(conn.execute("SELECT count(*) FROM shop.quiet")[1]) == [(5,)]
    assert time.monotonic() - started < 30  # not slowed (a cold session takes seconds under load)
    log = (Path(served.env["STREAMPART_WAREHOUSE"]).parent / "server.log").read_text()
    failures = [line for line in log.splitlines() if "login.failed" in line or "failed login" in line]
    assert len([f for f in failures if "guessed" in f]) == 12, failures[-3:]
    assert "locked" not in log
    assert token not in log and "spt_guess" not in log


def test_a_statement_running_across_an_expiry_and_a_delete_answers_from_its_snapshot(
    served: Served,
) -> None:
    """Issue 30: a long statement pinned before ``streampart expire`` and ``streampart delete``
    (processes of their own) commit reads the files they removed after they committed, and answers
    with exactly its snapshot's rows; ``streampart housekeep`` run meanwhile leaves those files (its
    grace outlives a statement); the next statement sees the partition gone and the row deleted."""
    import time
    from concurrent.futures import ThreadPoolExecutor
    from datetime import UTC, datetime, timedelta

    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from metastore.models import Mode, iso
    from scheduler.roll import Roller
    from tests.helpers import cli_process

    catalog, start = served.catalog, datetime(2026, 11, 21, tzinfo=UTC)
    table = make_table(catalog, "shop.aging", mode=Mode.EVENT_TIME)
    w = ChunkWriter(catalog, table)
    for h in range(3):
        ts = iso(start + timedelta(hours=h, minutes=5))
        w.write(records(range(h * 10, h * 10 + 10), ts), Format.JSONL)
    Roller(catalog).roll_table(table, now=start + timedelta(hours=4))
    catalog.retention.set(table, timedelta(hours=1))
    hour0 = [p for p in catalog.partitions(table) if p.value == start]
    files = [f for f in Path(table.location).rglob("*.parquet") if iso(start)[:10] in str(f)]
    # the union's tasks run in order: the range's slow ones first, then shop.aging's files
    slow = ("SELECT count(*), sum(id) FROM (SELECT id FROM range(0, 16000000000, 1, 8) WHERE id % 7 = 99 "
            "UNION ALL SELECT id FROM shop.aging)")  # fmt: skip
    with ThreadPoolExecutor(max_workers=1) as pool, served.connect("analyst") as conn:
        running = pool.submit(lambda: list(conn.execute(slow)[1]))
        time.sleep(3)  # resolved and pinned: its tasks run
        steps = [("expire", "shop.aging", "--now", iso(start + timedelta(hours=2, minutes=30))),
                 ("delete", "shop.aging", "--where", "id = 15"), ("housekeep",)]  # fmt: skip
        for step in steps:
            proc = cli_process(catalog, *step)
            _, err = proc.communicate(timeout=120)
            assert proc.returncode == 0, err
        assert not running.done(), "the statement ended before the expiry and the delete: nothing was raced"
        assert running.result(timeout=300) == [(30, sum(range(30)))]
    assert hour0 and files and all(f.exists() for f in files), (
        "housekeeping deleted files a statement may read"
    )
    after = "SELECT count(*), sum(id) FROM shop.aging"
    with served.connect("analyst") as conn:
        wait_for(
            lambda: list(conn.execute(after)[1]) == [(19, sum(range(10, 30)) - 15)],
            "the expiry and the delete to be seen",
            timeout=30,
        )


class _Relay:
    """A TCP relay to the server that can cut every connection through it (as a server that dies
    does, seen from its clients)."""

    def __init__(self, host: str, port: int) -> None:
        import socket
        import threading

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pairs: list[tuple[Any, Any]] = []

        def pipe(src: Any, dst: Any) -> None:
            try:
                while data := src.recv(65536):
                    dst.sendall(data)
            except OSError:
                pass

        def accept() -> None:
            while True:
                try:
                    client, _ = self.listener.accept()
                except OSError:
                    return
                server = socket.create_connection((host, port))
                self.pairs.append((client, server))
                for a, b in ((client, server), (server, client)):
                    threading.Thread(target=pipe, args=(a, b), daemon=True).start()

        threading.Thread(target=accept, daemon=True).start()

    def cut(self) -> None:
        import contextlib
        import socket

        for pair in self.pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
        self.listener.close()


def test_a_connection_broken_under_a_statement_is_the_servers_unavailability(served: Served) -> None:
    """The server dies (or restarts) under a statement: the client is told so in one retriable
    line, not Thrift's ``TSocket read 0 bytes``."""
    from streampart.sql_client import SqlServerUnavailableError

    relay = _Relay(served.info.host, served.info.port)
    conn = Connection(Target("127.0.0.1", relay.port, "analyst", served.tokens["analyst"]))
    try:
        assert list(conn.execute("SELECT count(*) FROM shop.quiet")[1]) == [(5,)]
        relay.cut()
        with pytest.raises(SqlServerUnavailableError, match="closed the connection during the statement"):
            list(conn.execute("SELECT count(*) FROM shop.quiet")[1])
    finally:
        conn.close()


def test_a_valid_login_while_the_server_starts_is_never_refused(served: Served) -> None:
    """The port accepts connections a moment before the server can check tokens: a login then
    waits; it was refused as wrong credentials ("refused the login of 'analyst'")."""
    assert served.refused_while_starting == [], served.refused_while_starting[:3]


def test_a_keyed_table_answers_one_row_per_key_before_and_after_its_roll(served: Served) -> None:
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format
    from scheduler.roll import Roller

    catalog = served.catalog
    people = catalog.table("hr.people")
    token = _token(catalog, "people-reader", "read:hr")  # its own: an earlier test revokes "hr"

    def answer() -> list[tuple[Any, ...]]:
        with served.connect("people-reader", token) as conn:
            return sorted(conn.execute("SELECT id, v FROM hr.people")[1])

    assert answer() == [(1, 11), (2, 20)]
    ChunkWriter(catalog, people).write(jsonl(_PEOPLE[3:]), Format.JSONL)
    wait_for(lambda: answer() == [(1, 11), (3, 30)], timeout=30, what="the newest versions, key 2 deleted")
    Roller(catalog).roll_table(people, force=True)
    wait_for(lambda: answer() == [(1, 11), (3, 30)], timeout=30, what="the same rows after the roll")

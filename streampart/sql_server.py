"""``streampart sql-server``: Spark's HiveServer2 (Thrift) server over the warehouse's tables.

JDBC/ODBC tools (beeline, DBeaver, Tableau, Superset, dbt) speak HiveServer2; the pyspark wheel
ships Spark's Thrift server (``spark-hive-thriftserver``). This process starts one SparkSession
and serves it with ``HiveThriftServer2.startWithContext``; each client session gets its own
Spark session (``singleSession`` off), so a client's ``USE`` is its own.

Three small Java classes (``streampart/java/``, compiled with ``javac`` on first use into a
cache directory and put on the driver's class path) connect the server to this Python process
through py4j's callback server:

- ``Auth`` (HiveServer2's CUSTOM authentication): user and password go to
  :meth:`SqlGate.authenticate` — a token's name and the token; a refused client is told its
  answer (``login refused: …``) in the SASL status it prints, not Hive's "Error validating the login";
- ``Gate``: every Thrift call of a client passes it — connection settings refused (``use:database``
  checked as ``USE`` once the session is bound to its login), every error one line (a syntax
  error: that line and the client's line with a caret under where);
- ``Extensions`` (``spark.sql.extensions``): a parser in front of Spark's that reads every
  statement of a client session with Spark's own lexer and parser (``Reading``) and sends that
  reading to :meth:`SqlGate.decide`, which refuses it or authorises it and stages the pinned
  snapshots it reads (:mod:`streampart.sql_gate`); Spark then runs the very plan it parsed, and a
  check rule (``Policy``) refuses any plan of a client session that was not so decided;
- ``Hooks``: which client session (and user) a Spark session serves; every session but the
  server's own is a client's.

The server writes ``<warehouse>/.sql-server.json`` (host, port, pid, a secret for this host's
``streampart query`` and ``streampart sql``, mode 0600) while it runs.
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from metastore.errors import UserInputError
from streampart.errors import SqlServerError
from streampart.sql_endpoint import ServerInfo, running_server, server_file, write_server_file
from streampart.sql_gate import SqlGate, refusal

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ingest.login_guard import LoginGuard
    from metastore.catalog import Catalog
    from streampart.config import SparkConfig

log = logging.getLogger(__name__)

_FAIR_POOLS = """<?xml version="1.0"?>
<allocations>
  <pool name="default"><schedulingMode>FAIR</schedulingMode><weight>1</weight><minShare>0</minShare></pool>
</allocations>
"""


def _fair_pools() -> Path:
    """Spark's scheduler allocation file: the default pool shares its slots fairly between jobs."""
    path = Path(tempfile.gettempdir()) / f"streampart-fair-pools-{os.getuid()}.xml"
    if not path.is_file() or path.read_text() != _FAIR_POOLS:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_FAIR_POOLS)
        tmp.replace(path)
    return path


def _check_free(host: str, port: int) -> None:
    import socket

    try:
        with socket.create_server((host, port)):
            pass
    except OSError as exc:
        raise SqlServerError(f"the SQL server cannot listen on {host}:{port}: {exc.strerror}") from None


class _Bridge:
    """The Python side of ``streampart.sqlserver.Bridge`` (called by the JVM through py4j)."""

    def __init__(self, gate: SqlGate) -> None:
        self.gate = gate

    def authenticate(self, user: str, password: str) -> str | None:
        try:
            return self.gate.authenticate(user, password)
        except Exception:  # the JVM gets one line, never a Python traceback
            # nor, for a client that has not logged in, what failed here (a metastore's address)
            log.exception("sql-server: login check failed")
            return "login refused: the SQL server could not check the login; try again (its log says why)"

    def decide(self, client: Any, kind: str, used: Any, args: Any, spark: Any) -> str:
        try:
            return "OK:" + self.gate.decide(client, kind, used, args, spark)
        except Exception as exc:  # a refused statement is the client's error, not the server's
            return "ERR:" + refusal(exc)

    def check(self, client: Any) -> str | None:
        try:
            self.gate.check(client)
        except Exception as exc:  # the JVM gets one line, never a Python traceback
            return refusal(exc)
        return None

    class Java:
        implements = ["streampart.sqlserver.Bridge"]


class SqlServer:
    """One HiveServer2 server over ``catalog``; :meth:`start`, then :meth:`stop`."""

    def __init__(
        self,
        catalog: Catalog,
        spark_config: SparkConfig,
        host: str = "127.0.0.1",
        port: int = 10000,
        freshness: timedelta = timedelta(seconds=5),
        token_ttl: float = 5.0,
        statement_timeout: timedelta = timedelta(minutes=10),
        guard: LoginGuard | None = None,
        sessions_per_token: int = 16,
    ) -> None:
        self.catalog, self.host, self.port = catalog, host, port
        self.sessions_per_token = sessions_per_token
        self.spark_config, self.freshness, self.token_ttl = spark_config, freshness, token_ttl
        self.statement_timeout, self.guard = statement_timeout, guard
        self.secret = secrets.token_urlsafe(32)
        self.spark: SparkSession | None = None
        self._server: Any = None

    def start(self) -> ServerInfo:
        from pyspark.java_gateway import ensure_callback_server_started

        from streampart.query import spark_session

        here = self.catalog.warehouse.local_dir
        if running_server(here) is not None:
            raise UserInputError(f"a SQL server already serves this warehouse ({server_file(here)})")
        _check_free(self.host, self.port)  # Hive's Thrift server exits the JVM if it cannot listen
        conf = {
            **self.spark_config.conf,
            "spark.sql.hive.thriftServer.singleSession": "false",
            # sessions share the executors: each statement's tasks take turns with every other's
            # (FAIR between jobs of the default pool), so one heavy statement slows the others but
            # never starves them; and a statement past its timeout is cancelled, tasks interrupted
            "spark.scheduler.mode": "FAIR",
            "spark.scheduler.allocation.file": str(_fair_pools()),
            "spark.sql.thriftServer.queryTimeout": f"{max(1, int(self.statement_timeout.total_seconds()))}s",
            "spark.sql.thriftServer.interruptOnCancel": "true",
            # a client statement is one query: a SQL script is refused before analysis too
            "spark.sql.scripting.enabled": "false",
            # what one statement can take of the driver (executors run in it, on a local master):
            # a task that runs out of memory fails its statement, not the server (Spark would exit
            # the JVM on a task's OutOfMemoryError); results reach the driver a partition at a
            # time, and no more than 256 MB of task results at once (broadcasts included)
            "spark.executor.killOnFatalError.depth": "0",
            "spark.sql.thriftServer.incrementalCollect": "true",
            "spark.driver.maxResultSize": "256m",
        }
        spark = self.spark = spark_session(self.spark_config.model_copy(update={"conf": conf}))
        gateway = spark.sparkContext._gateway
        assert gateway is not None
        # Hive reads these from a HiveConf of its own (CUSTOM authentication makes a new one), which
        # takes its values from the JVM's system properties
        hive = {
            "hive.server2.thrift.bind.host": self.host,
            "hive.server2.thrift.port": str(self.port),
            "hive.server2.transport.mode": "binary",
            "hive.server2.authentication": "CUSTOM",
            "hive.server2.custom.authentication.class": "streampart.sqlserver.Auth",
        }
        for key, value in hive.items():
            gateway.jvm.java.lang.System.setProperty(key, value)
        ensure_callback_server_started(gateway)
        gateway.jvm.streampart.sqlserver.Auth.tellRefusals()  # before it listens: every login is told why
        gate = SqlGate(self.catalog, spark, self.freshness, self.secret, self.token_ttl, guard=self.guard)
        hooks_class = gateway.jvm.streampart.sqlserver.Hooks
        bridge = _Bridge(gate)
        thrift = gateway.jvm.org.apache.spark.sql.hive.thriftserver.HiveThriftServer2
        try:
            self._server = thrift.startWithContext(spark._jsparkSession.sqlContext())
        except Exception as exc:
            raise SqlServerError(
                f"the SQL server could not listen on {self.host}:{self.port}: {str(exc).splitlines()[0]}"
            ) from None
        hooks_class.install(bridge, self._server, spark._jsparkSession, self.sessions_per_token)
        info = ServerInfo(self.host, self.port, os.getpid(), self.secret)
        write_server_file(self.catalog.warehouse.local_dir, info)
        return info

    def stop(self) -> None:
        path = server_file(self.catalog.warehouse.local_dir)
        running = running_server(self.catalog.warehouse.local_dir)
        if running is not None and running.pid == os.getpid():
            path.unlink(missing_ok=True)
        if self._server is not None:
            self._server.stop()
            self._server = None
        if self.spark is not None:
            self.spark.stop()
            self.spark = None

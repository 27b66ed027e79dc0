"""Statements sent to a running SQL server (``streampart sql-server``) over HiveServer2.

``streampart query`` and ``streampart sql`` send a read there when one serves the warehouse —
found by its server file (this host: logged in with the file's secret), or named with
``--server HOST:PORT`` / ``STREAMPART_SQL_SERVER`` (another host: ``STREAMPART_SQL_USER``, a
token's name, and ``STREAMPART_SQL_TOKEN``, the token) — and answer in well under a second
instead of starting Spark. Rows come back as :mod:`streampart.query` gives them: TIMESTAMP
values as aware UTC datetimes, DATEs as dates, DECIMALs as Decimals.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from metastore.errors import RetriableError, UserInputError
from streampart.errors import QueryError
from streampart.sql_endpoint import LOCAL_USER, running_server

# Why 1000: rows fetched per round trip — few round trips for a grid of ``--limit`` rows, and a
# streamed JSON output holds no more than that in memory.
_FETCH_ROWS = 1000


class SqlServerUnavailableError(RetriableError):
    """The SQL server named cannot be reached (it may come up again: retriable)."""


@dataclass(frozen=True)
class Target:
    """A SQL server to send statements to, and who logs in."""

    host: str
    port: int
    user: str
    password: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def find_server(warehouse: Path, server: str | None = None) -> Target | None:
    """The SQL server to send statements to: ``server`` (or ``STREAMPART_SQL_SERVER``), else the one
    whose server file is in ``warehouse``; None when there is none."""
    address = server or os.environ.get("STREAMPART_SQL_SERVER") or None
    local = running_server(warehouse)
    if address is None:
        return None if local is None else Target(local.host, local.port, LOCAL_USER, local.secret)
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserInputError(f"--server {address!r}: give HOST:PORT (e.g. 127.0.0.1:10000)")
    if local is not None and (host, int(port)) == (local.host, local.port):
        return Target(local.host, local.port, LOCAL_USER, local.secret)
    user, token = os.environ.get("STREAMPART_SQL_USER"), os.environ.get("STREAMPART_SQL_TOKEN")
    if not user or not token:
        raise UserInputError(
            f"the SQL server {address} does not serve this warehouse from this host: set "
            "STREAMPART_SQL_USER (a token's name) and STREAMPART_SQL_TOKEN (the token) to log in"
        )
    return Target(host, int(port), user, token)


class Connection:
    """One HiveServer2 session (PyHive), closed with :meth:`close` or as a context manager."""

    def __init__(self, target: Target) -> None:
        from pyhive import hive
        from thrift.transport.TTransport import TTransportException

        self.target = target
        try:
            self._conn = hive.connect(
                host=target.host,
                port=target.port,
                username=target.user,
                password=target.password,
                auth="CUSTOM",
            )
        except TTransportException as exc:
            if "Error validating the login" in str(exc) or "Peer indicated failure" in str(exc):
                raise UserInputError(
                    f"the SQL server at {target.address} refused the login of {target.user!r}: "
                    "log in with a token's name as user and the token as password"
                ) from None
            raise SqlServerUnavailableError(
                f"the SQL server at {target.address} cannot be reached: {exc}"
            ) from None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the server went away: nothing is left to close
            self._conn.close()

    def execute(self, sql: str) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """Run one statement: its column names, and its rows as they are fetched.

        Raises:
            QueryError: the server refused the statement or Spark failed it (its one-line message).
        """
        from pyhive.exc import OperationalError

        cursor = self._conn.cursor()
        try:
            cursor.execute(sql)
        except OperationalError as exc:
            raise QueryError(server_message(exc)) from None
        description = cursor.description or []
        names = [d[0] for d in description]
        convert = [_converter(str(d[1])) for d in description]

        def rows() -> Iterator[tuple[Any, ...]]:
            try:
                while True:
                    batch = cursor.fetchmany(_FETCH_ROWS)
                    if not batch:
                        return
                    for row in batch:
                        yield tuple(
                            c(v) if v is not None else None for c, v in zip(convert, row, strict=True)
                        )
            except OperationalError as exc:
                raise QueryError(server_message(exc)) from None
            finally:
                cursor.close()

        return names, rows()


# Spark's wrapping: "Error running query: [CLASS] org.apache….AnalysisException: [CLASS] what"
_ERROR_RUNNING = re.compile(r"^(?:Error running query: )?(?:\[[A-Z_.]+\] )?(?:[\w.$]+(?:Exception|Error): )?")


def server_message(exc: Exception) -> str:
    """The one line the server said, out of PyHive's wrapping of the Thrift status."""
    status = exc.args[0].status if exc.args and hasattr(exc.args[0], "status") else None
    text = getattr(status, "errorMessage", None) or str(exc)
    line = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return "query failed: " + _ERROR_RUNNING.sub("", line)


def _converter(type_code: str) -> Any:
    if type_code == "TIMESTAMP_TYPE":
        return lambda v: datetime.fromisoformat(v).replace(tzinfo=UTC) if isinstance(v, str) else v
    if type_code == "DATE_TYPE":
        return lambda v: date.fromisoformat(v) if isinstance(v, str) else v
    if type_code == "DECIMAL_TYPE":
        return lambda v: Decimal(v) if isinstance(v, str) else v
    return lambda v: v

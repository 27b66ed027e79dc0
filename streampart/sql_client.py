"""Statements sent to a running SQL server (``streampart sql-server``) over HiveServer2.

``streampart query`` and ``streampart sql`` send a read there when one serves the warehouse —
found by its server file, or named with ``--server HOST:PORT`` / ``STREAMPART_SQL_SERVER``; who
logs in is ``STREAMPART_SQL_USER`` (a token's name) with ``STREAMPART_SQL_TOKEN`` (the token) when
they are set, even at this host's own server, else there the server file's secret — and answer in
well under a second
instead of starting Spark. Rows come back as :mod:`streampart.query` gives them: TIMESTAMP
values as aware UTC datetimes, DATEs as dates, DECIMALs as Decimals.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from metastore.errors import RetriableError, StreampartError, UserInputError
from metastore.storage import faults
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
    whose server file is in ``warehouse``; None when there is none.

    Who logs in: ``STREAMPART_SQL_USER`` and ``STREAMPART_SQL_TOKEN`` when set — explicit
    credentials win, even at this host's own server (a wrong token is refused there, never
    replaced by the host's secret); else, at this host's own server, its server file's secret.

    Raises:
        SqlServerUnavailableError: ``server`` names an address where nothing listens.
        UserInputError: a bad address, one of the two variables without the other, or none at
            another host's server.
    """
    address = server or os.environ.get("STREAMPART_SQL_SERVER") or None
    local = running_server(warehouse)
    credentials = _credentials()
    if address is None:
        if local is None:
            return None
        user, password = credentials or (LOCAL_USER, local.secret)
        return Target(local.host, local.port, user, password)
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise UserInputError(f"--server {address!r}: give HOST:PORT (e.g. 127.0.0.1:10000)")
    if credentials is not None:
        return Target(host, int(port), *credentials)
    if local is not None and (host, int(port)) == (local.host, local.port):
        return Target(local.host, local.port, LOCAL_USER, local.secret)
    check_listening(host, int(port))
    raise UserInputError(
        f"the SQL server {address} does not serve this warehouse from this host: set "
        "STREAMPART_SQL_USER (a token's name) and STREAMPART_SQL_TOKEN (the token) to log in"
    )


def _credentials() -> tuple[str, str] | None:
    """``(STREAMPART_SQL_USER, STREAMPART_SQL_TOKEN)``, None when neither is set (UserInputError: one)."""
    user = os.environ.get("STREAMPART_SQL_USER") or None
    token = os.environ.get("STREAMPART_SQL_TOKEN") or None
    if user is None and token is None:
        return None
    if user is None or token is None:
        given, missing = ("STREAMPART_SQL_USER", "STREAMPART_SQL_TOKEN")[:: 1 if user else -1]
        raise UserInputError(
            f"{given} is set but {missing} is not: set both to log in with a token, or neither"
        )
    return user, token


# Why 5 s: a connect to a live server on a LAN answers in milliseconds; a host that drops packets
# says nothing, and a command should not hang on it.
_CONNECT_TIMEOUT_S = 5.0


def check_listening(host: str, port: int) -> None:
    """SqlServerUnavailableError, saying so, unless something accepts connections at ``host:port``."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=_CONNECT_TIMEOUT_S):
            return
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        if isinstance(exc, TimeoutError | socket.timeout):
            why = f"no answer in {_CONNECT_TIMEOUT_S:g} s"
        raise SqlServerUnavailableError(
            f"nothing listens at {host}:{port} ({why.lower()}): start the SQL server there with "
            "`streampart sql-server`, or name the address it listens on with --server HOST:PORT"
        ) from None


class Connection:
    """One HiveServer2 session (PyHive), closed with :meth:`close` or as a context manager."""

    def __init__(self, target: Target) -> None:
        from pyhive import hive
        from pyhive.exc import OperationalError
        from thrift.transport.TTransport import TTransportException

        self.target = target
        check_listening(target.host, target.port)  # one clear line, not Thrift's log and error
        try:
            self._conn = hive.connect(
                host=target.host,
                port=target.port,
                username=target.user,
                password=target.password,
                auth="CUSTOM",
            )
        except TTransportException as exc:
            refused = login_refusal(str(exc))
            if refused is not None:
                raise UserInputError(
                    f"the SQL server at {target.address} refused the login: {refused}"
                ) from None
            raise SqlServerUnavailableError(
                f"the SQL server at {target.address} cannot be reached: {exc}"
            ) from None
        except OperationalError as exc:  # the session's first statement (PyHive's USE) was refused
            raise QueryError(
                f"the SQL server at {target.address} refused the session of {target.user!r}: "
                f"{server_message(exc)}"
            ) from None

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # the server went away: nothing is left to close
            self._conn.close()

    def _lost(self, exc: Exception) -> SqlServerUnavailableError:
        """The connection broke under a statement (the server stopped or restarted): retriable;
        a read sent again on a new connection answers from a snapshot of its own."""
        why = " ".join(str(exc).split()) or type(exc).__name__
        return SqlServerUnavailableError(
            f"the SQL server at {self.target.address} closed the connection during the statement "
            f"({why}): it stopped or restarted; connect again and send the statement again"
        )

    def execute(self, sql: str) -> tuple[list[str], Iterator[tuple[Any, ...]]]:
        """Run one statement: its column names, and its rows as they are fetched.

        Raises:
            QueryError: the server refused the statement or Spark failed it (its one-line message).
            SqlServerUnavailableError: the connection broke under the statement.
        """
        from pyhive.exc import OperationalError
        from thrift.transport.TTransport import TTransportException

        cursor = self._conn.cursor()
        try:
            cursor.execute(sql)
            description = cursor.description or []  # (a call to the server too)
        except OperationalError as exc:
            raise _failed(exc) from None
        except (TTransportException, OSError) as exc:
            raise self._lost(exc) from None
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
                raise _failed(exc) from None
            except (TTransportException, OSError) as exc:
                raise self._lost(exc) from None
            finally:
                with contextlib.suppress(TTransportException, OSError):  # a server gone: nothing to close
                    cursor.close()

        return names, rows()


# The SASL status of a refused login, as PyHive's transport (thrift_sasl) words it: "Bad status: 3
# (b'…')", or "Peer indicated failure: …"
_SASL_REFUSAL = re.compile(r"Bad status: \d+ \((b'.*'|b\".*\")\)$|Peer indicated failure: (.*)$", re.DOTALL)


def login_refusal(transport_error: str) -> str | None:
    """Why the server refused a login (its ``login refused: …`` line, or Hive's own words), from
    the transport's error; None when the error is no refused login."""
    found = _SASL_REFUSAL.search(transport_error.strip())
    if found is None:
        return None
    said = found.group(2)
    if said is None:
        try:
            said = ast.literal_eval(found.group(1)).decode("utf-8", "replace")
        except (ValueError, SyntaxError):
            said = found.group(1)[2:-1]
    said = said.strip()
    if said == "Error validating the login":  # Hive's own words for every refusal (an older server)
        return "log in with a token's name as user and the token as password"
    return said.removeprefix("login refused: ")


# Spark's wrapping: "Error running query: [CLASS] org.apache….AnalysisException: [CLASS] what" (the
# first class is dropped where the exception repeats it; a refusal's own class is kept)
_ERROR_RUNNING = re.compile(
    r"^(?:Error running query: )?"
    r"(?:\[[A-Z_.]+\] (?=[\w.$]+(?:Exception|Error): ))?"
    r"(?:[\w.$]+(?:Exception|Error): )?"
)


def _failed(exc: Exception) -> StreampartError:
    """What the server's refusal or failure is: the store's outage it relays (a table's files in a
    bucket that did not serve them: retriable, never "damaged"), else a QueryError."""
    message = server_message(exc)
    return faults.relayed(message) or QueryError(message)


def server_message(exc: Exception) -> str:
    """The one line the server said, out of PyHive's wrapping of the Thrift status (a syntax error:
    that line, and the statement's line with a caret under where, as the server drew them)."""
    status = exc.args[0].status if exc.args and hasattr(exc.args[0], "status") else None
    text = getattr(status, "errorMessage", None) or str(exc)
    lines = text.strip("\n").splitlines() if text.strip() else [type(exc).__name__]
    line = lines[0].strip()
    if "found TIMEDOUT" in line:
        return (
            "query failed: the statement ran past the SQL server's statement timeout "
            "([sqlserver] statement_timeout) and was cancelled"
        )
    if "found CANCELED" in line:
        return "query failed: the statement was cancelled"
    picture = lines[1:3] if len(lines) >= 3 and set(lines[2].strip()) == {"^"} else []
    return "\n".join(["query failed: " + _ERROR_RUNNING.sub("", line), *picture])


def _converter(type_code: str) -> Any:
    if type_code == "TIMESTAMP_TYPE":
        return lambda v: datetime.fromisoformat(v).replace(tzinfo=UTC) if isinstance(v, str) else v
    if type_code == "DATE_TYPE":
        return lambda v: date.fromisoformat(v) if isinstance(v, str) else v
    if type_code == "DECIMAL_TYPE":
        return lambda v: Decimal(v) if isinstance(v, str) else v
    return lambda v: v

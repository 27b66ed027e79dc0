"""``streampart sql-server`` (HiveServer2 for JDBC/ODBC tools) and ``streampart sql`` (a shell on it)."""

from __future__ import annotations

import itertools
import re
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from metastore.errors import StreampartError, UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import Output, TextOutput, json_value, listing
from streampart.cli.params import json_flag

if TYPE_CHECKING:
    from streampart.sql_client import Connection


def sql_server(
    ctx: typer.Context,
    host: Annotated[
        str | None, typer.Option(help="Address to listen on [default: from config, 127.0.0.1]")
    ] = None,
    port: Annotated[int | None, typer.Option(help="Port [default: from config, 10000]")] = None,
    freshness: Annotated[
        str | None,
        typer.Option(
            help="A commit or roll is visible to statements starting at most this long after it "
            "[default: from config, 5s]"
        ),
    ] = None,
) -> None:
    """Serve the warehouse's tables over HiveServer2 (JDBC/ODBC: beeline, DBeaver, Superset, dbt).

    Tables are NAMESPACE.TABLE, read-only, each statement at one snapshot per table. Log in with
    a token's name as user and the token as password (`streampart token create NAME --scope
    read:NS`); `streampart query` and `streampart sql` on this host use the server by themselves.
    Runs until SIGTERM or Ctrl-C.
    """
    from ingest.login_guard import LoginGuard
    from streampart.sql_server import SqlServer

    cli = cli_context(ctx)
    settings = cli.settings(sqlserver={"host": host, "port": port, "freshness": freshness})
    config = settings.sqlserver
    catalog = cli.catalog(settings)
    server = SqlServer(
        catalog,
        settings.spark_for(catalog.clusters.get("default")),
        config.host,
        config.port,
        config.freshness,
        settings.server.auth_cache_ttl.total_seconds(),
        config.statement_timeout,
        LoginGuard.of(settings.server, service="SQL server"),
        config.sessions_per_token,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        info = server.start()
        cli.output.err.print(
            f"SQL server listening on {info.address}: jdbc:hive2://{info.address}/ "
            "(user: a token's name, password: the token)",
            highlight=False,
            markup=False,
        )
        while not stop.wait(1.0):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


def sql(
    ctx: typer.Context,
    execute: Annotated[
        str | None, typer.Option("-e", "--execute", help="Run this one statement and exit")
    ] = None,
    server: Annotated[
        str | None,
        typer.Option(
            help="HOST:PORT of the SQL server (STREAMPART_SQL_SERVER) [default: the one serving this "
            "warehouse on this host]"
        ),
    ] = None,
    _json: Annotated[bool, json_flag("Print one JSON object per row, one per line")] = False,
    limit: Annotated[int, typer.Option(help="Rows to print as a table (without --json)")] = 1000,
) -> None:
    """A SQL shell on the running SQL server (`streampart sql-server`): one statement per line
    (or ending with ';'), `USE NS` to read NS's tables as T; Ctrl-D to leave."""
    from metastore.delta.warehouse import Warehouse
    from streampart.sql_client import Connection, find_server

    cli = cli_context(ctx)
    target = find_server(Warehouse(cli.settings().warehouse).local_dir, server)
    if target is None:
        raise UserInputError(
            "no SQL server serves this warehouse: start one with `streampart sql-server`, or name "
            "one with --server HOST:PORT"
        )
    with Connection(target) as conn:
        if execute is not None:
            run_on_server(conn, execute, cli.output, limit)
            return
        _shell(conn, cli.output, limit)


def _shell(conn: Connection, output: Output, limit: int) -> None:
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())
    pending: list[str] = []
    while True:
        try:
            line = input(("sql> " if not pending else "...> ") if interactive else "")
        except EOFError:
            break
        except KeyboardInterrupt:
            pending = []
            print()
            continue
        pending.append(line)
        text = "\n".join(pending).strip()
        if not text:
            pending = []
            continue
        if interactive and not text.endswith(";") and not _looks_whole(text):
            continue
        pending = []
        try:
            run_on_server(conn, text.rstrip(";"), output, limit)
        except StreampartError as exc:  # the shell goes on after a refused or failed statement
            # (escaped: a syntax error shows the statement's line, and "[/x]" in it is no markup)
            output.err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, emoji=False, markup=True)


def _looks_whole(text: str) -> bool:
    """A one-line statement runs on Enter; one with an open parenthesis waits for more."""
    return "\n" not in text and text.count("(") == text.count(")")


def run_on_server(conn: Connection, statement: str, output: Output, limit: int) -> None:
    """Run ``statement`` on the server; print its rows as ``streampart query`` does."""
    names, rows = conn.execute(statement)
    if _BARE_USE.match(statement):  # it sets the session's namespace and has no rows
        output.note(f"using {_BARE_USE.match(statement).group(1)}")  # type: ignore[union-attr]
        list(rows)
        return
    print_rows(output, names, rows, limit)


_BARE_USE = re.compile(r"^\s*USE\s+(`?\w+`?)\s*;?\s*$", re.IGNORECASE)


def print_rows(output: Output, names: list[str], rows: Iterator[tuple[Any, ...]], limit: int) -> None:
    """Rows as JSON objects one a line, or the first ``limit`` as a table."""

    def each_row() -> Iterator[dict[str, Any]]:
        for row in rows:
            yield dict(zip(names, row, strict=True))

    def print_grid(out: TextOutput) -> None:
        grid = listing(*names, whole=())  # values fold over lines, never cut
        first = list(itertools.islice(rows, limit + 1))
        for row in first[:limit]:
            grid.add_row(*(str(json_value(v)) if v is not None else "null" for v in row))
        out.table(grid)
        if len(first) > limit:
            out.console.print(f"(first {limit} rows shown)")

    output.rows(each_row(), print_grid)

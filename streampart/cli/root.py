"""The root of the ``streampart`` command line: global options, the commands, exit statuses."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape

from metastore.errors import ConflictError, StreampartError
from streampart.cli.check import check
from streampart.cli.chunks import chunk_app
from streampart.cli.clusters import cluster_app
from streampart.cli.context import CliContext
from streampart.cli.daemon import scheduler_app
from streampart.cli.demo import demo
from streampart.cli.dev import dev_app
from streampart.cli.federation import federation_app
from streampart.cli.help import HelpGroup
from streampart.cli.ingest_jobs import ingest_app
from streampart.cli.lifecycle import delete, expire
from streampart.cli.links import link_app
from streampart.cli.namespaces import namespace_app
from streampart.cli.query import query
from streampart.cli.replicas import table_replicate
from streampart.cli.rolls import housekeep, roll
from streampart.cli.server import serve
from streampart.cli.shares import share_app
from streampart.cli.sql import sql, sql_server
from streampart.cli.table_alter import table_alter
from streampart.cli.table_versions import table_history, table_read
from streampart.cli.tables import table_app
from streampart.cli.tokens import token_app
from streampart.cli.write import write
from streampart.errors import worker_start_error

app = typer.Typer(
    help="Streaming ingestion into time-partitioned Delta tables with streaming partitions and atomic rolls.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    cls=HelpGroup,  # every command's --help alike: streampart.cli.help
)
# in the order of `streampart --help`
table_app.command("alter")(table_alter)
table_app.command("replicate")(table_replicate)
table_app.command("history")(table_history)
table_app.command("read")(table_read)
app.add_typer(table_app, name="table")
app.add_typer(chunk_app, name="chunk")
app.add_typer(namespace_app, name="namespace")
app.add_typer(link_app, name="link")
app.add_typer(cluster_app, name="cluster")
app.add_typer(federation_app, name="federation")
app.add_typer(ingest_app, name="ingest")
app.add_typer(scheduler_app, name="scheduler")
app.command("serve")(serve)
app.add_typer(token_app, name="token")
app.add_typer(share_app, name="share")
app.command("sql-server")(sql_server)
app.command("sql")(sql)
for command in (write, roll, expire, delete, query, housekeep, check, demo):
    app.command()(command)
app.add_typer(dev_app, name="dev")


def _print_version(value: bool) -> None:
    if value:
        import streampart

        typer.echo(f"streampart {streampart.__version__}")
        raise typer.Exit()


@app.callback()
def _global(
    ctx: typer.Context,
    warehouse: Annotated[
        str | None,
        typer.Option(
            envvar="STREAMPART_WAREHOUSE",
            help="Warehouse: a directory, or s3://bucket/prefix [default: ./warehouse]",
        ),
    ] = None,
    metastore: Annotated[
        str | None,
        typer.Option(
            envvar="STREAMPART_METASTORE", help="Metastore URL [default: a SQLite file in the warehouse]"
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(envvar="STREAMPART_CONFIG", help="TOML config file; see conf/streampart.toml"),
    ] = None,
    spark_master: Annotated[
        str | None,
        typer.Option(
            "--spark-master",
            help="Spark master of the default cluster: local[N], spark://HOST:PORT, yarn, k8s://… "
            "(spark.master, STREAMPART_SPARK__MASTER)",
        ),
    ] = None,
    _version: Annotated[
        bool,
        typer.Option("--version", help="Print the version and exit", callback=_print_version, is_eager=True),
    ] = False,
) -> None:
    ctx.obj = CliContext(warehouse, metastore, config, spark_master=spark_master)


def main() -> None:
    """Entry point: one clear message and exit status 1 for any error of the user's or the world's."""
    try:
        _main()
    except SystemExit as exc:
        leave(exc.code)


def _main() -> None:
    err = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the terminal's width
    try:
        app()
    except StreampartError as exc:
        said = worker_start_error(exc) or exc  # Spark's words for a busy machine, quoted: what to do
        err.print(f"[red]error:[/] {escape(str(said))}", highlight=False, emoji=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except BaseException as exc:  # a store's fault, or a native library's panic, that no path named
        named = _store_fault(exc) or worker_start_error(exc)  # (or Spark's, for a busy machine)
        if named is None:
            raise
        err.print(f"[red]error:[/] {escape(str(named))}", highlight=False, emoji=False)
        sys.exit(1)


def leave(code: object) -> None:
    """End the process with the command's status, as the interpreter would, but without native
    libraries' static destructors: after a command's work and output are done, Arrow's C++ thread
    pools could still abort the process as it exits ("terminate called without an active
    exception", status -6; apache/arrow#34314), a few times in a hundred ``check`` runs on a busy
    2-core machine. So the interpreter's own exit steps are taken here in its order (non-daemon
    threads joined, ``atexit`` handlers run, the streams flushed) and then ``os._exit``."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"), as Python ends it
        print(code, file=sys.stderr)
        status = 1
    shutdown = getattr(threading, "_shutdown", None)  # what the interpreter itself runs at exit
    if shutdown is not None and threading.current_thread() is threading.main_thread():
        # threading's exit hooks first (a thread pool's idle workers are told to stop), then every
        # non-daemon thread is joined: a checkpoint the command started finishes
        shutdown()
    else:
        current = threading.current_thread()
        for thread in threading.enumerate():
            if thread is not current and not thread.daemon:
                thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a reader gone (`| head`), a closed stream
            stream.flush()
    os._exit(status)


def _store_fault(exc: BaseException) -> StreampartError | None:
    """What an error no command turned into a StreampartError is, if it is the store's (it did not
    serve) or a native library's panic: as ``metastore/storage/faults.py`` decides for every path."""
    from metastore.delta.log import listing_raced
    from metastore.storage import faults

    if type(exc).__name__ == "DeltaError" and listing_raced(exc):
        return ConflictError(
            "a listing of the table's Delta log raced a commit landing (it missed the file being "
            "added); nothing was found damaged: run the command again"
        )
    if faults.is_panic(exc):
        return faults.panic_error(exc, "running the command")
    if isinstance(exc, OSError) or type(exc).__name__ == "DeltaError":
        return faults.unavailable(exc)
    return None

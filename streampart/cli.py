"""The ``streampart`` command line."""

from __future__ import annotations

import base64
import json
import sys
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table as RichTable

from metastore.errors import StreampartError, UserInputError
from streampart.cli_ingest import ingest_app
from streampart.cli_scheduler import scheduler_app
from streampart.cli_serve import serve, token_app, write_over_http

app = typer.Typer(
    help="Streaming ingestion into time-partitioned Delta tables with streaming partitions and atomic rolls.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
table_app = typer.Typer(help="Create, list, describe and drop streaming tables.", no_args_is_help=True)
app.add_typer(table_app, name="table")
app.add_typer(ingest_app, name="ingest")
app.add_typer(scheduler_app, name="scheduler")
app.command("serve")(serve)
app.add_typer(token_app, name="token")

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)  # an error stays one line, whatever the terminal's width


@dataclass
class Context:
    warehouse: Path | None
    metastore: str | None
    config: Path | None

    def settings(self) -> Any:
        from streampart.config import load_settings

        return load_settings(self.config, warehouse=self.warehouse, metastore=self.metastore)

    def catalog(self) -> Any:
        from metastore.catalog import Catalog

        s = self.settings()
        return Catalog.open(s.warehouse, s.metastore.get_secret_value() if s.metastore else None)


STATE = Context(None, None, None)


@app.callback()
def _global(
    warehouse: Annotated[
        Path | None,
        typer.Option(envvar="STREAMPART_WAREHOUSE", help="Warehouse directory (default ./warehouse)"),
    ] = None,
    metastore: Annotated[
        str | None,
        typer.Option(
            envvar="STREAMPART_METASTORE", help="Metastore URL (default: a SQLite file in the warehouse)"
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(envvar="STREAMPART_CONFIG", help="TOML config file; see conf/streampart.toml"),
    ] = None,
) -> None:
    STATE.warehouse, STATE.metastore, STATE.config = warehouse, metastore, config


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        from metastore.models import iso
        from streampart.query import from_spark

        return iso(from_spark(value))
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    return str(value)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=_json_default) + "\n")
    sys.stdout.flush()


# -- tables ---------------------------------------------------------------------------------
@table_app.command("create")
def table_create(
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    schema: Annotated[str, typer.Option(help='Columns, e.g. "id BIGINT, ts TIMESTAMP, msg STRING"')],
    time_column: Annotated[str, typer.Option(help="The TIMESTAMP column the table is partitioned by")],
    roll_every: Annotated[str, typer.Option(help="Roll interval: 15m, 1h, 1d, …")],
    mode: Annotated[str, typer.Option(help="arrival (HIVE-4196) or event-time")] = "arrival",
    lateness: Annotated[
        str, typer.Option(help="event-time: how long a partition waits for late rows")
    ] = "0s",
    late_data: Annotated[
        str,
        typer.Option(
            help="event-time: what happens to late rows — reject, or divert (to NS.TABLE__late). A row "
            "is late when its partition is sealed already (its period ended more than --lateness ago and "
            "it rolled), or when its period ended more than --max-age ago"
        ),
    ] = "reject",
    max_future: Annotated[
        str,
        typer.Option(help="event-time: rows more than this ahead of the clock are bad records"),
    ] = "1d",
    max_age: Annotated[
        str | None,
        typer.Option(
            help="event-time: rows whose period ended more than this ago are late [default: no "
            "bound; a backfill opens its old partitions]"
        ),
    ] = None,
    dead_letter: Annotated[
        bool,
        typer.Option(help="Send malformed records to NS.TABLE__dead_letter instead of failing the chunk"),
    ] = False,
    partition_column: Annotated[
        str | None, typer.Option(help="Name of the partition column [default: <time-column>_period]")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Create a streaming table partitioned by one timestamp column."""
    from metastore.durations import parse_duration
    from metastore.models import LateDataPolicy, Mode, TableName, TableSpec, parse_schema

    spec = TableSpec(
        name=TableName.parse(name),
        columns=parse_schema(schema),
        time_column=time_column,
        partition_column=partition_column or f"{time_column}_period",
        mode=_choice(Mode, mode, "--mode"),
        roll_every=parse_duration(roll_every, "--roll-every"),
        lateness=parse_duration(lateness, "--lateness"),
        late_data=_choice(LateDataPolicy, late_data, "--late-data"),
        max_future=parse_duration(max_future, "--max-future"),
        max_age=parse_duration(max_age, "--max-age") if max_age is not None else None,
        dead_letter=dead_letter,
    )
    catalog = STATE.catalog()
    table = catalog.create_table(spec)
    info = catalog.describe(table)
    if as_json:
        emit_json(info)
    else:
        out.print(
            f"created [bold]{table.name}[/] ({info['mode']}, rolls every {info['roll_every']}) "
            f"at {table.location}"
        )


def _choice(enum: Any, value: str, option: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        raise UserInputError(
            f"{option} must be one of {', '.join(e.value for e in enum)}; got {value!r}"
        ) from None


@table_app.command("list")
def table_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """List tables."""
    catalog = STATE.catalog()
    rows = []
    for t in catalog.list_tables():
        parts = catalog.store.list_partitions(t.id)
        rows.append(
            {
                "table": str(t.name),
                "kind": t.kind.value,
                "mode": t.mode.value,
                "roll_every": _fmt_duration(t.roll_every),
                "partitions": len(parts),
                "streaming": sum(p.state.value == "streaming" for p in parts),
                "location": t.location,
            }
        )
    if as_json:
        emit_json(rows)
        return
    grid = RichTable("table", "kind", "mode", "roll every", "partitions", "streaming", "location")
    for r in rows:
        grid.add_row(
            *(
                str(r[k])
                for k in ("table", "kind", "mode", "roll_every", "partitions", "streaming", "location")
            )
        )
    out.print(grid if rows else "no tables")


def _fmt_duration(d: Any) -> str:
    from metastore.durations import format_duration

    return format_duration(d)


@table_app.command("describe")
def table_describe(
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Show a table and its partitions (state, chunks, rows, bytes, location)."""
    catalog = STATE.catalog()
    info = catalog.describe(catalog.table(name))
    if as_json:
        emit_json(info)
        return
    out.print(
        f"[bold]{info['table']}[/]  {info['mode']}, rolls every {info['roll_every']}"
        + (
            f", lateness {info['lateness']}, late data: {info['late_data']}, max future "
            f"{info['max_future']}, max age {info['max_age'] or 'none'}"
            if info["mode"] == "event-time"
            else ""
        )
        + f"\nschema: {info['schema']}"
        + f"\npartitioned by {info['partition_column']} (from {info['time_column']})"
        + f"\nlocation: {info['location']}  (Delta version {info['version']})"
    )
    grid = RichTable("partition", "state", "chunks", "rows", "bytes", "files", "location")
    for p in info["partitions"]:
        grid.add_row(
            p["value"],
            p["state"],
            str(p["chunks"]),
            str(p["rows"]),
            str(p["bytes"]),
            str(p["files"]),
            p["location"],
        )
    out.print(grid)


@table_app.command("drop")
def table_drop(
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    yes: Annotated[bool, typer.Option("--yes", help="Really delete the table and its data")] = False,
) -> None:
    """Drop a table: its metastore records and its directory."""
    if not yes:
        raise UserInputError("dropping deletes the table's data; add --yes to confirm")
    catalog = STATE.catalog()
    table = catalog.store.get_table(name)
    catalog.drop_table(table)
    out.print(f"dropped {table.name}")


# -- write ----------------------------------------------------------------------------------
@app.command()
def write(
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    file: Annotated[Path, typer.Argument(help="File to commit as one chunk ('-' for standard input)")],
    format: Annotated[
        str | None, typer.Option("--format", help="jsonl, csv or parquet [default: from the file name]")
    ] = None,
    token: Annotated[
        str | None, typer.Option(help="Idempotency token: a retry with the same token lands once")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
    url: Annotated[
        str | None, typer.Option(help="Send through the HTTP API at URL (streampart serve)")
    ] = None,
    api_token: Annotated[
        str | None, typer.Option(envvar="STREAMPART_API_TOKEN", help="Bearer token for --url")
    ] = None,
) -> None:
    """Commit FILE as one chunk into the table's streaming partition(s)."""
    from ingest.chunks import ChunkWriter
    from ingest.formats import Format

    fmt = _choice(Format, format, "--format") if format else Format.guess(file)
    if url is not None:
        return write_over_http(url, api_token, name, file, fmt, token, as_json)
    if str(file) == "-":
        content = sys.stdin.buffer.read()
    else:
        try:
            content = file.read_bytes()
        except FileNotFoundError:
            raise UserInputError(f"file {file} does not exist") from None
        except IsADirectoryError:
            raise UserInputError(f"{file} is a directory, not a file") from None
        except OSError as exc:
            raise UserInputError(f"cannot read {file}: {exc.strerror or exc}") from None
    settings = STATE.settings()
    catalog = STATE.catalog()
    writer = ChunkWriter(catalog, catalog.table(name), settings.chunk)
    result = writer.write_once(content, fmt, token=token, source=str(file))
    if as_json:
        emit_json(result.to_json())
    else:
        extra = ""
        if result.dead_letter_rows:
            extra += f", {result.dead_letter_rows} bad records to the dead-letter table"
        if result.late_rows:
            extra += f", {result.late_rows} late rows diverted"
        if result.ignored_fields:
            fields = ", ".join(f"{k} ({n} records)" for k, n in sorted(result.ignored_fields.items()))
            err.print(
                f"warning: fields not in the table were not written: {fields}", highlight=False, markup=False
            )
        out.print(
            f"committed chunk {result.chunk}: {result.rows} rows into "
            f"{', '.join(result.partitions) or '(none)'} "
            f"at version {result.version}{extra}"
        )


# -- roll -----------------------------------------------------------------------------------
@app.command()
def roll(
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    now: Annotated[
        str | None, typer.Option(help="Roll what is due at this ISO-8601 time [default: now]")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Roll the open streaming partition(s) now")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Roll every partition of the table that is due (or, with --force, the open ones)."""
    from metastore.models import iso, parse_instant
    from scheduler.roll import Roller

    settings = STATE.settings()
    catalog = STATE.catalog()
    table = catalog.table(name)
    at = parse_instant(now, "--now") if now else None
    results = Roller(catalog, settings.roll).roll_table(table, now=at, force=force)
    # rolls another roller holds (or whose lease has not lapsed yet): say whose, and why it may be stuck
    held = [
        {"partition": iso(r.partition_value), "roll": r.id, "state": r.state.value, "owner": r.owner,
         "lease_until": iso(r.lease_until) if r.lease_until else None, "last_error": r.error}
        for r in catalog.store.list_rolls(table.id, unfinished=True)
    ]  # fmt: skip
    if as_json:
        emit_json({"table": str(table.name), "rolled": [r.to_json() for r in results], "in_progress": held})
        return
    if not results and not held:
        out.print(f"{table.name}: nothing to roll")
    for h in held:
        out.print(
            f"{table.name} partition {h['partition']}: its roll ({h['state']}) is held by {h['owner']} until "
            f"{h['lease_until']}" + (f"; last error: {h['last_error']}" if h["last_error"] else ""),
            highlight=False,
            markup=False,
        )
    for r in results:
        out.print(
            f"rolled {r.table} partition {r.partition}: {r.chunks} chunks, {r.rows} rows, "
            f"{r.files_before} → {r.files_after} files in {r.seconds:.2f}s"
            + (f"; next streaming partition {r.next_partition}" if r.next_partition else "")
            + (" (resumed)" if r.resumed else "")
        )


# -- query ----------------------------------------------------------------------------------
@app.command()
def query(
    sql: Annotated[str, typer.Argument(help="Spark SQL; tables are addressed as ns.table")],
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON object per row, one per line")
    ] = False,
    limit: Annotated[int, typer.Option(help="Rows to print as a table (without --json)")] = 1000,
) -> None:
    """Run Spark SQL over the warehouse's tables, each read at one consistent snapshot."""
    from streampart.query import run_sql, spark_errors, spark_session

    settings = STATE.settings()
    catalog = STATE.catalog()
    from streampart.query import rewrite

    rewrite(sql, {str(t.name) for t in catalog.list_tables()})  # fail fast, before Spark starts
    spark = spark_session(settings.spark)
    df = run_sql(spark, catalog, sql)
    if as_json:
        with spark_errors():
            for row in df.toLocalIterator():
                emit_json(row.asDict(recursive=True))
        return
    with spark_errors():
        rows = df.limit(limit + 1).collect()
    grid = RichTable(*df.columns)
    for row in rows[:limit]:
        grid.add_row(*(str(_json_default(v)) if v is not None else "null" for v in row))
    out.print(grid)
    if len(rows) > limit:
        out.print(f"(first {limit} rows shown)")


# -- housekeeping ---------------------------------------------------------------------------
@app.command()
def housekeep(as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """Expire reserved chunks past their TTL and finish commits whose writer died."""
    from ingest.chunks import expire_chunks, recover_commits

    settings = STATE.settings()
    catalog = STATE.catalog()
    expired = expire_chunks(catalog)
    recovered = recover_commits(catalog, settings.chunk)
    if as_json:
        emit_json({"expired": [c.id for c in expired], "recovered": [r.to_json() for r in recovered]})
    else:
        out.print(f"expired {len(expired)} reserved chunks; finished {len(recovered)} interrupted commits")


@app.command()
def check(
    name: Annotated[str | None, typer.Argument(help="NAMESPACE.TABLE [default: every table]")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False,
) -> None:
    """Check tables' Delta logs and files against themselves and the metastore; exit 1 on any error.

    Finds lost, empty or truncated commit files, gaps in the log, a log behind the metastore,
    missing, truncated or unreadable data files, standard partitions without their marker or
    with other rows than rolled, and (warnings) stray files in standard partitions' directories.
    """
    from metastore.integrity import check_table

    catalog = STATE.catalog()
    tables = [catalog.store.get_table(name)] if name else catalog.list_tables()
    problems = [p for t in tables for p in check_table(catalog, t)]
    errors = [p for p in problems if p.severity == "error"]
    if as_json:
        emit_json({"tables": len(tables), "errors": len(errors), "problems": [p.to_json() for p in problems]})
    else:
        for p in problems:
            out.print(f"{p.severity}: {p.table}: {p.kind}: {p.message}", highlight=False, markup=False)
        warnings = len(problems) - len(errors)
        out.print(f"checked {len(tables)} table(s): {len(errors)} error(s), {warnings} warning(s)")
    if errors:
        raise typer.Exit(1)


@app.command()
def demo(
    keep: Annotated[
        bool, typer.Option(help="Keep an existing demo table instead of starting afresh")
    ] = False,
) -> None:
    """Create a demo table, write chunks, roll, query, and print what happened."""
    from streampart.demo import run_demo

    run_demo(STATE.settings(), STATE.catalog(), out, fresh=not keep)


def main() -> None:
    """Entry point: one clear message and exit status 1 for any error of the user's or the world's."""
    try:
        app()
    except StreampartError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, emoji=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)


if __name__ == "__main__":
    # Run the importable module, not this __main__ copy: sub-command modules (cli_ingest, …)
    # import streampart.cli for the global options, and there must be one STATE.
    from streampart.cli import main as _main

    _main()

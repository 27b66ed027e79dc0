"""``streampart expire`` (by hand, what the roll daemon's expiry pass does on its schedule) and
``streampart delete`` (rows by predicate): the data lifecycle of issue 30."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag


def expire(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="NAMESPACE.TABLE [default: every table]")] = None,
    now: Annotated[
        str | None, typer.Option(help="Expire what is due at this ISO-8601 time [default: now]")
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only say what would expire")] = False,
    _json: JsonFlag = False,
) -> None:
    """Expire the standard partitions whose retention (--retain) ran out: each table's in one Delta
    commit. Queries pinned before it keep reading them; their files go later (housekeeping)."""
    from metastore.errors import FederationAccessError
    from metastore.models import parse_instant
    from scheduler.expiry import Expirer

    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog()
    tables = cli.tables(catalog, name)  # every table: companions too, they keep what their main table keeps
    at = parse_instant(now, "--now") if now else None
    results = []
    for table in tables:
        try:
            home = catalog.home(table, write=not dry_run)
        except FederationAccessError:
            if name:
                raise
            continue  # its metastore takes no writes from streampart: not ours to expire
        results += Expirer(home, settings.roll).expire_table(table, now=at, dry_run=dry_run)
    cli.output.result(
        {"tables": len(tables), "dry_run": dry_run, "expired": [r.to_json() for r in results]}, _print_expired
    )


def _print_expired(out: TextOutput, info: dict[str, Any]) -> None:
    if not info["expired"]:
        out.console.print(f"nothing to expire ({info['tables']} table(s) looked at)")
    verb = "would expire" if info["dry_run"] else "expired"
    for r in info["expired"]:
        values = r["partitions"]
        out.console.print(
            f"{r['table']}: {verb} {len(values)} partition(s) past {r['retain']} retention, from "
            f"{values[0][:19].replace('T', ' ')} to {values[-1][:19].replace('T', ' ')}: {r['rows']} rows, "
            f"{r['files']} files, {r['bytes']} bytes"
            + (f" (Delta version {r['version']})" if r["version"] is not None else "")
            + (" (resumed)" if r["resumed"] else ""),
            highlight=False,
            markup=False,
        )


def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    where: Annotated[
        str,
        typer.Option(
            "--where",
            help="One SQL condition over the table's columns: the rows it is true for go "
            "(user_id = 42, country IN ('DE', 'FR') AND ts < TIMESTAMP '2026-01-01 00:00:00')",
        ),
    ],
    all_rows: Annotated[
        bool, typer.Option("--all", help="Allow a condition that names no column (TRUE): every row goes")
    ] = False,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only count the rows and files it would touch")
    ] = False,
    _json: JsonFlag = False,
) -> None:
    """Delete the rows matching --where from the table's standard and streaming partitions, in one
    Delta commit. Rows committed while it runs are not deleted (run it again); older versions keep
    the rows (time travel) until housekeeping deletes their files."""
    from ingest.deletes.deleter import Deleter

    cli = cli_context(ctx)
    catalog = cli.catalog()
    table = catalog.table(name)  # a link or an unknown table: one error, nothing changed
    results = Deleter(catalog).delete(table, where, all_rows=all_rows, dry_run=dry_run)
    cli.output.result({"dry_run": dry_run, "deletes": [r.to_json() for r in results]}, _print_deleted)


def _print_deleted(out: TextOutput, info: dict[str, Any]) -> None:
    for r in info["deletes"]:
        verb = "would delete" if info["dry_run"] else "deleted"
        where = f" (resumed: {r['where']})" if r["resumed"] else ""
        out.console.print(
            f"{r['table']}: {verb} {r['rows']} rows from {len(r['partitions'])} partition(s): "
            f"{r['files_removed']} file(s) rewritten as {r['files_added']}"
            + (f", after reading {r['files_read']} file(s)" if r["files_read"] else "")
            + (f" (Delta version {r['version']})" if r["version"] is not None else "")
            + where,
            highlight=False,
            markup=False,
        )

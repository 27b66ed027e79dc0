"""``streampart check``: tables' Delta logs and files against themselves and the metastore."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag


def check(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="NAMESPACE.TABLE [default: every table]")] = None,
    _json: JsonFlag = False,
) -> None:
    """Check tables' Delta logs and files against themselves and the metastore; exit 1 on any error.

    Finds lost, empty or truncated commit files, gaps in the log, a log behind the metastore,
    missing, truncated or unreadable data files, standard partitions without their marker or
    with other rows than rolled, rows a finished delete should have removed, and (warnings) stray
    files in standard partitions' directories.
    """
    from ingest.deletes.audit import missed_by_deletes
    from metastore.integrity import check_table

    cli = cli_context(ctx)
    catalog = cli.catalog()
    tables = cli.tables(catalog, name)
    problems = [p for t in tables for p in [*check_table(catalog, t), *missed_by_deletes(catalog, t)]]
    errors = sum(p.severity == "error" for p in problems)
    cli.output.result(
        {"tables": len(tables), "errors": errors, "problems": [p.to_json() for p in problems]}, _print_checked
    )
    if errors:
        raise typer.Exit(1)


def _print_checked(out: TextOutput, report: dict[str, Any]) -> None:
    for p in report["problems"]:
        out.console.print(
            f"{p['severity']}: {p['table']}: {p['kind']}: {p['message']}", highlight=False, markup=False
        )
    warnings = len(report["problems"]) - report["errors"]
    out.console.print(
        f"checked {report['tables']} table(s): {report['errors']} error(s), {warnings} warning(s)"
    )

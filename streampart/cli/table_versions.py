"""``streampart table history|read``: a table's Delta versions, and its rows as of one, without Spark.

``table read`` follows a query's rules (:mod:`metastore.snapshots`): the committed rows of one
pinned version (the newest by default), a link's through its source. SQL over a version is
``streampart query "SELECT … FROM NS.T VERSION AS OF N"``, which starts Spark. Neither command
imports pyspark (nor the SQL parser), so both answer in about a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from metastore.links import Resolved

TableName = Annotated[
    str, typer.Argument(help="NAMESPACE.TABLE, or NAMESPACE.LOCAL of a link (its source's)")
]


def _newest(catalog: Catalog, resolved: Resolved) -> tuple[int, str]:
    """The newest version of the table a name reads (checked against the metastore), and the table's
    log retention in words."""
    from metastore.delta.checkpoints import log_settings
    from metastore.durations import format_duration

    dt = catalog.load(resolved.table)
    return int(dt.version()), format_duration(log_settings(dt).log_retention)


def table_history(
    ctx: typer.Context,
    name: TableName,
    limit: Annotated[int, typer.Option(help="At most this many versions, the newest first", min=1)] = 20,
    _json: JsonFlag = False,
) -> None:
    """List a table's Delta versions, newest first: time, operation, the chunks each committed or the
    roll it sealed or swept. Versions past the table's log retention are gone (`table alter
    --log-retention`)."""
    from metastore.delta.history import history, oldest_readable_version

    cli = cli_context(ctx)
    catalog = cli.catalog()
    resolved = catalog.resolve(name)
    table = resolved.table
    newest, retention = _newest(catalog, resolved)
    versions = history(table, newest, limit)
    info = {
        "table": str(resolved.name),
        "source": str(table.name) if resolved.link is not None else None,
        "newest": newest,
        "oldest_readable": oldest_readable_version(table),
        "log_retention": retention,
        "versions": [v.to_json() for v in versions],
    }
    cli.output.result(info, _print_history)


def _print_history(out: TextOutput, info: dict[str, Any]) -> None:
    via = f" (a link: the versions of {info['source']})" if info["source"] else ""
    out.console.print(
        f"{info['table']}{via}: versions {info['oldest_readable']}..{info['newest']} readable "
        f"(commit files kept {info['log_retention']})",
        highlight=False,
    )
    for v in info["versions"]:
        if v["kind"] == "chunks":
            what = f"{len(v['chunks'])} chunk(s): {', '.join(v['chunks'])}"
        elif v["kind"] in ("seal", "sweep"):
            what = f"roll {v['roll']} ({'sealed the partition' if v['kind'] == 'seal' else 'swept it'})"
        elif v["kind"] == "schema":
            what = "schema changed"
        elif v["kind"] == "create":
            what = "table created"
        elif v["kind"] == "unavailable":
            what = "its commit file is gone (past the log retention; a checkpoint holds it)"
        else:
            what = ""
        if v.get("schema_change") and v["kind"] != "schema":
            what += " (schema changed)"
        out.console.print(
            f"{v['version']:>6}  {(v['timestamp'] or '')[:19].replace('T', ' '):19}  "
            f"{v['operation'] or '':<18} {what}",
            highlight=False,
            markup=False,
        )


def table_read(
    ctx: typer.Context,
    name: TableName,
    version: Annotated[
        int | None,
        typer.Option(help="The Delta version to read (`table history` lists them) [default: newest]"),
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many rows (0: all)", min=0)] = 100,
    _json: JsonFlag = False,
) -> None:
    """Print a table's committed rows as of one Delta version (the newest by default), without Spark.

    The rows of every chunk committed by that version (never of an open or aborted chunk); a link
    shows what it admits of its source at that version of the source. --json: one JSON object a
    row. For SQL over a version: streampart query "SELECT … FROM NS.T VERSION AS OF N".
    """
    from metastore.delta.history import check_readable
    from metastore.snapshots import pin, view_of
    from streampart.snapshots import read_batches

    cli = cli_context(ctx)
    catalog = cli.catalog()
    resolved = catalog.resolve(name)
    table = resolved.table
    newest, retention = _newest(catalog, resolved)
    if version is not None:
        check_readable(table, version, newest, retention)
    snap = view_of(resolved, pin(catalog, table, version))
    if table.keys is None:
        total = sum(f.rows for f in snap.files)
        batches: Any = read_batches(snap, limit or None)
    else:  # its rows are its live keys, known once every version was read
        import pyarrow as pa

        got = list(read_batches(snap))
        every = pa.Table.from_batches(got) if got else None
        total = every.num_rows if every is not None else 0
        batches = [] if every is None else (every.slice(0, limit) if limit else every).to_batches()
    cli.output.note(
        f"{resolved.name} at version {snap.version}"
        + (f" (newest {newest})" if snap.version != newest else " (the newest)")
        + f": {total} row(s)"
        + (f", the first {limit} shown" if limit and total > limit else "")
    )
    columns = [c.name for c in snap.columns] + [table.partition_column]  # the columns of that version

    def rows() -> Any:
        for batch in batches:
            for row in batch.to_pylist():
                yield {k: _plain(v) for k, v in row.items()}

    def text(out: TextOutput) -> None:
        grid = listing(*columns, whole=())  # values fold over lines, never cut (as query prints)
        for row in rows():
            grid.add_row(*("" if row[c] is None else str(row[c]) for c in columns))
        out.table(grid)

    cli.output.rows(rows(), text)


def _plain(value: Any) -> Any:
    """A value as JSON shows it: an instant as ISO-8601 UTC (here, so the output needs no Spark helper)."""
    from datetime import datetime

    from metastore.models import iso

    return iso(value) if isinstance(value, datetime) else value

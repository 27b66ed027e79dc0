"""``streampart query``: Spark SQL over the warehouse's tables."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated, Any

import typer
from rich.table import Table as RichTable

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, json_value
from streampart.cli.params import json_flag


def query(
    ctx: typer.Context,
    sql: Annotated[str, typer.Argument(help="Spark SQL; tables are addressed as ns.table")],
    _json: Annotated[bool, json_flag("Print one JSON object per row, one per line")] = False,
    limit: Annotated[int, typer.Option(help="Rows to print as a table (without --json)")] = 1000,
    namespace: Annotated[
        str | None,
        typer.Option(
            help="The namespace the query runs in (or `USE NS;` first): its tables and links may be "
            "named T, links also T@SOURCE_NS; an isolated namespace reads nothing else"
        ),
    ] = None,
) -> None:
    """Run Spark SQL over the warehouse's tables and links, each read at one consistent snapshot."""
    from streampart.query import catalog_resolver, rewrite, run_sql, spark_errors, spark_session, split_use

    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog()
    body, ns = split_use(sql, namespace)
    if ns is not None:
        catalog.store.get_namespace(ns)
    rewrite(body, catalog_resolver(catalog, ns))  # fail fast, before Spark starts
    spark = spark_session(settings.spark)
    df = run_sql(spark, catalog, sql, namespace)

    def each_row() -> Iterator[dict[str, Any]]:  # streamed: no more than a partition in memory
        with spark_errors():
            for row in df.toLocalIterator():
                yield row.asDict(recursive=True)

    def print_grid(out: TextOutput) -> None:
        with spark_errors():
            rows = df.limit(limit + 1).collect()
        grid = RichTable(*df.columns)
        for row in rows[:limit]:
            grid.add_row(*(str(json_value(v)) if v is not None else "null" for v in row))
        out.console.print(grid)
        if len(rows) > limit:
            out.console.print(f"(first {limit} rows shown)")

    cli.output.rows(each_row(), print_grid)

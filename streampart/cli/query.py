"""``streampart query``: Spark SQL over the warehouse's tables; INSERT INTO and CREATE TABLE … AS; ALTER TABLE
… ADD COLUMNS / ALTER COLUMN … TYPE (without Spark, :mod:`streampart.query_alter`)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from typing import Annotated, Any

import typer

from metastore.errors import UserInputError
from streampart.cli.context import CliContext, cli_context
from streampart.cli.output import TextOutput, json_value, listing
from streampart.cli.params import json_flag

SqlArgument = Annotated[
    str,
    typer.Argument(
        help="Spark SQL: a query, INSERT INTO ns.t SELECT …, CREATE TABLE ns.t [TBLPROPERTIES "
        "(…)] AS SELECT …, or ALTER TABLE ns.t ADD COLUMNS (…) / ALTER COLUMN c TYPE T; tables are "
        "addressed as ns.table"
    ),
]
NamespaceOption = Annotated[
    str | None,
    typer.Option(
        help="The namespace the query runs in (or `USE NS;` first): its tables and links may be "
        "named T, links also T@SOURCE_NS; an isolated namespace reads nothing else"
    ),
]
KeyOption = Annotated[
    str | None,
    typer.Option(
        "--idempotency-key",
        "--key",
        "--token",
        help="INSERT INTO / CREATE TABLE … AS: the idempotency key of the chunk the result commits "
        "as; a retry with the same key and result lands once (ALTER TABLE: of the schema change) "
        "[default: a new key per run]",
    ),
]
ClusterOption = Annotated[
    str | None,
    typer.Option(
        help="Run on this cluster (or `USE CLUSTER C;` first), or fail saying what is missing "
        "there [default: the written table's primary, else the first primary of a table read "
        "where every table read is present]"
    ),
]
ReplicatedOnlyOption = Annotated[
    bool,
    typer.Option(
        "--replicated-only",
        help="On a secondary cluster, read a table as of its newest partition replicated there "
        "(standard partitions only, one consistent cut per table; stated in the output)",
    ),
]
ExplainOption = Annotated[
    bool,
    typer.Option("--explain", help="Print the cluster chosen and why (and what is read where); run nothing"),
]
ServerOption = Annotated[
    str | None,
    typer.Option(
        help="Send a read to the SQL server at HOST:PORT (STREAMPART_SQL_SERVER) [default: the one "
        "serving this warehouse on this host, if one runs; else Spark starts in this process]"
    ),
]
NoServerOption = Annotated[
    bool, typer.Option("--no-server", help="Run in this process even when a SQL server runs")
]


def query(
    ctx: typer.Context,
    sql: SqlArgument,
    _json: Annotated[
        bool, json_flag("Print one JSON object per row, one per line (a write: what it committed)")
    ] = False,
    limit: Annotated[int, typer.Option(help="Rows to print as a table (without --json)")] = 1000,
    namespace: NamespaceOption = None,
    key: KeyOption = None,
    cluster: ClusterOption = None,
    replicated_only: ReplicatedOnlyOption = False,
    explain: ExplainOption = False,
    server: ServerOption = None,
    no_server: NoServerOption = False,
) -> None:
    """Run Spark SQL over the warehouse's tables and links, each read at one consistent snapshot.

    INSERT INTO commits the query's result into a table as one chunk; CREATE TABLE … AS SELECT
    makes a new streaming table with the result as its first chunk. Both land exactly once per
    --idempotency-key. ALTER TABLE ns.t ADD COLUMNS (c T, …) and ALTER COLUMN c TYPE T (a widening)
    change the table's schema without starting Spark; columns are never renamed or dropped.

    Time travel: `SELECT … FROM ns.t VERSION AS OF 12` (or `TIMESTAMP AS OF '2026-11-25T10:00:00Z'`)
    reads the table as of that Delta version; `streampart table history ns.t` lists the versions,
    and `streampart table read ns.t --version 12` prints their rows without starting Spark.
    """
    cli = cli_context(ctx)
    cli.settings()  # a bad setting is the first error, wherever the statement runs
    if server is not None and no_server:
        raise UserInputError("--server and --no-server contradict each other: give one of them")
    if not (no_server or explain or key or cluster or replicated_only) and _on_server(
        cli, sql, namespace, server, limit
    ):
        return
    _run_here(cli, sql, namespace, key, cluster, replicated_only, explain, limit)


def _run_here(
    cli: CliContext,
    sql: str,
    namespace: str | None,
    key: str | None,
    cluster: str | None,
    replicated_only: bool,
    explain: bool,
    limit: int,
) -> None:
    """Plan the statement, then explain it, or run it on Spark in this process and print its outcome."""
    from streampart.query import spark_session, split_use
    from streampart.query_alter import is_alter
    from streampart.query_plan import plan, run
    from streampart.query_writes import WriteResult

    session = split_use(sql, namespace, cluster)
    if is_alter(session.sql):
        if explain or replicated_only or session.cluster is not None:
            raise UserInputError(
                "ALTER TABLE changes the table's schema without Spark and reads nothing: --explain, "
                "--cluster (USE CLUSTER) and --replicated-only do not apply"
            )
        _alter(cli, session.sql, session.namespace, key)
        return
    settings = cli.settings()
    catalog = cli.catalog()
    planned = plan(catalog, sql, namespace, cluster, replicated_only)  # before Spark starts
    if planned.prepared.output is None and key is not None:
        raise UserInputError(
            "--idempotency-key names the chunk that INSERT INTO or CREATE TABLE … AS commits; "
            "this statement only reads"
        )
    spark_config = settings.spark_for(catalog.clusters.get(planned.cluster))
    if explain:
        cli.output.result({**planned.explain(), "spark_master": spark_config.master}, _print_explain)
        return
    for note in planned.notes():
        cli.output.warn(note)
    spark = spark_session(spark_config)
    done = run(
        spark,
        catalog,
        planned,
        key,
        settings.chunk,
        create_namespace=not settings.namespaces.require_explicit,
    )
    if isinstance(done, WriteResult):
        cli.output.result({**done.to_json(), "cuts": planned.notes()}, _print_written)
        return
    _print_rows(cli, done, limit)


def _alter(cli: CliContext, sql: str, namespace: str | None, key: str | None) -> None:
    """Run ``ALTER TABLE … ADD COLUMNS / ALTER COLUMN … TYPE`` through ``catalog.schemas`` (``key``:
    the change's idempotency key) and print what changed."""
    from streampart.query_alter import parse_alter

    statement = parse_alter(sql)
    name = statement.table
    if "." not in name:
        if namespace is None:
            raise UserInputError(
                f"ALTER TABLE {name}: name the table NAMESPACE.TABLE (or USE NAMESPACE; first)"
            )
        name = f"{namespace}.{name}"
    catalog = cli.catalog()
    altered = catalog.schemas.alter(
        catalog.table(name), statement.add, statement.widen, key=key, source="sql"
    )
    change = altered.change
    info = {
        "table": str(altered.table.name),
        "schema_change": {"version": change.version, "change": change.description, "key": change.key},
        "columns": [
            {"name": c.name, "type": c.sql_type, "nullable": c.nullable} for c in altered.table.columns
        ],
    }
    cli.output.result(info, _print_altered)


def _print_altered(out: TextOutput, info: dict[str, Any]) -> None:
    change = info["schema_change"]
    columns = ", ".join(f"{c['name']} {c['type']}" for c in info["columns"])
    out.console.print(
        f"{info['table']}: {change['change']} (Delta version {change['version']})", markup=False
    )
    out.console.print(f"{info['table']}: columns {columns}", markup=False)


def _print_rows(cli: CliContext, df: Any, limit: int) -> None:
    """A read's rows: streamed as JSON lines, or the first ``limit`` as a table."""
    from streampart.query_errors import spark_errors

    def each_row() -> Iterator[dict[str, Any]]:  # streamed: no more than a partition in memory
        with spark_errors():
            for row in df.toLocalIterator():
                yield row.asDict(recursive=True)

    def print_grid(out: TextOutput) -> None:
        with spark_errors():
            rows = df.limit(limit + 1).collect()
        grid = listing(*df.columns, whole=())  # values fold over lines, never cut
        for row in rows[:limit]:
            grid.add_row(*(str(json_value(v)) if v is not None else "null" for v in row))
        out.table(grid)
        if len(rows) > limit:
            out.console.print(f"(first {limit} rows shown)")

    cli.output.rows(each_row(), print_grid)


def _on_server(cli: CliContext, sql: str, namespace: str | None, server: str | None, limit: int) -> bool:
    """Run a read on the SQL server serving this warehouse (or ``--server``): False if none runs,
    or if the statement writes (INSERT INTO / CREATE TABLE … AS run here)."""
    from metastore.delta.warehouse import Warehouse
    from streampart.cli.sql import run_on_server
    from streampart.sql_client import Connection, SqlServerUnavailableError, find_server

    target = find_server(Warehouse(cli.settings().warehouse).local_dir, server)
    if target is None or _writes(sql):
        return False
    statement = f"USE `{namespace}`; {sql}" if namespace else sql
    try:
        conn = Connection(target)
    except SqlServerUnavailableError as exc:
        if server is not None or os.environ.get("STREAMPART_SQL_SERVER"):
            raise  # named: its failure is the answer
        cli.output.warn(f"warning: {exc}; running the query in this process instead")
        return False
    with conn:
        run_on_server(conn, statement, cli.output, limit)
    return True


def _writes(sql: str) -> bool:
    """Whether ``sql`` may write a table (INSERT INTO, CREATE TABLE … AS, ALTER TABLE): such a statement runs
    here. A word test, not a parse, so a read sent to the server imports no parser; a read that
    merely mentions the words runs here too, as it always did."""
    return _WRITE_WORDS.search(sql) is not None


_WRITE_WORDS = re.compile(r"\b(INSERT|CREATE|ALTER)\b", re.IGNORECASE)


def _print_explain(out: TextOutput, plan: dict[str, Any]) -> None:
    out.console.print(
        f"runs on cluster {plan['cluster']} (Spark master {plan['spark_master']}): "
        f"{plan['reason'].split(': ', 1)[-1]}",
        markup=False,
    )
    for read in plan["reads"]:
        cut = read.get("cut")
        how = f", as of partition {cut['as_of_partition']}" if cut else ""
        out.console.print(
            f"  reads {read['table']} on {read['cluster']} ({read['copy']}{how}): version {read['version']}, "
            f"{read['partitions']} partition(s) at {read['location']}",
            markup=False,
        )


def _print_written(out: TextOutput, result: dict[str, Any]) -> None:
    """What a writing statement committed (``--json``: the same as an object)."""
    made = f"created {result['table']} on cluster {result['cluster']}; " if result["created"] else ""
    if not result["chunk"]:
        out.console.print(f"{made}the query's result was empty: nothing committed into {result['table']}")
        return
    extra = ""
    if result.get("dead_letter_rows"):
        extra += f", {result['dead_letter_rows']} bad rows to the dead-letter table"
    if result.get("late_rows"):
        extra += f", {result['late_rows']} late rows diverted"
    out.console.print(
        f"{made}committed chunk {result['chunk']}: {result['rows']} rows into {result['table']} "
        f"({', '.join(result['partitions']) or 'no partition'}) at version {result['version']}{extra}"
    )

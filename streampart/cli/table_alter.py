"""``streampart table alter``: a table's columns (add, widen), its schema evolution, its secondary
clusters (``--add-replica/--drop-replica``), its Delta log schedule and its clustering.

Every option is checked before anything changes: a schema change names all its problems at once
(``catalog.schemas.alter``), a replica that does not exist or cannot be added stops the command
before its schema changes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag, choice
from streampart.cli.tables import (
    CheckpointIntervalOption,
    ClusterByOption,
    DeleteOpsOption,
    LogRetentionOption,
    MaxNewColumnsOption,
    OpColumnOption,
    PrimaryKeyOption,
    RetainOption,
    SchemaEvolutionOption,
    SequenceByOption,
    UpsertOpsOption,
    check_max_new_columns,
)

if TYPE_CHECKING:
    from datetime import timedelta

    from metastore.catalog import Catalog
    from metastore.models import RecordedSchemaChange, Table

_NOTHING = (
    "nothing to change: give --add-column 'NAME TYPE', --widen-column 'NAME TYPE', --schema-evolution MODE, "
    "--max-new-columns N, --add-replica CLUSTER, --drop-replica CLUSTER, --checkpoint-interval N, "
    "--log-retention DURATION, --retain DURATION|none|namespace, --cluster-by COLS|none or (on an empty "
    "table) --primary-key COLS"
)


def table_alter(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    add_column: Annotated[
        list[str] | None,
        typer.Option(
            "--add-column",
            help='Add a nullable column, "NAME TYPE" (repeatable); rows written before read null',
        ),
    ] = None,
    widen_column: Annotated[
        list[str] | None,
        typer.Option(
            "--widen-column",
            help='Widen a column in place, "NAME TYPE" (repeatable): INT to BIGINT, FLOAT to DOUBLE, '
            "a DECIMAL's precision",
        ),
    ] = None,
    schema_evolution: SchemaEvolutionOption = None,
    max_new_columns: MaxNewColumnsOption = None,
    add_replica: Annotated[
        list[str] | None,
        typer.Option(
            "--add-replica",
            help="Replicate the table's standard partitions to this cluster (a secondary); the roll daemon "
            "copies those rolled already too (or `table replicate` at once)",
        ),
    ] = None,
    drop_replica: Annotated[
        list[str] | None,
        typer.Option("--drop-replica", help="Stop replicating to this cluster: its copies and records go"),
    ] = None,
    checkpoint_interval: CheckpointIntervalOption = None,
    log_retention: LogRetentionOption = None,
    retain: RetainOption = None,
    primary_key: PrimaryKeyOption = None,
    sequence_by: SequenceByOption = None,
    op_column: OpColumnOption = None,
    delete_ops: DeleteOpsOption = None,
    upsert_ops: UpsertOpsOption = None,
    cluster_by: ClusterByOption = None,
    _json: JsonFlag = False,
) -> None:
    """Change a table's columns or schema evolution, its secondary clusters, or its Delta log schedule;
    give an empty table a primary key."""
    from metastore.delta.checkpoints import check_checkpoint_interval, check_log_retention
    from metastore.models import SchemaEvolution, keys_from_options, parse_cluster_by, parse_column_change
    from metastore.retention import parse_retain

    keys = keys_from_options(primary_key, sequence_by, op_column, delete_ops, upsert_ops)
    add = [parse_column_change(c, "--add-column") for c in add_column or ()]
    widen = [parse_column_change(c, "--widen-column") for c in widen_column or ()]
    evolution = choice(SchemaEvolution, schema_evolution, "--schema-evolution") if schema_evolution else None
    if max_new_columns is not None:
        check_max_new_columns(max_new_columns, 0)
    settings_change = evolution is not None or max_new_columns is not None
    log_change = checkpoint_interval is not None or log_retention is not None
    retain_to = parse_retain(retain) if retain is not None else None
    cluster_to = parse_cluster_by(cluster_by) if cluster_by is not None else None
    if (
        not (add or widen or settings_change or add_replica or drop_replica or log_change or retain or keys)
        and cluster_to is None
    ):
        raise UserInputError(_NOTHING)
    if checkpoint_interval is not None:
        check_checkpoint_interval(checkpoint_interval)
    retention = check_log_retention(log_retention) if log_retention is not None else None
    both = set(add_replica or ()) & set(drop_replica or ())
    if both:
        raise UserInputError(f"--add-replica and --drop-replica both name {', '.join(sorted(both))}")
    cli = cli_context(ctx)
    catalog = cli.catalog()
    table = catalog.table(name)
    _check(catalog, table, add_replica or [], drop_replica or [], retain is not None, retain_to)
    if cluster_to:  # against the columns this command leaves: a column it adds may be named
        from metastore.models import check_cluster_by

        check_cluster_by(cluster_to, [*table.columns, *add])
    if keys is not None:  # first: it needs the table empty, and refuses a table keyed otherwise
        table = catalog.keys.declare(table, keys)
    change = catalog.schemas.alter(table, add, widen).change if add or widen else None
    for cluster in drop_replica or ():
        catalog.replicas.drop(table, cluster)
    for cluster in add_replica or ():
        catalog.replicas.add(table, cluster)
    if settings_change:
        catalog.schemas.set_evolution(table, evolution, max_new_columns)
    if log_change:
        from metastore.delta.checkpoints import set_log_settings

        set_log_settings(catalog.load(table), checkpoint_interval, retention)
    if retain is not None:
        catalog.retention.set(table, retain_to)
    if cluster_to is not None:
        catalog.clustering.set(catalog.rebound(table), cluster_to)
    info = _altered(catalog, catalog.rebound(table), change)
    info |= {"added": list(add_replica or ()), "dropped": list(drop_replica or ())}
    if retain is not None:
        info["retention"] = _retention(catalog, catalog.rebound(table))
    cli.output.result(info, _print_altered)


def _altered(catalog: Catalog, table: Table, change: RecordedSchemaChange | None) -> dict[str, Any]:
    from metastore.delta.checkpoints import log_settings

    return {
        "table": str(table.name),
        "cluster": table.cluster,
        "replicas": [r.cluster for r in catalog.replicas.list(table)],
        "columns": [{"name": c.name, "type": c.sql_type, "nullable": c.nullable} for c in table.columns],
        "schema_change": None
        if change is None
        else {"version": change.version, "change": change.description, "key": change.key},
        "schema_evolution": table.schema_evolution.value,
        "max_new_columns": table.max_new_columns,
        "keys": None if table.keys is None else table.keys.model_dump(mode="json"),
        "cluster_by": list(table.cluster_by),
        "delta_log": log_settings(catalog.load(table)).to_json(),
    }


def _check(
    catalog: Catalog, table: Table, add: list[str], drop: list[str], retain: bool, retain_to: timedelta | None
) -> None:
    """Everything checked before anything changes, so a typo changes nothing."""
    for cluster in drop:
        catalog.replicas.get(table, cluster)
    for cluster in add:
        catalog.replicas.check(table, cluster)
    if retain:
        catalog.retention.check(table, retain_to)


def _retention(catalog: Catalog, table: Table) -> dict[str, Any]:
    """The table's retention now, and what the next expiry pass would remove (nothing is removed here)."""
    from metastore.durations import format_duration
    from scheduler.expiry import Expirer

    retain, source = catalog.retention.of(table)
    planned = Expirer(catalog).expire_table(table, dry_run=True)
    return {
        "retain": format_duration(retain) if retain is not None else None,
        "source": source,
        "would_expire": planned[0].to_json() if planned else None,
    }


def _print_altered(out: TextOutput, info: dict[str, Any]) -> None:
    change = info["schema_change"]
    if change is not None:
        out.console.print(
            f"{escape(info['table'])}: {escape(change['change'])} (Delta version {change['version']})",
            highlight=False,
        )
        columns = ", ".join(f"{c['name']} {c['type']}" for c in info["columns"])
        out.console.print(f"{escape(info['table'])}: columns {escape(columns)}", highlight=False)
    if info["keys"] is not None:
        from metastore.models import Keys

        out.console.print(
            f"{escape(info['table'])}: {escape(Keys(**info['keys']).describe())}", highlight=False
        )
    from metastore.models import describe_clustering

    out.console.print(
        f"{escape(info['table'])}: {escape(describe_clustering(info['cluster_by']))}", highlight=False
    )
    out.console.print(
        f"{escape(info['table'])}: schema evolution {info['schema_evolution']}, at most "
        f"{info['max_new_columns']} new columns from data",
        highlight=False,
    )
    for cluster in info["dropped"]:
        out.console.print(f"{info['table']}: dropped its replica on {cluster} (files and records)")
    for cluster in info["added"]:
        out.console.print(
            f"{info['table']}: replicates to {cluster}; the roll daemon copies its standard partitions "
            f"(now: streampart table replicate {info['table']} --to {cluster})"
        )
    out.console.print(
        f"{info['table']}: primary {info['cluster']}, secondaries {', '.join(info['replicas']) or 'none'}"
    )
    log = info["delta_log"]
    out.console.print(
        f"{info['table']}: Delta checkpoint every {log['checkpoint_interval']} commits, "
        f"commit files kept {log['log_retention']}"
    )
    retention = info.get("retention")
    if retention is not None:
        kept = retention["retain"] or "for ever"
        where = " (its namespace's default)" if retention["source"] == "namespace" else ""
        out.console.print(f"{info['table']}: keeps standard partitions {kept}{where}", highlight=False)
        plan = retention["would_expire"]
        if plan:
            out.console.print(
                f"{info['table']}: the next expiry pass (within scheduler.expiry_interval, or `streampart "
                f"expire {info['table']}`) removes {len(plan['partitions'])} partition(s), {plan['rows']} "
                f"rows, from {plan['partitions'][0][:19]} to {plan['partitions'][-1][:19]}",
                highlight=False,
            )

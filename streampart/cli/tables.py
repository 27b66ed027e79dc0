"""``streampart table create|list|describe|drop``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag, choice

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from metastore.models import Table, TableSpec

# Shared by ``table create`` and ``table alter``: the table's Delta log schedule
# (metastore.delta.checkpoints).
CheckpointIntervalOption = Annotated[
    int | None,
    typer.Option(
        help="Write a Delta checkpoint every N commits (the table's delta.checkpointInterval) [default: 100]"
    ),
]
LogRetentionOption = Annotated[
    str | None,
    typer.Option(
        help="Delete Delta commit files older than this once a checkpoint covers them (the table's "
        "delta.logRetentionDuration; time travel reaches this far), at least 1h [default: 30d]"
    ),
]

SchemaEvolutionOption = Annotated[
    str | None,
    typer.Option(
        help="What rows bringing fields the table lacks may change: none (the fields are ignored and "
        "counted), add-columns, add-and-widen [default: none]"
    ),
]
MaxNewColumnsOption = Annotated[
    int | None,
    typer.Option(help="How many columns evolution from data may add to the table in all [default: 100]"),
]

# A keyed table's options (``table create``, and ``table alter`` on an empty table).
PrimaryKeyOption = Annotated[
    str | None,
    typer.Option(help="Key columns (A,B): the table keeps one row per key, every record an upsert of it"),
]
SequenceByOption = Annotated[
    str | None,
    typer.Option(
        help="Keyed tables: the version with the greatest value wins [default: the latest to arrive]"
    ),
]
OpColumnOption = Annotated[
    str | None,
    typer.Option(help="Keyed tables: the column saying whether a record upserts or deletes its key"),
]
DeleteOpsOption = Annotated[
    str | None, typer.Option(help="Values of --op-column that delete the key [default: d,DELETE]")
]
HistoryOption = Annotated[
    bool,
    typer.Option(
        "--history",
        help="Keyed tables: keep every version as a row valid from its --sequence-by value until the "
        "next version's (valid_from, valid_to: SCD type 2)",
    ),
]
UpsertOpsOption = Annotated[
    str | None,
    typer.Option(help="Values of --op-column that upsert the key [default: c,r,u,INSERT,UPDATE]"),
]

table_app = typer.Typer(help="Create, list, describe and drop streaming tables.", no_args_is_help=True)


# ``table create``'s options whose help takes more than a line.
TimeColumnOption = Annotated[
    str,
    typer.Option(
        help="The rows' TIMESTAMP column. event-time: it places each row in the partition of its "
        "period. arrival: it is an ordinary column; rows go to the partition open when their chunk "
        "commits. Either way the table is partitioned by --partition-column, the start of each period"
    ),
]
ModeOption = Annotated[
    str,
    typer.Option(
        help="arrival (HIVE-4196): one streaming partition at a time; a chunk lands in whichever is "
        "open when it commits, and it rolls every --roll-every. event-time: each row lands in the "
        "partition of its --time-column's period, which rolls when the period ends plus --lateness"
    ),
]
LateDataOption = Annotated[
    str,
    typer.Option(
        help="event-time: what happens to late rows — reject, or divert (to NS.TABLE__late). A row "
        "is late when its partition is sealed already (its period ended more than --lateness ago and "
        "it rolled), or when its period ended more than --max-age ago"
    ),
]
MaxAgeOption = Annotated[
    str | None,
    typer.Option(
        help="event-time: rows whose period ended more than this ago are late [default: no "
        "bound; a backfill opens its old partitions]"
    ),
]
DeadLetterOption = Annotated[
    bool,
    typer.Option(help="Send malformed records to NS.TABLE__dead_letter instead of failing the chunk"),
]
RetainOption = Annotated[
    str | None,
    typer.Option(
        help="Keep a standard partition this long after its period ends (90d, 12h), then expire it "
        "(the roll daemon, or `streampart expire`); none: for ever; namespace: its namespace's "
        "--retain [default: the namespace's]"
    ),
]
ClusterByOption = Annotated[
    str | None,
    typer.Option(
        help="Columns (COL[,COL…], at most 4) a roll orders each partition's rows by before cutting them "
        "into files: sorted by one, Z-ordered by several, so a lookup on them reads few files"
    ),
]
ReplicateToOption = Annotated[
    str | None,
    typer.Option(help="Secondary clusters (C2,C3): each receives a copy of every rolled partition"),
]


@table_app.command("create")
def table_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    schema: Annotated[str, typer.Option(help='Columns, e.g. "id BIGINT, ts TIMESTAMP, msg STRING"')],
    time_column: TimeColumnOption,
    roll_every: Annotated[str, typer.Option(help="Roll interval: 15m, 1h, 1d, …")],
    mode: ModeOption = "arrival",
    lateness: Annotated[
        str, typer.Option(help="event-time: how long a partition waits for late rows")
    ] = "0s",
    late_data: LateDataOption = "reject",
    max_future: Annotated[
        str,
        typer.Option(help="event-time: rows more than this ahead of the clock are bad records"),
    ] = "1d",
    max_age: MaxAgeOption = None,
    retain: RetainOption = None,
    dead_letter: DeadLetterOption = False,
    partition_column: Annotated[
        str | None, typer.Option(help="Name of the partition column [default: <time-column>_period]")
    ] = None,
    cluster: Annotated[
        str, typer.Option(help="The primary cluster: it holds all the data and takes every write")
    ] = "default",
    replicate_to: ReplicateToOption = None,
    checkpoint_interval: CheckpointIntervalOption = None,
    log_retention: LogRetentionOption = None,
    schema_evolution: SchemaEvolutionOption = None,
    max_new_columns: MaxNewColumnsOption = None,
    primary_key: PrimaryKeyOption = None,
    sequence_by: SequenceByOption = None,
    op_column: OpColumnOption = None,
    delete_ops: DeleteOpsOption = None,
    upsert_ops: UpsertOpsOption = None,
    history: HistoryOption = False,
    cluster_by: ClusterByOption = None,
    _json: JsonFlag = False,
) -> None:
    """Create a streaming table partitioned by one timestamp column."""
    from metastore.delta.checkpoints import check_checkpoint_interval, check_log_retention
    from metastore.durations import parse_duration
    from metastore.models import (
        DEFAULT_MAX_NEW_COLUMNS,
        LateDataPolicy,
        Mode,
        SchemaEvolution,
        TableName,
        TableSpec,
        keys_from_options,
        parse_cluster_by,
        parse_schema,
    )
    from metastore.retention import parse_retain

    # checked before anything is made: a bad value creates no table
    if checkpoint_interval is not None:
        check_checkpoint_interval(checkpoint_interval)
    retention = check_log_retention(log_retention) if log_retention is not None else None

    spec = TableSpec(
        name=TableName.parse(name),
        columns=parse_schema(schema),
        time_column=time_column,
        partition_column=partition_column or "",  # default: <time column>_period
        mode=choice(Mode, mode, "--mode"),
        roll_every=parse_duration(roll_every, "--roll-every"),
        lateness=parse_duration(lateness, "--lateness"),
        late_data=choice(LateDataPolicy, late_data, "--late-data"),
        max_future=parse_duration(max_future, "--max-future"),
        max_age=parse_duration(max_age, "--max-age") if max_age is not None else None,
        retain=parse_retain(retain) if retain is not None else None,
        dead_letter=dead_letter,
        cluster=cluster,
        schema_evolution=choice(SchemaEvolution, schema_evolution or "none", "--schema-evolution"),
        max_new_columns=check_max_new_columns(max_new_columns, DEFAULT_MAX_NEW_COLUMNS),
        keys=keys_from_options(primary_key, sequence_by, op_column, delete_ops, upsert_ops, history),
        cluster_by=parse_cluster_by(cluster_by) if cluster_by is not None else (),
    )
    secondaries = [c.strip() for c in (replicate_to or "").split(",") if c.strip()]
    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog(settings, create=True)
    table = catalog.create_table(
        spec, create_namespace=not settings.namespaces.require_explicit, replicate_to=secondaries
    )
    if checkpoint_interval is not None or retention is not None:
        from metastore.delta.checkpoints import set_log_settings

        set_log_settings(catalog.load(table), checkpoint_interval, retention)
    cli.output.result(_created(catalog, table, spec), _print_created)


def check_max_new_columns(value: int | None, default: int) -> int:
    """``--max-new-columns``, or ``default`` when not given (UserInputError if negative)."""
    if value is None:
        return default
    from ingest.api.models import MAX_NEW_COLUMNS  # the HTTP API's bound too

    if not 0 <= value <= MAX_NEW_COLUMNS:
        raise UserInputError(f"--max-new-columns must be 0 to {MAX_NEW_COLUMNS}; got {value}")
    return value


def _created(catalog: Catalog, table: Table, spec: TableSpec) -> dict[str, Any]:
    """What ``table create`` says it made: the table, and the companion tables made beside it."""
    from metastore.models import LateDataPolicy, Mode, TableKind

    kinds = [TableKind.DEAD_LETTER] if spec.dead_letter else []
    if spec.mode is Mode.EVENT_TIME and spec.late_data is LateDataPolicy.DIVERT:
        kinds.append(TableKind.LATE)
    return catalog.describe(table) | {
        "companions": [  # made beside it: said, as the table itself is
            {"table": str(c.name), "kind": c.kind.value, "location": c.location}
            for c in (catalog.companion(table, kind) for kind in kinds)
        ]
    }


# what a companion table holds (by its kind), as `table create` says it, with the option that made it
_HOLDS = {"late": "late rows (--late-data divert)", "dead-letter": "malformed records (--dead-letter)"}


def _print_created(out: TextOutput, info: dict[str, Any]) -> None:
    replicas = [r["cluster"] for r in info["replicas"]]
    out.console.print(
        f"created [bold]{escape(info['table'])}[/] ({info['mode']}, rolls every {info['roll_every']}) "
        f"at {escape(info['location'])}"
        + (f" on cluster {info['cluster']}" if info["cluster"] != "default" or replicas else "")
        + (f", replicated to {', '.join(replicas)}" if replicas else ""),
        highlight=False,
    )
    for c in info["companions"]:
        out.console.print(
            f"created [bold]{escape(c['table'])}[/] for its {_HOLDS[c['kind']]} at {escape(c['location'])}",
            highlight=False,
        )


_LIST_COLUMNS = ("table", "kind", "mode", "roll_every", "partitions", "streaming", "location")


@table_app.command("list")
def table_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """List tables, and links (kind ``link``, with their source; a dangling one has ``dangling``)."""
    from metastore.durations import format_duration
    from metastore.errors import DanglingLinkError

    cli = cli_context(ctx)
    catalog = cli.catalog()
    rows: list[dict[str, Any]] = []
    listed = catalog.list_tables()
    if listed.warning():
        cli.output.warn(str(listed.warning()))
    for t in listed.merged():
        parts = catalog.partitions(t)
        rows.append(
            {
                "table": str(t.name),
                "kind": t.kind.value,
                "mode": t.mode.value,
                "roll_every": format_duration(t.roll_every),
                "partitions": len(parts),
                "streaming": sum(p.state.value == "streaming" for p in parts),
                "location": t.location,
                "cluster": t.cluster,
            }
        )
    for link in catalog.router.fan_out(lambda store: store.list_links()).merged():
        row: dict[str, Any] = {
            "table": str(link.name),
            "kind": "link",
            "source": str(link.source),
            "link_mode": link.mode.value,
            "partitions": None,
            "streaming": None,
        }
        try:
            source = catalog.links.source(link)
        except DanglingLinkError:  # its source was dropped (--force): listed, marked
            rows.append(row | {"dangling": True, "mode": None, "roll_every": None, "location": None})
            continue
        row |= {
            "dangling": False,
            "mode": source.mode.value,
            "roll_every": format_duration(source.roll_every),
            "location": source.location,
        }
        rows.append(row)
    rows.sort(key=lambda r: r["table"])
    cli.output.result(rows, _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    if not rows:
        out.console.print("no tables")
        return
    listed = listing("table", "kind", "mode", "roll every", "partitions", "streaming", "location")
    for r in rows:
        if r["kind"] == "link":  # kind: link (its mode), or dangling (its source was dropped)
            kind = "dangling link" if r["dangling"] else f"link ({r['link_mode']})"
            row = [r["table"], kind, r["mode"] or "", r["roll_every"] or "", "", "", f"→ {r['source']}"]
            listed.add_row(*(escape(v) for v in row))
            continue
        listed.add_row(*(escape(str(r[k])) for k in _LIST_COLUMNS))
    out.table(listed)


@table_app.command("describe")
def table_describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE, or NAMESPACE.LOCAL of a link")],
    _json: JsonFlag = False,
) -> None:
    """Show a table and its partitions (state, chunks, rows, bytes, location); a link: those it exposes."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    cli.output.result(catalog.describe(catalog.resolve(name)), _print_described)


def _print_described(out: TextOutput, info: dict[str, Any]) -> None:
    link = info.get("link")
    if link is not None:
        out.console.print(
            f"[bold]{info['table']}[/]  is a link to {link['source']} ({link['mode']}"
            + (", retention " + link["retention"] if link["retention"] else "")
            + f"): admits {link['admits']}"
            + (
                f"\nlists: {', '.join(link['partitions']) or 'no partitions'}"
                if link["mode"] == "static"
                else ""
            )
            + f"\nsource: {info['mode']}, rolls every {info['roll_every']}",
            highlight=False,
        )
    else:
        out.console.print(
            f"[bold]{info['table']}[/]  {info['mode']}, rolls every {info['roll_every']}"
            + (
                f", lateness {info['lateness']}, late data: {info['late_data']}, max future "
                f"{info['max_future']}, max age {info['max_age'] or 'none'}"
                if info["mode"] == "event-time"
                else ""
            )
        )
    out.console.print(
        f"schema: {info['schema']}"
        + f"\npartitioned by {info['partition_column']}: {info['partitioned_by']}"
        + f"\n{info['partition_names']}"
        + f"\nlocation: {info['location']}  (Delta version {info['version']})"
        + (
            f"\nDelta log: a checkpoint every {info['delta_log']['checkpoint_interval']} commits, commit "
            f"files kept {info['delta_log']['log_retention']}"
            if "delta_log" in info
            else ""
        )
    )
    if "schema_evolution" in info:
        out.console.print(
            f"schema evolution: {info['schema_evolution']}, at most {info['max_new_columns']} new columns "
            "from data",
            highlight=False,
        )
    if info.get("keys"):
        from metastore.models import Keys

        out.console.print(f"keyed: {escape(Keys(**info['keys']).describe())}", highlight=False)
    if info.get("cluster_by"):
        from metastore.models import describe_clustering

        out.console.print(f"clustered: {escape(describe_clustering(info['cluster_by']))}", highlight=False)
    for c in info.get("schema_changes") or []:
        out.console.print(
            f"  version {c['version']}: {c['change']} (by {c['source']}, {c['at'][:19].replace('T', ' ')})",
            highlight=False,
            markup=False,
        )
    _print_retention(out, info.get("retention"), link is not None)
    replicas = info.get("replicas") or []
    if replicas:
        out.console.print(f"primary cluster: {info['cluster']}")
    for r in replicas:
        state = f"{r['present']} standard partition(s) present" + (
            f", {len(r['missing'])} missing" if r["missing"] else ", none missing"
        )
        out.console.print(f"replica on {r['cluster']}: {r['location']}  ({state})", highlight=False)
        for f in r["failing"]:
            out.warn(f"  {f['partition']}: failed {f['attempts']} time(s): {f['error']}")
    if link is not None:
        out.console.print("partitions it exposes now:")
    print_partitions(out, info["partitions"], clusters=bool(replicas))


def _print_retention(out: TextOutput, retention: dict[str, Any] | None, link: bool) -> None:
    if not retention or (retention["retain"] is None and not retention["expired"]["partitions"]):
        return
    whose = "its source keeps" if link else "keeps"
    where = " (its namespace's default)" if retention["source"] == "namespace" else ""
    text = (
        f"retention: {whose} standard partitions {retention['retain']} after their period ends{where}"
        if retention["retain"] is not None
        else "retention: none (partitions are kept for ever)"
    )
    if retention["next_expiry"]:
        text += f"; the next expires at {retention['next_expiry'][:19].replace('T', ' ')}"
    expired = retention["expired"]
    if expired["partitions"]:
        text += (
            f"\n{expired['partitions']} partition(s) expired by retention ({expired['oldest'][:19]} to "
            f"{expired['newest'][:19]}), the last at {(expired['last_at'] or '')[:19]}: not listed"
        )
    out.console.print(text, highlight=False, markup=False)


def print_partitions(out: TextOutput, partitions: list[dict[str, Any]], clusters: bool = False) -> None:
    """Partitions as ``table describe`` and ``link describe`` print them (``clusters``: with the
    clusters that hold each, for a table with replicas)."""
    headers = ["partition (UTC)", "state", "chunks", "rows", "bytes", "files", "location"]
    shown = listing(*headers, *(["clusters"] if clusters else []))
    for p in partitions:
        row = [p["name"], p["state"], str(p["chunks"]), str(p["rows"]), str(p["bytes"]), str(p["files"])]
        row.append(p["location"])
        if clusters:
            row.append(", ".join(p.get("clusters") or []))
        shown.add_row(*(escape(v) for v in row))
    out.table(shown)


@table_app.command("drop")
def table_drop(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    yes: Annotated[bool, typer.Option("--yes", help="Really delete the table and its data")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="Drop it even if other namespaces link to it (their links dangle: reads fail)"
        ),
    ] = False,
) -> None:
    """Drop a table: its metastore records and its directory (refused for a link: `link drop`)."""
    if not yes:
        raise UserInputError("dropping deletes the table's data; add --yes to confirm")
    cli = cli_context(ctx)
    catalog = cli.catalog()
    table = catalog.table(name)  # ReadOnlyLinkError for a link
    catalog.drop_table(table, force=force)
    cli.output.note(f"dropped {table.name}")

"""``streampart table replicate``: copying a table's standard partitions to its secondary clusters by
hand (the roll daemon does it after every roll). Adding and dropping secondaries is ``table alter``
(``streampart/cli/table_alter.py``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput
from streampart.cli.params import JsonFlag
from streampart.cli.progress import progress_bars


def table_replicate(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.TABLE")],
    to: Annotated[
        list[str] | None,
        typer.Option("--to", help="The secondary cluster to copy to [default: every secondary of the table]"),
    ] = None,
    partitions: Annotated[
        str | None,
        typer.Option(help="Only partitions FROM..TO (ISO-8601; half-open, either end may be empty)"),
    ] = None,
    _json: JsonFlag = False,
) -> None:
    """Copy the table's standard partitions that are missing on its secondaries, with a progress bar.

    Safe alongside the roll daemon: each copy is claimed, so a partition is copied once; a copy
    that failed before (and waits for its retry) is tried at once.
    """
    from metastore.links import PartitionRange
    from scheduler.errors import ReplicationAbandonedError
    from scheduler.replication import Replicator
    from streampart.cluster_spark import ClusterSpark

    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog(settings)
    table = catalog.table(name)
    catalog = catalog.home(table, write=True)  # the table's own metastore (copies are recorded there)
    within = PartitionRange.parse(partitions) if partitions else None
    for cluster in to or ():
        if cluster == table.cluster:
            secondaries = ", ".join(r.cluster for r in catalog.replicas.list(table)) or "none yet"
            raise UserInputError(
                f"{cluster} is the primary cluster of {table.name}: it holds all the data already; "
                f"replicate to a secondary ({secondaries})"
            )
        catalog.replicas.get(table, cluster)
    clusters = list(to) if to else [r.cluster for r in catalog.replicas.list(table)]
    if not clusters:
        raise UserInputError(
            f"{table.name} has no secondary clusters; add one: streampart table alter {table.name} "
            "--add-replica CLUSTER"
        )
    r = Replicator.configured(
        catalog,
        settings.scheduler.replication,
        lease=settings.roll.lease,
        spark=ClusterSpark(settings, catalog),
    )
    pending = {
        c: r.pending(table, catalog.replicas.get(table, c), within, include_waiting=True) for c in clusters
    }
    total = sum(p.bytes or 0 for parts in pending.values() for p in parts)
    with progress_bars(cli.output) as progress:
        count = sum(map(len, pending.values()))
        progress.start(f"copying {count} partition(s) of {table.name}", total, "bytes")
        try:
            report = r.replicate(table, clusters, within, progress=progress.advance, include_waiting=True)
        except ReplicationAbandonedError as exc:
            raise UserInputError(f"{exc}; run the command again") from None
    info = {
        "table": str(table.name),
        "clusters": clusters,
        "copied": [c.to_json() for c in report.copied],
        "bytes": report.bytes,
        "busy": report.busy,
        "failed": [{"cluster": f.cluster, "partition": f.partition, "error": f.error} for f in report.failed],
    }
    cli.output.result(info, _print_replicated)
    if report.failed:
        raise typer.Exit(1)


def _print_replicated(out: TextOutput, info: dict[str, Any]) -> None:
    for c in info["copied"]:
        out.console.print(
            f"copied {c['partition']} to {c['cluster']}: {c['files']} file(s), {c['bytes']} bytes"
            + (" (resumed)" if c["resumed"] else ""),
            highlight=False,
        )
    if info["busy"]:
        out.console.print(f"{info['busy']} partition(s) are being copied by another copier (the roll daemon)")
    for f in info["failed"]:
        out.warn(f"error: {f['error']}")
    if not info["copied"] and not info["failed"] and not info["busy"]:
        out.console.print(
            f"{info['table']}: every standard partition is on {', '.join(info['clusters'])} already"
        )

"""``streampart cluster add|list|describe|remove``: the registry of clusters (issue 11)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from streampart.cli.context import CliContext, cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from metastore.clusters import Cluster

cluster_app = typer.Typer(
    help="Register, list, describe and remove clusters: storage roots with the Spark master next to each.",
    no_args_is_help=True,
)


def _cluster_json(
    cli: CliContext, cluster: Cluster, tables: list[str], replicas: list[str] | None = None
) -> dict[str, Any]:
    """A cluster as this host sees it: the registered master, and the one it uses (its override)."""
    from metastore.clusters import DEFAULT_CLUSTER
    from metastore.models import iso

    settings = cli.settings()
    registered = cluster.spark_master if cluster.name != DEFAULT_CLUSTER else settings.spark.master
    return {
        "cluster": cluster.name,
        "storage": cluster.storage,
        "spark_master": registered,
        "spark_master_here": settings.spark_for(cluster).master,
        "conf": cluster.conf,
        "tables": tables,
        "replicas": replicas or [],
        "created_at": iso(cluster.created_at) if cluster.created_at else None,
    }


@cluster_app.command("add")
def cluster_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The cluster's name (a plain identifier)")],
    storage: Annotated[str, typer.Option(help="Its storage root: an existing, writable directory")],
    spark_master: Annotated[str, typer.Option(help="The Spark master next to it: spark://HOST:PORT, …")],
    conf: Annotated[
        list[str] | None, typer.Option(help="A Spark setting for jobs there, KEY=VALUE (repeatable)")
    ] = None,
    _json: JsonFlag = False,
) -> None:
    """Register a cluster, for every host, daemon and API server that shares this metastore."""
    from metastore.clusters import parse_conf

    cli = cli_context(ctx)
    catalog = cli.catalog(create=True)
    cluster = catalog.clusters.add(name, storage, spark_master, parse_conf(conf or []))
    cli.output.result(_cluster_json(cli, cluster, []), _print_added)


def _print_added(out: TextOutput, info: dict[str, Any]) -> None:
    out.console.print(
        f"added cluster [bold]{info['cluster']}[/]: storage {info['storage']}, Spark {info['spark_master']}",
        highlight=False,
    )


@cluster_app.command("list")
def cluster_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """List the clusters (``default`` is this process's --warehouse and spark.master)."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    rows = [_cluster_json(cli, c, *_users(cli, catalog, c.name)) for c in catalog.clusters.list()]
    cli.output.result(rows, _print_list)


def _users(cli: CliContext, catalog: Catalog, name: str) -> tuple[list[str], list[str]]:
    """The tables on cluster ``name`` and those replicating to it, over the federation (a warning
    names the metastores that did not answer)."""
    users = catalog.clusters.users(name)
    if users.warning():
        cli.output.warn(str(users.warning()))
    tables = sorted(t for found, _ in users.answers.values() for t in found)
    replicas = sorted(t for _, found in users.answers.values() for t in found)
    return tables, replicas


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    grid = listing("cluster", "storage", "spark master (here)", "tables", "replicas")
    for r in rows:
        grid.add_row(
            r["cluster"], r["storage"], r["spark_master_here"], str(len(r["tables"])), str(len(r["replicas"]))
        )
    out.table(grid)


@cluster_app.command("describe")
def cluster_describe(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="The cluster")], _json: JsonFlag = False
) -> None:
    """Show a cluster: storage, Spark master (registered, and this host's), settings, its tables."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    info = _cluster_json(cli, catalog.clusters.get(name), *_users(cli, catalog, name))
    cli.output.result(info, _print_described)


def _print_described(out: TextOutput, info: dict[str, Any]) -> None:
    here = info["spark_master_here"]
    out.console.print(
        f"[bold]{info['cluster']}[/]  storage {info['storage']}\n"
        f"Spark master: {info['spark_master']}"
        + (f" (this host uses {here})" if here != info["spark_master"] else "")
        + (
            f"\nconf: {', '.join(f'{k}={v}' for k, v in sorted(info['conf'].items()))}"
            if info["conf"]
            else ""
        )
        + f"\ntables (primary here): {', '.join(info['tables']) or 'none'}"
        + f"\nreplicas (secondary here): {', '.join(info['replicas']) or 'none'}",
        highlight=False,
    )


@cluster_app.command("remove")
def cluster_remove(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The cluster")]) -> None:
    """Remove a cluster from the registry (refused while a table lives there; its files are untouched)."""
    from metastore.clusters import check_cluster_name

    cli = cli_context(ctx)
    cli.catalog().clusters.remove(check_cluster_name(name))
    cli.output.note(f"removed cluster {name}")

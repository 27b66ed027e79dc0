"""``streampart link create|add-partition|drop-partition|drop|list|describe``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag
from streampart.cli.tables import print_partitions

if TYPE_CHECKING:
    from datetime import datetime

    from metastore.catalog import Catalog
    from metastore.links import Link

link_app = typer.Typer(
    help="Link tables of other namespaces into a namespace (read-only, no copy).", no_args_is_help=True
)


def _get_link(catalog: Catalog, name: str) -> Link:
    """The link ``name`` (NS.LOCAL), or an error saying what the name is instead."""
    from metastore.errors import NotFoundError
    from metastore.models import TableName

    qualified = TableName.parse(name)
    link = catalog.links.find(qualified)
    if link is not None:
        return link
    if catalog.find_table(qualified) is not None:
        raise UserInputError(f"{qualified} is a table, not a link")
    raise NotFoundError(f"link {qualified} does not exist")


def _values(values: list[str], what: str) -> list[datetime]:
    from metastore.models import parse_instant

    return [parse_instant(v, what) for v in values]


@link_app.command("create")
def link_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.LOCAL: the link's name in its namespace")],
    to: Annotated[str, typer.Option("--to", help="NAMESPACE.TABLE of another namespace: the source")],
    static: Annotated[
        bool,
        typer.Option(
            "--static",
            help="Hold exactly the partitions listed (--partition, --partitions), not every one the "
            "source rolls",
        ),
    ] = False,
    partitions: Annotated[
        str | None,
        typer.Option(
            "--partitions",
            help="FROM..TO (ISO-8601, half-open: FROM included, TO not; either end may be empty for a "
            "dynamic link): only partitions whose value is in the range",
        ),
    ] = None,
    partition: Annotated[
        list[str] | None,
        typer.Option("--partition", help="Static links: a partition value (its period's start); repeatable"),
    ] = None,
    include_streaming: Annotated[
        bool, typer.Option("--include-streaming", help="Also show the source's open streaming partition(s)")
    ] = False,
    retention: Annotated[
        str | None,
        typer.Option(help="Hide partitions whose period ended more than this ago: 30d, 12h, …"),
    ] = None,
    _json: JsonFlag = False,
) -> None:
    """Link a table of another namespace into NAMESPACE as LOCAL: reads go to its files, nothing is copied."""
    from metastore.durations import parse_duration
    from metastore.links import LinkMode, LinkSpec, PartitionRange
    from metastore.models import TableName

    spec = LinkSpec(
        name=TableName.parse(name),
        source=TableName.parse(to),
        mode=LinkMode.STATIC if static else LinkMode.DYNAMIC,
        include_streaming=include_streaming,
        retention=parse_duration(retention, "--retention") if retention is not None else None,
        range=PartitionRange.parse(partitions) if partitions is not None else None,
        partitions=tuple(_values(partition or [], "--partition")),
    )
    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog(settings)
    link = catalog.links.create(spec, create_namespace=not settings.namespaces.require_explicit)
    cli.output.result(catalog.links.info(link), _print_created)


def _print_created(out: TextOutput, info: dict[str, Any]) -> None:
    out.console.print(
        f"created link [bold]{info['name']}[/] → {info['source']} ({info['mode']}): admits {info['admits']}",
        highlight=False,
    )


@link_app.command("add-partition")
def link_add_partition(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.LOCAL (a static link)")],
    values: Annotated[list[str], typer.Argument(help="Partition values (period starts), ISO-8601")],
    _json: JsonFlag = False,
) -> None:
    """Add partitions to a static link (each the start of one of its source's periods)."""

    cli = cli_context(ctx)
    catalog = cli.catalog()
    link = catalog.links.set_partitions(_get_link(catalog, name), add=_values(values, "partition value"))
    cli.output.result(catalog.links.info(link), _print_partitions)


@link_app.command("drop-partition")
def link_drop_partition(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.LOCAL (a static link)")],
    values: Annotated[list[str], typer.Argument(help="Partition values the link lists, ISO-8601")],
    _json: JsonFlag = False,
) -> None:
    """Drop partitions from a static link (the source keeps them)."""

    cli = cli_context(ctx)
    catalog = cli.catalog()
    link = _get_link(catalog, name)
    link = catalog.links.set_partitions(link, drop=_values(values, "partition value"))
    cli.output.result(catalog.links.info(link), _print_partitions)


def _print_partitions(out: TextOutput, info: dict[str, Any]) -> None:
    listed = info["partitions"] or []
    out.console.print(
        f"link [bold]{info['name']}[/] lists {len(listed)} partition(s)"
        + (f": {', '.join(listed)}" if listed else ""),
        highlight=False,
    )


@link_app.command("drop")
def link_drop(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.LOCAL")],
) -> None:
    """Drop a link (its source and its data stay as they are)."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    link = _get_link(catalog, name)
    catalog.links.drop(link)
    cli.output.note(f"dropped link {link.name} (its source {link.source} is untouched)")


@link_app.command("list")
def link_list(
    ctx: typer.Context,
    namespace: Annotated[str | None, typer.Argument(help="NAMESPACE [default: every namespace]")] = None,
    _json: JsonFlag = False,
) -> None:
    """List links (of one namespace, or all)."""

    cli = cli_context(ctx)
    catalog = cli.catalog()
    if namespace is not None:
        catalog.namespaces.get(namespace)  # a clear error for a namespace that does not exist
        links = catalog.links.list(namespace)
    else:
        links = sorted(
            cli.answered(catalog.router.fan_out(lambda store: store.list_links())), key=lambda x: str(x.name)
        )
    cli.output.result([catalog.links.info(link) for link in links], _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    if not rows:
        out.console.print("no links")
        return
    grid = listing("link", "source", "mode", "admits", "state", whole=("link", "source"))
    for r in rows:
        grid.add_row(
            r["name"],
            r["source"],
            r["mode"],
            r["admits"],
            "dangling (source dropped)" if r["dangling"] else "ok",
        )
    out.table(grid)


@link_app.command("describe")
def link_describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE.LOCAL")],
    _json: JsonFlag = False,
) -> None:
    """Show a link: its source, mode and rule, and the partitions it exposes now.

    --json: the link's settings (``partitions``: the values a static link lists) and ``exposed``,
    the partitions it shows now, as ``table describe`` shows them, read at ``version`` of its source.
    """
    from metastore.models import PartitionState, iso

    cli = cli_context(ctx)
    catalog = cli.catalog()
    link = _get_link(catalog, name)
    resolved = catalog.resolve(str(link.name))
    described = catalog.describe(resolved)  # DanglingLinkError if the source is gone
    info = catalog.links.info(link) | {"version": described["version"], "exposed": described["partitions"]}
    # what the source's retention took away: shown, not silently missing
    expired = {iso(p.value) for p in catalog.partitions(resolved.table, [PartitionState.EXPIRED])}
    info["source_retention"] = described["retention"]
    info["expired"] = sorted(v for v in info.get("partitions") or [] if v in expired)
    cli.output.result(info, _print_described)


def _print_described(out: TextOutput, info: dict[str, Any]) -> None:
    out.console.print(
        f"[bold]{info['name']}[/]  link to {info['source']} ({info['mode']}"
        + (", retention " + info["retention"] if info["retention"] else "")
        + f")\nadmits {info['admits']}"
        + (f"\nlists: {', '.join(info['partitions']) or 'no partitions'}" if info["mode"] == "static" else "")
        + f"\nreading version {info['version']} of {info['source']}",
        highlight=False,
    )
    retention = info["source_retention"]
    if retention["retain"] is not None or retention["expired"]["partitions"]:
        gone = retention["expired"]["partitions"]
        out.console.print(
            f"{info['source']} keeps standard partitions {retention['retain'] or 'for ever'}; "
            f"{gone} of its partitions expired"
            + (
                f", {len(info['expired'])} of those this link lists: {', '.join(info['expired'])}"
                if info["expired"]
                else ""
            ),
            highlight=False,
            markup=False,
        )
    out.console.print("partitions it exposes now:")
    print_partitions(out, info["exposed"])

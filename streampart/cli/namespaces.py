"""``streampart namespace create|list|describe|alter|drop|usage``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag
from streampart.cli.progress import progress_bars

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from metastore.namespaces import Namespace
    from metastore.store import Metastore

namespace_app = typer.Typer(
    help="Create, list, describe, alter and drop namespaces; show what they hold (usage).",
    no_args_is_help=True,
)


def _namespace_json(ns: Namespace) -> dict[str, Any]:
    from metastore.durations import format_duration
    from metastore.models import iso

    return {
        "namespace": ns.name,
        "isolated": ns.isolated,
        "quota_bytes": ns.quota_bytes,
        "retain": format_duration(ns.default_retain) if ns.default_retain is not None else None,
        "description": ns.description,
        "created_at": iso(ns.created_at),
    }


NamespaceRetainOption = Annotated[
    str | None,
    typer.Option(
        "--retain",
        help="Retention of its tables that set none of their own (90d): a standard partition expires "
        "this long after its period ends; none: no default [default: none]",
    ),
]


def _quota(text: str, option: str = "--quota") -> int | None:
    """A quota option's value in bytes; ``none`` (alter only) removes the quota."""
    from metastore.namespaces import parse_size

    if text.strip().lower() == "none":
        return None
    return parse_size(text, option)


def _percent(used: int, quota: int | None) -> float | None:
    if quota is None:
        return None
    return round(100.0 * used / max(quota, 1), 1)


@namespace_app.command("create")
def namespace_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE")],
    isolated: Annotated[
        bool,
        typer.Option(help="Its queries read only its own tables and its links (never NS.T of another)"),
    ] = False,
    quota: Annotated[
        str | None,
        typer.Option(
            help="Hard limit on the bytes its tables hold: 500GiB, 1.5TB, 10G, bytes [default: none]"
        ),
    ] = None,
    description: Annotated[str, typer.Option(help="What the namespace is for")] = "",
    retain: NamespaceRetainOption = None,
    metastore: Annotated[
        str | None,
        typer.Option(help="The federated metastore it is placed on (an explicit route; see federation list)"),
    ] = None,
    _json: JsonFlag = False,
) -> None:
    """Create a namespace (tables also make theirs on first use, unless namespaces.require_explicit).

    With ``--metastore M`` its route to M is recorded (checked against M's access type). For now
    the namespace itself is still made in the primary: routing the catalog's calls to M comes next.
    """
    from metastore.namespaces import parse_size
    from metastore.retention import parse_retain

    quota_bytes = parse_size(quota, "--quota") if quota is not None else None
    default_retain = parse_retain(retain, follow=False) if retain is not None else None
    cli = cli_context(ctx)
    ns = cli.catalog(create=True).namespaces.create(
        name,
        metastore=metastore,
        isolated=isolated,
        quota_bytes=quota_bytes,
        description=description,
        default_retain=default_retain,
    )
    cli.output.result(_namespace_json(ns) | {"metastore": metastore}, _print_created)


def _print_created(out: TextOutput, info: dict[str, Any]) -> None:
    from metastore.namespaces import format_size

    out.console.print(
        f"created namespace [bold]{info['namespace']}[/]"
        + (" (isolated)" if info["isolated"] else "")
        + (f", quota {format_size(info['quota_bytes'])}" if info["quota_bytes"] is not None else "")
        + (f", routed to metastore {info['metastore']}" if info.get("metastore") else ""),
        highlight=False,
    )


@namespace_app.command("list")
def namespace_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """List namespaces: isolation, quota, description, how many tables and links each holds."""
    cli = cli_context(ctx)
    catalog = cli.catalog()

    def rows_of(store: Metastore) -> list[dict[str, Any]]:
        rows = []
        for ns in store.list_namespaces():
            if catalog.router.metastore_of(ns.name) != store.name:
                continue  # not its home (a move's leftover, or a clash settled by a route)
            tables, links = store.namespace_members(ns.name)
            rows.append(
                _namespace_json(ns) | {"metastore": store.name, "tables": len(tables), "links": len(links)}
            )
        return rows

    rows = cli.answered(catalog.router.fan_out(rows_of))
    cli.output.result(sorted(rows, key=lambda r: r["namespace"]), _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    from metastore.namespaces import format_size

    if not rows:
        out.console.print("no namespaces")
        return
    grid = listing("namespace", "metastore", "isolated", "quota", "tables", "links", "description")
    for r in rows:
        grid.add_row(
            r["namespace"],
            r["metastore"],
            "yes" if r["isolated"] else "no",
            format_size(r["quota_bytes"]),
            str(r["tables"]),
            str(r["links"]),
            r["description"],
        )
    out.table(grid)


@namespace_app.command("describe")
def namespace_describe(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE")],
    _json: JsonFlag = False,
) -> None:
    """Show a namespace: its settings, its tables and links, its committed bytes against its quota."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    store = catalog.home(name).store
    ns = store.get_namespace(name)
    tables, _ = store.namespace_members(ns.name)
    used = store.committed_bytes(ns.name)
    info = _namespace_json(ns) | {
        "tables": tables,
        "links": [
            {
                "name": str(link.name),
                "source": str(link.source),
                "mode": link.mode.value,
                "include_streaming": link.include_streaming,
                "dangling": catalog.links.is_dangling(link),
            }
            for link in store.list_links(ns.name)
        ],
        "metastore": store.name,
        "committed_bytes": used,
        "quota_used_percent": _percent(used, ns.quota_bytes),
    }
    cli.output.result(info, _print_described)


def _print_described(out: TextOutput, info: dict[str, Any]) -> None:
    from metastore.namespaces import format_size

    quota = info["quota_bytes"]
    out.console.print(
        f"[bold]{info['namespace']}[/]  " + ("isolated" if info["isolated"] else "not isolated")
        + (f"\n{info['description']}" if info["description"] else "")
        + f"\ncommitted: {format_size(info['committed_bytes'])} ({info['committed_bytes']} bytes)"
        + (
            f" of a quota of {format_size(quota)} ({info['quota_used_percent']}% used)"
            if quota is not None
            else ", no quota"
        )
        + f"\ncreated {info['created_at']}",
        highlight=False,
    )  # fmt: skip
    out.console.print("tables: " + (", ".join(info["tables"]) or "none"), highlight=False)
    if not info["links"]:
        out.console.print("links: none")
        return
    grid = listing("link", "source", "mode", "streaming", whole=("link", "source"))
    for link in info["links"]:
        grid.add_row(
            link["name"],
            link["source"] + (" (dropped: dangling)" if link["dangling"] else ""),
            link["mode"],
            "yes" if link["include_streaming"] else "no",
        )
    out.table(grid)


@namespace_app.command("alter")
def namespace_alter(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE")],
    isolated: Annotated[
        bool | None,
        typer.Option("--isolated/--not-isolated", help="Read only its own tables and links, or not"),
    ] = None,
    quota: Annotated[
        str | None, typer.Option(help="New quota (500GiB, 1.5TB, bytes), or 'none' to remove it")
    ] = None,
    description: Annotated[str | None, typer.Option(help="New description")] = None,
    retain: NamespaceRetainOption = None,
    _json: JsonFlag = False,
) -> None:
    """Change a namespace's isolation, quota, description or default retention."""
    from metastore.retention import parse_retain

    if isolated is None and quota is None and description is None and retain is None:
        raise UserInputError(
            "nothing to change: give --isolated/--not-isolated, --quota, --description or --retain"
        )
    changes: dict[str, Any] = {"isolated": isolated, "description": description}
    if quota is not None:  # not given: unchanged; "none": removed
        changes["quota_bytes"] = _quota(quota)
    if retain is not None:  # not given: unchanged; "none": removed
        changes["default_retain"] = parse_retain(retain, follow=False)
    cli = cli_context(ctx)
    ns = cli.catalog().namespaces.alter(name, **changes)
    cli.output.result(_namespace_json(ns), _print_altered)


def _print_altered(out: TextOutput, info: dict[str, Any]) -> None:
    from metastore.namespaces import format_size

    out.console.print(
        f"namespace [bold]{info['namespace']}[/]: "
        + ("isolated" if info["isolated"] else "not isolated")
        + f", quota {format_size(info['quota_bytes'])}"
        + (f", tables keep partitions {info['retain']} unless they say" if info.get("retain") else "")
        + (f", {info['description']!r}" if info["description"] else ""),
        highlight=False,
    )


@namespace_app.command("drop")
def namespace_drop(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE")],
    cascade: Annotated[
        bool, typer.Option("--cascade", help="Drop its links, then its tables (and their data), then it")
    ] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force", help="With --cascade: drop tables other namespaces link to (those links dangle)"
        ),
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Really drop the namespace")] = False,
) -> None:
    """Drop a namespace; one that holds tables or links is refused unless --cascade."""
    if not yes:
        raise UserInputError("dropping a namespace may delete data; add --yes to confirm")
    if force and not cascade:
        raise UserInputError("--force applies to --cascade only (it drops tables other namespaces link to)")
    cli = cli_context(ctx)
    catalog = cli.catalog()
    store = catalog.home(name, write=True).store
    store.get_namespace(name)
    tables, links = store.namespace_members(name)
    if (tables or links) and not cascade:
        raise UserInputError(
            f"namespace {name} is not empty: it holds "
            + "; ".join(
                f"{what} {', '.join(names)}"
                for what, names in (("tables", tables), ("links", links))
                if names
            )
            + "; drop them first, or add --cascade"
        )
    if cascade:
        _drop_members(catalog, name, force)
    catalog.namespaces.drop(name)
    dropped = f" with {len(tables)} table(s) and {len(links)} link(s)" if tables or links else ""
    cli.output.note(f"dropped namespace {name}{dropped}")


def _drop_members(catalog: Catalog, name: str, force: bool) -> None:
    """Drop the namespace's links, then its tables; refused before anything is dropped if others link them."""
    owned = [t for t in catalog.home(name).store.list_tables() if t.name.namespace == name]
    if not force:
        linked_by = [str(link.name) for t in owned for link in catalog.links.to(t).merged()]
        if linked_by:
            raise UserInputError(
                f"namespace {name}: its tables are linked by {', '.join(linked_by)}; drop those links "
                "first, or add --force to leave them dangling (every read of them then fails)"
            )
    for link in catalog.links.list(name):
        catalog.links.drop(link)
    for table in owned:
        catalog.drop_table(table, force=force)


@namespace_app.command("usage")
def namespace_usage(
    ctx: typer.Context,
    name: Annotated[str | None, typer.Argument(help="NAMESPACE [default: every namespace]")] = None,
    _json: JsonFlag = False,
) -> None:
    """What each namespace owns (charged to its quota) and what it reads through links (not charged).

    With NAMESPACE, --json prints one object; without, a list of them.
    """
    from metastore.usage import namespace_usage as usage_of

    cli = cli_context(ctx)
    catalog = cli.catalog()
    if name is not None:
        cli.output.result(usage_of(catalog, name).to_json(), lambda out, u: _print_usage(out, [u]))
        return
    listed = catalog.router.fan_out(
        lambda store: [
            usage_of(catalog, ns.name).to_json()
            for ns in store.list_namespaces()
            if catalog.router.metastore_of(ns.name) == store.name
        ]
    )
    if listed.warning():
        cli.output.warn(str(listed.warning()))
    cli.output.result(sorted(listed.merged(), key=lambda u: str(u["namespace"])), _print_usage)


def _print_usage(out: TextOutput, usages: list[dict[str, Any]]) -> None:
    from metastore.namespaces import format_size

    if not usages:
        out.console.print("no namespaces")
        return
    grid = listing("namespace", "standard", "streaming", "files", "rows", "quota", "used", "linked")
    for u in usages:
        owned, std, live = u["owned"], u["owned"]["standard"], u["owned"]["streaming"]
        used = _percent(owned["bytes"], u["quota_bytes"])
        grid.add_row(
            u["namespace"],
            format_size(std["bytes"]),
            format_size(live["bytes"]),
            f"{std['files']} + {live['files']}",
            f"{std['rows']} + {live['rows']}",
            format_size(u["quota_bytes"]),
            f"{used}%" if used is not None else "-",
            format_size(u["linked"]["bytes"]),
        )
    out.table(grid)
    out.console.print(
        "owned: standard and streaming (files and rows: standard + streaming), charged to the quota; "
        "linked: read through links, not charged",
        highlight=False,
    )
    for u in usages:
        for link, error in u["errors"].items():
            out.warn(f"warning: {link}: {error}")


@namespace_app.command("move")
def namespace_move(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="NAMESPACE")],
    to: Annotated[
        str | None, typer.Option("--to", help="The metastore to move it to (see federation list)")
    ] = None,
    abort: Annotated[
        bool, typer.Option("--abort", help="Roll back its move that has not flipped its route yet")
    ] = False,
    grace: Annotated[
        float | None,
        typer.Option(
            help="Seconds between the route's flip and removing its old rows "
            "[default: federation.refresh_interval]",
            min=0,
        ),
    ] = None,
    drain_timeout: Annotated[
        float, typer.Option(help="Seconds to wait for commits in flight before rolling the move back", min=0)
    ] = 180,
    _json: JsonFlag = False,
) -> None:
    """Move a namespace's metadata to another metastore, online (data files stay where they are).

    Writers get a retriable error for the seconds of the switch, then carry on in the new
    metastore. Run it again after a crash to resume (before the route flipped: copies again;
    after: finishes removing the old rows); --abort rolls back a move that has not flipped.
    """
    import contextlib

    from ingest.chunks import ChunkWriter
    from ingest.errors import ChunkBusyError, ChunkStateError, LateDataError
    from metastore.models import Chunk
    from metastore.moves import Progress as MoveProgress

    if abort == (to is not None):
        raise UserInputError("give --to METASTORE to move the namespace, or --abort to roll its move back")
    cli = cli_context(ctx)
    settings = cli.settings()
    catalog = cli.catalog(settings)

    def resolve(metastore: str, chunk: Chunk) -> None:
        """A commit in flight whose writer died: rolled forward once stale (as housekeeping does)."""
        home = catalog.on(metastore)
        table = home.store.get_table_by_id(chunk.table_id)
        # alive (busy), or it ended another way: either way it leaves COMMITTING
        with contextlib.suppress(ChunkBusyError, ChunkStateError, LateDataError):
            ChunkWriter(home, table, settings.chunk).commit(chunk.id)

    with progress_bars(cli.output) as progress:

        class Bars(MoveProgress):
            def table(self, table: str, rows: int) -> None:
                progress.start(f"copying {table}", rows, "rows")

            def advance(self, rows: int) -> None:
                progress.advance(rows)

            def step(self, text: str) -> None:
                progress.step(text)

        mover = catalog.namespaces.mover(
            resolve=resolve,
            drain_timeout_s=drain_timeout,
            grace_s=settings.federation.refresh_interval.total_seconds() if grace is None else grace,
            progress=Bars(),
        )
        report = mover.abort(name) if abort else mover.move(name, str(to))
    cli.output.result(report.to_json(), _print_moved)


def _print_moved(out: TextOutput, info: dict[str, Any]) -> None:
    if info["aborted"]:
        out.console.print(
            f"rolled back the move of namespace {info['namespace']} to {info['to']} (it was at step "
            f"{info['resumed_at']}); it stays in {info['from']}",
            highlight=False,
        )
        return
    resumed = f" (resumed at step {info['resumed_at']})" if info["resumed_at"] else ""
    out.console.print(
        f"moved namespace {info['namespace']} from {info['from']} to {info['to']}{resumed}: "
        f"{len(info['tables'])} table(s), {info['links']} link(s), {info['rows']} row(s) copied",
        highlight=False,
    )

"""``streampart federation add|list|describe|alter|route|remove``: the registry of federated metastores
and the routes (issue 12), recorded in the primary (the ``--metastore`` a process starts with).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from metastore.errors import UserInputError
from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag

federation_app = typer.Typer(
    help="Register, list, describe, alter and remove federated metastores, and route namespaces to them: "
    "namespaces spread over several metastore databases.",
    no_args_is_help=True,
)


def _routes_option(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        namespace, sep, target = item.partition("=")
        if not sep or not namespace.strip() or not target.strip():
            raise UserInputError(
                f"--route {item!r} must have the form NAMESPACE=METASTORE (e.g. sales=primary)"
            )
        out[namespace.strip()] = target.strip()
    return out


@federation_app.command("add")
def federation_add(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The metastore's name (a plain identifier)")],
    url: Annotated[
        str,
        typer.Option(
            help="Its database: sqlite:///… or postgresql://user:${SECRET}@host/db (a password only as a "
            "secret, from [federation] secrets or STREAMPART_SECRET_<NAME>)"
        ),
    ],
    access: Annotated[
        str,
        typer.Option(
            help="read-only, read-write-whitelist, read-write-create-whitelist or read-write-create"
        ),
    ],
    writable: Annotated[
        list[str] | None,
        typer.Option(help="A pattern of namespace names a whitelist writes, e.g. 'sales_*' (repeatable)"),
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(help="Namespaces named with this prefix are placed here")
    ] = None,
    route: Annotated[
        list[str] | None,
        typer.Option(
            help="NAMESPACE=primary|NAME: where a namespace present in both metastores lives (repeatable)"
        ),
    ] = None,
    _json: JsonFlag = False,
) -> None:
    """Register a metastore: reached, migrated, checked for name clashes, then recorded in the primary."""
    cli = cli_context(ctx)
    catalog = cli.catalog(create=True)
    metastore = catalog.federation.add(name, url, access, writable or [], prefix, _routes_option(route or []))
    from metastore.catalog.federation import metastore_info

    cli.output.result(metastore_info(metastore, catalog.primary.routes(), None), _print_added)


def _print_added(out: TextOutput, info: dict[str, Any]) -> None:
    out.console.print(
        f"added metastore [bold]{info['metastore']}[/] ({info['access']}) at {escape(info['url'])}"
        + (f", writable {', '.join(info['writable'])}" if info["writable"] else "")
        + (f", prefix {info['prefix']}" if info["prefix"] else ""),
        highlight=False,
    )


@federation_app.command("list")
def federation_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """List the metastores (``primary`` is this process's --metastore), each with a live probe."""
    cli = cli_context(ctx)
    cli.output.result(cli.catalog().federation.listed(), _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    grid = listing("metastore", "access", "writable", "prefix", "routes", "health")
    for r in rows:
        grid.add_row(
            r["metastore"],
            r["access"],
            ", ".join(r["writable"]),
            r["prefix"] or "",
            str(len(r["routes"])),
            "up" if r["error"] is None else escape(f"down: {r['error']}"),
        )
    out.table(grid)


@federation_app.command("describe")
def federation_describe(
    ctx: typer.Context, name: Annotated[str, typer.Argument(help="The metastore")], _json: JsonFlag = False
) -> None:
    """Show a metastore: URL (secrets named, not their values), access, whitelist, prefix, routes, health."""
    cli = cli_context(ctx)
    cli.output.result(cli.catalog().federation.described(name), _print_described)


def _print_described(out: TextOutput, info: dict[str, Any]) -> None:
    out.console.print(
        f"[bold]{info['metastore']}[/]  {info['access']}  "
        + ("up" if info["error"] is None else escape(f"down: {info['error']}"))
        + f"\nurl: {escape(info['url'])}"
        + f"\nwritable: {', '.join(info['writable']) or 'n/a'}"
        + f"\nprefix: {info['prefix'] or 'none'}"
        + f"\nroutes: {', '.join(info['routes']) or 'none'}",
        highlight=False,
    )


@federation_app.command("alter")
def federation_alter(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The metastore")],
    access: Annotated[
        str | None,
        typer.Option(
            help="The new access type: read-only, read-write-whitelist, read-write-create-whitelist or "
            "read-write-create"
        ),
    ] = None,
    writable: Annotated[
        list[str] | None,
        typer.Option(
            help="The new whitelist, replacing the old one: a pattern of namespace names, e.g. 'sales_*' "
            "(repeatable)"
        ),
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(help="A new prefix: namespaces named with it are placed here")
    ] = None,
    no_prefix: Annotated[bool, typer.Option("--no-prefix", help="Remove its prefix")] = False,
    _json: JsonFlag = False,
) -> None:
    """Change a metastore's access type, whitelist or prefix: every running process follows within the
    refresh interval, without a restart."""
    cli = cli_context(ctx)
    catalog = cli.catalog()
    metastore = catalog.federation.alter(
        name, access=access, writable=writable, prefix=prefix, no_prefix=no_prefix
    )
    from metastore.catalog.federation import metastore_info

    cli.output.result(metastore_info(metastore, catalog.primary.routes()), _print_altered)


def _print_altered(out: TextOutput, info: dict[str, Any]) -> None:
    out.console.print(
        f"metastore [bold]{info['metastore']}[/] is {info['access']}"
        + (f", writable {', '.join(info['writable'])}" if info["writable"] else "")
        + (f", prefix {info['prefix']}" if info["prefix"] else ", no prefix"),
        highlight=False,
    )


@federation_app.command("route")
def federation_route(
    ctx: typer.Context,
    namespace: Annotated[str, typer.Argument(help="The namespace")],
    to: Annotated[str, typer.Option("--to", help="The metastore it lives in from now on (or primary)")],
    force: Annotated[
        bool, typer.Option(help="Route it even if its tables stay behind in its current metastore")
    ] = False,
) -> None:
    """Route a namespace to a metastore: every running process follows within the refresh interval.

    A route moves nothing: to move a namespace's tables to another metastore, use ``namespace move``.
    """
    cli = cli_context(ctx)
    before = cli.catalog().federation.route(namespace, to, force=force)
    cli.output.note(
        f"namespace {namespace} routes to metastore {to}"
        + (f" (it routed to {before})" if before != to else " (unchanged)")
    )


@federation_app.command("remove")
def federation_remove(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The metastore")]) -> None:
    """Remove a metastore from the registry (refused while namespaces are placed there; its database is
    untouched)."""
    cli = cli_context(ctx)
    cli.catalog().federation.remove(name)
    cli.output.note(f"removed metastore {name}")

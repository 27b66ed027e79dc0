"""``streampart share create|add|remove|list|drop``: Delta Sharing's shares.

A share is a named list of tables and links; a recipient is a token (``streampart token create
--sharing-profile``) whose read scopes decide which of a share's tables it lists and loads. A share's
schemas are the namespaces of what it holds. Shares live in the primary metastore.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag

share_app = typer.Typer(
    help="Shares of tables and links for Delta Sharing recipients (served under /delta-sharing).",
    no_args_is_help=True,
)

ShareName = Annotated[str, typer.Argument(help="The share's name")]
TableArg = Annotated[str, typer.Argument(help="NAMESPACE.NAME: a table or a link")]


def _info(share: Any) -> dict[str, Any]:
    from metastore.models import iso

    return {
        "name": share.name,
        "comment": share.comment,
        "created_at": iso(share.created_at),
        "tables": [str(t) for t in share.tables],
    }


@share_app.command("create")
def share_create(
    ctx: typer.Context,
    name: ShareName,
    comment: Annotated[str | None, typer.Option("--comment", help="What the share is for")] = None,
    _json: JsonFlag = False,
) -> None:
    """Make an empty share."""
    cli = cli_context(ctx)
    made = cli.catalog(create=True).primary.create_share(name, comment)
    cli.output.result(_info(made), lambda out, _: out.console.print(f"share {name} created"))


@share_app.command("add")
def share_add(ctx: typer.Context, name: ShareName, table: TableArg, _json: JsonFlag = False) -> None:
    """Add a table or a link to a share (its namespace becomes one of the share's schemas)."""
    from metastore.models import TableName

    cli = cli_context(ctx)
    catalog = cli.catalog()
    qualified = TableName.parse(table)
    resolved = catalog.resolve(qualified, qualified.namespace)  # NotFoundError naming it
    share = catalog.primary.share_table(name, resolved.name)
    cli.output.result(_info(share), lambda out, _: out.console.print(f"share {name} holds {resolved.name}"))


@share_app.command("remove")
def share_remove(ctx: typer.Context, name: ShareName, table: TableArg, _json: JsonFlag = False) -> None:
    """Take a table or a link out of a share: recipients stop seeing it at once."""
    from metastore.models import TableName

    cli = cli_context(ctx)
    share = cli.catalog().primary.unshare_table(name, TableName.parse(table))
    cli.output.result(_info(share), lambda out, _: out.console.print(f"removed {table} from share {name}"))


@share_app.command("drop")
def share_drop(ctx: typer.Context, name: ShareName) -> None:
    """Drop a share (its tables stay as they are)."""
    cli = cli_context(ctx)
    cli.catalog().primary.drop_share(name)
    cli.output.note(f"dropped share {name}")


@share_app.command("list")
def share_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """Every share and what it holds."""
    cli = cli_context(ctx)
    rows = [_info(s) for s in cli.catalog().primary.list_shares()]
    cli.output.result(rows, _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    if not rows:
        out.console.print("no shares")
        return
    grid = listing("share", "tables and links", "comment")
    for r in rows:
        grid.add_row(r["name"], ", ".join(r["tables"]) or "(empty)", r["comment"] or "")
    out.table(grid)

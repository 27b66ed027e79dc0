"""``streampart token create|revoke|list``: bearer tokens of the HTTP API."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from streampart.cli.context import cli_context
from streampart.cli.output import TextOutput, listing
from streampart.cli.params import JsonFlag, json_flag

token_app = typer.Typer(
    help="Bearer tokens of the HTTP API, with scopes per namespace (read, write, admin).",
    no_args_is_help=True,
)


@token_app.command("create")
def token_create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="A name for the token (who or what uses it)")],
    scope: Annotated[
        list[str],
        typer.Option(
            "--scope", help="PERMISSION:NAMESPACE, e.g. write:shop, read:shop, admin:* (repeatable)"
        ),
    ],
    _json: Annotated[bool, json_flag('Print {"name": …, "token": …, "scopes": […]}')] = False,
) -> None:
    """Make a token and print it once: only its SHA-256 digest is stored."""
    from ingest.api.auth import hash_token, new_token
    from metastore.models import Scope

    cli = cli_context(ctx)
    scopes = [Scope.parse(s) for s in scope]
    token = new_token()
    made = cli.catalog(create=True).primary.create_token(name, hash_token(token), scopes)
    cli.output.result(
        {"name": made.name, "token": token, "scopes": [str(s) for s in made.scopes]}, _print_created
    )


def _print_created(out: TextOutput, made: dict[str, Any]) -> None:
    out.console.print(f"token [bold]{made['name']}[/] ({', '.join(made['scopes'])}):")
    out.console.print(made["token"], highlight=False)
    out.console.print("store it now: it is not shown again")


@token_app.command("revoke")
def token_revoke(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The token's name")]) -> None:
    """Revoke a token: servers refuse it within server.auth_cache_ttl (5 s)."""
    cli = cli_context(ctx)
    cli.catalog().primary.revoke_token(name)
    cli.output.note(f"revoked token {name}")


@token_app.command("list")
def token_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """List tokens (names, scopes, creation times; never the tokens)."""
    from metastore.models import iso

    cli = cli_context(ctx)
    rows = [
        {"name": t.name, "scopes": [str(s) for s in t.scopes], "created_at": iso(t.created_at)}
        for t in cli.catalog().primary.list_tokens()
    ]
    cli.output.result(rows, _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    grid = listing("name", "scopes", "created")
    for r in rows:
        grid.add_row(r["name"], ", ".join(r["scopes"]), r["created_at"])
    if rows:
        out.table(grid)
    else:
        out.console.print("no tokens")

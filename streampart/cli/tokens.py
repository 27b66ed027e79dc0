"""``streampart token create|revoke|list``: bearer tokens of the HTTP API."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
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
    expires_in: Annotated[
        str | None,
        typer.Option(
            "--expires-in",
            help="The token stops working this long after it is made, e.g. 30d, 12h [default: never]",
        ),
    ] = None,
    profile: Annotated[
        Path | None,
        typer.Option(
            "--sharing-profile",
            help="Also write a Delta Sharing profile file carrying the token, for a recipient (needs "
            "--sharing-endpoint)",
            dir_okay=False,
        ),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option(
            "--sharing-endpoint",
            help="The server's Delta Sharing address as recipients reach it, e.g. "
            "https://data.example.com/delta-sharing",
        ),
    ] = None,
    _json: Annotated[
        bool, json_flag('Print {"name": …, "token": …, "scopes": […], "expires_at": …}')
    ] = False,
) -> None:
    """Make a token and print it once: only its SHA-256 digest is stored."""
    from ingest.api.auth import hash_token, new_token
    from metastore import clock
    from metastore.durations import parse_duration
    from metastore.errors import UserInputError
    from metastore.models import Scope, iso

    cli = cli_context(ctx)
    scopes = [Scope.parse(s) for s in scope]
    if (profile is None) != (endpoint is None):
        raise UserInputError("--sharing-profile and --sharing-endpoint go together: give both or neither")
    if endpoint is not None and not endpoint.startswith(("http://", "https://")):
        raise UserInputError(f"--sharing-endpoint {endpoint!r} must be an http:// or https:// address")
    now = clock.now()
    expires_at = now + parse_duration(expires_in, "--expires-in") if expires_in is not None else None
    token = new_token()
    catalog = cli.catalog(create=True)
    made = catalog.primary.create_token(name, hash_token(token), scopes, now=now, expires_at=expires_at)
    for ns in sorted({sc.namespace for sc in scopes if sc.namespace != "*"}):
        if catalog.namespaces.find(ns) is None:
            cli.output.warn(
                f"namespace {ns} does not exist (yet): the token can do nothing there until it does"
            )
    out = {
        "name": made.name,
        "token": token,
        "scopes": [str(s) for s in made.scopes],
        "expires_at": iso(made.expires_at) if made.expires_at else None,
    }
    if profile is not None and endpoint is not None:
        write_profile(profile, endpoint, token, made.expires_at)
        out["sharing_profile"] = str(profile)
    cli.output.result(out, _print_created)


def write_profile(path: Path, endpoint: str, token: str, expires_at: datetime | None) -> None:
    """A Delta Sharing profile file (readable by its owner only: it holds the token)."""
    import os

    from metastore.models import iso

    body: dict[str, Any] = {
        "shareCredentialsVersion": 1,
        "endpoint": endpoint.rstrip("/"),
        "bearerToken": token,
    }
    if expires_at is not None:
        body["expirationTime"] = iso(expires_at)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(body, f, indent=2)
        f.write("\n")


def _print_created(out: TextOutput, made: dict[str, Any]) -> None:
    expiry = f", expires {made['expires_at']}" if made.get("expires_at") else ""
    out.console.print(f"token [bold]{made['name']}[/] ({', '.join(made['scopes'])}{expiry}):")
    out.console.print(made["token"], highlight=False)
    out.console.print("store it now: it is not shown again")
    if made.get("sharing_profile"):
        out.console.print(f"Delta Sharing profile written to {made['sharing_profile']} (it holds the token)")


@token_app.command("revoke")
def token_revoke(ctx: typer.Context, name: Annotated[str, typer.Argument(help="The token's name")]) -> None:
    """Revoke a token: servers refuse it within server.auth_cache_ttl (5 s)."""
    cli = cli_context(ctx)
    cli.catalog().primary.revoke_token(name)
    cli.output.note(f"revoked token {name}")


@token_app.command("list")
def token_list(ctx: typer.Context, _json: JsonFlag = False) -> None:
    """List tokens (names, scopes, creation and expiry times; never the tokens)."""
    from metastore.models import iso

    cli = cli_context(ctx)
    rows = [
        {
            "name": t.name,
            "scopes": [str(s) for s in t.scopes],
            "created_at": iso(t.created_at),
            "expires_at": iso(t.expires_at) if t.expires_at else None,
        }
        for t in cli.catalog().primary.list_tokens()
    ]
    cli.output.result(rows, _print_list)


def _print_list(out: TextOutput, rows: list[dict[str, Any]]) -> None:
    grid = listing("name", "scopes", "created", "expires")
    for r in rows:
        grid.add_row(r["name"], ", ".join(r["scopes"]), r["created_at"], r["expires_at"] or "never")
    if rows:
        out.table(grid)
    else:
        out.console.print("no tokens")

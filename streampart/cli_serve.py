"""``streampart serve``, ``streampart token create|revoke|list`` and ``streampart write --url``.

Registered on the main app in :mod:`streampart.cli`; imports nothing heavy until a command runs.
"""

from __future__ import annotations

import logging
import signal
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

log = logging.getLogger("streampart.api")

token_app = typer.Typer(
    help="Bearer tokens of the HTTP API, with scopes per namespace (read, write, admin).",
    no_args_is_help=True,
)

_INSECURE_BANNER = (
    "WARNING: AUTHENTICATION IS OFF (--insecure-no-auth). Anyone who can reach {url} can read "
    "every table and write into it. Never run this way outside a trusted, private network."
)


def serve(
    host: Annotated[
        str | None, typer.Option(help="Address to listen on [default: from config, 127.0.0.1]")
    ] = None,
    port: Annotated[
        int | None, typer.Option(help="Port (0: a free one, logged at start) [default: from config, 8080]")
    ] = None,
    insecure_no_auth: Annotated[
        bool,
        typer.Option("--insecure-no-auth", help="Accept requests without a token (trusted networks only)"),
    ] = False,
    log_format: Annotated[str | None, typer.Option(help="json or text [default: from config]")] = None,
) -> None:
    """Serve the HTTP chunk API (OpenAPI at /openapi.json, docs at /docs) until SIGTERM/SIGINT."""
    import uvicorn

    from ingest.api.app import create_app
    from metastore.errors import UserInputError
    from metastore.logs import configure_logging
    from streampart.cli import STATE, err

    settings = STATE.settings()
    updates: dict[str, Any] = {}
    if host is not None:
        updates["host"] = host
    if port is not None:
        if not 0 <= port <= 65535:
            raise UserInputError(f"--port must be between 0 and 65535; got {port}")
        updates["port"] = port
    if log_format is not None:
        if log_format not in ("json", "text"):
            raise UserInputError(f"--log-format must be json or text; got {log_format!r}")
        updates["log_format"] = log_format
    config = settings.server.model_copy(update=updates)
    configure_logging(config.log_format, config.log_level)
    catalog = STATE.catalog()
    sock = _listen(config.host, config.port)
    bound = sock.getsockname()[1]
    url = f"http://{config.host if ':' not in config.host else f'[{config.host}]'}:{bound}"
    if insecure_no_auth:
        banner = _INSECURE_BANNER.format(url=url)
        err.print(f"[bold red]{banner}[/]", highlight=False)
        log.warning(banner, extra={"event": "server.insecure_no_auth"})
    app = create_app(catalog, config, settings.chunk, auth=not insecure_no_auth)
    log.info(
        "HTTP API listening on %s (docs at %s/docs)",
        url,
        url,
        extra={"event": "server.listening", "url": url, "auth": not insecure_no_auth},
    )
    from ingest.api.protocol import header_timeout_protocol

    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=config.access_log,
            timeout_graceful_shutdown=20,
            http=header_timeout_protocol(config.header_timeout.total_seconds()),
        )
    )
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again with the handler it
    # found at start: make that one a clean exit (status 0), as for the roll daemon.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.run(sockets=[sock])


def _listen(host: str, port: int) -> socket.socket:
    from metastore.errors import UserInputError

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise UserInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


# -- tokens ---------------------------------------------------------------------------------
@token_app.command("create")
def token_create(
    name: Annotated[str, typer.Argument(help="A name for the token (who or what uses it)")],
    scope: Annotated[
        list[str],
        typer.Option(
            "--scope", help="PERMISSION:NAMESPACE, e.g. write:shop, read:shop, admin:* (repeatable)"
        ),
    ],
    as_json: Annotated[
        bool, typer.Option("--json", help='Print {"name": …, "token": …, "scopes": […]}')
    ] = False,
) -> None:
    """Make a token and print it once: only its SHA-256 digest is stored."""
    from ingest.api.auth import hash_token, new_token
    from metastore.models import Scope
    from streampart.cli import STATE, emit_json, out

    scopes = [Scope.parse(s) for s in scope]
    token = new_token()
    made = STATE.catalog().store.create_token(name, hash_token(token), scopes)
    if as_json:
        emit_json({"name": made.name, "token": token, "scopes": [str(s) for s in made.scopes]})
        return
    out.print(f"token [bold]{made.name}[/] ({', '.join(str(s) for s in made.scopes)}):")
    out.print(token, highlight=False)
    out.print("store it now: it is not shown again")


@token_app.command("revoke")
def token_revoke(name: Annotated[str, typer.Argument(help="The token's name")]) -> None:
    """Revoke a token: servers refuse it within server.auth_cache_ttl (5 s)."""
    from streampart.cli import STATE, out

    STATE.catalog().store.revoke_token(name)
    out.print(f"revoked token {name}")


@token_app.command("list")
def token_list(as_json: Annotated[bool, typer.Option("--json", help="Print JSON")] = False) -> None:
    """List tokens (names, scopes, creation times; never the tokens)."""
    from rich.table import Table as RichTable

    from metastore.models import iso
    from streampart.cli import STATE, emit_json, out

    rows = [
        {"name": t.name, "scopes": [str(s) for s in t.scopes], "created_at": iso(t.created_at)}
        for t in STATE.catalog().store.list_tokens()
    ]
    if as_json:
        emit_json(rows)
        return
    grid = RichTable("name", "scopes", "created")
    for r in rows:
        grid.add_row(r["name"], ", ".join(r["scopes"]), r["created_at"])
    out.print(grid if rows else "no tokens")


# -- write --url ----------------------------------------------------------------------------
def write_over_http(
    url: str, api_token: str | None, name: str, file: Path, fmt: Any, token: str | None, as_json: bool
) -> None:
    """``streampart write --url``: the same chunk, sent through the HTTP API by :mod:`ingest.client`."""
    from ingest.client import Client
    from metastore.errors import UserInputError
    from streampart.cli import emit_json, out

    if str(file) == "-":
        data: Any = sys.stdin.buffer.read()
    elif not file.exists():
        raise UserInputError(f"file {file} does not exist")
    elif file.is_dir():
        raise UserInputError(f"{file} is a directory, not a file")
    else:
        data = file
    with Client(url, api_token) as api:
        result = api.write(name, data, str(fmt), idempotency_key=token)
    if as_json:
        emit_json(result)
        return
    extra = ""
    if result.get("dead_letter_rows"):
        extra += f", {result['dead_letter_rows']} bad records to the dead-letter table"
    if result.get("late_rows"):
        extra += f", {result['late_rows']} late rows diverted"
    out.print(
        f"committed chunk {result['chunk']}: {result['rows']} rows into "
        f"{', '.join(result['partitions']) or '(none)'} at version {result['version']}{extra}"
    )

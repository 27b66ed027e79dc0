"""``streampart serve``: the HTTP chunk API.

Registered on the root app in :mod:`streampart.cli.root`; imports nothing heavy until a command runs.
"""

from __future__ import annotations

import logging
import socket
import sys
from typing import Annotated

import typer

from metastore.errors import UserInputError
from streampart.cli.context import cli_context

log = logging.getLogger("streampart.api")

_INSECURE_BANNER = (
    "WARNING: AUTHENTICATION IS OFF (--insecure-no-auth). Anyone who can reach {url} can read "
    "every table and write into it. Never run this way outside a trusted, private network."
)


def serve(
    ctx: typer.Context,
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
    workers: Annotated[
        int | None,
        typer.Option(help="Server processes sharing the port, each a whole server [default: from config, 1]"),
    ] = None,
) -> None:
    """Serve the HTTP chunk API (OpenAPI at /openapi.json, docs at /docs) and the status page (/ui)
    until SIGTERM/SIGINT."""
    from metastore.logs import configure_logging

    cli = cli_context(ctx)
    settings = cli.settings(server={"host": host, "port": port, "log_format": log_format, "workers": workers})
    config = settings.server
    configure_logging(config.log_format, config.log_level)
    catalog = cli.catalog(settings)  # (a warehouse or metastore that does not exist: one error, here)
    socks = _listen(config.host, config.port, config.workers)
    sock = socks[0]
    bound = sock.getsockname()[1]
    url = f"http://{config.host if ':' not in config.host else f'[{config.host}]'}:{bound}"
    if insecure_no_auth:
        banner = _INSECURE_BANNER.format(url=url)
        cli.output.err.print(f"[bold red]{banner}[/]", highlight=False)
        log.warning(banner, extra={"event": "server.insecure_no_auth"})
    log.info(
        "HTTP API listening on %s (docs at %s/docs, status page at %s/ui)%s",
        url,
        url,
        url,
        f"; {config.workers} worker processes" if config.workers > 1 else "",
        extra={
            "event": "server.listening", "url": url, "auth": not insecure_no_auth, "workers": config.workers,
        },
    )  # fmt: skip
    if config.workers == 1:
        from streampart.cli.server_app import run_server

        run_server(settings, catalog, sock, insecure_no_auth)
        return
    catalog.close()
    from streampart.cli.server_workers import supervise

    sys.exit(supervise(settings, socks, insecure_no_auth))


def _listen(host: str, port: int, workers: int = 1) -> list[socket.socket]:
    """A listening socket for each of ``workers`` server processes, on one port.

    One worker: one socket, which no other process can bind. Several: one socket each, bound with
    ``SO_REUSEPORT``, so the kernel spreads new connections over the workers by their addresses.
    (On one shared socket, the worker that wakes first accepts every connection waiting — an
    asyncio server takes up to a hundred at a wake-up — so a burst of keep-alive clients all went
    to one worker.) Sockets with ``SO_REUSEPORT`` share their port with any later one of the same
    user that sets it too: so the port is first bound without it, which fails if anything listens
    there (another server, of any kind), and only then taken by the workers' sockets.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    socks: list[socket.socket] = []
    try:
        sharing = workers > 1
        if sharing:
            port = _free(family, host, port)  # and one port for all of them (0: the kernel's pick)
        for _ in range(workers if sharing else 1):
            sock = socket.socket(family, socket.SOCK_STREAM)
            socks.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if sharing:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise UserInputError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return socks


def _free(family: socket.AddressFamily, host: str, port: int) -> int:
    """``port`` (0: one the kernel picks) once bound by a socket of no sharing: the port, free.

    Raises:
        OSError: it is taken (something listens there, sharing it or not)."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind((host, port))
        return int(probe.getsockname()[1])

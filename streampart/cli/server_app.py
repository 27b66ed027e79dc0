"""One HTTP server process on a listening socket: ``streampart serve`` itself, or each of its workers.

:func:`run_server` builds the API (:func:`ingest.api.app.create_app`) and the status page over one
catalog and serves them with uvicorn until SIGTERM/SIGINT; ``streampart/cli/server.py`` binds the
socket and calls it, or starts workers that do (``streampart/cli/server_workers.py``).
"""

from __future__ import annotations

import signal
import socket
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from metastore.catalog import Catalog
    from streampart.config import Settings


def run_server(settings: Settings, catalog: Catalog, sock: socket.socket, insecure_no_auth: bool) -> None:
    """Serve the API and the status page on the listening ``sock`` until SIGTERM/SIGINT (one process:
    the server, or one of its workers)."""
    import uvicorn

    from ingest.api.app import create_app
    from ingest.api.protocol import header_timeout_protocol
    from scheduler.status_page import StatusPage, router

    config = settings.server
    app = create_app(catalog, config, settings.chunk, auth=not insecure_no_auth)
    # the operators' status page, with the API's tokens (and their cache)
    app.state.status_page = StatusPage(
        catalog, settings.scheduler, app.state.api.authenticator, auth=not insecure_no_auth
    )
    app.include_router(router)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            log_config=None,
            access_log=config.access_log,
            timeout_graceful_shutdown=20,
            http=header_timeout_protocol(config.header_timeout.total_seconds()),
            # forwarded headers are believed only from settings' server.trusted_proxies, by the app
            # (ingest.api.app); uvicorn's own default would believe any process on this host
            proxy_headers=False,
        )
    )
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again with the handler it
    # found at start: make that one a clean exit (status 0), as for the roll daemon.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.run(sockets=[sock])

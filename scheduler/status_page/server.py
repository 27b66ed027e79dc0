"""The status page served by the roll daemon's own process (``scheduler run --status-port``).

A host that runs only daemons has no ``streampart serve`` to open the page on; the daemon then
serves it alone (:func:`~scheduler.status_page.routes.standalone_app`), read-only like the whole
page, from a uvicorn server on a thread of its own (uvicorn installs no signal handlers off the
main thread: the daemon's SIGTERM handling stays the daemon's).
"""

from __future__ import annotations

import logging
import socket
import threading
import time

import uvicorn

from metastore.errors import UserInputError
from metastore.logs import event
from scheduler.status_page.routes import StatusPage, standalone_app

log = logging.getLogger("streampart.scheduler")

# Why 10 s: the page's answers are a few metastore queries; a shutdown waits this long at most
# for a refresh in flight, well inside the daemon's own shutdown grace.
_STOP_TIMEOUT_S = 10


class StatusServer:
    """The page on ``host:port`` (0: a free port, in ``.port`` once started) until :meth:`stop`."""

    def __init__(self, page: StatusPage, host: str, port: int) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind((host, port))
        except OSError as exc:
            self._sock.close()
            raise UserInputError(
                f"cannot serve the status page on {host}:{port} ({exc.strerror or exc}); choose another "
                "port with --status-port or scheduler.status_port"
            ) from None
        self._sock.listen(128)
        self.port = int(self._sock.getsockname()[1])
        self.url = f"http://{socket.gethostname()}:{self.port}/ui"
        self._server = uvicorn.Server(
            uvicorn.Config(
                standalone_app(page),
                log_config=None,
                access_log=False,
                timeout_graceful_shutdown=5,
                # a login's address is its peer's: no forwarded header is believed, from anyone
                # (uvicorn's default believes any process on this host)
                proxy_headers=False,
            )
        )
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, name="status-page", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        event(
            log,
            logging.INFO,
            "status_page.listening",
            f"status page at {self.url}",
            url=self.url,
            port=self.port,
        )

    def stop(self) -> None:
        self._server.should_exit = True
        deadline = time.monotonic() + _STOP_TIMEOUT_S
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._sock.close()

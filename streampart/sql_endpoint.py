"""Where a running SQL server is found, and who this host's commands log in as (no Spark, no sqlglot).

``streampart sql-server`` writes ``<warehouse>/.sql-server.json`` (host, port, pid and a secret,
mode 0600) while it runs; ``streampart query`` and ``streampart sql`` read it to send statements
there, logged in as :data:`LOCAL_USER` with that secret — whoever can read the warehouse's files
can read its tables anyway.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from metastore.processes import alive

SERVER_FILE = ".sql-server.json"
# (a ':' cannot be in a token's name, so no token is mistaken for this user)
LOCAL_USER = "streampart:local"


@dataclass(frozen=True)
class ServerInfo:
    """Where a running SQL server listens, and the secret this host's commands log in with."""

    host: str
    port: int
    pid: int
    secret: str

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def server_file(warehouse: Path) -> Path:
    return warehouse / SERVER_FILE


def write_server_file(warehouse: Path, info: ServerInfo) -> None:
    fd = os.open(server_file(warehouse), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(info), f)


def running_server(warehouse: Path) -> ServerInfo | None:
    """The SQL server serving ``warehouse`` on this host, if its file names a live process."""
    try:
        info = ServerInfo(**json.loads(server_file(warehouse).read_text()))
    except (OSError, ValueError, TypeError):
        return None
    if not alive(info.pid):
        return None  # a server killed without cleaning up
    return info

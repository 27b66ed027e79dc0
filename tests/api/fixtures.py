"""A real ``streampart serve`` process per test module, and what tests need around it.

The server runs as a subprocess on a loopback port (real HTTP, real kill -9); the test talks
to it with :class:`ingest.client.Client` or raw httpx, and looks at the result through its own
:class:`~metastore.catalog.Catalog` and delta-rs (independently of the server).
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from ingest.api.auth import hash_token, new_token
from metastore.catalog import Catalog
from metastore.models import Scope
from tests.fixtures import fresh_metastore_url, make_table
from tests.pg import drop_scratch_schema

ROOT = Path(__file__).resolve().parents[2]
_SCRIPT = Path(sys.executable).parent / "streampart"
COMMAND = [str(_SCRIPT)] if _SCRIPT.is_file() else [sys.executable, "-m", "streampart.cli"]
STARTUP_TIMEOUT_S = 60


@dataclass
class Server:
    """One ``streampart serve`` process (restartable on the same port) and its warehouse."""

    warehouse: Path
    metastore: str
    log_dir: Path
    env_extra: dict[str, str] = field(default_factory=dict)
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    _catalog: Catalog | None = None
    admin: str = ""  # an admin:* token, which the fixtures record (see server)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = Catalog.open(self.warehouse, self.metastore)
        return self._catalog

    @property
    def log(self) -> Path:
        return self.log_dir / f"server-{self.starts}.log"

    def start(self, *args: str, crashpoint: str | None = None, wait: bool = True, **env: str) -> None:
        assert self.proc is None or self.proc.poll() is not None, "the server is running already"
        self.starts += 1
        full_env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for key in ("STREAMPART_CRASHPOINT", "STREAMPART_PAUSEPOINT", "STREAMPART_CONFIG"):
            full_env.pop(key, None)
        # the fuzzer and the tests of bad tokens fail many logins from 127.0.0.1: answered at once,
        # unless a test sets a delay (test_auth_and_errors: a correct token gets in after failures)
        full_env["STREAMPART_SERVER__LOGIN_DELAY"] = "0s"
        full_env.update(
            STREAMPART_WAREHOUSE=str(self.warehouse),
            STREAMPART_METASTORE=self.metastore,
            STREAMPART_SERVER__AUTH_CACHE_TTL="0",
            STREAMPART_SERVER__LOG_FORMAT="json",
        )
        full_env.update(self.env_extra)  # (either may set what the lines above do)
        full_env.update(env)
        if crashpoint:
            full_env["STREAMPART_CRASHPOINT"] = crashpoint
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(
                [*COMMAND, "serve", "--port", str(self.port), *args],
                cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited with {self.proc.returncode}:\n{self.log.read_text()}")
            if not self.port:
                for line in self.log.read_text(errors="replace").splitlines():
                    if '"server.listening"' in line:
                        self.port = int(json.loads(line)["url"].rsplit(":", 1)[1])
            if self.port:
                try:
                    if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"server not ready in {STARTUP_TIMEOUT_S}s:\n{self.log.read_text()}")

    def kill(self) -> None:
        """kill -9: no cleanup, no graceful shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> int | None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()
        return None if self.proc is None else self.proc.returncode

    def token(self, name: str, *scopes: str) -> str:
        """A new token with ``scopes``, recorded straight in the metastore."""
        token = new_token()
        self.catalog.store.create_token(name, hash_token(token), [Scope.parse(s) for s in scopes])
        return token

    def close(self) -> None:
        self.stop()
        if self._catalog is not None:
            self._catalog.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server on SQLite with a table ``ns.events`` and an ``admin:*`` token at ``.admin``."""
    tmp = tmp_path_factory.mktemp("api")
    srv = Server(tmp / "warehouse", f"sqlite:///{tmp / 'warehouse' / '_metastore.sqlite'}", tmp)
    make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("admin", "admin:*")
    srv.start()
    yield srv
    srv.close()


def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    tmp = tmp_path_factory.mktemp("api-pg")
    url = fresh_metastore_url("postgresql", tmp)
    srv = Server(tmp / "warehouse", url, tmp)
    make_table(srv.catalog, "ns.events")
    srv.admin = srv.token("admin", "admin:*")
    srv.start()
    yield srv
    srv.close()
    drop_scratch_schema(url)


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def committed_counts(srv: Server, table: str = "ns.events") -> tuple[float, float]:
    """The chunks and rows ``/metrics`` counts as committed into ``table``, as one scrape (a new
    connection: under ``--workers``, whichever worker answers) says."""
    text = httpx.get(f"{srv.url}/metrics", headers=auth(srv.admin), timeout=30).text
    found = [
        re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.M)
        for name, labels in (
            ("streampart_http_chunks_total", f'outcome="committed",table="{table}"'),
            ("streampart_http_rows_committed_total", f'table="{table}"'),
        )
    ]
    return (float(found[0][1]) if found[0] else 0.0, float(found[1][1]) if found[1] else 0.0)


class LossyProxy:
    """A TCP proxy to the server that loses the answer to the next ``drop`` matching requests.

    The request reaches the server and is carried out; the proxy then closes the client's
    connection instead of passing the answer on: the client sees a lost response. ``rewrite``:
    ``(old, new)`` bytes replaced in what the client sends (a server of an older version, say).
    """

    def __init__(self, upstream_port: int, match: bytes, rewrite: tuple[bytes, bytes] | None = None) -> None:
        self.upstream_port, self.match, self.rewrite = upstream_port, match, rewrite
        self.drop = 0
        self.dropped = 0
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._closing = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closing:
            try:
                client, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        dropping = False
        try:
            while True:
                ready, _, _ = select.select([client, upstream], [], [], 30)
                if not ready:
                    return
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    with self._lock:
                        if self.match in data and self.drop > 0:
                            self.drop -= 1
                            dropping = True
                    if self.rewrite is not None:
                        data = data.replace(*self.rewrite)
                    upstream.sendall(data)
                if upstream in ready:
                    data = upstream.recv(65536)
                    if not data:
                        return
                    if dropping:  # the server answered: lose the answer
                        with self._lock:
                            self.dropped += 1
                        return
                    client.sendall(data)
        except OSError:
            return
        finally:
            client.close()
            upstream.close()

    def close(self) -> None:
        self._closing = True
        self._sock.close()

"""A real S3 server for the tests: moto's standalone server (``moto_server``) on a free loopback port,
behind a proxy that can make the store fail on purpose.

moto speaks the S3 HTTP API, conditional writes included: a second PUT with ``If-None-Match: *``
of a key is refused with 412 (``tests/metastore/test_object_store.py`` checks it does), which is
what put-if-absent rests on. The proxy (:class:`FaultProxy`) forwards every request unchanged
unless a test arms a fault for requests matching a method and a key pattern:

- ``"503"``: answer 503 Slow Down without forwarding (the store is overloaded);
- ``"drop-before"``: close the connection without forwarding (a connection dropped on the way);
- ``"drop-after"``: forward, let the store act on it, then close the connection without
  answering (the request landed but its answer was lost: the case that doubles a commit if a
  retry is taken for a new attempt);
- ``"stall"``: hold the request for ``seconds`` before forwarding (a timeout).

Processes the tests start reach the store through the proxy's URL (``AWS_ENDPOINT_URL``) too.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ACCESS_KEY = "streampart-test"
SECRET_KEY = "streampart-test-secret"
REGION = "us-east-1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Fault:
    method: str
    pattern: re.Pattern[str]
    kind: str
    times: int
    seconds: float = 0.0
    hits: int = 0


class FaultProxy:
    """An HTTP proxy in front of the store, in a thread of the test process."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.faults: list[Fault] = []
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arm(self, method: str, pattern: str, kind: str, times: int = 1, seconds: float = 0.0) -> Fault:
        """Make the next ``times`` requests of ``method`` whose path matches ``pattern`` fail as ``kind``."""
        fault = Fault(method, re.compile(pattern), kind, times, seconds)
        with self.lock:
            self.faults.append(fault)
        return fault

    def clear(self) -> None:
        with self.lock:
            self.faults.clear()

    def _fault_for(self, method: str, path: str) -> Fault | None:
        with self.lock:
            self.requests.append((method, path))
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and fault.pattern.search(path):
                    fault.times -= 1
                    fault.hits += 1
                    return fault
        return None

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        fault = self._fault_for(h.command, h.path)
        kind = fault.kind if fault else None
        if kind == "503":
            payload = b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
            h.send_response(503)
            h.send_header("Content-Length", str(len(payload)))
            h.end_headers()
            h.wfile.write(payload)
            return
        if kind == "drop-before":
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        if kind == "stall" and fault is not None:
            time.sleep(fault.seconds)
        conn = http.client.HTTPConnection("127.0.0.1", self.upstream_port, timeout=60)
        headers = {k: v for k, v in h.headers.items() if k.lower() != "connection"}
        conn.request(h.command, h.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if kind == "drop-after":
            h.close_connection = True
            with contextlib.suppress(OSError):
                h.connection.shutdown(socket.SHUT_RDWR)
            return
        h.send_response(resp.status)
        for key, value in resp.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                h.send_header(key, value)
        # a HEAD's answer has no body but tells the object's length
        told = resp.getheader("Content-Length") if h.command == "HEAD" else None
        h.send_header("Content-Length", told or str(len(data)))
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class S3Server:
    """moto's S3 server in its own process group, and the fault proxy in front of it."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.proxy = FaultProxy(self.port)

    def start(self) -> S3Server:
        binary = Path(sys.executable).with_name("moto_server")
        log = open(self.log_dir / "moto.log", "wb")  # noqa: SIM115 - the process writes it
        self.process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    log_file = self.log_dir / "moto.log"
                    raise RuntimeError(f"moto_server did not start: see {log_file}") from None
                time.sleep(0.1)
        return self

    @property
    def endpoint(self) -> str:
        """The URL clients use: the proxy's."""
        return self.proxy.url

    @property
    def direct_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """The standard AWS variables that point a process at this server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": REGION,
        }

    def boto_credentials(self) -> dict[str, str]:
        """boto3's client arguments for this server's credentials and region."""
        return {"aws_access_key_id": ACCESS_KEY, "aws_secret_access_key": SECRET_KEY, "region_name": REGION}

    def create_bucket(self, name: str | None = None) -> str:
        """A new empty bucket; returns its name."""
        name = name or f"t-{uuid.uuid4().hex[:20]}"
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        conn.request("PUT", f"/{name}", headers={"Content-Length": "0"})
        resp = conn.getresponse()
        resp.read()
        conn.close()
        if resp.status != 200:
            raise RuntimeError(f"creating bucket {name}: HTTP {resp.status}")
        return name

    def stop(self) -> None:
        self.proxy.stop()
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)

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

The proxy is a process of its own (a test reading a bucket through delta-rs holds the GIL while
it waits for the store, so a proxy thread in the test process would never answer it); the tests,
and the processes they start, reach the store through its URL (``AWS_ENDPOINT_URL``).
"""

from __future__ import annotations

import contextlib
import http.client
import json
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
class _Armed:
    method: str
    pattern: re.Pattern[str]
    kind: str
    times: int
    seconds: float = 0.0
    hits: int = 0


class _ProxyServer:
    """The proxy itself, run in its own process (``python -m tests.s3server PORT UPSTREAM``): a test
    process that reads a bucket through delta-rs holds the GIL while it waits for the store, so a
    proxy thread in it would not answer. Controlled over HTTP at ``/__proxy/…``."""

    def __init__(self, port: int, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.faults: dict[int, _Armed] = {}
        self.lock = threading.Lock()
        self.requests: list[tuple[str, str]] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # headers and body go out in two writes: without TCP_NODELAY each answer waits for
            # the client's delayed ACK (40 ms), which made a Delta load through the proxy 25× slower
            disable_nagle_algorithm = True

            def log_message(self, format: str, *args: object) -> None:
                pass

            def _any(self) -> None:
                if self.path.startswith("/__proxy/"):
                    proxy.control(self)
                else:
                    proxy.handle(self)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _any

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True

    def control(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = json.loads(h.rfile.read(length) or b"{}") if length else {}
        with self.lock:
            if h.path == "/__proxy/arm":
                fid = len(self.faults) + 1
                self.faults[fid] = _Armed(
                    body["method"], re.compile(body["pattern"]), body["kind"], body["times"], body["seconds"]
                )
                answer: object = {"id": fid}
            elif h.path == "/__proxy/clear":
                self.faults.clear()
                answer = {}
            elif h.path.startswith("/__proxy/hits/"):
                fault = self.faults.get(int(h.path.rsplit("/", 1)[1]))
                answer = {"hits": fault.hits if fault else 0}
            else:  # /__proxy/requests
                answer = {"requests": self.requests}
        _answer(h, 200, json.dumps(answer).encode())

    def _fault_for(self, method: str, path: str) -> _Armed | None:
        with self.lock:
            self.requests.append((method, path))
            for fault in self.faults.values():
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
            _answer(
                h, 503, b"<Error><Code>SlowDown</Code><Message>Reduce your request rate.</Message></Error>"
            )
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


def _answer(h: BaseHTTPRequestHandler, status: int, payload: bytes) -> None:
    """An answer of the proxy's own (not the store's), and the connection closed after it."""
    h.send_response(status)
    h.send_header("Content-Length", str(len(payload)))
    h.send_header("Connection", "close")
    h.close_connection = True
    h.end_headers()
    h.wfile.write(payload)


class Fault:
    """A fault armed in the proxy; :attr:`hits` asks it how many requests it has failed so far."""

    def __init__(self, proxy: FaultProxy, fid: int) -> None:
        self._proxy, self._id = proxy, fid

    @property
    def hits(self) -> int:
        return int(str(self._proxy.call(f"hits/{self._id}")["hits"]))


class FaultProxy:
    """The fault proxy in front of the store (its own process), as the tests steer it."""

    def __init__(self, upstream_port: int, log_dir: Path) -> None:
        self.port = free_port()
        log = open(log_dir / "proxy.log", "wb")  # noqa: SIM115 - the process writes it
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.s3server", str(self.port), str(upstream_port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=Path(__file__).resolve().parent.parent,
        )
        _wait_for_port(self.port, self.process, log_dir / "proxy.log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def call(self, what: str, body: dict[str, object] | None = None) -> dict[str, object]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        payload = json.dumps(body or {}).encode()
        conn.request("POST", f"/__proxy/{what}", body=payload, headers={"Content-Length": str(len(payload))})
        answer = json.loads(conn.getresponse().read())
        conn.close()
        return dict(answer)

    def arm(self, method: str, pattern: str, kind: str, times: int = 1, seconds: float = 0.0) -> Fault:
        """Make the next ``times`` requests of ``method`` whose path matches ``pattern`` fail as ``kind``."""
        body = {"method": method, "pattern": pattern, "kind": kind, "times": times, "seconds": seconds}
        return Fault(self, int(str(self.call("arm", body)["id"])))

    def clear(self) -> None:
        self.call("clear")

    @property
    def requests(self) -> list[tuple[str, str]]:
        found = self.call("requests")["requests"]
        assert isinstance(found, list)
        return [(str(method), str(path)) for method, path in found]

    def stop(self) -> None:
        _stop(self.process)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"a test server did not start: see {log}") from None
            time.sleep(0.1)


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


class S3Server:
    """moto's S3 server in its own process group, and the fault proxy in front of it."""

    def __init__(self, log_dir: Path, checks_credentials: bool = False) -> None:
        """``checks_credentials``: the server refuses requests whose credentials are not an IAM user's
        (moto's IAM authentication: the first three requests, which make that user, pass)."""
        self.log_dir = log_dir
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.proxy: FaultProxy
        self.checks_credentials = checks_credentials
        self.access_key, self.secret_key = ACCESS_KEY, SECRET_KEY

    def start(self) -> S3Server:
        binary = Path(sys.executable).with_name("moto_server")
        log = open(self.log_dir / "moto.log", "wb")  # noqa: SIM115 - the process writes it
        env = {**os.environ, "INITIAL_NO_AUTH_ACTION_COUNT": "3"} if self.checks_credentials else None
        self.process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=env,
        )
        _wait_for_port(self.port, self.process, self.log_dir / "moto.log")
        self.proxy = FaultProxy(self.port, self.log_dir)
        if self.checks_credentials:
            self._make_user()
        return self

    def _make_user(self) -> None:
        import boto3

        iam = boto3.client("iam", endpoint_url=self.direct_endpoint, **self.boto_credentials())
        iam.create_user(UserName="streampart")
        key = iam.create_access_key(UserName="streampart")["AccessKey"]
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="streampart", PolicyName="all", PolicyDocument=json.dumps(policy))
        self.access_key, self.secret_key = key["AccessKeyId"], key["SecretAccessKey"]

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
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": REGION,
        }

    def boto_credentials(self) -> dict[str, str]:
        """boto3's client arguments for this server's credentials and region."""
        return {
            "aws_access_key_id": self.access_key,
            "aws_secret_access_key": self.secret_key,
            "region_name": REGION,
        }

    def create_bucket(self, name: str | None = None) -> str:
        """A new empty bucket; returns its name."""
        import boto3

        name = name or f"t-{uuid.uuid4().hex[:20]}"
        boto3.client("s3", endpoint_url=self.direct_endpoint, **self.boto_credentials()).create_bucket(
            Bucket=name
        )
        return name

    def stop(self) -> None:
        self.proxy.stop()
        if self.process is not None:
            _stop(self.process)


if __name__ == "__main__":
    _ProxyServer(int(sys.argv[1]), int(sys.argv[2])).server.serve_forever()

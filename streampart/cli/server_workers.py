"""``streampart serve --workers N``: N server processes on one port, and their supervisor.

One Python process serves requests on one core at a time (its interpreter lock): past that, a
busy server's requests queue. With ``--workers N`` the command binds the port once and starts N
worker processes (``spawn``: fresh interpreters, nothing inherited but its socket and the
settings), each a whole server (:func:`streampart.cli.server_app.run_server`): its own catalog and
metastore connections, its own commit groups (a table's commits in flight in one worker land
together; across workers Delta's optimistic concurrency orders the groups, as across servers),
its own token and table caches (each entry expires on its TTL, as on separate servers; a request
that fails on a stale one looks it up again). Each worker listens on a socket of its own on the
port (``SO_REUSEPORT``, bound by ``streampart/cli/server.py``): the kernel spreads new connections
over them, so keep-alive clients connecting at once are not all taken by the first worker awake. A
worker restarted takes over its predecessor's socket, and the connections waiting on it.

``/metrics`` stays whole: the workers count into Prometheus' multiprocess files
(``PROMETHEUS_MULTIPROC_DIR``, a fresh directory of the supervisor's unless set), and whichever
worker answers a scrape adds up every worker's counters and histograms
(:meth:`ingest.api.metrics.ApiMetrics.exposition`). The series computed at scrape time from the
metastore (namespaces, federation) are the answering worker's reading, as on any one server.

The supervisor restarts a worker that dies (one that exits by itself within :data:`_SETTLE_S` of
starting cannot start, and would not on a restart either: it stops them all instead, exit 1), and
on SIGTERM or SIGINT stops every worker gracefully (SIGTERM: each finishes its requests in
flight) and exits 0.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streampart.config import Settings

log = logging.getLogger("streampart.api")

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# Why 10 s: a worker that cannot open its catalog or serve dies within a second or two of
# starting, every time; one that served for a while and died may be restarted.
_SETTLE_S = 10.0
# Why 30 s: uvicorn gives requests in flight 20 s (timeout_graceful_shutdown) before it stops.
_STOP_S = 30.0


def supervise(settings: Settings, socks: list[socket.socket], insecure_no_auth: bool) -> int:
    """Run a worker on each of ``socks`` (one per worker) until SIGTERM/SIGINT; the exit status."""
    metrics_dir, ours = _metrics_dir()
    from prometheus_client.multiprocess import mark_process_dead  # (after the directory is set)

    context = multiprocessing.get_context("spawn")
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: stopping.append(signum))

    def start(sock: socket.socket) -> tuple[BaseProcess, float]:
        p = context.Process(target=_worker, args=(settings, sock, insecure_no_auth), daemon=False)
        p.start()
        log.info("worker %s started", p.pid, extra={"event": "server.worker_started", "pid": p.pid})
        return p, time.monotonic()

    workers = [start(sock) for sock in socks]
    status = 0
    try:
        while not stopping:
            time.sleep(0.2)
            for i, (p, started) in enumerate(workers):
                if p.is_alive():
                    continue
                if p.pid is not None:  # its live gauges go; its counters stay (they were counted)
                    mark_process_dead(p.pid, str(metrics_dir))
                # exited by itself right after it started (not killed): it cannot start, every time
                if time.monotonic() - started < _SETTLE_S and (p.exitcode or 0) >= 0:
                    log.error(
                        "worker %s exited with %s right after it started: stopping the server",
                        p.pid, p.exitcode, extra={"event": "server.worker_failed", "pid": p.pid},
                    )  # fmt: skip
                    stopping.append(0)
                    status = 1
                    break
                log.warning(
                    "worker %s exited with %s: starting another", p.pid, p.exitcode,
                    extra={"event": "server.worker_died", "pid": p.pid},
                )  # fmt: skip
                workers[i] = start(socks[i])
    finally:
        _stop_all([p for p, _ in workers])
        for sock in socks:
            sock.close()
        if ours:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return status


def _worker(settings: Settings, sock: socket.socket, insecure_no_auth: bool) -> None:
    """One worker process: a whole server on its inherited socket."""
    from metastore.logs import configure_logging
    from streampart.cli.context import catalog_of
    from streampart.cli.server_app import run_server

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor stops it (SIGTERM), once
    configure_logging(settings.server.log_format, settings.server.log_level)
    run_server(settings, catalog_of(settings), sock, insecure_no_auth)


def _metrics_dir() -> tuple[Path, bool]:
    """The multiprocess metrics directory (emptied), and whether it is the supervisor's own (removed
    at the end). Set in the environment before any worker starts: they read it when they import
    prometheus_client."""
    given = os.environ.get(MULTIPROC_ENV)
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        for f in path.glob("*.db"):  # a previous run's counts are not this server's
            f.unlink()
        return path, False
    path = Path(tempfile.mkdtemp(prefix="streampart-metrics-"))
    os.environ[MULTIPROC_ENV] = str(path)
    return path, True


def _stop_all(workers: list[BaseProcess]) -> None:
    for p in workers:
        if p.is_alive() and p.pid is not None:
            os.kill(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + _STOP_S
    for p in workers:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            log.warning(
                "worker %s did not stop in time: killed", p.pid, extra={"event": "server.worker_killed"}
            )
            p.kill()
            p.join(5)

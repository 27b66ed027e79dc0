"""The roll daemons of a federation: one :class:`~scheduler.daemon.RollDaemon` per metastore it may write.

``streampart scheduler run`` rolls the tables of every metastore of the federation (issue 12,
part 5). Rolls are fenced by a leadership lease *in the metastore that holds the rolled table*
(a roll's begin and claim check the lease's epoch in that database's own transaction), so each
metastore gets a daemon of its own, bound to it (``catalog.on(name)``), holding its own lease
there:

- the primary, and every registered metastore whose access type allows writes; a read-only one
  is skipped, and one with a whitelist rolls only the tables of the namespaces it may write
  (:func:`metastore.federation.may_write`, asked at every sync);
- a dead metastore stops only its own daemon's rolls: its lease cannot be renewed or taken,
  so that daemon stops leading and its roll jobs go, while the others carry on; when the
  metastore answers again, its daemon takes the lease again at its next heartbeat and resumes
  (the roll protocol resumes a roll interrupted at any step);
- :class:`FederationDaemons` follows the registry, re-reading it every router refresh interval:
  it starts a daemon for a metastore that was added (or became writable), stops the daemon of
  one that was removed (or became read-only, or moved to another URL, which gets a new one),
  without restarting the process.

**One APScheduler per daemon**, not one shared: each daemon keeps its own worker pools, so a
dead metastore's jobs (each waiting out a connect timeout before its circuit breaker opens) can
occupy only its own workers and its own heartbeat thread, never another metastore's; and each
daemon's start, stop, leadership and shutdown grace stay exactly those of a lone daemon, which
its tests cover. The cost is a few idle threads per metastore (pools start threads on demand).

Metrics: one ``/metrics`` endpoint for the process, serving each daemon's series with a
``metastore`` label, plus :class:`~metastore.health.FederationCollector` (metastore up, call
latency, route-table version).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from ingest.config import ChunkConfig
from metastore.catalog import Catalog
from metastore.errors import StreampartError, UserInputError
from metastore.federation import AccessType, may_write
from metastore.health import FederationCollector
from metastore.logs import event
from metastore.models import PRIMARY, Table
from scheduler.config import RollConfig, SchedulerConfig
from scheduler.daemon import RollDaemon
from scheduler.roll import owner_id
from scheduler.spark_compaction import SparkFactory

log = logging.getLogger("streampart.scheduler")


@dataclass
class FederationDaemons:
    """The roll daemons of one process, one per writable metastore of ``catalog``'s federation."""

    catalog: Catalog  # bound to the primary; each daemon gets it bound to its metastore
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    roll_config: RollConfig = field(default_factory=RollConfig)
    chunk_config: ChunkConfig = field(default_factory=ChunkConfig)
    owner: str = field(default_factory=owner_id)
    spark: SparkFactory | None = None

    def __post_init__(self) -> None:
        self.daemons: dict[str, RollDaemon] = {}
        self._urls: dict[str, str] = {}  # the URL each daemon's metastore was opened at
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._stop_requested = threading.Event()
        self._follower: threading.Thread | None = None
        self.registry = CollectorRegistry()
        self.registry.register(_DaemonsCollector(self))
        self.registry.register(FederationCollector(self.catalog.router))
        self.metrics_port: int | None = None
        self._metrics_server: Any = None
        self.stuck = False

    # -- life ------------------------------------------------------------------------------
    def start(self) -> None:
        """Serve metrics, start a daemon per writable metastore, and follow the registry (returns at once)."""
        if self.config.metrics:
            host, port = self.config.metrics_host, self.config.metrics_port
            try:
                self._metrics_server, _thread = start_http_server(port, host, registry=self.registry)
            except OSError as exc:
                raise UserInputError(
                    f"cannot serve metrics on {host}:{port} ({exc.strerror or exc}); choose another "
                    "port with --metrics-port or scheduler.metrics_port, or --no-metrics"
                ) from None
            self.metrics_port = int(self._metrics_server.server_port)
        self.follow()
        self._follower = threading.Thread(target=self._follow_loop, name="federation-daemons", daemon=True)
        self._follower.start()

    def run_forever(self) -> int:
        """Run until SIGTERM or SIGINT, then stop every daemon cleanly; the exit status (0)."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: self.request_stop(signal.Signals(signum).name))
        self.start()
        while not self._stop_requested.wait(0.5):
            pass
        self.stop()
        if self.stuck:  # a roll thread is still inside a step: leave it like a crash would
            logging.shutdown()
            sys.stderr.flush()
            os._exit(0)
        return 0

    def request_stop(self, why: str = "requested") -> None:
        event(log, logging.INFO, "daemon.stopping", "shutdown requested", reason=why)
        self._stop_requested.set()

    def stop(self, grace: timedelta | None = None) -> None:
        """Stop following the registry and stop every daemon (all at once: one grace period in all)."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._follower is not None:
            self._follower.join(timeout=30)
        with self._lock:
            daemons = list(self.daemons.values())
            self.daemons.clear()
        self._stop_all(daemons, grace)
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()

    def _stop_all(self, daemons: list[RollDaemon], grace: timedelta | None = None) -> None:
        threads = [threading.Thread(target=d.stop, args=(grace,), daemon=True) for d in daemons]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.stuck = self.stuck or any(d.stuck for d in daemons)

    # -- following the registry ------------------------------------------------------------
    def _follow_loop(self) -> None:
        while not self._stopping.wait(self.catalog.router.refresh_s):
            try:
                self.follow()
            except Exception as exc:  # the follower must outlive any one failure
                event(log, logging.WARNING, "federation.follow_failed", f"{exc}", error=str(exc))

    def wanted(self) -> dict[str, str]:
        """``{metastore: URL}`` of every metastore this process should roll in now."""
        router = self.catalog.router
        out: dict[str, str] = {}
        for name in router.names():
            entry = router.entry(name)
            if entry.access is not AccessType.READ_ONLY:
                out[name] = entry.url
        return out

    def follow(self) -> None:
        """Start the daemons of metastores added (or made writable); stop those of removed ones."""
        if self._stopping.is_set():
            return
        try:
            wanted = self.wanted()
        except StreampartError as exc:  # the primary cannot be read: keep what runs
            event(
                log, logging.WARNING, "federation.registry_unreadable", "keeping the daemons", error=str(exc)
            )
            return
        with self._lock:
            gone = [n for n in self.daemons if n not in wanted or self._urls[n] != wanted[n]]
            stopped = [self.daemons.pop(n) for n in gone]
            for n in gone:
                self._urls.pop(n)
        for daemon in stopped:
            event(
                log,
                logging.INFO,
                "federation.daemon_stopped",
                "the metastore left the federation's writable set",
                metastore=daemon.metastore,
            )
        if stopped:
            self._stop_all(stopped)
        for name, url in wanted.items():
            if name not in self.daemons and not self._stopping.is_set():
                self._start(name, url)

    def _start(self, name: str, url: str) -> None:
        try:
            bound = self.catalog.on(name)  # opens it (and migrates it on first use)
        except StreampartError as exc:  # down now: tried again at the next refresh
            event(
                log,
                logging.WARNING,
                "federation.daemon_pending",
                "cannot open the metastore yet; its daemon starts once it answers",
                metastore=name,
                error=str(exc),
            )
            return
        daemon = RollDaemon(
            bound,
            self.config,
            self.roll_config,
            self.chunk_config,
            owner=self.owner,
            spark=self.spark,
            may_roll=None if name == PRIMARY else self._may_roll(name),
            serve_metrics=False,
        )
        daemon.metrics_port = self.metrics_port
        with self._lock:
            if self._stopping.is_set():
                return
            self.daemons[name], self._urls[name] = daemon, url
        daemon.start()
        event(log, logging.INFO, "federation.daemon_started", "rolling in metastore", metastore=name)

    def _may_roll(self, name: str) -> Any:
        router = self.catalog.router

        def may_roll(table: Table) -> bool:
            return may_write(router.entry(name), table.name.namespace).allowed

        return may_roll

    @property
    def leaders(self) -> dict[str, bool]:
        """``{metastore: leads there}`` for every running daemon."""
        with self._lock:
            return {name: d.is_leader for name, d in self.daemons.items()}


class _DaemonsCollector(Collector):
    """Every daemon's series, each labelled with its daemon's metastore (one family per name)."""

    def __init__(self, daemons: FederationDaemons) -> None:
        self.daemons = daemons

    def collect(self) -> Iterator[Metric]:
        with self.daemons._lock:
            running = list(self.daemons.daemons.items())
        families: dict[str, Metric] = {}
        for name, daemon in running:
            for family in daemon.metrics.registry.collect():
                merged = families.get(family.name)
                if merged is None:
                    merged = families[family.name] = Metric(family.name, family.documentation, family.type)
                for sample in family.samples:
                    merged.samples.append(sample._replace(labels={**sample.labels, "metastore": name}))
        yield from families.values()

"""Prometheus metrics of the HTTP API server, served at ``/metrics``, and the middleware that counts requests.

Each app has its own registry (tests run several apps in one process); under ``streampart serve
--workers`` a scrape adds up every worker's counts (``streampart/cli/server_workers.py``).
:class:`MetricsMiddleware` counts and times every request by its route template; the routes count
chunks, rows and bytes; :class:`NamespaceCollector` reports each namespace's capacity when
Prometheus scrapes, and :class:`~metastore.health.FederationCollector` each metastore's health and
call latency.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from metastore import clock
from metastore.catalog import Catalog
from metastore.delta.files import LiveFile, live_files
from metastore.errors import StreampartError
from metastore.health import FederationCollector
from metastore.store import Metastore

disable_created_metrics()

log = logging.getLogger("streampart.api")

# Why 30 s: a namespace's linked bytes are read from the Delta log of every table its links point
# at (a log replay each), too slow to do on every scrape by every Prometheus server polling us;
# capacity moves slowly and Prometheus scrapes every 15-60 s, so figures up to 30 s old suffice.
NAMESPACE_USAGE_TTL_S = 30.0

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ApiMetrics:
    """The API's series, in a registry of their own."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self.registry = r = CollectorRegistry()
        # what a scrape shows: this registry, or under ``serve --workers`` (Prometheus' multiprocess
        # mode) every worker's counters and histograms added up, beside the scrape-time series
        self.exposition = r
        scraped: list[Collector] = []
        if catalog is not None:
            scraped = [NamespaceCollector(catalog), FederationCollector(catalog.router)]
            for c in scraped:  # namespaces' capacity; metastore up, call latency, route version
                r.register(c)
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self.exposition = CollectorRegistry()
            MultiProcessCollector(self.exposition)
            for c in scraped:
                self.exposition.register(c)
        self.requests = Counter(
            "streampart_http_requests",
            "HTTP requests by method, route template and status code.",
            ["method", "route", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "streampart_http_request_duration_seconds",
            "Time from request to response, by method and route template.",
            ["method", "route"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.chunks = Counter(
            "streampart_http_chunks", "Chunks by what became of them (opened, committed, aborted).",
            ["table", "outcome"], registry=r,
        )  # fmt: skip
        self.rows = Counter(
            "streampart_http_rows_committed", "Rows committed through the API.", ["table"], registry=r
        )
        self.upload_bytes = Counter(
            "streampart_http_upload_bytes", "Bytes received in chunk uploads and event batches.", registry=r
        )
        self.catalog_loads = Counter(
            "streampart_catalog_loads",
            "Tables loaded by other engines, by protocol (iceberg: a table's metadata; delta-sharing: a "
            "query's file list).",
            ["protocol"],
            registry=r,
        )
        self.catalog_load_seconds = Histogram(
            "streampart_catalog_load_duration_seconds",
            "Time to answer a table's load (pin a snapshot, write the Iceberg metadata or list the files).",
            ["protocol"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.catalog_files = Counter(
            "streampart_catalog_file_reads",
            "Reads of table files handed out by the catalogs: Iceberg requests signed, Delta Sharing "
            "files served or presigned.",
            ["protocol"],
            registry=r,
        )
        self.commit_seconds = Histogram(
            "streampart_http_commit_duration_seconds",
            "Duration of chunk commits (the Delta transaction and the metastore's bookkeeping).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )


@dataclass(frozen=True)
class NamespaceFigures:
    namespace: str
    owned_bytes: int
    linked_bytes: int
    quota_bytes: int | None


class NamespaceCollector(Collector):
    """Per namespace, computed at scrape time (at most every :data:`NAMESPACE_USAGE_TTL_S`):

    - ``streampart_namespace_owned_bytes``: the bytes its quota counts, from the metastore's ledger
      (``committed_bytes``: standard partitions as their rolls recorded them, plus what chunks
      committed into open partitions, plus chunks committing now). Cheap SQL, and exactly the figure
      a commit is checked against, so ``owned / quota`` is the headroom a writer meets. It may differ
      from ``GET /v1/namespaces/{ns}/usage``'s ``owned.bytes`` (the Delta logs' live files) by what
      a roll's compaction changed or a commit has in flight.
    - ``streampart_namespace_linked_bytes``: what its links show now, each at the newest version of
      its source (the usage call's ``linked.bytes``); a dangling or unreadable link adds nothing.
    - ``streampart_namespace_quota_bytes``: its quota; **absent** for a namespace without one (no
      made-up -1: ``owned / quota`` then yields nothing rather than a negative ratio, and alerts on
      it never fire for unlimited namespaces).

    If the metastore cannot be read, the namespace series are left out of that scrape (absent
    means unknown; stale figures are never served as fresh) and the error is logged.
    """

    def __init__(self, catalog: Catalog, ttl_seconds: float = NAMESPACE_USAGE_TTL_S) -> None:
        self.catalog, self.ttl = catalog, ttl_seconds
        self._lock = threading.Lock()
        self._figures: list[NamespaceFigures] = []
        self._until = 0.0

    def describe(self) -> Iterator[GaugeMetricFamily]:
        return self._families([])  # names only: registering must not read the metastore

    def collect(self) -> Iterator[GaugeMetricFamily]:
        return self._families(self.figures())

    def figures(self) -> list[NamespaceFigures]:
        """The cached figures, computed afresh once they are older than the TTL (one scrape at a time)."""
        with self._lock:
            if time.monotonic() >= self._until:
                try:
                    self._figures = namespace_figures(self.catalog)
                except StreampartError as exc:
                    log.warning("namespace metrics: cannot read the metastore: %s", exc)
                    return []
                self._until = time.monotonic() + self.ttl
            return self._figures

    @staticmethod
    def _families(figures: list[NamespaceFigures]) -> Iterator[GaugeMetricFamily]:
        owned = GaugeMetricFamily(
            "streampart_namespace_owned_bytes",
            "Bytes the namespace's quota counts (the metastore's ledger, commits in flight included).",
            labels=["namespace"],
        )
        linked = GaugeMetricFamily(
            "streampart_namespace_linked_bytes",
            "Bytes the namespace's links show now (read from their sources' Delta logs; never charged).",
            labels=["namespace"],
        )
        quota = GaugeMetricFamily(
            "streampart_namespace_quota_bytes",
            "The namespace's quota in bytes (no series: no quota).",
            labels=["namespace"],
        )
        for f in figures:
            owned.add_metric([f.namespace], f.owned_bytes)
            linked.add_metric([f.namespace], f.linked_bytes)
            if f.quota_bytes is not None:
                quota.add_metric([f.namespace], f.quota_bytes)
        yield from (owned, linked, quota)


def namespace_figures(catalog: Catalog) -> list[NamespaceFigures]:
    """Every namespace's figures now, from every metastore (one that does not answer is left out)."""
    found = catalog.router.fan_out(lambda store: _figures(catalog, store))
    if found.missing:
        log.warning("namespace metrics: %s", found.warning())
    return found.merged()


def _figures(catalog: Catalog, store: Metastore) -> list[NamespaceFigures]:
    """The figures of the namespaces living in ``store``; each link's source is read once."""
    now = clock.now()
    links = store.list_links()
    snapshots: dict[str, list[LiveFile]] = {}
    out = []
    for ns in store.list_namespaces():
        if catalog.router.metastore_of(ns.name) != store.name:
            continue
        linked = 0
        for link in (x for x in links if x.name.namespace == ns.name):
            try:
                source = catalog.links.source(link)
                if source.uid not in snapshots:
                    snapshots[source.uid] = live_files(catalog.load(source))
            except StreampartError as exc:  # a dangling or damaged source stops only its own figure
                log.debug("namespace metrics: link %s: %s", link.name, exc)
                continue
            linked += sum(f.size for f in link.filter(snapshots[source.uid], source, now))
        out.append(NamespaceFigures(ns.name, store.committed_bytes(ns.name), linked, ns.quota_bytes))
    return out


class MetricsMiddleware:
    """Counts requests and times them by route template (a pure ASGI middleware: bodies stream)."""

    def __init__(self, app: Any, metrics: ApiMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        t0 = time.perf_counter()

        async def send_status(message: Any) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            # every label from a closed set: a client's made-up method or path adds no series
            method = scope["method"] if scope["method"] in _METHODS else "other"
            route = getattr(scope.get("route"), "path", "unmatched")
            code = str(status) if 100 <= status <= 599 else "other"
            self.metrics.requests.labels(method, route, code).inc()
            self.metrics.request_seconds.labels(method, route).observe(time.perf_counter() - t0)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})

"""Prometheus metrics of the HTTP API server, served at ``/metrics``, and the middleware that counts requests.

Each app has its own registry (tests run several apps in one process). :class:`MetricsMiddleware`
counts and times every request by its route template; the routes count chunks, rows and bytes.
"""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

disable_created_metrics()

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ApiMetrics:
    """The API's series, in a registry of their own."""

    def __init__(self) -> None:
        self.registry = r = CollectorRegistry()
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
        self.commit_seconds = Histogram(
            "streampart_http_commit_duration_seconds",
            "Duration of chunk commits (the Delta transaction and the metastore's bookkeeping).",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )


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

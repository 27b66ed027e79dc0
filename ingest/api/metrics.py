"""Prometheus metrics of the HTTP API server, served at ``/metrics``.

Each app has its own registry (tests run several apps in one process).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics

disable_created_metrics()

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class ApiMetrics:
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

"""The HTTP chunk API: HIVE-4196's webhcat/webhdfs protocol for producers that are not Spark jobs.

A producer opens a chunk (``POST /v1/tables/{namespace}/{table}/chunks``), uploads its data
(``PUT /v1/chunks/{id}/data``, streamed to the table's staging area) and commits it (``POST
/v1/chunks/{id}/commit``) or aborts it (``DELETE /v1/chunks/{id}``); or posts a batch of events
as one chunk (``POST …/events``, Flume's JSON format or a plain array of records). Namespaces,
their usage and their links are read and managed under ``/v1/namespaces``. Every call is
idempotent: opening with an ``idempotency_key`` returns the chunk opened under it before, and a
commit retried after a lost response answers with the commit that landed.

This module only assembles the app: the routes are in :mod:`ingest.api.routes` (one router per
resource), what they share in :class:`~ingest.api.state.ApiState` (``app.state.api``), the
bodies in :mod:`ingest.api.models`, the error answers in :mod:`ingest.api.handlers`, the request
metrics in :mod:`ingest.api.metrics` and the docs page in :mod:`ingest.api.docs`.
"""

from __future__ import annotations

import importlib.metadata
from typing import Any

from fastapi import FastAPI
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from ingest.api.auth import Authenticator
from ingest.api.config import ServerConfig
from ingest.api.docs import serve_docs
from ingest.api.handlers import install_error_handlers
from ingest.api.lookups import TableLookups
from ingest.api.metrics import ApiMetrics, MetricsMiddleware
from ingest.api.routes import (
    chunks,
    deletes,
    events,
    federation,
    iceberg,
    ingest_jobs,
    namespaces,
    ops,
    sharing,
    tables,
)
from ingest.api.state import ApiState
from ingest.config import ChunkConfig
from ingest.login_guard import LoginGuard
from metastore.catalog import Catalog

__all__ = ["API_DESCRIPTION", "ApiState", "create_app", "openapi_description"]

API_DESCRIPTION = """\
Streaming ingestion into time-partitioned Delta tables (HIVE-4196's streaming partitions).

**The chunk protocol**: open a chunk, upload its data (JSON lines, CSV or Parquet), commit it.
A committed chunk is visible to queries at once and wholly; an uncommitted one never. Every
call may be retried: open with an `idempotency_key`, and a retried commit answers with the
commit that landed. **Events**: `POST …/events` commits a batch (Flume's JSON events or a JSON
array of records) as one chunk. **Auth**: `Authorization: Bearer <token>` (`streampart token
create`), scopes `read`, `write`, `admin` per namespace; the federation's administration
(`/v1/admin/federation/…`) needs `admin:*`; steering a topic of a Kafka ingest job
(`/v1/admin/ingest/jobs/…`) needs `admin` on every namespace the job's routes can send that topic to
(`admin:*` when that is open-ended). Errors are JSON `{"error", "message", "field", "line"}` naming
the field at fault.
"""


def create_app(
    catalog: Catalog,
    server: ServerConfig | None = None,
    chunk: ChunkConfig | None = None,
    *,
    auth: bool = True,
) -> FastAPI:
    """The API over ``catalog``. ``auth=False`` only for ``streampart serve --insecure-no-auth``."""
    server = server or ServerConfig()
    chunk = chunk or ChunkConfig()
    st = ApiState(
        catalog,
        server,
        chunk,
        auth,
        Authenticator(
            catalog.primary, server.auth_cache_ttl.total_seconds(), LoginGuard.of(server, "HTTP API")
        ),
        ApiMetrics(catalog),
        TableLookups(catalog, server.table_cache_ttl.total_seconds(), chunk.ttl),
    )
    app = _bare_app()
    if server.docs:
        serve_docs(app)
    app.state.api = st
    app.add_middleware(MetricsMiddleware, metrics=st.metrics)
    # Outermost, so every route and the status page see the client it finds. Nothing trusted (the
    # default) leaves a request's address its peer's whatever it sends; the server that runs the app
    # must not believe forwarded headers itself (streampart.cli.server_app: proxy_headers=False).
    app.add_middleware(ProxyHeadersMiddleware, trusted_hosts=[str(n) for n in server.trusted_proxies])
    install_error_handlers(app)
    _include_routes(app)
    return app


def _bare_app() -> FastAPI:
    return FastAPI(
        title="streampart",
        version=importlib.metadata.version("streampart"),
        description=API_DESCRIPTION,
        docs_url=None,  # served by ingest.api.docs from the package's own copy of Swagger UI, not a CDN
        redoc_url=None,
    )


def _include_routes(app: FastAPI) -> None:
    for routes in (
        chunks,
        events,
        tables,
        deletes,
        namespaces,
        federation,
        ingest_jobs,
        ops,
        iceberg,
        sharing,
    ):
        app.include_router(routes.router)


def openapi_description() -> dict[str, Any]:
    """The API's OpenAPI description, without a catalog (what ``/openapi.json`` serves)."""
    app = _bare_app()
    _include_routes(app)
    return app.openapi()

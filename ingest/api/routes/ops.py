"""Operations: ``/healthz`` for load balancers and ``/metrics`` for Prometheus.

Neither needs a token, except ``/metrics`` when ``server.metrics_require_token`` is set (its
series name tables and count rows).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.concurrency import run_in_threadpool

from ingest.api.deps import Credentials, State, authenticate, client_address
from ingest.api.models import Health
from metastore.errors import StreampartError

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health, responses={503: {"model": Health}})
def healthz(st: State) -> Any:
    """200 while the metastore answers; no token needed."""
    try:
        st.catalog.store.ping()
    except StreampartError as exc:
        return JSONResponse({"status": "unavailable", "auth": st.auth, "message": str(exc)}, 503)
    return {"status": "ok", "auth": st.auth}


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request, st: State, credentials: Credentials) -> Response:
    """Prometheus text format: table names and row counts, so behind any valid token when
    ``server.metrics_require_token`` is set (Prometheus sends one with ``authorization``)."""
    if st.server.metrics_require_token:
        await authenticate(st, credentials, client_address(request))
    text = await run_in_threadpool(generate_latest, st.metrics.exposition)
    return Response(text, media_type=CONTENT_TYPE_LATEST)

"""The Iceberg REST catalog (read side of the Apache Iceberg REST catalog OpenAPI spec) under ``/iceberg``.

An Iceberg client is given ``http(s)://HOST:PORT/iceberg`` as its catalog URI and a streampart token,
as its bearer ``token`` or through the OAuth2 ``client_credentials`` flow (``credential`` =
``NAME:TOKEN``: the token is the client secret). Namespaces are streampart's namespaces; a namespace's
tables are its tables and its links. Loading a table pins its newest Delta version and answers
Iceberg metadata listing that version's own Parquet files (:mod:`metastore.iceberg`); keyed tables
show their resolved rows (:mod:`ingest.api.catalog_views`).

Files are read by the client itself: a local warehouse through the file system it already has, a
bucket through *remote signing* — the client asks ``/iceberg/v1/aws/s3/sign`` to sign each S3 request,
and the server signs only reads (GET, HEAD) of objects under a table or link the token may read,
answering a presigned URL that expires after ``server.presign_ttl``. The server's own S3 credentials
never leave it.

Read only: every write of the spec (create, commit, drop, rename) is refused (405), as is anything
the spec has and this server does not serve (views, metrics reports, plans).
"""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

from fastapi import APIRouter, Request, Response
from starlette.concurrency import run_in_threadpool

from ingest.api.auth import Principal
from ingest.api.bucket_signing import sign_read
from ingest.api.catalog_views import iceberg_view, pinned, readable_in, readable_namespaces
from ingest.api.deps import Reader, State
from ingest.api.errors import ApiError
from ingest.api.state import ApiState, require
from metastore import storage
from metastore.errors import NotFoundError
from metastore.iceberg import iceberg_table
from metastore.models import Permission, check_identifier
from metastore.namespaces import check_namespace

PREFIX = "/iceberg"
router = APIRouter(prefix=PREFIX + "/v1", tags=["iceberg"])

ENDPOINTS = [
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
]


def _namespace(st: ApiState, who: Principal, namespace: str) -> str:
    """The namespace of a path (one level: streampart's namespaces do not nest), once ``who`` may read
    it: 403 before 404, so a token without the scope learns nothing of it."""
    if "\x1f" in namespace:
        raise ApiError(
            404, "NoSuchNamespaceException", f"namespace {namespace!r} does not exist", "namespace"
        )
    check_namespace(namespace)
    require(who, Permission.READ, namespace)
    if st.catalog.namespaces.find(namespace) is None:
        raise ApiError(404, "NoSuchNamespaceException", f"namespace {namespace} does not exist", "namespace")
    return namespace


@router.get("/config", summary="The catalog's settings and the endpoints it serves")
def config() -> dict[str, Any]:
    """No token needed (clients read it before they log in); it says nothing of any table."""
    return {"defaults": {}, "overrides": {}, "endpoints": ENDPOINTS}


@router.post("/oauth/tokens", summary="OAuth2 client credentials: a streampart token as the client secret")
async def oauth_tokens(request: Request, st: State) -> Response:
    """``grant_type=client_credentials`` with ``client_secret`` a streampart token (``client_id``: any,
    its name by convention): answers the token itself as the access token, valid as long as it is
    (``expires_in``: until it expires, or an hour, after which a client asks again)."""
    from ingest.api.deps import client_address

    form = urllib.parse.parse_qs((await request.body()).decode("utf-8", "replace"))
    grant = (form.get("grant_type") or [""])[0]
    if grant != "client_credentials":
        return _oauth_error(400, "unsupported_grant_type", "only grant_type=client_credentials is served")
    secret = (form.get("client_secret") or [""])[0]
    token = await st.authenticator.login(secret, client_address(request), fresh=True) if secret else None
    if token is None:
        return _oauth_error(401, "invalid_client", "the client secret is not a live streampart token")
    from metastore import clock

    expires = 3600
    if token.expires_at is not None:
        expires = max(1, min(expires, int((token.expires_at - clock.now()).total_seconds())))
    body = {
        "access_token": secret,
        "token_type": "bearer",
        "expires_in": expires,
        "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
    }
    return _json(body, 200)


def _oauth_error(status: int, code: str, description: str) -> Response:
    return _json({"error": code, "error_description": description}, status)


def _json(body: dict[str, Any], status: int) -> Response:
    import json

    return Response(
        json.dumps(body), status, media_type="application/json", headers={"Cache-Control": "no-store"}
    )


@router.get("/namespaces", summary="The namespaces the token may read")
def list_namespaces(who: Reader, st: State, parent: str | None = None) -> dict[str, Any]:
    if parent:  # streampart's namespaces do not nest: none has children
        return {"namespaces": []}
    return {"namespaces": [[n] for n in readable_namespaces(st, who)]}


@router.get("/namespaces/{namespace}", summary="A namespace and its properties")
def load_namespace(namespace: str, who: Reader, st: State) -> dict[str, Any]:
    ns = st.catalog.namespaces.get(_namespace(st, who, namespace))
    properties = {"isolated": str(ns.isolated).lower()}
    if ns.description:
        properties["comment"] = ns.description
    return {"namespace": [ns.name], "properties": properties}


@router.head("/namespaces/{namespace}", summary="Whether a namespace exists", status_code=204)
def namespace_exists(namespace: str, who: Reader, st: State) -> Response:
    _namespace(st, who, namespace)
    return Response(status_code=204)


@router.get("/namespaces/{namespace}/tables", summary="A namespace's tables and links")
def list_tables(namespace: str, who: Reader, st: State) -> dict[str, Any]:
    ns = _namespace(st, who, namespace)
    return {"identifiers": [{"namespace": [ns], "name": r.name.table} for r in readable_in(st, who, ns)]}


@router.get("/namespaces/{namespace}/views", summary="Views (streampart has none)")
def list_views(namespace: str, who: Reader, st: State) -> dict[str, Any]:
    _namespace(st, who, namespace)
    return {"identifiers": []}


@router.get("/namespaces/{namespace}/tables/{table}", summary="Load a table at its newest version")
async def load_table(namespace: str, table: str, request: Request, who: Reader, st: State) -> dict[str, Any]:
    """The table's Iceberg metadata at its newest Delta version (the Iceberg snapshot id is the
    version), and the settings its files are read with."""
    t0 = time.perf_counter()
    body = await run_in_threadpool(_load, st, who, namespace, table, str(request.base_url))
    st.metrics.catalog_loads.labels("iceberg").inc()
    st.metrics.catalog_load_seconds.labels("iceberg").observe(time.perf_counter() - t0)
    return body


def _load(st: ApiState, who: Principal, namespace: str, table: str, base_url: str) -> dict[str, Any]:
    resolved = _resolved(st, who, namespace, table)
    loaded = iceberg_table(iceberg_view(resolved), pinned(st, resolved))
    config: dict[str, str] = {}
    if storage.is_remote(resolved.table.location):
        config = _bucket_config(base_url)
    return {"metadata-location": loaded.location, "metadata": loaded.json(), "config": config}


def _resolved(st: ApiState, who: Principal, namespace: str, table: str) -> Any:
    ns = _namespace(st, who, namespace)
    check_identifier(table, "table")
    try:
        return st.resolved_of(who, ns, table)
    except NotFoundError as exc:
        raise ApiError(404, "NoSuchTableException", str(exc), "table") from None


@router.head("/namespaces/{namespace}/tables/{table}", summary="Whether a table exists", status_code=204)
def table_exists(namespace: str, table: str, who: Reader, st: State) -> Response:
    _resolved(st, who, namespace, table)
    return Response(status_code=204)


def _bucket_config(base_url: str) -> dict[str, str]:
    """What a client reads a bucket's files with: pyiceberg's fsspec file IO, each request signed by
    this catalog (Iceberg's remote signing), at the bucket's endpoint."""
    options = storage.current()
    out = {
        "py-io-impl": "pyiceberg.io.fsspec.FsspecFileIO",
        "s3.signer": "S3V4RestSigner",
        "s3.signer.uri": base_url.rstrip("/") + PREFIX,
        "s3.remote-signing-enabled": "true",
        "s3.region": options.signing_region,
    }
    if options.endpoint:
        out["s3.endpoint"] = options.endpoint
    return out


@router.post("/aws/s3/sign", summary="Sign one S3 read of a table's files (remote signing)")
def sign(body: dict[str, Any], who: Reader, st: State) -> dict[str, Any]:
    """``{"method", "region", "uri", "headers"}`` of an S3 request the client is about to send: a
    GET or HEAD of an object under a table or link the token may read is answered with a presigned
    URL for it; anything else is refused (403)."""
    url = sign_read(st, who, str(body.get("method", "")), str(body.get("uri", "")))
    st.metrics.catalog_files.labels("iceberg").inc()
    return {"uri": url, "headers": {}}

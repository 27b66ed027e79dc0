"""The HTTP chunk API: HIVE-4196's webhcat/webhdfs protocol for producers that are not Spark jobs.

A producer opens a chunk (``POST /v1/tables/{namespace}/{table}/chunks``), uploads its data
(``PUT /v1/chunks/{id}/data``, streamed to the table's staging area) and commits it (``POST
/v1/chunks/{id}/commit``) or aborts it (``DELETE /v1/chunks/{id}``); or posts a batch of events
as one chunk (``POST …/events``, Flume's JSON format or a plain array of records). Every call is
idempotent: opening with an ``idempotency_key`` returns the chunk opened under it before, and a
commit retried after a lost response answers with the commit that landed.

Route code runs the chunk protocol of :mod:`ingest.chunks` in worker threads (it blocks on the
metastore and Delta); only the streaming of request bodies runs on the event loop.
"""

import dataclasses
import hashlib
import importlib.metadata
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from ingest import digests
from ingest.api.auth import Authenticator, Principal
from ingest.api.config import ServerConfig
from ingest.api.errors import ApiError, BodyError, blame, error_response
from ingest.api.metrics import ApiMetrics
from ingest.api.uploads import events_to_records, spool_path, stage_events, stage_upload
from ingest.chunks import ChunkWriter, CommitResult
from ingest.config import ChunkConfig
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.errors import StreampartError
from metastore.models import Chunk, ChunkState, Permission, Table, TableName, check_identifier, iso
from metastore.warehouse import storage_errors

API_DESCRIPTION = """\
Streaming ingestion into time-partitioned Delta tables (HIVE-4196's streaming partitions).

**The chunk protocol**: open a chunk, upload its data (JSON lines, CSV or Parquet), commit it.
A committed chunk is visible to queries at once and wholly; an uncommitted one never. Every
call may be retried: open with an `idempotency_key`, and a retried commit answers with the
commit that landed. **Events**: `POST …/events` commits a batch (Flume's JSON events or a JSON
array of records) as one chunk. **Auth**: `Authorization: Bearer <token>` (`streampart token
create`), scopes `read`, `write`, `admin` per namespace. Errors are JSON
`{"error", "message", "field", "line"}` naming the field at fault.
"""

# Media types of chunk uploads; ``?format=`` overrides the Content-Type (e.g. octet-stream).
UPLOAD_MEDIA_TYPES = {
    "application/x-ndjson": Format.JSONL,
    "application/jsonl": Format.JSONL,
    "application/json-lines": Format.JSONL,
    "application/jsonlines": Format.JSONL,
    "application/x-jsonlines": Format.JSONL,
    "text/csv": Format.CSV,
    "application/vnd.apache.parquet": Format.PARQUET,
    "application/x-parquet": Format.PARQUET,
    "application/parquet": Format.PARQUET,
}
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_BINARY = {"schema": {"type": "string", "format": "binary"}}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "description": "The chunk's records: JSON lines, CSV with a header, or a Parquet file. Streamed.",
        "content": {
            "application/x-ndjson": _BINARY,
            "text/csv": _BINARY,
            "application/vnd.apache.parquet": _BINARY,
            "application/octet-stream": _BINARY,
        },
    }
}
_FLUME_EVENT = {
    "type": "object",
    "properties": {
        "headers": {"type": "object", "additionalProperties": {"type": "string"}},
        "body": {"type": "string", "description": "The record as JSON text"},
    },
    "required": ["body"],
}
_EVENTS_BODY = {
    "requestBody": {
        "required": True,
        "description": 'Flume\'s HTTP JSON events (`[{"headers": {…}, "body": "<record JSON>"}]`) '
        "or a JSON array of records.",
        "content": {
            "application/json": {
                "schema": {"type": "array", "items": {"anyOf": [_FLUME_EVENT, {"type": "object"}]}}
            }
        },
    }
}
# Idempotency keys are stored in the metastore (512 characters) and must be printable text.
_KEY_PATTERN = r"^[^\x00-\x1f\x7f]+$"


# -- response bodies (for the OpenAPI description) --------------------------------------------
class ErrorBody(BaseModel):
    error: str = Field(description="A stable code: not_found, malformed_body, chunk_state, …")
    message: str = Field(description="What is wrong, for a person.")
    field: str | None = Field(None, description="The field at fault: a path parameter, body, a header, …")
    line: int | None = Field(None, description="The line (row, event) of the body at fault, 1-based.")


class OpenChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    idempotency_key: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        pattern=_KEY_PATTERN,
        description="Opening again with the same key returns the same chunk (whatever its state).",
    )


class CommitChunk(BaseModel):
    model_config = ConfigDict(extra="forbid")

    content_sha256: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="sha256:<hex> of the data the caller uploaded. If the chunk holds other data (the "
        "idempotency key was reused, or another caller uploaded under it), the commit answers 409 "
        "token_conflict instead of committing or answering with the other data's commit.",
    )


class ChunkInfo(BaseModel):
    id: str
    table: str
    state: ChunkState
    idempotency_key: str | None
    created_at: str
    expires_at: str
    rows: int = Field(description="Rows staged (uploaded) so far.")
    bytes: int
    dead_letter_rows: int
    version: int | None = Field(description="Delta version of the commit, once committed.")
    partitions: list[str]
    error: str | None
    ignored_fields: dict[str, int] = Field(
        default_factory=dict,
        description="Upload: fields of the records the table has no column for, and how many records had "
        "each. They are not written.",
    )


class CommitInfo(BaseModel):
    """The shape of ``streampart write --json``."""

    chunk: str
    table: str
    partitions: list[str]
    rows: int
    version: int | None
    dead_letter_rows: int
    late_rows: int
    token: str | None = Field(description="The chunk's idempotency key.")
    ignored_fields: dict[str, int] = Field(
        default_factory=dict, description="Fields of the events' records that the table has no column for."
    )


class PartitionInfo(BaseModel):
    value: str
    state: str
    chunks: int
    rows: int
    bytes: int
    files: int
    location: str


class TableInfo(BaseModel):
    """The shape of ``streampart table describe --json``."""

    model_config = ConfigDict(populate_by_name=True)

    table: str
    kind: str
    mode: str
    roll_every: str
    lateness: str
    late_data: str
    max_future: str = Field(description="Event-time tables: rows further ahead of the clock are bad records.")
    max_age: str | None = Field(description="Event-time tables: rows of periods that ended before are late.")
    dead_letter: bool
    time_column: str
    partition_column: str
    schema_: str = Field(alias="schema")
    location: str
    cluster: str
    version: int
    partitions: list[PartitionInfo]


class Health(BaseModel):
    status: str
    auth: bool


def _errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {c: {"model": ErrorBody} for c in codes}


# -- the app ----------------------------------------------------------------------------------
@dataclass
class ApiState:
    catalog: Catalog
    server: ServerConfig
    chunk: ChunkConfig
    auth: bool
    authenticator: Authenticator
    metrics: ApiMetrics


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
        Authenticator(catalog.store, server.auth_cache_ttl.total_seconds()),
        ApiMetrics(),
    )
    app = FastAPI(
        title="streampart",
        version=importlib.metadata.version("streampart"),
        description=API_DESCRIPTION,
        docs_url=None,  # served below from the package's own copy of Swagger UI, not a CDN
        redoc_url=None,
    )
    if server.docs:
        _serve_docs(app)
    app.state.api = st
    app.add_middleware(_MetricsMiddleware, metrics=st.metrics)
    _install_error_handlers(app)
    bearer = HTTPBearer(auto_error=False, description="A token made by `streampart token create`.")

    # -- auth ---------------------------------------------------------------------------------
    def principal(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Principal:
        if not st.auth:
            return Principal(None, insecure=True)
        challenge = {"WWW-Authenticate": "Bearer"}
        if credentials is None:
            raise ApiError(
                401, "unauthorized", "no bearer token: send 'Authorization: Bearer <token>'",
                "Authorization", challenge,
            )  # fmt: skip
        token = st.authenticator.authenticate(credentials.credentials)
        if token is None:
            raise ApiError(401, "unauthorized", "unknown or revoked token", "Authorization", challenge)
        return Principal(token)

    Caller = Annotated[Principal, Depends(principal)]

    def require(who: Principal, permission: Permission, namespace: str) -> None:
        if not who.allows(permission, namespace):
            raise ApiError(
                403,
                "forbidden",
                f"token {who.name!r} lacks the scope {permission.value}:{namespace} (or admin:{namespace})",
                "Authorization",
            )

    def table_of(who: Principal, permission: Permission, namespace: str, table: str) -> Table:
        with blame("namespace"):
            check_identifier(namespace, "namespace")
        with blame("table"):
            check_identifier(table, "table")
        require(who, permission, namespace)
        with blame("table"):
            return st.catalog.table(TableName(namespace=namespace, table=table))

    def chunk_of(who: Principal, permission: Permission, chunk_id: str) -> tuple[Chunk, Table]:
        if "/" in chunk_id or "\\" in chunk_id or ".." in chunk_id:
            raise ApiError(
                400, "bad_request", f"chunk id {chunk_id!r} contains a path separator or '..'", "id"
            )
        if not _UUID.match(chunk_id):
            raise ApiError(404, "not_found", f"chunk {chunk_id!r} does not exist", "id")
        with blame("id"):
            chunk = st.catalog.store.get_chunk(chunk_id)
            table = st.catalog.store.get_table_by_id(chunk.table_id)
        require(who, permission, table.name.namespace)
        return chunk, st.catalog.table(table.name)

    def writer(table: Table) -> ChunkWriter:
        return ChunkWriter(st.catalog, table, st.chunk)

    def commit(w: ChunkWriter, chunk_id: str, digest: str | None = None) -> CommitResult:
        t0 = time.perf_counter()
        with blame("id"):
            result = w.commit(chunk_id, content_digest=digest)
        st.metrics.commit_seconds.observe(time.perf_counter() - t0)
        st.metrics.chunks.labels(str(w.table.name), "committed").inc()
        st.metrics.rows.labels(str(w.table.name)).inc(result.rows)
        return result

    # -- chunks -------------------------------------------------------------------------------
    @app.post(
        "/v1/tables/{namespace}/{table}/chunks",
        status_code=201,
        response_model=ChunkInfo,
        responses={
            200: {"model": ChunkInfo, "description": "The chunk opened before under that key"},
            **_errors(400, 401, 403, 404, 422),
        },
        tags=["chunks"],
        summary="Open a chunk",
    )
    def open_chunk(
        namespace: str,
        table: str,
        who: Caller,
        response: Response,
        body: Annotated[OpenChunk | None, Body()] = None,
    ) -> ChunkInfo:
        """Reserve a chunk of the table's streaming partition; upload to it, then commit or abort it."""
        t = table_of(who, Permission.WRITE, namespace, table)
        key = body.idempotency_key if body else None
        w = writer(t)
        existing = st.catalog.store.find_chunk_by_token(t.id, key) if key is not None else None
        chunk = existing or w.reserve(key)
        if existing is not None:
            response.status_code = 200
        else:
            st.metrics.chunks.labels(str(t.name), "opened").inc()
        return _chunk_info(chunk, t)

    @app.get(
        "/v1/chunks/{id}",
        response_model=ChunkInfo,
        responses=_errors(400, 401, 403, 404),
        tags=["chunks"],
        summary="A chunk's state",
    )
    def get_chunk(id: str, who: Caller) -> ChunkInfo:
        """Read or write scope on the chunk's namespace."""
        try:
            chunk, t = chunk_of(who, Permission.WRITE, id)
        except ApiError as exc:
            if exc.status != 403:
                raise
            chunk, t = chunk_of(who, Permission.READ, id)
        return _chunk_info(chunk, t)

    @app.put(
        "/v1/chunks/{id}/data",
        response_model=ChunkInfo,
        responses=_errors(400, 401, 403, 404, 409, 413, 415),
        openapi_extra=_UPLOAD_BODY,
        tags=["chunks"],
        summary="Upload a chunk's data",
    )
    async def upload(
        id: str,
        request: Request,
        who: Caller,
        format: Annotated[
            Format | None, Query(description="jsonl, csv or parquet [default: from the Content-Type]")
        ] = None,
    ) -> ChunkInfo:
        """Stage the chunk's records, replacing an earlier upload's; the body is streamed to storage.

        A malformed record fails the upload with its line (row) and nothing is staged, unless the
        table has a dead-letter table; the chunk stays open for another upload.
        """
        chunk, t = await run_in_threadpool(chunk_of, who, Permission.WRITE, id)
        fmt = format or _upload_format(request.headers.get("content-type"))
        limit = st.server.max_upload_bytes
        _check_length(request, limit)
        if chunk.state is not ChunkState.RESERVED:
            raise ApiError(
                409,
                "chunk_state",
                f"chunk {chunk.id} is {chunk.state.value}: only an open chunk takes data",
                "id",
            )
        w = writer(t)
        spool = spool_path(w, chunk)
        try:
            size = 0
            digest = hashlib.sha256()
            with storage_errors(f"receiving an upload of chunk {chunk.id}"):
                spool.parent.mkdir(parents=True, exist_ok=True)
                with spool.open("wb") as f:
                    async for piece in _body(request):
                        size += len(piece)
                        if size > limit:
                            raise _too_large(limit)
                        f.write(piece)
                        digest.update(piece)
            st.metrics.upload_bytes.inc(size)
            staged, ignored = await run_in_threadpool(
                stage_upload, w, chunk, spool, fmt, st.server.upload_batch_rows, f"http:chunk:{chunk.id}",
                digests.PREFIX + digest.hexdigest(),
            )  # fmt: skip
        finally:
            spool.unlink(missing_ok=True)
        return _chunk_info(staged, t).model_copy(update={"ignored_fields": ignored})

    @app.post(
        "/v1/chunks/{id}/commit",
        response_model=CommitInfo,
        responses=_errors(400, 401, 403, 404, 409, 422, 503),
        tags=["chunks"],
        summary="Commit a chunk",
    )
    def commit_chunk(
        id: str, who: Caller, body: Annotated[CommitChunk | None, Body()] = None
    ) -> dict[str, Any]:
        """Make the chunk visible, wholly, in one Delta transaction. Retrying answers with the same
        commit (exactly once). 409 ``chunk_busy`` with Retry-After: another attempt is committing it;
        409 ``token_conflict``: the chunk holds other data than ``content_sha256``.
        """
        _chunk, t = chunk_of(who, Permission.WRITE, id)
        return commit(writer(t), id, body.content_sha256 if body else None).to_json()

    @app.delete(
        "/v1/chunks/{id}",
        response_model=ChunkInfo,
        responses=_errors(400, 401, 403, 404, 409),
        tags=["chunks"],
        summary="Abort a chunk",
    )
    def abort_chunk(id: str, who: Caller) -> ChunkInfo:
        """Give the chunk up: it never becomes visible and its files go. Aborting again is harmless."""
        _chunk, t = chunk_of(who, Permission.WRITE, id)
        with blame("id"):
            chunk = writer(t).abort(id)
        st.metrics.chunks.labels(str(t.name), "aborted").inc()
        return _chunk_info(chunk, t)

    # -- events -------------------------------------------------------------------------------
    @app.post(
        "/v1/tables/{namespace}/{table}/events",
        response_model=CommitInfo,
        responses=_errors(400, 401, 403, 404, 409, 413, 415, 422, 503),
        openapi_extra=_EVENTS_BODY,
        tags=["events"],
        summary="Commit a batch of events as one chunk",
    )
    async def post_events(
        namespace: str,
        table: str,
        request: Request,
        who: Caller,
        format: Annotated[
            str | None,
            Query(pattern="^(flume|records)$", description="flume or records [default: recognised]"),
        ] = None,
        idempotency_key: Annotated[
            str | None,
            Header(
                min_length=1,
                max_length=512,
                pattern=_KEY_PATTERN,
                description="A batch posted again with the same key lands once.",
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Flume's HTTP JSON events (each ``body`` a record as JSON text), or a JSON array of records."""
        media = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if media != "application/json":
            raise ApiError(415, "unsupported_media_type", f"events must be application/json, not {media!r}",
                           "Content-Type")  # fmt: skip
        limit = st.server.max_events_bytes
        _check_length(request, limit)
        t = await run_in_threadpool(table_of, who, Permission.WRITE, namespace, table)
        data = bytearray()
        async for piece in _body(request):
            data += piece
            if len(data) > limit:
                raise _too_large(limit)
        st.metrics.upload_bytes.inc(len(data))

        def run() -> CommitResult:
            try:
                body = json.loads(bytes(data))
            except UnicodeDecodeError as exc:
                raise BodyError(f"body is not UTF-8: byte {exc.start + 1}") from None
            except json.JSONDecodeError as exc:
                raise BodyError(
                    f"body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}", line=exc.lineno
                ) from None
            records, kind = events_to_records(body, format)
            w = writer(t)
            digest = digests.digest_bytes(bytes(data))
            chunk = w.reserve(idempotency_key)
            ignored: dict[str, int] = {}
            if chunk.state is ChunkState.RESERVED:
                try:
                    chunk, ignored = stage_events(w, chunk, records, f"http:events:{kind}", digest)
                except BodyError:
                    w.abort(chunk.id, reason="malformed events")
                    raise
            return dataclasses.replace(commit(w, chunk.id, digest), ignored_fields=ignored)

        return (await run_in_threadpool(run)).to_json()

    # -- tables -------------------------------------------------------------------------------
    @app.get(
        "/v1/tables",
        response_model=list[TableInfo],
        responses=_errors(401),
        tags=["tables"],
        summary="The tables the token may read",
    )
    def list_tables(who: Caller) -> list[dict[str, Any]]:
        """Every table of the namespaces the token has read (or admin) scope on, as ``describe --json``."""
        out = []
        for t in st.catalog.list_tables():
            if who.allows(Permission.READ, t.name.namespace):
                out.append(st.catalog.describe(st.catalog.table(t.name)))
        return out

    @app.get(
        "/v1/tables/{namespace}/{table}",
        response_model=TableInfo,
        responses=_errors(400, 401, 403, 404),
        tags=["tables"],
        summary="A table and its partitions",
    )
    def describe_table(namespace: str, table: str, who: Caller) -> dict[str, Any]:
        """The table and its partitions, as ``streampart table describe --json``."""
        return st.catalog.describe(table_of(who, Permission.READ, namespace, table))

    # -- operations ---------------------------------------------------------------------------
    @app.get("/healthz", response_model=Health, responses={503: {"model": Health}}, tags=["operations"])
    def healthz() -> Any:
        """200 while the metastore answers; no token needed."""
        try:
            st.catalog.store.ping()
        except StreampartError as exc:
            return JSONResponse({"status": "unavailable", "auth": st.auth, "message": str(exc)}, 503)
        return {"status": "ok", "auth": st.auth}

    @app.get("/metrics", include_in_schema=False)
    def metrics(credentials: HTTPAuthorizationCredentials | None = Security(bearer)) -> Response:
        """Prometheus text format: table names and row counts, so behind any valid token when
        ``server.metrics_require_token`` is set (Prometheus sends one with ``authorization``)."""
        if st.server.metrics_require_token:
            principal(credentials)
        return Response(generate_latest(st.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    return app


# -- helpers ----------------------------------------------------------------------------------
def _serve_docs(app: FastAPI) -> None:
    """Interactive docs at /docs with Swagger UI's files served from the swagger-ui-py package.

    Loading them from a CDN fails on a closed network and lets a third party run script in the
    page that holds the user's token.
    """
    import swagger_ui
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    app.mount("/docs/static", StaticFiles(directory=Path(swagger_ui.__file__).parent / "static"), name="docs")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title="streampart API",
            swagger_js_url="/docs/static/swagger-ui-bundle.js",
            swagger_css_url="/docs/static/swagger-ui.css",
            swagger_favicon_url="/docs/static/favicon-32x32.png",
        )


def _chunk_info(chunk: Chunk, table: Table) -> ChunkInfo:
    return ChunkInfo(
        id=chunk.id,
        table=str(table.name),
        state=chunk.state,
        idempotency_key=chunk.token,
        created_at=iso(chunk.created_at),
        expires_at=iso(chunk.expires_at),
        rows=chunk.rows,
        bytes=chunk.bytes,
        dead_letter_rows=chunk.dead_letter_rows,
        version=chunk.version,
        partitions=[iso(p) for p in chunk.partitions],
        error=chunk.error,
    )


def _upload_format(content_type: str | None) -> Format:
    media = (content_type or "").split(";")[0].strip().lower()
    fmt = UPLOAD_MEDIA_TYPES.get(media)
    if fmt is None:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {media or '(none)'!r} is not a chunk format: use application/x-ndjson, text/csv "
            "or application/vnd.apache.parquet (or ?format=jsonl|csv|parquet)",
            "Content-Type",
        )
    return fmt


def _too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"body is larger than the limit of {limit} bytes", "body")


def _check_length(request: Request, limit: int) -> None:
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise _too_large(limit)


async def _body(request: Request) -> Any:
    try:
        async for piece in request.stream():
            if piece:
                yield piece
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the client went away during the upload", "body") from None


class _MetricsMiddleware:
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


def _install_error_handlers(app: FastAPI) -> None:
    def respond(exc: BaseException) -> JSONResponse:
        status, body, headers = error_response(exc)
        return JSONResponse({k: v for k, v in body.items() if v is not None or k == "field"}, status, headers)

    async def on_error(_request: Request, exc: Exception) -> JSONResponse:
        return respond(exc)

    async def on_validation(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems = exc.errors()
        first = problems[0] if problems else {}
        loc = [str(x) for x in first.get("loc", ())]
        where, field = (loc[0], ".".join(loc[1:])) if len(loc) > 1 else ("request", ".".join(loc))
        if first.get("type") == "json_invalid":
            field = "body"
        message = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ())[1:]) or p.get('loc', ('body',))[0]}: {p.get('msg')}"
            for p in problems
        )
        return JSONResponse(
            {"error": "invalid_request", "message": f"invalid {where}: {message}", "field": field or where},
            422,
        )

    async def on_http(_request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(
            {
                "error": code,
                "message": str(exc.detail),
                "field": "path" if exc.status_code in (404, 405) else None,
            },
            exc.status_code,
            getattr(exc, "headers", None),
        )

    app.add_exception_handler(StreampartError, on_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_error)

"""The chunk protocol over HTTP: open a chunk, upload its data, commit it or abort it.

``POST /v1/tables/{namespace}/{table}/chunks`` reserves a chunk (the same ``idempotency_key``
returns the same chunk); ``PUT /v1/chunks/{id}/data`` streams its records to the table's staging
area and stages them; ``POST /v1/chunks/{id}/commit`` makes them visible in one Delta transaction
(a retry answers with the commit that landed); ``DELETE /v1/chunks/{id}`` gives the chunk up.
Routes run the protocol of :mod:`ingest.chunks` in worker threads; only the upload's body is
read on the event loop.
"""

from __future__ import annotations

import hashlib
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.concurrency import run_in_threadpool

from ingest import digests
from ingest.api import media
from ingest.api.bodies import body_pieces, check_length
from ingest.api.deps import Caller, State
from ingest.api.errors import ApiError, blame
from ingest.api.models import ChunkInfo, CommitChunk, CommitInfo, OpenChunk, error_responses
from ingest.api.uploads import spool_path, stage_upload
from ingest.formats import Format
from metastore.delta.errors import storage_errors
from metastore.models import Chunk, ChunkState, Permission, Table

router = APIRouter(tags=["chunks"])

_BINARY = {"schema": {"type": "string", "format": "binary"}}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "description": "The chunk's records: JSON lines, CSV with a header, or a Parquet file. Streamed.",
        "content": {
            media.JSONL: _BINARY,
            media.CSV: _BINARY,
            media.PARQUET: _BINARY,
            media.OCTET_STREAM: _BINARY,
        },
    }
}


@router.post(
    "/v1/tables/{namespace}/{table}/chunks",
    status_code=201,
    response_model=ChunkInfo,
    responses={
        200: {"model": ChunkInfo, "description": "The chunk opened before under that key"},
        **error_responses(400, 401, 403, 404, 409, 422),
    },
    summary="Open a chunk",
)
def open_chunk(
    namespace: str,
    table: str,
    who: Caller,
    st: State,
    response: Response,
    body: Annotated[OpenChunk | None, Body()] = None,
) -> ChunkInfo:
    """Reserve a chunk of the table's streaming partition; upload to it, then commit or abort it.
    A link is read-only: 409 ``read_only_link``; a write aimed at a cluster other than the table's
    primary: 409 ``secondary_cluster``."""
    t = st.table_of(who, Permission.WRITE, namespace, table)
    if body is not None and body.cluster is not None:
        with blame("cluster"):
            st.catalog.table(t.name, body.cluster)
    key = body.idempotency_key if body else None

    def open_in(t: Table) -> tuple[Table, Chunk, bool]:
        w = st.writer(t)
        return t, *w.store.reserve_or_find(t.id, key, w.config.ttl)

    t, chunk, existing = st.lookups.retrying(t, open_in)
    st.lookups.remember_chunk(chunk.id, t.name)
    if existing:
        response.status_code = 200
    else:
        st.metrics.chunks.labels(str(t.name), "opened").inc()
    return ChunkInfo.of(chunk, t)


@router.get(
    "/v1/chunks/{id}",
    response_model=ChunkInfo,
    responses=error_responses(400, 401, 403, 404),
    summary="A chunk's state",
)
def get_chunk(id: str, who: Caller, st: State) -> ChunkInfo:
    """Read or write scope on the chunk's namespace."""
    try:
        chunk, t = st.chunk_of(who, Permission.WRITE, id)
    except ApiError as exc:
        if exc.status != 403:
            raise
        chunk, t = st.chunk_of(who, Permission.READ, id)
    return ChunkInfo.of(chunk, t)


@router.put(
    "/v1/chunks/{id}/data",
    response_model=None,
    responses={
        200: {
            "description": "The chunk staged (ChunkInfo); with ``commit=true``, its commit (CommitInfo)",
            "content": {
                media.JSON: {
                    "schema": {
                        "anyOf": [
                            {"$ref": "#/components/schemas/ChunkInfo"},
                            {"$ref": "#/components/schemas/CommitInfo"},
                        ]
                    }
                }
            },
        },
        **error_responses(400, 401, 403, 404, 409, 413, 415, 422, 503),
    },
    openapi_extra=_UPLOAD_BODY,
    summary="Upload a chunk's data",
)
async def upload(
    id: str,
    request: Request,
    who: Caller,
    st: State,
    format: Annotated[
        Format | None, Query(description="jsonl, csv or parquet [default: from the Content-Type]")
    ] = None,
    commit: Annotated[
        bool,
        Query(description="Commit the chunk once staged, in this same request (answers as the commit)"),
    ] = False,
) -> dict[str, Any]:
    """Stage the chunk's records, replacing an earlier upload's; the body is streamed to storage.

    A malformed record fails the upload with its line (row) and nothing is staged, unless the
    table has a dead-letter table; the chunk stays open for another upload. ``commit=true``:
    then commit it (as ``POST /v1/chunks/{id}/commit`` with the upload's digest), one request
    instead of two; the answer is the commit's. A retry after a lost answer meets 409
    ``chunk_state`` (the chunk committed): ``POST …/commit`` answers with the commit that landed.
    """
    chunk, t = await run_in_threadpool(st.chunk_of, who, Permission.WRITE, id)
    fmt = format or _upload_format(request.headers.get("content-type"))
    limit = st.server.max_upload_bytes
    check_length(request, limit)
    if chunk.state is not ChunkState.RESERVED:
        raise ApiError(
            409,
            "chunk_state",
            f"chunk {chunk.id} is {chunk.state.value}: only an open chunk takes data",
            "id",
        )
    w = st.writer(t)
    spool = spool_path(w, chunk)
    try:
        size = 0
        digest = hashlib.sha256()
        with storage_errors(f"receiving an upload of chunk {chunk.id}"):
            spool.parent.mkdir(parents=True, exist_ok=True)
            with spool.open("wb") as f:
                async for piece in body_pieces(request, limit):
                    size += len(piece)
                    f.write(piece)
                    digest.update(piece)
        st.metrics.upload_bytes.inc(size)
        content = digests.PREFIX + digest.hexdigest()
        staged = await run_in_threadpool(
            stage_upload, w, chunk, spool, fmt, st.server.upload_batch_rows, f"http:chunk:{chunk.id}", content
        )
    finally:
        spool.unlink(missing_ok=True)
    if not commit:
        return ChunkInfo.of(staged.chunk, t).model_dump(mode="json") | staged.answer()
    done = await run_in_threadpool(st.commit, w, chunk.id, content, staged.chunk)
    return done.to_json() | staged.answer()


@router.post(
    "/v1/chunks/{id}/commit",
    response_model=CommitInfo,
    responses=error_responses(400, 401, 403, 404, 409, 413, 422, 503),
    summary="Commit a chunk",
)
def commit_chunk(
    id: str, who: Caller, st: State, body: Annotated[CommitChunk | None, Body()] = None
) -> dict[str, Any]:
    """Make the chunk visible, wholly, in one Delta transaction. Retrying answers with the same
    commit (exactly once). 409 ``chunk_busy`` with Retry-After: another attempt is committing it;
    409 ``idempotency_conflict``: the chunk holds other data than ``content_sha256``. 413
    ``quota_exceeded``: it would take its namespace past its quota; it was aborted (its files go).
    """
    t = st.table_of_chunk(who, Permission.WRITE, id)
    digest = body.content_sha256 if body else None
    return st.lookups.retrying(t, lambda t: st.commit(st.writer(t), id, digest)).to_json()


@router.delete(
    "/v1/chunks/{id}",
    response_model=ChunkInfo,
    responses=error_responses(400, 401, 403, 404, 409),
    summary="Abort a chunk",
)
def abort_chunk(id: str, who: Caller, st: State) -> ChunkInfo:
    """Give the chunk up: it never becomes visible and its files go. Aborting again is harmless."""
    t = st.table_of_chunk(who, Permission.WRITE, id)
    with blame("id"):
        chunk = st.lookups.retrying(t, lambda t: st.writer(t).abort(id))
    st.metrics.chunks.labels(str(t.name), "aborted").inc()
    return ChunkInfo.of(chunk, t)


def _upload_format(content_type: str | None) -> Format:
    """The format an upload's Content-Type names; 415 if none."""
    mt = media.media_type(content_type)
    fmt = media.UPLOAD_MEDIA_TYPES.get(mt)
    if fmt is None:
        raise ApiError(
            415,
            "unsupported_media_type",
            f"Content-Type {mt or '(none)'!r} is not a chunk format: use {media.JSONL}, {media.CSV} "
            f"or {media.PARQUET} (or ?format=jsonl|csv|parquet)",
            "Content-Type",
        )
    return Format(fmt)

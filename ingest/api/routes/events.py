"""Events over HTTP: ``POST /v1/tables/{namespace}/{table}/events`` commits a batch as one chunk.

The body is Flume's HTTP JSON events (``[{"headers": {…}, "body": "<record JSON>"}]``) or a
JSON array of records; it is read whole (it is parsed in memory, so ``server.max_events_bytes``
bounds it), then reserved, staged and committed as one chunk under the ``Idempotency-Key``
header, so a batch posted again lands once.
"""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.concurrency import run_in_threadpool

from ingest import digests
from ingest.api import media
from ingest.api.bodies import body_pieces, check_length
from ingest.api.deps import Caller, State
from ingest.api.errors import ApiError, BodyError
from ingest.api.models import KEY_PATTERN, CommitInfo, error_responses
from ingest.api.uploads import Staged, events_to_records, parse_json_body, stage_events
from ingest.chunks import ChunkWriter, CommitResult
from metastore.models import Chunk, ChunkState, Permission, Table

router = APIRouter(tags=["events"])

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
            media.JSON: {"schema": {"type": "array", "items": {"anyOf": [_FLUME_EVENT, {"type": "object"}]}}}
        },
    }
}


@router.post(
    "/v1/tables/{namespace}/{table}/events",
    response_model=CommitInfo,
    responses=error_responses(400, 401, 403, 404, 409, 413, 415, 422, 503),
    openapi_extra=_EVENTS_BODY,
    summary="Commit a batch of events as one chunk",
)
async def post_events(
    namespace: str,
    table: str,
    request: Request,
    who: Caller,
    st: State,
    format: Annotated[
        str | None,
        Query(pattern="^(flume|records)$", description="flume or records [default: recognised]"),
    ] = None,
    idempotency_key: Annotated[
        str | None,
        Header(
            min_length=1,
            max_length=512,
            pattern=KEY_PATTERN,
            description="A batch posted again with the same key lands once.",
        ),
    ] = None,
) -> dict[str, Any]:
    """Flume's HTTP JSON events (each ``body`` a record as JSON text), or a JSON array of records."""
    mt = media.media_type(request.headers.get("content-type"))
    if mt != media.JSON:
        raise ApiError(415, "unsupported_media_type", f"events must be {media.JSON}, not {mt!r}",
                       "Content-Type")  # fmt: skip
    limit = st.server.max_events_bytes
    check_length(request, limit)
    t = await run_in_threadpool(st.table_of, who, Permission.WRITE, namespace, table)
    data = bytearray()
    async for piece in body_pieces(request, limit):
        data += piece
    st.metrics.upload_bytes.inc(len(data))

    def run() -> CommitResult:
        body = parse_json_body(bytes(data))  # a 400 naming the fault, whatever the bytes
        records, kind = events_to_records(body, format)
        digest = digests.digest_bytes(bytes(data))

        def reserve_in(t: Table) -> tuple[ChunkWriter, Chunk]:
            w = st.writer(t)
            return w, w.reserve(idempotency_key)

        w, chunk = st.lookups.retrying(t, reserve_in)
        staged = Staged(chunk)
        if chunk.state is ChunkState.RESERVED:
            try:
                staged = stage_events(w, chunk, records, f"http:events:{kind}", digest)
            except BodyError:
                w.abort(chunk.id, reason="malformed events")
                raise
        committed = st.commit(w, chunk.id, digest)
        return dataclasses.replace(
            committed,
            ignored_fields=staged.ignored,
            rounded_values=staged.rounded,
            new_columns=staged.new_columns,
            refused_fields=staged.refused,
        )

    return (await run_in_threadpool(run)).to_json()

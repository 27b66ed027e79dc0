"""Reading request bodies as they stream in, within a size limit.

Uploads and events batches are never taken whole by the framework: :func:`body_pieces` yields
the pieces as they arrive and fails with 413 as soon as the body is past its limit (at once,
when the Content-Length says so), or with 400 when the client goes away mid-way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.requests import ClientDisconnect, Request

from ingest.api.errors import ApiError


def too_large(limit: int) -> ApiError:
    return ApiError(413, "too_large", f"body is larger than the limit of {limit} bytes", "body")


def check_length(request: Request, limit: int) -> None:
    """413 if the request's Content-Length is over ``limit``, before any of the body is read."""
    length = request.headers.get("content-length", "")
    if length.isdigit() and int(length) > limit:
        raise too_large(limit)


async def body_pieces(request: Request, limit: int) -> AsyncIterator[bytes]:
    """The request's body, piece by piece; 413 once more than ``limit`` bytes have come."""
    size = 0
    try:
        async for piece in request.stream():
            if piece:
                size += len(piece)
                if size > limit:
                    raise too_large(limit)
                yield piece
    except ClientDisconnect:
        raise ApiError(400, "client_disconnected", "the client went away during the upload", "body") from None

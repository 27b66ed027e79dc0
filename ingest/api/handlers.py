"""The exception handlers of the HTTP API: every error answers JSON ``{"error", "message", "field", "line"}``.

Except under the catalogs other engines speak to, whose clients expect their protocol's own error
shape: the Iceberg REST catalog's ``{"error": {"message", "type", "code"}}`` under ``/iceberg`` and
Delta Sharing's ``{"errorCode", "message"}`` under ``/delta-sharing`` (:func:`in_dialect`) — the
same status and message either way.

A :class:`~metastore.errors.StreampartError` (or any other exception) is answered as
:func:`ingest.api.errors.error_response` maps it; FastAPI's request validation errors become
422 ``invalid_request`` naming the first field at fault; Starlette's own 404 and 405 (no such
route or method) keep their status with a code of ours.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ingest.api.errors import error_response
from ingest.api.uploads import json_fault
from metastore.errors import StreampartError


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app``'s routes in the API's JSON error shape."""
    app.add_exception_handler(StreampartError, _on_error)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(Exception, _on_error)


# the Iceberg REST spec's error types, by status (a route may name a more precise one: NoSuchTable…)
_ICEBERG_TYPES = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NoSuchTableException",
    405: "NotAllowedException",
    406: "UnsupportedOperationException",
    409: "CommitFailedException",
    422: "BadRequestException",
    503: "ServiceUnavailableException",
}
# Delta Sharing's error codes, by status
_SHARING_CODES = {
    400: "INVALID_PARAMETER_VALUE",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "RESOURCE_DOES_NOT_EXIST",
    405: "METHOD_NOT_ALLOWED",
    422: "INVALID_PARAMETER_VALUE",
    503: "TEMPORARILY_UNAVAILABLE",
}


def in_dialect(
    request: Request, status: int, body: dict[str, Any], headers: dict[str, str] | None
) -> JSONResponse:
    """``body`` (the API's error shape) as the protocol of the path ``request`` asked for expects it."""
    path = request.url.path
    code, message = str(body.get("error") or ""), str(body.get("message") or "")
    if path.startswith("/iceberg/"):
        kind = code if code.endswith("Exception") else _ICEBERG_TYPES.get(status, "ServerError")
        return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers)
    if path.startswith("/delta-sharing/"):
        kind = code if code.isupper() else _SHARING_CODES.get(status, "INTERNAL_ERROR")
        return JSONResponse({"errorCode": kind, "message": message}, status, headers)
    return JSONResponse({k: v for k, v in body.items() if v is not None or k == "field"}, status, headers)


async def _on_error(request: Request, exc: Exception) -> JSONResponse:
    status, body, headers = error_response(exc)
    return in_dialect(request, status, body, headers)


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    problems = exc.errors()
    first = problems[0] if problems else {}
    loc = [str(x) for x in first.get("loc", ())]
    where, field = (loc[0], ".".join(loc[1:])) if len(loc) > 1 else ("request", ".".join(loc))
    if first.get("type") == "json_invalid":
        field = "body"
    sent = request.headers.get("content-type", "")
    if loc[:1] == ["body"] and "json" not in sent.lower():
        # curl -d without -H 'Content-Type: application/json' sends a form: the body was not read as JSON
        return in_dialect(
            request,
            422,
            {
                "error": "invalid_request",
                "message": "the body must be JSON, sent with the header 'Content-Type: application/json' "
                f"(this request's: {sent or 'none'})",
                "field": "Content-Type",
            },
            None,
        )
    message = "; ".join(
        f"{'.'.join(str(x) for x in p.get('loc', ())[1:]) or p.get('loc', ('body',))[0]}: {p.get('msg')}"
        for p in problems
    )
    return in_dialect(
        request,
        422,
        {"error": "invalid_request", "message": f"invalid {where}: {message}", "field": field or where},
        None,
    )


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
        # FastAPI's "There was an error parsing the body": a JSON body past the parser's limits
        return in_dialect(
            request,
            400,
            {
                "error": "malformed_body",
                "message": f"body cannot be read: {json_fault(exc.__cause__)}",
                "field": "body",
            },
            None,
        )
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
    message = str(exc.detail)
    if exc.status_code == 405 and request.url.path.startswith(("/iceberg/", "/delta-sharing/")):
        message = "this catalog is read-only: write through streampart (CLI, HTTP chunks, Kafka, SQL)"
    return in_dialect(
        request,
        exc.status_code,
        {"error": code, "message": message, "field": "path" if exc.status_code in (404, 405) else None},
        getattr(exc, "headers", None),
    )

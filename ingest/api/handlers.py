"""The exception handlers of the HTTP API: every error answers JSON ``{"error", "message", "field", "line"}``.

A :class:`~metastore.errors.StreampartError` (or any other exception) is answered as
:func:`ingest.api.errors.error_response` maps it; FastAPI's request validation errors become
422 ``invalid_request`` naming the first field at fault; Starlette's own 404 and 405 (no such
route or method) keep their status with a code of ours.
"""

from __future__ import annotations

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


async def _on_error(_request: Request, exc: Exception) -> JSONResponse:
    status, body, headers = error_response(exc)
    return JSONResponse({k: v for k, v in body.items() if v is not None or k == "field"}, status, headers)


async def _on_validation(_request: Request, exc: Exception) -> JSONResponse:
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


async def _on_http(_request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400 and isinstance(exc.__cause__, ValueError | RecursionError):
        # FastAPI's "There was an error parsing the body": a JSON body past the parser's limits
        return JSONResponse(
            {
                "error": "malformed_body",
                "message": f"body cannot be read: {json_fault(exc.__cause__)}",
                "field": "body",
            },
            400,
        )
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

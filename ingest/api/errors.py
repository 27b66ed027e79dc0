"""Errors of the HTTP API, and the one place where every error becomes an HTTP response.

Every error answer is JSON ``{"error": CODE, "message": TEXT, "field": FIELD, "line": N}``
(``field`` and ``line`` when known). A :class:`~metastore.errors.StreampartError` raised
anywhere below a route is mapped here by its class; route code names the field at fault by
raising inside :func:`blame`. Only a server fault is a 5xx.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ingest.errors import (
    ChunkBusyError,
    ChunkStateError,
    CommitTimeoutError,
    IdempotencyConflictError,
    LateDataError,
    MalformedChunkError,
)
from metastore.errors import (
    AlreadyExistsError,
    ConflictError,
    DeleteBusyError,
    FederationAccessError,
    IllegalTransitionError,
    IsolationError,
    MetastoreDownError,
    NamespaceMovingError,
    NotFoundError,
    QuotaExceededError,
    ReadOnlyLinkError,
    RetriableError,
    SchemaConflictError,
    SecondaryWriteError,
    StorageFullError,
    StoreUnavailableError,
    StreampartError,
    UserInputError,
)
from metastore.storage import faults

log = logging.getLogger("streampart.api")


class ApiError(StreampartError):
    """An HTTP error with its status, code and the field at fault."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.field, self.headers = status, code, field, headers or {}


class BodyError(MalformedChunkError):
    """A request body that does not parse or fit the table, at a known line (or row, or event)."""

    def __init__(self, message: str, line: int | None = None, field: str = "body") -> None:
        super().__init__(message)
        self.line, self.api_field = line, field


@contextmanager
def blame(field: str) -> Iterator[None]:
    """Name ``field`` as the one at fault in any StreampartError raised inside (unless named already)."""
    try:
        yield
    except StreampartError as exc:
        if getattr(exc, "api_field", None) is None:
            exc.api_field = field  # type: ignore[attr-defined]
        raise


# (class, status, code, retry after seconds) — first match wins, so subclasses come first.
_MAP: list[tuple[type[BaseException], int, str, int | None]] = [
    (BodyError, 400, "malformed_body", None),
    (MalformedChunkError, 400, "malformed_body", None),
    (LateDataError, 422, "late_data", None),
    (IdempotencyConflictError, 409, "idempotency_conflict", None),
    (QuotaExceededError, 413, "quota_exceeded", None),
    (ReadOnlyLinkError, 409, "read_only_link", None),
    (SecondaryWriteError, 409, "secondary_cluster", None),
    (IsolationError, 403, "isolated_namespace", None),
    (FederationAccessError, 403, "federation_access", None),
    (UserInputError, 400, "bad_request", None),
    (NotFoundError, 404, "not_found", None),
    (AlreadyExistsError, 409, "already_exists", None),
    (ChunkStateError, 409, "chunk_state", None),
    (ChunkBusyError, 409, "chunk_busy", 1),
    (IllegalTransitionError, 409, "conflict", None),
    # a chunk staged before another writer added one of its new fields as another type: upload again
    (SchemaConflictError, 409, "schema_conflict", None),
    (ConflictError, 409, "conflict", 1),
    (DeleteBusyError, 409, "delete_busy", 5),
    (CommitTimeoutError, 503, "commit_timeout", 1),
    (NamespaceMovingError, 503, "namespace_moving", 1),
    (StorageFullError, 507, "storage_full", 5),
    # Retry-After: when its circuit breaker lets a call through again (error_response)
    (MetastoreDownError, 503, "metastore_down", None),
    # the object store did not serve (503 Slow Down, no answer): Retry-After its retry_after, and its
    # address beside the message (error_response)
    (StoreUnavailableError, 503, "unavailable", None),
    (RetriableError, 503, "unavailable", 2),
]


def error_response(exc: BaseException) -> tuple[int, dict[str, Any], dict[str, str]]:
    """The status, JSON body and headers that answer ``exc``."""
    body: dict[str, Any]
    if isinstance(exc, OSError) and not isinstance(exc, StreampartError):
        exc = faults.unavailable(exc) or exc  # a store's fault no path named: named as every path does
    if isinstance(exc, ApiError):
        body = {"error": exc.code, "message": str(exc), "field": exc.field}
        return exc.status, body, exc.headers
    for cls, status, code, retry in _MAP:
        if isinstance(exc, cls):
            body = {
                "error": code,
                "message": str(exc),
                "field": getattr(exc, "api_field", None),
            }
            if getattr(exc, "line", None) is not None:
                body["line"] = exc.line  # type: ignore[attr-defined]
            if isinstance(exc, MetastoreDownError):
                body["metastore"] = exc.metastore
                retry = max(1, math.ceil(exc.retry_after))
            if isinstance(exc, StoreUnavailableError):
                body["store"] = exc.store
                retry = max(1, math.ceil(exc.retry_after))
            return status, body, ({"Retry-After": str(retry)} if retry else {})
    if isinstance(exc, StreampartError):  # a fault of the server or its storage, not the client's
        log.error("request failed: %s", exc, exc_info=exc)
        return 500, {"error": "internal", "message": str(exc), "field": None}, {}
    log.error("request failed with an unexpected error", exc_info=exc)
    return (
        500,
        {"error": "internal", "message": "internal server error (see the server's log)", "field": None},
        {},
    )

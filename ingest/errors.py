"""Errors of the ingest path (chunk protocol, parsing)."""

from __future__ import annotations

from metastore.errors import RetriableError, StreampartError, UserInputError


class IngestError(StreampartError):
    """Root of the ingest package's errors."""


class MalformedChunkError(IngestError, UserInputError):
    """A chunk's content does not fit the table: names the record (line/row) and the fault."""


class LateDataError(IngestError, UserInputError):
    """Rows belong to a sealed event-time partition and the table rejects late data."""


class ChunkStateError(IngestError):
    """The chunk cannot do that in its state (commit an aborted chunk, abort a committed one)."""


class ChunkBusyError(IngestError, RetriableError):
    """Another attempt is committing this chunk right now; retry after it finishes or times out."""


class CommitTimeoutError(IngestError, RetriableError):
    """The commit did not land before its deadline; retrying with the same token resolves it."""

"""Errors of the metastore, and the root error of every streampart package.

Each package has its own ``errors.py`` whose classes derive from :class:`StreampartError`;
the CLI and the HTTP API turn any of them into one clear message. Errors that a caller may
simply retry (a lost compare-and-swap, a busy chunk) derive from :class:`RetriableError`.
"""

from __future__ import annotations


class StreampartError(Exception):
    """Root of every error streampart raises on purpose; its message is meant for users."""


class RetriableError(StreampartError):
    """The operation lost a race or met a transient condition; retrying it is safe."""


class UserInputError(StreampartError):
    """A name, schema, duration, file or option given by the user is invalid."""


class NotFoundError(StreampartError):
    """A table, partition, chunk or roll does not exist."""


class MissingStoreError(NotFoundError):
    """A warehouse or metastore named to be read does not exist (a mistyped path or URL, say).

    Only commands that create (``table create``, ``namespace create``, the demo, …) make a new
    one; every other command refuses with this error instead of reading an empty new one.
    """


class AlreadyExistsError(StreampartError):
    """A table with that name exists already."""


class IllegalTransitionError(StreampartError):
    """A lifecycle transition that the state machine does not allow (a bug or a stale caller)."""


class TableIntegrityError(StreampartError):
    """A table's Delta log or data files are damaged, or disagree with the metastore.

    Not retriable, and never answered with a partial result: someone must restore the named
    file from a backup (or decide to accept the loss). ``streampart check`` lists every problem.
    """


class StorageError(StreampartError):
    """The warehouse's storage failed: an I/O error, a permission, a path that is not a directory."""


class StorageFullError(StorageError, RetriableError):
    """No space left on the warehouse's storage; retrying once space is freed is safe."""


class StoreUnavailableError(StorageError, RetriableError, OSError):
    """The object store did not serve a request, past the client's retries: it answered 5xx (503
    Slow Down, say) or 429, refused or dropped the connection, or did not answer in time.

    Nothing is known to be damaged (the bytes were never read): retry once the store answers.
    ``store`` is its address, ``answered`` what it answered, ``retry_after`` the seconds to wait
    (HTTP's Retry-After). Decided in one place, ``metastore/storage/faults.py``.

    An ``OSError`` too, so the storage layer's callers that retry or clean up after any I/O
    failure (a create sent again, a temp file removed, a commit looked up) do so for this one.
    """

    def __init__(
        self, message: str, store: str | None = None, answered: str | None = None, retry_after: float = 2
    ) -> None:
        super().__init__(message)
        self.store, self.answered, self.retry_after = store, answered, retry_after

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ConflictError(RetriableError):
    """A conditional update matched no row: another process changed the state first.

    Like pyiceberg's ``CommitFailedException``: refresh and retry.
    """


class TableChangedError(ConflictError):
    """A chunk was written for the table as it was before a change that makes it unfit (the table was
    given a primary key since): it is not committed; the writer reads the table again."""


class SchemaConflictError(ConflictError):
    """A table's columns are not the ones a schema change started from: another change landed first.

    Nothing was changed; read the table's schema (the Delta log's) again and plan the change anew.
    """


class CommitStateUnknownError(RetriableError):
    """A Delta commit failed so that whether it landed is unknown (an I/O error mid-commit).

    Like pyiceberg's ``CommitStateUnknownException``, as opposed to a conflict: before
    committing again, look the commit up in the log (each of ours carries a unique key).
    """


class MetastoreUnavailableError(RetriableError):
    """The metastore database cannot be reached or is locked for too long."""


class MetastoreDownError(MetastoreUnavailableError):
    """A federated metastore failed recently: calls for its namespaces fail fast until it is tried again.

    ``retry_after`` is how many seconds remain until then (HTTP's Retry-After); ``metastore``
    names the metastore (the HTTP API answers it beside the message).
    """

    def __init__(self, message: str, retry_after: float, metastore: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.metastore = metastore


class LeaseLostError(RetriableError):
    """A lease (leadership) is no longer held by the caller at the epoch it thought it held.

    The fencing token check failed: another process took the lease over (a higher epoch), or it
    expired. The caller must stop acting as the holder and may try to acquire it afresh.

    A sibling of :class:`ConflictError`, not a kind of it: a lost race for one row (retry the
    step) is not a lost leadership (stop leading), so ``except ConflictError`` never catches it.
    """


class QuotaExceededError(UserInputError):
    """A chunk would take its namespace past its quota; nothing of it was committed."""


class ReadOnlyLinkError(UserInputError):
    """A write, roll or drop asked of a link (links only read their source)."""


class SecondaryWriteError(UserInputError):
    """A write aimed at a secondary cluster of a table (its copies there are read-only)."""


class DanglingLinkError(NotFoundError):
    """A link whose source table was dropped (with ``--force``)."""


class IsolationError(UserInputError):
    """An isolated namespace named a table that is neither its own nor one of its links."""


class FederationAccessError(UserInputError):
    """An operation the access type of a namespace's metastore does not allow (the message names the rule)."""


class NamespaceMovingError(RetriableError):
    """The namespace is being moved to another metastore: writes to it wait for the switch.

    Retriable: once the route flips (seconds, for a namespace of ordinary size), the same write
    goes to the namespace's new metastore. ``retry_after`` is the seconds to wait (HTTP's Retry-After).
    """

    def __init__(self, message: str, retry_after: float = 1) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class DeleteBusyError(RetriableError):
    """Another delete of the table runs now (one at a time per table); retry once it is done, or once
    its process died and its lease lapsed (the next delete of the table resumes it first)."""


class MoveBusyError(RetriableError):
    """Another mover process runs this namespace move now (one at a time); retry once it is done or dead."""

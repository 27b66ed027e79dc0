"""How the Delta layer's failures become streampart's errors (the error classes: ``metastore/errors.py``).

Decided here once: what an I/O failure means for the user (:func:`storage_error`), what a
log that cannot be read means (:func:`log_errors`) and what a failed commit means
(:func:`commit_errors`: conflicted, state unknown, or no space).
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from metastore.errors import (
    CommitStateUnknownError,
    ConflictError,
    StorageError,
    StorageFullError,
    StoreUnavailableError,
    TableIntegrityError,
)
from metastore.models import Table
from metastore.storage import faults

_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT)
T = TypeVar("T")

# How often a commit Delta refused as conflicting is planned again on the newer snapshot: a roll's
# sweep, an expiry and a delete that race on a file each land after at most a few refusals.
COMMIT_ATTEMPTS = 10


def retry_conflicts(attempt: Callable[[], T], attempts: int = COMMIT_ATTEMPTS) -> T:
    """``attempt()`` again while Delta refuses its commit as conflicting with a concurrent one
    (``ConflictError``); each call must load the snapshot it commits on. The last refusal is raised."""
    for k in range(attempts):
        try:
            return attempt()
        except ConflictError:
            if k == attempts - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def first_line(exc: BaseException) -> str:
    """The first line of an error's message: delta-rs appends a Rust backtrace to some."""
    lines = str(exc).strip().splitlines()
    return lines[0].strip() if lines else type(exc).__name__


def storage_error(exc: BaseException, what: str) -> StorageError:
    """The StreampartError that says what an I/O failure while ``what`` means for the user: a store
    that does not serve is unavailable (``storage/faults.py`` decides), a full one full."""
    unavailable = faults.unavailable(exc, what)
    if unavailable is not None:
        return unavailable
    text = first_line(exc)
    # delta-rs' errors carry no errno: the cause is in a later line of their message
    if getattr(exc, "errno", None) in _OUT_OF_SPACE or "No space left on device" in str(exc):
        return StorageFullError(
            f"no space left on the warehouse's storage while {what}; nothing was committed: free "
            "space, then retry"
        )
    return StorageError(f"storage failed while {what}: {text}")


@contextlib.contextmanager
def storage_errors(what: str, cleanup: Path | None = None) -> Iterator[None]:
    """Turn I/O failures inside into :func:`storage_error`; ``cleanup``: a temp file to delete then."""
    try:
        yield
    except OSError as exc:  # pyarrow's IO errors are OSErrors too
        if cleanup is not None:
            with contextlib.suppress(OSError):
                cleanup.unlink(missing_ok=True)
        if isinstance(exc, StoreUnavailableError):  # named already, by the request that failed
            raise
        raise storage_error(exc, what) from exc


@contextlib.contextmanager
def log_errors(table: Table) -> Iterator[None]:
    """Turn a Delta log that cannot be read (missing, a gap, a corrupt commit file) into a
    :class:`TableIntegrityError` naming the table and what to do; a store that did not serve it
    (5xx, no answer) into a :class:`StoreUnavailableError`: damage is claimed only of bytes read."""
    from deltalake.exceptions import DeltaError, TableNotFoundError

    what = f"reading the Delta log of table {table.name}"
    try:
        yield
    except StoreUnavailableError:
        raise
    except TableNotFoundError:
        raise TableIntegrityError(
            f"table {table.name}: no Delta log at {table.location}/_delta_log; restore the "
            "table's directory from a backup, or drop the table"
        ) from None
    except (DeltaError, OSError) as exc:
        unavailable = faults.unavailable(exc, what)
        if unavailable is not None:
            raise unavailable from None
        raise TableIntegrityError(
            f"table {table.name}: its Delta log cannot be read ({first_line(exc)}); restore the "
            f"damaged commit file under {table.location}/_delta_log from a backup; "
            "`streampart check` lists every problem"
        ) from None
    except BaseException as exc:
        if faults.is_panic(exc):
            raise faults.panic_error(exc, what) from None
        raise


@contextlib.contextmanager
def commit_errors(table: Table, what: str) -> Iterator[None]:
    """How a failed Delta commit is reported, decided here once for every commit.

    Raises:
        ConflictError: a concurrent commit conflicted (delta-rs' ``CommitFailedError``); the
            commit did not land: reload, decide again, retry.
        CommitStateUnknownError: an I/O error (delta-rs' ``DeltaError``, an ``OSError``); the
            commit may have landed: look it up before committing again.
        StorageFullError: no space for the commit file; it did not land.

    Anything else (delta-rs' protocol and schema errors, a bug's ``TypeError``) is not
    retried by anyone: it propagates as it is.
    """
    from deltalake.exceptions import (
        CommitFailedError,
        DeltaError,
        DeltaProtocolError,
        SchemaMismatchError,
    )

    try:
        yield
    except CommitFailedError as exc:
        raise ConflictError(f"{what} to {table.name} conflicted: {first_line(exc)}") from exc
    except (DeltaProtocolError, SchemaMismatchError):
        raise
    except (DeltaError, OSError) as exc:
        cause = storage_error(exc, f"the {what} to {table.name}")
        if isinstance(cause, StorageFullError):  # the commit file could not be written: not landed
            raise cause from exc
        if isinstance(cause, StoreUnavailableError):  # an answer may have been lost: still unknown
            raise CommitStateUnknownError(
                f"{what} to {table.name} failed and may have landed: {cause}"
            ) from cause
        raise CommitStateUnknownError(
            f"{what} to {table.name} failed and may have landed: {first_line(exc)}"
        ) from exc
    except BaseException as exc:
        if faults.is_panic(exc):
            raise faults.panic_error(exc, f"the {what} to {table.name}") from None
        raise

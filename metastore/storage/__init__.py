"""Where table files live: a local directory or an S3-compatible bucket, behind one small API.

Every storage root (the warehouse, a cluster's ``--storage``, a replica's target) is either a
local path or an ``s3://bucket/prefix`` URL; a table's location is its root joined with
``<namespace>/<table>``. Everything above this package reads and writes table files through
the functions here, given full locations (:func:`join` builds them), and never asks which
backend it is on, but for what costs differ (:func:`is_remote`):

- :func:`put_if_absent` — the one primitive the commit protocol needs from storage: a Delta
  version is taken by creating its commit file only if absent (a hard link on a local disk,
  a PUT with ``If-None-Match: *`` on a bucket);
- :func:`write_bytes`, :func:`open_output` — a file appears whole or not at all;
- :func:`place` — a second name for a file's bytes (a hard link; a server-side copy);
- :func:`walk`, :func:`delete` — listings and deletes in bounded pages.

Failures are the ``OSError`` a local file system raises for them, on either backend.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import IO

from metastore.storage import local, s3
from metastore.storage.entries import Entry, FileStat
from metastore.storage.options import S3Options, configure, current

__all__ = [
    "Entry",
    "FileStat",
    "S3Options",
    "check_root",
    "configure",
    "create",
    "current",
    "delete",
    "delete_tree",
    "delta_client_options",
    "delta_options",
    "exists",
    "is_dir",
    "is_remote",
    "join",
    "list_dir",
    "names_from",
    "open_input",
    "open_output",
    "place",
    "presign",
    "put_if_absent",
    "read_bytes",
    "stat",
    "walk",
    "write_bytes",
]

DEFAULT_PAGE = 1000
# A create in a bucket that got no answer is sent again this often, after 1, 2, 4 s (put_if_absent).
CREATE_RETRIES = 3
CREATE_BACKOFF_S = 1.0


def is_remote(location: str) -> bool:
    """Whether ``location`` is in a bucket (``s3://…``), not on a local file system."""
    return str(location).startswith(s3.SCHEME)


def join(location: str, *parts: str) -> str:
    """``location`` with ``parts`` below it (``/``-separated relative paths)."""
    location = str(location)
    if not is_remote(location):
        return os.path.join(location, *parts)
    out = location.rstrip("/")
    for part in parts:
        part = part.strip("/")
        if part:
            out = f"{out}/{part}"
    return out


def normalize(location: str) -> str:
    """A root as stored: a local path made absolute, a bucket URL without a trailing ``/``."""
    if is_remote(location):
        bucket, key = s3.split(location)
        return f"{s3.SCHEME}{bucket}/{key}" if key else f"{s3.SCHEME}{bucket}"
    return os.path.abspath(os.path.expanduser(location))


def check_root(root: str, setting: str) -> None:
    """For a root in a bucket: check the bucket exists and answers, before anything is made there.

    Raises:
        UserInputError: naming ``setting`` and what is wrong (endpoint, credentials, bucket).
    """
    if is_remote(root):
        s3.check(root, setting)


def delta_options(location: str) -> dict[str, str] | None:
    """What delta-rs (and polars, and DuckDB's readers) take as ``storage_options`` for ``location``."""
    return current().delta_options() if is_remote(location) else None


def delta_client_options(location: str) -> dict[str, str] | None:
    """What delta-rs itself takes as ``storage_options`` for ``location``: :func:`delta_options` and
    the store's retries and timeouts (``storage.retries``, ``storage.retry_timeout``)."""
    return current().delta_client_options() if is_remote(location) else None


def read_bytes(path: str) -> bytes:
    return s3.read(path) if is_remote(path) else local.read(path)


def write_bytes(path: str, data: bytes) -> None:
    """Write ``path`` whole, replacing what was there (no reader sees a part of it)."""
    (s3.write if is_remote(path) else local.write)(path, data)


def create(path: str, data: bytes) -> None:
    """Write ``path`` only if absent. Raises FileExistsError if it exists (nothing written)."""
    (s3.create if is_remote(path) else local.create)(path, data)


def put_if_absent(path: str, data: bytes) -> bool:
    """Create ``path`` holding ``data`` unless it exists: True if it now holds ``data`` because of
    this call, False if another writer's content was there first.

    A create whose first attempt landed but whose answer was lost (a dropped connection, a
    timeout: the client retries it) finds ``path`` taken — by itself. So a taken path holding
    ``data`` byte for byte counts as written by this call: callers make ``data`` unique per
    attempt (a Delta commit's commitInfo carries a random key), so only this call can have
    written those bytes.

    That makes a create safe to send again, so in a bucket one that failed without an answer (a
    timeout: the client library does not retry a PUT that timed out, the request may still be
    on its way) is sent again here, :data:`CREATE_RETRIES` times with backoff, until the store
    answers: a late first request then meets the key taken and changes nothing. Only a store
    that answers nothing for all of them leaves the outcome unknown (``OSError``).
    """
    for attempt in range(CREATE_RETRIES + 1):
        try:
            create(path, data)
            return True
        except FileExistsError:
            try:
                return read_bytes(path) == data
            except FileNotFoundError:  # removed since (log cleanup): it was not ours
                return False
        except (PermissionError, FileNotFoundError):
            raise
        except OSError:
            if not is_remote(path) or attempt == CREATE_RETRIES:
                raise
            time.sleep(CREATE_BACKOFF_S * 2**attempt)
    raise AssertionError("unreachable")


def stat(path: str) -> FileStat:
    return s3.stat(path) if is_remote(path) else local.stat(path)


def exists(path: str) -> bool:
    """Whether ``path`` is a file (an object)."""
    return s3.is_file(path) if is_remote(path) else local.is_file(path)


def is_dir(path: str) -> bool:
    """Whether ``path`` is a directory (in a bucket: whether any object is under ``path/``)."""
    return s3.is_dir(path) if is_remote(path) else local.is_dir(path)


def list_dir(path: str) -> list[Entry]:
    """What is directly in directory ``path``, sorted by name (nothing if there is none)."""
    return s3.list_dir(path) if is_remote(path) else local.list_dir(path)


def names_from(path: str, first: str) -> list[str]:
    """The names of the files directly in directory ``path`` that sort at or after ``first``, sorted.
    In a bucket one listing that starts there; locally a scan of the directory."""
    if is_remote(path):
        return s3.names_from(path, first)
    return [e.name for e in local.list_dir(path) if not e.is_dir and e.name >= first]


def walk(path: str, page: int = DEFAULT_PAGE) -> Iterator[list[tuple[str, Entry]]]:
    """Every file under ``path`` as (its path relative to ``path``, entry), ``page`` at a time."""
    return s3.walk(path, page) if is_remote(path) else local.walk(path, page)


def delete(paths: list[str]) -> None:
    """Delete files (absent ones are no error); a bucket's in bulk, a page at a time."""
    remote = [p for p in paths if is_remote(p)]
    if remote:
        s3.delete(remote)
    local.delete([p for p in paths if not is_remote(p)])


def delete_tree(path: str) -> None:
    """Delete ``path`` and everything under it."""
    (s3.delete_tree if is_remote(path) else local.delete_tree)(path)


def place(source: str, target: str) -> None:
    """Make ``target`` hold ``source``'s bytes: a hard link locally, a server-side copy in a bucket."""
    (s3.place if is_remote(source) else local.place)(source, target)


def presign(path: str, method: str, expires_in: timedelta) -> str:
    """A presigned URL for one read (``GET`` or ``HEAD``) of the object ``path`` in a bucket, valid
    for ``expires_in``. Raises ValueError for a local path (it has no URL to sign)."""
    if method not in ("GET", "HEAD"):
        raise ValueError(f"only reads are presigned, not {method}")
    if not is_remote(path):
        raise ValueError(f"{path} is not in a bucket: it has no URL to sign")
    return s3.presign(path, method, expires_in)


def open_input(path: str) -> IO[bytes]:
    """A seekable binary file to read (pyarrow reads Parquet from it); the caller closes it."""
    return s3.open_input(path) if is_remote(path) else local.open_input(path)


@contextlib.contextmanager
def open_output(path: str) -> Iterator[IO[bytes]]:
    """A binary file whose content appears at ``path`` whole when the block ends, not at all if it raises."""
    with (s3.open_output if is_remote(path) else local.open_output)(path) as f:
        yield f

"""The staging area of a table: chunk files as staged, and as their commits place them.

A chunk's files are staged as ``_staging/<chunk>-<k>.parquet`` before its partition is known (in
arrival mode it is the partition open when the chunk commits). Its commit adds each file to the
Delta log under ``_staging/<pcol>=<value>/<name>``, a hard link made just before (:func:`place`):
every file the log lists then sits in a directory naming its partition, as the log's
``partitionValues`` do, so readers that take partition values from paths (polars' native
``read_delta``) read what delta-rs reads. A hard link costs no bytes and no copy (in a bucket,
which has no links, it is a server-side copy: no bytes through this process); the staged name
goes once the commit has landed (:func:`unstage`), and a commit retried into another partition
after a roll links the file again there. Links no commit lists (such a retry's, a crash's) go
with housekeeping, like any staged file no snapshot lists (:func:`files`).

Chunks committed before this layout are listed in the log as ``_staging/<name>``: still read,
rolled and cleaned as they were.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
from collections.abc import Iterator
from datetime import datetime

from metastore import storage
from metastore.delta.errors import storage_errors
from metastore.delta.files import remove_file
from metastore.delta.layout import STAGING_DIR, staged_dir
from metastore.models import Table
from metastore.storage import Entry


def place(table: Table, relative: str, value: datetime) -> str:
    """The path the staged file ``relative`` is committed under: ``_staging/<pcol>=<value>/<name>``.

    A second name for the staged file's bytes, made here (again, if an earlier attempt of the
    commit placed another file of that name there: it must be this file): a hard link on a local
    disk, a server-side copy in a bucket (``metastore.storage.place``).

    Raises:
        StorageError: the link could not be made (StorageFullError: no space for it).
    """
    name = relative.rsplit("/", 1)[-1]
    placed = f"{staged_dir(table, value)}/{name}"
    source, target = storage.join(table.location, relative), storage.join(table.location, placed)
    with storage_errors(f"placing {relative} of table {table.name} in its partition's directory"):
        for _ in range(3):  # housekeeping may remove an empty directory just as we link into it
            try:
                storage.place(source, target)
                return placed
            except FileNotFoundError:
                if not storage.exists(source):
                    raise
        raise FileNotFoundError(errno.ENOENT, "its partition's staging directory keeps vanishing")
    return placed  # unreachable (storage_errors raises): for mypy


def unstage(table: Table, relative: str) -> None:
    """Remove a staged file's staged name, once a commit lists it under its placed name."""
    with contextlib.suppress(OSError):  # housekeeping removes what is left
        storage.delete([storage.join(table.location, relative)])


def remove(table: Table, relative: str) -> None:
    """Delete a staged file and every copy :func:`place` made of it (an aborted chunk's)."""
    name = relative.rsplit("/", 1)[-1]
    for directory in partition_dirs(table):
        remove_file(table, f"{directory}/{name}")
    remove_file(table, relative)


def files(table: Table) -> Iterator[tuple[str, Entry]]:
    """Every file of the table's staging area, as (path relative to the table, entry): as staged
    (``_staging/<name>``), and as placed by commits in the streaming partitions' directories
    (``_staging/<pcol>=<value>/<name>``). Listed a page at a time."""
    prefix = f"{table.partition_column}="
    for page in storage.walk(storage.join(table.location, STAGING_DIR)):
        for rel, entry in page:
            parts = rel.split("/")
            if len(parts) == 1 or (len(parts) == 2 and parts[0].startswith(prefix)):
                yield f"{STAGING_DIR}/{rel}", entry


def partition_dirs(table: Table) -> list[str]:
    """The streaming partitions' staging directories (``_staging/<pcol>=<value>``), relative to the table."""
    pattern = f"{table.partition_column}=*"
    return [
        f"{STAGING_DIR}/{e.name}"
        for e in storage.list_dir(storage.join(table.location, STAGING_DIR))
        if e.is_dir and fnmatch.fnmatchcase(e.name, pattern)
    ]

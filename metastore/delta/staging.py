"""The staging area of a table: chunk files as staged, and as their commits place them.

A chunk's files are staged as ``_staging/<chunk>-<k>.parquet`` before its partition is known (in
arrival mode it is the partition open when the chunk commits). Its commit adds each file to the
Delta log under ``_staging/<pcol>=<value>/<name>``, a hard link made just before (:func:`place`):
every file the log lists then sits in a directory naming its partition, as the log's
``partitionValues`` do, so readers that take partition values from paths (polars' native
``read_delta``) read what delta-rs reads. A hard link costs no bytes and no copy; the staged name
goes once the commit has landed (:func:`unstage`), and a commit retried into another partition
after a roll links the file again there. Links no commit lists (such a retry's, a crash's) go
with housekeeping, like any staged file no snapshot lists (:func:`files`).

Chunks committed before this layout are listed in the log as ``_staging/<name>``: still read,
rolled and cleaned as they were.
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from metastore.delta.errors import storage_errors
from metastore.delta.files import remove_file
from metastore.delta.layout import STAGING_DIR, staged_dir
from metastore.models import Table


def place(table: Table, relative: str, value: datetime) -> str:
    """The path the staged file ``relative`` is committed under: ``_staging/<pcol>=<value>/<name>``.

    A hard link to the staged file, made here (again, if an earlier attempt of the commit linked
    another file of that name there: the link must be this file).

    Raises:
        StorageError: the link could not be made (StorageFullError: no space for it).
    """
    name = relative.rsplit("/", 1)[-1]
    placed = f"{staged_dir(table, value)}/{name}"
    source, target = Path(table.location) / relative, Path(table.location) / placed
    with storage_errors(f"placing {relative} of table {table.name} in its partition's directory"):
        for _ in range(3):  # housekeeping may remove an empty directory just as we link into it
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                if target.exists() and os.path.samefile(source, target):
                    return placed
                tmp = target.with_name(f".{name}.{uuid.uuid4().hex}.tmp")
                os.link(source, tmp)
                os.replace(tmp, target)
                return placed
            except FileNotFoundError:
                if not source.exists():
                    raise
        raise FileNotFoundError(errno.ENOENT, "its partition's staging directory keeps vanishing")
    return placed  # unreachable (storage_errors raises): for mypy


def unstage(table: Table, relative: str) -> None:
    """Remove a staged file's staged name, once a commit lists it under its placed name."""
    with contextlib.suppress(OSError):  # housekeeping removes what is left
        (Path(table.location) / relative).unlink(missing_ok=True)


def remove(table: Table, relative: str) -> None:
    """Delete a staged file and every link :func:`place` made to it (an aborted chunk's)."""
    name = relative.rsplit("/", 1)[-1]
    staging = Path(table.location) / STAGING_DIR
    for link in staging.glob(f"{glob.escape(table.partition_column)}=*/{glob.escape(name)}"):
        remove_file(table, link.relative_to(table.location).as_posix())
    remove_file(table, relative)


def files(table: Table) -> Iterator[Path]:
    """Every file of the table's staging area: as staged (``_staging/<name>``), and as placed by
    commits in the streaming partitions' directories (``_staging/<pcol>=<value>/<name>``)."""
    staging = Path(table.location) / STAGING_DIR
    if not staging.is_dir():
        return
    for path in sorted(staging.iterdir()):
        if path.is_file():
            yield path
        elif path.is_dir() and path.name.startswith(f"{table.partition_column}="):
            yield from sorted(p for p in path.iterdir() if p.is_file())


def partition_dirs(table: Table) -> list[Path]:
    """The streaming partitions' staging directories (``_staging/<pcol>=<value>/``)."""
    staging = Path(table.location) / STAGING_DIR
    return sorted(staging.glob(f"{glob.escape(table.partition_column)}=*"))

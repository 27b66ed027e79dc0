"""A table's data files: what a Delta snapshot lists (:class:`LiveFile`), and the files on disk.

A snapshot's files are read from its add actions (:func:`live_files`); :func:`check_files`
checks they are all on disk, as the log recorded them. Files are written atomically
(:func:`write_parquet`) and removed with whatever a Spark attempt left (:func:`remove_file`).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from metastore import storage
from metastore.delta.errors import storage_errors
from metastore.delta.layout import (
    STAGING_DIR,
    SUCCESS_MARKER,
    chunk_of_staged,
    parse_partition_value,
    partition_dir,
)
from metastore.errors import TableIntegrityError
from metastore.models import Table


@dataclass(frozen=True)
class LiveFile:
    """A data file in one Delta snapshot."""

    path: str  # relative to the table root, as on disk
    partition: datetime
    size: int
    rows: int

    @property
    def staged(self) -> bool:
        return self.path.startswith(STAGING_DIR + "/")

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    @property
    def chunk(self) -> str | None:
        """The chunk a staged file belongs to (see :func:`chunk_of_staged`)."""
        return chunk_of_staged(self.name) if self.staged else None


@dataclass(frozen=True)
class PartitionStats:
    files: int = 0
    staged_files: int = 0
    chunks: int = 0  # distinct chunks among the staged files
    rows: int = 0
    bytes: int = 0


def files_stats(files: Iterable[LiveFile]) -> dict[datetime, PartitionStats]:
    """Per partition, what ``files`` (of one snapshot, or what a link shows of it) hold.

    Plain counters per partition, one PartitionStats each at the end: ``table describe`` runs this
    over every live file, and a streaming partition may hold ten thousand.
    """
    counts: dict[datetime, list[int]] = {}  # files, staged files, rows, bytes
    chunks: dict[datetime, set[str]] = {}
    prefix = STAGING_DIR + "/"
    for f in files:
        acc = counts.get(f.partition)
        if acc is None:
            acc = counts[f.partition] = [0, 0, 0, 0]
            chunks[f.partition] = set()
        acc[0] += 1
        acc[2] += f.rows
        acc[3] += f.size
        if f.path.startswith(prefix):
            acc[1] += 1
            chunks[f.partition].add(chunk_of_staged(f.path[len(prefix) :]))
    return {
        value: PartitionStats(files=n, staged_files=staged, chunks=len(chunks[value]), rows=rows, bytes=size)
        for value, (n, staged, rows, size) in counts.items()
    }


def disk_path(path: str) -> str:
    """A file's path as the log holds it (a URI path, encoded) as it is on disk."""
    return urllib.parse.unquote(path) if "%" in path else path


def live_files(dt: Any) -> list[LiveFile]:
    """The files of the snapshot ``dt`` (a loaded DeltaTable), as its add actions list them."""
    return files_of_adds(add_actions(dt))


def add_actions(dt: Any) -> pa.Table:
    """The add actions of the snapshot ``dt``, flattened (``path``, ``num_records``, ``min.<col>``, …)."""
    return pa.table(dt.get_add_actions(flatten=True))


def files_of_adds(adds: pa.Table) -> list[LiveFile]:
    """The files that ``adds`` (:func:`add_actions`) list."""
    if adds.num_rows == 0:
        return []
    pcol = next(c for c in adds.column_names if c.startswith("partition."))
    out = []
    # a snapshot holds few partitions and may hold ten thousand files: parse each value once
    values: dict[Any, datetime] = {}
    for path, pv, size, rows in zip(
        adds.column("path").to_pylist(),
        adds.column(pcol).to_pylist(),
        adds.column("size_bytes").to_pylist(),
        adds.column("num_records").to_pylist(),
        strict=True,
    ):
        value = values.get(pv)
        if value is None:
            value = values[pv] = parse_partition_value(pv)
        # the log holds URI-encoded paths; ours on disk are the decoded form
        out.append(LiveFile(disk_path(path), value, int(size), int(rows or 0)))
    return out


def write_parquet(table: Table, relative: str, data: pa.Table) -> int:
    """Write ``data`` to ``relative`` atomically (it appears whole or not at all); returns its size.

    Raises:
        StorageFullError: no space left (retriable); StorageError: another I/O failure.
            Either way no file is left behind.
    """
    target = storage.join(table.location, relative)
    with storage_errors(f"writing {relative} of table {table.name}"):
        with storage.open_output(target) as f:
            pq.write_table(data, f, compression="snappy")
            size = f.tell()
        return size


def read_file(table: Table, relative: str) -> pa.Table:
    """A data file of the table, whole (a chunk's staged file: small)."""
    with storage.open_input(storage.join(table.location, relative)) as f:
        return pq.read_table(f)


def file_exists(table: Table, relative: str) -> bool:
    return storage.exists(storage.join(table.location, relative))


def remove_file(table: Table, relative: str) -> None:
    """Delete a file, or a directory with everything in it (a Spark sweep attempt's)."""
    storage.delete_tree(storage.join(table.location, relative))


def check_files(table: Table, files: Iterable[LiveFile]) -> None:
    """Check that every file a snapshot lists is on disk with the size the log recorded.

    A query must never answer from part of a snapshot.

    Raises:
        TableIntegrityError: naming the first missing or truncated file.
    """
    root = table.location
    sizes = None if not storage.is_remote(root) else _sizes(root)
    for f in files:  # plain os.stat: a pin checks every file, and a snapshot may hold 10,000
        try:
            size = os.stat(os.path.join(root, f.path)).st_size if sizes is None else sizes[f.path]
        except (FileNotFoundError, KeyError):
            raise TableIntegrityError(
                f"table {table.name}: data file {f.path} of the Delta log is missing from "
                f"{table.location}; restore it from a backup (`streampart check` lists every problem)"
            ) from None
        if size != f.size:
            raise TableIntegrityError(
                f"table {table.name}: data file {f.path} has {size} bytes, the Delta log says "
                f"{f.size}; restore it from a backup (`streampart check` lists every problem)"
            )


def _sizes(root: str) -> dict[str, int]:
    """Every file's size under a table in a bucket, by its path relative to the table: one listing
    (a page of 1,000 per request) instead of a request per file."""
    return {rel: e.size for page in storage.walk(root) for rel, e in page}


def partition_dir_entries(
    table: Table, value: datetime, directories: bool = False, rel: str | None = None
) -> list[str]:
    """Every file in a partition's directory but its markers (``_*``): data and hidden temp files.

    ``directories``: directories too (a Spark sweep attempt writes into a hidden one). ``rel``: the
    directory, when not the table's own rule's (a replica keeps its primary's paths).
    """
    rel = rel or partition_dir(table, value)
    return sorted(
        f"{rel}/{e.name}"
        for e in storage.list_dir(storage.join(table.location, rel))
        if (not e.is_dir or directories) and not e.name.startswith("_")
    )


def write_success_marker(
    table: Table, value: datetime, content: dict[str, Any], rel: str | None = None
) -> None:
    """The partition's ``_SUCCESS`` marker, in its directory (``rel``: when not the table's own
    rule's; a replica keeps its primary's paths)."""
    target = storage.join(table.location, rel or partition_dir(table, value), SUCCESS_MARKER)
    with storage_errors(f"writing the {SUCCESS_MARKER} marker of table {table.name}"):
        storage.write_bytes(target, (json.dumps(content, default=str) + "\n").encode())

"""What a delete rewrites: the live files of one snapshot holding rows that match its predicate, and
the rewritten files without those rows (ingest/deletes/deleter.py commits them).

A file is read only if its partition may hold a match (:meth:`Predicate.partition_may_match` on the
partition column). Every live file of the snapshot is one a delete touches, whatever its partition's
state: streaming, rolling, standard, or expiring (an expiry that has not committed yet, or whose
process died, leaves its partition's files live: readers see their rows, so the delete removes its
matches there too; the expiry's own commit later removes whatever files are live then). An expired
partition has no live file. On a local disk one Arrow scan of those files' named columns then finds
the files holding a match, and only they are read whole. A partition that is rolling makes the plan
wait: a roll records its partition's rows from its sweep, and a delete must not change them under
it. A rewritten file keeps its partition's place: a standard partition's in the partition's
directory (``del-<delete>-v<snapshot>-<attempt>-<k>.snappy.parquet``, never a name a sweep's
leftover clean-up takes), a staged file beside the chunk's others (``<chunk id>-d<delete>-…``, so
rolls and housekeeping still know its chunk). A file left with no row is removed, not rewritten.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ingest.deletes.predicate import Predicate
from metastore import storage
from metastore.delta.arrow import arrow_type
from metastore.delta.files import LiveFile, read_file, remove_file, write_parquet
from metastore.delta.layout import partition_dir, staged_dir
from metastore.delta.stats import ranges_stats
from metastore.models import PartitionState, Table

_PERIOD = pa.timestamp("us", tz="UTC")  # a partition column's type
# Partitions whose rows and files the metastore counts (a roll recorded them): counted anew when a
# delete rewrote them.
COUNTED = (PartitionState.STANDARD, PartitionState.EXPIRING)

_MINE = re.compile(r"^del-([0-9a-f]{8})-v(\d+)-[0-9a-f]{8}-\d{5}\.snappy\.parquet$")


@dataclass
class Plan:
    """One snapshot's rewrite: the files to remove, the files written in their place, what it deletes."""

    version: int
    removes: list[LiveFile] = field(default_factory=list)
    adds: list[tuple[str, datetime, int]] = field(default_factory=list)
    ranges: dict[str, str] = field(default_factory=dict)  # the adds' statistics, by path
    rows: int = 0  # rows deleted
    rows_read: int = 0
    files_read: int = 0
    rolling: list[datetime] = field(default_factory=list)  # partitions a roll holds: wait for it

    @property
    def partitions(self) -> list[datetime]:
        return sorted({f.partition for f in self.removes})

    def discard(self, table: Table) -> None:
        """Delete the files it wrote (never committed: nobody reads them)."""
        for path, _, _ in self.adds:
            remove_file(table, path)
        self.adds = []


def candidates(
    table: Table,
    predicate: Predicate,
    files: Iterable[LiveFile],
    states: Mapping[datetime, PartitionState],
    bounds: Bounds | None = None,
) -> tuple[list[LiveFile], list[datetime]]:
    """The files a delete must read, and the rolling partitions among theirs: every live file whose
    partition may hold a match, whatever the partition's state (never skipped by it: a delete that
    skipped expiring partitions reported success while readers still saw their matches), and whose
    statistics (``bounds``: path → column → (min, max), :func:`metastore.delta.stats.file_bounds`)
    do not rule a match out."""
    kept = [f for f in files if predicate.partition_may_match({table.partition_column: f.partition})]
    if bounds:
        kept = _within_bounds(table, predicate, kept, bounds)
    rolling = {f.partition for f in kept if states.get(f.partition) is PartitionState.ROLLING}
    return kept, sorted(rolling)


Bounds = Mapping[str, Mapping[str, tuple[Any, Any]]]  # path → column → (min, max) of every row


def _within_bounds(
    table: Table, predicate: Predicate, files: list[LiveFile], bounds: Bounds
) -> list[LiveFile]:
    """The ``files`` whose bounds may hold a row the predicate matches. Each file is an Arrow dataset
    fragment (never opened) whose partition expression says what its statistics promise of every
    row (``min <= column <= max``, for columns without nulls); Arrow's own simplification of the
    predicate under that promise leaves out the files it rules out."""
    types = _named(table, predicate)
    fmt, nowhere = ds.ParquetFileFormat(), pafs.LocalFileSystem()
    fragments = []
    for k, f in enumerate(files):
        promise = pc.field(table.partition_column) == pa.scalar(f.partition, _PERIOD)
        for name, (low, high) in bounds.get(f.path, {}).items():
            kind = types.get(name)
            if kind is None or name == table.partition_column:
                continue
            try:
                low_s, high_s = pa.scalar(low, kind), pa.scalar(high, kind)
            except (pa.ArrowException, TypeError, ValueError, OverflowError):
                continue  # a bound this column's type cannot hold (the column changed): no promise
            promise = promise & (pc.field(name) >= low_s) & (pc.field(name) <= high_s)
        fragments.append(fmt.make_fragment(f"/{k}", nowhere, partition_expression=promise))
    dataset = ds.FileSystemDataset(fragments, pa.schema(list(types.items())), fmt, nowhere)
    kept = {int(fragment.path[1:]) for fragment in dataset.get_fragments(filter=predicate.matches)}
    return [f for k, f in enumerate(files) if k in kept]


def _view(table: Table, predicate: Predicate, f: LiveFile, data: pa.Table) -> pa.Table:
    """The file's rows with every column the predicate names: the partition column (files lack it:
    the partition's directory says it), and NULL for a column added after the file was written."""
    for name, kind in _named(table, predicate).items():
        if name not in data.column_names:
            value = f.partition if name == table.partition_column else None
            data = data.append_column(name, pa.array([value] * data.num_rows, kind))
    return data


def matching_rows(table: Table, predicate: Predicate, f: LiveFile) -> pa.Table:
    """The rows of the live file ``f`` that ``predicate`` matches (read whole)."""
    data = read_file(table, f.path)
    return _view(table, predicate, f, data).filter(predicate.matches) if data.num_rows else data


def _named(table: Table, predicate: Predicate) -> dict[str, pa.DataType]:
    """The Arrow type of each column the predicate names."""
    types = {c.name: arrow_type(c.type) for c in table.columns}
    types[table.partition_column] = _PERIOD
    return {name: types[name] for name in sorted(predicate.columns)}


def holding_matches(table: Table, predicate: Predicate, files: Sequence[LiveFile]) -> set[str] | None:
    """The paths among ``files`` holding a row the predicate matches, found by one scan of the
    columns it names (Arrow's dataset scanner: C++ threads, Parquet statistics), so that only those
    files are read whole and rewritten. None where it cannot tell (see :func:`_scan`)."""
    scan = _scan(table, predicate, files)
    if scan is None:
        return None
    dataset, by_full = scan
    try:
        found = dataset.to_table(filter=predicate.matches, columns=["__filename"])
    except (pa.ArrowException, OSError):
        return None
    return {by_full[name] for name in pc.unique(found.column("__filename")).to_pylist()}


def _scan(
    table: Table, predicate: Predicate, files: Sequence[LiveFile]
) -> tuple[ds.Dataset, dict[str, str]] | None:
    """``files`` as one Arrow dataset of the columns the predicate names (NULL in a file written
    before its column was added; the partition column from each file's partition), with each full
    path's log path. None for a table in a bucket: its files are read through ``storage``."""
    if not files or storage.is_remote(table.location):
        return None
    local, fmt = pafs.LocalFileSystem(), ds.ParquetFileFormat()
    by_full = {os.path.join(table.location, f.path): f.path for f in files}
    period = pc.field(table.partition_column)
    fragments = [
        fmt.make_fragment(full, local, partition_expression=period == pa.scalar(f.partition, _PERIOD))
        for full, f in zip(by_full, files, strict=True)
    ]
    schema = pa.schema(list(_named(table, predicate).items()))
    return ds.FileSystemDataset(fragments, schema, fmt, local), by_full


# Files read and rewritten at once: pyarrow reads, filters and writes Parquet without holding the GIL,
# and a bucket's GET/PUT are latency, not CPU (a delete of one key across 1,000 partitions rewrites
# 1,000 files: one at a time it was twice the pyarrow work).
THREADS = 8


def rewrite(
    table: Table,
    predicate: Predicate,
    files: Iterable[LiveFile],
    delete_id: str,
    version: int,
    attempt: str,
    dry_run: bool = False,
) -> Plan:
    """Read ``files`` (of snapshot ``version``) and write each that holds a match again without it
    (``dry_run``: only count what would go)."""

    files = list(files)
    hits = holding_matches(table, predicate, files)
    todo = files if hits is None else [f for f in files if f.path in hits]
    plan_ranges: dict[str, str] = {}  # filled by the threads: each writes its own path's

    def one(k: int, f: LiveFile) -> tuple[LiveFile, int, int, tuple[str, datetime, int] | None]:
        data = read_file(table, f.path)
        view = _view(table, predicate, f, data)
        gone = view.filter(predicate.matches).num_rows if data.num_rows else 0
        if not gone:
            return f, data.num_rows, 0, None
        kept = view.filter(predicate.keeps).select(data.column_names)
        if not kept.num_rows or dry_run:
            return f, data.num_rows, gone, None
        path = rewritten_name(table, f, delete_id, version, attempt, k)
        write_parquet(table, path, kept)
        plan_ranges[path] = ranges_stats(kept, table.columns)  # readers skip files by them
        return f, data.num_rows, gone, (path, f.partition, kept.num_rows)

    done: list[tuple[LiveFile, int, int, tuple[str, datetime, int] | None]] = []
    failed: BaseException | None = None
    with ThreadPoolExecutor(THREADS) as pool:
        for future in [pool.submit(one, k, f) for k, f in enumerate(todo)]:  # in the files' order
            try:
                done.append(future.result())
            except BaseException as exc:
                failed = failed or exc
    if failed is not None:
        for *_, added in done:  # the rewrites that did finish: never committed, nobody reads them
            if added is not None:
                remove_file(table, added[0])
        raise failed
    rewritten = {f.path for f in todo}
    plan = Plan(
        version,
        ranges=plan_ranges,
        files_read=len(files),
        rows_read=sum(f.rows for f in files if f.path not in rewritten),
    )
    for f, read, gone, added in done:
        plan.rows_read += read
        if gone:
            plan.removes.append(f)
            plan.rows += gone
        if added is not None:
            plan.adds.append(added)
    return plan


def matches_every_row(table: Table, predicate: Predicate, files: Iterable[LiveFile]) -> bool:
    """Whether ``predicate`` is true for every row of the live ``files`` (and there is one): read
    only as far as the first file holding a row it keeps, its columns only."""
    touched = [f for f in files if f.rows]
    if not touched:
        return False
    if any(not predicate.partition_may_match({table.partition_column: f.partition}) for f in touched):
        return False
    scan = _scan(table, predicate, touched)
    if scan is not None:
        with contextlib.suppress(pa.ArrowException, OSError):  # else: file by file, as in a bucket
            return scan[0].head(1, columns=["__filename"], filter=predicate.keeps).num_rows == 0
    wanted = [c for c in predicate.columns if c != table.partition_column]
    for f in touched:
        with storage.open_input(storage.join(table.location, f.path)) as handle:
            parquet = pq.ParquetFile(handle)
            data = parquet.read(columns=[c for c in wanted if c in parquet.schema_arrow.names])
        if _view(table, predicate, f, data).filter(predicate.keeps).num_rows:
            return False
    return True


def rewritten_name(table: Table, f: LiveFile, delete_id: str, version: int, attempt: str, k: int) -> str:
    """Where the ``k``-th rewritten file of ``f`` goes (see the module's docstring)."""
    if f.staged and f.chunk is not None:
        return f"{staged_dir(table, f.partition)}/{f.chunk}-d{delete_id[:8]}-{attempt}-{k:05d}.parquet"
    return (
        f"{partition_dir(table, f.partition)}/del-{delete_id[:8]}-v{version}-{attempt}-{k:05d}.snappy.parquet"
    )


def rewritten_version(delete_id: str, name: str) -> int | None:
    """The snapshot version of the attempt of ``delete_id`` that wrote the standard partition file
    ``name`` (None: not one of its)."""
    m = _MINE.match(name)
    return int(m.group(2)) if m is not None and m.group(1) == delete_id[:8] else None


def staged_of(delete_id: str, name: str) -> bool:
    """Whether the staged file ``name`` was written by a rewrite of ``delete_id``."""
    return f"-d{delete_id[:8]}-" in name and name.endswith(".parquet")

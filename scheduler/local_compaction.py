"""The local roll engine's compaction: a partition's files rewritten into files of about the target
size, in the roller's own process (pyarrow, a row group at a time), for ``scheduler/roll.py``; a
clustered table's rows in clustering order (``scheduler/clustering.py``), a run at a time.

A table in a bucket has its source files fetched ahead in threads (:func:`prefetched`); each output
file appears whole under its name or not at all (``metastore.storage.open_output``), and carries
the statistics of the rows written into it (``metastore/delta/stats.py``).
"""

from __future__ import annotations

import contextlib
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime

import pyarrow as pa
import pyarrow.parquet as pq

from metastore import storage
from metastore.delta.arrow import conform, data_schema
from metastore.delta.files import LiveFile
from metastore.delta.layout import partition_dir
from metastore.delta.stats import Ranges
from metastore.models import Column, Table
from scheduler.clustering import order, pieces, rows_per_file
from scheduler.errors import RollFailedError

# How the local engine writes a standard partition's files. Why 1 Mi rows a row group (pyarrow's
# own default for write_table): chunks arrive as small files (often ~100 rows), and a row group
# per chunk would make a compacted file of thousands of tiny row groups, slow to write and to
# read (every row group has its own column chunks and statistics). Why the 64 MiB bound too:
# rows are held in memory until their row group is written, and wide rows would otherwise
# make 1 Mi of them take gigabytes. ``bench --only roll`` writes its baseline with the same.
COMPRESSION = "snappy"
ROW_GROUP_ROWS = 1024 * 1024
ROW_GROUP_BYTES = 64 * 1024 * 1024

# How many source files a roll of a table in a bucket fetches ahead, each in a thread: a GET
# costs a request's latency, not CPU, so the roll waits for one request at a time, not one per file.
PREFETCH = 16


def prefetched(table: Table, files: list[LiveFile]) -> Iterator[tuple[LiveFile, bytes | None]]:
    """``files`` in order with their bytes, fetched up to :data:`PREFETCH` ahead, for a table in a
    bucket; with None (read where they are, a row group at a time) on a local disk."""
    if not storage.is_remote(table.location):
        yield from ((f, None) for f in files)
        return
    with ThreadPoolExecutor(PREFETCH, thread_name_prefix="streampart-roll-fetch") as pool:
        ahead: deque[tuple[LiveFile, Future[bytes]]] = deque()
        queue = iter(files)
        for f in itertools.islice(queue, PREFETCH):
            ahead.append((f, pool.submit(storage.read_bytes, storage.join(table.location, f.path))))
        while ahead:
            f, fetching = ahead.popleft()
            content = fetching.result()
            following = next(queue, None)
            if following is not None:
                path = storage.join(table.location, following.path)
                ahead.append((following, pool.submit(storage.read_bytes, path)))
            yield f, content


class CompactedFiles:
    """A partition's compacted files as they are written: rows batched into row groups of about
    :data:`ROW_GROUP_ROWS`, a file finished once the sources it took reach ``target_size`` bytes;
    every row group conformed to ``columns`` (the sweep's version's)."""

    def __init__(
        self,
        table: Table,
        columns: tuple[Column, ...],
        value: datetime,
        name: Callable[[int], str],
        target_size: int,
        cluster_by: Sequence[str] = (),
        run_bytes: int = 1024**3,
    ) -> None:
        self.table, self.value, self._name, self._target_size = table, value, name, target_size
        # Clustering: rows are held as one run (up to run_bytes of them in memory: roll.cluster_memory),
        # ordered (scheduler/clustering.py), then cut into files of about the target size
        self._cluster_by, self._run_bytes = tuple(cluster_by), run_bytes
        self._run: list[pa.Table] = []
        self._run_rows = self._run_bytes_held = self._run_source = 0
        self.directory = partition_dir(table, value)
        self.columns, self.schema = columns, data_schema(columns)
        self.out: list[tuple[str, datetime, int]] = []  # the finished files: path, value, rows
        self.ranges: dict[str, str] = {}  # the finished files' statistics (metastore/delta/stats.py)
        self._stats = Ranges(columns)
        self._writer: pq.ParquetWriter | None = None
        # the file being written: it appears whole under its name when closed (storage.open_output)
        self._output: contextlib.ExitStack | None = None
        self._final: str | None = None
        self._rows = self._written = 0
        # Rows read but not yet written: they go out as one row group (see ROW_GROUP_ROWS), not
        # as one row group per chunk file, which would leave 100-row row groups behind.
        self._pending: list[pa.Table] = []
        self._pending_rows = self._pending_bytes = 0

    def add(self, f: LiveFile, content: bytes | None = None) -> None:
        """Append one source file's rows (finishing the file being written once it is big enough);
        ``content``: the file's bytes, when already fetched (:func:`_prefetched`). A clustered table's
        rows are held until the run is full (or :meth:`close`), then written in order."""
        if self._cluster_by:
            for data in self._read(f, content):
                self._run.append(data)
                self._run_rows += data.num_rows
                self._run_bytes_held += data.nbytes
            self._run_source += f.size
            if self._run_bytes_held >= self._run_bytes:
                self._write_run()
            return
        if self._writer is None:
            self._open()
        for data in self._read(f, content):
            self._pending.append(data)
            self._pending_rows += data.num_rows
            self._pending_bytes += data.nbytes
            self._rows += data.num_rows
            if self._pending_rows >= ROW_GROUP_ROWS or self._pending_bytes >= ROW_GROUP_BYTES:
                self._flush()
        self._written += f.size
        if self._written >= self._target_size:
            self._finish()

    def _read(self, f: LiveFile, content: bytes | None) -> Iterator[pa.Table]:
        """A source file's rows, a row group at a time (memory stays bounded), in the sweep's columns."""
        opened = pa.BufferReader(content) if content is not None else None
        with opened or storage.open_input(storage.join(self.table.location, f.path)) as handle:
            source = pq.ParquetFile(handle)
            for group in range(source.num_row_groups):
                data = source.read_row_group(group)
                yield data if data.schema == self.schema else conform(data, self.columns)

    def _write_run(self) -> None:
        """Write the rows held (a clustered table's) in clustering order, cut into files of about the
        target size: as many rows a file as the target holds of the sources' bytes a row."""
        if not self._run:
            return
        rows, z = order(pa.concat_tables(self._run), self._cluster_by)
        self._run.clear()
        per_file = rows_per_file(self._target_size, self._run_rows, self._run_source)
        self._run_rows = self._run_bytes_held = self._run_source = 0
        for start, end in pieces(rows.num_rows, per_file, z, len(self._cluster_by)):
            piece = rows.slice(start, end - start)
            self._open()
            self._pending.append(piece)
            self._rows += piece.num_rows
            self._finish()

    def _open(self) -> None:
        """Begin the next file: it appears whole under its name when finished (storage.open_output)."""
        self._final = f"{self.directory}/{self._name(len(self.out))}"
        self._output = contextlib.ExitStack()
        target = storage.join(self.table.location, self._final)
        sink = self._output.enter_context(storage.open_output(target))
        self._writer = pq.ParquetWriter(sink, self.schema, compression=COMPRESSION)

    def close(self) -> None:
        """Write what is held and finish the file being written, if any: it appears whole."""
        self._write_run()
        self._finish()

    def _finish(self) -> None:
        """Finish the file being written, if any: its last rows written, and it appears whole."""
        if self._writer is None:
            return
        assert self._output is not None and self._final is not None
        self._flush()
        self._writer.close()
        self._writer = None
        self._output.close()  # the file appears under its name (a rename; an upload completed)
        self._output = None
        self.out.append((self._final, self.value, self._rows))
        self.ranges[self._final] = self._stats.json()
        self._rows, self._written, self._stats = 0, 0, Ranges(self.columns)

    def discard_open(self) -> None:
        """After a failure: drop the file being written (the finished ones are in ``out``): it never
        appears under its name."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
            self._writer = None
        if self._output is not None:
            self._output.__exit__(RollFailedError, RollFailedError("compaction abandoned"), None)
            self._output = None

    def _flush(self) -> None:
        assert self._writer is not None
        if self._pending:
            group = pa.concat_tables(self._pending)
            self._writer.write_table(group, row_group_size=ROW_GROUP_ROWS)
            self._stats.add(group)
            self._pending.clear()
            self._pending_rows = self._pending_bytes = 0

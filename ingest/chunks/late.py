"""Where the rows a table cannot take go: bad records to its dead-letter table, late rows per its policy.

Dead letters: the records of a chunk that fail validation are staged as a chunk of the table's
``__dead_letter`` companion (one per idempotency key, ``dead-letter:<chunk>``), committed just
before the chunk itself and aborted with it.

Late rows (event-time tables): rows whose partition is sealed, or whose period ended more than
the table's max-age ago, are found by the group commit's planning. A table that rejects late
data fails the whole chunk (``LateDataError``) — or, for a stream that cannot answer "rejected"
(``ChunkWriter.late_rows_to_dead_letter``), sends them to its dead-letter table; a table that
diverts late data commits them to its ``__late`` companion. Either way one companion chunk per
late file, keyed by the file, so a retry that finds more late files adds only those.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import cast

import pyarrow as pa

from ingest.chunks.base import DeadLetter, Writer, remove_staged
from ingest.errors import ChunkBusyError, LateDataError
from ingest.records import Parsed
from metastore import clock
from metastore.delta.files import read_file
from metastore.durations import format_duration
from metastore.errors import ConflictError
from metastore.models import Chunk, ChunkState, LateDataPolicy, StagedFile, TableKind, iso


def dead_letter_key(chunk_id: str, files: Sequence[StagedFile]) -> str:
    """The idempotency key of the dead letters of a chunk staged as ``files``.

    Each staging of a chunk (new file names every time) has its own: a chunk staged again after its
    dead letters were committed — parsed anew because another writer changed the table's schema
    meanwhile (``ingest/chunks/evolving.py``), so its bad records may differ — commits its own
    dead letters rather than finding the first staging's committed and dropping its own.
    """
    return f"dead-letter:{chunk_id}" + (f":{Path(files[0].path).stem}" if files else "")


def _dead_letters_of(writer: Writer, dlq_id: int, chunk: Chunk) -> Chunk | None:
    found = writer.store.find_chunk_by_key(dlq_id, dead_letter_key(chunk.id, chunk.files))
    if found is None and chunk.files:  # staged before the key named the staging
        found = writer.store.find_chunk_by_key(dlq_id, dead_letter_key(chunk.id, ()))
    return cast("Chunk | None", found)


def stage_dead_letters(
    writer: Writer,
    chunk: Chunk,
    bad: Sequence[DeadLetter],
    key: str | None = None,
    files: Sequence[StagedFile] = (),
) -> tuple[Writer, Chunk]:
    """Stage ``bad`` as a dead-letter chunk (once per idempotency key: by default the chunk's staging
    as ``files``, :func:`dead_letter_key`); returns its writer and chunk."""
    dlq = writer.catalog.companion(writer.table, TableKind.DEAD_LETTER)
    dlq_writer = writer.writer_for(dlq)
    dlq_chunk = dlq_writer.reserve(key or dead_letter_key(chunk.id, files))
    if dlq_chunk.state is not ChunkState.RESERVED:
        return dlq_writer, dlq_chunk  # staged and committed by an earlier attempt
    rows = dead_letter_rows(chunk.id, bad, dlq_writer.validator().schema)
    return dlq_writer, dlq_writer.stage_parsed(dlq_chunk, Parsed(rows, []))


def dead_letter_rows(chunk: str, bad: Sequence[DeadLetter], schema: pa.Schema) -> pa.Table:
    """``bad`` as the rows of a dead-letter table (its columns: ``schema``), received now, of ``chunk``."""
    now = clock.now()
    return pa.table(
        {
            "chunk": [chunk] * len(bad),
            "source": [b.source for b in bad],
            "position": [b.position for b in bad],
            "reason": [b.reason for b in bad],
            "raw": [b.raw for b in bad],
            "received_at": [now] * len(bad),
        },
        schema=schema,
    )


def commit_dead_letters(writer: Writer, chunk: Chunk) -> None:
    """Commit the dead-letter chunk staged with ``chunk``, if there is one (before ``chunk`` itself)."""
    dlq = writer.catalog.companion(writer.table, TableKind.DEAD_LETTER)
    dlq_writer = writer.writer_for(dlq)
    found = _dead_letters_of(writer, dlq.id, chunk)
    if found is not None:
        dlq_writer.commit(found.id)


def abort_dead_letters(writer: Writer, chunk: Chunk, reason: str) -> None:
    """Abort the dead-letter chunk staged with the aborted ``chunk``, if it is still reserved."""
    dlq = writer.catalog.companion(writer.table, TableKind.DEAD_LETTER)
    found = _dead_letters_of(writer, dlq.id, chunk)
    if found is not None and found.state is ChunkState.RESERVED:
        writer.writer_for(dlq).abort(found.id, reason)


def route_late(writer: Writer, chunk: Chunk, late: Sequence[StagedFile]) -> int:
    """Send the ``late`` files of the COMMITTING ``chunk`` where its table's policy says; their rows.

    Raises:
        LateDataError: the table rejects late data (the chunk is aborted, its files removed).
        ChunkBusyError: another attempt took the chunk over meanwhile.
    """
    if not late:
        return 0
    table = writer.table
    if table.late_data is LateDataPolicy.REJECT and writer.late_rows_to_dead_letter:
        return _late_to_dead_letter(writer, chunk, late)
    if table.late_data is LateDataPolicy.REJECT:
        periods = ", ".join(sorted({iso(f.period) for f in late if f.period}))
        message = (
            f"{sum(f.rows for f in late)} rows are late: their partition(s) {periods} are "
            f"{_late_because(writer)}, and table {table.name} rejects late data; "
            "the chunk was not committed"
        )
        try:
            writer.store.abort_chunk(chunk, error=message)
        except ConflictError:  # taken over by another attempt: its outcome stands, its files stay
            raise ChunkBusyError(f"chunk {chunk.id} was taken over by another commit attempt") from None
        remove_staged(writer, chunk)
        raise LateDataError(message)
    late_writer = writer.writer_for(writer.catalog.companion(table, TableKind.LATE))
    for f in late:
        late_chunk = late_writer.reserve(f"late:{chunk.id}:{f.path}")
        if late_chunk.state is ChunkState.RESERVED:
            data = read_file(table, f.path)
            # new columns the file brings (schema evolution) come to the late table with it
            late_writer.stage_parsed(late_chunk, Parsed(data, [], columns=f.columns))
        late_writer.commit(late_chunk.id)
    return sum(f.rows for f in late)


def _late_because(writer: Writer) -> str:
    table = writer.table
    if table.oldest_kept is None:
        return "sealed"
    why = "max-age" if table.oldest_kept == table.max_age else "its retention"
    return f"sealed, or ended more than {format_duration(table.oldest_kept)} ago ({why})"


def _late_to_dead_letter(writer: Writer, chunk: Chunk, late: Sequence[StagedFile]) -> int:
    # One dead-letter chunk per late file, like the divert policy's late-table chunks: a
    # retry that finds more late files (another roll meanwhile) adds only those.
    table = writer.table
    for f in late:
        data = read_file(table, f.path)
        reason = (
            f"late: partition {iso(f.period) if f.period else '?'} of {table.name} is "
            f"{_late_because(writer)}, and the table rejects late data"
        )
        letters = [
            DeadLetter(None, reason, json.dumps(row, default=str).encode(), "late")
            for row in data.to_pylist()
        ]
        dlq_writer, dlq_chunk = stage_dead_letters(
            writer, chunk, letters, f"late-dead-letter:{chunk.id}:{f.path}"
        )
        dlq_writer.commit(dlq_chunk.id)
    return sum(f.rows for f in late)

"""Turning a spooled upload or an events batch into a chunk's staged files.

An upload is streamed to a spool file in the table's staging area first (never held in
memory), then parsed: JSON lines in batches of ``batch_rows`` lines, each staged as its own
Parquet file, so one upload's memory stays bounded; CSV and Parquet whole (a quoted CSV field
may span lines). The spool file's name starts with ``.<chunk id>``, so housekeeping removes
one left behind by a crashed server together with the chunk's other files.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.api.errors import BodyError
from ingest.chunks import ChunkWriter, DeadLetter, write_staged_files
from ingest.formats import Format, loads_json
from ingest.records import Parsed
from metastore import storage
from metastore.delta.files import remove_file
from metastore.delta.layout import STAGING_DIR
from metastore.models import Chunk, Column, StagedFile


def spool_path(writer: ChunkWriter, chunk: Chunk) -> Path:
    """Where an upload's body is kept while it arrives: beside the staged files on a local disk
    (housekeeping removes what a crash left), on this host's disk for a table in a bucket."""
    name = f".{chunk.id}-upload-{uuid.uuid4().hex[:8]}.tmp"
    if storage.is_remote(writer.table.location):
        return writer.warehouse.local_dir / "_spool" / name
    return Path(writer.table.location) / STAGING_DIR / name


def _jsonl_batches(path: Path, batch_rows: int) -> Iterator[tuple[int, bytes]]:
    """``(lines before the batch, the batch)`` over whole lines of ``path`` (split at LF only)."""
    lines: list[bytes] = []
    offset = 0
    with path.open("rb") as f:
        for line in f:
            lines.append(line)
            if len(lines) >= batch_rows:
                yield offset, b"".join(lines)
                offset += len(lines)
                lines = []
    if lines or offset == 0:
        yield offset, b"".join(lines)


def _where(fmt: Format) -> str:
    return "row" if fmt is Format.PARQUET else "line"


def _fail(fmt: Format, bad: list[DeadLetter], what: str | None = None) -> BodyError:
    first = bad[0]
    return BodyError(
        f"{what or _where(fmt)} {first.position}: {first.reason}; nothing was staged "
        "(fix the data and upload again, or abort the chunk)",
        line=first.position,
    )


@dataclass(frozen=True)
class Staged:
    """A chunk's data staged, and what parsing it found: the fields of the records the table has no
    column for (not written) and the DECIMAL columns whose values were rounded, each with a count;
    the fields that became new columns (schema evolution: name → SQL type); the ignored fields
    that evolution could not make columns, and why."""

    chunk: Chunk
    ignored: dict[str, int] = field(default_factory=dict)
    rounded: dict[str, int] = field(default_factory=dict)
    new_columns: dict[str, str] = field(default_factory=dict)
    refused: dict[str, str] = field(default_factory=dict)

    def answer(self) -> dict[str, Any]:
        """The fields of an API answer that report them."""
        return {
            "ignored_fields": self.ignored,
            "rounded_values": self.rounded,
            "new_columns": self.new_columns,
            "refused_fields": self.refused,
        }


def stage_upload(
    writer: ChunkWriter,
    chunk: Chunk,
    spool: Path,
    fmt: Format,
    batch_rows: int,
    source: str,
    digest: str | None = None,
) -> Staged:
    """Parse the spooled upload and record it as the chunk's data (replacing an earlier upload's).

    The new columns an earlier batch of a JSON-lines upload brought (schema evolution) are the
    later batches' too, in the type the first batch gave them.

    Raises:
        BodyError: a record is malformed and the table has no dead-letter table; nothing staged.
    """
    table, warehouse = writer.table, writer.warehouse
    attempt = uuid.uuid4().hex[:8]  # new names per attempt: never overwrite a staged upload's files
    files: list[StagedFile] = []
    bad: list[DeadLetter] = []
    try:
        if fmt is Format.JSONL:
            batches: Iterator[tuple[int, Any]] = _jsonl_batches(spool, batch_rows)
        elif fmt is Format.PARQUET:
            batches = iter([(0, spool)])
        else:
            batches = iter([(0, spool.read_bytes())])
        limits = writer.validator()
        records = 0
        ignored: Counter[str] = Counter()
        rounded: Counter[str] = Counter()
        refused: dict[str, str] = {}
        added: tuple[Column, ...] = ()
        for n, (offset, content) in enumerate(batches):
            parsed = writer.parse(content, fmt, added)
            added = parsed.new_columns(writer.table.columns)
            refused.update(parsed.refused)
            records += parsed.good.num_rows + len(parsed.bad)
            ignored.update(parsed.ignored)
            rounded.update(parsed.rounded)
            limits.check_rows(records)  # each batch alone is under the limit; the chunk must be too
            bad += [DeadLetter(offset + b.position, b.reason, b.raw.encode(), source) for b in parsed.bad]
            if bad and not table.dead_letter:
                raise _fail(fmt, bad)
            files += write_staged_files(
                warehouse, table, f"{chunk.id}-{attempt}-{n}", parsed.good, parsed.columns
            )
        if records == 0:
            raise BodyError("the upload holds no records; nothing was staged")
        return Staged(
            writer.stage_files(chunk, files, bad, digest, read_again=False),  # (the route read it)
            dict(ignored),
            dict(rounded),
            {c.name: c.sql_type for c in added},
            refused,
        )
    except BaseException:
        for f in files:
            remove_file(table, f.path)
        raise


def parse_json_body(
    data: bytes | str, what: str = "body", line: int | None = None, field: str = "body"
) -> Any:
    """``data`` parsed as JSON, or a :class:`BodyError` (400) naming ``what`` and the fault: not
    UTF-8, not JSON (where), nested too deep, a number too long to read — never an exception
    that would answer 500. ``line``: the line (event) to name; default, the JSON's own line."""
    try:
        return loads_json(data)
    except UnicodeDecodeError as exc:
        raise BodyError(f"{what} is not UTF-8: byte {exc.start + 1}", line=line, field=field) from None
    except json.JSONDecodeError as exc:
        at = f"line {exc.lineno} column {exc.colno}" if line is None else f"column {exc.colno}"
        raise BodyError(
            f"{what} is not JSON: {exc.msg} at {at}", line=exc.lineno if line is None else line, field=field
        ) from None
    except (ValueError, RecursionError) as exc:
        raise BodyError(f"{what} cannot be read: {json_fault(exc)}", line=line, field=field) from None


def json_fault(exc: BaseException) -> str:
    """Why JSON that parsed as far as the parser's limits could not be read, for a message: Python
    reads integers of at most 4300 digits (CVE-2020-10735), and nesting as deep as its stack."""
    if isinstance(exc, RecursionError):
        return "it is nested too deep"
    digits = _DIGITS.search(str(exc))
    if digits:
        return f"a number of {digits[2]} digits (at most {digits[1]} are read)"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


_DIGITS = re.compile(r"limit \((\d+) digits\).*value has (\d+) digits")


def events_to_records(body: Any, kind: str | None) -> tuple[list[Any], str]:
    """The records of an events batch: Flume's ``[{"headers": {…}, "body": "<record JSON>"}]``
    or a plain JSON array of records. ``kind`` (flume, records) forces one; by default a batch
    is Flume's when every element is an object with a ``body`` and no keys but headers and body.
    """
    if not isinstance(body, list):
        raise BodyError(f"expected a JSON array of events, got {_json_type(body)}")
    flume = kind == "flume" or (
        kind is None
        and bool(body)
        and all(isinstance(e, dict) and "body" in e and set(e) <= {"headers", "body"} for e in body)
    )
    if not flume:
        return body, "records"
    records = []
    for n, event in enumerate(body, start=1):
        if not isinstance(event, dict) or "body" not in event:
            raise BodyError(
                f"event {n}: a Flume event is an object with a 'body'", line=n, field=f"body[{n - 1}]"
            )
        headers = event.get("headers", {})
        if headers is not None and not isinstance(headers, dict):
            raise BodyError(f"event {n}: 'headers' must be an object", line=n, field=f"body[{n - 1}].headers")
        value = event["body"]
        if isinstance(value, str):
            value = parse_json_body(value, f"event {n}: body", line=n, field=f"body[{n - 1}].body")
        records.append(value)
    return records, "flume"


def records_to_jsonl(records: list[Any]) -> bytes:
    """One record per line, so line n of the chunk is event n of the batch (BodyError: a record
    nested deeper than Python's encoder goes)."""
    lines = []
    for n, record in enumerate(records, start=1):
        try:
            lines.append(json.dumps(record, separators=(",", ":")).encode())
        except RecursionError:
            raise BodyError(
                f"event {n}: nested too deep to be a record", line=n, field=f"body[{n - 1}]"
            ) from None
    return b"\n".join(lines)


def stage_events(
    writer: ChunkWriter, chunk: Chunk, records: list[Any], source: str, digest: str | None = None
) -> Staged:
    """Validate the batch's records and stage them as the chunk's data (as :func:`stage_upload`)."""
    parsed: Parsed = writer.parse(records_to_jsonl(records), Format.JSONL)
    if parsed.bad and not writer.table.dead_letter:
        first = parsed.bad[0]
        raise BodyError(
            f"event {first.position}: {first.reason}; nothing was committed",
            line=first.position,
            field=f"body[{first.position - 1}]",
        )
    new = parsed.new_columns(writer.table.columns)
    staged = writer.stage_parsed(chunk, parsed, source=source, digest=digest)
    return Staged(staged, parsed.ignored, parsed.rounded, {c.name: c.sql_type for c in new}, parsed.refused)


def _json_type(value: Any) -> str:
    return {dict: "an object", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )

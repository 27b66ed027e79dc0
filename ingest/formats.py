"""Parse chunk content (JSON lines, CSV, Parquet, Arrow) into Arrow in the table's schema.

Each format is read into records (or Arrow batches), which :class:`~ingest.records.RecordValidator`
checks against the schema (``ingest/records.py``): a bad one yields a :class:`~ingest.records.BadRecord`
naming its position (line or row number, 1-based) and the fault, so the caller can fail the
chunk with that message or send the record to the dead-letter table.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ingest.errors import MalformedChunkError
from ingest.records import BadRecord, Parsed, RecordValidator, unexpected, validate_batches
from metastore.errors import UserInputError


class Format(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"

    @classmethod
    def guess(cls, path: str | Path) -> Format:
        suffix = Path(path).suffix.lower()
        return {".csv": cls.CSV, ".parquet": cls.PARQUET, ".pq": cls.PARQUET}.get(suffix, cls.JSONL)


def as_format(fmt: Format | str) -> Format:
    """``fmt`` as a :class:`Format` (``"jsonl"`` works as well as ``Format.JSONL``)."""
    try:
        return Format(fmt)
    except ValueError:
        known = ", ".join(f.value for f in Format)
        raise UserInputError(f"format must be one of {known}; got {fmt!r}") from None


_BOM = b"\xef\xbb\xbf"


def _lines(data: bytes) -> Iterator[tuple[int, bytes]]:
    """Numbered lines, split at LF only (CRLF is fine): JSON strings may hold U+2028, U+2029, U+0085."""
    for n, line in enumerate(data.removeprefix(_BOM).split(b"\n"), start=1):
        yield n, line.removesuffix(b"\r")


def loads_json(text: str | bytes) -> Any:
    """``json.loads``, fast: orjson parses, and anything it refuses goes to ``json.loads``.

    orjson is about 4x faster but stricter (no NaN/Infinity, no integers beyond 64 bits, no
    lone surrogates, UTF-8 only), so whatever it refuses is parsed again by the standard
    library: the result, and the error message of a bad record, are exactly json.loads'.
    Bytes must be UTF-8 (``UnicodeDecodeError`` otherwise), as orjson wants them; parsing
    them without a decoded copy is the fast path for Kafka record values.
    """
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if "recursion" in str(exc):  # json.loads would only exhaust Python's stack on it
            raise json.JSONDecodeError(
                f"nested more than {MAX_JSON_DEPTH} levels deep", _as_text(text), exc.pos
            ) from None
    try:
        return json.loads(_as_text(text))
    except RecursionError:
        message = f"nested more than {MAX_JSON_DEPTH} levels deep"
        raise json.JSONDecodeError(message, _as_text(text), 0) from None


# orjson's own limit; json.loads refuses a little less deep (Python's recursion limit)
MAX_JSON_DEPTH = 1024


def _as_text(text: str | bytes) -> str:
    return text.decode("utf-8") if isinstance(text, bytes) else text


def parse_jsonl(data: bytes, v: RecordValidator) -> Parsed:
    for n, raw in _lines(data):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            text = raw.decode("utf-8", errors="replace")
            v.bad.append(BadRecord(n, f"invalid UTF-8 at byte {exc.start + 1} of the line", text))
            continue
        if not line.strip():
            continue
        try:
            record = loads_json(line)
        except json.JSONDecodeError as exc:
            v.bad.append(BadRecord(n, f"invalid JSON: {exc.msg} at column {exc.colno}", line[:4096]))
            continue
        except Exception as exc:  # see unexpected()
            v.bad.append(BadRecord(n, unexpected(exc), line[:4096]))
            continue
        v.add(n, record, line)
    return v.result()


def csv_reader(text: str) -> Any:
    """The csv module's reader of ``text``, every CSV record of streampart read by it.

    Field sizes are bounded by max_value_bytes (a bad record) and the request's size, not by the
    csv module's 128 KiB default, whose csv.Error would fail the whole chunk at that line. The
    limit is the process's (one setting of the csv module), so it is set here, by the one reader,
    whatever process it runs in (a Spark Python worker imports what its task calls, nothing more).
    """
    csv.field_size_limit(2**31 - 1)
    return csv.reader(io.StringIO(text))


_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape


def _csv_text(fields: list[str]) -> str:
    return ",".join(fields).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def parse_csv(data: bytes, v: RecordValidator) -> Parsed:
    try:
        text, undecodable = data.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        # keep going so that each record with invalid UTF-8 is a bad record of its own
        text, undecodable = data.decode("utf-8-sig", errors="surrogateescape"), True
    reader = csv_reader(text)
    try:
        header = next(reader)
    except StopIteration:
        return v.result()
    if undecodable and any(_UNDECODABLE.search(h) for h in header):
        raise MalformedChunkError(f"line 1: CSV header is not valid UTF-8: {_csv_text(header)}")
    header = [h.strip() for h in header]
    unknown = [h for h in header if h not in v.names]
    if unknown and v.new_fields is not None and v.new_fields.enabled:  # schema evolution: new columns
        v = v.extended(v.new_fields.from_names(unknown))
        refused = v.new_fields.refused if v.new_fields is not None else {}
        if refused:
            why = "; ".join(f"{name!r}: {reason}" for name, reason in refused.items())
            raise MalformedChunkError(f"line 1: CSV header names field(s) that cannot be columns: {why}")
    elif unknown:
        raise MalformedChunkError(f"line 1: CSV header names unknown column(s): {', '.join(unknown)}")
    failed_at = -1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:  # this line is bad; the reader goes on after it
            if reader.line_num == failed_at:  # it did not move on: give the rest up as one bad record
                break
            failed_at = reader.line_num
            v.bad.append(BadRecord(reader.line_num, f"not a CSV record: {exc}", ""))
            continue
        n = reader.line_num
        if not fields:
            continue
        raw = ",".join(fields)
        if undecodable and _UNDECODABLE.search(raw):
            i = next(i for i, f in enumerate(fields) if _UNDECODABLE.search(f))
            where = f"column {header[i]!r}" if len(fields) == len(header) else f"field {i + 1}"
            v.bad.append(BadRecord(n, f"{where}: invalid UTF-8", _csv_text(fields)))
            continue
        if len(fields) != len(header):
            v.bad.append(BadRecord(n, f"expected {len(header)} fields, got {len(fields)}", raw))
            continue
        v.add(n, dict(zip(header, fields, strict=True)), raw, empty_is_null=True)
    return v.result()


# Why 65,536 rows: a batch is validated as Arrow arrays (or row by row when it needs Python's
# conversions), so memory stays bounded by one batch of Python rows whatever the file holds:
# a few kilobytes of Parquet can encode millions of constant rows.
PARQUET_BATCH_ROWS = 65_536


def parse_parquet(data: bytes | Path, v: RecordValidator) -> Parsed:
    """Parquet in batches: columns that already fit the table are checked as Arrow arrays; a batch
    that needs conversions (strings to numbers, say) or holds bad values goes row by row, so that
    each bad row is named."""
    import pyarrow.parquet as pq

    try:
        f = pq.ParquetFile(pa.BufferReader(data) if isinstance(data, bytes) else data)
    except (pa.ArrowInvalid, OSError) as exc:
        raise MalformedChunkError(f"not a readable Parquet file: {exc}") from None
    present = set(f.schema_arrow.names)
    missing = [c.name for c in v.columns if c.name not in present and not c.nullable]
    if missing:
        raise MalformedChunkError(f"Parquet file lacks required column(s): {', '.join(missing)}")
    v.check_rows(f.metadata.num_rows)  # before reading a row: the file says how many it holds
    v, ignored = _arrow_fields(f.schema_arrow, v, f.metadata.num_rows)
    wanted = [c.name for c in v.columns if c.name in present]
    batches = f.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=wanted)
    try:
        return validate_batches(batches, v, ignored)
    except (pa.ArrowInvalid, OSError) as exc:  # a damaged row group
        raise MalformedChunkError(f"Parquet file cannot be read: {exc}") from None


def parse_arrow(data: pa.Table, v: RecordValidator) -> Parsed:
    """An Arrow table from Python code, checked as a Parquet file is (in batches, as Arrow)."""
    v.check_rows(data.num_rows)
    missing = [c.name for c in v.columns if c.name not in data.column_names and not c.nullable]
    if missing:
        raise MalformedChunkError(f"the data lacks required column(s): {', '.join(missing)}")
    v, ignored = _arrow_fields(data.schema, v, data.num_rows)
    return validate_batches(iter(data.to_batches(max_chunksize=PARQUET_BATCH_ROWS)), v, ignored)


def _arrow_fields(schema: pa.Schema, v: RecordValidator, rows: int) -> tuple[RecordValidator, dict[str, int]]:
    """The validator for data of the Arrow ``schema`` (with the new columns its fields bring, if the
    table's schema evolves), and the fields it leaves out, each with ``rows`` (see :class:`Parsed`)."""
    if v.new_fields is not None and v.new_fields.enabled:
        v = v.extended(v.new_fields.from_arrow(schema), v.new_fields.arrow_widenings(schema))
    return v, {name: rows for name in schema.names if name not in v.names}


def parse(data: bytes, fmt: Format | str, v: RecordValidator) -> Parsed:
    fmt = as_format(fmt)
    if fmt is Format.JSONL:
        return parse_jsonl(data, v)
    if fmt is Format.CSV:
        return parse_csv(data, v)
    return parse_parquet(data, v)

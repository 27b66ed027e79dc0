"""Parse chunk content (JSON lines, CSV, Parquet) into Arrow in the table's schema.

Every record is checked against the schema; a bad one yields a :class:`BadRecord` naming its
position (line or row number, 1-based) and the fault, so the caller can fail the chunk with
that message or send the record to the dead-letter table.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from enum import StrEnum
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa

from ingest.errors import MalformedChunkError
from metastore.models import Column
from metastore.warehouse import arrow_type, data_schema


class Format(StrEnum):
    JSONL = "jsonl"
    CSV = "csv"
    PARQUET = "parquet"

    @classmethod
    def guess(cls, path: str | Path) -> Format:
        suffix = Path(path).suffix.lower()
        return {".csv": cls.CSV, ".parquet": cls.PARQUET, ".pq": cls.PARQUET}.get(suffix, cls.JSONL)


@dataclass(frozen=True)
class BadRecord:
    position: int  # 1-based line (JSON lines, CSV) or row (Parquet)
    reason: str
    raw: str


@dataclass(frozen=True)
class Parsed:
    good: pa.Table
    bad: list[BadRecord]


class _FieldError(ValueError):
    pass


_INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}


def _to_int(kind: str) -> Callable[[Any], int]:
    lo, hi = _INT_RANGES[kind]

    def convert(v: Any) -> int:
        if isinstance(v, bool):
            raise _FieldError(f"expected an integer, got {json.dumps(v)}")
        if isinstance(v, float):
            if not v.is_integer():
                raise _FieldError(f"expected an integer, got {v!r}")
            v = int(v)
        elif isinstance(v, str):
            try:
                v = int(v.strip())
            except ValueError:
                raise _FieldError(f"expected an integer, got {v!r}") from None
        elif not isinstance(v, int):
            raise _FieldError(f"expected an integer, got {type(v).__name__}")
        if not lo <= v <= hi:
            raise _FieldError(f"{v} is out of range for {kind}")
        return v

    return convert


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise _FieldError(f"expected a number, got {json.dumps(v)}")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise _FieldError(f"expected a number, got {v!r}") from None
    raise _FieldError(f"expected a number, got {type(v).__name__}")


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise _FieldError(f"expected true or false, got {v!r}")


def _to_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return json.dumps(v)
    raise _FieldError(f"expected a string, got {type(v).__name__}")


def _to_binary(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    raise _FieldError(f"expected a string, got {type(v).__name__}")


def _to_timestamp(v: Any) -> datetime:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if isinstance(v, int | float) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise _FieldError(f"{v!r} is not a time")
        return datetime.fromtimestamp(v, UTC)
    if isinstance(v, str):
        try:
            ts = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            if _JSON_NUMBER.fullmatch(v.strip()):  # epoch seconds as text (CSV): as a JSON number
                return _to_timestamp(json.loads(v))
            raise _FieldError(f"expected an ISO-8601 timestamp, got {v!r}") from None
        return ts if ts.tzinfo else ts.replace(tzinfo=UTC)
    raise _FieldError(f"expected an ISO-8601 timestamp, got {type(v).__name__}")


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _to_date(v: Any) -> date:
    if isinstance(v, date) and not isinstance(v, datetime):
        return v
    if isinstance(v, str):
        try:
            return date.fromisoformat(v.strip())
        except ValueError:
            raise _FieldError(f"expected an ISO-8601 date, got {v!r}") from None
    raise _FieldError(f"expected an ISO-8601 date, got {type(v).__name__}")


# Quantizing needs the digits of DECIMAL(38,s), not the default context's 28.
_DECIMAL_CONTEXT = Context(prec=38, rounding=ROUND_HALF_EVEN)


def _to_decimal(precision: int, scale: int) -> Callable[[Any], Decimal]:
    quantum = Decimal(1).scaleb(-scale)

    def convert(v: Any) -> Decimal:
        if isinstance(v, bool) or not isinstance(v, int | float | str | Decimal):
            raise _FieldError(f"expected a decimal number, got {type(v).__name__}")
        try:
            d = Decimal(str(v))
        except InvalidOperation:
            raise _FieldError(f"expected a decimal number, got {v!r}") from None
        if not d.is_finite():
            raise _FieldError(f"expected a finite decimal number, got {v!r}")
        try:
            d = d.quantize(quantum, context=_DECIMAL_CONTEXT)
        except InvalidOperation:  # more digits than any decimal holds
            raise _FieldError(f"{v} does not fit DECIMAL({precision},{scale})") from None
        if len(d.as_tuple().digits) > precision:
            raise _FieldError(f"{v} does not fit DECIMAL({precision},{scale})")
        return d

    return convert


def converter(column: Column) -> Callable[[Any], Any]:
    t = column.type
    if t in _INT_RANGES:
        return _to_int(t)
    if t.startswith("decimal("):
        p, sc = t[len("decimal(") : -1].split(",")
        return _to_decimal(int(p), int(sc))
    return {
        "float": _to_float,
        "double": _to_float,
        "boolean": _to_bool,
        "string": _to_str,
        "binary": _to_binary,
        "timestamp": _to_timestamp,
        "date": _to_date,
    }[t]


def _byte_size(value: Any) -> int:
    """UTF-8 size of a string or binary value (0 for other values)."""
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        if value.isascii():  # one byte per character, without encoding a copy
            return len(value)
        try:
            return len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from a JSON "\ud800" escape
            raise _FieldError(f"not valid Unicode: unpaired surrogate at character {exc.start + 1}") from None
    return 0


class RecordValidator:
    """Turns records (mappings of column → value) into columns of checked Python values.

    Args:
        columns: the table's data columns.
        required: extra columns that must not be null (the time column).
        max_value_bytes: a string or binary value longer than this is a bad record.
    """

    def __init__(
        self, columns: Sequence[Column], required: Sequence[str] = (), max_value_bytes: int = 1 << 20
    ):
        self.columns = tuple(columns)
        self.schema = data_schema(self.columns)
        self._conv = [converter(c) for c in self.columns]
        self._required = [not c.nullable or c.name in required for c in self.columns]
        self._max = max_value_bytes
        self._values: list[list[Any]] = [[] for _ in self.columns]
        self.bad: list[BadRecord] = []

    def add(self, position: int, record: Any, raw: str, empty_is_null: bool = False) -> None:
        if not isinstance(record, dict):
            self.bad.append(BadRecord(position, f"expected a JSON object, got {type(record).__name__}", raw))
            return
        row: list[Any] = []
        for col, conv, required in zip(self.columns, self._conv, self._required, strict=True):
            v = record.get(col.name)
            if v is None or (empty_is_null and v == "" and col.type != "string"):
                if required:
                    self.bad.append(
                        BadRecord(position, f"column {col.name!r} is required but missing or null", raw)
                    )
                    return
                row.append(None)
                continue
            try:
                value = conv(v)
                size = _byte_size(value)
            except _FieldError as exc:
                self.bad.append(BadRecord(position, f"column {col.name!r}: {exc}", raw))
                return
            except (OverflowError, OSError, ValueError) as exc:
                self.bad.append(BadRecord(position, f"column {col.name!r}: {exc}", raw))
                return
            if size > self._max:
                self.bad.append(
                    BadRecord(
                        position,
                        f"column {col.name!r}: value of {size} bytes exceeds {self._max}",
                        raw[:1024],
                    )
                )
                return
            row.append(value)
        for values, v in zip(self._values, row, strict=True):
            values.append(v)

    def result(self) -> Parsed:
        arrays = [
            pa.array(values, type=arrow_type(c.type))
            for values, c in zip(self._values, self.columns, strict=True)
        ]
        return Parsed(pa.Table.from_arrays(arrays, schema=self.schema), self.bad)


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
    except orjson.JSONDecodeError:
        return json.loads(text.decode("utf-8") if isinstance(text, bytes) else text)


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
            v.bad.append(BadRecord(n, f"invalid JSON: {exc.msg} at column {exc.colno}", line))
            continue
        v.add(n, record, line)
    return v.result()


_UNDECODABLE = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by surrogateescape


def _csv_text(fields: list[str]) -> str:
    return ",".join(fields).encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def parse_csv(data: bytes, v: RecordValidator) -> Parsed:
    try:
        text, undecodable = data.decode("utf-8-sig"), False
    except UnicodeDecodeError:
        # keep going so that each record with invalid UTF-8 is a bad record of its own
        text, undecodable = data.decode("utf-8-sig", errors="surrogateescape"), True
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader)
    except StopIteration:
        return v.result()
    if undecodable and any(_UNDECODABLE.search(h) for h in header):
        raise MalformedChunkError(f"line 1: CSV header is not valid UTF-8: {_csv_text(header)}")
    header = [h.strip() for h in header]
    unknown = [h for h in header if h not in {c.name for c in v.columns}]
    if unknown:
        raise MalformedChunkError(f"line 1: CSV header names unknown column(s): {', '.join(unknown)}")
    for fields in reader:
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


def parse_parquet(data: bytes | Path, v: RecordValidator) -> Parsed:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(pa.BufferReader(data) if isinstance(data, bytes) else data)
    except (pa.ArrowInvalid, OSError) as exc:
        raise MalformedChunkError(f"not a readable Parquet file: {exc}") from None
    missing = [c.name for c in v.columns if c.name not in table.column_names and not c.nullable]
    if missing:
        raise MalformedChunkError(f"Parquet file lacks required column(s): {', '.join(missing)}")
    # Row-wise validation keeps one code path for every format and names the bad row.
    for n, record in enumerate(table.to_pylist(), start=1):
        v.add(n, record, json.dumps(record, default=str)[:4096])
    return v.result()


def parse(data: bytes, fmt: Format, v: RecordValidator) -> Parsed:
    if fmt is Format.JSONL:
        return parse_jsonl(data, v)
    if fmt is Format.CSV:
        return parse_csv(data, v)
    return parse_parquet(data, v)

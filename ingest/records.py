"""Records checked against a table's schema: each value converted to its column's type, or a bad record.

Each field's conversion to its column's type: ``ingest/conversions.py``.

:class:`RecordValidator` turns records (mappings of column → value, from any format) into Arrow
columns of the table's schema; a record that cannot be written yields a :class:`BadRecord`
naming its position (line or row number, 1-based) and the fault, so the caller can fail the
chunk with that message or send the record to the dead-letter table. Arrow data is checked a
batch at a time as Arrow arrays where it fits as it is (:func:`validate_batches`), row by row
where it does not. The formats that produce the records: ``ingest/formats.py``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pyarrow as pa

from ingest.conversions import FieldError, byte_size, converter
from ingest.errors import MalformedChunkError
from ingest.evolution import ExtraFields, NewFields, widened_type
from ingest.keys import op_refusal, ops_valid
from metastore.delta.arrow import arrow_type, data_schema
from metastore.models import Column, Keys, SchemaEvolution, iso, widening_refusal


@dataclass(frozen=True)
class BadRecord:
    position: int  # 1-based line (JSON lines, CSV) or row (Parquet)
    reason: str
    raw: str


@dataclass(frozen=True)
class Parsed:
    good: pa.Table
    bad: list[BadRecord]
    # fields of the records that the table has no column for: field → how many records had it
    # (they are not written; the caller says so rather than dropping them in silence)
    ignored: dict[str, int] = field(default_factory=dict)
    # DECIMAL(p,s) columns → how many written values had more decimals than s and were rounded
    # (half to even, as Spark's cast); the caller says so, as for ignored fields
    rounded: dict[str, int] = field(default_factory=dict)
    # the columns of ``good`` when they are not the table's: its columns, then those the records
    # bring (schema evolution, ``ingest/evolution.py``); None: the table's own
    columns: tuple[Column, ...] | None = None
    # ignored fields that schema evolution did not make columns, and why (a name no reader can
    # hold, only nulls, …): the caller reports the reason with the count
    refused: dict[str, str] = field(default_factory=dict)

    def new_columns(self, table_columns: Sequence[Column]) -> tuple[Column, ...]:
        """The columns of ``good`` that ``table_columns`` lack."""
        if self.columns is None:
            return ()
        known = {c.name for c in table_columns}
        return tuple(c for c in self.columns if c.name not in known)


@dataclass(frozen=True)
class TimeBounds:
    """The event times a column may hold (an event-time table's time column): outside, a bad record."""

    column: str
    earliest: datetime
    latest: datetime
    why_latest: str = ""  # how the latest bound came about, for the bad record's reason

    def fault(self, value: datetime) -> str | None:
        if value < self.earliest:
            return f"event time {iso(value)} is before {iso(self.earliest)}, the earliest accepted"
        if value > self.latest:
            because = f" ({self.why_latest})" if self.why_latest else ""
            return f"event time {iso(value)} is after {iso(self.latest)}, the latest accepted now{because}"
        return None


class RecordValidator:
    """Turns records (mappings of column → value) into columns of checked Python values.

    Args:
        columns: the table's data columns.
        required: extra columns that must not be null (the time column).
        max_value_bytes: a string or binary value longer than this is a bad record.
        max_rows: more records than this (good and bad) fail the chunk; None: no limit.
        time_bounds: the range of event times the time column may hold (event-time tables).
        new_fields: what fields the table lacks may become (schema evolution); None: they are
            ignored (counted), as with evolution ``none``.
        added: the columns at the end of ``columns`` that the table lacks: new ones the chunk's
            earlier batches brought, or ones its Arrow schema or CSV header brings (:meth:`extended`).
    """

    def __init__(
        self,
        columns: Sequence[Column],
        required: Sequence[str] = (),
        max_value_bytes: int = 1 << 20,
        max_rows: int | None = None,
        time_bounds: TimeBounds | None = None,
        new_fields: NewFields | None = None,
        added: Sequence[Column] = (),
        ops: Keys | None = None,
    ):
        self.columns = tuple(columns)
        # a keyed table's op column and the values it may hold (others: a bad record)
        self.ops = ops if ops is not None and ops.op_column is not None else None
        self._op_values: frozenset[str] = frozenset()
        if self.ops is not None:
            self._op_values = frozenset((*self.ops.upsert_ops, *self.ops.delete_ops))
        self.new_fields = new_fields
        self.added = tuple(added)  # the columns of ``columns`` the table lacks (an earlier batch's new ones)
        self.widened: dict[str, str] = {}  # columns values widened (add-and-widen): name → new type
        self._evolving = new_fields is not None and new_fields.enabled
        # evolving: per unknown field, the kinds of its values, and its values by good row
        self._extra = ExtraFields()
        self.schema = data_schema(self.columns)
        self._conv = [converter(c, self._rounding(c.name)) for c in self.columns]
        self._required_names = tuple(required)
        self._required = [not c.nullable or c.name in required for c in self.columns]
        self._max = max_value_bytes
        self.max_rows = max_rows
        self.time_bounds = time_bounds
        self._bounded = [time_bounds is not None and c.name == time_bounds.column for c in self.columns]
        self._values: list[list[Any]] = [[] for _ in self.columns]
        self.names = frozenset(c.name for c in self.columns)  # the columns' names
        self.ignored: Counter[str] = Counter()
        self.rounded: Counter[str] = Counter()  # counted once the record is written
        self._rounded_here: list[str] = []  # columns of the record being added whose value was rounded
        self._added = 0
        self._good = 0
        self.bad: list[BadRecord] = []

    def _rounding(self, column: str) -> Callable[[], None]:
        return lambda: self._rounded_here.append(column)

    def fresh(self) -> RecordValidator:
        """A new, empty validator with the same columns and limits."""
        return RecordValidator(
            self.columns,
            self._required_names,
            self._max,
            self.max_rows,
            self.time_bounds,
            None,
            self.added,
            self.ops,
        )

    def extended(self, new: Sequence[Column], wider: dict[str, str] | None = None) -> RecordValidator:
        """A new, empty validator that also takes the ``new`` columns (nullable, at the end), with the
        columns named in ``wider`` widened to the type given (``add-and-widen``)."""
        if not new and not wider:
            return self
        columns = [
            Column(name=c.name, type=wider[c.name], nullable=c.nullable) if wider and c.name in wider else c
            for c in self.columns
        ]
        v = RecordValidator(
            (*columns, *new),
            self._required_names,
            self._max,
            self.max_rows,
            self.time_bounds,
            self.new_fields,
            (*self.added, *new),
            self.ops,
        )
        v.widened.update(wider or {})
        return v

    def check_rows(self, rows: int) -> None:
        """Fail the chunk if it would hold more than ``max_rows`` records."""
        if self.max_rows is not None and rows > self.max_rows:
            raise MalformedChunkError(
                f"the chunk holds {rows} records or more, over the limit of {self.max_rows} "
                "(chunk.max_rows); split the data into several chunks; nothing was committed"
            )

    def add(self, position: int, record: Any, raw: str, empty_is_null: bool = False) -> None:
        self._added += 1
        self._rounded_here.clear()
        self.check_rows(self._added)
        if not isinstance(record, dict):
            self.bad.append(BadRecord(position, f"expected a JSON object, got {type(record).__name__}", raw))
            return
        extra: dict[str, Any] | None = None
        if not record.keys() <= self.names:
            if self._evolving:
                extra = {k: v for k, v in record.items() if k not in self.names}
            else:
                self.ignored.update(record.keys() - self.names)
        row: list[Any] = []
        wider: list[tuple[int, str]] = []  # (column, type): columns this record's values widen
        for i, (col, conv, required, bounded) in enumerate(
            zip(self.columns, self._conv, self._required, self._bounded, strict=True)
        ):
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
                try:
                    value = conv(v)
                except FieldError:
                    widened = self._widening(col, v)
                    if widened is None:
                        raise
                    value = converter(widened, self._rounding(col.name))(v)
                    wider.append((i, widened.type))
                size = byte_size(value)
            except FieldError as exc:
                self.bad.append(BadRecord(position, f"column {col.name!r}: {exc}", raw))
                return
            except (OverflowError, OSError, ValueError) as exc:
                self.bad.append(BadRecord(position, f"column {col.name!r}: {exc}", raw))
                return
            except Exception as exc:  # a poison value must not stop the chunk: see unexpected()
                self.bad.append(BadRecord(position, f"column {col.name!r}: {unexpected(exc)}", raw))
                return
            if bounded:
                assert self.time_bounds is not None
                fault = self.time_bounds.fault(value)
                if fault is not None:
                    self.bad.append(BadRecord(position, f"column {col.name!r}: {fault}", raw))
                    return
            if self.ops is not None and col.name == self.ops.op_column and value not in self._op_values:
                self.bad.append(BadRecord(position, op_refusal(self.ops, value), raw))
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
        for i, kind in wider:
            self._widen(i, kind)
        if extra:
            self._extra.keep(self._good, extra, position, raw)
        self._good += 1
        for values, v in zip(self._values, row, strict=True):
            values.append(v)
        self.rounded.update(self._rounded_here)

    def _widening(self, column: Column, value: Any) -> Column | None:
        """``column`` widened to hold ``value``, which does not fit it (``add-and-widen``); None: no."""
        if self.new_fields is None or not self.new_fields.widens or column.name in self._required_names:
            return None
        kind = widened_type(column.type, value)
        return None if kind is None else Column(name=column.name, type=kind, nullable=column.nullable)

    def _widen(self, index: int, kind: str) -> None:
        """Column ``index`` becomes ``kind`` (wider: every value kept so far fits it)."""
        column = self.columns[index]
        if column.type == kind:
            return
        wide = Column(name=column.name, type=kind, nullable=column.nullable)
        columns = list(self.columns)
        columns[index] = wide
        self.columns = tuple(columns)
        self.schema = data_schema(self.columns)
        self._conv[index] = converter(wide, self._rounding(wide.name))
        self.widened[wide.name] = kind

    def result(self) -> Parsed:
        arrays = [
            pa.array(values, type=arrow_type(c.type))
            for values, c in zip(self._values, self.columns, strict=True)
        ]
        good = pa.Table.from_arrays(arrays, schema=self.schema)
        kinds = self._extra.kinds
        if self.new_fields is None or not (kinds or self.added or self.widened):
            return Parsed(good, self.bad, dict(self.ignored), dict(self.rounded))
        new = self.new_fields.from_values(kinds) if kinds else []
        for name in self.new_fields.refused:
            self.ignored[name] += self._extra.present[name]
        good = self._with_new_columns(good, new)
        return Parsed(
            good,
            sorted(self.bad, key=lambda b: b.position),
            dict(self.ignored),
            dict(self.rounded),
            columns=(*self.columns, *new),
            refused=dict(self.new_fields.refused),
        )

    def _with_new_columns(self, good: pa.Table, new: Sequence[Column]) -> pa.Table:
        """``good`` with the ``new`` columns' values; a row whose value does not fit its column's
        type (inferred from the chunk's values) becomes a bad record, as for any column."""
        dropped: set[int] = set()
        for column in new:
            convert = converter(column)
            values: list[Any] = [None] * good.num_rows
            for index, value in self._extra.values.get(column.name, {}).items():
                try:
                    values[index] = convert(value)
                    size = byte_size(values[index])
                except (FieldError, OverflowError, ValueError) as exc:
                    reason = f"column {column.name!r} (new): {exc}"
                else:
                    if size <= self._max:
                        continue
                    reason = f"column {column.name!r} (new): value of {size} bytes exceeds {self._max}"
                values[index] = None
                if index not in dropped:
                    dropped.add(index)
                    position, raw = self._extra.origin[index]
                    self.bad.append(BadRecord(position, reason, raw[:4096]))
            good = good.append_column(
                pa.field(column.name, arrow_type(column.type)), pa.array(values, arrow_type(column.type))
            )
        if dropped:
            keep = pa.array([i not in dropped for i in range(good.num_rows)])
            good = good.filter(keep)
        return good


def unexpected(exc: BaseException) -> str:
    """The reason of a bad record whose parsing failed in a way nobody foresaw.

    A record that breaks a parser must become a dead letter (or a clear error), never stop the
    stream or the request: so the record-level parsers catch every exception and name it.
    """
    return f"cannot be parsed: {type(exc).__name__}: {str(exc)[:200]}"


def validate_batches(
    batches: Iterator[pa.RecordBatch], v: RecordValidator, ignored: dict[str, int]
) -> Parsed:
    """``batches`` checked against the validator's columns: each batch as Arrow arrays if every
    value fits as it is, row by row (naming each bad row) if not. ``ignored``: see :class:`Parsed`."""
    parts: list[pa.Table] = []
    rounded: Counter[str] = Counter()
    offset = 0
    for batch in batches:
        fast = _arrow_batch(batch, v)
        if fast is None:
            rows = v.fresh()
            for n, record in enumerate(batch.to_pylist(), start=offset + 1):
                rows.add(n, record, json.dumps(record, default=str)[:4096])
            part = rows.result()
            v.bad += part.bad
            rounded.update(part.rounded)
            fast = part.good
        parts.append(fast)
        offset += batch.num_rows
    good = pa.concat_tables(parts) if parts else v.schema.empty_table()
    columns = v.columns if v.added or v.widened else None
    refused = v.new_fields.refused if v.new_fields is not None else {}
    return Parsed(good, v.bad, ignored, dict(rounded), columns=columns, refused=dict(refused))


def _arrow_batch(batch: pa.RecordBatch, v: RecordValidator) -> pa.Table | None:
    """``batch`` in the table's schema if every value fits as it is (Arrow's safe casts only);
    None if any column needs Python's conversions or holds a bad value (null where required,
    a value that does not fit, a string over the size limit)."""
    import pyarrow.compute as pc

    arrays = []
    names = batch.schema.names
    for column, required, target in zip(v.columns, v._required, v.schema, strict=True):
        if column.name not in names:
            if required:
                return None
            arrays.append(pa.nulls(batch.num_rows, target.type))
            continue
        array = batch.column(column.name)
        if array.type != target.type:
            if not _fast_cast(array.type, target.type):
                return None
            try:
                array = array.cast(target.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                return None
        if required and array.null_count:
            return None
        if v.time_bounds is not None and column.name == v.time_bounds.column:
            low, high = pc.min_max(array).values()
            bounds = v.time_bounds
            if low.is_valid and (low.as_py() < bounds.earliest or high.as_py() > bounds.latest):
                return None
        if column.type in ("string", "binary") and len(array) - array.null_count:
            longest = pc.max(pc.binary_length(array)).as_py()
            if longest is not None and longest > v._max:
                return None
        if v.ops is not None and column.name == v.ops.op_column and not ops_valid(v.ops, array):
            return None  # the row-wise path names each record whose op is neither
        arrays.append(array)
    return pa.Table.from_arrays(arrays, schema=v.schema)


def _fast_cast(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether Arrow's safe cast gives what the row-wise conversions would (or fails instead)."""
    t = pa.types
    if t.is_dictionary(source):
        source = source.value_type
    if source == target:
        return True
    if t.is_integer(target) or t.is_floating(target):
        return t.is_integer(source) or t.is_floating(source)
    if t.is_decimal(target):
        return t.is_integer(source) or t.is_decimal(source)
    if t.is_timestamp(target):
        return t.is_timestamp(source)  # naive values are UTC, as in the row-wise path
    if t.is_string(target):
        return t.is_string(source) or t.is_large_string(source)
    if t.is_binary(target):
        return t.is_binary(source) or t.is_large_binary(source) or t.is_string(source)
    if t.is_date32(target):
        return t.is_date(source)
    return False


def column_mismatches(
    given: Sequence[Column], columns: Sequence[Column], evolution: SchemaEvolution = SchemaEvolution.NONE
) -> list[str]:
    """Why data with the columns ``given`` cannot be written to a table of ``columns`` whole, matched
    by name (case-insensitively): each reason a phrase; none, if it can.

    Stricter than the parsers, which fill a missing nullable column with nulls, ignore extra
    fields and convert values row by row: a statement's result must name every column of its
    table, nothing more, each of a type whose values fit as they are (Arrow's safe casts, the
    parsers' fast path: :func:`_fast_cast`). A table whose schema ``evolution`` adds columns takes
    more (they become columns), and one that also widens takes a column of a wider type.
    """
    by_name = {c.name.lower(): c for c in given}
    wanted = {c.name.lower() for c in columns}
    problems = []
    missing = [c.name for c in columns if c.name.lower() not in by_name]
    if missing:
        problems.append(f"it lacks column(s) {', '.join(missing)}")
    extra = [c.name for c in given if c.name.lower() not in wanted]
    if extra and evolution is SchemaEvolution.NONE:
        problems.append(f"it has column(s) {', '.join(extra)} that the table does not")
    widens = evolution is SchemaEvolution.ADD_AND_WIDEN
    for column in columns:
        found = by_name.get(column.name.lower())
        if found is None or (widens and widening_refusal(column.type, found.type) is None):
            continue
        if not _fast_cast(arrow_type(found.type), arrow_type(column.type)):
            problems.append(f"its column {found.name} is {found.sql_type}, the table's is {column.sql_type}")
    return problems

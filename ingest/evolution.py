"""Columns from the data: the fields of a chunk's records that its table lacks, and the types they get.

A table whose schema evolution is ``add-columns`` or ``add-and-widen`` (``table create|alter
--schema-evolution``) takes a field it has no column for as a new nullable column, added in the
same Delta commit as the rows that bring it (``ingest/chunks/evolving.py``). This module decides,
while a chunk is parsed, which fields become columns and of which type:

- **JSON** values (JSON lines, HTTP events, Kafka JSON): an integer is ``BIGINT``, a number with a
  fraction or exponent ``DOUBLE``, ``true``/``false`` ``BOOLEAN``, a string ``STRING`` (text that
  looks like a time stays text: a guess could be wrong for the next record). Within a chunk the
  types join: integers and fractions make ``DOUBLE``, numbers and strings make ``STRING`` (a
  number is kept as its JSON text, as a ``STRING`` column takes it); an integer past 64 bits is a
  ``DOUBLE``, as the JSON parser reads it. A boolean among other kinds, or an object or an array
  among scalars, cannot be held by the joined type: that record is a bad record naming the field,
  as it would be for a column made by hand.
- **CSV** header names: ``STRING`` (CSV has no types; widen by hand later if need be).
- **Parquet and Arrow** fields: their own type, as Delta names it (``int32`` is ``INT``,
  ``timestamp[ms]`` is ``TIMESTAMP``, ``uint32`` is ``BIGINT``, a dictionary its values' type).

A field becomes no column, and stays counted with the ignored fields with the reason, when its
name is not a valid column name, is a name Spark's reads reserve (``_metadata``, ``__sp_…``:
``metastore.models.reserved_refusal``), differs from a column's only in case, is the partition column's,
holds only nulls (nothing says its type), or holds only nested values (objects, arrays, structs,
lists, maps: streampart's columns are flat).

A chunk may bring at most the table's ``max_new_columns`` fields at once (more fails the chunk,
naming them: a producer bug sending a map's keys as fields must not add thousands of columns); the
table's running total is checked when the columns are committed.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from typing import Any

import pyarrow as pa

from ingest.errors import MalformedChunkError
from metastore.delta.arrow import delta_type
from metastore.errors import UserInputError
from metastore.models import Column, SchemaEvolution, check_identifier, reserved_refusal, widening_refusal

# The integer types, narrowest first, and the values each holds.
INT_RANGES = {
    "byte": (-(2**7), 2**7 - 1),
    "short": (-(2**15), 2**15 - 1),
    "integer": (-(2**31), 2**31 - 1),
    "long": (-(2**63), 2**63 - 1),
}
_INTEGERS = tuple(INT_RANGES)
_DECIMAL = re.compile(r"^decimal\((\d+),(\d+)\)$")
_DECIMAL_CONTEXT = Context(prec=38, rounding=ROUND_HALF_EVEN)

# the kinds of JSON values, in the order a chunk's types join (see the module's docstring)
_LONG, _DOUBLE, _STRING, _BOOLEAN, _NESTED = "long", "double", "string", "boolean", "nested"


def value_kind(value: Any) -> str | None:
    """The kind of a JSON value (None for null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return _BOOLEAN
    if isinstance(value, int):
        low, high = INT_RANGES["long"]
        return _LONG if low <= value <= high else _DOUBLE
    if isinstance(value, float):
        return _DOUBLE
    if isinstance(value, str):
        return _STRING
    if isinstance(value, dict | list):
        return _NESTED
    return _STRING


def joined_type(kinds: Counter[str]) -> str | None:
    """The Delta type for a new field whose values were of ``kinds`` (None: no column for it)."""
    if kinds[_STRING]:
        return "string"
    if kinds[_DOUBLE]:
        return "double"
    if kinds[_LONG]:
        return "long"
    if kinds[_BOOLEAN]:
        return "boolean"
    return None


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def widened_type(delta_type: str, value: Any) -> str | None:
    """The narrowest type wider than ``delta_type`` that holds ``value`` exactly, for a value that
    does not fit its column (``add-and-widen``); None if no allowed widening does: an integer past
    the column's range takes the next integer type that holds it, a decimal with more digits than
    the precision a greater precision at the same scale (up to 38)."""
    if delta_type in INT_RANGES:
        n = _integer(value)
        if n is None:
            return None
        for kind in _INTEGERS[_INTEGERS.index(delta_type) + 1 :]:
            low, high = INT_RANGES[kind]
            if low <= n <= high:
                return kind
        return None
    m = _DECIMAL.match(delta_type)
    if m is None or isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        return None
    precision, scale = int(m.group(1)), int(m.group(2))
    try:
        d = Decimal(str(value).strip()) if isinstance(value, str) else Decimal(str(value))
        q = d.quantize(Decimal(1).scaleb(-scale), context=_DECIMAL_CONTEXT)
    except InvalidOperation:
        return None
    if not q.is_finite():
        return None
    digits = max(len(q.as_tuple().digits), scale + 1)
    return f"decimal({digits},{scale})" if precision < digits <= 38 else None


def arrow_widening(column: Column, arrow: pa.DataType) -> str | None:
    """The type ``column`` widens to for Parquet/Arrow data declaring ``arrow`` (``add-and-widen``):
    the data's own type when it is a wider integer, or a decimal of greater precision at the same
    scale; None otherwise (the values are converted, or refused, as for any column)."""
    declared = arrow_column_type(arrow)
    if declared is None or declared == column.type:
        return None
    if column.type not in INT_RANGES and not _DECIMAL.match(column.type):
        return None
    return declared if widening_refusal(column.type, declared) is None else None


def arrow_column_type(arrow: pa.DataType) -> str | None:
    """The Delta type a Parquet/Arrow field becomes as a new column (None: no column for it)."""
    t = pa.types
    if t.is_dictionary(arrow):
        arrow = arrow.value_type
    if t.is_timestamp(arrow):
        return "timestamp"
    if t.is_date(arrow):
        return "date"
    if t.is_uint8(arrow):
        return "short"
    if t.is_uint16(arrow):
        return "integer"
    if t.is_uint32(arrow):
        return "long"
    if t.is_float16(arrow):
        return "float"
    return delta_type(arrow)


def _arrow_refusal(arrow: pa.DataType) -> str:
    if pa.types.is_null(arrow):
        return "only nulls: nothing says its type"
    if pa.types.is_nested(arrow):
        return f"a nested value ({arrow}): streampart's columns are flat"
    return f"Arrow type {arrow} has no Delta column type"


@dataclass
class ExtraFields:
    """The values of the fields a chunk's records hold that the table lacks, kept while it is parsed
    (evolving tables), by good row: their kinds, how many records held each, and whence each row came."""

    kinds: dict[str, Counter[str]] = field(default_factory=dict)
    present: Counter[str] = field(default_factory=Counter)
    values: dict[str, dict[int, Any]] = field(default_factory=dict)  # field → good row → value
    origin: dict[int, tuple[int, str]] = field(default_factory=dict)  # good row → (position, raw)

    def keep(self, index: int, extra: dict[str, Any], position: int, raw: str) -> None:
        """Keep good row ``index``'s values of the fields the table lacks (``extra``)."""
        for name, value in extra.items():
            self.present[name] += 1
            seen = self.kinds.setdefault(name, Counter())
            kind = value_kind(value)
            if kind is not None:
                seen[kind] += 1
                self.values.setdefault(name, {})[index] = value
        self.origin[index] = (position, raw)


@dataclass
class NewFields:
    """The fields a chunk's records bring that the table lacks: which may become columns, and why not.

    Args:
        columns: the table's data columns (and the new ones of the chunk's earlier batches).
        partition_column: the table's partition column (no data column may take its name).
        evolution: the table's setting; with ``none`` nothing is added (fields stay ignored).
        max_new_columns: how many new columns one chunk may bring.
        earlier: new columns the chunk's earlier batches brought already (they count to the cap).
    """

    columns: Sequence[Column]
    partition_column: str
    evolution: SchemaEvolution = SchemaEvolution.NONE
    max_new_columns: int = 0
    earlier: int = 0
    refused: dict[str, str] = field(default_factory=dict)  # field → why it is no column

    @property
    def enabled(self) -> bool:
        return self.evolution is not SchemaEvolution.NONE

    @property
    def widens(self) -> bool:
        """Whether values that do not fit their column may widen it (``add-and-widen``)."""
        return self.evolution is SchemaEvolution.ADD_AND_WIDEN

    def arrow_widenings(self, schema: pa.Schema) -> dict[str, str]:
        """The columns the Arrow ``schema``'s fields widen (``add-and-widen``): name → new type."""
        if not self.widens:
            return {}
        by_name = {c.name: c for c in self.columns}
        out = {}
        for f in schema:
            column = by_name.get(f.name)
            wider = arrow_widening(column, f.type) if column is not None else None
            if wider is not None:
                out[f.name] = wider
        return out

    def refusal(self, name: str) -> str | None:
        """Why the field ``name`` cannot become a column of the table (None: it can)."""
        try:
            check_identifier(name, "field name")
        except UserInputError as exc:
            return f"not a column name: {exc}"
        reserved = reserved_refusal(name)
        if reserved is not None:
            return f"a reserved name: {reserved}"
        if name.lower() == self.partition_column.lower():
            return "it is the table's partition column, which the log holds"
        same = next((c.name for c in self.columns if c.name.lower() == name.lower()), None)
        if same is not None:
            return f"it differs from column {same!r} only in case"
        return None

    def cap(self, names: Sequence[str]) -> None:
        """Fail the chunk if it brings more new columns than the table's cap allows."""
        count = self.earlier + len(names)
        if count > self.max_new_columns:
            shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            raise MalformedChunkError(
                f"the records bring {count} fields the table has no column for ({shown}), over its "
                f"cap of {self.max_new_columns} new columns (max_new_columns): nothing was committed; "
                "raise the cap with 'streampart table alter --max-new-columns' if they are wanted"
            )

    def from_values(self, kinds: dict[str, Counter[str]]) -> list[Column]:
        """The new columns for fields whose JSON values were of ``kinds`` (per field, in first-seen order)."""
        new = []
        for name, seen in kinds.items():
            why = self.refusal(name)
            kind = joined_type(seen)
            if why is None and kind is None:
                why = (
                    "only nested values (objects or arrays): streampart's columns are flat"
                    if seen[_NESTED]
                    else "only nulls: nothing says its type"
                )
            if why is not None:
                self.refused[name] = why
                continue
            assert kind is not None
            new.append(Column(name=name, type=kind))
        self.cap([c.name for c in new])
        return new

    def from_names(self, names: Sequence[str], kind: str = "string") -> list[Column]:
        """New columns of type ``kind`` for the fields ``names`` (CSV headers)."""
        new = []
        for name in names:
            why = self.refusal(name)
            if why is not None:
                self.refused[name] = why
                continue
            new.append(Column(name=name, type=kind))
        self.cap([c.name for c in new])
        return new

    def from_arrow(self, schema: pa.Schema) -> list[Column]:
        """New columns for the fields of ``schema`` that the table lacks, in their Arrow types."""
        known = {c.name for c in self.columns}
        new = []
        for f in schema:
            if f.name in known:
                continue
            why = self.refusal(f.name)
            kind = arrow_column_type(f.type)
            if why is None and kind is None:
                why = _arrow_refusal(f.type)
            if why is not None:
                self.refused[f.name] = why
                continue
            assert kind is not None
            new.append(Column(name=f.name, type=kind))
        self.cap([c.name for c in new])
        return new

"""A field's value converted to its column's type: one converter per type (:func:`converter`), each
refusing what it cannot take with a :class:`FieldError` saying why, and a value's UTF-8 size
(:func:`byte_size`). The record validator (``ingest/records.py``) applies them field by field.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import ROUND_HALF_EVEN, Context, Decimal, InvalidOperation
from typing import Any

from ingest.evolution import INT_RANGES
from metastore.models import Column


class FieldError(ValueError):
    """A field's value that its column cannot take (the message says why, for the bad record)."""


def _to_int(kind: str) -> Callable[[Any], int]:
    lo, hi = INT_RANGES[kind]

    def convert(v: Any) -> int:
        if isinstance(v, bool):
            raise FieldError(f"expected an integer, got {json.dumps(v)}")
        if isinstance(v, float):
            if not v.is_integer():
                raise FieldError(f"expected an integer, got {v!r}")
            v = int(v)
        elif isinstance(v, str):
            try:
                v = int(v.strip())
            except ValueError:
                raise FieldError(f"expected an integer, got {v!r}") from None
        elif not isinstance(v, int):
            raise FieldError(f"expected an integer, got {type(v).__name__}")
        if not lo <= v <= hi:
            raise FieldError(f"{v} is out of range for {kind}")
        return v

    return convert


def _to_float(v: Any) -> float:
    if isinstance(v, bool):
        raise FieldError(f"expected a number, got {json.dumps(v)}")
    if isinstance(v, int | float):
        return float(v)
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            raise FieldError(f"expected a number, got {v!r}") from None
    raise FieldError(f"expected a number, got {type(v).__name__}")


def _to_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("true", "false"):
        return v.strip().lower() == "true"
    raise FieldError(f"expected true or false, got {v!r}")


def _to_str(v: Any) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return json.dumps(v)
    raise FieldError(f"expected a string, got {type(v).__name__}")


def _to_binary(v: Any) -> bytes:
    if isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode()
    raise FieldError(f"expected a string, got {type(v).__name__}")


def _to_timestamp(v: Any) -> datetime:
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    if isinstance(v, int | float) and not isinstance(v, bool):
        if not math.isfinite(v):
            raise FieldError(f"{v!r} is not a time")
        return datetime.fromtimestamp(v, UTC)
    if isinstance(v, str):
        try:
            ts = datetime.fromisoformat(v.strip().replace("Z", "+00:00"))
        except ValueError:
            if _JSON_NUMBER.fullmatch(v.strip()):  # epoch seconds as text (CSV): as a JSON number
                return _to_timestamp(json.loads(v))
            raise FieldError(f"expected an ISO-8601 timestamp, got {v!r}") from None
        return ts if ts.tzinfo else ts.replace(tzinfo=UTC)
    raise FieldError(f"expected an ISO-8601 timestamp, got {type(v).__name__}")


_JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


def _to_date(v: Any) -> date:
    if isinstance(v, date) and not isinstance(v, datetime):
        return v
    if isinstance(v, str):
        try:
            return date.fromisoformat(v.strip())
        except ValueError:
            raise FieldError(f"expected an ISO-8601 date, got {v!r}") from None
    raise FieldError(f"expected an ISO-8601 date, got {type(v).__name__}")


# Quantizing needs the digits of DECIMAL(38,s), not the default context's 28.
_DECIMAL_CONTEXT = Context(prec=38, rounding=ROUND_HALF_EVEN)


def _to_decimal(
    precision: int, scale: int, rounded: Callable[[], None] | None = None
) -> Callable[[Any], Decimal]:
    """Values as DECIMAL(precision, scale): more decimals than ``scale`` are rounded half to even
    (as Spark's cast does), and ``rounded`` is called for each value whose value that changed."""
    quantum = Decimal(1).scaleb(-scale)

    def convert(v: Any) -> Decimal:
        if isinstance(v, bool) or not isinstance(v, int | float | str | Decimal):
            raise FieldError(f"expected a decimal number, got {type(v).__name__}")
        try:
            d = Decimal(str(v))
        except InvalidOperation:
            raise FieldError(f"expected a decimal number, got {v!r}") from None
        if not d.is_finite():
            raise FieldError(f"expected a finite decimal number, got {v!r}")
        try:
            q = d.quantize(quantum, context=_DECIMAL_CONTEXT)
        except InvalidOperation:  # more digits than any decimal holds
            raise FieldError(f"{v} does not fit DECIMAL({precision},{scale})") from None
        if len(q.as_tuple().digits) > precision:
            raise FieldError(f"{v} does not fit DECIMAL({precision},{scale})")
        if rounded is not None and q != d:
            rounded()
        return q

    return convert


def converter(column: Column, rounded: Callable[[], None] | None = None) -> Callable[[Any], Any]:
    """The function that checks and converts a value for ``column`` (``rounded``: see _to_decimal)."""
    t = column.type
    if t in INT_RANGES:
        return _to_int(t)
    if t.startswith("decimal("):
        p, sc = t[len("decimal(") : -1].split(",")
        return _to_decimal(int(p), int(sc), rounded)
    return {
        "float": _to_float,
        "double": _to_float,
        "boolean": _to_bool,
        "string": _to_str,
        "binary": _to_binary,
        "timestamp": _to_timestamp,
        "date": _to_date,
    }[t]


def byte_size(value: Any) -> int:
    """UTF-8 size of a string or binary value (0 for other values)."""
    if isinstance(value, bytes):
        return len(value)
    if isinstance(value, str):
        if value.isascii():  # one byte per character, without encoding a copy
            return len(value)
        try:
            return len(value.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate, e.g. from a JSON "\ud800" escape
            raise FieldError(f"not valid Unicode: unpaired surrogate at character {exc.start + 1}") from None
    return 0

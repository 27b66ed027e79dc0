"""Durations: one grammar for every duration a user writes, wherever they write it.

Table DDL (``--roll-every 1h``), settings in ``conf/streampart.toml`` (``ttl = "1h"``), their
environment variables (``STREAMPART_CHUNK__TTL=3600``), Python callers (``ChunkConfig(ttl="1h")``)
and job options all accept the same forms:

- units, alone or combined: ``500ms``, ``90s``, ``15m``, ``1.5h``, ``1d``, ``1h30m``;
- plain seconds: ``3600``, ``"2.5"`` (what environment variables give);
- ISO-8601: ``PT1H``, ``P1DT12H``;
- a :class:`~datetime.timedelta` or a number of seconds, from Python.

A negative duration, or one longer than 100 years, is an error naming the value.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

from pydantic import BeforeValidator, PlainSerializer, TypeAdapter, ValidationError

from metastore.errors import UserInputError

_PART = re.compile(r"(\d{1,15}(?:\.\d{1,9})?)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
# Periods are computed as EPOCH + n * duration: keep them well inside datetime's range.
MAX_SECONDS = 36_500 * 86400  # 100 years
_FORMS = "30s, 500ms, 15m, 1.5h, 1d, 1h30m, plain seconds or ISO-8601 (PT1H)"
_ISO = TypeAdapter(timedelta)


def _seconds(text: str) -> float | None:
    """Seconds of ``text`` in units or plain seconds; None when it is neither."""
    try:
        return float(text) if re.fullmatch(r"\d{1,15}(\.\d{1,9})?", text) else None
    except ValueError:  # pragma: no cover - the pattern admits only digits
        return None


def parse_duration(value: str | float | timedelta, what: str = "duration") -> timedelta:
    """``value`` as a timedelta; a :class:`UserInputError` naming ``what`` and the value if bad."""
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, bool):
        raise UserInputError(f"{what} {value!r} is not a duration such as {_FORMS}")
    elif isinstance(value, int | float):
        if value != value or abs(value) > MAX_SECONDS:  # NaN, or too long to be a timedelta
            raise UserInputError(f"{what} {value!r} is too long: at most {MAX_SECONDS // 86400}d")
        delta = timedelta(seconds=value)
    else:
        delta = _parse_text(str(value), what)
    if delta < timedelta(0):
        raise UserInputError(f"{what} {value!r} is negative")
    if delta.total_seconds() > MAX_SECONDS:
        raise UserInputError(f"{what} {value!r} is too long: at most {MAX_SECONDS // 86400}d")
    return delta


def _parse_text(text: str, what: str) -> timedelta:
    cleaned = text.strip().lower()
    if cleaned.startswith("-") and cleaned != "-":
        _parse_text(cleaned[1:], what)  # a bad value is named as such first
        raise UserInputError(f"{what} {text!r} is negative")
    plain = _seconds(cleaned)
    if plain is not None:
        if plain > MAX_SECONDS:
            raise UserInputError(f"{what} {text!r} is too long: at most {MAX_SECONDS // 86400}d")
        return timedelta(seconds=plain)
    if cleaned.startswith("p"):
        try:
            return _ISO.validate_python(cleaned.upper())
        except (ValidationError, OverflowError):
            raise UserInputError(f"{what} {text!r} is not a duration such as {_FORMS}") from None
    if re.fullmatch(r"\d{16,}(\.\d*)?(ms|s|m|h|d).*", cleaned):  # int() refuses thousands of digits
        raise UserInputError(f"{what} {text!r} is too long: at most {MAX_SECONDS // 86400}d")
    pos, seconds = 0, 0.0
    for m in _PART.finditer(cleaned):
        if m.start() != pos:
            break
        seconds += float(m.group(1)) * _UNIT_S[m.group(2)]
        pos = m.end()
    if not cleaned or pos != len(cleaned):
        raise UserInputError(f"{what} {text!r} is not a duration such as {_FORMS}")
    if seconds > MAX_SECONDS:
        raise UserInputError(f"{what} {text!r} is too long: at most {MAX_SECONDS // 86400}d")
    return timedelta(seconds=seconds)


def format_duration(delta: timedelta) -> str:
    """``delta`` in the unit form (``1h30m``, ``500ms``), which :func:`parse_duration` reads back."""
    micros = delta // timedelta(microseconds=1)
    if micros == 0:
        return "0s"
    sign, micros = ("-", -micros) if micros < 0 else ("", micros)
    seconds, rest = divmod(micros, 1_000_000)
    out = []
    for unit in ("d", "h", "m", "s"):
        n, seconds = divmod(seconds, int(_UNIT_S[unit]))
        if n:
            out.append(f"{n}{unit}")
    if rest:
        out.append(f"{rest // 1000}ms" if rest % 1000 == 0 else f"{rest / 1000:g}ms")
    return sign + "".join(out)


def _coerce(value: Any) -> Any:
    if isinstance(value, str | int | float | timedelta):
        try:
            return parse_duration(value, "")
        except UserInputError as exc:
            raise ValueError(str(exc).strip()) from None
    return value


# The pydantic type of every duration setting: parsed as above, written back in unit form.
Duration = Annotated[
    timedelta,
    BeforeValidator(_coerce),
    PlainSerializer(lambda d: format_duration(d), return_type=str, when_used="json"),
]

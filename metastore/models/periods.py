"""Periods and instants: UTC times, period starts, ISO-8601 text, the event times a table accepts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from metastore.errors import UserInputError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# The event times an event-time table accepts, whatever its settings. Inside this range every
# period start, period end plus lateness (each at most 100 years) and partition value text
# (a four-digit year) is representable; a row outside it is a bad record, never a partition.
MIN_EVENT_TIME = datetime(1000, 1, 1, tzinfo=UTC)
MAX_EVENT_TIME = datetime(9000, 1, 1, tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)
_EARLIEST = datetime.min.replace(tzinfo=UTC)


def saturating_add(ts: datetime, delta: timedelta) -> datetime:
    """``ts + delta``, or the latest (earliest) datetime where that would overflow.

    For date arithmetic on values already stored (a partition recorded before event times were
    bounded): a due time past year 9999 means "never", not an error that stops a daemon.
    """
    try:
        return ts + delta
    except OverflowError:
        return _LATEST if delta > timedelta(0) else _EARLIEST


def utc(ts: datetime) -> datetime:
    """A timezone-aware UTC datetime (naive values are taken as UTC)."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def period_start(ts: datetime, every: timedelta) -> datetime:
    """Start of the period of length ``every`` (aligned to the Unix epoch, UTC) holding ``ts``."""
    step = int(every.total_seconds() * 1_000_000)
    micros = (utc(ts) - EPOCH) // timedelta(microseconds=1)
    return EPOCH + timedelta(microseconds=micros - micros % step)


def iso(ts: datetime) -> str:
    """ISO-8601 in UTC with a ``Z``; microseconds only when present; always a four-digit year."""
    ts = utc(ts)
    text = f"{ts.year:04d}-{ts:%m-%dT%H:%M:%S}"
    if ts.microsecond:
        text += f".{ts.microsecond:06d}"
    return text + "Z"


def parse_instant(text: str, what: str = "time") -> datetime:
    """Parse an ISO-8601 instant; a value without offset is UTC."""
    try:
        return utc(datetime.fromisoformat(text.strip().replace("Z", "+00:00")))
    except ValueError:
        raise UserInputError(
            f"{what} {text!r} is not an ISO-8601 time such as 2026-11-21T10:00:00Z"
        ) from None

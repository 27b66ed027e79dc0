"""The one clock of streampart: every "now" (leases, deadlines, TTLs, partition periods) reads it.

Production code calls :func:`now` and :func:`monotonic`; a test swaps the clock with
:func:`use` (a :class:`ManualClock` it moves forward) instead of sleeping past a deadline. The
clock is per process: a test that runs real processes passes them time through the metastore
(leases, TTLs), which compare against the reader's clock, so the test moves its own clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The wall-clock time, timezone-aware UTC."""
        ...

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (for deadlines within a process)."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock:
    """A clock that stands still until :meth:`advance` moves it (tests)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime.now(UTC)
        self._mono = 0.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, delta: timedelta | float) -> None:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        with self._lock:
            self._now += timedelta(seconds=seconds)
            self._mono += seconds


_clock: Clock = SystemClock()


def now() -> datetime:
    return _clock.now()


def monotonic() -> float:
    return _clock.monotonic()


@contextmanager
def use(clock: Clock) -> Iterator[Clock]:
    """Make ``clock`` the process's clock for the ``with`` block."""
    global _clock
    previous, _clock = _clock, clock
    try:
        yield clock
    finally:
        _clock = previous

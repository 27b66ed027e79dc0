"""The one clock of streampart: every "now" (leases, deadlines, TTLs, partition periods) reads it.

Production code calls :func:`now` and :func:`monotonic`; a test swaps the clock with
:func:`use` (a :class:`SystemClock` it moves forward) instead of sleeping past a deadline. The
clock is per process: leases and TTLs in the metastore are compared against the reading
process's clock, so a test moves the clock of the process that must see a deadline passed
(the test workers take ``--clock-offset``).
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
    """The machine's clock, moved by ``offset``: :meth:`advance` lets a test jump past a deadline.

    It keeps running (a loop waiting for a deadline still reaches it); only its offset changes.
    """

    def __init__(self, offset: timedelta = timedelta(0)) -> None:
        self._offset = offset
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return datetime.now(UTC) + self._offset

    def monotonic(self) -> float:
        return time.monotonic() + self._offset.total_seconds()

    def advance(self, delta: timedelta) -> None:
        with self._lock:
            self._offset += delta


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

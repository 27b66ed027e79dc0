"""Retention (issue 30): how long a table keeps a standard partition, and when one is due to expire.

A table's ``retain`` (``table create|alter --retain``) is how long a standard partition is kept
after its **period ends**: ``--retain 1d`` on a daily table expires yesterday's partition at the
end of today, not at its start. In event-time mode the period is the data's own time, so a
backfill of last year expires on schedule; in arrival mode a partition's rows arrived until it
rolled, so it ends at the later of its period's end and its roll. ``retain`` None follows the
table's namespace (``namespace create|alter --retain``), 0 keeps partitions for ever; a
dead-letter or late-data companion follows its main table. Streaming and rolling partitions never
expire. Pure rules: scheduler/expiry.py acts on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from metastore.durations import format_duration, parse_duration
from metastore.errors import UserInputError
from metastore.models import Mode, Partition, PartitionState, Table, TableSpec, saturating_add

FOREVER = timedelta(0)
"""A table's ``retain`` that keeps its partitions for ever, whatever its namespace's default."""


def parse_retain(text: str, flag: str = "--retain", *, follow: bool = True) -> timedelta | None:
    """``--retain DURATION|none|namespace``: a duration; ``none`` keeps partitions for ever; with
    ``follow``, ``namespace`` follows the namespace's default (None). A namespace's own ``none`` is
    "no default" (None)."""
    word = text.strip().lower()
    if word == "none":
        return FOREVER if follow else None
    if word == "namespace" and follow:
        return None
    retain = parse_duration(text, flag)
    if retain <= timedelta(0):
        raise UserInputError(f"{flag} {text!r}: give a duration above 0, or none to keep partitions for ever")
    if retain % timedelta(seconds=1):
        raise UserInputError(f"{flag} {text!r} is not a whole number of seconds")
    return retain


def retain_floor(table: TableSpec) -> timedelta:
    """The shortest retention ``table`` may have: its roll interval, plus its lateness in event
    time (a partition must be able to roll, late rows included, before it could expire)."""
    lateness = table.lateness if table.mode is Mode.EVENT_TIME else timedelta(0)
    return table.roll_every + lateness


def check_retain(table: TableSpec, retain: timedelta | None, where: str = "--retain") -> None:
    """Refuse a retention below ``table``'s floor, naming both (None and for ever pass)."""
    if retain is None or retain == FOREVER:
        return
    floor = retain_floor(table)
    if retain < floor:
        bound = f"roll interval {format_duration(table.roll_every)}"
        if floor != table.roll_every:
            bound += f" plus its lateness {format_duration(table.lateness)} ({format_duration(floor)})"
        raise UserInputError(
            f"{where} {format_duration(retain)} is shorter than {table.name}'s {bound}: its partitions "
            "would expire before they could roll"
        )


def effective_retain(table: Table, namespace_default: timedelta | None) -> tuple[timedelta | None, str]:
    """The retention that applies to ``table`` (None: for ever) and where it comes from: ``table``,
    ``namespace`` or ``none``."""
    if table.retain is not None:
        return (None, "table") if table.retain == FOREVER else (table.retain, "table")
    if namespace_default is not None:
        return namespace_default, "namespace"
    return None, "none"


def partition_end(table: Table, partition: Partition) -> datetime:
    """When ``partition``'s data ends: its period's end; in arrival mode not before its roll."""
    end = table.period_end(partition.value)
    if table.mode is Mode.ARRIVAL and partition.rolled_at is not None:
        end = max(end, partition.rolled_at)
    return end


def expires_at(table: Table, partition: Partition, retain: timedelta) -> datetime:
    return saturating_add(partition_end(table, partition), retain)


def due_for_expiry(
    table: Table, partitions: Iterable[Partition], retain: timedelta | None, now: datetime
) -> list[Partition]:
    """The standard ``partitions`` whose retention has run out at ``now``, oldest first."""
    if retain is None:
        return []
    due = [
        p for p in partitions if p.state is PartitionState.STANDARD and expires_at(table, p, retain) <= now
    ]
    return sorted(due, key=lambda p: p.value)


def next_expiry(table: Table, partitions: Iterable[Partition], retain: timedelta | None) -> datetime | None:
    """When the oldest standard partition expires (None: never, or none is standard)."""
    if retain is None:
        return None
    times = [expires_at(table, p, retain) for p in partitions if p.state is PartitionState.STANDARD]
    return min(times, default=None)

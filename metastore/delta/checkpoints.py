"""How a table keeps its Delta log short: checkpoints and log cleanup, on a schedule the table sets.

Both are standard Delta table properties, kept in the table's own log, so every Delta writer
honours them, not only streampart:

- ``delta.checkpointInterval``: a checkpoint (one Parquet file with the whole snapshot) every N
  commits. Loading the table reads the newest checkpoint and the commits after it, so a load
  costs at most N commit files, however long the log. delta-rs writes one after a commit whose
  version is a multiple of N; housekeeping writes one for a table whose log grew by N since its
  last checkpoint without one (a hook that failed, commits by another writer).
- ``delta.logRetentionDuration``: commit files (and older checkpoints) older than this *and*
  older than the newest checkpoint are deleted, after a checkpoint and by housekeeping, so the
  log directory every load lists stays small. Time travel reaches back this far, no further.

``streampart table create|alter --checkpoint-interval N --log-retention DURATION`` set them.
After a commit streampart writes itself, :class:`BackgroundCheckpoints` checkpoints as delta-rs
would have.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from metastore import storage
from metastore.delta.errors import first_line
from metastore.durations import format_duration, parse_duration
from metastore.errors import UserInputError
from metastore.models import Table

log = logging.getLogger("streampart.warehouse")

CHECKPOINT_INTERVAL = "delta.checkpointInterval"
LOG_RETENTION = "delta.logRetentionDuration"

# Delta's own defaults, which apply to a table that sets neither property.
DEFAULT_CHECKPOINT_INTERVAL = 100
DEFAULT_LOG_RETENTION = timedelta(days=30)

# Why 1 hour at least: a writer that died mid-commit is found by housekeeping (after twice the
# commit timeout) and asks the log whether its commit landed, by reading the commit files since
# its snapshot; a commit file deleted before that question would make a landed chunk look lost,
# and commit it twice. Queries pinning a version also read its commit files' neighbourhood.
MIN_LOG_RETENTION = timedelta(hours=1)
# Why at most 100,000: a load replays up to that many commit files; beyond that a checkpoint is
# never worth skipping.
MAX_CHECKPOINT_INTERVAL = 100_000

_UNITS = {"nanosecond": 1e-9, "microsecond": 1e-6, "millisecond": 1e-3, "second": 1, "minute": 60}
_UNITS |= {"hour": 3600, "day": 86400, "week": 604800}


@dataclass(frozen=True)
class LogSettings:
    """A table's Delta log schedule (Delta's defaults where the table sets none)."""

    checkpoint_interval: int = DEFAULT_CHECKPOINT_INTERVAL
    log_retention: timedelta = DEFAULT_LOG_RETENTION

    def to_json(self) -> dict[str, Any]:
        return {
            "checkpoint_interval": self.checkpoint_interval,
            "log_retention": format_duration(self.log_retention),
        }


def check_checkpoint_interval(value: int, what: str = "--checkpoint-interval") -> int:
    """``value`` if it is a usable checkpoint interval, else a :class:`UserInputError` naming ``what``."""
    if not 1 <= value <= MAX_CHECKPOINT_INTERVAL:
        raise UserInputError(
            f"{what} must be a number of commits from 1 to {MAX_CHECKPOINT_INTERVAL:,}, not {value}"
        )
    return value


def check_log_retention(text: str, what: str = "--log-retention") -> timedelta:
    """The duration ``text`` names, if it is a usable log retention (at least 1 hour)."""
    retention = parse_duration(text, what)
    if retention < MIN_LOG_RETENTION:
        raise UserInputError(
            f"{what} must be at least {format_duration(MIN_LOG_RETENTION)} (a writer that died "
            f"mid-commit looks its commit up in the log), not {text}"
        )
    return retention


def delta_interval(value: timedelta) -> str:
    """A duration as Delta's ``interval`` text (``interval 3600 seconds``)."""
    return f"interval {int(value.total_seconds())} seconds"


def parse_delta_interval(text: str) -> timedelta:
    """Delta's ``interval <n> <unit>`` text as a duration (ValueError if it is not one)."""
    words = text.strip().lower().split()
    if len(words) == 3 and words[0] == "interval":
        words = words[1:]
    if len(words) != 2:
        raise ValueError(f"not a Delta interval: {text!r}")
    unit = words[1].removesuffix("s")
    if unit not in _UNITS:
        raise ValueError(f"not a Delta interval unit: {text!r}")
    return timedelta(seconds=float(words[0]) * _UNITS[unit])


def log_settings(dt: Any) -> LogSettings:
    """The log schedule of a loaded DeltaTable ``dt`` (a value it cannot use: Delta's default)."""
    conf = dt.metadata().configuration
    interval = DEFAULT_CHECKPOINT_INTERVAL
    retention = DEFAULT_LOG_RETENTION
    with contextlib.suppress(ValueError):
        interval = max(1, int(conf.get(CHECKPOINT_INTERVAL, interval)))
    with contextlib.suppress(ValueError):
        retention = parse_delta_interval(conf[LOG_RETENTION]) if LOG_RETENTION in conf else retention
    return LogSettings(interval, retention)


def set_log_settings(
    dt: Any, checkpoint_interval: int | None = None, log_retention: timedelta | None = None
) -> None:
    """Set the table's log schedule in its Delta log (one metadata commit; ``None``: unchanged).

    A metadata change makes every commit prepared on an older snapshot conflict; chunk commits
    take a fresh snapshot and retry, as they do after a roll's seal.
    """
    from deltalake.transaction import CommitProperties

    props: dict[str, str] = {}
    if checkpoint_interval is not None:
        props[CHECKPOINT_INTERVAL] = str(check_checkpoint_interval(checkpoint_interval))
    if log_retention is not None:
        props[LOG_RETENTION] = delta_interval(log_retention)
    if props:
        dt.alter.set_table_properties(
            props,
            raise_if_not_exists=False,
            commit_properties=CommitProperties(custom_metadata={"streampart.log_settings": "set"}),
        )


def log_entries(location: str) -> int:
    """How many entries the table's ``_delta_log`` directory holds (what every load lists)."""
    return len(storage.list_dir(storage.join(location, "_delta_log")))


def last_checkpoint_version(table: Table) -> int:
    """The version of the table's newest Delta checkpoint (-1: none yet)."""
    path = storage.join(table.location, "_delta_log", "_last_checkpoint")
    try:
        return int(json.loads(storage.read_bytes(path))["version"])
    except (FileNotFoundError, KeyError, ValueError):
        return -1


class BackgroundCheckpoints:
    """Checkpoints of the tables this process commits to, written off the commit path."""

    def __init__(self) -> None:
        self._every: dict[str, int] = {}  # per table location: its delta.checkpointInterval
        self._running: set[str] = set()

    def learn(self, table: Table, dt: Any) -> None:
        """Note the table's checkpoint interval from ``dt``, a snapshot of it."""
        every = dt.metadata().configuration.get(CHECKPOINT_INTERVAL)
        self._every[table.location] = int(every or DEFAULT_CHECKPOINT_INTERVAL)

    def after_commit(self, table: Table, version: int, load: Callable[[], Any]) -> None:
        """Checkpoint the log (and clean up expired log files) every ``delta.checkpointInterval``
        versions, as delta-rs does after its own commits; in the background, off the commit path.

        ``load``: opens the table at ``version``.
        """
        every = self._every.get(table.location, DEFAULT_CHECKPOINT_INTERVAL)
        if version % every or table.location in self._running:
            return
        self._running.add(table.location)

        def run() -> None:
            try:
                dt = load()
                dt.create_checkpoint()
                dt.cleanup_metadata()
            except Exception as exc:  # the next one (or housekeeping) checkpoints instead
                log.warning("checkpoint of %s at version %d failed: %s", table.name, version, first_line(exc))
            finally:
                self._running.discard(table.location)

        # not a daemon: the interpreter waits for it at exit rather than stop it inside delta-rs
        threading.Thread(target=run, name=f"checkpoint-{table.name}").start()

"""The source's control file: what a running query subscribes to, changed without a restart.

The ingest job (its driver) writes ``<checkpoint>/streampart/control.json``; the source, which
Spark runs in a Python worker of its own, reads it again whenever it changed (the source option
``streampart.controlFile`` names it)::

    {"topics": ["orders"], "pattern": "(?:shop\\\\..*)", "paused": ["refunds"]}

* ``topics`` and ``pattern``: the subscription (as the options ``subscribe`` and
  ``subscribePattern``, both at once). A topic no longer subscribed keeps its offsets in the
  checkpoint and is read on from there if it is subscribed again: leaving is not data loss.
* ``paused``: subscribed topics whose offsets stand still (nothing of them is read) until they
  are taken out of the list.

The file is replaced whole (a temp file renamed over it), so a reader never sees half of it. Only
the standard library is imported: Spark's workers load this module.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONTROL_FILE = "streampart/control.json"
"""The control file's path inside a query's checkpoint directory."""


@dataclass(frozen=True)
class Control:
    """One reading of the control file."""

    topics: frozenset[str] = frozenset()
    pattern: str | None = None
    paused: frozenset[str] = frozenset()
    # operators' resets not applied yet: (request id, topic, target: earliest, latest, an ISO time,
    # or JSON {"partition": offset}); the source applies each once, in a batch's offsets
    resets: tuple[tuple[int, str, str], ...] = ()
    _regex: Any = field(default=None, compare=False, repr=False)

    def subscribed(self, topic: str) -> bool:
        if topic in self.topics:
            return True
        if self.pattern is None:
            return False
        regex = self._regex
        if regex is None:
            regex = re.compile(self.pattern)
            object.__setattr__(self, "_regex", regex)
        return regex.fullmatch(topic) is not None

    def to_json(self) -> dict[str, Any]:
        return {
            "topics": sorted(self.topics),
            "pattern": self.pattern,
            "paused": sorted(self.paused),
            "resets": [list(r) for r in self.resets],
        }


_cache: dict[str, tuple[tuple[int, int], Control]] = {}


def read_control(path: str) -> Control:
    """The control file at ``path`` (read again only when it changed); none subscribes to nothing."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Control()
    stamp = (st.st_mtime_ns, st.st_size)
    cached = _cache.get(path)
    if cached is not None and cached[0] == stamp:
        return cached[1]
    data = json.loads(Path(path).read_text())
    control = Control(
        topics=frozenset(data.get("topics") or ()),
        pattern=data.get("pattern") or None,
        paused=frozenset(data.get("paused") or ()),
        resets=tuple((int(i), str(t), str(x)) for i, t, x in data.get("resets") or ()),
    )
    _cache[path] = (stamp, control)
    return control


_writing = threading.Lock()  # the job's threads (the batch's, the steering's) change it one at a time


def update_control(path: str | Path, change: Callable[[Control], Control]) -> Control:
    """Replace the control file with ``change`` of what it holds (an absent file: an empty one)."""
    with _writing:
        current = read_control(str(path)) if os.path.exists(path) else Control()
        new = change(current)
        write_control(path, new)
        return new


def write_control(path: str | Path, control: Control) -> bool:
    """Replace the control file with ``control``; whether it changed."""
    target = Path(path)
    body = json.dumps(control.to_json(), sort_keys=True)
    try:
        if target.read_text() == body:
            return False
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".control.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(body)
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return True


SKIPPED_FILE = "skipped.json"
"""Beside the control file: per partition, how many records the source skipped as lost
(``failOnDataLoss=false``), added up over the query's life."""


def add_skipped(control_file: str, counts: dict[tuple[str, int], int]) -> None:
    """Add ``counts`` (records skipped per topic-partition) to the skipped file (one writer: the source)."""
    path = Path(control_file).with_name(SKIPPED_FILE)
    totals = read_skipped(control_file)
    for tp, n in counts.items():
        totals[tp] = totals.get(tp, 0) + n
    body = json.dumps([[t, p, n] for (t, p), n in sorted(totals.items())])
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".skipped.", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(body)
    os.replace(tmp, path)


def read_skipped(control_file: str) -> dict[tuple[str, int], int]:
    """The records skipped as lost so far, per topic-partition (empty: none, or no file)."""
    try:
        data = json.loads(Path(control_file).with_name(SKIPPED_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {(str(t), int(p)): int(n) for t, p, n in data}

"""Where a keyed table's rows arrived: the arrival each add of a chunk commit carries in the log.

A keyed table's chunk commits tag every add with its rows' arrival (``streampart.arrival``:
``<version> * 2^20 + <the add's place in the commit>``, :func:`metastore.models.arrival_of`), so
the order of a key's versions in different chunks is the order of their commits, read from the log
alone. delta-rs reads these tags but does not show them, so this module reads them from the log's
files: the newest checkpoint at or before the version asked for (its ``add.path`` and ``add.tags``
columns), then each commit file after it. Both are immutable once written, so what was read is kept
per process (the SQL server reads the same tables again and again).

Files a roll or a delete wrote carry no tag: they hold each row's arrival in a column of their own
(``metastore.models.ARRIVAL_COLUMN``).
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any

from metastore import storage
from metastore.delta.errors import storage_errors
from metastore.delta.files import disk_path
from metastore.delta.log import commit_file, log_dir
from metastore.models import ARRIVAL_TAG, Table

_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+)?\.parquet$")
_KEPT = 4096  # commit files and checkpoints whose tags this process keeps

_lock = threading.Lock()
_cache: OrderedDict[tuple[str, str], dict[str, int]] = OrderedDict()  # (table uid, file) → tags


def arrivals(table: Table, version: int) -> dict[str, int]:
    """The arrival of every file the log tagged with one, up to ``version``: path (as on disk) → arrival.

    Holds files removed by ``version`` too (a path is added once): look up the snapshot's own files.

    Raises:
        StorageError: the log could not be read.
    """
    with storage_errors(f"reading the arrivals of {table.name}'s rows from its Delta log"):
        start, checkpoint = _checkpoint_at(table, version)
        found: dict[str, int] = {}
        for path in checkpoint:
            found.update(_read(table, path, _checkpoint_tags))
        for v in range(start + 1, version + 1):
            found.update(_read(table, commit_file(table.location, v), _commit_tags))
        return found


def _checkpoint_at(table: Table, version: int) -> tuple[int, list[str]]:
    """The newest checkpoint at or before ``version``: its version and files (-1, []: none)."""
    from metastore.delta.checkpoints import last_checkpoint_version

    last = last_checkpoint_version(table)
    names: list[str] = []
    if 0 <= last <= version:
        prefix = f"{last:020d}.checkpoint"
        names = [e.name for e in storage.list_dir(log_dir(table.location)) if e.name.startswith(prefix)]
    if not names:  # an older version than the last checkpoint (time travel), or none recorded
        by_version: dict[int, list[str]] = {}
        for e in storage.list_dir(log_dir(table.location)):
            m = _CHECKPOINT.match(e.name)
            if m and int(m.group(1)) <= version:
                by_version.setdefault(int(m.group(1)), []).append(e.name)
        if not by_version:
            return -1, []
        last, names = max(by_version.items())
    return last, [storage.join(log_dir(table.location), n) for n in sorted(names) if _CHECKPOINT.match(n)]


def _read(table: Table, path: str, parse: Any) -> dict[str, int]:
    # by the table's identity too: a table dropped and made again under its name has the same paths
    key = (table.uid or table.location, path)
    with _lock:
        found = _cache.get(key)
        if found is not None:
            _cache.move_to_end(key)
            return found
    found = parse(path)
    with _lock:
        _cache[key] = found
        while len(_cache) > _KEPT:
            _cache.popitem(last=False)
    return found


def _commit_tags(path: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for line in storage.read_bytes(path).decode().splitlines():
        if '"tags"' not in line:
            continue
        add = json.loads(line).get("add")
        tag = (add.get("tags") or {}).get(ARRIVAL_TAG) if add else None
        if tag is not None:
            found[disk_path(add["path"])] = int(tag)
    return found


def _checkpoint_tags(path: str) -> dict[str, int]:
    import pyarrow.parquet as pq

    with storage.open_input(path) as f:
        data = pq.read_table(f, columns=["add.path", "add.tags"])
    found: dict[str, int] = {}
    for p, tags in zip(data.column("path").to_pylist(), data.column("tags").to_pylist(), strict=True):
        if p is None or not tags:
            continue
        tag = dict(tags).get(ARRIVAL_TAG)
        if tag is not None:
            found[disk_path(p)] = int(tag)
    return found

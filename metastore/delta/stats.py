"""Column statistics in add actions (Delta's ``stats``: ``minValues``, ``maxValues``, ``nullCount``).

streampart writes them for a keyed table's key columns, on the files its chunk commits and its rolls
add: a roll finds the files that may hold older versions of its keys by these ranges instead of
reading every file of the table (``scheduler/keyed_rolls.py``), and other Delta readers skip files
by them too. Only types whose value Delta writes exactly are given (integers, dates, strings of at
most :data:`MAX_TEXT` characters: Delta readers take a longer string's bound as a truncated one);
a file without a column's range is one that may hold anything.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import date
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from metastore.delta.files import disk_path
from metastore.models import Column

# Why 32: Delta's own writers truncate string statistics to 32 characters; a bound that long or
# shorter is read as exact by every reader.
MAX_TEXT = 32
EXACT_TYPES = frozenset({"byte", "short", "integer", "long", "string", "date"})


def ranges_stats(data: pa.Table, columns: Sequence[Column]) -> str:
    """The ``minValues``/``maxValues``/``nullCount`` of ``columns`` of ``data`` as a JSON object (the
    part of an add's ``stats`` beside ``numRecords``); ``"{}"``: none can be given."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    if data.num_rows == 0:
        return "{}"
    for c in columns:
        if c.type not in EXACT_TYPES or c.name not in data.column_names:
            continue
        column = data.column(c.name)
        found = pc.min_max(column)
        low, high = found["min"].as_py(), found["max"].as_py()
        if low is None:
            continue
        if c.type == "string" and (len(low) > MAX_TEXT or len(high) > MAX_TEXT):
            continue
        if isinstance(low, date):
            low, high = low.isoformat(), high.isoformat()
        mins[c.name], maxs[c.name], nulls[c.name] = low, high, column.null_count
    if not mins:
        return "{}"
    return json.dumps({"minValues": mins, "maxValues": maxs, "nullCount": nulls})


def stats_json(rows: int, ranges: str | None) -> str:
    """An add's ``stats``: ``numRecords`` and the ranges (:func:`ranges_stats`) if any."""
    extra = json.loads(ranges) if ranges else {}
    return json.dumps({"numRecords": rows, **extra})


def key_ranges(dt: Any, names: Sequence[str]) -> dict[str, list[tuple[Any, Any]]]:
    """Each live file of the snapshot ``dt`` whose add gives the range of every column ``names``: its
    path (as on disk) → the (min, max) of each, in order. Files without them are left out."""
    adds = pa.table(dt.get_add_actions(flatten=True))
    wanted = [(f"min.{n}", f"max.{n}") for n in names]
    if adds.num_rows == 0 or any(
        lo not in adds.column_names or hi not in adds.column_names for lo, hi in wanted
    ):
        return {}
    paths = [disk_path(p) for p in adds.column("path").to_pylist()]
    bounds = [(adds.column(lo).to_pylist(), adds.column(hi).to_pylist()) for lo, hi in wanted]
    out = {}
    for i, path in enumerate(paths):
        pairs = [(lows[i], highs[i]) for lows, highs in bounds]
        if all(lo is not None and hi is not None for lo, hi in pairs):
            out[path] = pairs
    return out


def may_hold(ranges: Sequence[tuple[Any, Any]], keys: pa.Table, names: Sequence[str]) -> bool:
    """Whether a file whose columns ``names`` span ``ranges`` may hold a row of ``keys`` (those columns)."""
    inside = None
    for name, (low, high) in zip(names, ranges, strict=True):
        column = keys.column(name)
        low_s, high_s = pa.scalar(low, column.type), pa.scalar(high, column.type)
        here = pc.and_(pc.greater_equal(column, low_s), pc.less_equal(column, high_s))
        inside = here if inside is None else pc.and_(inside, here)
    assert inside is not None
    return bool(pc.any(inside).as_py())


def stats_by_path(files: Mapping[str, str], paths: Sequence[str]) -> dict[str, str]:
    """The ranges (:func:`ranges_stats`) of ``paths`` from ``files`` (file name → ranges)."""
    out = {}
    for path in paths:
        found = files.get(path.rsplit("/", 1)[-1])
        if found and found != "{}":
            out[path] = found
    return out

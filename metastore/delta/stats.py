"""Column statistics in add actions (Delta's ``stats``: ``minValues``, ``maxValues``, ``nullCount``).

Every file streampart adds to a table's log carries them, for every column whose values Delta
readers compare (:func:`ranges_stats`): a reader with a filter that reads them (delta-rs'
``to_pyarrow_dataset``; a delete by predicate, ``ingest/deletes/plan.py``) skips the files whose
ranges cannot match it. A keyed table's roll finds the files that may hold older versions of its
keys by them too (``scheduler/keyed_rolls.py``).

A bound is only ever written where every reader takes it as one: integers, dates and strings of at
most :data:`MAX_TEXT` characters exactly; timestamps to the millisecond Delta keeps, the minimum
rounded down and the maximum up; floating-point columns only without NaN or infinities (Spark
orders NaN above every number, pyarrow leaves it out). Booleans, binaries and decimals get their
``nullCount`` only. A column without a range is one that may hold anything. They are gathered
from the rows as they are written (:meth:`Ranges.add`), or, for a file another writer made (the
Spark roll engine's), from its Parquet footer (:meth:`Ranges.add_footer`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import date, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from metastore.delta.files import disk_path
from metastore.models import Column

# Why 32: Delta's own writers truncate string statistics to 32 characters; a bound that long or
# shorter is read as exact by every reader.
MAX_TEXT = 32
EXACT_TYPES = frozenset({"byte", "short", "integer", "long", "string", "date"})
RANGED_TYPES = EXACT_TYPES | {"timestamp", "float", "double"}
_MS = timedelta(milliseconds=1)


class Ranges:
    """The statistics of a file's columns, gathered over the row groups written into it."""

    def __init__(self, columns: Sequence[Column]) -> None:
        self.columns = list(columns)
        self._low: dict[str, Any] = {}
        self._high: dict[str, Any] = {}
        self._nulls: dict[str, int] = {}
        self._unranged: set[str] = set()  # a value no bound can be written for was seen
        self._unknown: set[str] = set()  # a part whose nulls were not counted (a footer's)

    def add(self, data: pa.Table) -> Ranges:
        """Take in ``data``'s rows (a file's, or a row group of it); a column it lacks is all null."""
        for c in self.columns:
            if c.name not in data.column_names:
                self._take(c, None, None, data.num_rows)
                continue
            column = data.column(c.name)
            if c.type not in RANGED_TYPES or c.name in self._unranged or column.null_count == len(column):
                self._take(c, None, None, column.null_count)
                continue
            if c.type in ("float", "double") and not pc.all(pc.is_finite(column)).as_py():
                self._unranged.add(c.name)  # NaN or ±inf: Delta readers do not agree on their order
                self._take(c, None, None, column.null_count)
                continue
            found = pc.min_max(column)
            self._take(c, found["min"].as_py(), found["max"].as_py(), column.null_count)
        return self

    def add_footer(self, meta: pq.FileMetaData) -> Ranges:
        """Take in a Parquet file's row groups by the statistics its footer keeps (a file another
        writer made: Spark's). Floating-point columns get no range (a footer's leave NaN out), nor
        does a column a row group keeps no statistics of; nor a null count, where one lacks it."""
        names = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        for g in range(meta.num_row_groups):
            group = meta.row_group(g)
            for c in self.columns:
                i = names.get(c.name)
                if i is None:
                    self._take(c, None, None, group.num_rows)
                    continue
                st = group.column(i).statistics
                if st is None or not st.has_null_count:
                    self._unknown.add(c.name)
                    self._unranged.add(c.name)
                    continue
                if st.null_count == group.num_rows or c.type not in RANGED_TYPES:
                    self._take(c, None, None, st.null_count)
                elif c.type in ("float", "double") or not st.has_min_max:
                    self._unranged.add(c.name)
                    self._take(c, None, None, st.null_count)
                else:
                    self._take(c, st.min, st.max, st.null_count)
        return self

    def _take(self, c: Column, low: Any, high: Any, nulls: int) -> None:
        """One part's (min, max) of ``c`` (None: it holds no value a bound is written for) and nulls."""
        self._nulls[c.name] = self._nulls.get(c.name, 0) + nulls
        if low is None or c.name in self._unranged:
            return
        if c.type == "string" and (len(low) > MAX_TEXT or len(high) > MAX_TEXT):
            self._unranged.add(c.name)
            return
        if c.name not in self._low or low < self._low[c.name]:
            self._low[c.name] = low
        if c.name not in self._high or high > self._high[c.name]:
            self._high[c.name] = high

    def json(self) -> str:
        """The ``minValues``/``maxValues``/``nullCount`` as a JSON object (the part of an add's
        ``stats`` beside ``numRecords``); ``"{}"``: no rows were taken in."""
        if not self._nulls:
            return "{}"
        ranged = [n for n in self._low if n not in self._unranged]
        out: dict[str, Any] = {}
        if ranged:
            out["minValues"] = {n: _bound(self._low[n], up=False) for n in ranged}
            out["maxValues"] = {n: _bound(self._high[n], up=True) for n in ranged}
        out["nullCount"] = {n: k for n, k in self._nulls.items() if n not in self._unknown}
        return json.dumps(out)


def _bound(value: Any, up: bool) -> Any:
    """A bound as Delta's JSON has it: a timestamp in milliseconds (rounded away from the rows),
    a date as its ISO day."""
    if isinstance(value, datetime):
        kept = value - timedelta(microseconds=value.microsecond % 1000)
        if up and kept != value:
            kept += _MS
        return kept.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return value


def ranges_stats(data: pa.Table, columns: Sequence[Column]) -> str:
    """The statistics of ``columns`` of ``data`` as a JSON object (:meth:`Ranges.json`)."""
    if data.num_rows == 0:
        return "{}"
    return Ranges(columns).add(data).json()


def ranges_of_adds(dt: Any, paths: Sequence[str]) -> dict[str, str]:
    """The statistics (:meth:`Ranges.json`'s form) the adds of ``paths`` (as on disk) carry in the
    snapshot ``dt``, to give the same files' adds elsewhere (a secondary's copies); a file whose add
    has none is left out."""
    wanted = set(paths)
    adds = pa.table(dt.get_add_actions(flatten=False))
    if adds.num_rows == 0 or "null_count" not in adds.column_names:
        return {}
    out = {}
    lows = adds.column("min").to_pylist() if "min" in adds.column_names else [None] * adds.num_rows
    highs = adds.column("max").to_pylist() if "max" in adds.column_names else [None] * adds.num_rows
    for path, nulls, low, high in zip(
        adds.column("path").to_pylist(), adds.column("null_count").to_pylist(), lows, highs, strict=True
    ):
        path = disk_path(path)
        if path not in wanted or not nulls:
            continue
        ranged = [n for n in (low or {}) if low[n] is not None and (high or {}).get(n) is not None]
        found: dict[str, Any] = {}
        if ranged:
            found["minValues"] = {n: _bound(low[n], up=False) for n in ranged}
            found["maxValues"] = {n: _bound(high[n], up=True) for n in ranged}
        found["nullCount"] = {n: v for n, v in nulls.items() if v is not None}
        out[path] = json.dumps(found)
    return out


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


def file_bounds(dt: Any, names: Iterable[str]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Each live file of the snapshot ``dt`` (its path, as on disk) → the (min, max) of each column
    among ``names`` that its add gives a range for and counts no null in: every row's value lies
    within them. A file or column without them is left out (it may hold anything)."""
    adds = pa.table(dt.get_add_actions(flatten=True))
    if adds.num_rows == 0:
        return {}
    have = set(adds.column_names)
    ranged = [n for n in names if {f"min.{n}", f"max.{n}", f"null_count.{n}"} <= have]
    out: dict[str, dict[str, tuple[Any, Any]]] = {}
    if not ranged:
        return out
    paths = [disk_path(p) for p in adds.column("path").to_pylist()]
    for n in ranged:
        lows, highs = adds.column(f"min.{n}").to_pylist(), adds.column(f"max.{n}").to_pylist()
        nulls = adds.column(f"null_count.{n}").to_pylist()
        for path, low, high, null in zip(paths, lows, highs, nulls, strict=True):
            if low is not None and high is not None and null == 0:
                out.setdefault(path, {})[n] = (low, high)
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


def scan_bounds(adds: pa.Table) -> str:
    """What a Spark read of a snapshot prunes its files by (``streampart/java/Pruning.java``): the
    files' names and rows, and each column's minimum, maximum and null count per file, as JSON, from
    the snapshot's add actions (:func:`metastore.delta.files.add_actions`). Bounds are in the units
    Spark holds values in: timestamps in microseconds, dates in days."""
    names = [disk_path(p).rsplit("/", 1)[-1] for p in adds.column("path").to_pylist()]
    rows = adds.column("num_records").to_pylist() if "num_records" in adds.column_names else []
    columns: dict[str, dict[str, list[Any]]] = {}
    for field in adds.schema:
        if not field.name.startswith("null_count."):
            continue
        name = field.name.removeprefix("null_count.")
        bounds: dict[str, list[Any]] = {"nulls": adds.column(field.name).to_pylist()}
        for side in ("min", "max"):
            key = f"{side}.{name}"
            if key not in adds.column_names:
                bounds[side] = [None] * adds.num_rows
                continue
            values = adds.column(key)
            if pa.types.is_timestamp(values.type):
                values = pc.cast(values, pa.timestamp("us", tz=values.type.tz)).cast(pa.int64())
            elif pa.types.is_date(values.type):
                values = pc.cast(values, pa.date32()).cast(pa.int32())
            elif not (
                pa.types.is_integer(values.type)
                or pa.types.is_floating(values.type)
                or pa.types.is_string(values.type)
                or pa.types.is_large_string(values.type)
            ):
                values = pa.nulls(adds.num_rows)  # no order Spark and this share: never pruned by it
            bounds[side] = values.to_pylist()
        columns[name] = bounds
    return json.dumps({"names": names, "rows": rows, "columns": columns}, allow_nan=False)

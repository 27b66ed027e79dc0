"""A Delta snapshot's data files as Iceberg data files: path, partition, counts and column bounds.

Iceberg readers skip files by their columns' lower and upper bounds in the manifests. streampart's
add actions carry few statistics (row counts; a keyed table's key ranges), so the bounds are read
from each file's Parquet footer — the statistics its writer kept per row group, the same source
Iceberg's own import of Parquet files uses. A footer is read once per file and process (files never
change: a path names the same bytes forever), so a streaming partition's files are not read again
each time its manifest is rewritten.

Bounds are given where they are exact: strings and binaries truncated to 16 bytes as Iceberg's
writers do (the upper bound rounded up), floats as pyiceberg writes them, and none for a column
whose file holds another physical type than the table's type now (a widened column).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import StatsAggregator
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyiceberg.types import BinaryType, PrimitiveType, StringType

from metastore import storage
from metastore.delta.files import LiveFile
from metastore.iceberg.schema import IcebergSchema

TRUNCATE = 16  # Iceberg's default metrics mode for every column: truncate(16)
_FOOTERS = 50_000  # footers remembered per process (a few KB each)


@dataclass(frozen=True)
class _Footer:
    column_sizes: dict[str, int]
    value_counts: dict[str, int]
    null_counts: dict[str, int]
    bounds: dict[str, tuple[str, Any, Any]]  # column -> (physical type, min, max)
    split_offsets: tuple[int, ...]


_footers: OrderedDict[str, _Footer] = OrderedDict()
_lock = threading.Lock()


def _read_footer(path: str) -> _Footer:
    with _lock:
        hit = _footers.get(path)
        if hit is not None:
            _footers.move_to_end(path)
            return hit
    with storage.open_input(path) as handle:
        meta = pq.ParquetFile(handle).metadata
    sizes: dict[str, int] = {}
    values: dict[str, int] = {}
    nulls: dict[str, int] = {}
    bounds: dict[str, tuple[str, Any, Any]] = {}
    unknown: set[str] = set()
    offsets = []
    for r in range(meta.num_row_groups):
        group = meta.row_group(r)
        first = group.column(0)
        dictionary = first.dictionary_page_offset
        offsets.append(
            dictionary
            if first.has_dictionary_page and dictionary < first.data_page_offset
            else first.data_page_offset
        )
        for c in range(meta.num_columns):
            col = group.column(c)
            name = col.path_in_schema
            sizes[name] = sizes.get(name, 0) + col.total_compressed_size
            values[name] = values.get(name, 0) + col.num_values
            stats = col.statistics if col.is_stats_set else None
            if stats is None or not stats.has_null_count:
                unknown.add(name)
                continue
            nulls[name] = nulls.get(name, 0) + stats.null_count
            if not stats.has_min_max:
                if stats.null_count < col.num_values:  # values without bounds: none can be given
                    bounds[name] = ("", None, None)
                continue
            low, high = stats.min, stats.max
            kind, was_low, was_high = bounds.get(name, (stats.physical_type, low, high))
            if kind != stats.physical_type or was_low is None:
                bounds[name] = ("", None, None)
                continue
            bounds[name] = (kind, min(low, was_low), max(high, was_high))
    for name in unknown:
        nulls.pop(name, None)
        bounds.pop(name, None)
    footer = _Footer(sizes, values, nulls, bounds, tuple(sorted(offsets)))
    with _lock:
        _footers[path] = footer
        while len(_footers) > _FOOTERS:
            _footers.popitem(last=False)
    return footer


def micros(value: datetime) -> int:
    """A partition value as Iceberg stores a ``timestamptz``: microseconds since the epoch."""
    delta = value.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def data_file(location: str, f: LiveFile, schema: IcebergSchema) -> DataFile:
    """``f`` (a live file of the table at ``location``) as an Iceberg data file of ``schema``."""
    path = storage.join(location, f.path)
    footer = _read_footer(path)
    ids = {field.name: field.field_id for field in schema.schema.fields}
    lower: dict[int, bytes] = {}
    upper: dict[int, bytes] = {}
    for name, (kind, low, high) in footer.bounds.items():
        fid = ids.get(name)
        if fid is None or low is None:
            continue
        field_type = schema.schema.find_type(fid)
        assert isinstance(field_type, PrimitiveType)
        try:
            agg = StatsAggregator(
                field_type, kind, TRUNCATE if field_type in (StringType(), BinaryType()) else None
            )
            agg.update_min(low)
            agg.update_max(high)
            lo, hi = agg.min_as_bytes(), agg.max_as_bytes()
        except (ValueError, TypeError, OverflowError):
            continue  # a physical type this column no longer has (widened since): no bounds
        if lo is not None and hi is not None:
            lower[fid], upper[fid] = lo, hi

    def by_id(counts: dict[str, int]) -> dict[int, int]:
        return {ids[n]: v for n, v in counts.items() if n in ids}

    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=Record(micros(f.partition)),
        record_count=f.rows,
        file_size_in_bytes=f.size,
        column_sizes=by_id(footer.column_sizes),
        value_counts=by_id(footer.value_counts),
        null_value_counts=by_id(footer.null_counts),
        nan_value_counts={},
        lower_bounds=lower,
        upper_bounds=upper,
        key_metadata=None,
        split_offsets=list(footer.split_offsets),
        equality_ids=None,
        sort_order_id=None,
        spec_id=0,
    )


def data_files(location: str, files: Sequence[LiveFile], schema: IcebergSchema) -> list[DataFile]:
    return [data_file(location, f, schema) for f in files]

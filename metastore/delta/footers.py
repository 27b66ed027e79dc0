"""What a Parquet file's footer says of its columns: sizes, value and null counts, min and max.

Read once per file and process (a data file never changes: a path names the same bytes forever),
and kept for the newest :data:`REMEMBERED` files. Readers use it to skip files: the Iceberg
manifests' column bounds (:mod:`metastore.iceberg.files`) and Delta Sharing's predicate hints.
Bounds are what the writer recorded over every row group; a column whose row groups disagree on
its physical type, or lack statistics, has none (``bounds[name] == ("", None, None)`` or absent).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import pyarrow.parquet as pq

from metastore import storage

REMEMBERED = 50_000  # footers kept per process (a few KB each)


@dataclass(frozen=True)
class Footer:
    column_sizes: dict[str, int]
    value_counts: dict[str, int]
    null_counts: dict[str, int]
    bounds: dict[str, tuple[str, Any, Any]]  # column -> (physical type, min, max)
    split_offsets: tuple[int, ...]


@functools.lru_cache(maxsize=REMEMBERED)
def read_footer(path: str) -> Footer:
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
    return Footer(sizes, values, nulls, bounds, tuple(sorted(offsets)))

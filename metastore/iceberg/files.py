"""A Delta snapshot's data files as Iceberg data files: path, partition, counts and column bounds.

Iceberg readers skip files by their columns' lower and upper bounds in the manifests. streampart's
add actions carry few statistics (row counts; a keyed table's key ranges), so the bounds are read
from each file's Parquet footer — the statistics its writer kept per row group, the same source
Iceberg's own import of Parquet files uses (:mod:`metastore.delta.footers`, read once per file and
process: a streaming partition's files are not read again each time its manifest is rewritten).

Bounds are given where they are exact: strings and binaries truncated to 16 bytes as Iceberg's
writers do (the upper bound rounded up), floats as pyiceberg writes them, and none for a column
whose file holds another physical type than the table's type now (a widened column).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime

from pyiceberg.io.pyarrow import StatsAggregator
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record
from pyiceberg.types import BinaryType, PrimitiveType, StringType

from metastore import storage
from metastore.delta.files import LiveFile
from metastore.delta.footers import read_footer
from metastore.iceberg.schema import IcebergSchema

TRUNCATE = 16  # Iceberg's default metrics mode for every column: truncate(16)


def micros(value: datetime) -> int:
    """A partition value as Iceberg stores a ``timestamptz``: microseconds since the epoch."""
    delta = value.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def data_file(location: str, f: LiveFile, schema: IcebergSchema) -> DataFile:
    """``f`` (a live file of the table at ``location``) as an Iceberg data file of ``schema``."""
    path = storage.join(location, f.path)
    footer = read_footer(path)
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

"""How a roll orders a partition's rows by its table's clustering columns (``--cluster-by``,
``metastore/models/clustering.py``), in either roll engine.

- **One column**: rows sorted by it, nulls last.
- **Two to four**: rows Z-ordered. Each column's values are mapped to a *range id* of
  :data:`BITS` bits: the quantile of the partition's rows the value falls in (null: 0). The ids'
  bits are interleaved, most significant first, into one integer, and rows are sorted by it. Rows
  near each other in that order are near each other in every column, so each file cut from them
  covers a narrow range of each column, not of the first one only as a plain sort would.

The local engine ranks the rows it holds exactly (:func:`order`) and cuts files at tiles
(:func:`pieces`). The Spark engine computes the same ids from quantile boundaries read off a sample
of the partition, in Spark SQL, as its workers run no streampart code, and range-partitions by tile
(:func:`spark_clustered`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

# Bits of each column's range id: 256 ranges a column, so a Z-order of 4 columns fits in 32 bits.
BITS = 8
RANGES = 1 << BITS

# Rows the Spark engine samples to find each column's range boundaries.
SAMPLE_ROWS = 100_000


def rows_per_file(target_size: int, rows: int, size: int) -> int:
    """How many rows make a file of about ``target_size`` bytes, when ``rows`` rows took ``size`` bytes
    in their source files (a clustered file's rows are cut by count, not by bytes written)."""
    return max(1, math.ceil(target_size * rows / max(1, size)))


def order(data: pa.Table, names: Sequence[str]) -> tuple[pa.Table, np.ndarray | None]:
    """``data``'s rows in clustering order by ``names`` (sorted by one; Z-ordered by several), with
    each row's Z-value in that order (None for one column)."""
    if len(names) == 1:
        return data.sort_by([(names[0], "ascending")]), None  # nulls last
    z = interleave([range_ids(data.column(n)) for n in names])
    at = np.argsort(z, kind="stable")
    return data.take(pa.array(at)), z[at]


def pieces(count: int, per_file: int, z: np.ndarray | None = None, columns: int = 1) -> list[tuple[int, int]]:
    """Where to cut ``count`` ordered rows into files of about ``per_file`` rows: ``(start, end)`` each.

    Sorted rows (``z`` None) are cut into equal pieces. Z-ordered rows are cut where the Z-curve
    leaves a tile: halved bit by bit, most significant first, until each piece holds at most 1.5
    times ``per_file`` rows (then small neighbours merged while they fit in ``per_file``), so a file
    holds whole tiles, a box in every column, not a stretch of the curve that crosses from one box
    into another far away.
    """
    per_file = max(1, per_file)
    if z is None:
        files = max(1, -(-count // per_file))
        return [(count * k // files, count * (k + 1) // files) for k in range(files)] if count else []
    cut: list[tuple[int, int]] = []

    def split(start: int, end: int, bit: int) -> None:
        if end - start <= per_file * 3 // 2:  # halving it would make two files of under 3/4 the size
            if end > start:
                cut.append((start, end))
        elif bit < 0:  # rows of one Z-value: by count
            cut.extend((s, min(end, s + per_file)) for s in range(start, end, per_file))
        else:  # the rows here share the bits above `bit`; those with it set come last
            high = (int(z[start]) >> (bit + 1)) << (bit + 1)
            mid = start + int(np.searchsorted(z[start:end], np.uint64(high | (1 << bit))))
            split(start, mid, bit - 1)
            split(mid, end, bit - 1)

    split(0, count, BITS * columns - 1)
    merged: list[tuple[int, int]] = []
    for start, end in cut:
        if merged and end - merged[-1][0] <= per_file:
            merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def range_ids(values: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Each value's range id: which of :data:`RANGES` equal shares of the rows, in the values' order,
    it falls in (equal values share one; a null is 0)."""
    n = len(values)
    if n == 0:
        return np.zeros(0, dtype=np.uint64)
    # "min": a value's rank is 1 + the number of rows with a smaller one; nulls ranked last
    ranks = pc.rank(values, sort_keys="ascending", tiebreaker="min")
    ids = (ranks.to_numpy().astype(np.uint64) - 1) * RANGES // n
    nulls = pc.is_null(values)
    if isinstance(nulls, pa.ChunkedArray):
        nulls = nulls.combine_chunks()
    ids[nulls.to_numpy(zero_copy_only=False)] = 0
    return ids


def interleave(ids: Sequence[np.ndarray]) -> np.ndarray:
    """The Z-order value of each row: its columns' range ids' bits interleaved, the most significant
    bit of the first column highest."""
    n = len(ids)
    z = np.zeros(len(ids[0]), dtype=np.uint64)
    for bit in range(BITS):
        for i, column in enumerate(ids):
            z |= ((column >> np.uint64(bit)) & np.uint64(1)) << np.uint64(bit * n + (n - 1 - i))
    return z


def boundaries(sample: Sequence[Any]) -> list[Any]:
    """The range boundaries of a column from a sample of its values: ``RANGES - 1`` quantiles of the
    non-null ones (repeats dropped), so that a value's range id is how many boundaries are at most
    it, as :func:`range_ids` would give over the whole partition, up to the sample's error."""
    values = sorted(v for v in sample if v is not None)
    if not values:
        return []
    picked = [values[k * len(values) // RANGES] for k in range(1, RANGES)]
    return sorted(set(picked))


def spark_clustered(frame: Any, names: Sequence[str], rows: int, files: int) -> Any:
    """``frame`` in ``files`` Spark partitions of clustering order, each sorted by it: range-partitioned
    by the column itself for one name; for several, by the Z-value's top bits (whole tiles in each
    partition, as :func:`pieces` cuts them) and sorted by the Z-value. Each column's range id comes
    from boundaries read off a sample of about :data:`SAMPLE_ROWS` of the partition's ``rows``, and
    their bits are interleaved as :func:`interleave` does."""
    from pyspark.sql import functions as F

    if len(names) == 1:
        key = F.col(f"`{names[0]}`").asc_nulls_last()
        return frame.repartitionByRange(files, key).sortWithinPartitions(key)
    fraction = min(1.0, SAMPLE_ROWS / max(1, rows))
    sample = frame.select(*[F.col(f"`{n}`") for n in names]).sample(False, fraction, seed=0).collect()
    ids = []
    for i, name in enumerate(names):
        bounds = boundaries([row[i] for row in sample])
        column = F.col(f"`{name}`")
        if not bounds:
            ids.append(F.lit(0).cast("long"))
            continue
        within = F.filter(F.array(*[F.lit(b) for b in bounds]), _at_most(column))
        ids.append(F.coalesce(F.size(within), F.lit(0)).cast("long"))
    n = len(names)
    z = F.lit(0).cast("long")
    for bit in range(BITS):
        for i, column_id in enumerate(ids):
            z = z.bitwiseOR(F.shiftleft(F.shiftright(column_id, bit).bitwiseAND(1), bit * n + (n - 1 - i)))
    tile_bits = min(BITS * n, max(0, math.ceil(math.log2(max(1, files)))))
    tile = F.shiftright(F.col("__sp_z"), BITS * n - tile_bits)
    return (
        frame.withColumn("__sp_z", z)
        .repartitionByRange(files, tile)
        .sortWithinPartitions("__sp_z")
        .drop("__sp_z")
    )


def _at_most(column: Any) -> Callable[[Any], Any]:
    """Spark's ``filter`` test of a boundary: at most ``column``'s value (a null tests as not)."""

    def test(bound: Any) -> Any:
        return bound <= column

    return test

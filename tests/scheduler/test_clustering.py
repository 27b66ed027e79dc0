"""Clustering at roll (``--cluster-by``): a rolled partition's rows sorted by one column or Z-ordered by
several, cut into files whose statistics are narrow, so that a reader nobody here wrote (delta-rs'
pyarrow dataset) opens few files for a lookup where the same rows unclustered make it open all.

Every test compares against a twin table holding the same rows without clustering, and checks the rows
themselves with pyarrow over the Parquet files (not our reading of them), and each file's statistics
against its own rows (:func:`tests.helpers.checked_stats`).
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from statistics import mean
from urllib.parse import unquote

import deltalake
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.models import Keys, Table
from scheduler.clustering import interleave, range_ids
from scheduler.config import RollConfig
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import checked_stats, jsonl
from tests.test_cli import assert_user_error, describe, run

SCHEMA = "id BIGINT, ts TIMESTAMP, user_id BIGINT, region STRING, amount DOUBLE"
CHUNKS, ROWS = 16, 200


def chunk(k: int, rng: random.Random) -> bytes:
    return jsonl(
        [
            {
                "id": k * ROWS + i,
                "ts": "2026-11-21T10:15:00Z",
                "user_id": rng.randrange(100_000),
                "region": f"r{rng.randrange(1000):04d}" if i % 17 else None,
                "amount": rng.random() * 100,
            }
            for i in range(ROWS)
        ]
    )


def twins(catalog: Catalog, cluster_by: tuple[str, ...], keys: Keys | None = None) -> tuple[Table, Table]:
    """A table clustered by ``cluster_by`` and one not, given the same chunks."""
    clustered = make_table(catalog, "ns.clustered", schema=SCHEMA, cluster_by=cluster_by, keys=keys)
    plain = make_table(catalog, "ns.plain", schema=SCHEMA, keys=keys)
    for table in (clustered, plain):
        rng = random.Random(7)  # the same rows in both
        w = ChunkWriter(catalog, table)
        for k in range(CHUNKS):
            w.write(chunk(k, rng), Format.JSONL)
    return clustered, plain


def roll(catalog: Catalog, *tables: Table, spark: object = None) -> None:
    chunk_size = max(f.size for f in live_files(catalog.warehouse.load(tables[0])))
    # about one file a chunk
    settings = RollConfig(target_file_size=max(1024, chunk_size), engine="spark" if spark else "local")
    for table in tables:
        [result] = Roller(catalog, settings, spark=(lambda _: spark) if spark else None).roll_table(
            table, force=True
        )
        assert result.files_before == CHUNKS, result


def rows_of(table: Table) -> list[tuple]:
    """The table's live rows, read by pyarrow from the Parquet files the log lists."""
    out = []
    for path in checked_stats(table.location):
        data = pq.read_table(Path(table.location, unquote(path)))
        out += [(r["id"], r["user_id"], r["region"], r["amount"]) for r in data.to_pylist()]
    return sorted(out)


def opened(table: Table, column: str, value: object) -> int:
    """The files delta-rs' pyarrow dataset keeps for ``column = value`` (its answer checked too)."""
    dataset = deltalake.DeltaTable(table.location).to_pyarrow_dataset()
    kept = len(list(dataset.get_fragments(filter=ds.field(column) == value)))
    found = dataset.to_table(filter=ds.field(column) == value).column(column).to_pylist()
    assert found and set(found) == {value}
    return kept


def probes(table: Table, column: str, n: int = 12) -> list[object]:
    """``n`` values of ``column`` spread over its range (read by delta-rs)."""
    present = deltalake.DeltaTable(table.location).to_pyarrow_table(columns=[column]).column(column)
    values = sorted(set(present.drop_null().to_pylist()))
    return values[:: max(1, len(values) // n)][:n]


def test_one_column_sorts_the_partition_into_disjoint_files_a_lookup_skips(catalog: Catalog) -> None:
    clustered, plain = twins(catalog, ("user_id",))
    roll(catalog, clustered, plain)

    assert rows_of(clustered) == rows_of(plain)
    ranges = sorted(
        (s["minValues"]["user_id"], s["maxValues"]["user_id"])
        for s in checked_stats(clustered.location).values()
    )
    assert len(ranges) >= CHUNKS // 2
    for (_, high), (low, _) in itertools.pairwise(ranges):
        assert high <= low, ranges  # each file a range of its own, in order
    files = len(checked_stats(plain.location))
    looked = [
        (opened(clustered, "user_id", v), opened(plain, "user_id", v)) for v in probes(plain, "user_id")
    ]
    assert all(ours <= 2 for ours, _ in looked), looked
    assert mean(theirs for _, theirs in looked) >= files * 0.9, looked  # unclustered: about every file
    assert len(ranges) <= 2 * files  # files of about the target size on both sides


def test_two_columns_z_order_makes_both_selective(catalog: Catalog) -> None:
    clustered, plain = twins(catalog, ("user_id", "region"))
    roll(catalog, clustered, plain)

    assert rows_of(clustered) == rows_of(plain)
    assert_both_selective(clustered, plain)


def assert_both_selective(clustered: Table, plain: Table) -> None:
    """A lookup on either clustering column opens at most a third of the clustered table's files, and
    about every file of the plain one."""
    ours, theirs = len(checked_stats(clustered.location)), len(checked_stats(plain.location))
    assert ours >= CHUNKS // 2
    for column in ("user_id", "region"):
        share = mean(opened(clustered, column, v) for v in probes(plain, column)) / ours
        plain_share = mean(opened(plain, column, v) for v in probes(plain, column)) / theirs
        assert share <= 1 / 3 and plain_share >= 0.9, (column, share, plain_share, ours, theirs)


def test_a_partition_over_the_memory_bound_is_sorted_in_runs(catalog: Catalog) -> None:
    clustered, plain = twins(catalog, ("user_id",))
    chunk_size = max(f.size for f in live_files(catalog.warehouse.load(clustered)))
    held = sum(f.rows for f in live_files(catalog.warehouse.load(clustered))) * 8 * 5 // 4  # ~4 runs
    config = RollConfig(target_file_size=max(1024, chunk_size), cluster_memory=held)
    Roller(catalog, config).roll_table(clustered, force=True)

    assert rows_of(clustered) == rows_of(plain)
    files = sorted(checked_stats(clustered.location).items())  # in the order they were written
    ranges = [(s["minValues"]["user_id"], s["maxValues"]["user_id"]) for _, s in files]
    runs = 1 + sum(1 for (_, high), (low, _) in itertools.pairwise(ranges) if low < high)
    assert 3 <= runs <= 6, ranges  # each run's files in order; a new run starts low again
    looked = [opened(clustered, "user_id", v) for v in probes(clustered, "user_id")]
    assert max(looked) <= runs + 1 and mean(looked) < len(files) / 2, (looked, runs, len(files))


def test_the_z_value_interleaves_range_ids_most_significant_bit_first() -> None:
    import numpy as np
    import pyarrow as pa

    ids = range_ids(pa.array([None, 5, 1, 1, 9, 3, 7, 2]))
    # 8 rows: each rank step is 256 / 8 = 32 ranges; equal values share the lower rank, a null is 0
    assert ids.tolist() == [0, 128, 0, 0, 192, 96, 160, 64]
    z = interleave([np.array([0b1000_0000, 0], dtype=np.uint64), np.array([0, 0b1000_0000], dtype=np.uint64)])
    assert z.tolist() == [1 << 15, 1 << 14]  # the first column's top bit is the highest


def test_a_clustered_keyed_table_rolls_one_row_per_key_in_clustering_order(catalog: Catalog) -> None:
    keys = Keys(columns=("id",))
    clustered, plain = twins(catalog, ("user_id",), keys=keys)
    roll(catalog, clustered, plain)
    assert rows_of(clustered) == rows_of(plain)
    for path in checked_stats(clustered.location):
        users = pq.read_table(Path(clustered.location, unquote(path))).column("user_id").to_pylist()
        assert users == sorted(users)


@pytest.mark.spark
def test_the_spark_engine_clusters_as_the_local_one(spark, sqlite_catalog: Catalog) -> None:
    clustered, plain = twins(sqlite_catalog, ("user_id", "region"))
    roll(sqlite_catalog, clustered, plain, spark=spark)

    assert rows_of(clustered) == rows_of(plain)
    assert_both_selective(clustered, plain)  # (the plain side's job makes as many files as input splits)


@pytest.mark.process
def test_the_cli_sets_shows_changes_and_refuses_clustering(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    base = [
        "table",
        "create",
        "--schema",
        SCHEMA + ", ok BOOLEAN",
        "--time-column",
        "ts",
        "--roll-every",
        "1h",
    ]
    made = run(wh, *base, "ns.t", "--cluster-by", "USER_ID, region", "--json").json()
    assert made["cluster_by"] == ["user_id", "region"]  # as the table spells them
    shown = run(wh, "table", "describe", "ns.t")
    assert "clustered: rolled partitions Z-ordered by user_id, region" in shown.stdout
    assert run(wh, "table", "alter", "ns.t", "--cluster-by", "amount", "--json").json()["cluster_by"] == [
        "amount"
    ]
    assert describe(wh, "ns.t")["cluster_by"] == ["amount"]
    assert run(wh, "table", "alter", "ns.t", "--cluster-by", "none", "--json").json()["cluster_by"] == []

    assert_user_error(
        run(wh, *base, "ns.u", "--cluster-by", "nope,ok"), "'nope' is not a column", "'ok' is BOOLEAN"
    )
    assert_user_error(run(wh, *base, "ns.u", "--cluster-by", "id,id"), "'id' is named twice")
    assert_user_error(run(wh, *base, "ns.u", "--cluster-by", "id,"), "give one or more column names")
    five = "id,user_id,region,amount,ts"
    assert_user_error(run(wh, *base, "ns.u", "--cluster-by", five), "at most 4 are taken")
    assert run(wh, "table", "describe", "ns.u").returncode == 1  # nothing was made
    assert_user_error(run(wh, "table", "alter", "ns.t", "--cluster-by", "nope"), "'nope' is not a column")
    assert describe(wh, "ns.t")["cluster_by"] == []  # the refusal changed nothing
    # a column the same command adds may be named
    added = run(
        wh, "table", "alter", "ns.t", "--add-column", "shop INT", "--cluster-by", "shop", "--json"
    ).json()
    assert added["cluster_by"] == ["shop"]

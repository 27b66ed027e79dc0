"""Column statistics in every add (``metastore/delta/stats.py``): chunk commits and rolls give each
file's ``minValues``/``maxValues``/``nullCount``, a reader nobody here wrote (delta-rs' pyarrow
dataset) skips files by them, and each bound is checked against the file's own rows read by
pyarrow from the Parquet file itself."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import deltalake
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from ingest.chunks import ChunkWriter
from ingest.deletes.deleter import Deleter
from ingest.formats import Format
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import checked_stats, jsonl, live_stats

SCHEMA = "id BIGINT, ts TIMESTAMP, msg STRING, score DOUBLE, ok BOOLEAN, day DATE"
T0 = datetime(2026, 11, 21, 10, 15, 0, 1500, tzinfo=UTC)  # 1.5 ms: no millisecond holds it


def rows(first: int, n: int, *, nan: bool = False, long_text: bool = False) -> bytes:
    out = []
    for i in range(first, first + n):
        out.append(
            {
                "id": i,
                "ts": (T0 + timedelta(seconds=i)).isoformat(),
                "msg": ("x" * 40 if long_text else f"m{i:04d}") if i % 3 else None,
                "score": float("nan") if nan and i == first else i / 2,
                "ok": i % 2 == 0,
                "day": "2026-11-21",
            }
        )
    return jsonl(out)


def check_against_files(location: str) -> int:
    """Every live file's statistics against its rows (:func:`tests.helpers.checked_stats`), and a
    range for every column that may have one, none for the others; the files checked."""
    live = checked_stats(location)
    for path, stats in live.items():
        data = pq.read_table(Path(location, unquote(path))).to_pylist()
        for column in ("id", "ts", "msg", "score", "ok", "day"):
            present = [r[column] for r in data if r[column] is not None]
            unranged = (
                column == "ok"  # booleans: a null count only
                or not present
                or (column == "score" and any(math.isnan(v) for v in present))
                or (column == "msg" and any(len(v) > 32 for v in present))
            )
            assert (column not in stats.get("minValues", {})) == unranged, (path, column)
            assert column in stats["nullCount"], (path, column)
    return len(live)


def test_chunk_commits_and_rolls_give_every_file_its_bounds_and_readers_skip_by_them(catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    writer = ChunkWriter(catalog, table)
    for k in range(4):
        writer.write(rows(k * 100, 20), Format.JSONL, key=f"c{k}")
    writer.write(rows(400, 5, nan=True), Format.JSONL, key="nan")  # a NaN: no range for score
    writer.write(rows(500, 5, long_text=True), Format.JSONL, key="long")  # 40 characters: none for msg
    assert check_against_files(table.location) == 6

    # a reader nobody here wrote: delta-rs' pyarrow dataset gives each fragment its file's bounds
    dataset = deltalake.DeltaTable(table.location).to_pyarrow_dataset()
    assert len(list(dataset.get_fragments())) == 6
    assert len(list(dataset.get_fragments(filter=ds.field("id") == 205))) == 1
    at = T0 + timedelta(seconds=305)
    assert len(list(dataset.get_fragments(filter=ds.field("ts") > at))) == 3  # the 4th chunk and two more
    assert dataset.to_table(filter=ds.field("id") == 205).num_rows == 1

    # the roll compacts them into one file: its add has the bounds of all their rows
    [rolled] = Roller(catalog).roll_table(table, force=True)
    assert rolled.files_after == 1
    assert check_against_files(table.location) == 1
    [stats] = live_stats(table.location).values()
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (0, 504)
    assert "score" not in stats["minValues"] and "msg" not in stats["minValues"]

    # a delete rewrites the file without its rows: the new file's add has the bounds of what is left
    [deleted] = Deleter(catalog).delete(table, "id >= 500 OR id < 10")
    assert deleted.rows == 15 and deleted.files_added == 1
    assert check_against_files(table.location) == 1
    [stats] = live_stats(table.location).values()
    assert (stats["minValues"]["id"], stats["maxValues"]["id"]) == (10, 404)
    assert "msg" in stats["minValues"] and "score" not in stats["minValues"]  # its NaN stayed


def test_a_delete_reads_only_the_files_whose_bounds_may_hold_a_match(catalog) -> None:
    table = make_table(catalog, schema=SCHEMA)
    writer = ChunkWriter(catalog, table)
    for k in range(6):
        writer.write(rows(k * 100, 20), Format.JSONL, key=f"c{k}")  # ids k*100 … +19; no msg where i%3==0

    def dry(where: str) -> tuple[int, int]:
        [result] = Deleter(catalog).delete(table, where, dry_run=True)
        return result.files_read, result.rows

    assert dry("id = 205") == (1, 1)
    assert dry("id IN (5, 519)") == (2, 2)
    assert dry("ts > TIMESTAMP '2026-11-21 10:20:06'") == (3, 14 + 20 + 20)  # ids 306 … and the two after
    assert dry("id IS NULL") == (0, 0)  # no file holds a null id
    nulls = sum(1 for k in range(6) for i in range(k * 100, k * 100 + 20) if i % 3 == 0)
    assert dry("id = 205 OR msg IS NULL") == (6, 1 + nulls)  # every file holds a null msg: all read

    [done] = Deleter(catalog).delete(table, "id = 205")
    assert (done.files_read, done.rows, done.files_removed) == (1, 1, 1)
    ids = deltalake.DeltaTable(table.location).to_pyarrow_table(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == [i for k in range(6) for i in range(k * 100, k * 100 + 20) if i != 205]

"""A damaged Delta log or data file is named, never served silently (issue 14, item 3).

Each case damages a table the way an operator's accident or a failing disk would, then checks
that reads, writes and rolls refuse it with one clear error naming the table and what to do,
that nothing new is committed on top of it, and that ``check_table`` reports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.errors import TableIntegrityError
from metastore.integrity import check_table
from metastore.models import Table
from metastore.warehouse import partition_dir
from scheduler.roll import Roller
from streampart.query import pin
from tests.fixtures import make_table
from tests.helpers import records


def _commit(table: Table, version: int) -> Path:
    return Path(table.location) / "_delta_log" / f"{version:020d}.json"


def _data_file(table: Table) -> Path:
    return next((Path(table.location) / "_staging").rglob("*.parquet"))


def _truncate_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _garble(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)  # same size, not Parquet any more


# (case, damage, what a read of the newest snapshot says, what check reports)
LOG_CASES: list[tuple[str, Callable[[Table], None], str, str]] = [
    # the newest commit file deleted: delta-rs alone silently serves version 2
    ("newest-deleted", lambda t: _commit(t, 3).unlink(), "ends at version 2", "log_behind"),
    # the newest commit file emptied: delta-rs alone serves "version 3" without its rows
    ("newest-emptied", lambda t: _commit(t, 3).write_bytes(b""), "empty or holds no", "commit_damaged"),
    # truncated mid-record (a torn write)
    ("newest-truncated", lambda t: _truncate_half(_commit(t, 3)), "cannot be read", "commit_damaged"),
    # a commit file in the middle deleted: a gap
    ("middle-deleted", lambda t: _commit(t, 2).unlink(), "cannot be read", "log_gap"),
]


@pytest.mark.parametrize("case, damage, says, kind", LOG_CASES, ids=[c[0] for c in LOG_CASES])
def test_a_damaged_log_is_refused_by_reads_writes_and_rolls(  # type: ignore[no-untyped-def]
    catalog, case: str, damage: Callable[[Table], None], says: str, kind: str
) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(3):
        assert w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL).version == k + 1
    damage(table)
    log_before = sorted(os.listdir(Path(table.location) / "_delta_log"))
    with pytest.raises(TableIntegrityError, match=says) as refused:
        catalog.load(table)
    assert str(table.name) in str(refused.value) and "backup" in str(refused.value)
    assert "\n" not in str(refused.value)  # one line: no Rust backtrace
    with pytest.raises(TableIntegrityError, match=says):
        catalog.describe(table)
    with pytest.raises(TableIntegrityError, match=says):
        ChunkWriter(catalog, table).write(records(range(100, 110)), Format.JSONL)
    with pytest.raises(TableIntegrityError, match=says):
        Roller(catalog).roll_table(table, force=True)
    assert sorted(os.listdir(Path(table.location) / "_delta_log")) == log_before  # nothing committed on top
    assert kind in {p.kind for p in check_table(catalog, table)}


# (case, damage, what a query's snapshot says, what check reports)
FILE_CASES: list[tuple[str, Callable[[Table], None], str, str]] = [
    ("file-deleted", lambda t: _data_file(t).unlink(), "is missing", "file_missing"),
    ("file-truncated", lambda t: _truncate_half(_data_file(t)), "bytes, the Delta log says", "file_size"),
    ("file-garbled", lambda t: _garble(_data_file(t)), "", "file_unreadable"),
]


@pytest.mark.parametrize("case, damage, says, kind", FILE_CASES, ids=[c[0] for c in FILE_CASES])
def test_a_damaged_data_file_is_named(  # type: ignore[no-untyped-def]
    catalog, case: str, damage: Callable[[Table], None], says: str, kind: str
) -> None:
    table = make_table(catalog)
    ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL)
    damage(table)
    if says:  # a query never answers from part of its snapshot
        with pytest.raises(TableIntegrityError, match=says):
            pin(catalog, table)
    [problem] = [p for p in check_table(catalog, table) if p.severity == "error"]
    assert problem.kind == kind and problem.path and problem.path.startswith("_staging/")


def test_a_healthy_table_has_no_problems_and_a_broken_standard_partition_is_reported(catalog) -> None:  # type: ignore[no-untyped-def]
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    value = catalog.store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    w.write(records(range(100, 110)), Format.JSONL)
    assert check_table(catalog, table) == []
    directory = Path(table.location) / partition_dir(table, value)
    (directory / "_SUCCESS").unlink()
    stray = directory / "part-copied-by-hand.parquet"
    stray.write_bytes(next(directory.glob("part-*.parquet")).read_bytes())
    found = {(p.kind, p.severity) for p in check_table(catalog, table)}
    assert found == {("partition_marker", "error"), ("orphan_file", "warning")}

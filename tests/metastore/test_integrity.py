"""A damaged Delta log or data file is named, never served silently (issue 14, item 3).

Each case damages a table the way an operator's accident or a failing disk would, then checks
that reads, writes and rolls refuse it with one clear error naming the table and what to do,
that nothing new is committed on top of it, and that ``check_table`` reports it.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore import storage
from metastore.delta.layout import partition_dir
from metastore.delta.log import commit_file
from metastore.errors import TableIntegrityError
from metastore.integrity import check_table
from metastore.models import Table
from scheduler.roll import Roller
from streampart.query import pin
from tests.fixtures import make_table
from tests.helpers import records, worker_call
from tests.test_cli import run as cli


def _commit(table: Table, version: int) -> Path:
    return Path(table.location) / "_delta_log" / f"{version:020d}.json"


def _data_file(table: Table) -> Path:
    return next((Path(table.location) / "_staging").rglob("*.parquet"))


def _truncate_half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _cut_at_a_line(path: Path, keep_count: bool = True) -> None:
    """Keep the commit file's first line (its commitInfo) and drop the rest (its ``add`` lines).

    ``keep_count=False``: also drop the commitInfo's count of actions, as in a commit file
    written before it was counted: only the metastore's record of the version can tell then.
    """
    first = path.read_bytes().splitlines()[0]
    if not keep_count:
        action = json.loads(first)
        action["commitInfo"].pop("streampart.actions", None)
        first = json.dumps(action).encode()
    path.write_bytes(first + b"\n")


def _garble(path: Path) -> None:
    path.write_bytes(b"\0" * path.stat().st_size)  # same size, not Parquet any more


# (case, damage, what a read of the newest snapshot says, what check reports)
LOG_CASES: list[tuple[str, Callable[[Table], object], str, str]] = [
    # the newest commit file deleted: delta-rs alone silently serves version 2
    ("newest-deleted", lambda t: _commit(t, 3).unlink(), "ends at version 2", "log_behind"),
    # the newest commit file emptied: delta-rs alone serves "version 3" without its rows
    (
        "newest-emptied",
        lambda t: _commit(t, 3).write_bytes(b""),
        "empty, cut short or holds no",
        "commit_damaged",
    ),
    # cut at a line boundary: its commitInfo kept, its add lines gone; delta-rs alone serves
    # "version 3" without the acknowledged chunk's rows (issue 25)
    ("newest-cut-at-a-line", lambda t: _cut_at_a_line(_commit(t, 3)), "cut short", "commit_damaged"),
    # truncated mid-record (a torn write)
    ("newest-truncated", lambda t: _truncate_half(_commit(t, 3)), "cannot be read", "commit_damaged"),
    # a commit file in the middle deleted: a gap
    ("middle-deleted", lambda t: _commit(t, 2).unlink(), "cannot be read", "log_gap"),
]


@pytest.mark.parametrize("case, damage, says, kind", LOG_CASES, ids=[c[0] for c in LOG_CASES])
def test_a_damaged_log_is_refused_by_reads_writes_and_rolls(
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
def test_a_damaged_data_file_is_named(
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


def test_a_healthy_table_has_no_problems_and_a_broken_standard_partition_is_reported(catalog) -> None:
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


@pytest.mark.process
def test_a_commit_file_cut_at_a_line_is_refused_by_what_the_metastore_recorded_at_its_version(
    catalog,
) -> None:
    """Issue 25: the newest commit file cut at a line boundary, without the count of its actions
    (as written before commits counted them): the metastore's record of the chunk committed at
    that version and its files is what names the damage, to reads, rolls, a new writer and check."""
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    _cut_at_a_line(_commit(table, 3), keep_count=False)
    log_before = sorted(os.listdir(Path(table.location) / "_delta_log"))
    says = r"lacks file .* which the metastore recorded committed at that version"
    with pytest.raises(TableIntegrityError, match=says) as refused:
        catalog.load(table)
    assert str(table.name) in str(refused.value) and "version 3" in str(refused.value)
    with pytest.raises(TableIntegrityError, match=says):
        pin(catalog, table)
    with pytest.raises(TableIntegrityError, match=says):
        Roller(catalog).roll_table(table, force=True)
    # a writer process that has not seen the table yet loads it and is refused too
    code, acks, err = run_worker(catalog, table, "writer", "--count", "1", "--start", "7")
    assert code != 0 and acks == [] and "lacks file" in err
    assert sorted(os.listdir(Path(table.location) / "_delta_log")) == log_before  # nothing on top
    [problem] = [p for p in check_table(catalog, table) if p.severity == "error"]
    assert problem.kind == "commit_mismatch" and problem.version == 3
    assert problem.path == str(_commit(table, 3)) and "lacks file" in problem.message
    # and as a user sees it: `table read` refuses in one line, `check` names table, version and file
    root, url = catalog.warehouse.root, catalog.store.url
    read = cli(root, "--metastore", url, "table", "read", str(table.name))
    assert read.returncode == 1 and read.message.startswith("error: ") and "lacks file" in read.message
    checked = cli(root, "--metastore", url, "check", str(table.name))
    assert checked.returncode == 1 and "commit_mismatch" in checked.stdout + checked.stderr
    assert str(_commit(table, 3)) in checked.stdout + checked.stderr


@pytest.mark.process
def test_a_newest_commit_deleted_under_a_running_writer_is_not_taken_again(storage_catalog) -> None:
    """Issue 25: the newest commit file deleted while writers run. This process's writer last saw
    version 2; another process commits version 3 and is acknowledged; version 3's file is deleted.
    The next group commit here lands at the freed version 3 with other content — which must not be
    acknowledged as if nothing happened: it is refused, reads refuse, and check names version 3.
    On a local disk and in a bucket (where the writer finds the log's tail by one listing)."""
    catalog = storage_catalog
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(2):
        assert w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL).version == k + 1
    code, acks, err = run_worker(catalog, table, "writer", "--writer", "1", "--count", "1")
    assert code == 0, err
    assert acks[0]["version"] == 3
    storage.delete([commit_file(table.location, 3)])
    with pytest.raises(TableIntegrityError, match=r"recorded chunk .* committed at that version already"):
        w.write(records(range(100, 110)), Format.JSONL)
    with pytest.raises(TableIntegrityError, match=f"chunk {acks[0]['chunk']} committed at version 3"):
        catalog.load(table)
    with pytest.raises(TableIntegrityError):  # and the next write here commits nothing on top
        w.write(records(range(200, 210)), Format.JSONL)
    assert not storage.exists(commit_file(table.location, 4))
    problems = [p for p in check_table(catalog, table) if p.severity == "error"]
    assert [(p.kind, p.version) for p in problems] == [("commit_mismatch", 3)]
    assert acks[0]["chunk"] in problems[0].message


def run_worker(catalog, table, *args: str):
    proc = subprocess.run(**worker_call(catalog, table, *args), capture_output=True, timeout=120)
    acks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, acks, proc.stderr


def test_a_sweep_commit_cut_at_a_line_is_refused(catalog) -> None:
    """The newest commit a roll's sweep (written by delta-rs) cut after its commitInfo: its remove
    and add lines lost, the standard partition's rows would vanish; its count of actions names it."""
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(2):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    Roller(catalog).roll_table(table, force=True)
    sweep = max(int(p.stem) for p in (Path(table.location) / "_delta_log").glob("*.json"))
    _cut_at_a_line(_commit(table, sweep))
    with pytest.raises(TableIntegrityError, match=f"version {sweep} is empty, cut short"):
        pin(catalog, table)
    with pytest.raises(TableIntegrityError, match="cut short"):
        ChunkWriter(catalog, table).write(records(range(100, 110)), Format.JSONL)
    assert not _commit(table, sweep + 1).exists()
    assert ("commit_damaged", sweep) in {(p.kind, p.version) for p in check_table(catalog, table)}

"""Crash safety (invariant 6): SIGKILL real writer and roller processes at every step.

Each process kills itself with SIGKILL at a named crash point (metastore/crashpoints.py),
so the kill lands at an exact step of the protocol; then a fresh process retries or resumes
and the table must satisfy invariants 1–5.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter, expire_chunks
from ingest.config import ChunkConfig
from ingest.formats import Format
from metastore import clock, storage
from metastore.delta.files import live_files
from metastore.delta.layout import partition_dir
from metastore.models import ChunkState, PartitionState
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, cli_process, duplicates, ids_by_partition, records, worker_call


def run_worker(catalog, table, *args: str, crashpoint: str | None = None, timeout: float = 120):
    proc = subprocess.run(
        **worker_call(catalog, table, *args, crashpoint=crashpoint), capture_output=True, timeout=timeout
    )
    acks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, acks, proc.stderr


# Where a writer dies, and what a retry with the same idempotency key must find.
WRITER_CRASHES = [
    # files staged, commit never begun: the retry rewrites and commits them
    "chunk-after-write",
    # COMMITTING recorded, no Delta commit: the retry takes the attempt over and commits
    "chunk-before-delta-commit",
    # Delta commit landed, metastore not told: the retry finds the commit, adds nothing
    "chunk-after-delta-commit",
]


@pytest.mark.process
@pytest.mark.parametrize("point", WRITER_CRASHES)
def test_writer_killed_at_each_step_then_retried_lands_once(storage_catalog, point: str) -> None:
    catalog = storage_catalog  # a local disk, and a bucket
    table = make_table(catalog)
    code, acks, _ = run_worker(
        catalog, table, "writer", "--count", "1", "--commit-timeout", "0.3", crashpoint=point
    )
    assert code == -signal.SIGKILL and acks == []
    if point == "chunk-after-delta-commit":
        assert sorted(all_ids(table)) == list(range(10))  # landed, though never acknowledged
    else:
        assert all_ids(table) == []  # invariant 1: nothing of an uncommitted chunk is visible
    # the retry runs where the takeover deadline (2 × commit timeout) has passed: no sleeping
    code, acks, err = run_worker(
        catalog, table, "writer", "--count", "1", "--commit-timeout", "0.3", "--clock-offset", "0.7"
    )
    assert code == 0, err
    assert sorted(all_ids(table)) == list(range(10))  # invariant 2: exactly once
    chunk = catalog.store.find_chunk_by_key(table.id, "w0-0")
    assert chunk.state is ChunkState.COMMITTED and acks[0]["chunk"] == chunk.id


@pytest.mark.process
@pytest.mark.parametrize("point", ["chunk-before-delta-commit", "chunk-after-delta-commit"])
def test_a_process_killed_in_a_group_commit_then_retried_lands_each_chunk_once(
    storage_catalog, point: str
) -> None:
    """Four writer threads of one process: the first group dwells, the next holds the others' chunks.

    The process dies at ``point`` of that second group (several chunks, one Delta commit); a
    retry with the same keys takes every chunk over and lands each exactly once — all of the
    group's from its one commit if it had landed. On a local disk and in a bucket.
    """
    catalog = storage_catalog
    table = make_table(catalog)
    proc = subprocess.run(
        **worker_call(
            catalog,
            table,
            "writer",
            "--count",
            "4",
            "--threads",
            "4",
            "--commit-timeout",
            "5",
            crashpoint=f"{point}@2",
            pausepoint="chunk-before-delta-commit:1.0",
        ),
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    acked = [json.loads(line)["token"] for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(acked) <= 1  # the first group (one chunk) may have been acknowledged, the second never
    group = [c for c in catalog.store.list_chunks(table.id) if c.state is ChunkState.COMMITTING]
    assert len(group) == 3
    landed = catalog.warehouse.find_chunk_commit(table, group[0].id, 0)
    if point == "chunk-after-delta-commit":
        assert landed is not None and len(all_ids(table)) == 40  # landed whole, never acknowledged
        assert all(catalog.warehouse.find_chunk_commit(table, c.id, 0) == landed for c in group)
    else:
        assert landed is None and len(all_ids(table)) == 10  # invariant 1: none of the group visible
    code, acks, err = run_worker(
        catalog,
        table,
        "writer",
        "--count",
        "4",
        "--threads",
        "2",
        "--commit-timeout",
        "5",
        "--clock-offset",
        "11",
    )
    assert code == 0, err
    ids = all_ids(table)
    assert sorted(ids) == sorted(i for k in range(4) for i in range(k * 10, k * 10 + 10))  # invariant 2
    versions = {a["token"]: a["version"] for a in acks}
    if point == "chunk-after-delta-commit":  # the retry answers the group's one commit for each
        assert {versions[f"w0-{k}"] for k in range(4) if f"w0-{k}" not in acked} == {landed}


@pytest.mark.process
def test_a_writer_killed_before_commit_and_never_retried_leaves_nothing(catalog) -> None:
    table = make_table(catalog)
    code, _, _ = run_worker(catalog, table, "writer", "--count", "1", crashpoint="chunk-after-write")
    assert code == -signal.SIGKILL
    staging = Path(table.location) / "_staging"
    assert len(list(staging.glob("*.parquet"))) == 1
    chunk = catalog.store.find_chunk_by_key(table.id, "w0-0")
    assert expire_chunks(catalog) == []  # not before its TTL …
    expire_chunks(catalog, now=chunk.expires_at)  # … but once past it, housekeeping removes its files
    assert catalog.store.get_chunk(chunk.id).state is ChunkState.EXPIRED
    assert list(staging.glob("*.parquet")) == [] and all_ids(table) == []


# Where a roller dies; a restarted roller must finish that roll exactly once.
ROLL_CRASHES = [
    "roll-after-begin",  # partition ROLLING, table not sealed
    "roll-after-seal",  # sealed, nothing swept
    "roll-after-compact",  # compacted files on disk but not committed: must be cleaned up
    "roll-after-sweep",  # sweep committed; no _SUCCESS, partition still ROLLING
    "roll-before-finish",  # _SUCCESS written, partition still ROLLING
]


@pytest.mark.process
@pytest.mark.parametrize("point", ROLL_CRASHES)
def test_roller_killed_at_each_step_then_resumed_rolls_once(storage_catalog, point: str) -> None:
    catalog = storage_catalog  # a local disk, and a bucket
    started = clock.now()  # "nothing left to roll" is asked as of then: an hour may turn meanwhile
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig())
    value = catalog.store.streaming_partition(table.id).value
    for k in range(4):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    code, _, _ = run_worker(
        catalog, table, "roller", "--count", "1", "--interval", "0", "--force", crashpoint=point
    )
    assert code == -signal.SIGKILL
    assert catalog.store.get_partition(table.id, value).state is PartitionState.ROLLING
    # writers carry on into the next partition while the roll is stuck
    w.write(records(range(100, 110)), Format.JSONL)
    ids = all_ids(table)
    assert not duplicates(ids) and sorted(ids) == [*range(40), *range(100, 110)]
    # the dead roller's lease must end before another may resume; here it is taken over by
    # letting the lease lapse in the metastore's clock
    roll = catalog.store.list_rolls(table.id, unfinished=True)[0]
    from datetime import timedelta

    resumed = Roller(catalog)
    catalog.store.claim_roll(
        roll, resumed.owner, timedelta(minutes=1), now=roll.lease_until + timedelta(seconds=1)
    )
    results = resumed.roll_table(table, now=started)
    assert [(r.partition, r.resumed, r.rows) for r in results] == [(results[0].partition, True, 40)]
    assert Roller(catalog).roll_table(table, now=started) == []  # nothing left: rolled exactly once
    by_part = ids_by_partition(table)
    assert sorted(by_part[value]) == list(range(40))
    assert sorted(by_part[catalog.store.streaming_partition(table.id).value]) == list(range(100, 110))
    directory = storage.join(table.location, partition_dir(table, value))
    listed = storage.list_dir(directory)
    on_disk = {e.name for e in listed if not e.name.startswith(("_", "."))}
    live = {f.name for f in live_files(catalog.warehouse.load(table)) if f.partition == value}
    assert on_disk == live and "_SUCCESS" in {e.name for e in listed}
    p = catalog.store.get_partition(table.id, value)
    assert (p.state, p.rows, p.chunks) == (PartitionState.STANDARD, 40, 4)


@pytest.mark.process
def test_a_killed_roller_is_taken_over_within_seconds_by_the_next(catalog) -> None:
    """A ``streampart roll`` SIGKILLed mid-roll held its roll for its whole lease (10 minutes); its
    process lease now lapses ~8 s after its last renewal, and the next roller, refused until then,
    takes the roll over and finishes it once."""
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig())
    value = catalog.store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    proc = cli_process(catalog, "roll", str(table.name), "--force", crashpoint="roll-after-seal")
    proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL
    [dead] = catalog.store.list_rolls(table.id, unfinished=True)
    assert dead.lease_until is not None and dead.lease_until > clock.now() + timedelta(minutes=5)
    busy, took, results = _roll_until_taken_over(catalog, table)
    assert busy > 0, "taken over while its process lease was live"
    assert took < 20, f"taken over after {took:.1f} s"
    assert [(r.roll, r.resumed, r.rows) for r in results] == [(dead.id, True, 30)]
    assert sorted(ids_by_partition(table)[value]) == list(range(30))


def _roll_until_taken_over(catalog, table) -> tuple[int, float, list]:
    since, busy = time.monotonic(), 0
    while not (results := Roller(catalog).roll_table(table)):  # the other's roll is busy: skipped
        busy += 1
        assert time.monotonic() - since < 60, "the roll was never taken over"
        time.sleep(0.5)
    return busy, time.monotonic() - since, results


@pytest.mark.process
@pytest.mark.parametrize("point", ["roll-after-begin", "roll-after-compact"])
def test_a_frozen_roller_woken_after_its_takeover_commits_nothing(catalog, point: str) -> None:
    """A ``streampart roll`` frozen (SIGSTOP) before its seal, or before its sweep commit, is taken
    over ~10 s later; woken, it commits nothing (its process lease lapsed meanwhile) and exits with
    one line."""
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig())
    value = catalog.store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    proc = cli_process(catalog, "roll", str(table.name), "--force", pausepoint=f"{point}:3")
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == f"pausepoint {point}"
    proc.send_signal(signal.SIGSTOP)
    try:
        busy, took, results = _roll_until_taken_over(catalog, table)
    finally:
        proc.send_signal(signal.SIGCONT)
    assert busy > 0 and took < 20, (busy, took)
    version = int(catalog.load(table).version())
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert "stalled past its lease" in err or "is owned by" in err, err
    assert int(catalog.load(table).version()) == version  # the woken roller committed nothing
    assert [(r.resumed, r.rows) for r in results] == [(True, 30)]
    assert sorted(ids_by_partition(table)[value]) == list(range(30))
    p = catalog.store.get_partition(table.id, value)
    assert (p.state, p.rows) == (PartitionState.STANDARD, 30)


def test_a_roll_whose_seal_conflicts_is_let_go_at_once(catalog, monkeypatch) -> None:
    """A roll that failed on a commit conflict (its seal raced a schema change) kept its lease, so
    no roller could resume it for 10 minutes; it is now let go, and the next roll resumes it."""
    from metastore.errors import ConflictError

    table = make_table(catalog)
    ChunkWriter(catalog, table, ChunkConfig()).write(records(range(10)), Format.JSONL)
    seal = type(catalog.warehouse).seal

    def conflicting(self, *args, **kwargs):
        raise ConflictError("the table's Delta log moved on (a concurrent schema change)")

    monkeypatch.setattr(type(catalog.warehouse), "seal", conflicting)
    with pytest.raises(ConflictError):
        Roller(catalog).roll_table(table, force=True)
    [roll] = catalog.store.list_rolls(table.id, unfinished=True)
    assert roll.lease_until is not None and roll.lease_until <= clock.now(), roll
    assert roll.error is not None and "concurrent schema change" in roll.error
    monkeypatch.setattr(type(catalog.warehouse), "seal", seal)
    assert [(r.roll, r.resumed, r.rows) for r in Roller(catalog).roll_table(table)] == [(roll.id, True, 10)]


def _wait_for_pause(proc: subprocess.Popen, step: str, timeout: float = 60) -> None:
    """Read the worker's stderr until it says it is paused at ``step``."""
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            raise AssertionError(f"worker exited (code {proc.wait()}) before pausing at {step}")
        if line.strip() == f"pausepoint {step}":
            return
    raise AssertionError(f"worker did not pause at {step} within {timeout}s")


# A roller stalls (GC, a paused VM, SIGSTOP) after listing the partition's files, past its roll
# lease; a second roller takes the roll over. The stalled one then wakes up with a stale
# snapshot and must not delete a single file of the new owner's sweep.
STALE_ROLLER_CASES = [
    # the new owner has finished: its compacted files are committed and the partition STANDARD
    "takeover-finished",
    # the new owner has written its compacted files and not yet committed them
    "takeover-mid-sweep",
]


@pytest.mark.process
@pytest.mark.parametrize("case", STALE_ROLLER_CASES)
def test_a_stale_roller_never_deletes_the_new_owners_files(storage_catalog, case: str) -> None:
    catalog = storage_catalog  # a local disk, and a bucket
    table = make_table(catalog)
    w = ChunkWriter(catalog, table, ChunkConfig())
    value = catalog.store.streaming_partition(table.id).value
    for k in range(4):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    roller_args = ("roller", "--count", "1", "--interval", "0", "--force")
    stale = subprocess.Popen(
        **worker_call(catalog, table, *roller_args, "--lease", "1", pausepoint="roll-sweep-listed:12"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        _wait_for_pause(stale, "roll-sweep-listed")
        # the next rollers run where the stalled roller's 1 s lease has lapsed
        if case == "takeover-finished":
            with clock.use(clock.SystemClock(timedelta(seconds=1.5))):
                results = Roller(catalog).roll_table(table)
            assert [(r.resumed, r.rows) for r in results] == [(True, 40)]
            assert stale.wait(timeout=60) == 0
        else:
            new_owner = subprocess.Popen(
                **worker_call(
                    catalog, table, *roller_args, "--clock-offset", "1.5", pausepoint="roll-after-compact:12"
                ),
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            try:
                _wait_for_pause(new_owner, "roll-after-compact")
                assert stale.wait(timeout=60) == 0  # woke while the new owner's files are uncommitted
                assert new_owner.wait(timeout=60) == 0
            finally:
                new_owner.kill()
    finally:
        stale.kill()
    p = catalog.store.get_partition(table.id, value)
    assert (p.state, p.rows, p.chunks) == (PartitionState.STANDARD, 40, 4)
    assert sorted(ids_by_partition(table)[value]) == list(range(40))  # every file there and readable
    listed = storage.list_dir(storage.join(table.location, partition_dir(table, value)))
    on_disk = {e.name for e in listed if not e.name.startswith("_")}
    live = {f.name for f in live_files(catalog.warehouse.load(table)) if f.partition == value}
    assert on_disk == live and "_SUCCESS" in {e.name for e in listed}

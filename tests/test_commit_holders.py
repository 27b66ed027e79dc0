"""A retry is not kept waiting by an attempt known to be over (issue 25).

- An attempt that failed knowing it committed nothing (a damaged log, a full disk, the metastore
  down before its Delta commit) releases its chunk at once: the retry commits without waiting out
  twice ``chunk.commit_timeout`` as busy.
- A process that dies holding a commit (SIGKILL at a crash point) stops renewing its commit-holder
  lease; a retry in another process takes the commit over within seconds and lands it once.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from datetime import timedelta
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter, recover_commits
from ingest.commit_holders import GRACE, HEARTBEAT, PREFIX, TTL, commit_holder
from ingest.errors import ChunkBusyError
from ingest.formats import Format
from metastore import clock
from metastore.errors import TableIntegrityError
from metastore.models import ChunkState, Table
from scheduler.housekeeping import Housekeeper
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, records, worker_call


def _commit(table: Table, version: int) -> Path:
    return Path(table.location) / "_delta_log" / f"{version:020d}.json"


def run_worker(catalog, table, *args: str, crashpoint: str | None = None):
    proc = subprocess.run(
        **worker_call(catalog, table, *args, crashpoint=crashpoint), capture_output=True, timeout=120
    )
    acks = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return proc.returncode, acks, proc.stderr


@pytest.mark.process
def test_a_failed_attempt_that_committed_nothing_releases_its_chunk_at_once(catalog) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    for k in range(2):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    saved = _commit(table, 2).read_bytes()
    _commit(table, 2).write_bytes(b"")  # a damaged log: every commit attempt fails before its commit
    # in this process: the attempt fails, nothing committed …
    with pytest.raises(TableIntegrityError):
        w.write(records(range(100, 110)), Format.JSONL, key="here")
    assert catalog.store.find_chunk_by_key(table.id, "here").state is ChunkState.RESERVED
    # … and in another process, which exits with the error
    code, acks, err = run_worker(catalog, table, "writer", "--writer", "1", "--count", "1")
    assert code != 0 and acks == [] and "cut short" in err
    there = catalog.store.find_chunk_by_key(table.id, "w1-0")
    assert there.state is ChunkState.RESERVED and "nothing committed" in (there.error or "")
    _commit(table, 2).write_bytes(saved)  # repaired: each retry commits at once, not busy
    assert ChunkWriter(catalog, table).write(records(range(100, 110)), Format.JSONL, key="here").version == 3
    retried = ChunkWriter(catalog, table).write(
        records(range(1_000_000, 1_000_010)), Format.JSONL, key="w1-0"
    )
    assert retried.version == 4
    ids = all_ids(table)
    assert sorted(ids) == [*range(20), *range(100, 110), *range(1_000_000, 1_000_010)]


@pytest.mark.process
@pytest.mark.parametrize("point", ["chunk-before-delta-commit", "chunk-after-delta-commit"])
def test_a_retry_takes_a_commit_over_from_a_killed_holder_within_seconds(catalog, point: str) -> None:
    """The writer dies holding the commit (the default commit timeout: a minute, so a takeover by
    deadline would take two); the retry here is busy only until the dead holder's lease lapses."""
    table = make_table(catalog)
    code, acks, _ = run_worker(catalog, table, "writer", "--count", "1", crashpoint=point)
    assert code == -signal.SIGKILL and acks == []
    chunk = catalog.store.find_chunk_by_key(table.id, "w0-0")
    assert chunk.state is ChunkState.COMMITTING and chunk.holder is not None
    moved = clock.SystemClock()  # this process's clock: it judges whether the dead lease lapsed
    with clock.use(moved):
        with pytest.raises(ChunkBusyError):  # its lease was live when it died: a retry is busy …
            ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL, key="w0-0")
        # … until its lease lapsed (its last renewal was before the kill), not 2 × commit_timeout
        moved.advance(TTL + GRACE + timedelta(seconds=1))
        result = ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL, key="w0-0")
    ids = all_ids(table)
    assert sorted(ids) == list(range(10)) and duplicates(ids) == []
    done = catalog.store.find_chunk_by_key(table.id, "w0-0")
    assert done.state is ChunkState.COMMITTED and result.chunk == done.id
    # housekeeping forgets the dead holder's lease an hour after it lapsed
    assert catalog.store.get_lease(PREFIX + chunk.holder) is not None
    report = Housekeeper(catalog).run(now=clock.now() + timedelta(hours=2))
    assert report.holders_pruned >= 1 and catalog.store.get_lease(PREFIX + chunk.holder) is None


@pytest.mark.process
def test_housekeeping_finishes_a_dead_holders_commit_once_its_lease_lapsed(catalog) -> None:
    """No producer retries: the daemon's housekeeping rolls the commit forward as soon as the dead
    holder's lease has lapsed, not after 2 × commit_timeout; a live holder's commit it leaves alone."""
    table = make_table(catalog)
    code, acks, _ = run_worker(
        catalog, table, "writer", "--count", "1", crashpoint="chunk-before-delta-commit"
    )
    assert code == -signal.SIGKILL and acks == []
    assert recover_commits(catalog) == []  # its lease is still live: it might be committing
    assert catalog.store.find_chunk_by_key(table.id, "w0-0").state is ChunkState.COMMITTING
    with clock.use(clock.SystemClock(offset=TTL + GRACE + timedelta(seconds=1))):  # the lease lapsed
        [result] = recover_commits(catalog)
    assert catalog.store.find_chunk_by_key(table.id, "w0-0").state is ChunkState.COMMITTED
    assert result.version == 1 and sorted(all_ids(table)) == list(range(10))


@pytest.mark.process
def test_a_holder_frozen_past_its_lease_never_commits_after_the_retry_took_over(catalog) -> None:
    """A frozen VM: the writer is SIGSTOPped in the middle of its commit (just before its Delta
    commit) for longer than its lease; a retry here takes the commit over and lands it. When the
    writer wakes, its lease has lapsed and been taken again at a new epoch: its attempt must not
    write its commit, or the chunk would land twice. It retries, and finds the chunk committed."""
    table = make_table(catalog)
    proc = subprocess.Popen(
        **worker_call(catalog, table, "writer", "--count", "1", pausepoint="chunk-before-delta-commit:4"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            if "pausepoint chunk-before-delta-commit" in line:
                break
        proc.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        while True:
            try:
                result = ChunkWriter(catalog, table).write(records(range(10)), Format.JSONL, key="w0-0")
                break
            except ChunkBusyError:
                assert time.monotonic() - stopped < 20, "the frozen holder's commit was not taken over"
                time.sleep(0.2)
        assert result.version == 1
    finally:
        proc.send_signal(signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    [ack] = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert ack["chunk"] == result.chunk and ack["version"] == 1  # its retry found the commit
    ids = all_ids(table)
    assert sorted(ids) == list(range(10)) and duplicates(ids) == []
    assert not _commit(table, 2).exists()  # the woken writer wrote no second commit


def test_an_attempt_begun_after_the_clock_jumped_past_the_lease_is_not_taken_for_overtaken(catalog) -> None:
    """The wall clock jumps forward past the holder's lease (an NTP step; a test's moved clock)
    between two attempts: the second renews the lapsed lease as it enters, so the renewals during
    it keep its epoch and its commit goes ahead. (Before: it entered at the old epoch, the next
    renewal took the lapsed lease again, and the attempt was refused as overtaken; a roll in a
    test that moves the clock an hour failed with LeaseLostError when it took over a second.)"""
    holder = commit_holder(catalog.store)
    with holder.holding("first"):
        holder.require_live(["first"])
    with clock.use(clock.SystemClock(timedelta(hours=1))), holder.holding("second"):
        time.sleep(HEARTBEAT * 2.5)  # the holder's thread renews the lease meanwhile
        holder.require_live(["second"])

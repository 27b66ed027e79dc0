"""Group commit: chunks of one table whose commits arrive together land in one Delta commit.

Each chunk keeps its own identity, result and exactly-once guarantee (invariants 1, 2 and 5).
The groups are made deterministic with a pause point: the first commit dwells just before its
Delta commit (as a slow disk would make it), and every chunk that arrives meanwhile queues into
the next group. Crash tests of groups, with SIGKILL, are in tests/test_crash.py.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from deltalake import DeltaTable

from ingest.chunks import ChunkWriter, CommitResult, group_commit
from ingest.chunks.group_commit import CommitGroups, Member, UnsettledError
from ingest.config import ChunkConfig
from ingest.errors import ChunkBusyError, ChunkStateError, LateDataError
from ingest.formats import Format
from metastore import crashpoints
from metastore.delta import append
from metastore.delta.log import SCHEMA_KEY, commit_chunks, commit_info
from metastore.delta.metadata import current_metadata, metadata_action
from metastore.models import Chunk, ChunkState, Mode, PartitionState, parse_column_change, plan_alter
from scheduler.roll import Roller
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, ids_by_partition, records, wait_for
from tests.ingest.test_chunks import H10, H11

PAUSE = "chunk-before-delta-commit"


# -- the queue on its own --------------------------------------------------------------------
def test_a_queue_commits_whatever_arrived_meanwhile_as_one_group_and_answers_each() -> None:
    groups: CommitGroups[int, str] = CommitGroups()
    seen: list[list[int]] = []
    first_in = threading.Event()
    release = threading.Event()

    def commit(group: list[Member[int, str]], context: dict[str, Any]) -> None:
        seen.append([m.item for m in group])
        if group[0].item == 0:
            first_in.set()
            release.wait(10)
        for m in group:
            if m.item == 3:
                m.fail(ValueError("three is refused"))
            else:
                m.resolve(f"done {m.item}")

    out: dict[int, object] = {}

    def submit(i: int) -> None:
        try:
            out[i] = groups.submit("t", i, commit)
        except ValueError as exc:
            out[i] = exc

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    assert first_in.wait(10)
    rest = [threading.Thread(target=submit, args=(i,)) for i in range(1, 6)]
    for t in rest:
        t.start()
    wait_for(lambda: len(groups._queues["t"].pending) == 5, "five commits queued behind the first")
    release.set()
    for t in [first, *rest]:
        t.join(10)
    assert seen == [[0], [1, 2, 3, 4, 5]]  # one group of everything that arrived meanwhile
    assert out[0] == "done 0" and out[5] == "done 5"
    assert isinstance(out[3], ValueError)  # a member's own failure is its alone
    assert "t" not in groups._queues  # nothing left behind


def test_a_failing_group_commit_fails_its_members_and_an_unsettled_member_is_told() -> None:
    groups: CommitGroups[int, str] = CommitGroups()

    def broken(group: list[Member[int, str]], context: dict[str, Any]) -> None:
        raise OSError("disk gone")

    with pytest.raises(OSError, match="disk gone"):
        groups.submit("t", 1, broken)
    with pytest.raises(UnsettledError):
        groups.submit("t", 2, lambda group, context: None)
    assert groups.submit("t", 3, lambda group, context: group[0].resolve("fine")) == "fine"


# -- chunks ----------------------------------------------------------------------------------
def staged(w: ChunkWriter, first: int, n: int = 10, ts: str = "2026-11-21T10:15:00Z") -> Chunk:
    return w.stage(w.reserve(f"k{first}"), records(range(first, first + n), ts), Format.JSONL)


class Committers:
    """Commit chunks from threads of this process, the first one alone, the rest behind it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, pause: float = 1.0) -> None:
        monkeypatch.setenv(crashpoints.PAUSE_ENV, f"{PAUSE}:{pause}")
        self.monkeypatch = monkeypatch
        self.results: dict[str, CommitResult | BaseException] = {}
        self.threads: list[threading.Thread] = []

    def start(self, w: ChunkWriter, chunk: Chunk) -> None:
        def run() -> None:
            try:
                self.results[chunk.id] = w.commit(chunk.id)
            except Exception as exc:
                self.results[chunk.id] = exc

        t = threading.Thread(target=run)
        t.start()
        self.threads.append(t)

    def start_blocked(self, w: ChunkWriter, blocker: Chunk, chunks: list[Chunk]) -> None:
        """``blocker`` commits first and dwells until ``chunks`` all queue behind it as one group (its
        pause alone was too short for that on a loaded machine)."""
        queued, pause = threading.Event(), group_commit.pausepoint

        def held(name: str) -> None:
            pause(name)
            if name == PAUSE:
                queued.wait(60)

        self.monkeypatch.setattr(group_commit, "pausepoint", held)
        self.start(w, blocker)
        wait_for(lambda: w.store.get_chunk(blocker.id).state is ChunkState.COMMITTING, "the first commit")
        for c in chunks:
            self.start(w, c)
        key = group_commit._group_key(w)
        wait_for(
            lambda: len(getattr(group_commit._GROUPS._queues.get(key), "pending", [])) == len(chunks),
            "the chunks to queue behind the first",
        )
        queued.set()

    def join(self) -> dict[str, CommitResult | BaseException]:
        for t in self.threads:
            t.join(60)
        return self.results


def chunk_commits(catalog: Any, table: Any) -> dict[int, list[str]]:
    """Per Delta version, the chunks its commit added (sorted: threads queue in any order)."""
    wh = catalog.warehouse
    found = {}
    for version in range(int(wh.load(table).version()) + 1):
        ids = commit_chunks(commit_info(table, version) or {})
        if ids:
            found[version] = sorted(ids)
    return found


def test_chunks_committing_together_land_in_one_delta_commit_each_with_its_own_result(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    chunks = [staged(w, 10 * i) for i in range(6)]
    run = Committers(monkeypatch)
    run.start_blocked(w, chunks[0], chunks[1:])
    results = run.join()
    assert chunk_commits(catalog, table) == {1: [chunks[0].id], 2: sorted(c.id for c in chunks[1:])}
    for c in chunks:
        r = results[c.id]
        assert isinstance(r, CommitResult) and r.chunk == c.id and r.rows == 10
        assert r.version == (1 if c is chunks[0] else 2)
        assert w.commit(c.id) == r  # a retry answers the chunk's own original commit
        assert catalog.store.get_chunk(c.id).version == r.version
    assert sorted(all_ids(table)) == list(range(60))


def test_a_chunk_whose_files_are_gone_leaves_its_group_aborted_and_never_rides_along(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    blocker, good, broken, also_good = (staged(w, 10 * i) for i in range(4))
    for f in broken.files:
        (Path(table.location) / f.path).unlink()
    run = Committers(monkeypatch)
    run.start_blocked(w, blocker, [good, broken, also_good])
    results = run.join()
    assert isinstance(results[broken.id], ChunkStateError) and "is gone" in str(results[broken.id])
    assert catalog.store.get_chunk(broken.id).state is ChunkState.ABORTED
    assert chunk_commits(catalog, table)[2] == sorted([good.id, also_good.id])
    assert sorted(all_ids(table)) == [*range(10), *range(10, 20), *range(30, 40)]


def test_a_chunk_past_its_deadline_leaves_the_group_and_a_retry_lands_it_once(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    hasty = ChunkWriter(catalog, table, ChunkConfig(commit_timeout=timedelta(milliseconds=300)))
    blocker, good, late = staged(w, 0), staged(w, 10), staged(w, 20)
    run = Committers(monkeypatch)
    run.start(w, blocker)
    wait_for(lambda: w.store.get_chunk(blocker.id).state is ChunkState.COMMITTING, "the first commit")
    time.sleep(0.1)
    run.start(w, good)
    run.start(hasty, late)  # its deadline passes while the first group dwells
    results = run.join()
    assert "did not commit before its deadline" in str(results[late.id])
    assert chunk_commits(catalog, table)[2] == [good.id]  # it did not ride along
    monkeypatch.delenv(crashpoints.PAUSE_ENV)
    # it knew it committed nothing: it released the chunk, so a retry begins at once (issue 25)
    assert catalog.store.get_chunk(late.id).state is ChunkState.RESERVED
    retried = w.commit(late.id)
    assert retried.version == 3 and sorted(all_ids(table)) == list(range(30))


def test_a_late_chunk_in_a_group_is_refused_alone(catalog: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    table = make_table(catalog, mode=Mode.EVENT_TIME, lateness="10m")
    w = ChunkWriter(catalog, table)
    w.write(records(range(5), "2026-11-21T10:30:00Z"), Format.JSONL)
    Roller(catalog).roll_table(table, now=H11 + timedelta(minutes=10))
    assert catalog.store.get_partition(table.id, H10).state is PartitionState.STANDARD
    on_time = "2026-11-21T11:05:00Z"
    blocker, good = staged(w, 100, ts=on_time), staged(w, 200, ts=on_time)
    late = staged(w, 300, ts="2026-11-21T10:45:00Z")
    also_good = staged(w, 400, ts=on_time)
    run = Committers(monkeypatch)
    run.start_blocked(w, blocker, [good, late, also_good])
    results = run.join()
    assert isinstance(results[late.id], LateDataError)
    assert catalog.store.get_chunk(late.id).state is ChunkState.ABORTED
    landed = chunk_commits(catalog, table)
    assert sorted([good.id, also_good.id]) in landed.values()
    assert not any(late.id in ids for ids in landed.values())
    assert {p: sorted(ids) for p, ids in ids_by_partition(table).items()} == {
        H10: list(range(5)),
        H11: sorted([*range(100, 110), *range(200, 210), *range(400, 410)]),
    }


def test_a_chunk_retried_while_its_group_commits_is_busy_then_answers_the_group_commit(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    chunks = [staged(w, 10 * i) for i in range(3)]
    run = Committers(monkeypatch, pause=1.5)
    run.start_blocked(w, chunks[0], chunks[1:])
    wait_for(lambda: catalog.store.get_chunk(chunks[0].id).state is ChunkState.COMMITTED, "the first group")
    with pytest.raises(ChunkBusyError, match="being committed by another attempt"):
        w.commit(chunks[2].id)  # its group is committing right now
    results = run.join()
    assert w.commit(chunks[2].id) == results[chunks[2].id]
    assert sorted(all_ids(table)) == list(range(30)) and not duplicates(all_ids(table))


def test_a_roll_between_grouping_and_commit_sends_the_whole_group_to_the_next_partition(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Invariant 5 for a group: it was planned into the open partition, which a roll then sealed."""
    table = make_table(catalog)
    w = ChunkWriter(catalog, table)
    first, *group = (staged(w, 10 * i) for i in range(4))
    old = catalog.store.streaming_partition(table.id)
    paused_before = crashpoints._pauses.get(PAUSE, 0)
    run = Committers(monkeypatch, pause=1.5)
    run.start_blocked(w, first, group)
    wait_for(lambda: catalog.store.get_chunk(first.id).state is ChunkState.COMMITTED, "the first group")
    # the group is planned (into ``old``) and dwells before its Delta commit: its pause has begun (a
    # fixed sleep here was too short on a loaded machine: the roll then came before the planning)
    wait_for(lambda: crashpoints._pauses.get(PAUSE, 0) - paused_before >= 2, "the group planned")
    roll = catalog.store.begin_roll(old, old.value + timedelta(hours=1), "r", timedelta(minutes=1))
    catalog.warehouse.seal(table, roll.id)
    results = run.join()
    # planned, refused by Delta (the seal), planned again: the group paused once more
    assert crashpoints._pauses[PAUSE] - paused_before == 3
    new = old.value + timedelta(hours=1)
    for c in group:
        r = results[c.id]
        assert isinstance(r, CommitResult) and r.partitions == [new.strftime("%Y-%m-%dT%H:%M:%SZ")]
    Roller(catalog, owner="r").run(table, catalog.store.get_roll(roll.id))
    by_part = ids_by_partition(table)
    assert by_part[old.value] == list(range(10))
    assert sorted(by_part[new]) == list(range(10, 40))


def test_a_schema_change_between_planning_and_commit_makes_the_group_plan_again(
    catalog: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schema change's ``metaData`` commit that takes the version a group planned for fences the group
    as a seal does (docs/design/schema-changes.md, invariant 3): the group plans again and lands after
    it, its files (without the new column) valid under the new schema."""
    table = make_table(catalog)
    root = Path(table.location)
    w = ChunkWriter(catalog, table)
    chunk = staged(w, 0)
    paused_before = crashpoints._pauses.get(PAUSE, 0)
    run = Committers(monkeypatch, pause=1.5)
    run.start(w, chunk)
    wait_for(lambda: crashpoints._pauses.get(PAUSE, 0) > paused_before, "the group planned, in its pause")
    columns = plan_alter(
        table.columns,
        table.time_column,
        table.partition_column,
        add=[parse_column_change("coupon STRING", "")],
    )
    action = metadata_action(current_metadata(root), columns, table.partition_column)
    body = append.append_actions(
        table.partition_column, [], {SCHEMA_KEY: "alter-1"}, int(time.time() * 1000), schema_change=action
    )
    changed = append.publish(table.location, body, 0, 5)
    result = run.join()[chunk.id]
    # planned on version 0, refused by Delta (the metaData at ``changed``), planned again
    assert crashpoints._pauses[PAUSE] - paused_before == 2
    assert isinstance(result, CommitResult) and result.version == changed + 1 == 2
    rows = DeltaTable(str(root)).to_pyarrow_table()
    assert sorted(rows.column("id").to_pylist()) == list(range(10))
    assert rows.column("coupon").to_pylist() == [None] * 10


def test_threads_writing_one_table_share_commits_and_every_chunk_lands_once(catalog: Any) -> None:
    """No pause: the groups are whatever arrives while the previous one commits."""
    table = make_table(catalog)
    writers = 8
    errors: list[BaseException] = []

    def write(n: int) -> Callable[[], None]:
        def run() -> None:
            w = ChunkWriter(catalog, table)
            try:
                for i in range(10):
                    first = n * 1000 + i * 10
                    w.write(records(range(first, first + 10)), Format.JSONL, key=f"w{n}-{i}")
            except Exception as exc:
                errors.append(exc)

        return run

    threads = [threading.Thread(target=write(n)) for n in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    ids = all_ids(table)
    assert len(ids) == writers * 100 and not duplicates(ids)
    commits = chunk_commits(catalog, table)
    assert sum(len(c) for c in commits.values()) == writers * 10
    committed = catalog.store.list_chunks(table.id, [ChunkState.COMMITTED])
    assert {c.id: c.version for c in committed} == {cid: v for v, ids in commits.items() for cid in ids}

"""Concurrency (invariants 3, 5, 6): writer processes commit continuously while a roller
process rolls and a reader re-reads pinned snapshots.

At the end every acknowledged chunk is present exactly once, each standard partition holds
exactly the chunks the writers were told landed in it, no reader ever saw a partial chunk
or a changed snapshot, and counts never went backwards.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta.files import file_exists, live_files
from metastore.errors import StoreUnavailableError
from metastore.models import ChunkState, PartitionState
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, ids_by_partition, records, worker_call

WRITERS, CHUNKS, ROWS = 4, 25, 10


def spawn(catalog, table, *args: str, pausepoint: str | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        **worker_call(catalog, table, *args, pausepoint=pausepoint),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.mark.process
def test_writers_rollers_and_readers_at_once(storage_catalog) -> None:
    catalog = storage_catalog  # a local disk, and a bucket
    table = make_table(catalog)
    writers = [
        spawn(catalog, table, "writer", "--writer", str(k), "--count", str(CHUNKS), "--rows", str(ROWS))
        for k in range(WRITERS)
    ]
    roller = spawn(catalog, table, "roller", "--count", "6", "--interval", "1.0", "--force")
    # the reader: pin a snapshot, let commits and rolls happen, re-read the same snapshot
    seen_versions: list[tuple[int, int]] = []
    while any(w.poll() is None for w in writers):
        try:
            version = int(catalog.warehouse.load(table).version())
            first = sorted(all_ids(table, version))
            time.sleep(0.2)
            again = sorted(all_ids(table, version))
        except StoreUnavailableError:  # the store (one moto process) lags behind five clients: retry
            time.sleep(1.0)
            continue
        assert first == again, f"snapshot {version} changed while pinned"
        by_chunk: dict[int, int] = {}
        for i in first:  # ids of one chunk are a block of ROWS consecutive ids
            by_chunk[i // ROWS] = by_chunk.get(i // ROWS, 0) + 1
        assert set(by_chunk.values()) <= {ROWS}, f"snapshot {version} shows part of a chunk"
        assert not duplicates(first)
        seen_versions.append((version, len(first)))
    outputs = [w.communicate(timeout=120) for w in writers]
    # the roller's six rolls may all come after the writers: in a bucket (one moto process serving
    # five clients) a roll took 7.5 s in a CI run at load ~6, so six of them had no room in 120 s
    roll_out, roll_err = roller.communicate(timeout=300)
    for (_out, err), w in zip(outputs, writers, strict=True):
        assert w.returncode == 0, err
    assert roller.returncode == 0, roll_err
    counts = [n for _, n in sorted(seen_versions)]
    assert counts == sorted(counts), "a later version showed fewer rows"
    acks = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    rolls = [json.loads(line) for line in roll_out.splitlines()]
    assert len(acks) == WRITERS * CHUNKS and len(rolls) >= 2

    # every acknowledged chunk exactly once, in the partition its writer was told
    ids = all_ids(table)
    assert not duplicates(ids) and len(ids) == WRITERS * CHUNKS * ROWS
    by_part = ids_by_partition(table)
    expected: dict[str, set[int]] = {}
    for a in acks:
        [part] = a["partitions"]
        expected.setdefault(part, set()).update(range(a["first"], a["first"] + ROWS))
    actual = {
        p.strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace(".000000Z", "Z"): set(v) for p, v in by_part.items()
    }
    assert actual == expected
    # every standard partition holds exactly the rows committed while it was open
    for p in catalog.store.list_partitions(table.id, [PartitionState.STANDARD]):
        key = p.value.strftime("%Y-%m-%dT%H:%M:%S.%fZ").replace(".000000Z", "Z")
        assert p.rows == len(expected.get(key, ())), key


@pytest.mark.process
def test_a_quota_set_while_writers_begin_their_commits_holds_them(catalog) -> None:
    """Commits into a namespace without a quota do not queue behind each other's quota check (a
    shared lock); a quota set between a writer's first read and its lock still holds it: the
    writer checks again under the exclusive lock, so the quota is never passed."""
    if catalog.store.is_sqlite:
        pytest.skip("SQLite's write lock holds the whole transaction: no quota can be set inside it")
    table = make_table(catalog, "lateq.t")
    ChunkWriter(catalog, table).write(records(range(ROWS)), Format.JSONL, key="first")
    one_chunk = catalog.store.committed_bytes("lateq")
    writers = [
        spawn(catalog, table, "writer", "--writer", str(k + 1), "--count", "1", "--rows", str(ROWS),
              pausepoint="chunk-quota-read@1:3")
        for k in range(WRITERS)
    ]  # fmt: skip
    for w in writers:  # each has read "no quota" and waits before it locks the namespace
        assert w.stderr is not None
        line = w.stderr.readline()
        assert "pausepoint chunk-quota-read" in line, line
    quota = one_chunk * 2 + one_chunk // 2  # room for one more chunk of about the same size
    catalog.store.alter_namespace("lateq", quota_bytes=quota)
    outputs = [w.communicate(timeout=180) for w in writers]
    for (_out, err), w in zip(outputs, writers, strict=True):
        assert w.returncode == 0, err
    said = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    refused = [s for s in said if "refused" in s]
    assert len(said) == WRITERS and len(refused) == WRITERS - 1, said
    assert catalog.store.committed_bytes("lateq") <= quota
    assert len(all_ids(table)) == 2 * ROWS


@pytest.mark.process
def test_concurrent_writers_never_pass_a_namespace_quota(storage_catalog) -> None:
    """Writer processes race into a namespace a few chunks short of its quota (invariant 7 and
    issue 10's quota): the committed bytes never pass it, every acknowledged chunk is there,
    and every refused chunk is aborted with nothing left on disk (or in the bucket)."""
    catalog = storage_catalog
    table = make_table(catalog, "quota.t")
    first = ChunkWriter(catalog, table).write(records(range(ROWS)), Format.JSONL, key="first")
    one_chunk = catalog.store.committed_bytes("quota")
    quota = one_chunk * 6 + one_chunk // 2  # room for five more chunks of about the same size
    catalog.store.alter_namespace("quota", quota_bytes=quota)
    # each writer dwells right after its quota check (the others' checks must wait for it) and
    # in flight (COMMITTING, not yet in the Delta log: the others' checks must count it)
    writers = [
        spawn(catalog, table, "writer", "--writer", str(k + 1), "--count", "4", "--rows", str(ROWS),
              pausepoint="chunk-quota-checked:0.2,chunk-before-delta-commit:0.4")
        for k in range(WRITERS)
    ]  # fmt: skip
    outputs = [w.communicate(timeout=180) for w in writers]
    for (_out, err), w in zip(outputs, writers, strict=True):
        assert w.returncode == 0, err
    said = [json.loads(line) for out, _ in outputs for line in out.splitlines()]
    acked = [s for s in said if "refused" not in s]
    refused = [s for s in said if "refused" in s]
    assert len(said) == WRITERS * 4 and acked and refused
    assert all("over its quota" in s["refused"] for s in refused)
    live = sum(f.size for f in live_files(catalog.warehouse.load(table)))
    assert live == catalog.store.committed_bytes("quota") <= quota
    ids = all_ids(table)
    assert not duplicates(ids) and len(ids) == (len(acked) + 1) * ROWS and first.rows == ROWS
    for s in refused:
        chunk = catalog.store.find_chunk_by_key(table.id, s["token"])
        assert chunk is not None and chunk.state is ChunkState.ABORTED
        assert not any(file_exists(table, f.path) for f in chunk.files)

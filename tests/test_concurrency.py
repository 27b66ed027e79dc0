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

from metastore.models import PartitionState
from tests.fixtures import make_table
from tests.helpers import all_ids, duplicates, ids_by_partition, worker_call

WRITERS, CHUNKS, ROWS = 4, 25, 10


def spawn(catalog, table, *args: str) -> subprocess.Popen:  # type: ignore[no-untyped-def]
    return subprocess.Popen(
        **worker_call(catalog, table, *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def test_writers_rollers_and_readers_at_once(catalog) -> None:  # type: ignore[no-untyped-def]
    table = make_table(catalog)
    writers = [
        spawn(catalog, table, "writer", "--writer", str(k), "--count", str(CHUNKS), "--rows", str(ROWS))
        for k in range(WRITERS)
    ]
    roller = spawn(catalog, table, "roller", "--count", "6", "--interval", "1.0", "--force")
    # the reader: pin a snapshot, let commits and rolls happen, re-read the same snapshot
    seen_versions: list[tuple[int, int]] = []
    while any(w.poll() is None for w in writers):
        version = int(catalog.warehouse.load(table).version())
        first = sorted(all_ids(table, version))
        time.sleep(0.2)
        again = sorted(all_ids(table, version))
        assert first == again, f"snapshot {version} changed while pinned"
        by_chunk: dict[int, int] = {}
        for i in first:  # ids of one chunk are a block of ROWS consecutive ids
            by_chunk[i // ROWS] = by_chunk.get(i // ROWS, 0) + 1
        assert set(by_chunk.values()) <= {ROWS}, f"snapshot {version} shows part of a chunk"
        assert not duplicates(first)
        seen_versions.append((version, len(first)))
    outputs = [w.communicate(timeout=120) for w in writers]
    roll_out, roll_err = roller.communicate(timeout=120)
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

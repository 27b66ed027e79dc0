"""The order the suite's files start in: the slowest first (a pytest plugin, loaded by conftest).

``make test`` runs three workers (pytest-xdist, ``--dist loadfile --no-loadscope-reorder``), a
file each at a time, in collection order. Left in path order, the two slowest files (the README's
walk-through, the standalone cluster) are collected last and run alone at the end while the other
workers idle; xdist's own reordering (by number of tests) does the same. Started first, the slow
files run beside the many quick ones, which fill the gaps (longest processing time first).

:data:`SLOWEST` is measured (``--durations`` and the per-file sums of ``--junitxml`` on the 2-core
build machine); a file not listed keeps its place after them. A listed file that no longer exists
fails the collection, so the list cannot rot.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Test files whose tests take over a minute in all, slowest first (seconds, one run on 2 cores).
SLOWEST = (
    "tests/ingest/test_kafka_ingest.py",  # 723
    "tests/differential/test_differential.py",  # 351
    "tests/test_query_writes.py",  # 304
    "tests/guides/test_walk_1.py",  # 300 (its guides walked at load 4–8)
    "tests/guides/test_walk_2.py",  # 250
    "tests/test_standalone.py",  # 255
    "tests/guides/test_walk_3.py",  # 220
    "tests/test_sql_server.py",  # 177
    "tests/test_cli.py",  # 148
    "tests/test_crash.py",  # 117
    "tests/metastore/test_namespaces.py",  # 105
    "tests/test_commit_holders.py",  # 104
    "tests/scheduler/test_replication.py",  # 85
    "tests/api/test_dead_commit_holder.py",  # 82
)
ROOT = Path(__file__).resolve().parent.parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    missing = [f for f in SLOWEST if not (ROOT / f).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/scheduling.py: SLOWEST names files that do not exist: {missing}")
    rank = {f: i for i, f in enumerate(SLOWEST)}
    # a stable sort: each file's tests keep their order, and the unlisted files theirs
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(SLOWEST)))

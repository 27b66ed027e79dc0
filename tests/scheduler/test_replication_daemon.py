"""The roll daemon replicates: each new standard partition reaches the table's secondaries, under
load, through leader crashes (SIGKILL mid-copy), with no partial partition ever visible there."""

from __future__ import annotations

import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import pytest

from metastore.catalog import Catalog
from metastore.durations import parse_duration
from metastore.models import Table, TableName, TableSpec, parse_schema
from metastore.replicas import REPLICA_KEY, Replica, replica_table
from scheduler.replication import Replicator
from tests.fixtures import add_clusters
from tests.helpers import ids_by_partition, wait_for
from tests.scheduler.helpers import (
    Writer,
    check_rolled_rows,
    metrics_samples,
    running,
    standard,
    start_daemon,
)


def _says(log: Path, text: str) -> Callable[[], bool]:
    """For ``wait_for``: the log holds ``text``."""
    return lambda: text in log.read_text()


def _setup(catalog: Catalog, tmp_path: Path, roll_every: str = "2s") -> tuple[Table, Replica]:
    add_clusters(catalog, tmp_path, "c1", "c2")
    spec = TableSpec(
        name=TableName.parse("ns.clicks"),
        columns=parse_schema("id BIGINT, ts TIMESTAMP, msg STRING"),
        time_column="ts",
        roll_every=parse_duration(roll_every),
        cluster="c1",
    )
    table = catalog.create_table(spec, replicate_to=["c2"])
    [replica] = catalog.replicas.list(table)
    return table, replica


def _commits(replica: Replica) -> Counter[str]:
    seen: Counter[str] = Counter()
    for f in sorted((Path(replica.location) / "_delta_log").glob("*.json")):
        for line in f.read_text().splitlines():
            info = json.loads(line).get("commitInfo")
            if info and REPLICA_KEY in info:
                seen[info[REPLICA_KEY]] += 1
    return seen


def _all_copied(catalog: Catalog, table: Table, at_least: int) -> bool:
    values = {p.value for p in standard(catalog, table)}
    return len(values) >= at_least and values <= catalog.replicas.present_on(table, "c2")


def _same_rows(catalog: Catalog, table: Table, replica: Replica) -> None:
    primary, copy = ids_by_partition(table), ids_by_partition(replica_table(table, replica))
    values = {p.value for p in standard(catalog, table)}
    assert set(copy) == {v for v in values if primary.get(v)}, (
        "C2 holds other partitions than C1's standard ones"
    )
    for value in copy:
        assert sorted(copy[value]) == sorted(primary[value]), f"partition {value} differs on C2"


class Reader(threading.Thread):
    """Polls the secondary's Delta table: every partition it shows must be whole (C1's rows)."""

    def __init__(self, catalog: Catalog, table: Table, replica: Replica) -> None:
        super().__init__(daemon=True)
        self.catalog, self.table, self.copy = catalog, table, replica_table(table, replica)
        self.reads = 0
        self.partial: list[tuple[datetime, int, int]] = []  # (partition, rows seen on C2, rows on C1)
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            seen: dict[datetime, list[int]] = ids_by_partition(self.copy)
            primary = ids_by_partition(self.table)
            for value, ids in seen.items():
                if sorted(ids) != sorted(primary.get(value, [])):
                    self.partial.append((value, len(ids), len(primary.get(value, []))))
            self.reads += 1
            time.sleep(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


@pytest.mark.process
def test_the_daemon_copies_each_rolled_partition_and_reports_lag_and_bytes(
    catalog: Catalog, tmp_path: Path
) -> None:
    table, replica = _setup(catalog, tmp_path)
    writer = Writer(catalog, table)
    writer.start()
    try:
        with running(catalog) as daemon:
            wait_for(
                lambda: _all_copied(catalog, table, 3), "three partitions rolled and copied to c2", timeout=90
            )
            samples = wait_for(
                lambda: (
                    (m := metrics_samples(daemon.metrics_port)).get(
                        (
                            "streampart_replication_copied_bytes_total",
                            (("cluster", "c2"), ("table", "ns.clicks")),
                        ),
                        0,
                    )
                    > 0
                    and ("streampart_replication_lag_seconds", (("cluster", "c2"), ("table", "ns.clicks")))
                    in m
                    and m
                ),
                "the replication metrics",
            )
            done = samples[
                (
                    "streampart_replication_copies_total",
                    (("cluster", "c2"), ("outcome", "done"), ("table", "ns.clicks")),
                )
            ]
            assert done >= 3
    finally:
        writer.stop()
    _same_rows(catalog, table, replica)
    assert set(_commits(replica).values()) == {1}


@pytest.mark.process
def test_replication_under_load_survives_the_leader_killed_mid_copy(catalog: Catalog, tmp_path: Path) -> None:
    """Writers commit and the daemon rolls every 2 s on C1 while it copies to C2; the daemon is
    SIGKILLed in the middle of copies three times. In the end every standard partition on C2
    equals C1's row for row, a reader polling C2 never saw a partial partition, and no partition
    was committed twice into C2's Delta log."""
    table, replica = _setup(catalog, tmp_path)
    writer, reader = Writer(catalog, table), Reader(catalog, table, replica)
    writer.start()
    reader.start()
    kills = 0
    try:
        for k in range(3):
            log = tmp_path / f"daemon-{k}.log"
            # the second file it copies dwells before the next step: one copy done, the kill lands mid-copy
            proc = start_daemon(catalog, log, pausepoint="replica-after-file@2:2")
            try:
                wait_for(_says(log, "pausepoint replica-after-file"), "a copy under way", timeout=90)
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait(timeout=30)
            kills += 1
        proc = start_daemon(catalog, tmp_path / "daemon-final.log")
        try:
            wait_for(
                lambda: _all_copied(catalog, table, 4), "every rolled partition copied to c2", timeout=120
            )
        finally:
            writer.stop()
            wait_for(lambda: _all_copied(catalog, table, 4), "the last partitions copied", timeout=60)
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)
    finally:
        reader.stop()
    assert kills == 3

    # a roll may have landed between the last check and SIGTERM: its copy is the next pass's
    # (once the stopped daemon's claim on it, if it held one, has lapsed: 1.5 s)
    def caught_up() -> bool:
        Replicator(catalog).replicate(table, include_waiting=True)
        return catalog.replicas.present_on(table, "c2") == {p.value for p in standard(catalog, table)}

    wait_for(caught_up, "the last rolled partitions copied", timeout=30, interval=0.5)
    assert reader.reads > 10 and reader.partial == [], reader.partial[:5]
    check_rolled_rows(catalog, table, writer.acks)
    _same_rows(catalog, table, replica)
    commits = _commits(replica)
    assert commits and set(commits.values()) == {1}, commits

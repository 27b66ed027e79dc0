"""Helpers for roll daemon tests: fast settings, waiting with deadlines, writers, daemon processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from ingest.chunks import ChunkWriter
from ingest.errors import ChunkBusyError, CommitTimeoutError
from ingest.formats import Format
from metastore.catalog import Catalog
from metastore.delta.files import live_files
from metastore.delta.layout import partition_dir
from metastore.errors import RetriableError
from metastore.models import PartitionState, Table, parse_instant
from scheduler.config import RollConfig, SchedulerConfig
from scheduler.daemon import RollDaemon
from tests.helpers import ROOT, duplicates, ids_by_partition, records

T = TypeVar("T")

# Short timings so that tests take seconds: a standby takes over 1.5 s after the leader goes
# silent, a dead leader's roll lapses 1.5 s after its last renewal, tables are re-read twice a
# second. (Validated like any config: heartbeat ≤ a third of both leases.)
FAST: dict[str, Any] = {
    "lease_ttl": "1.5s",
    "heartbeat": "0.5s",
    "sync_interval": "0.5s",
    "observe_interval": "0.5s",
    "metrics_port": 0,
    "metrics_host": "127.0.0.1",
    "retry_base": "0.3s",
    "retry_max": "5s",
    "retry_jitter": 0,
    "shutdown_grace": "5s",
    "housekeeping": {"enabled": False},
}


# A dead leader's rolls lapse 1.5 s after its last renewal (three heartbeats).
FAST_ROLL: dict[str, Any] = {"renewed_lease": "1.5s"}


def fast_config(**overrides: Any) -> SchedulerConfig:
    return SchedulerConfig(**{**FAST, **overrides})


def fast_roll_config(**overrides: Any) -> RollConfig:
    return RollConfig(**{**FAST_ROLL, **overrides})


@contextmanager
def running(catalog: Catalog, config: SchedulerConfig | None = None) -> Iterator[RollDaemon]:
    """An in-process daemon (no signal handlers), stopped on exit."""
    daemon = RollDaemon(catalog, config or fast_config(), fast_roll_config())
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def standard(catalog: Catalog, table: Table) -> list[Any]:
    return catalog.store.list_partitions(table.id, [PartitionState.STANDARD])


def metrics_samples(port: int | None) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The daemon's /metrics as ``{(name, sorted labels): value}``; ``port``: its ``metrics_port``,
    which a daemon serving metrics has set (None: it serves none, a test's mistake)."""
    from prometheus_client.parser import text_string_to_metric_families

    assert port is not None, "the daemon serves no /metrics"
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


class Writer(threading.Thread):
    """Commits small chunks into an arrival-mode table until stopped; remembers every acknowledgement."""

    def __init__(self, catalog: Catalog, table: Table, rows: int = 5, pause: float = 0.05, first: int = 0):
        super().__init__(daemon=True)
        self.writer = ChunkWriter(catalog, table)
        self.rows, self.pause, self.next = rows, pause, first
        self.acks: list[tuple[list[int], list[datetime]]] = []
        self.errors: list[BaseException] = []
        self._halt = threading.Event()

    def run(self) -> None:
        k = 0
        while not self._halt.is_set():
            ids = list(range(self.next, self.next + self.rows))
            try:
                r = self.writer.write(records(ids), Format.JSONL, key=f"writer-{k}")
            except (RetriableError, ChunkBusyError, CommitTimeoutError):
                time.sleep(0.05)
                continue  # retried with the same idempotency key: lands once
            except BaseException as exc:
                self.errors.append(exc)
                return
            self.acks.append((ids, [parse_instant(p) for p in r.partitions]))
            self.next += self.rows
            k += 1
            time.sleep(self.pause)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)
        assert not self.is_alive(), "writer did not stop"
        assert not self.errors, self.errors


def check_rolled_rows(catalog: Catalog, table: Table, acks: list[tuple[list[int], list[datetime]]]) -> None:
    """Invariants 2, 4, 5: every acknowledged row is in the table once, in the partition its commit
    reported; each standard partition holds exactly the rows committed while it was open, in its
    own directory (exactly its live files, plus ``_SUCCESS``)."""
    by_part = ids_by_partition(table)
    everything = [i for ids in by_part.values() for i in ids]
    assert not duplicates(everything), "a row is visible twice"
    acked: dict[datetime, list[int]] = {}
    for ids, parts in acks:
        assert len(parts) == 1, "an arrival-mode chunk lands in exactly one partition"
        acked.setdefault(parts[0], []).extend(ids)
    for value, ids in acked.items():
        assert sorted(by_part.get(value, [])) == sorted(ids), f"partition {value} does not hold its rows"
    live = live_files(catalog.warehouse.load(table))
    for p in standard(catalog, table):
        directory = Path(table.location) / partition_dir(table, p.value)
        assert p.rows == len(by_part.get(p.value, [])), f"partition {p.value}: metastore and Delta disagree"
        if p.rows:
            on_disk = {f.name for f in directory.iterdir() if not f.name.startswith(("_", "."))}
            assert on_disk == {f.name for f in live if f.partition == p.value}
            assert not any(f.staged for f in live if f.partition == p.value), (
                "a standard partition kept staged files"
            )
        assert (directory / "_SUCCESS").is_file()


# -- daemon processes ----------------------------------------------------------------------------
def daemon_env(
    catalog: Catalog, crashpoint: str | None = None, pausepoint: str | None = None, **settings: Any
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
    env.update(
        PYTHONPATH=str(ROOT),
        STREAMPART_WAREHOUSE=str(catalog.warehouse.root),
        STREAMPART_METASTORE=catalog.store.url,
    )
    flat = {**FAST, "metrics": False, **settings}
    for key, value in flat.items():
        if isinstance(value, dict):
            for sub, v in value.items():
                env[f"STREAMPART_SCHEDULER__{key.upper()}__{sub.upper()}"] = (
                    str(v).lower() if isinstance(v, bool) else str(v)
                )
        else:
            env[f"STREAMPART_SCHEDULER__{key.upper()}"] = (
                str(value).lower() if isinstance(value, bool) else str(value)
            )
    for key, value in FAST_ROLL.items():
        env[f"STREAMPART_ROLL__{key.upper()}"] = str(value)
    if crashpoint:
        env["STREAMPART_CRASHPOINT"] = crashpoint
    if pausepoint:
        env["STREAMPART_PAUSEPOINT"] = pausepoint
    return env


def start_daemon(catalog: Catalog, log: Path, **kw: Any) -> subprocess.Popen[str]:
    """``streampart scheduler run`` as a real process; its structured log goes to ``log``."""
    return subprocess.Popen(
        [sys.executable, "-m", "streampart.cli", "scheduler", "run"],
        cwd=ROOT,
        env=daemon_env(catalog, **kw),
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        text=True,
    )


def leader_pid(catalog: Catalog, name: str = "roll-daemon") -> int | None:
    lease = catalog.store.get_lease(name)
    if lease is None or not lease.live(datetime.now(UTC)):
        return None
    return lease.info.get("pid")


def cli(catalog: Catalog, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streampart.cli", *args],
        cwd=ROOT,
        env=daemon_env(catalog),
        capture_output=True,
        text=True,
        timeout=60,
    )

"""The history checker under a nemesis (issue 45, build item 4): a CI-sized run, a soak behind
``-m soak``, and the checker shown able to fail on a hand-made history."""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.api.fixtures import Server
from tests.fixtures import make_table
from tests.history import clients
from tests.history.checker import FinalRead, Report, check
from tests.history.history import History, Op
from tests.history.nemesis import Nemesis

TABLE = "ns.events"
# Why 0.5 s: a commit left COMMITTING by a killed server is taken over by a retry after twice the
# commit timeout; short, so the producers' retries resolve it well within their budget.
FAST = {"STREAMPART_CHUNK__COMMIT_TIMEOUT": "PT0.5S"}


@dataclass(frozen=True)
class Run:
    producers: int
    readers: int
    faults: list[str]  # kill / pause, in order
    gap: tuple[float, float]  # seconds between two faults
    roll_every: tuple[float, float]
    seed: int = 45


def final_read(location: str) -> FinalRead:
    """The table's rows and their partitions, read by delta-rs after the run."""
    from deltalake import DeltaTable, QueryBuilder

    dt = DeltaTable(location)
    rows = QueryBuilder().register("t", dt).execute("SELECT id, ts_period FROM t").read_all()
    ids, parts = rows.column("id").to_pylist(), rows.column("ts_period").to_pylist()
    return FinalRead(dt.version(), tuple((i, str(p)) for i, p in zip(ids, parts, strict=True)))


def run(tmp_path: Path, spec: Run) -> Report:
    """Clients and the nemesis against one ``streampart serve`` on SQLite; the checker's report."""
    srv = Server(tmp_path / "wh", f"sqlite:///{tmp_path / 'wh' / '_metastore.sqlite'}", tmp_path, FAST)
    table = make_table(srv.catalog, TABLE)
    token = srv.token("producers", "admin:*")
    history = History(tmp_path / "history.jsonl")
    rng = random.Random(spec.seed)
    stop = threading.Event()
    srv.start()
    try:
        workers = [
            threading.Thread(target=clients.producer, args=(f"producer-{k}", (k + 1) * 1_000_000, srv.url,
                             token, TABLE, history, stop, random.Random(rng.random())))
            for k in range(spec.producers)
        ] + [
            threading.Thread(target=clients.reader, args=(f"reader-{k}", table.location, history, stop,
                             random.Random(rng.random())))
            for k in range(spec.readers)
        ] + [
            threading.Thread(target=clients.roller, args=("roller", str(srv.warehouse), srv.metastore, TABLE,
                             history, stop, random.Random(rng.random()), spec.roll_every))
        ]  # fmt: skip
        for w in workers:
            w.start()
        Nemesis(srv, history, random.Random(rng.random())).run(spec.faults, stop, spec.gap)
        stop.wait(3)  # a quiet end: the last unknown writes resolve against a live server
        stop.set()
        for w in workers:
            w.join(clients.RETRY_FOR * (1 + clients.UNKNOWN_RETRIES) + 30)
            assert not w.is_alive(), f"{w.name} did not stop"
        report = check(history.load(), final_read(table.location))
    finally:
        stop.set()
        srv.close()
    print(f"\nhistory: {history.path}\n{report.summary()}")
    return report


@pytest.mark.process
@pytest.mark.timeout(300)
def test_history_under_kills_and_a_pause_has_no_anomaly(tmp_path: Path) -> None:
    """CI size: 3 producers, 2 readers, a roller; 3 SIGKILLs with restarts and 1 SIGSTOP."""
    spec = Run(producers=3, readers=2, faults=["kill", "pause", "kill", "kill"], gap=(3.0, 6.0),
               roll_every=(4.0, 8.0))  # fmt: skip
    report = run(tmp_path, spec)
    assert report.faults == len(spec.faults)
    assert report.outcomes["write"]["ok"] > 0 and report.outcomes["read"]["ok"] > 0
    assert not report.anomalies, report.summary()
    assert not report.unexplained_refusals, report.unexplained_refusals


@pytest.mark.soak
@pytest.mark.process
@pytest.mark.timeout(3600)
def test_soak_history_under_many_faults_has_no_anomaly(tmp_path: Path) -> None:
    """Minutes: 5 producers, 3 readers, a roller; 40 faults (3 kills to 1 pause)."""
    faults = ["pause" if k % 4 == 1 else "kill" for k in range(40)]
    report = run(
        tmp_path, Run(producers=5, readers=3, faults=faults, gap=(3.0, 12.0), roll_every=(3.0, 15.0))
    )
    assert report.faults == len(faults)
    assert not report.anomalies, report.summary()


# -- the checker can fail -------------------------------------------------------------------


def _op(n: int, client: str, kind: str, outcome: str, ids: list[int], version: int | None = None) -> Op:
    return Op(id=str(n), client=client, kind=kind, invoked=float(n), completed=n + 0.5,  # type: ignore[arg-type]
              outcome=outcome, ids=tuple(ids), version=version, key=f"k{n}")  # type: ignore[arg-type]  # fmt: skip


def test_the_checker_reports_a_doubled_row_a_lost_row_and_a_read_going_back() -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "p", "write", "ok", [3, 4]),  # acknowledged, then lost
        _op(3, "p", "write", "fail", [5, 6]),  # refused for sure
        _op(4, "r", "read", "ok", [1, 2], version=2),
        _op(5, "r", "read", "ok", [1, 2], version=1),  # back in version
        _op(6, "r", "read", "ok", [1], version=3),  # half of a chunk
    ]
    final = FinalRead(3, ((1, "p1"), (1, "p1"), (2, "p2"), (5, "p1"), (6, "p1"), (2, "p1")))
    report = check(history, final)
    assert {"duplicated", "lost", "not_monotonic", "failed_present", "two_partitions", "partial_chunk",
            "stale_read"} <= report.kinds(), report.summary()  # fmt: skip
    assert any("[3, 4]" in a.message for a in report.anomalies if a.kind == "lost")
    assert any("[1, 2]" in a.message for a in report.anomalies if a.kind == "duplicated")


def test_the_checker_passes_a_clean_history() -> None:
    history = [
        _op(1, "p", "write", "ok", [1, 2]),
        _op(2, "p", "write", "unknown", [3, 4]),
        _op(3, "p", "write", "fail", [5, 6]),
        _op(4, "r", "read", "ok", [1, 2], version=1),
        _op(5, "r2", "read_at", "ok", [1, 2], version=1),
        _op(6, "r", "read", "ok", [1, 2, 3, 4], version=2),
    ]
    report = check(history, FinalRead(2, ((1, "a"), (2, "a"), (3, "b"), (4, "b"))))
    assert not report.anomalies, report.summary()
    assert (report.operations, report.faults) == (6, 0)

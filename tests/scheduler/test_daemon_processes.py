"""Roll daemons as real processes: kill -9 of the leader mid-roll, SIGTERM mid-roll, the CLI.

Each daemon is ``streampart scheduler run`` with fast timings from the environment. A daemon
dies at an exact step of a roll through a crash point (``STREAMPART_CRASHPOINT``: a real
SIGKILL, no cleanup), or dwells at one (``STREAMPART_PAUSEPOINT``) so a test can signal it
while it is provably mid-roll.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from functools import partial
from pathlib import Path

import pytest

from ingest.chunks import ChunkWriter
from ingest.formats import Format
from metastore.delta.log import SEAL_PROPERTY
from metastore.models import PartitionState, RollOutcome, RollState
from tests.fixtures import make_table
from tests.helpers import catches, records, wait_for
from tests.scheduler.helpers import Writer, check_rolled_rows, cli, leader_pid, start_daemon


def _stop(proc: subprocess.Popen[str], timeout: float = 30) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=timeout)


def _log(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _handles_sigterm(proc: subprocess.Popen[str]) -> bool:
    return catches(proc.pid, signal.SIGTERM) or proc.poll() is not None


def _events(path: Path) -> list[dict]:
    return [json.loads(line) for line in _log(path).splitlines() if line.startswith("{")]


@pytest.mark.process
def test_the_leader_killed_mid_roll_is_replaced_and_the_roll_finishes_exactly_once(catalog, tmp_path) -> None:
    table = make_table(catalog, "ns.t", roll_every="3s")
    w = ChunkWriter(catalog, table)
    first = catalog.store.streaming_partition(table.id).value
    for k in range(4):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL, key=f"before-{k}")
    writer = Writer(catalog, table, first=1000)  # and writes go on all along
    writer.start()
    # the leader kills itself right after sealing its first roll
    a = start_daemon(catalog, tmp_path / "a.log", crashpoint="roll-after-seal")
    b = None
    try:
        wait_for(lambda: leader_pid(catalog) == a.pid, "the first daemon to lead")
        b = start_daemon(catalog, tmp_path / "b.log")
        wait_for(
            lambda: any(e.get("event") == "daemon.started" for e in _events(tmp_path / "b.log")), "standby"
        )
        assert a.wait(timeout=30) == -signal.SIGKILL, _log(tmp_path / "a.log")
        # the roll it died in (the standby may be at it already, once its lease lapsed)
        [dead] = [r for r in catalog.store.list_rolls(table.id) if r.partition_value == first]
        assert dead.owner.split(":")[1] in (str(a.pid), str(b.pid))  # a began it; b may hold it by now
        wait_for(lambda: leader_pid(catalog) == b.pid, "the standby to take over", timeout=30)
        done = wait_for(
            lambda: catalog.store.get_partition(table.id, first).state is PartitionState.STANDARD,
            "the new leader to finish the dead leader's roll",
            timeout=30,
        )
        assert done
        wait_for(lambda: len(catalog.store.list_partitions(table.id, [PartitionState.STANDARD])) >= 2,
                 "the new leader to roll on")  # fmt: skip
        # while it leads, the CLI reports it, each table's next roll and the last rolls
        status = cli(catalog, "scheduler", "status", "--json")
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["leader"]["pid"] == b.pid and info["leader"]["live"] and info["leader"]["epoch"] >= 2
        [t] = info["tables"]
        assert t["table"] == "ns.t" and t["next_roll"] and t["failures"] == 0
        assert any(r["outcome"] == "done" and r["resumed"] for r in info["recent_rolls"])
        text = cli(catalog, "scheduler", "status")
        assert text.returncode == 0 and "leader:" in text.stdout and "ns.t" in text.stdout, text.stderr
    finally:
        writer.stop()
        if b is not None:
            assert _stop(b) == 0, _log(tmp_path / "b.log")
        _stop(a)
    # the roll the leader died in: one roll, finished once, by the new leader
    [roll] = [r for r in catalog.store.list_rolls(table.id) if r.partition_value == first]
    assert roll.id == dead.id and roll.state is RollState.DONE and roll.owner.split(":")[1] == str(b.pid)
    done_attempts = [
        x for x in catalog.store.list_roll_attempts(table.id, limit=1000) if x.outcome is RollOutcome.DONE
    ]
    assert [x.resumed for x in done_attempts if x.partition_value == first] == [True]
    assert len({x.partition_value for x in done_attempts}) == len(done_attempts), "a partition rolled twice"
    # invariants 1-5: rows before and during the crash are each in one place, exactly once
    check_rolled_rows(
        catalog, table, [(list(range(k * 10, k * 10 + 10)), [first]) for k in range(4)] + writer.acks
    )
    assert catalog.store.get_partition(table.id, first).rows == 40 + sum(
        len(ids) for ids, parts in writer.acks if parts == [first]
    )


@pytest.mark.parametrize(
    "grace, dwell, outcome",
    [
        # the roll may finish within the grace period: it does, then the daemon exits
        ("10s", 2, RollOutcome.DONE),
        # no grace: the roll stops at its next step boundary; a restarted daemon resumes it. It
        # dwells long enough that the signal surely comes before it would move on (a busy host),
        # and less than the daemon waits for its rolls to stop (scheduler.daemon.ABANDON_WAIT)
        ("0s", 6, RollOutcome.ABANDONED),
    ],
)
@pytest.mark.process
def test_sigterm_during_a_roll_exits_cleanly_and_leaves_the_partition_correct(
    catalog, tmp_path, grace: str, dwell: int, outcome: RollOutcome
) -> None:
    table = make_table(catalog, "ns.t", roll_every="2s")
    w = ChunkWriter(catalog, table)
    first = catalog.store.streaming_partition(table.id).value
    for k in range(3):
        w.write(records(range(k * 10, k * 10 + 10)), Format.JSONL)
    log = tmp_path / "d1.log"
    d1 = start_daemon(catalog, log, pausepoint=f"roll-after-seal:{dwell}", shutdown_grace=grace)
    try:
        # mid-roll: the partition's roll has sealed the Delta table and dwells there
        wait_for(lambda: "pausepoint roll-after-seal" in _log(log), "the roll to dwell after its seal")
        [roll] = catalog.store.list_rolls(table.id, unfinished=True)
        d1.send_signal(signal.SIGTERM)
        assert d1.wait(timeout=30) == 0, _log(log)
    finally:
        _stop(d1)
    events = [e.get("event") for e in _events(log)]
    assert "daemon.stopped" in events and "leader.released" in events
    [attempt] = [x for x in catalog.store.list_roll_attempts(table.id) if x.partition_value == first]
    assert attempt.outcome is outcome
    lease = catalog.store.get_lease("roll-daemon")
    assert lease.holder is None  # released: a standby need not wait for it to lapse
    if outcome is RollOutcome.ABANDONED:  # sealed, not swept
        seal = catalog.warehouse.load(table).metadata().configuration.get(SEAL_PROPERTY, "")
        assert str(seal).startswith(roll.id)
        left = catalog.store.get_roll(roll.id)
        assert left.state is not RollState.DONE and left.lease_until <= lease.expires_at  # released too
        d2 = start_daemon(catalog, tmp_path / "d2.log")
        try:
            wait_for(
                lambda: catalog.store.get_partition(table.id, first).state is PartitionState.STANDARD,
                "the restarted daemon to resume the roll",
            )
        finally:
            assert _stop(d2) == 0, _log(tmp_path / "d2.log")
        assert catalog.store.get_roll(roll.id).state is RollState.DONE
    p = catalog.store.get_partition(table.id, first)
    assert (p.state, p.rows, p.chunks) == (PartitionState.STANDARD, 30, 3)
    check_rolled_rows(catalog, table, [(list(range(k * 10, k * 10 + 10)), [first]) for k in range(3)])


@pytest.mark.process
def test_sigterm_while_the_daemon_starts_exits_cleanly(catalog, tmp_path) -> None:
    """Stopped before it runs (held while it starts, before it opens its metastores): exit 0, as a
    stop once running, not killed by the signal (a supervisor restarting it, then stopping it)."""
    log = tmp_path / "starting.log"
    proc = start_daemon(catalog, log, pausepoint="daemon-starting:30")
    try:
        wait_for(lambda: "pausepoint daemon-starting" in _log(log), "the daemon to be starting")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, _log(log)
        assert leader_pid(catalog) is None  # it never led
    finally:
        if proc.poll() is None:
            proc.kill()
    # … and stopped earlier still, while its command line loads (before any command code runs):
    # from the moment the interpreter has taken the signal (before that, nothing in the process can)
    for after in (0, 0.3):
        proc = start_daemon(catalog, log)
        wait_for(partial(_handles_sigterm, proc), "the handler", interval=0.005)
        time.sleep(after)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0, (after, _log(log))

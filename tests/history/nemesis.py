"""The nemesis: faults on real processes, each recorded in the history as a ``fault`` operation.

- ``kill``: SIGKILL the ``streampart serve`` process (no cleanup, no graceful shutdown), wait,
  start it again on the same port;
- ``pause``: SIGSTOP it (it holds its connections, leases and any metastore transaction while
  frozen), wait, SIGCONT;
- ``kill-cli`` / ``pause-cli``: the same to a running CLI process (a ``streampart write`` or
  ``streampart delete`` of a client, see :class:`tests.history.clients.Processes`);
- ``pg-restart``: stop the private PostgreSQL of the metastore (``fast``: its clients' sessions are
  ended; ``immediate``: a crash as clients see it), leave it down, start it on the same port;
- ``pg-pause``: SIGSTOP its postmaster and every backend (connections hang: no answer, no
  refusal), wait, SIGCONT;
- ``s3-503`` / ``s3-drop``: the S3 fault proxy (``tests/s3server.py``) answers every request 503
  Slow Down / drops every connection unanswered, for a few seconds;
- ``s3-freeze``: SIGSTOP the S3 server (moto's process group: requests hang), wait, SIGCONT. (Not
  SIGKILL: moto keeps its buckets in memory, a restart would lose every object.)
- ``kill-daemon``: SIGKILL the roll daemon that leads (its lease names its pid), wait, start it
  again (the standby takes leadership meanwhile, and resumes any roll the dead one left);
- ``pause-daemon``: SIGSTOP the leading daemon 1–6 s (longer than its lease, 1.5 s: the standby
  takes leadership while it is frozen and it wakes up deposed), then SIGCONT;
- ``clock-daemon``: SIGKILL one daemon and start it again with its clock moved (``offset``: -5 s,
  +5 s or +40 s: leases and periods read by a clock the others do not share), leave it so a few
  seconds, then SIGKILL it and start it with the true clock again;
- ``kill-sql``: SIGKILL the ``streampart sql-server`` process group (its Python driver and its
  JVM), wait, start it again on the same port (not waiting until it listens: a JVM takes tens of
  seconds to start; its clients are refused meanwhile).
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.api.fixtures import Server
from tests.history.clients import Processes
from tests.history.history import History
from tests.history.services import Daemons, SqlServerProc
from tests.private_pg import PrivatePostgres
from tests.s3server import S3Server

SERVER_FAULTS = ("kill", "pause")
CLI_FAULTS = ("kill-cli", "pause-cli")
PG_FAULTS = ("pg-restart", "pg-pause")
S3_FAULTS = ("s3-503", "s3-drop", "s3-freeze")
S3_METHODS = ("GET", "PUT", "HEAD", "DELETE", "POST")
DAEMON_FAULTS = ("kill-daemon", "pause-daemon", "clock-daemon")
SQL_FAULTS = ("kill-sql",)
CLOCK_OFFSETS = (-5.0, 5.0, 40.0)
# Why 30 s: a daemon started a moment ago takes the lease within its heartbeat, and a standby
# within the lease's 1.5 s after the leader went silent; a leader not found by then is not injured.
LEADER_WAIT_S = 30.0
# Why 5 s: CLI processes come and go (about one a second per client); a fault aimed at one waits
# this long for one to be running before it is recorded as not injected.
CLI_WAIT_S = 5.0


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append(int(entry.name))
    return found


@dataclass
class Nemesis:
    history: History
    server: Server | None = None
    procs: Processes | None = None
    pg: PrivatePostgres | None = None
    s3: S3Server | None = None
    daemons: Daemons | None = None
    sql: SqlServerProc | None = None
    rng: random.Random = field(default_factory=random.Random)
    name: str = "nemesis"

    def _pids(self) -> str:
        assert self.daemons is not None
        return ", ".join(f"{slot}: pid {p.pid}{'' if p.poll() is None else ' (exited)'}"
                         for slot, p in sorted(self.daemons.procs.items()))  # fmt: skip

    def daemon_fault(self, fault: str) -> None:
        """``kill-daemon``, ``pause-daemon`` or ``clock-daemon`` (see the module's docstring)."""
        assert self.daemons is not None
        daemons, wait = self.daemons, threading.Event().wait
        op = self.history.invoke(self.name, "fault", key=fault)
        if fault == "clock-daemon":
            slot = self.rng.randrange(daemons.count)
            offset, hold = self.rng.choice(CLOCK_OFFSETS), self.rng.uniform(3.0, 10.0)
            daemons.kill(slot)
            daemons.start(slot, offset)
            wait(hold)
            after = daemons.leader()
            daemons.kill(slot)
            daemons.start(slot)
            self.history.complete(op, "ok", detail=f"daemon {slot} clock {offset:+.0f}s for {hold:.1f}s "
                                  f"(leader then: {after and after[0]}); {self._pids()}")  # fmt: skip
            return
        found = daemons.wait_leader(LEADER_WAIT_S)
        if found is None:
            self.history.complete(op, "fail", detail=f"no daemon leads; {self._pids()}")
            return
        slot, proc = found
        if fault == "kill-daemon":
            down = self.rng.uniform(0.5, 3.0)
            daemons.kill(slot)
            wait(down)
            daemons.start(slot)
            detail = f"sigkill leader {slot} pid {proc.pid}, started again after {down:.1f}s"
        else:
            frozen = self.rng.uniform(1.0, 6.0)
            proc.send_signal(signal.SIGSTOP)
            try:
                wait(frozen)
                during = daemons.leader()
            finally:
                proc.send_signal(signal.SIGCONT)
            detail = (
                f"sigstop leader {slot} pid {proc.pid} {frozen:.1f}s (leader then: {during and during[0]})"
            )
        self.history.complete(op, "ok", detail=f"{detail}; {self._pids()}")

    def kill_sql(self, down: float) -> None:
        """SIGKILL the SQL server's process group, ``down`` seconds, start it again (no wait)."""
        assert self.sql is not None
        op = self.history.invoke(self.name, "fault", key="kill-sql", detail="sigkill sql-server")
        self.sql.kill()
        threading.Event().wait(down)
        self.sql.start()
        self.sql.record_start(self.history)
        self.history.complete(op, "ok", detail=f"started again (start {self.sql.starts}) after {down:.1f}s")

    def kill(self, down: float) -> None:
        """SIGKILL the server, leave it dead ``down`` seconds, restart it (waits until it answers)."""
        assert self.server is not None
        op = self.history.invoke(self.name, "fault", key="kill", detail="sigkill serve")
        self.server.kill()
        threading.Event().wait(down)
        self.server.start()
        self.history.complete(op, "ok", detail=f"restarted (start {self.server.starts})")

    def pause(self, frozen: float) -> None:
        """SIGSTOP the server for ``frozen`` seconds, then SIGCONT."""
        assert self.server is not None
        proc = self.server.proc
        assert proc is not None and proc.poll() is None, "the server is not running"
        op = self.history.invoke(self.name, "fault", key="pause", detail="sigstop serve")
        proc.send_signal(signal.SIGSTOP)
        try:
            threading.Event().wait(frozen)
        finally:
            proc.send_signal(signal.SIGCONT)
        self.history.complete(op, "ok", detail=f"sigcont after {frozen:.1f}s")

    def cli(self, fault: str, frozen: float) -> None:
        """SIGKILL (``kill-cli``) or SIGSTOP for ``frozen`` seconds (``pause-cli``) a running CLI process."""
        assert self.procs is not None
        op = self.history.invoke(self.name, "fault", key=fault)
        deadline = threading.Event()
        picked = self.procs.pick(self.rng)
        waited = 0.0
        while picked is None and waited < CLI_WAIT_S:
            deadline.wait(0.05)
            waited += 0.05
            picked = self.procs.pick(self.rng)
        if picked is None:
            self.history.complete(op, "fail", detail="no CLI process running")
            return
        client, proc = picked
        try:
            if fault == "kill-cli":
                proc.send_signal(signal.SIGKILL)
                self.history.complete(op, "ok", detail=f"sigkill {client} pid {proc.pid}")
                return
            proc.send_signal(signal.SIGSTOP)
            try:
                deadline.wait(frozen)
            finally:
                proc.send_signal(signal.SIGCONT)
        except ProcessLookupError:  # it ended between the pick and the signal
            self.history.complete(op, "fail", detail=f"{client} pid {proc.pid} ended first")
            return
        self.history.complete(
            op, "ok", detail=f"sigstop {client} pid {proc.pid}, sigcont after {frozen:.1f}s"
        )

    def pg_restart(self, down: float) -> None:
        """Stop the metastore's PostgreSQL (fast or immediate), ``down`` seconds, start it again."""
        assert self.pg is not None
        mode = self.rng.choice(["fast", "immediate"])
        op = self.history.invoke(self.name, "fault", key="pg-restart", detail=f"pg stop {mode}")
        self.pg.stop(mode)  # type: ignore[arg-type]
        threading.Event().wait(down)
        self.pg.start()
        self.history.complete(op, "ok", detail=f"started after {down:.1f}s down")

    def pg_pause(self, frozen: float) -> None:
        """SIGSTOP the postmaster, then its children, for ``frozen`` seconds; SIGCONT in reverse."""
        assert self.pg is not None
        op = self.history.invoke(self.name, "fault", key="pg-pause", detail="pg sigstop")
        postmaster = int((self.pg.data / "postmaster.pid").read_text().split()[0])
        os.kill(postmaster, signal.SIGSTOP)  # first: it forks no new backend while the rest stop
        frozen_pids = [postmaster]
        try:
            for child in _children(postmaster):
                try:
                    os.kill(child, signal.SIGSTOP)
                    frozen_pids.append(child)
                except ProcessLookupError:
                    pass
            threading.Event().wait(frozen)
        finally:
            for pid in reversed(frozen_pids):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
        self.history.complete(op, "ok", detail=f"{len(frozen_pids)} processes, sigcont after {frozen:.1f}s")

    def s3_fault(self, fault: str, seconds: float) -> None:
        """The store fails every request (``s3-503``, ``s3-drop``) or hangs (``s3-freeze``) ``seconds``."""
        assert self.s3 is not None
        op = self.history.invoke(self.name, "fault", key=fault)
        if fault == "s3-freeze":
            assert self.s3.process is not None
            os.killpg(self.s3.process.pid, signal.SIGSTOP)
            try:
                threading.Event().wait(seconds)
            finally:
                os.killpg(self.s3.process.pid, signal.SIGCONT)
            self.history.complete(op, "ok", detail=f"sigcont after {seconds:.1f}s")
            return
        kind = "503" if fault == "s3-503" else "drop-before"
        try:
            for method in S3_METHODS:
                self.s3.proxy.arm(method, r".", kind, times=1_000_000)
            threading.Event().wait(seconds)
        finally:
            self.s3.proxy.clear()
        self.history.complete(op, "ok", detail=f"{kind} for {seconds:.1f}s")

    def inject(self, fault: str) -> None:
        if fault == "kill":
            self.kill(down=self.rng.uniform(0.2, 1.5))
        elif fault == "pause":
            self.pause(frozen=self.rng.uniform(1.0, 4.0))
        elif fault in CLI_FAULTS:
            self.cli(fault, frozen=self.rng.uniform(0.5, 4.0))
        elif fault == "pg-restart":
            self.pg_restart(down=self.rng.uniform(0.5, 3.0))
        elif fault == "pg-pause":
            self.pg_pause(frozen=self.rng.uniform(1.0, 4.0))
        elif fault in S3_FAULTS:
            self.s3_fault(fault, seconds=self.rng.uniform(1.0, 4.0))
        elif fault in DAEMON_FAULTS:
            self.daemon_fault(fault)
        elif fault == "kill-sql":
            self.kill_sql(down=self.rng.uniform(0.5, 2.0))
        else:
            raise ValueError(f"no such fault: {fault}")

    def run(self, schedule: list[str], stop: threading.Event, gap: tuple[float, float]) -> None:
        """Inject the faults of ``schedule`` in order, a random ``gap`` apart."""
        for fault in schedule:
            if stop.wait(self.rng.uniform(*gap)):
                return
            self.inject(fault)

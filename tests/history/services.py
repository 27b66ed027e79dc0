"""The processes a run may add to ``streampart serve``: roll daemons, and a SQL server.

- :class:`Daemons`: ``streampart scheduler run`` processes (a leader and standbys, fast timings from
  :func:`tests.scheduler.helpers.daemon_env`), each startable with its clock moved by an offset —
  through a tiny wrapper that runs the CLI inside ``metastore.clock.use(SystemClock(offset))``;
- :class:`SqlServerProc`: one ``streampart sql-server`` (Spark's Thrift server), restartable on the
  same port, in a process group of its own so a SIGKILL takes its JVM down with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from metastore.catalog import Catalog
from tests.helpers import ROOT
from tests.history.history import History
from tests.private_pg import free_port
from tests.scheduler.helpers import daemon_env, leader_pid

# ``python -c WRAPPER OFFSET scheduler run``: the CLI with the process's clock moved by OFFSET
# seconds (sys.argv is ["-c", OFFSET, "scheduler", "run"]: the offset is taken off before the CLI
# parses the rest)
CLOCK_WRAPPER = (
    "import sys\n"
    "from datetime import timedelta\n"
    "from metastore import clock\n"
    "offset = timedelta(seconds=float(sys.argv.pop(1)))\n"
    "with clock.use(clock.SystemClock(offset)):\n"
    "    from streampart.cli import main\n"
    "    main()\n"
)


@dataclass
class Daemons:
    """``count`` roll daemon processes over ``catalog``'s warehouse, their logs in ``log_dir``."""

    catalog: Catalog
    log_dir: Path
    count: int = 2
    settings: dict[str, Any] = field(default_factory=dict)  # scheduler settings over the fast ones
    procs: dict[int, subprocess.Popen[str]] = field(default_factory=dict)  # slot -> its process
    offsets: dict[int, float] = field(default_factory=dict)  # slot -> its clock's offset (s)
    starts: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self, slot: int, offset: float = 0.0) -> subprocess.Popen[str]:
        """Start the daemon of ``slot`` (its clock ``offset`` seconds off); it must not be running."""
        with self._lock:
            old = self.procs.get(slot)
            assert old is None or old.poll() is not None, f"daemon {slot} is running"
            self.starts += 1
            log = self.log_dir / f"daemon-{slot}-{self.starts}.log"
            head = ["-m", "streampart.cli"] if offset == 0 else ["-c", CLOCK_WRAPPER, repr(offset)]
            with log.open("w") as err:
                proc = subprocess.Popen(
                    [sys.executable, *head, "scheduler", "run"], cwd=ROOT,
                    env=daemon_env(self.catalog, **self.settings), stdout=subprocess.DEVNULL,
                    stderr=err, text=True,
                )  # fmt: skip
            self.procs[slot], self.offsets[slot] = proc, offset
            return proc

    def start_all(self) -> None:
        for slot in range(self.count):
            self.start(slot)

    def leader(self) -> tuple[int, subprocess.Popen[str]] | None:
        """The slot and process of the daemon whose lease is live now, if it is one of these."""
        pid = leader_pid(self.catalog)
        for slot, proc in list(self.procs.items()):
            if proc.pid == pid and proc.poll() is None:
                return slot, proc
        return None

    def wait_leader(self, timeout: float = 30.0) -> tuple[int, subprocess.Popen[str]] | None:
        deadline = time.monotonic() + timeout
        while (found := self.leader()) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        return found

    def kill(self, slot: int) -> None:
        proc = self.procs[slot]
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGKILL)
        proc.wait(30)

    def stop_all(self, timeout: float = 60.0) -> dict[int, int]:
        """SIGCONT and SIGTERM every daemon (a roll under way finishes within the shutdown grace);
        SIGKILL one still running after ``timeout``. Their exit statuses, by slot."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
        # a daemon paused while Python itself started (before any code of streampart's can take
        # SIGTERM) is let run on a moment first: stopped there, the signal kills it (-15)
        time.sleep(2)
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
        out = {}
        for slot, proc in self.procs.items():
            try:
                out[slot] = proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                out[slot] = proc.wait()
        return out

    def logs(self) -> list[Path]:
        return sorted(self.log_dir.glob("daemon-*.log"))


@dataclass
class SqlServerProc:
    """One ``streampart sql-server`` process over a warehouse, restartable on the same port."""

    warehouse: str
    metastore: str
    log_dir: Path
    freshness: str = "1s"
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def local_dir(self) -> Path:
        from metastore.delta.warehouse import Warehouse

        return Warehouse(self.warehouse).local_dir

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STREAMPART_")}
        env.update(
            PYTHONPATH=str(ROOT), STREAMPART_WAREHOUSE=self.warehouse, STREAMPART_METASTORE=self.metastore,
            STREAMPART_SPARK__SHUFFLE_PARTITIONS="2", STREAMPART_SPARK__DRIVER_MEMORY="1g",
            STREAMPART_SERVER__LOGIN_DELAY="0s",
        )  # fmt: skip
        return env

    def start(self) -> None:
        """Start it (without waiting until it listens: see :meth:`ready`)."""
        assert self.proc is None or self.proc.poll() is not None, "the SQL server is running"
        self.starts += 1
        with (self.log_dir / f"sql-server-{self.starts}.log").open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "streampart", "sql-server", "--host", self.host, "--port",
                 str(self.port), "--freshness", self.freshness],
                cwd=ROOT, env=self.env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def record_start(self, history: History) -> None:
        """A ``sql-starting`` log operation from now until it listens (ok), or exits or takes more
        than 300 s (fail), completed by a thread of its own."""
        op = history.invoke("sql-server", "log", key="sql-starting", detail=f"start {self.starts}")

        def watch() -> None:
            try:
                took = self.wait_ready()
            except AssertionError as exc:
                history.complete(op, "fail", detail=str(exc))
            else:
                history.complete(op, "ok", detail=f"listening after {took:.1f}s")

        threading.Thread(target=watch, daemon=True).start()

    def ready(self) -> bool:
        """It listens (its server file names it)."""
        from streampart.sql_endpoint import running_server

        info = running_server(self.local_dir)
        return self.proc is not None and info is not None and info.pid == self.proc.pid

    def wait_ready(self, timeout: float = 300.0) -> float:
        """Wait until it listens; the seconds waited (AssertionError if it exits or takes longer)."""
        began = time.monotonic()
        while not self.ready():
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise AssertionError(f"the SQL server exited with {self.proc.returncode}: see {self.log_dir}")
            if time.monotonic() - began > timeout:
                raise AssertionError(f"the SQL server did not listen within {timeout:.0f}s")
            time.sleep(0.2)
        return time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL its whole process group (the Python driver and its JVM): no cleanup at all."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.kill()
        with contextlib.suppress(ProcessLookupError):  # a JVM its driver left behind
            os.killpg(self.proc.pid, signal.SIGKILL)

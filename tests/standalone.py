"""A real Spark standalone cluster on this machine: one master and two workers, from pyspark's own classes.

The master and each worker run ``spark-class org.apache.spark.deploy.…`` of the pyspark
distribution in this virtualenv, each in its own process group (its executors and their Python
workers are its children, so one ``killpg`` stops all of it). They listen on free loopback ports,
share this machine's file system (the warehouse is a "shared file system" path), and their
executors run Python in this interpreter (``PYSPARK_PYTHON``), as a real cluster's nodes need.

Only one SparkSession can live in a process, and the test session's is ``local[2]``: jobs on
this cluster run in their own processes (``streampart --spark-master URL …``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyspark

SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
# Why 120 s: a master and two workers are three JVMs starting at once on a busy 2-core machine
# (about 10 s when idle); a worker registers only once the master answers.
START_TIMEOUT = 120.0
# Why 1 core and 1 GiB per worker: two workers fit this 2-core machine beside the tests' own
# processes, and 1 GiB holds one executor of Spark's default size.
WORKER_CORES = 1
WORKER_MEMORY = "1g"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cluster_env(base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the cluster's daemons, and of drivers that use it."""
    env = dict(os.environ if base is None else base)
    env.update(
        {
            "SPARK_HOME": str(SPARK_HOME),
            "SPARK_LOCAL_IP": "127.0.0.1",  # every daemon and driver on loopback: nothing leaves the machine
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_DAEMON_MEMORY": "256m",  # the master and worker daemons themselves
        }
    )
    return env


@dataclass
class StandaloneCluster:
    """``start()`` a master and ``workers`` workers; ``url`` is the master (``spark://127.0.0.1:PORT``)."""

    work: Path
    workers: int = 2
    host: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    webui_port: int = field(default_factory=free_port)
    _procs: list[subprocess.Popen[bytes]] = field(default_factory=list, repr=False)

    @property
    def url(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def webui(self) -> str:
        return f"http://{self.host}:{self.webui_port}"

    def _spawn(self, name: str, *args: str) -> None:
        log = (self.work / f"{name}.log").open("wb")
        self._procs.append(
            subprocess.Popen(
                [str(SPARK_CLASS), *args],
                cwd=self.work,
                env=cluster_env(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: executors and Python workers too
            )
        )
        log.close()

    def start(self) -> StandaloneCluster:
        self.work.mkdir(parents=True, exist_ok=True)
        self._spawn(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host", self.host, "--port", str(self.port), "--webui-port", str(self.webui_port),
        )  # fmt: skip
        try:
            self._wait(lambda state: state is not None, "the master to answer")
            for k in range(self.workers):
                work_dir = self.work / f"worker-{k}"
                work_dir.mkdir(exist_ok=True)
                self._spawn(
                    f"worker-{k}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host", self.host, "--webui-port", str(free_port()),
                    "--cores", str(WORKER_CORES), "--memory", WORKER_MEMORY,
                    "--work-dir", str(work_dir), self.url,
                )  # fmt: skip
            self._wait(lambda state: state is not None and self.alive_workers(state) == self.workers,
                       f"{self.workers} workers to register")  # fmt: skip
        except BaseException:
            self.stop()
            raise
        return self

    def state(self) -> dict[str, Any] | None:
        """The master's own view (its web UI's ``/json/``); None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.webui}/json/", timeout=2) as response:
                return dict(json.load(response))
        except (OSError, ValueError):
            return None

    @staticmethod
    def alive_workers(state: dict[str, Any]) -> int:
        return sum(1 for w in state.get("workers", []) if w.get("state") == "ALIVE")

    def applications(self) -> list[dict[str, Any]]:
        """Every application the master has seen, running or finished."""
        state = self.state() or {}
        return [*state.get("activeapps", []), *state.get("completedapps", [])]

    def _wait(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            dead = [p.args for p in self._procs if p.poll() is not None]
            if dead:
                raise RuntimeError(f"Spark standalone: {dead[0]!r} exited waiting for {what}: {self.logs()}")
            if ready(self.state()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"Spark standalone: timed out waiting for {what}: {self.logs()}")
            time.sleep(0.25)

    def logs(self, tail: int = 1500) -> str:
        return " | ".join(
            f"{p.name}: {p.read_text(errors='replace')[-tail:]}" for p in self.work.glob("*.log")
        )

    def stop(self) -> None:
        """Stop the workers, then the master, each with its whole process group; nothing stays behind."""
        for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 10.0)):
            for proc in reversed(self._procs):
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, sig)
            deadline = time.monotonic() + wait
            for proc in self._procs:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            if all(p.poll() is not None for p in self._procs):
                break
        for proc in self._procs:  # executors outlive a worker killed by SIGTERM for a moment
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._procs.clear()

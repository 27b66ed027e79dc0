"""The nemesis: faults on real processes, each recorded in the history as a ``fault`` operation.

- ``kill``: SIGKILL the ``streampart serve`` process (no cleanup, no graceful shutdown), wait,
  start it again on the same port;
- ``pause``: SIGSTOP it (it holds its connections, leases and any metastore transaction while
  frozen), wait, SIGCONT.
"""

from __future__ import annotations

import random
import signal
import threading
from dataclasses import dataclass, field

from tests.api.fixtures import Server
from tests.history.history import History


@dataclass
class Nemesis:
    server: Server
    history: History
    rng: random.Random = field(default_factory=random.Random)
    name: str = "nemesis"

    def kill(self, down: float) -> None:
        """SIGKILL the server, leave it dead ``down`` seconds, restart it (waits until it answers)."""
        op = self.history.invoke(self.name, "fault", detail="sigkill")
        self.server.kill()
        threading.Event().wait(down)
        self.server.start()
        self.history.complete(op, "ok", detail=f"restarted (start {self.server.starts})")

    def pause(self, frozen: float) -> None:
        """SIGSTOP the server for ``frozen`` seconds, then SIGCONT."""
        proc = self.server.proc
        assert proc is not None and proc.poll() is None, "the server is not running"
        op = self.history.invoke(self.name, "fault", detail="sigstop")
        proc.send_signal(signal.SIGSTOP)
        try:
            threading.Event().wait(frozen)
        finally:
            proc.send_signal(signal.SIGCONT)
        self.history.complete(op, "ok", detail=f"sigcont after {frozen:.1f}s")

    def run(self, schedule: list[str], stop: threading.Event, gap: tuple[float, float]) -> None:
        """Inject the faults of ``schedule`` (``kill`` / ``pause``) in order, a random ``gap`` apart."""
        for fault in schedule:
            if stop.wait(self.rng.uniform(*gap)):
                return
            if fault == "kill":
                self.kill(down=self.rng.uniform(0.2, 1.5))
            else:
                self.pause(frozen=self.rng.uniform(1.0, 4.0))

"""Named crash points for crash tests.

``STREAMPART_CRASHPOINT=<name>`` makes the process SIGKILL itself when it reaches that point,
so a test can kill a writer or roller at an exact step of the protocol (a real kill -9: no
cleanup, no ``finally``). Unset, a crash point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "STREAMPART_CRASHPOINT"

POINTS = (
    "chunk-after-write",  # chunk files written, commit not begun
    "chunk-before-delta-commit",  # COMMITTING recorded, Delta commit not made
    "chunk-after-delta-commit",  # Delta commit made, metastore not told
    "roll-after-begin",  # partition ROLLING, not sealed
    "roll-after-seal",  # sealed, not swept
    "roll-after-compact",  # compacted files written, sweep not committed
    "roll-after-sweep",  # sweep committed, no _SUCCESS, partition not STANDARD
    "roll-before-finish",  # _SUCCESS written, partition not STANDARD
)


def crashpoint(name: str) -> None:
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)

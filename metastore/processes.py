"""Whether a process of this host still runs: asked of a recorded pid (a mover, a SQL server's file,
a class-archive build) before what it left behind is taken over or removed."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host (another user's counts: it cannot be signalled,
    but it runs)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

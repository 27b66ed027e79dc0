"""The ``streampart`` command line: ``main`` is the console script, ``app`` the typer app.

One module per command group (:mod:`~streampart.cli.tables`, :mod:`~streampart.cli.write`, …)
below :mod:`~streampart.cli.root`; each reads the call's state from typer's context
(:mod:`~streampart.cli.context`) and hands its result to the call's output
(:mod:`~streampart.cli.output`).
"""

import signal as _signal
import sys as _sys


def _stopped_before_running(signum: int, _frame: object) -> None:
    raise SystemExit(0)


# A roll daemon stopped while the command line loads (its imports take a moment, seconds on a
# busy host) has begun nothing: it exits 0, as a daemon stopped once running does
# (``streampart/cli/daemon.py`` takes over from here as it starts).
if "scheduler" in _sys.argv[1:] and "run" in _sys.argv[_sys.argv.index("scheduler") + 1 :]:
    for _sig in (_signal.SIGTERM, _signal.SIGINT):
        _signal.signal(_sig, _stopped_before_running)

from streampart.cli.root import app, main  # noqa: E402 (after the handler: these imports take time)

__all__ = ["app", "main"]

"""The ``streampart`` command line: ``main`` is the console script, ``app`` the typer app.

One module per command group (:mod:`~streampart.cli.tables`, :mod:`~streampart.cli.write`, …)
below :mod:`~streampart.cli.root`; each reads the call's state from typer's context
(:mod:`~streampart.cli.context`) and hands its result to the call's output
(:mod:`~streampart.cli.output`).
"""

from streampart.cli.root import app, main

__all__ = ["app", "main"]

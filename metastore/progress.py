"""What long work reports while it runs, for a front end to draw (the CLI's bars:
``streampart/cli/progress.py``).

A roll compacting a big partition, housekeeping finishing many interrupted commits, the demo:
each says when a piece of work begins and how much of it is done, in its own unit. The base
class reports nowhere, so work run by the daemon or a test pays nothing for it. (A namespace
move reports more than this, per table and per step: :class:`metastore.moves.Progress`.)
"""

from __future__ import annotations

__all__ = ["Progress"]


class Progress:
    """Receives progress reports; this one ignores them (subclass it to show them)."""

    def start(self, description: str, total: int | None, unit: str = "") -> None:
        """A piece of work begins: ``total`` units of it to do (None: not known), e.g. ``bytes``."""

    def advance(self, amount: int = 1) -> None:
        """``amount`` more units of the piece of work begun last are done."""

    def step(self, text: str) -> None:
        """The work reached a step worth a line of its own (``text`` says which)."""
